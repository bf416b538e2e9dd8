#pragma once
// Split-K reduction: D[M,N] = C (optional) + sum over s = 0..S-1 of W[s][M][N], in that fixed order.
// W holds the fp32 partial sums written by a split-K GEMM (plain stores, no atomics), so D is bitwise
// deterministic. Each thread reduces 4 consecutive columns with 16-byte loads when the row allows it.
// Launched with PDL right behind the GEMM that writes W: it waits in griddepcontrol before reading anything.
//
// kWarpPerElement: for many splits of a small output (the hyper-connection GEMM's K splits at decode sizes).
// One warp owns one element and its lanes take splits lane, lane + 32, ...; a fixed xor-shuffle tree adds the
// lanes, and lane 0's sum is stored. Still deterministic, and all S loads of an element are in flight at once
// where the quad form issues them one after another.

#include "../common/sm120_arch.cuh"
#include "../common/sm120_pdl.cuh"
#include "../common/sm120_types.cuh"

namespace sm120 {

constexpr uint32_t kSplitKReduceThreads = 256;

template <typename OutT, bool kWithC, bool kWarpPerElement = false>
// clang-format off: a kernel declaration (see .clang-format)
__global__ void __launch_bounds__(kSplitKReduceThreads)
sm120_split_k_reduce_kernel(const float* __restrict__ w, OutT* d, const OutT* c, uint32_t m, uint32_t n,
                            uint32_t ldd, uint32_t ldc, uint32_t num_splits) {
    // clang-format on
    pdl_wait_primary();  // W (and C) come from the kernels before this one in the stream
    const size_t split_stride = static_cast<size_t>(m) * n;
    if constexpr (kWarpPerElement) {
        const uint32_t lane = threadIdx.x % 32;
        const size_t warps = static_cast<size_t>(gridDim.x) * (blockDim.x / 32);
        for (size_t e = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32; e < split_stride;
             e += warps) {
            float acc = 0.0f;
            for (uint32_t s = lane; s < num_splits; s += 32) acc += w[s * split_stride + e];
#pragma unroll
            for (uint32_t off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
            if (lane == 0) {
                const uint32_t row = static_cast<uint32_t>(e / n), col = static_cast<uint32_t>(e % n);
                if constexpr (kWithC) acc += static_cast<float>(c[static_cast<size_t>(row) * ldc + col]);
                d[static_cast<size_t>(row) * ldd + col] = static_cast<OutT>(acc);
            }
        }
        return;
    }
    const uint32_t quads_per_row = (n + 3) / 4;
    for (size_t q = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
         q < static_cast<size_t>(m) * quads_per_row; q += static_cast<size_t>(gridDim.x) * blockDim.x) {
        const uint32_t row = static_cast<uint32_t>(q / quads_per_row);
        const uint32_t col = static_cast<uint32_t>(q % quads_per_row) * 4;
        const float* src = w + static_cast<size_t>(row) * n + col;
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        const bool full = col + 4 <= n && (n % 4) == 0;  // 16-byte aligned quad
        for (uint32_t s = 0; s < num_splits; ++s, src += split_stride) {
            if (full) {
                const float4 v = *reinterpret_cast<const float4*>(src);
                acc[0] += v.x, acc[1] += v.y, acc[2] += v.z, acc[3] += v.w;
            } else {
#pragma unroll
                for (uint32_t e = 0; e < 4; ++e)
                    if (col + e < n) acc[e] += src[e];
            }
        }
#pragma unroll
        for (uint32_t e = 0; e < 4; ++e) {
            if (col + e >= n) break;
            float v = acc[e];
            if constexpr (kWithC) v += static_cast<float>(c[static_cast<size_t>(row) * ldc + col + e]);
            d[static_cast<size_t>(row) * ldd + col + e] = static_cast<OutT>(v);
        }
    }
}

}  // namespace sm120
