// deep_gemm_sm120._C: cubin loading, TMA descriptor encoding and kernel launch through the CUDA
// driver API. libcuda is dlopen'ed on first use, so importing the module needs no driver; nothing
// here links against torch (streams and pointers arrive as integers).
#include <cuda.h>
#include <dlfcn.h>

#include "launch.h"
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <deque>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
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
    CUresult (*cuFuncGetParamInfo)(CUfunction, size_t, size_t*, size_t*) = nullptr;  // optional (driver >= 12.4)
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
        g_drv.cuFuncGetParamInfo =
            reinterpret_cast<decltype(g_drv.cuFuncGetParamInfo)>(dlsym(g_drv.lib, "cuFuncGetParamInfo"));
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

constexpr size_t kMaxParams = 64;
constexpr size_t kMaxParamBytes = 4096;

struct Kernel {
    CUcontext ctx = nullptr;
    CUmodule module = nullptr;
    CUfunction function = nullptr;
    int max_smem = 0;
    std::vector<uint32_t> param_offsets;  // where each parameter sits in the packed buffer Python sends
    size_t param_bytes = 0;
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

// A deque: push_back never moves loaded kernels, so a reference from kernel() stays valid while another
// thread loads more.
std::deque<Kernel> g_kernels;
std::mutex g_kernels_mu;

const Kernel& kernel(int handle) {
    std::lock_guard<std::mutex> lock(g_kernels_mu);
    if (handle < 0 || static_cast<size_t>(handle) >= g_kernels.size())
        throw std::invalid_argument("unknown kernel handle " + std::to_string(handle));
    return g_kernels[static_cast<size_t>(handle)];
}

// The loaded kernel's parameters must be the ones Python packs: the declared count, with the declared sizes in
// order (offsets are the driver's). Checked through cuFuncGetParamInfo where the driver has it. A kernel with
// *more* parameters cannot exist: the JIT instantiates it with the family's parameter types spelled out, so the
// compile fails first (probing index N would also be an API error that compute-sanitizer reports).
void check_param_sizes(const Driver& d, CUfunction f, const std::vector<uint32_t>& sizes) {
    if (!d.cuFuncGetParamInfo) return;
    for (size_t i = 0; i < sizes.size(); ++i) {
        size_t off = 0, size = 0;
        if (d.cuFuncGetParamInfo(f, i, &off, &size) != CUDA_SUCCESS)
            throw std::runtime_error("the kernel takes fewer than the " + std::to_string(sizes.size()) +
                                     " parameters its family declares (no parameter " + std::to_string(i) + ")");
        if (size != sizes[i])
            throw std::runtime_error("kernel parameter " + std::to_string(i) + " is " + std::to_string(size) +
                                     " bytes, its family declares " + std::to_string(sizes[i]));
    }
}

// Load a cubin image and find its kernel: the module's only function (the JIT puts exactly one
// instantiation in each translation unit, so no mangled names are needed). Then raise its dynamic
// shared-memory limit once and record the packed-parameter layout (offsets/sizes from the family's list).
int load_kernel(const py::bytes& image, int smem_bytes, int device, const std::vector<uint32_t>& param_offsets,
                const std::vector<uint32_t>& param_sizes, uint32_t param_bytes) {
    const Driver& d = driver();
    if (param_offsets.size() != param_sizes.size() || param_offsets.size() > kMaxParams || param_bytes > kMaxParamBytes)
        throw std::invalid_argument("bad parameter layout");
    for (size_t i = 0; i < param_offsets.size(); ++i)
        if (param_offsets[i] + param_sizes[i] > param_bytes) throw std::invalid_argument("parameter outside the buffer");
    std::string data = image;
    Kernel k;
    k.ctx = primary_context(device);
    ContextGuard guard(k.ctx);
    check(d.cuModuleLoadData(&k.module, data.data()), "cuModuleLoadData");
    unsigned int count = 0;
    CUresult r = d.cuModuleGetFunctionCount(&count, k.module);
    if (r == CUDA_SUCCESS && count != 1) {
        d.cuModuleUnload(k.module);
        throw std::runtime_error("expected exactly one kernel in the cubin, found " + std::to_string(count));
    }
    if (r == CUDA_SUCCESS) r = d.cuModuleEnumerateFunctions(&k.function, 1, k.module);
    if (r != CUDA_SUCCESS) {
        d.cuModuleUnload(k.module);
        check(r, "cuModuleEnumerateFunctions");
    }
    try {
        check_param_sizes(d, k.function, param_sizes);
        if (smem_bytes > 48 * 1024)
            check(d.cuFuncSetAttribute(k.function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem_bytes),
                  "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
    } catch (...) {
        d.cuModuleUnload(k.module);
        throw;
    }
    k.max_smem = smem_bytes;
    k.param_offsets = param_offsets;
    k.param_bytes = param_bytes;
    std::lock_guard<std::mutex> lock(g_kernels_mu);
    g_kernels.push_back(std::move(k));
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
    const Kernel& k = kernel(handle);
    ContextGuard guard(k.ctx);
    check(d.cuFuncGetAttribute(&v, a, k.function), "cuFuncGetAttribute");
    return v;
}

// Launches take one parameter buffer packed by Python from the family's typed parameter list (natural
// alignment, declaration order; core/params.py) plus descriptor requests for its tensor-map slots. The
// driver is handed one pointer per parameter into that buffer, so the device-side layout (which the
// compiler may place at a target-dependent base: sm_90a inserts 112 bytes before a 128-byte-aligned
// CUtensorMap) is the driver's business; ours only fixes count, order and sizes, checked at load.

// Mirrors core/tma.py RECORD: "<IIIIQ5Q4Q5II".
#pragma pack(push, 1)
struct TmaRequest {
    uint32_t param_offset, dtype, rank, swizzle;
    uint64_t address;
    uint64_t dims[5];
    uint64_t strides[4];
    uint32_t box[5];
    uint32_t reserved;
};
#pragma pack(pop)
static_assert(sizeof(TmaRequest) == 120, "TmaRequest must match core/tma.py RECORD");

CUtensorMap encode(const TmaRequest& t) {
    const Driver& d = driver();
    if (t.rank < 1 || t.rank > 5) throw std::invalid_argument("tensor map rank must be 1..5");
    if (t.dtype > CU_TENSOR_MAP_DATA_TYPE_BFLOAT16) throw std::invalid_argument("unsupported tensor map data type");
    CUtensorMapSwizzle sw;
    switch (t.swizzle) {
        case 0: sw = CU_TENSOR_MAP_SWIZZLE_NONE; break;
        case 32: sw = CU_TENSOR_MAP_SWIZZLE_32B; break;
        case 64: sw = CU_TENSOR_MAP_SWIZZLE_64B; break;
        case 128: sw = CU_TENSOR_MAP_SWIZZLE_128B; break;
        default: throw std::invalid_argument("TMA swizzle must be 0, 32, 64 or 128 bytes");
    }
    cuuint64_t dims[5], strides[4];
    cuuint32_t box[5], elem_strides[5];
    for (uint32_t i = 0; i < t.rank; ++i) {
        dims[i] = t.dims[i], box[i] = t.box[i], elem_strides[i] = 1;
        if (i + 1 < t.rank) strides[i] = t.strides[i];
    }
    CUtensorMap map;
    check(d.cuTensorMapEncodeTiled(&map, static_cast<CUtensorMapDataType>(t.dtype), t.rank,
                                   reinterpret_cast<void*>(t.address), dims, strides, box, elem_strides,
                                   CU_TENSOR_MAP_INTERLEAVE_NONE, sw, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                   CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
          "cuTensorMapEncodeTiled");
    return map;
}

// Encoded descriptors are pure functions of their request (less the slot offset); weights and static
// activation buffers hit this small per-thread cache, which skips cuTensorMapEncodeTiled on the hot path.
constexpr size_t kTmaKeyBytes = sizeof(TmaRequest) - sizeof(uint32_t);
struct TmaCacheEntry {
    unsigned char key[kTmaKeyBytes];
    CUtensorMap map;
    bool valid = false;
};

const CUtensorMap& cached_encode(const TmaRequest& t) {
    static thread_local std::array<TmaCacheEntry, 32> cache;
    static thread_local size_t next = 0;
    const unsigned char* key = reinterpret_cast<const unsigned char*>(&t) + sizeof(uint32_t);
    for (auto& e : cache)
        if (e.valid && std::memcmp(e.key, key, kTmaKeyBytes) == 0) return e.map;
    TmaCacheEntry& slot = cache[next];
    next = (next + 1) % cache.size();
    slot.valid = false;
    slot.map = encode(t);  // throws before the slot is marked valid
    std::memcpy(slot.key, key, kTmaKeyBytes);
    slot.valid = true;
    return slot.map;
}

// The one launch entry for every family: grid (x, y, z), block, dynamic smem, stream, PDL, the packed
// parameters and the tensor-map requests (any number, written into their slots of the buffer).
void launch_impl(int handle, uint32_t gx, uint32_t gy, uint32_t gz, uint32_t block, uint32_t smem, uint64_t stream,
            bool pdl, std::string_view args, std::string_view reqs) {
    const Driver& d = driver();
    const Kernel& k = kernel(handle);
    if (args.size() != k.param_bytes)
        throw std::invalid_argument("kernel arguments are " + std::to_string(args.size()) + " bytes, the kernel's "
                                    "parameter list packs " + std::to_string(k.param_bytes));
    if (reqs.size() % sizeof(TmaRequest)) throw std::invalid_argument("tensor-map requests must be 120-byte records");
    if (smem > static_cast<uint32_t>(k.max_smem))
        throw std::invalid_argument("dynamic shared memory above the kernel's loaded limit");
    alignas(128) static thread_local unsigned char buf[kMaxParamBytes];
    std::memcpy(buf, args.data(), args.size());
    for (size_t i = 0; i < reqs.size(); i += sizeof(TmaRequest)) {
        TmaRequest r;
        std::memcpy(&r, reqs.data() + i, sizeof(r));
        if (r.param_offset % alignof(CUtensorMap) || r.param_offset + sizeof(CUtensorMap) > args.size())
            throw std::invalid_argument("tensor-map slot outside the parameter buffer");
        std::memcpy(buf + r.param_offset, &cached_encode(r), sizeof(CUtensorMap));
    }
    void* ptrs[kMaxParams];
    for (size_t i = 0; i < k.param_offsets.size(); ++i) ptrs[i] = buf + k.param_offsets[i];

    ContextGuard guard(k.ctx);
    CUlaunchConfig cfg;
    std::memset(&cfg, 0, sizeof(cfg));
    cfg.gridDimX = gx, cfg.gridDimY = gy, cfg.gridDimZ = gz;
    cfg.blockDimX = block, cfg.blockDimY = 1, cfg.blockDimZ = 1;
    cfg.sharedMemBytes = smem;
    cfg.hStream = reinterpret_cast<CUstream>(stream);
    CUlaunchAttribute attr[1];
    if (pdl) {  // the kernel may start while the previous one in the stream finishes; it waits in griddepcontrol
        attr[0].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attr[0].value.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
    }
    check(d.cuLaunchKernelEx(&cfg, k.function, ptrs, nullptr), "cuLaunchKernelEx");
}

// The launch entry as Python sees it: a vectorcall (METH_FASTCALL) function, positional only. It runs once per
// kernel launch of every cached call; each argument is read with one C-API call instead of pybind11's generic
// conversion (measured on the H200: 3.2 -> 3.1 us per launch, the rest is cuLaunchKernelEx). Stricter than the
// pybind11 binding was: TypeError for a wrong argument type or count (keywords, an int for pdl), ValueError for
// an int out of range or a value the launch refuses, RuntimeError for a driver failure.
constexpr const char* kLaunchArgs = "(handle, gx, gy, gz, block, smem, stream, pdl, params, tmaps)";

bool read_u64(PyObject* o, const char* what, uint64_t limit, uint64_t& out) {
    if (!PyLong_Check(o) || PyBool_Check(o)) {
        PyErr_Format(PyExc_TypeError, "launch%s: %s must be an int, got %s", kLaunchArgs, what, Py_TYPE(o)->tp_name);
        return false;
    }
    const unsigned long long v = PyLong_AsUnsignedLongLong(o);
    if (v == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {  // negative or past 64 bits
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "launch%s: %s must be in [0, %llu]", kLaunchArgs, what,
                     static_cast<unsigned long long>(limit));
        return false;
    }
    if (v > limit) {
        PyErr_Format(PyExc_ValueError, "launch%s: %s must be in [0, %llu], got %llu", kLaunchArgs, what,
                     static_cast<unsigned long long>(limit), v);
        return false;
    }
    out = v;
    return true;
}

bool read_bytes(PyObject* o, const char* what, std::string_view& out) {
    if (!PyBytes_Check(o)) {
        PyErr_Format(PyExc_TypeError, "launch%s: %s must be bytes, got %s", kLaunchArgs, what, Py_TYPE(o)->tp_name);
        return false;
    }
    out = {PyBytes_AS_STRING(o), static_cast<size_t>(PyBytes_GET_SIZE(o))};
    return true;
}

PyObject* launch_fastcall(PyObject*, PyObject* const* argv, Py_ssize_t nargs) {
    if (nargs != 10) {
        PyErr_Format(PyExc_TypeError, "launch%s takes 10 positional arguments, got %zd", kLaunchArgs, nargs);
        return nullptr;
    }
    static const char* names[6] = {"gx", "gy", "gz", "block", "smem", "stream"};
    uint64_t handle = 0, dims[6];
    if (!read_u64(argv[0], "handle", INT32_MAX, handle)) return nullptr;
    for (int i = 0; i < 6; ++i)
        if (!read_u64(argv[1 + i], names[i], i < 5 ? UINT32_MAX : UINT64_MAX, dims[i])) return nullptr;
    if (!PyBool_Check(argv[7])) {
        PyErr_Format(PyExc_TypeError, "launch%s: pdl must be a bool, got %s", kLaunchArgs, Py_TYPE(argv[7])->tp_name);
        return nullptr;
    }
    std::string_view params, tmaps;
    if (!read_bytes(argv[8], "params", params) || !read_bytes(argv[9], "tmaps", tmaps)) return nullptr;
    try {  // the bytes objects stay alive: the caller holds them for the call's duration
        launch_impl(static_cast<int>(handle), static_cast<uint32_t>(dims[0]), static_cast<uint32_t>(dims[1]),
               static_cast<uint32_t>(dims[2]), static_cast<uint32_t>(dims[3]), static_cast<uint32_t>(dims[4]),
               dims[5], argv[7] == Py_True, params, tmaps);
    } catch (const std::invalid_argument& e) {
        PyErr_SetString(PyExc_ValueError, e.what());
        return nullptr;
    } catch (const std::exception& e) {
        PyErr_SetString(PyExc_RuntimeError, e.what());
        return nullptr;
    }
    Py_RETURN_NONE;
}

PyMethodDef g_fast_methods[] = {
    {"launch", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&launch_fastcall)), METH_FASTCALL,
     "launch(handle, gx, gy, gz, block, smem, stream, pdl, params, tmaps): one kernel launch (positional only)"},
    {nullptr, nullptr, 0, nullptr}};

bool driver_available() {
    try {
        driver();
        return true;
    } catch (const std::exception&) {
        return false;
    }
}

}  // namespace

void dg_sm120::launch(int handle, uint32_t gx, uint32_t gy, uint32_t gz, uint32_t block, uint32_t smem,
                      uint64_t stream, bool pdl, std::string_view args, std::string_view reqs) {
    launch_impl(handle, gx, gy, gz, block, smem, stream, pdl, args, reqs);
}

PYBIND11_MODULE(_C, m) {
    m.doc() = "deep_gemm_sm120 runtime: cubin loading, TMA descriptors and launches (libcuda loaded lazily)";
    m.def("driver_available", &driver_available, "Whether libcuda.so.1 can be loaded (loads it on first call)");
    m.def("load_kernel", &load_kernel, py::arg("image"), py::arg("smem_bytes"), py::arg("device"),
          py::arg("param_offsets"), py::arg("param_sizes"), py::arg("param_bytes"));
    m.def("kernel_attribute", &kernel_attribute, py::arg("handle"), py::arg("attr"));
    if (PyModule_AddFunctions(m.ptr(), g_fast_methods) != 0) throw py::error_already_set();
    if (dg_sm120::add_fast_calls(m.ptr()) != 0) throw py::error_already_set();
}
