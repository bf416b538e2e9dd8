#pragma once
// Hyper-connection pre-norm GEMM (DeepSeek V4). For a bf16 [M, K] and b fp32 [N, K] with N <= 32, split s of
// the K blocks (DeepGEMM's split: 64-wide K blocks dealt out evenly, the first ones one block longer) gets
//     d[s][m][n] = sum_k a[m][k] * b[n][k]      sqr_sum[s][m] = sum_k a[m][k]^2
// in one pass over a. Memory-bound by design: a is streamed once; b is small and stays in L2.
//
// Precision. a is exact in TF32 (bf16 keeps 8 significant bits). b is split as b = hi + lo with hi = tf32(b)
// (rounded to nearest) and lo = bf16(b - hi); d = a.hi on m16n8k8 TF32 MMAs plus a.lo on one m16n8k16 BF16 MMA.
// The product error is then about 2^-20 relative. A single TF32 pass (about 2^-11) gives calc_diff ~2e-8
// against an fp64 reference at these K, twice the 1e-8 we promise.
//
// K order. A dot product does not care which k sits in which fragment slot, as long as A and B agree. Lane
// (g, t) receives a's pairs from ldmatrix.x4 in the BF16 m16n8k16 layout (k = 2t, 2t+1, 2t+8, 2t+9); the first
// TF32 MMA of the k16 step puts k = 2t in slot t and k = 2t+1 in slot t+4 (the second: 2t+8 and 2t+9). So
// bf16 -> tf32 is a shift or a mask of the ldmatrix registers, and b's values are two float2 loads per n8.
//
// CTA: kMathWarps math warps and one producer warp (lane 0 issues TMA). A stage holds BLOCK_M x 64 of a
// (bf16, 128B swizzle) and kN x 64 of b (two 128B-swizzled boxes of 32 fp32). Math warp w takes k16 step w
// of every stage, so each b value is split into hi/lo once per CTA. At the end the warps' partial tiles are
// added in warp order through shared memory (deterministic) and written as d and sqr_sum of (m block, split).

#include <cuda.h>
#include "../common/sm120_arch.cuh"
#include "../common/sm120_ldmatrix.cuh"
#include "../common/sm120_math.cuh"
#include "../common/sm120_mbarrier.cuh"
#include "../common/sm120_pdl.cuh"
#include "../common/sm120_pipeline.cuh"
#include "../common/sm120_swizzle.cuh"
#include "../common/sm120_tma.cuh"
#include "../common/sm120_types.cuh"
#include "../common/sm120_warp.cuh"
#include "../mma/sm120.cuh"

namespace sm120 {

template <uint32_t BLOCK_M, uint32_t kN, uint32_t kStages>
struct HcPrenormConfig {
    static constexpr uint32_t kBlockK = 64;                     // DeepGEMM's split granularity
    static constexpr uint32_t kMathWarps = kBlockK / 16;        // one k16 step of each stage per warp
    static constexpr uint32_t kThreads = kMathWarps * 32 + 32;  // + the producer warp
    static constexpr uint32_t kMI = BLOCK_M / 16;
    static constexpr uint32_t kNI = kN / 8;
    static constexpr uint32_t kTileABytes = BLOCK_M * kSwizzle128BRowBytes;
    static constexpr uint32_t kSubTileBBytes = kN * kSwizzle128BRowBytes;  // 32 fp32 of K per row
    static constexpr uint32_t kTileBBytes = 2 * kSubTileBBytes;
    static constexpr uint32_t kStageBytes = kTileABytes + kTileBBytes;
    static constexpr uint32_t kBarrierBytes = 2 * kStages * sizeof(uint64_t);
    static constexpr uint32_t kSmemBytes = kStages * kStageBytes + kBarrierBytes;
    // Epilogue (reuses the stage buffers): each warp's fp32 tile with a padded row, then its row sums.
    static constexpr uint32_t kRedPitch = kN + 4;
    static constexpr uint32_t kRedBytes = kMathWarps * BLOCK_M * (kRedPitch + 1) * sizeof(float);

