#pragma once
// MQA logits (DeepSeek V3.2/V4 lightning indexer), dense form, FP8:
//     logits[i][j] = sum_h  w[i][h] * relu( (q[i][h] . kv[j]) * kv_scale[j] )     for j in [ks[i], ke[i])
// and -inf elsewhere in the row (clean), or compressed rows: column c holds key ks[i] + c.
//
// A CTA owns kBlockQ = 64 / kHeads queries, i.e. M = 64 rows (query-major, head-minor), whose e4m3 fragments
// stay in registers for the CTA's life. KV streams through a TMA ring in BLOCK_KV-key tiles over the union of the
// queries' key ranges, starting at a BLOCK_KV-aligned key. Four math warps split each tile's keys (BLOCK_KV / 4
// each) and keep all 64 rows, so the head sum is in-lane (rows g and g + 8 of each m16 tile, the tiles of one
// query) plus an xor-shuffle over g: no shared-memory round trip, a fixed order (bitwise deterministic).
//
// MMA: kind::mxf8f6f4 m16n8k32 with unit UE8M0 scales (127), i.e. the full-rate block-scaled form on GeForce
// (QMMA.SF); kv_scale multiplies each column's product before the ReLU, as the definition says.

#include <cuda.h>
#include "../common/sm120_arch.cuh"
#include "../common/sm120_fence.cuh"
#include "../common/sm120_ldmatrix.cuh"
#include "../common/sm120_math.cuh"
#include "../common/sm120_mbarrier.cuh"
#include "../common/sm120_pdl.cuh"
#include "../common/sm120_swizzle.cuh"
#include "../common/sm120_tma.cuh"
#include "../common/sm120_types.cuh"
#include "../common/sm120_warp.cuh"
#include "../mma/sm120.cuh"

namespace sm120 {

constexpr uint32_t kUnitUe8m0x4 = 0x7f7f7f7fu;  // four UE8M0 scales of 2^0

template <uint32_t kHeads, uint32_t kHeadDim, uint32_t BLOCK_KV, uint32_t kStages>
struct MqaLogitsConfig {
    static constexpr uint32_t kRows = 64;                      // M: kBlockQ queries x kHeads heads
    static constexpr uint32_t kBlockQ = kRows / kHeads;
    static constexpr uint32_t kMathWarps = 4;
    static constexpr uint32_t kThreads = kMathWarps * 32 + 32;  // + the producer warp
    static constexpr uint32_t kWarpKeys = BLOCK_KV / kMathWarps;
    static constexpr uint32_t kMI = kRows / 16, kNI = kWarpKeys / 8, kKSteps = kHeadDim / 32;
    static constexpr uint32_t kRowBytes = kHeadDim;             // e4m3: one byte per element, one swizzle span
    static constexpr uint32_t kTileQBytes = kRows * kRowBytes;
    static constexpr uint32_t kTileKVBytes = BLOCK_KV * kRowBytes;
    static constexpr uint32_t kSmemBytes = kTileQBytes + kStages * kTileKVBytes + (2 * kStages + 1) * 8;

