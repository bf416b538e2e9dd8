#pragma once
// Memory-proxy fences and named barriers.

#include "sm120_arch.cuh"

namespace sm120 {

// Orders this thread's generic-proxy shared-memory accesses against later async-proxy (TMA) accesses
// of the same CTA's shared memory, and vice versa.
SM120_DEVICE void fence_proxy_async_smem() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// Makes mbarrier.init visible to the async proxy (TMA complete_tx) before the barrier is used.
SM120_DEVICE void fence_barrier_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }

// Named barrier over `count` threads (a multiple of 32); id 0 is __syncthreads'.
SM120_DEVICE void named_barrier_sync(uint32_t id, uint32_t count) {
    asm volatile("bar.sync %0, %1;\n" : : "r"(id), "r"(count) : "memory");
}

}  // namespace sm120
