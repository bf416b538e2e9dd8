#pragma once
// Element types and register packing helpers.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include "sm120_arch.cuh"

namespace sm120 {

using bf16 = __nv_bfloat16;
using bf16x2 = __nv_bfloat162;
using fp16 = __half;

// Two fp32 values rounded to bf16 (round-to-nearest-even) and packed low-first into one register.
SM120_DEVICE uint32_t pack_bf16x2(float lo, float hi) {
    bf16x2 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
}

// The same for fp16 operands.
SM120_DEVICE uint32_t pack_half2(float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
}

}  // namespace sm120