    static_assert(BLOCK_M % 16 == 0 && BLOCK_M <= 256, "BLOCK_M: m16 tiles, one TMA box");
    static_assert(kN % 8 == 0 && kN >= 8 && kN <= 32, "N is padded to a multiple of 8, at most 32");
    static_assert(kTileABytes % kSwizzleAtomBytes == 0 && kSubTileBBytes % kSwizzleAtomBytes == 0,
                  "tiles keep 1024-byte swizzle-atom alignment");
    static_assert(kSmemBytes <= kMaxSmemPerBlock, "shared memory exceeds the SM120 per-block budget (101376 B)");
    static_assert(kRedBytes <= kStages * kStageBytes, "the epilogue reuses the stage buffers");
};

// bf16 halves of an ldmatrix register as fp32 (= tf32) bit patterns: exact.
SM120_DEVICE uint32_t bf16_lo_bits(uint32_t pair) { return pair << 16; }
SM120_DEVICE uint32_t bf16_hi_bits(uint32_t pair) { return pair & 0xffff0000u; }

template <uint32_t BLOCK_M, uint32_t kN, uint32_t kStages>
// clang-format off: a kernel declaration (see .clang-format)
__global__ void __launch_bounds__(HcPrenormConfig<BLOCK_M, kN, kStages>::kThreads, 1)
sm120_tf32_hc_prenorm_gemm_kernel(const __grid_constant__ CUtensorMap tmap_a, const __grid_constant__ CUtensorMap tmap_b,
                                  float* __restrict__ d, float* __restrict__ sqr_sum, uint32_t m, uint32_t n,
                                  uint32_t k, uint32_t ldd, uint32_t d_split_stride, uint32_t s_split_stride) {
    // clang-format on
    using Cfg = HcPrenormConfig<BLOCK_M, kN, kStages>;
    constexpr uint32_t kMI = Cfg::kMI, kNI = Cfg::kNI;

    extern __shared__ __align__(1024) uint8_t smem[];
    uint8_t* smem_a = smem;
    uint8_t* smem_b = smem + kStages * Cfg::kTileABytes;
    const auto ring = StageRing<kStages>::at(smem + kStages * Cfg::kStageBytes);

    const uint32_t warp = warp_idx(), lane = lane_idx();
    const uint32_t m0 = blockIdx.x * BLOCK_M;
    const uint32_t split = blockIdx.y, num_splits = gridDim.y;
    // DeepGEMM's split of ceil(K / 64) blocks: the first (blocks % splits) splits take one block more.
    const uint32_t k_blocks = ceil_div(k, Cfg::kBlockK);
    const uint32_t per_split = k_blocks / num_splits, extra = k_blocks % num_splits;
    const uint32_t kb_begin = split * per_split + (split < extra ? split : extra);
    const uint32_t kb_count = per_split + (split < extra ? 1u : 0u);

    ring.init(Cfg::kMathWarps);
    pdl_wait_primary();  // a and b may come from the previous kernel in the stream

    float acc[kMI][kNI][4];
    float sq[kMI][2];
    fill(acc, 0.0f);
    fill(sq, 0.0f);

    if (warp == Cfg::kMathWarps) {
        // ---------------- producer warp ----------------
        if (lane == 0) {
            tma_prefetch_descriptor(&tmap_a);
            tma_prefetch_descriptor(&tmap_b);
            PipelineState<kStages> st;
            for (uint32_t kb = 0; kb < kb_count; ++kb, st.advance()) {
                uint64_t* full = ring.acquire(st, Cfg::kStageBytes);
                const int32_t kc = static_cast<int32_t>((kb_begin + kb) * Cfg::kBlockK);
                uint8_t* b_dst = smem_b + st.stage * Cfg::kTileBBytes;
                tma_load_2d(smem_a + st.stage * Cfg::kTileABytes, &tmap_a, full, kc, static_cast<int32_t>(m0));
                tma_load_2d(b_dst, &tmap_b, full, kc, 0);
                tma_load_2d(b_dst + Cfg::kSubTileBBytes, &tmap_b, full, kc + 32, 0);
            }
        }
        __syncwarp();
    } else {
        // ---------------- math warps: k16 step `warp` of every stage ----------------
        const uint32_t g = lane >> 2, t = lane & 3;
        const uint32_t a_row = lane & 15, a_chunk = (warp * 2) + (lane >> 4);
        // b: sub-tile warp / 2 (32 fp32 of K each); this lane's float2 at k = 16 (warp % 2) + 2t and + 8
        const uint32_t b_sub = (warp >> 1) * Cfg::kSubTileBBytes;
        const uint32_t b_chunk = (warp & 1) * 4 + (t >> 1), b_in_chunk = (t & 1) * 8;
        PipelineState<kStages> st;
        for (uint32_t kb = 0; kb < kb_count; ++kb, st.advance()) {
            ring.wait_full(st);
            const uint32_t a_base = smem_addr(smem_a + st.stage * Cfg::kTileABytes);
            const uint8_t* b_tile = smem_b + st.stage * Cfg::kTileBBytes + b_sub;

            uint32_t af[kMI][4];
#pragma unroll
            for (uint32_t i = 0; i < kMI; ++i)
                ldmatrix_x4(a_base + swizzle_offset<128>(i * 16 + a_row, a_chunk), af[i][0], af[i][1], af[i][2],
                            af[i][3]);
            uint32_t bhi[kNI][4], blo[kNI][2];
#pragma unroll
            for (uint32_t j = 0; j < kNI; ++j) {
                const uint32_t row = j * 8 + g;
                const float2 v0 =
                    *reinterpret_cast<const float2*>(b_tile + swizzle_offset<128>(row, b_chunk) + b_in_chunk);
                const float2 v1 =
                    *reinterpret_cast<const float2*>(b_tile + swizzle_offset<128>(row, b_chunk + 2) + b_in_chunk);
                bhi[j][0] = tf32_round(v0.x), bhi[j][1] = tf32_round(v0.y);
                bhi[j][2] = tf32_round(v1.x), bhi[j][3] = tf32_round(v1.y);
                blo[j][0] = pack_bf16x2(v0.x - __uint_as_float(bhi[j][0]), v0.y - __uint_as_float(bhi[j][1]));
                blo[j][1] = pack_bf16x2(v1.x - __uint_as_float(bhi[j][2]), v1.y - __uint_as_float(bhi[j][3]));
            }
            ring.release(st, lane);  // the stage's data is in registers: hand it back before the math

#pragma unroll
            for (uint32_t i = 0; i < kMI; ++i) {
                // rows g (af[i][0], af[i][2]) and g + 8 (af[i][1], af[i][3]); k pairs (2t, 2t+1), (2t+8, 2t+9)
                const uint32_t lo_k[4] = {bf16_lo_bits(af[i][0]), bf16_lo_bits(af[i][1]), bf16_hi_bits(af[i][0]),
                                          bf16_hi_bits(af[i][1])};
                const uint32_t hi_k[4] = {bf16_lo_bits(af[i][2]), bf16_lo_bits(af[i][3]), bf16_hi_bits(af[i][2]),
                                          bf16_hi_bits(af[i][3])};
#pragma unroll
                for (uint32_t j = 0; j < kNI; ++j) {
                    mma_tf32_1688(acc[i][j], lo_k, {bhi[j][0], bhi[j][1]});
                    mma_tf32_1688(acc[i][j], hi_k, {bhi[j][2], bhi[j][3]});
                    mma_bf16_16816(acc[i][j], af[i], blo[j]);
                }
#pragma unroll
                for (uint32_t r = 0; r < 2; ++r) {
                    const float x0 = __uint_as_float(lo_k[r]), x1 = __uint_as_float(lo_k[r + 2]);
                    const float x2 = __uint_as_float(hi_k[r]), x3 = __uint_as_float(hi_k[r + 2]);
                    sq[i][r] = fmaf(x0, x0, sq[i][r]);
                    sq[i][r] = fmaf(x1, x1, sq[i][r]);
                    sq[i][r] = fmaf(x2, x2, sq[i][r]);
                    sq[i][r] = fmaf(x3, x3, sq[i][r]);
                }
            }
        }
    }

    // ---------------- epilogue: add the warps' tiles in warp order ----------------
    __syncthreads();  // every stage consumed and every TMA load complete: the stage buffers are free
    float* red = reinterpret_cast<float*>(smem);
    float* red_sq = red + Cfg::kMathWarps * BLOCK_M * Cfg::kRedPitch;
    if (warp < Cfg::kMathWarps) {
        const uint32_t g = lane >> 2, t = lane & 3;
        float* mine = red + warp * BLOCK_M * Cfg::kRedPitch;
#pragma unroll
        for (uint32_t i = 0; i < kMI; ++i) {
#pragma unroll
            for (uint32_t j = 0; j < kNI; ++j)
#pragma unroll
                for (uint32_t h = 0; h < 2; ++h)
                    *reinterpret_cast<float2*>(mine + (i * 16 + g + h * 8) * Cfg::kRedPitch + j * 8 + 2 * t) =
                        make_float2(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
#pragma unroll
            for (uint32_t h = 0; h < 2; ++h) {
                float v = sq[i][h];
                v += __shfl_xor_sync(0xffffffffu, v, 1);
                v += __shfl_xor_sync(0xffffffffu, v, 2);
                if (t == 0) red_sq[warp * BLOCK_M + i * 16 + g + h * 8] = v;
            }
        }
    }
    __syncthreads();
    float* d_out = d + static_cast<size_t>(split) * d_split_stride;
    for (uint32_t e = threadIdx.x; e < BLOCK_M * kN; e += Cfg::kThreads) {
        const uint32_t row = e / kN, col = e % kN;
        if (m0 + row >= m || col >= n) continue;
        float v = 0.0f;
#pragma unroll
        for (uint32_t w = 0; w < Cfg::kMathWarps; ++w) v += red[(w * BLOCK_M + row) * Cfg::kRedPitch + col];
        d_out[static_cast<size_t>(m0 + row) * ldd + col] = v;
    }
    for (uint32_t row = threadIdx.x; row < BLOCK_M; row += Cfg::kThreads) {
        if (m0 + row >= m) continue;
        float v = 0.0f;
#pragma unroll
        for (uint32_t w = 0; w < Cfg::kMathWarps; ++w) v += red_sq[w * BLOCK_M + row];
        sqr_sum[static_cast<size_t>(split) * s_split_stride + m0 + row] = v;
    }
    pdl_launch_dependents();
}

}  // namespace sm120
