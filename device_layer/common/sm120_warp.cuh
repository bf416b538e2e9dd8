#pragma once
// Warp / lane identity and register reallocation (setmaxnreg).

#include "sm120_arch.cuh"

namespace sm120 {

SM120_DEVICE uint32_t lane_idx() {
    uint32_t lane;
    asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
    return lane;
}

// Warp index made warp-uniform so the compiler can branch on it without divergence.
SM120_DEVICE uint32_t warp_idx() { return __shfl_sync(0xffffffffu, threadIdx.x / 32, 0); }

// Register reallocation between warpgroups. Requires `__launch_bounds__(threads, 1)` on the kernel
// so the entry register count is known; a no-op on targets without setmaxnreg.
template <uint32_t kRegs>
SM120_DEVICE void warpgroup_reg_alloc() {
#if SM120_HAS_SETMAXNREG
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" : : "n"(kRegs));
#endif
}

template <uint32_t kRegs>
SM120_DEVICE void warpgroup_reg_dealloc() {
#if SM120_HAS_SETMAXNREG
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" : : "n"(kRegs));
#endif
}

}  // namespace sm120
