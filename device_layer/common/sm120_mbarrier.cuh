#pragma once
// mbarrier wrappers (shared::cta). Parity waits follow the usual convention: waiting for parity P
// returns once the phase with parity P has completed; a fresh barrier treats parity 1 as complete.

#include "sm120_arch.cuh"

namespace sm120 {

SM120_DEVICE uint32_t smem_addr(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

SM120_DEVICE void mbarrier_init(uint64_t* bar, uint32_t arrive_count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" : : "r"(smem_addr(bar)), "r"(arrive_count) : "memory");
}

SM120_DEVICE void mbarrier_arrive(uint64_t* bar) {
    asm volatile("{\n .reg .b64 st;\n mbarrier.arrive.shared::cta.b64 st, [%0];\n}\n"
                 :
                 : "r"(smem_addr(bar))
                 : "memory");
}

// Arrive and announce `bytes` of async-proxy transactions (TMA) that will complete this phase.
SM120_DEVICE void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
    asm volatile("{\n .reg .b64 st;\n mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n"
                 :
                 : "r"(smem_addr(bar)), "r"(bytes)
                 : "memory");
}

SM120_DEVICE bool mbarrier_try_wait(uint64_t* bar, uint32_t parity) {
    uint32_t ok;
    asm volatile(
        "{\n .reg .pred P;\n mbarrier.try_wait.parity.shared::cta.b64 P, [%1], %2, %3;\n selp.b32 %0, 1, 0, P;\n}\n"
        : "=r"(ok)
        : "r"(smem_addr(bar)), "r"(parity), "r"(0x989680u)
        : "memory");
    return ok != 0;
}

SM120_DEVICE void mbarrier_wait(uint64_t* bar, uint32_t parity) {
    while (!mbarrier_try_wait(bar, parity)) {}
}

}  // namespace sm120
