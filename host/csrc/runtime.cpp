// deep_gemm_sm120._C: cubin loading, TMA descriptor encoding and kernel launch through the CUDA
// driver API. libcuda is dlopen'ed on first use, so importing the module needs no driver; nothing
// here links against torch (streams and pointers arrive as integers).
#include <cuda.h>
#include <dlfcn.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

namespace py = pybind11;

namespace {

struct Driver {
    void* lib = nullptr;
    CUresult (*cuGetErrorString)(CUresult, const char**) = nullptr;
    CUresult (*cuInit)(unsigned int) = nullptr;
    CUresult (*cuDeviceGet)(CUdevice*, int) = nullptr;
    CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice) = nullptr;
    CUresult (*cuCtxGetCurrent)(CUcontext*) = nullptr;
    CUresult (*cuCtxPushCurrent)(CUcontext) = nullptr;
    CUresult (*cuCtxPopCurrent)(CUcontext*) = nullptr;
    CUresult (*cuModuleLoadData)(CUmodule*, const void*) = nullptr;
    CUresult (*cuModuleUnload)(CUmodule) = nullptr;
    CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*) = nullptr;
    CUresult (*cuModuleGetFunctionCount)(unsigned int*, CUmodule) = nullptr;
    CUresult (*cuModuleEnumerateFunctions)(CUfunction*, unsigned int, CUmodule) = nullptr;
    CUresult (*cuFuncSetAttribute)(CUfunction, CUfunction_attribute, int) = nullptr;
    CUresult (*cuFuncGetAttribute)(int*, CUfunction_attribute, CUfunction) = nullptr;
    CUresult (*cuTensorMapEncodeTiled)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                       const cuuint64_t*, const cuuint32_t*, const cuuint32_t*,
                                       CUtensorMapInterleave, CUtensorMapSwizzle, CUtensorMapL2promotion,
                                       CUtensorMapFloatOOBfill) = nullptr;
    CUresult (*cuLaunchKernelEx)(const CUlaunchConfig*, CUfunction, void**, void**) = nullptr;
};

std::once_flag g_once;
Driver g_drv;
std::string g_load_error;

template <typename F>
void resolve(F& fn, const char* name) {
    fn = reinterpret_cast<F>(dlsym(g_drv.lib, name));
    if (!fn) g_load_error = std::string("libcuda lacks ") + name;
}

