#pragma once
// mbarrier wrappers (shared::cta). Parity waits follow the usual convention: waiting for parity P
// returns once the phase with parity P has completed; a fresh barrier treats parity 1 as complete.

#include "sm120_arch.cuh"
#include "sm120_fence.cuh"

namespace sm120 {

SM120_DEVICE uint32_t smem_addr(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

SM120_DEVICE void mbarrier_init(uint64_t* bar, uint32_t arrive_count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" : : "r"(smem_addr(bar)), "r"(arrive_count) : "memory");
}

SM120_DEVICE void mbarrier_arrive(uint64_t* bar) {
    asm volatile("{\n .reg .b64 st;\n mbarrier.arrive.shared::cta.b64 st, [%0];\n}\n"
                 : : "r"(smem_addr(bar)) : "memory");
}

// Arrive and announce `bytes` of async-proxy transactions (TMA) that will complete this phase.
SM120_DEVICE void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
    asm volatile("{\n .reg .b64 st;\n mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n"
                 : : "r"(smem_addr(bar)), "r"(bytes) : "memory");
}

SM120_DEVICE bool mbarrier_try_wait(uint64_t* bar, uint32_t parity) {
    uint32_t ok;
    asm volatile(
        "{\n .reg .pred P;\n mbarrier.try_wait.parity.shared::cta.b64 P, [%1], %2, %3;\n selp.b32 %0, 1, 0, P;\n}\n"
        : "=r"(ok) : "r"(smem_addr(bar)), "r"(parity), "r"(0x989680u) : "memory");
    return ok != 0;
}

SM120_DEVICE void mbarrier_wait(uint64_t* bar, uint32_t parity) {
    while (!mbarrier_try_wait(bar, parity)) {
    }
}

// The full/empty barrier pair of each stage of a TMA pipeline: `full` completes on the producer's arrival plus
// its transaction bytes, `empty` once all `consumers` released the stage. Block-collective: thread 0 initializes,
// the fence makes the barriers visible to TMA's complete_tx, and __syncthreads to every thread.
SM120_DEVICE void init_stage_barriers(uint64_t* full, uint64_t* empty, uint32_t stages, uint32_t consumers) {
    if (threadIdx.x == 0) {
        for (uint32_t s = 0; s < stages; ++s) {
            mbarrier_init(&full[s], 1);
            mbarrier_init(&empty[s], consumers);
        }
        fence_barrier_init();
    }
    __syncthreads();
}

}  // namespace sm120
