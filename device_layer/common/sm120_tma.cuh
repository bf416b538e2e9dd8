#pragma once
// TMA (cp.async.bulk.tensor) wrappers. Destinations are `.shared::cta`: on sm_120a a
// `.shared::cluster` destination lowers to an own-CTA check plus a slow emulation call.

#include <cuda.h>
#include "sm120_mbarrier.cuh"

namespace sm120 {

SM120_DEVICE void tma_prefetch_descriptor(const CUtensorMap* desc) {
    asm volatile("prefetch.tensormap [%0];\n" : : "l"(reinterpret_cast<uint64_t>(desc)) : "memory");
}

// 2D tile load into shared memory; completion is signalled on `bar` as transaction bytes.
SM120_DEVICE void tma_load_2d(void* smem_dst, const CUtensorMap* desc, uint64_t* bar, int32_t c0, int32_t c1) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cta.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n"
        : : "r"(smem_addr(smem_dst)), "l"(reinterpret_cast<uint64_t>(desc)), "r"(smem_addr(bar)), "r"(c0), "r"(c1)
        : "memory");
}

SM120_DEVICE void tma_load_3d(void* smem_dst, const CUtensorMap* desc, uint64_t* bar, int32_t c0, int32_t c1,
                              int32_t c2) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cta.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];\n"
        : : "r"(smem_addr(smem_dst)), "l"(reinterpret_cast<uint64_t>(desc)), "r"(smem_addr(bar)), "r"(c0), "r"(c1),
            "r"(c2)
        : "memory");
}

// 2D tile store from shared memory (out-of-bounds parts of the box are not written).
SM120_DEVICE void tma_store_2d(const CUtensorMap* desc, const void* smem_src, int32_t c0, int32_t c1) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n"
                 : : "l"(reinterpret_cast<uint64_t>(desc)), "r"(smem_addr(smem_src)), "r"(c0), "r"(c1)
                 : "memory");
}

SM120_DEVICE void tma_store_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }

// Wait until at most N committed store groups still read shared memory.
template <int N>
SM120_DEVICE void tma_store_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;\n" : : "n"(N) : "memory");
}

}  // namespace sm120