    static_assert(kHeads == 16 || kHeads == 32 || kHeads == 64, "heads: 16, 32 or 64");
    static_assert(kHeadDim == 64 || kHeadDim == 128, "head dim: 64 or 128 (64B / 128B swizzle rows)");
    static_assert(kNI % 2 == 0, "B fragments come in pairs of n8 tiles");
    static_assert(kSmemBytes <= kMaxSmemPerBlock, "shared memory exceeds the SM120 per-block budget (101376 B)");
};

template <typename T>
SM120_DEVICE T to_logit(float v) {
    if constexpr (sizeof(T) == 4) return v;
    else return __float2bfloat16_rn(v);
}

template <uint32_t kHeads, uint32_t kHeadDim, uint32_t BLOCK_KV, uint32_t kStages, typename LogitT, bool kClean,
          bool kCompressed>
__global__ void __launch_bounds__(MqaLogitsConfig<kHeads, kHeadDim, BLOCK_KV, kStages>::kThreads, 1)
sm120_fp8_mqa_logits_kernel(const __grid_constant__ CUtensorMap tmap_q, const __grid_constant__ CUtensorMap tmap_kv,
                            const float* __restrict__ kv_scale, const float* __restrict__ weights,
                            const int32_t* __restrict__ ks, const int32_t* __restrict__ ke, LogitT* __restrict__ logits,
                            uint32_t seq_len, uint32_t seq_len_kv, uint32_t ld_weights, uint32_t ld_logits) {
    using Cfg = MqaLogitsConfig<kHeads, kHeadDim, BLOCK_KV, kStages>;
    constexpr uint32_t kMI = Cfg::kMI, kNI = Cfg::kNI, kKSteps = Cfg::kKSteps;
    static_assert(!(kClean && kCompressed), "compressed logits are never cleaned");

    extern __shared__ __align__(1024) uint8_t smem[];
    uint8_t* smem_q = smem;
    uint8_t* smem_kv = smem + Cfg::kTileQBytes;
    uint64_t* full_bar = reinterpret_cast<uint64_t*>(smem_kv + kStages * Cfg::kTileKVBytes);
    uint64_t* empty_bar = full_bar + kStages;
    uint64_t* q_bar = empty_bar + kStages;

    const uint32_t warp = warp_idx();
    const uint32_t lane = lane_idx();
    const uint32_t q0 = blockIdx.x * Cfg::kBlockQ;

    init_stage_barriers(full_bar, empty_bar, kStages, Cfg::kMathWarps);
    if (threadIdx.x == 0) {
        mbarrier_init(q_bar, 1);
        fence_barrier_init();
    }
    __syncthreads();
    pdl_wait_primary();

    // The CTA's key range: the union of its queries' [ks, ke), from a BLOCK_KV-aligned key.
    uint32_t lo = seq_len_kv, hi = 0;
#pragma unroll
    for (uint32_t q = 0; q < Cfg::kBlockQ; ++q) {
        if (q0 + q >= seq_len) break;
        const int32_t s = max(__ldg(ks + q0 + q), 0), e = min(__ldg(ke + q0 + q), static_cast<int32_t>(seq_len_kv));
        if (s < e) lo = min(lo, static_cast<uint32_t>(s)), hi = max(hi, static_cast<uint32_t>(e));
    }
    const uint32_t first_key = lo < hi ? lo / BLOCK_KV * BLOCK_KV : 0;
    const uint32_t num_tiles = lo < hi ? ceil_div(hi - first_key, BLOCK_KV) : 0;

    if (warp == Cfg::kMathWarps) {
        // ---------------- producer warp ----------------
        if (lane == 0) {
            tma_prefetch_descriptor(&tmap_q);
            tma_prefetch_descriptor(&tmap_kv);
            mbarrier_arrive_expect_tx(q_bar, Cfg::kTileQBytes);
            tma_load_2d(smem_q, &tmap_q, q_bar, 0, static_cast<int32_t>(q0 * kHeads));
            uint32_t stage = 0, phase = 0;
            for (uint32_t t = 0; t < num_tiles; ++t) {
                mbarrier_wait(&empty_bar[stage], phase ^ 1);
                mbarrier_arrive_expect_tx(&full_bar[stage], Cfg::kTileKVBytes);
                tma_load_2d(smem_kv + stage * Cfg::kTileKVBytes, &tmap_kv, &full_bar[stage], 0,
                            static_cast<int32_t>(first_key + t * BLOCK_KV));
                if (++stage == kStages) stage = 0, phase ^= 1;
            }
        }
    } else {
        // ---------------- math warps: keys [warp * kWarpKeys, +kWarpKeys) of every tile ----------------
        const uint32_t g = lane >> 2, t4 = lane & 3;
        // This lane's rows: i * 16 + g (+ 8); their query and weight.
        float w[kMI][2];
        int32_t row_ks[kMI][2], row_ke[kMI][2];
#pragma unroll
        for (uint32_t i = 0; i < kMI; ++i)
#pragma unroll
            for (uint32_t h = 0; h < 2; ++h) {
                const uint32_t row = i * 16 + h * 8 + g, q = q0 + row / kHeads;
                const bool ok = q < seq_len;
                w[i][h] = ok ? __ldg(weights + static_cast<size_t>(q) * ld_weights + row % kHeads) : 0.0f;
                row_ks[i][h] = ok ? __ldg(ks + q) : 0;
                row_ke[i][h] = ok ? __ldg(ke + q) : 0;
            }
        // Q fragments, once: ldmatrix.x4 of rows i*16 + (lane & 15), 16-byte chunk 2k + (lane >> 4).
        mbarrier_wait(q_bar, 0);
        uint32_t qf[kKSteps][kMI][4];
        const uint32_t q_base = smem_addr(smem_q);
#pragma unroll
        for (uint32_t k = 0; k < kKSteps; ++k)
#pragma unroll
            for (uint32_t i = 0; i < kMI; ++i)
                ldmatrix_x4(q_base + swizzle_offset<Cfg::kRowBytes>(i * 16 + (lane & 15), 2 * k + (lane >> 4)),
                            qf[k][i][0], qf[k][i][1], qf[k][i][2], qf[k][i][3]);
        const uint32_t b_row = warp * Cfg::kWarpKeys + (lane & 7) + ((lane >> 4) << 3);
        const uint32_t b_chunk = (lane >> 3) & 1;

        uint32_t stage = 0, phase = 0;
        for (uint32_t tile = 0; tile < num_tiles; ++tile) {
            mbarrier_wait(&full_bar[stage], phase);
            const uint32_t kv_base = smem_addr(smem_kv + stage * Cfg::kTileKVBytes);
            float acc[kMI][kNI][4];
#pragma unroll
            for (uint32_t i = 0; i < kMI; ++i)
#pragma unroll
                for (uint32_t j = 0; j < kNI; ++j)
#pragma unroll
                    for (uint32_t e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
#pragma unroll
            for (uint32_t k = 0; k < kKSteps; ++k) {
                uint32_t bf[kNI][2];
#pragma unroll
                for (uint32_t j = 0; j < kNI / 2; ++j)
                    ldmatrix_x4(kv_base + swizzle_offset<Cfg::kRowBytes>(b_row + j * 16, 2 * k + b_chunk), bf[2 * j][0],
                                bf[2 * j][1], bf[2 * j + 1][0], bf[2 * j + 1][1]);
#pragma unroll
                for (uint32_t i = 0; i < kMI; ++i)
#pragma unroll
                    for (uint32_t j = 0; j < kNI; ++j)
                        mma_mxf8_e4m3_16832<0, 0, 0, 0>(acc[i][j], qf[k][i], bf[j], kUnitUe8m0x4, kUnitUe8m0x4);
            }
            // Every ldmatrix of the stage is done: fence the generic reads against the next TMA write, release.
            fence_proxy_async_smem();
            __syncwarp();
            if (lane == 0) mbarrier_arrive(&empty_bar[stage]);
            if (++stage == kStages) stage = 0, phase ^= 1;

            // Epilogue of the tile: per query, sum over its heads of w * relu(acc * kv_scale), for columns 2t4, +1.
            const uint32_t key0 = first_key + tile * BLOCK_KV + warp * Cfg::kWarpKeys;
#pragma unroll
            for (uint32_t j = 0; j < kNI; ++j) {
                const uint32_t col = key0 + j * 8 + 2 * t4;
                const float s0 = col < seq_len_kv ? __ldg(kv_scale + col) : 0.0f;
                const float s1 = col + 1 < seq_len_kv ? __ldg(kv_scale + col + 1) : 0.0f;
#pragma unroll
                for (uint32_t q = 0; q < Cfg::kBlockQ; ++q) {
                    float v0 = 0.0f, v1 = 0.0f;
                    // m16 tiles of query q: rows [q * kHeads, (q + 1) * kHeads)
#pragma unroll
                    for (uint32_t i = q * kHeads / 16; i < (q + 1) * kHeads / 16; ++i)
#pragma unroll
                        for (uint32_t h = 0; h < 2; ++h) {
                            v0 = fmaf(w[i][h], fmaxf(acc[i][j][2 * h] * s0, 0.0f), v0);
                            v1 = fmaf(w[i][h], fmaxf(acc[i][j][2 * h + 1] * s1, 0.0f), v1);
                        }
#pragma unroll
                    for (uint32_t off = 4; off < 32; off <<= 1) {
                        v0 += __shfl_xor_sync(0xffffffffu, v0, off);
                        v1 += __shfl_xor_sync(0xffffffffu, v1, off);
                    }
                    const uint32_t qi = q0 + q;
                    if (g != 0 || qi >= seq_len) continue;
                    const int32_t s = row_ks[q * kHeads / 16][0], e = row_ke[q * kHeads / 16][0];
                    const float vals[2] = {v0, v1};
#pragma unroll
                    for (uint32_t c = 0; c < 2; ++c) {
                        const int32_t key = static_cast<int32_t>(col + c);
                        if (key >= static_cast<int32_t>(seq_len_kv)) continue;
                        const bool in = key >= s && key < e;
                        if constexpr (kCompressed) {
                            if (in) logits[static_cast<size_t>(qi) * ld_logits + (key - s)] = to_logit<LogitT>(vals[c]);
                        } else {
                            logits[static_cast<size_t>(qi) * ld_logits + key] =
                                to_logit<LogitT>(in ? vals[c] : -INFINITY);
                        }
                    }
                }
            }
        }
    }

    if constexpr (kClean) {
        // -inf for the keys of the CTA's rows that no tile covered: [0, first_key) and [end, seq_len_kv).
        const uint32_t end = min(first_key + num_tiles * BLOCK_KV, seq_len_kv);
        const uint32_t gap = first_key + (seq_len_kv - end);
        for (uint32_t q = 0; q < Cfg::kBlockQ; ++q) {
            if (q0 + q >= seq_len) break;
            LogitT* row = logits + static_cast<size_t>(q0 + q) * ld_logits;
            for (uint32_t x = threadIdx.x; x < gap; x += Cfg::kThreads)
                row[x < first_key ? x : end + (x - first_key)] = to_logit<LogitT>(-INFINITY);
        }
    }
    pdl_launch_dependents();
}

}  // namespace sm120
