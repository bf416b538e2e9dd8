#pragma once
// Toolchain guard and compile-target predicates shared by every device-layer header.

#if defined(__CUDACC__) && defined(__CUDACC_VER_MAJOR__) && (__CUDACC_VER_MAJOR__ < 13)
#error "deep_gemm_sm120 needs CUDA >= 13.0: older ptxas was reported to drop block_scale on sm_120a"
#endif

#include <cstdint>

#define SM120_DEVICE __device__ __forceinline__
#define SM120_HOST_DEVICE __host__ __device__ __forceinline__

// True while compiling device code for SM120-class targets (sm_120a / sm_120f / sm_121a).
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 1200)
#define SM120_NATIVE 1
#else
#define SM120_NATIVE 0
#endif

// `setmaxnreg` exists only on arch/family-specific targets (sm_90a, sm_100a, sm_120a/f, ...).
#if defined(__CUDA_ARCH_FEAT_SM90_ALL) || defined(__CUDA_ARCH_SPECIFIC__) || defined(__CUDA_ARCH_FAMILY_SPECIFIC__)
#define SM120_HAS_SETMAXNREG 1
#else
#define SM120_HAS_SETMAXNREG 0
#endif

namespace sm120 {

// The per-block shared-memory budget on SM120 (99 KiB opt-in). Kernels static_assert against it.
constexpr uint32_t kMaxSmemPerBlock = 101376;

}  // namespace sm120
