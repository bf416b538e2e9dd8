#pragma once
// Ready flags between two grids that run at the same time (a producer grid publishes a tile of global memory,
// a consumer grid's thread waits for it, then reads it, possibly by TMA). Release / acquire at GPU scope: the
// consumer sees every store the producer's CTA made before its barrier and the publish.
#include "sm120_arch.cuh"
namespace sm120 {
// Orders this thread's generic-proxy global accesses against its later async-proxy (TMA) accesses of global
// memory: what an acquire made visible is then visible to the TMA loads issued after it.
SM120_DEVICE void fence_proxy_async_global() { asm volatile("fence.proxy.async.global;\n" ::: "memory"); }
// One thread publishes: every store ordered before this (its own, and its CTA's through a preceding barrier)
// is visible to a thread that acquires the flag.
SM120_DEVICE void flag_publish(int32_t* flag) {
    asm volatile("st.release.gpu.global.b32 [%0], %1;\n" : : "l"(flag), "r"(1) : "memory");
}
// A coherent load (L2), e.g. of data another grid writes while this one runs, after a flag_wait.
SM120_DEVICE int32_t load_relaxed(const int32_t* p) {
    int32_t v;
    asm volatile("ld.relaxed.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}
// Spin until the flag is set (the producer grid is resident: it started before this one could). The polls are
// relaxed and one fence makes the last an acquire: an acquire load per poll may invalidate the SM's L1 each
// time, under the feet of other CTAs on the SM.
SM120_DEVICE void flag_wait(const int32_t* flag) {
    while (load_relaxed(flag) == 0) __nanosleep(32);
    asm volatile("fence.acq_rel.gpu;\n" ::: "memory");
}
}  // namespace sm120
