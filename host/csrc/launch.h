// What runtime.cpp shares with the other translation units of deep_gemm_sm120._C.
#pragma once

#include <Python.h>

#include <cstdint>
#include <string_view>

namespace dg_sm120 {

// One kernel launch (runtime.cpp): the loaded kernel `handle`, grid, block, dynamic shared memory, raw stream,
// PDL, the packed parameter buffer and the tensor-map requests. Throws std::invalid_argument for a request the
// kernel refuses (Python: ValueError) and std::runtime_error for a driver failure (RuntimeError).
void launch(int handle, uint32_t gx, uint32_t gy, uint32_t gz, uint32_t block, uint32_t smem, uint64_t stream,
            bool pdl, std::string_view args, std::string_view reqs);

// Adds the FastCalls type (fast_call.cpp) to the module; returns -1 with a Python error set on failure.
int add_fast_calls(PyObject* module);

}  // namespace dg_sm120
