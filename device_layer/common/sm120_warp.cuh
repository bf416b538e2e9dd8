#pragma once
// Warp / lane identity and register reallocation (setmaxnreg).

#include "sm120_arch.cuh"

namespace sm120 {

SM120_DEVICE uint32_t lane_idx() {
    uint32_t lane;
    asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
    return lane;
}

// x unchanged, but opaque to the optimizer: what is computed from it is re-derived where used rather than kept
// in registers across a long stretch of code or hoisted out of a loop (which spills a kernel at its register cap).
SM120_DEVICE uint32_t opaque(uint32_t x) {
    asm volatile("" : "+r"(x));
    return x;
}
template <typename T>
SM120_DEVICE T* opaque(T* p) {
    asm volatile("" : "+l"(p));
    return p;
}

// Warp index made warp-uniform so the compiler can branch on it without divergence.
SM120_DEVICE uint32_t warp_idx() { return __shfl_sync(0xffffffffu, threadIdx.x / 32, 0); }

// Transpose a 4x4 matrix of words held by the four lanes of a quad (lanes 4k..4k+3): lane q holds row q on
// entry (v[t] = M[q][t]) and column q on return (v[s] = M[s][q]). Two rounds of 2x2 block swaps (xor 1, then
// xor 2), one shuffle per swapped pair: 4 shuffles per lane. Warp-collective (every lane must call it).
SM120_DEVICE void quad_transpose4(uint32_t (&v)[4], uint32_t lane) {
    const bool odd = (lane & 1) != 0, upper = (lane & 2) != 0;
#pragma unroll
    for (uint32_t t = 0; t < 4; t += 2) {  // swap M[q][t + !odd] with the partner's M[q^1][t + odd]
        const uint32_t r = __shfl_xor_sync(0xffffffffu, odd ? v[t] : v[t + 1], 1);
        if (odd) v[t] = r;
        else v[t + 1] = r;
    }
#pragma unroll
    for (uint32_t t = 0; t < 2; ++t) {  // the same on 2x2 blocks: M'[q][t + 2 * !upper] <-> M'[q^2][t + 2 * upper]
        const uint32_t r = __shfl_xor_sync(0xffffffffu, upper ? v[t] : v[t + 2], 2);
        if (upper) v[t] = r;
        else v[t + 2] = r;
    }
}

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
