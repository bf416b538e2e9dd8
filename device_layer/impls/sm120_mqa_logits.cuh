#pragma once
// MQA logits (DeepSeek V3.2/V4 lightning indexer), dense form:
//     FP8: logits[i][j] = sum_h  w[i][h] * relu( (q[i][h] . kv[j]) * kv_scale[j] )     for j in [ks[i], ke[i])
//     FP4: logits[i][j] = sum_h  w[i][h] * relu( (q[i][h] * sq[i][h]) . (kv[j] * skv[j]) )  (1x32 UE8M0 scales)
// and -inf elsewhere in the row (clean), or compressed rows: column c holds key ks[i] + c.
// ks / ke are not trusted (graph replays skip the host checks): [ks, ke) is clamped to [0, seq_len_kv), and a
// compressed row keeps only the keys that fit its ld_logits columns.
//
// A CTA owns 64 / kHeads queries (64 rows), whose fragments stay in registers (tile/sm120_mqa_tile.cuh).
// KV streams through a TMA ring in BLOCK_KV-key tiles over the union of the queries' key ranges, from a
// BLOCK_KV-aligned key; four math warps take BLOCK_KV / 4 keys of each tile. One producer warp issues TMA.

#include <cuda.h>
#include "../common/sm120_arch.cuh"
#include "../common/sm120_mbarrier.cuh"
#include "../common/sm120_pdl.cuh"
#include "../common/sm120_pipeline.cuh"
#include "../common/sm120_tma.cuh"
#include "../common/sm120_warp.cuh"
#include "../tile/sm120_mqa_tile.cuh"