const Driver& driver() {
    std::call_once(g_once, [] {
        g_drv.lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
        if (!g_drv.lib) {
            const char* e = dlerror();
            g_load_error = std::string("cannot load libcuda.so.1 (no NVIDIA driver?): ") + (e ? e : "");
            return;
        }
        resolve(g_drv.cuGetErrorString, "cuGetErrorString");
        resolve(g_drv.cuInit, "cuInit");
        resolve(g_drv.cuDeviceGet, "cuDeviceGet");
        resolve(g_drv.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
        resolve(g_drv.cuCtxGetCurrent, "cuCtxGetCurrent");
        resolve(g_drv.cuCtxPushCurrent, "cuCtxPushCurrent_v2");
        resolve(g_drv.cuCtxPopCurrent, "cuCtxPopCurrent_v2");
        resolve(g_drv.cuModuleLoadData, "cuModuleLoadData");
        resolve(g_drv.cuModuleUnload, "cuModuleUnload");
        resolve(g_drv.cuModuleGetFunction, "cuModuleGetFunction");
        resolve(g_drv.cuModuleGetFunctionCount, "cuModuleGetFunctionCount");
        resolve(g_drv.cuModuleEnumerateFunctions, "cuModuleEnumerateFunctions");
        resolve(g_drv.cuFuncSetAttribute, "cuFuncSetAttribute");
        resolve(g_drv.cuFuncGetAttribute, "cuFuncGetAttribute");
        resolve(g_drv.cuTensorMapEncodeTiled, "cuTensorMapEncodeTiled");
        resolve(g_drv.cuLaunchKernelEx, "cuLaunchKernelEx");
    });
    if (!g_load_error.empty()) throw std::runtime_error(g_load_error);
    return g_drv;
}

void check(CUresult r, const char* what) {
    if (r == CUDA_SUCCESS) return;
    const char* msg = nullptr;
    if (g_drv.cuGetErrorString) g_drv.cuGetErrorString(r, &msg);
    throw std::runtime_error(std::string(what) + " failed: " + (msg ? msg : "unknown error") + " (CUresult " +
                             std::to_string(static_cast<int>(r)) + ")");
}

struct Kernel {
    CUcontext ctx = nullptr;
    CUmodule module = nullptr;
    CUfunction function = nullptr;
    int smem_bytes = 0;
};

// Makes `ctx` current for a scope, restoring the caller's context afterwards; a no-op when it already is
// (the common case: torch made the same primary context current).
class ContextGuard {
  public:
    explicit ContextGuard(CUcontext ctx) {
        const Driver& d = driver();
        CUcontext cur = nullptr;
        check(d.cuCtxGetCurrent(&cur), "cuCtxGetCurrent");
        if (cur != ctx) {
            check(d.cuCtxPushCurrent(ctx), "cuCtxPushCurrent");
            pushed_ = true;
        }
    }
    ~ContextGuard() {
        if (pushed_) {
            CUcontext popped;
            driver().cuCtxPopCurrent(&popped);
        }
    }
    ContextGuard(const ContextGuard&) = delete;
    ContextGuard& operator=(const ContextGuard&) = delete;

  private:
    bool pushed_ = false;
};

// The primary context of `device` (the one the CUDA runtime and torch use), retained once.
CUcontext primary_context(int device) {
    static std::mutex mu;
    static std::vector<CUcontext> ctxs;
    const Driver& d = driver();
    std::lock_guard<std::mutex> lock(mu);
    if (device < 0) throw std::invalid_argument("device ordinal must be >= 0");
    if (static_cast<size_t>(device) >= ctxs.size()) ctxs.resize(device + 1, nullptr);
    if (!ctxs[device]) {
        check(d.cuInit(0), "cuInit");
        CUdevice dev;
        check(d.cuDeviceGet(&dev, device), "cuDeviceGet");
        check(d.cuDevicePrimaryCtxRetain(&ctxs[device], dev), "cuDevicePrimaryCtxRetain");
    }
    return ctxs[device];
}

std::vector<Kernel> g_kernels;
std::mutex g_kernels_mu;

// Load a cubin image and find its kernel: by `name` when given, else the module's only function (the JIT
// puts exactly one instantiation in each translation unit, so no mangled names are needed). Then raise
// its dynamic shared-memory limit once.
int load_kernel(const py::bytes& image, const std::string& name, int smem_bytes, int device) {
    const Driver& d = driver();
    std::string data = image;
    Kernel k;
    k.ctx = primary_context(device);
    ContextGuard guard(k.ctx);
    check(d.cuModuleLoadData(&k.module, data.data()), "cuModuleLoadData");
    CUresult r;
    if (!name.empty()) {
        r = d.cuModuleGetFunction(&k.function, k.module, name.c_str());
    } else {
        unsigned int count = 0;
        r = d.cuModuleGetFunctionCount(&count, k.module);
        if (r == CUDA_SUCCESS && count != 1) {
            d.cuModuleUnload(k.module);
            throw std::runtime_error("expected exactly one kernel in the cubin, found " + std::to_string(count));
        }
        if (r == CUDA_SUCCESS) r = d.cuModuleEnumerateFunctions(&k.function, 1, k.module);
    }
    if (r != CUDA_SUCCESS) {
        d.cuModuleUnload(k.module);
        check(r, "cuModuleGetFunction");
    }
    if (smem_bytes > 48 * 1024)
        check(d.cuFuncSetAttribute(k.function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem_bytes),
              "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
    k.smem_bytes = smem_bytes;
    std::lock_guard<std::mutex> lock(g_kernels_mu);
    g_kernels.push_back(k);
    return static_cast<int>(g_kernels.size() - 1);
}

int kernel_attribute(int handle, const std::string& attr) {
    const Driver& d = driver();
    CUfunction_attribute a;
    if (attr == "num_regs") a = CU_FUNC_ATTRIBUTE_NUM_REGS;
    else if (attr == "local_bytes") a = CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES;
    else if (attr == "static_smem_bytes") a = CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES;
    else if (attr == "max_threads") a = CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK;
    else throw std::invalid_argument("unknown kernel attribute " + attr);
    int v = 0;
    ContextGuard guard(g_kernels.at(handle).ctx);
    check(d.cuFuncGetAttribute(&v, a, g_kernels.at(handle).function), "cuFuncGetAttribute");
    return v;
}

// A 1-D grid launch configuration for `k` on `stream` (attributes added by the caller).
CUlaunchConfig launch_config(const Kernel& k, uint32_t grid, uint32_t block, uint64_t stream) {
    CUlaunchConfig cfg;
    std::memset(&cfg, 0, sizeof(cfg));
    cfg.gridDimX = grid, cfg.gridDimY = 1, cfg.gridDimZ = 1;
    cfg.blockDimX = block, cfg.blockDimY = 1, cfg.blockDimZ = 1;
    cfg.sharedMemBytes = static_cast<unsigned>(k.smem_bytes);
    cfg.hStream = reinterpret_cast<CUstream>(stream);
    return cfg;
}

// One 2D TMA operand: (address, element bytes, inner extent, outer extent, outer stride in bytes,
// box inner, box outer, swizzle bytes 0/32/64/128).
using Tma2D = std::tuple<uint64_t, int, uint64_t, uint64_t, uint64_t, uint32_t, uint32_t, int>;

CUtensorMap encode_2d(const Tma2D& t) {
    const Driver& d = driver();
    auto [addr, elem, inner, outer, stride, box_inner, box_outer, swizzle] = t;
    CUtensorMapDataType dt;
    switch (elem) {
        case 1: dt = CU_TENSOR_MAP_DATA_TYPE_UINT8; break;
        case 2: dt = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16; break;
        case 4: dt = CU_TENSOR_MAP_DATA_TYPE_FLOAT32; break;
        default: throw std::invalid_argument("TMA element size must be 1, 2 or 4 bytes");
    }
    CUtensorMapSwizzle sw;
    switch (swizzle) {
        case 0: sw = CU_TENSOR_MAP_SWIZZLE_NONE; break;
        case 32: sw = CU_TENSOR_MAP_SWIZZLE_32B; break;
        case 64: sw = CU_TENSOR_MAP_SWIZZLE_64B; break;
        case 128: sw = CU_TENSOR_MAP_SWIZZLE_128B; break;
        default: throw std::invalid_argument("TMA swizzle must be 0, 32, 64 or 128 bytes");
    }
    CUtensorMap map;
    const cuuint64_t dims[2] = {inner, outer};
    const cuuint64_t strides[1] = {stride};
    const cuuint32_t box[2] = {box_inner, box_outer};
    const cuuint32_t elem_strides[2] = {1, 1};
    check(d.cuTensorMapEncodeTiled(&map, dt, 2, reinterpret_cast<void*>(addr), dims, strides, box, elem_strides,
                                   CU_TENSOR_MAP_INTERLEAVE_NONE, sw, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                   CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
          "cuTensorMapEncodeTiled");
    return map;
}

// Launch with parameters in the order every device-layer GEMM kernel uses:
// tensor maps, then pointers, then 32-bit unsigned scalars.
void launch(int handle, uint32_t grid, uint32_t block, uint64_t stream, const std::vector<Tma2D>& tmaps,
            const std::vector<uint64_t>& ptrs, const std::vector<uint32_t>& u32s, bool pdl) {
    const Driver& d = driver();
    const Kernel& k = g_kernels.at(handle);
    ContextGuard guard(k.ctx);
    std::vector<CUtensorMap> maps;
    maps.reserve(tmaps.size());
    for (const auto& t : tmaps) maps.push_back(encode_2d(t));
    std::vector<void*> params;
    params.reserve(maps.size() + ptrs.size() + u32s.size());
    for (auto& m : maps) params.push_back(&m);
    std::vector<uint64_t> p(ptrs);
    std::vector<uint32_t> u(u32s);
    for (auto& x : p) params.push_back(&x);
    for (auto& x : u) params.push_back(&x);

    CUlaunchAttribute attr[1];
    CUlaunchConfig cfg = launch_config(k, grid, block, stream);
    if (pdl) {
        attr[0].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attr[0].value.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
    }
    check(d.cuLaunchKernelEx(&cfg, k.function, params.data(), nullptr), "cuLaunchKernelEx");
}

// Encoded descriptors are pure functions of their arguments; weights and static activation buffers hit
// this small per-thread cache, which skips cuTensorMapEncodeTiled on the hot path.
struct TmaCacheEntry {
    Tma2D key;
    CUtensorMap map;
    bool valid = false;
};

const CUtensorMap& cached_encode_2d(const Tma2D& t) {
    static thread_local std::array<TmaCacheEntry, 16> cache;
    static thread_local size_t next = 0;
    for (auto& e : cache)
        if (e.valid && e.key == t) return e.map;
    TmaCacheEntry& slot = cache[next];
    next = (next + 1) % cache.size();
    slot.map = encode_2d(t);  // throws before the slot is marked valid
    slot.key = t;
    slot.valid = true;
    return slot.map;
}

// The common GEMM signature (two bf16 K-major TMA operands swizzled to their box row of box_k elements;
// D, C and grouped-layout pointers; then m, n, k, ldd, ldc, num_groups, psum flag) with flat arguments:
// no Python lists on the hot path.
void launch_gemm_tma2(int handle, uint32_t grid, uint32_t block, uint64_t stream, uint64_t a_ptr, uint64_t a_rows,
                      uint64_t a_stride, uint32_t a_box_rows, uint64_t b_ptr, uint64_t b_rows, uint64_t b_stride,
                      uint32_t b_box_rows, uint32_t box_k, uint64_t d_ptr, uint64_t c_ptr, uint64_t layout_ptr,
                      uint64_t aux_ptr,
                      uint32_t m, uint32_t n, uint32_t k, uint32_t ldd, uint32_t ldc, uint32_t num_groups,
                      uint32_t psum, bool a_mn_major, bool b_mn_major, uint32_t num_splits,
                      uint32_t split_stride) {
    const Driver& d = driver();
    const Kernel& kern = g_kernels.at(handle);
    ContextGuard guard(kern.ctx);
    // K-major: [rows][k] with box [box_rows][box_k], swizzle = box_k * 2 bytes. MN-major: [k][rows] with
    // 64-element (128-byte, 128B-swizzled) boxes of box_k rows; the kernel issues box_rows / 64 of them.
    auto operand = [&](uint64_t ptr, uint64_t rows, uint64_t stride, uint32_t box_rows, bool mn) {
        return mn ? Tma2D{ptr, 2, rows, k, stride, 64, box_k, 128}
                  : Tma2D{ptr, 2, k, rows, stride, box_k, box_rows, static_cast<int>(box_k) * 2};
    };
    CUtensorMap map_a = cached_encode_2d(operand(a_ptr, a_rows, a_stride, a_box_rows, a_mn_major));
    CUtensorMap map_b = cached_encode_2d(operand(b_ptr, b_rows, b_stride, b_box_rows, b_mn_major));
    void* params[] = {&map_a, &map_b, &d_ptr, &c_ptr, &layout_ptr, &aux_ptr, &m, &n, &k,
                      &ldd, &ldc, &num_groups, &psum, &num_splits, &split_stride};
    CUlaunchConfig cfg = launch_config(kern, grid, block, stream);
    check(d.cuLaunchKernelEx(&cfg, kern.function, params, nullptr), "cuLaunchKernelEx");
}

// Block-scaled GEMM (impls/sm120_fp8_fp4_gemm_1d1d.cuh): byte operands (e4m3 or packed e2m1) as [rows, K bytes]
// with boxes of one swizzle span along K (128 bytes, or 64 for the packed side of mixed operands); scale words
// are read by the kernel through plain pointers.
void launch_block_scaled_gemm(int handle, uint32_t grid, uint32_t block, uint64_t stream, uint64_t a_ptr,
                              uint64_t a_rows, uint64_t a_stride, uint32_t a_box_rows, uint64_t a_k_bytes,
                              uint32_t a_box_k, uint64_t b_ptr, uint64_t b_rows, uint64_t b_stride,
                              uint32_t b_box_rows, uint64_t b_k_bytes, uint32_t b_box_k, uint64_t sfa_ptr,
                              uint64_t sfb_ptr, uint64_t d_ptr, uint64_t c_ptr, uint64_t layout_ptr, uint32_t m,
                              uint32_t n, uint32_t k, uint32_t ldd, uint32_t ldc, uint32_t num_groups, uint32_t psum,
                              uint32_t num_splits, uint32_t split_stride, uint32_t sfa_pack_stride,
                              uint32_t sfa_group_stride, uint32_t sfb_pack_stride, uint32_t sfb_group_stride,
                              float alpha) {
    const Driver& d = driver();
    const Kernel& kern = g_kernels.at(handle);
    ContextGuard guard(kern.ctx);
    CUtensorMap map_a = cached_encode_2d(
        Tma2D{a_ptr, 1, a_k_bytes, a_rows, a_stride, a_box_k, a_box_rows, static_cast<int>(a_box_k)});
    CUtensorMap map_b = cached_encode_2d(
        Tma2D{b_ptr, 1, b_k_bytes, b_rows, b_stride, b_box_k, b_box_rows, static_cast<int>(b_box_k)});
    void* params[] = {&map_a, &map_b, &sfa_ptr, &sfb_ptr, &d_ptr, &c_ptr, &layout_ptr, &m, &n, &k, &ldd, &ldc,
                      &num_groups, &psum, &num_splits, &split_stride, &sfa_pack_stride, &sfa_group_stride,
                      &sfb_pack_stride, &sfb_group_stride, &alpha};
    CUlaunchConfig cfg = launch_config(kern, grid, block, stream);
    check(d.cuLaunchKernelEx(&cfg, kern.function, params, nullptr), "cuLaunchKernelEx");
}

bool driver_available() {
    try {
        driver();
        return true;
    } catch (const std::exception&) {
        return false;
    }
}

}  // namespace

PYBIND11_MODULE(_C, m) {
    m.doc() = "deep_gemm_sm120 runtime: cubin loading, TMA descriptors and launches (libcuda loaded lazily)";
    m.def("driver_available", &driver_available, "Whether libcuda.so.1 can be loaded (loads it on first call)");
    m.def("load_kernel", &load_kernel, py::arg("image"), py::arg("name"), py::arg("smem_bytes"), py::arg("device"));
    m.def("kernel_attribute", &kernel_attribute, py::arg("handle"), py::arg("attr"));
    m.def("launch_gemm_tma2", &launch_gemm_tma2);
    m.def("launch_block_scaled_gemm", &launch_block_scaled_gemm);
    m.def("launch", &launch, py::arg("handle"), py::arg("grid"), py::arg("block"), py::arg("stream"),
          py::arg("tmaps"), py::arg("ptrs"), py::arg("u32s"), py::arg("pdl") = false);
}
