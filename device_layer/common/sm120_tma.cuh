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
        :
        : "r"(smem_addr(smem_dst)), "l"(reinterpret_cast<uint64_t>(desc)), "r"(smem_addr(bar)), "r"(c0), "r"(c1)
        : "memory");
}

SM120_DEVICE void tma_load_3d(void* smem_dst, const CUtensorMap* desc, uint64_t* bar, int32_t c0, int32_t c1,
                              int32_t c2) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cta.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];\n"
        :
        : "r"(smem_addr(smem_dst)), "l"(reinterpret_cast<uint64_t>(desc)), "r"(smem_addr(bar)), "r"(c0), "r"(c1),
          "r"(c2)
        : "memory");
}

// ---- On-device tensor-map updates (tensormap.replace), for kernels whose operand changes per group ----
// A 128-byte-aligned shared-memory copy of a CUtensorMap is edited in place, published to global memory
// with the tensormap proxy fence folded into the copy, and acquired before any TMA uses the global copy.

// Field `global_address` of the tensor map at `smem_desc` (one thread).
SM120_DEVICE void tensormap_replace_address(void* smem_desc, const void* address) {
    asm volatile("tensormap.replace.tile.global_address.shared::cta.b1024.b64 [%0], %1;\n"
                 :
                 : "r"(smem_addr(smem_desc)), "l"(reinterpret_cast<uint64_t>(address))
                 : "memory");
}

// Field `global_dim[kDim]` (extent in elements) of the tensor map at `smem_desc` (one thread).
template <int kDim>
SM120_DEVICE void tensormap_replace_dim(void* smem_desc, uint32_t extent) {
    asm volatile("tensormap.replace.tile.global_dim.shared::cta.b1024.b32 [%0], %1, %2;\n"
                 :
                 : "r"(smem_addr(smem_desc)), "n"(kDim), "r"(extent)
                 : "memory");
}

// Copy the edited map to global memory with release semantics on the tensormap proxy. Warp-collective:
// all 32 lanes of a converged warp execute it.
SM120_DEVICE void tensormap_publish(CUtensorMap* global_desc, const void* smem_desc) {
    asm volatile(
        "tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.gpu.sync.aligned [%0], [%1], 128;\n"
        :
        : "l"(reinterpret_cast<uint64_t>(global_desc)), "r"(smem_addr(smem_desc))
        : "memory");
}

// Make a published map visible to this thread's subsequent TMA operations.
SM120_DEVICE void tensormap_acquire(const CUtensorMap* global_desc) {
    asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;\n"
                 :
                 : "l"(reinterpret_cast<uint64_t>(global_desc))
                 : "memory");
}

}  // namespace sm120