namespace sm120 {

template <uint32_t kHeads, uint32_t kHeadDim, uint32_t BLOCK_KV, uint32_t kStages, bool kFp4,
          ScaleEncoding kEnc = ScaleEncoding::kSelectors>
struct MqaLogitsConfig {
    static constexpr uint32_t kMathWarps = 4;
    static constexpr uint32_t kThreads = kMathWarps * 32 + 32;  // + the producer warp
    using Tile = MqaTile<kHeads, kHeadDim, BLOCK_KV / kMathWarps, kFp4, 64, false, kEnc>;
    static constexpr uint32_t kTileQBytes = Tile::kRows * Tile::kRowBytes;
    static constexpr uint32_t kTileKVBytes = BLOCK_KV * Tile::kRowBytes;
    static constexpr uint32_t kSmemBytes = kTileQBytes + kStages * kTileKVBytes + (2 * kStages + 1) * 8;
    static_assert(kSmemBytes <= kMaxSmemPerBlock, "shared memory exceeds the SM120 per-block budget (101376 B)");
};

template <uint32_t kHeads, uint32_t kHeadDim, uint32_t BLOCK_KV, uint32_t kStages, bool kFp4, typename LogitT,
          bool kClean, bool kCompressed, ScaleEncoding kEnc = ScaleEncoding::kSelectors>
// clang-format off: a kernel declaration (see .clang-format)
__global__ void __launch_bounds__(MqaLogitsConfig<kHeads, kHeadDim, BLOCK_KV, kStages, kFp4, kEnc>::kThreads, 1)
sm120_mqa_logits_kernel(const __grid_constant__ CUtensorMap tmap_q, const __grid_constant__ CUtensorMap tmap_kv,
                        const float* __restrict__ kv_scale, const uint32_t* __restrict__ q_sf,
                        const uint32_t* __restrict__ kv_sf, const float* __restrict__ weights,
                        const int32_t* __restrict__ ks, const int32_t* __restrict__ ke, LogitT* __restrict__ logits,
                        uint32_t seq_len, uint32_t seq_len_kv, uint32_t ld_weights, uint32_t ld_logits) {
    // clang-format on
    // FP8: kv_scale fp32 [SK], q_sf / kv_sf unused. FP4: q_sf [S * H] and kv_sf [SK] packed words, kv_scale unused.
    using Cfg = MqaLogitsConfig<kHeads, kHeadDim, BLOCK_KV, kStages, kFp4, kEnc>;
    using Tile = typename Cfg::Tile;
    constexpr uint32_t kMI = Tile::kMI, kNI = Tile::kNI, kQueries = Tile::kQueries;
    static_assert(!(kClean && kCompressed), "compressed logits are never cleaned");

    extern __shared__ __align__(1024) uint8_t smem[];
    uint8_t* smem_q = smem;
    uint8_t* smem_kv = smem + Cfg::kTileQBytes;
    const auto ring = StageRing<kStages>::at(smem_kv + kStages * Cfg::kTileKVBytes);
    uint64_t* q_bar = ring.after();  // q is loaded once

    const uint32_t warp = warp_idx(), lane = lane_idx();
    const uint32_t q0 = blockIdx.x * kQueries;

    ring.init(Cfg::kMathWarps);
    init_barrier(q_bar, 1);
    pdl_wait_primary();

    // The CTA's key range: the union of its queries' [ks, ke), from a BLOCK_KV-aligned key.
    uint32_t lo = seq_len_kv, hi = 0;
#pragma unroll
    for (uint32_t q = 0; q < kQueries; ++q) {
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
            PipelineState<kStages> st;
            for (uint32_t t = 0; t < num_tiles; ++t, st.advance())
                tma_load_2d(smem_kv + st.stage * Cfg::kTileKVBytes, &tmap_kv, ring.acquire(st, Cfg::kTileKVBytes), 0,
                            static_cast<int32_t>(first_key + t * BLOCK_KV));
        }
    } else {
        // ---------------- math warps: keys [warp * kWarpKeys, +kWarpKeys) of every tile ----------------
        constexpr uint32_t kWarpKeys = BLOCK_KV / Cfg::kMathWarps;
        const uint32_t g = lane >> 2, t4 = lane & 3;
        float w[kMI][2];  // weights of this lane's rows i * 16 + h * 8 + g
#pragma unroll
        for (uint32_t i = 0; i < kMI; ++i)
#pragma unroll
            for (uint32_t h = 0; h < 2; ++h) {
                const uint32_t row = i * 16 + h * 8 + g, q = q0 + row / kHeads;
                w[i][h] = q < seq_len ? __ldg(weights + static_cast<size_t>(q) * ld_weights + row % kHeads) : 0.0f;
            }
        Tile tile;
        tile.load_q_scales(lane, [&](uint32_t row) {
            const uint32_t q = q0 + row / kHeads;
            return q < seq_len ? __ldg(q_sf + static_cast<size_t>(q) * kHeads + row % kHeads) : 0u;
        });
        mbarrier_wait(q_bar, 0);
        tile.load_q(smem_addr(smem_q), lane);

        PipelineState<kStages> st;
        for (uint32_t t = 0; t < num_tiles; ++t, st.advance()) {
            const uint32_t key0 = first_key + t * BLOCK_KV + warp * kWarpKeys;
            uint32_t kvs[Tile::kKeyWords] = {};
            if constexpr (kFp4) {
#pragma unroll
                for (uint32_t w = 0; w < Tile::kKeyWords; ++w) {
                    const uint32_t key = Tile::key_of_scale_word(key0, w, lane);
                    kvs[w] = key < seq_len_kv ? __ldg(kv_sf + key) : 0u;
                }
            }
            float acc[kMI][kNI][4];
            tile.mma_stage(ring, st, smem_kv, Cfg::kTileKVBytes, warp * kWarpKeys, lane, kvs, acc);

#pragma unroll
            for (uint32_t j = 0; j < kNI; ++j) {
                const uint32_t col = key0 + j * 8 + 2 * t4;
                // FP8: the per-key scale; FP4: the scales are inside the MMA
                const float s0 = kFp4 ? 1.0f : (col < seq_len_kv ? __ldg(kv_scale + col) : 0.0f);
                const float s1 = kFp4 ? 1.0f : (col + 1 < seq_len_kv ? __ldg(kv_scale + col + 1) : 0.0f);
#pragma unroll
                for (uint32_t q = 0; q < kQueries; ++q) {
                    float v[2];
                    Tile::head_sum(acc, w, q, j, s0, s1, v[0], v[1]);
                    const uint32_t qi = q0 + q;
                    if (g != 0 || qi >= seq_len) continue;
                    // [ks, ke) clamped to the keys there are, as for the CTA's range above
                    const int32_t s = max(__ldg(ks + qi), 0), e = min(__ldg(ke + qi), static_cast<int32_t>(seq_len_kv));
#pragma unroll
                    for (uint32_t c = 0; c < 2; ++c) {
                        const int32_t key = static_cast<int32_t>(col + c);
                        if (key >= static_cast<int32_t>(seq_len_kv)) continue;
                        const bool in = key >= s && key < e;
                        if constexpr (kCompressed) {
                            // a row holds ld_logits columns: keys past them (ke - ks > max_seqlen_k) are dropped
                            if (in && static_cast<uint32_t>(key - s) < ld_logits)
                                logits[static_cast<size_t>(qi) * ld_logits + (key - s)] = to_logit<LogitT>(v[c]);
                        } else {
                            logits[static_cast<size_t>(qi) * ld_logits + key] = to_logit<LogitT>(in ? v[c] : -INFINITY);
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
        for (uint32_t q = 0; q < kQueries; ++q) {
            if (q0 + q >= seq_len) break;
            LogitT* row = logits + static_cast<size_t>(q0 + q) * ld_logits;
            for (uint32_t x = threadIdx.x; x < gap; x += Cfg::kThreads)
                row[x < first_key ? x : end + (x - first_key)] = to_logit<LogitT>(-INFINITY);
        }
    }
    pdl_launch_dependents();
}

}  // namespace sm120
