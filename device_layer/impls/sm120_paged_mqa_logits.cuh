#pragma once
// Paged MQA logits (decode): for batch b, query t < next_n, head h and key j of the batch's paged context,
//     logits[b * next_n + t][j] = sum_h w[b * next_n + t][h] * relu(score(b, t, h, j))     for j < limit(b, t)
// with limit = context_lens[b][t] (2-D lengths) or len(b) - next_n + t + 1 (1-D), and -inf from there to
// max_context_len when cleaning (inside the processed chunks always).
//     FP8: score = (q . kv[j]) * kv_scale[j];   FP4: score = (q * sq) . (kv[j] * skv[j]) (1x32 UE8M0 scales).
//
// KV cache blocks: [num_blocks][kBlockKV][D + 4] bytes, each block's kBlockKV value rows (D bytes, FP4 D/2) first,
// then its kBlockKV fp32 scales (FP4: packed UE8M0 words). Values are fetched by a 3-D TMA map
// (row bytes, kBlockKV, num_blocks); scales by plain loads.
//
// Untrusted indices (CUDA-graph replays skip the host checks): a context length is clamped to [0, the keys its
// block-table row covers] (bt_cols * kBlockKV), so no table read leaves the row; a table entry outside
// [0, num_blocks) names no block: block 0 is read in its place and that block's keys get -inf; schedule entries
// are clamped to the batch range (scheduler/sm120_paged_mqa_logits.cuh).
//
// Work: grid (num_sms, row groups). Row group r covers rows [64 r, 64 r + 64) of the batch's next_n x H
// (query-major) rows; CTA x walks the chunks that schedule_meta gives SM x (scheduler/sm120_paged_mqa_logits.cuh),
// a chunk being one pipeline tile of kTileKeys = max(64, kBlockKV) keys. The producer warp reloads the 64-row
// q block when the batch changes (q_full / q_empty barriers) and issues each tile's block loads; four math warps
// take kTileKeys / 4 keys of each tile (tile/sm120_mqa_tile.cuh for the math).

#include <cuda.h>
#include "../common/sm120_arch.cuh"
#include "../common/sm120_mbarrier.cuh"
#include "../common/sm120_pdl.cuh"
#include "../common/sm120_pipeline.cuh"
#include "../common/sm120_tma.cuh"
#include "../common/sm120_warp.cuh"
#include "../scheduler/sm120_paged_mqa_logits.cuh"
#include "../tile/sm120_mqa_tile.cuh"

namespace sm120 {

template <uint32_t kHeads, uint32_t kHeadDim, uint32_t kBlockKV, uint32_t kStages, bool kFp4,
          ScaleEncoding kEnc = ScaleEncoding::kSelectors>
struct PagedMqaLogitsConfig {
    static constexpr uint32_t kMathWarps = 4;
    static constexpr uint32_t kThreads = kMathWarps * 32 + 32;
    static constexpr uint32_t kTileKeys = kBlockKV < 64 ? 64 : kBlockKV;
    static constexpr uint32_t kBlocksPerTile = kTileKeys / kBlockKV;
    using Tile = MqaTile<kHeads, kHeadDim, kTileKeys / kMathWarps, kFp4, 64, false, kEnc>;
    static constexpr uint32_t kBlockBytes = kBlockKV * Tile::kRowBytes;
    static constexpr uint32_t kTileQBytes = Tile::kRows * Tile::kRowBytes;
    static constexpr uint32_t kTileKVBytes = kTileKeys * Tile::kRowBytes;
    static constexpr uint32_t kSmemBytes = kTileQBytes + kStages * kTileKVBytes + (2 * kStages + 2) * 8;
    static_assert(kBlockKV == 32 || kBlockKV == 64 || kBlockKV == 128, "block_kv: 32, 64 or 128");
    static_assert(kBlockBytes % kSwizzleAtomBytes == 0, "blocks keep the swizzle atom alignment");
    static_assert(kSmemBytes <= kMaxSmemPerBlock, "shared memory exceeds the SM120 per-block budget (101376 B)");
};

template <uint32_t kHeads, uint32_t kHeadDim, uint32_t kBlockKV, uint32_t kStages, bool kFp4, typename LogitT,
          bool kClean, ScaleEncoding kEnc = ScaleEncoding::kSelectors>
// clang-format off: a kernel declaration (see .clang-format)
__global__ void __launch_bounds__(PagedMqaLogitsConfig<kHeads, kHeadDim, kBlockKV, kStages, kFp4, kEnc>::kThreads, 1)
sm120_paged_mqa_logits_kernel(const __grid_constant__ CUtensorMap tmap_q, const __grid_constant__ CUtensorMap tmap_kv,
                              const uint8_t* __restrict__ kv_cache, const uint32_t* __restrict__ q_sf,
                              const float* __restrict__ weights, const int32_t* __restrict__ context_lens,
                              const int32_t* __restrict__ block_table, const int32_t* __restrict__ schedule_meta,
                              LogitT* __restrict__ logits, uint32_t kv_block_stride, uint32_t next_n,
                              uint32_t ctx_ld, uint32_t ctx_2d, uint32_t bt_ld, uint32_t ld_weights,
                              uint32_t ld_logits, uint32_t max_context_len, uint32_t num_batches, uint32_t bt_cols,
                              uint32_t num_blocks) {
    // clang-format on
    using Cfg = PagedMqaLogitsConfig<kHeads, kHeadDim, kBlockKV, kStages, kFp4, kEnc>;
    using Tile = typename Cfg::Tile;
    constexpr uint32_t kMI = Tile::kMI, kNI = Tile::kNI, kQueries = Tile::kQueries;
    constexpr uint32_t kWarpKeys = Cfg::kTileKeys / Cfg::kMathWarps;
    constexpr uint32_t kScaleOffset = kBlockKV * Tile::kRowBytes;  // scales follow the block's values

    extern __shared__ __align__(1024) uint8_t smem[];
    uint8_t* smem_q = smem;
    uint8_t* smem_kv = smem + Cfg::kTileQBytes;
    const auto ring = StageRing<kStages>::at(smem_kv + kStages * Cfg::kTileKVBytes);
    const auto q_ring = StageRing<1>::at(ring.after());  // one q buffer, reloaded when the batch changes

    const uint32_t warp = warp_idx(), lane = lane_idx();
    const uint32_t row_group = blockIdx.y;
    const uint32_t rows_per_batch = next_n * kHeads;

    ring.init(Cfg::kMathWarps);
    q_ring.init(Cfg::kMathWarps);
    pdl_wait_primary();

    // A key's cache block (key < the walker's clamped length: inside the batch's table row); an entry that names
    // no block gives num_blocks, which readers replace by block 0 and mask.
    const uint32_t cap = bt_cols * kBlockKV;
    auto block_of = [&](uint32_t batch, uint32_t key) {
        const int32_t e = __ldg(block_table + static_cast<size_t>(batch) * bt_ld + key / kBlockKV);
        return e >= 0 && static_cast<uint32_t>(e) < num_blocks ? static_cast<uint32_t>(e) : num_blocks;
    };
    auto readable = [&](uint32_t block) { return block < num_blocks ? block : 0u; };
    PagedChunkWalker walk(context_lens, ctx_2d ? next_n : 1u, ctx_ld, Cfg::kTileKeys, num_batches, cap, schedule_meta,
                          blockIdx.x);

    if (warp == Cfg::kMathWarps) {
        // ---------------- producer warp ----------------
        if (lane == 0) {
            tma_prefetch_descriptor(&tmap_q);
            tma_prefetch_descriptor(&tmap_kv);
            PipelineState<kStages> st;
            PipelineState<1> q_st;
            uint32_t seen = ~0u;
            for (; !walk.done(); walk.advance(), st.advance()) {
                if (walk.enter(seen)) {
                    // the math warps may still hold the previous batch's q: acquire waits for their release
                    tma_load_2d(smem_q, &tmap_q, q_ring.acquire(q_st, Cfg::kTileQBytes), 0,
                                static_cast<int32_t>(walk.batch * rows_per_batch + row_group * Tile::kRows));
                    q_st.advance();
                }
                const uint32_t key0 = walk.chunk * Cfg::kTileKeys;
                uint32_t blocks = 0;
#pragma unroll
                for (uint32_t i = 0; i < Cfg::kBlocksPerTile; ++i) blocks += key0 + i * kBlockKV < walk.len ? 1u : 0u;
                uint64_t* full = ring.acquire(st, blocks * Cfg::kBlockBytes);
                for (uint32_t i = 0; i < blocks; ++i)
                    tma_load_3d(smem_kv + st.stage * Cfg::kTileKVBytes + i * Cfg::kBlockBytes, &tmap_kv, full, 0, 0,
                                static_cast<int32_t>(readable(block_of(walk.batch, key0 + i * kBlockKV))));
            }
        }
    } else {
        // ---------------- math warps ----------------
        const uint32_t g = lane >> 2, t4 = lane & 3;
        Tile tile;
        float w[kMI][2];
        PipelineState<kStages> st;
        PipelineState<1> q_st;
        uint32_t seen = ~0u;
        for (; !walk.done(); walk.advance(), st.advance()) {
            const uint32_t b = walk.batch;
            if (walk.enter(seen)) {
                // Weights and (FP4) scale words of this lane's rows; rows past next_n x H weigh 0.
#pragma unroll
                for (uint32_t i = 0; i < kMI; ++i)
#pragma unroll
                    for (uint32_t h = 0; h < 2; ++h) {
                        const uint32_t r = row_group * Tile::kRows + i * 16 + h * 8 + g;
                        w[i][h] = r < rows_per_batch
                                      ? __ldg(weights + static_cast<size_t>(b * next_n + r / kHeads) * ld_weights +
                                              r % kHeads)
                                      : 0.0f;
                    }
                tile.load_q_scales(lane, [&](uint32_t row) {
                    const uint32_t r = row_group * Tile::kRows + row;
                    return r < rows_per_batch ? __ldg(q_sf + static_cast<size_t>(b) * rows_per_batch + r) : 0u;
                });
                q_ring.wait_full(q_st);
                tile.load_q(smem_addr(smem_q), lane);
                q_ring.release(q_st, lane);  // q is in registers: the next batch's TMA may overwrite it
                q_st.advance();
            }
            const uint32_t key0 = walk.chunk * Cfg::kTileKeys + warp * kWarpKeys;
            // The warp's keys lie in one cache block (kWarpKeys divides kBlockKV).
            const bool any = key0 < walk.len;
            const uint32_t block = any ? block_of(b, key0) : num_blocks;
            const bool named = block < num_blocks;  // keys of a block the table does not name: -inf
            const uint8_t* scales =
                any ? kv_cache + static_cast<size_t>(readable(block)) * kv_block_stride + kScaleOffset : nullptr;
            uint32_t kvs[Tile::kKeyWords] = {};
            if constexpr (kFp4) {
#pragma unroll
                for (uint32_t w = 0; w < Tile::kKeyWords; ++w) {
                    const uint32_t key = Tile::key_of_scale_word(key0, w, lane);
                    kvs[w] =
                        any && key < walk.len ? __ldg(reinterpret_cast<const uint32_t*>(scales) + key % kBlockKV) : 0u;
                }
            }
            float acc[kMI][kNI][4];
            tile.mma_stage(ring, st, smem_kv, Cfg::kTileKVBytes, warp * kWarpKeys, lane, kvs, acc);

#pragma unroll
            for (uint32_t j = 0; j < kNI; ++j) {
                const uint32_t col = key0 + j * 8 + 2 * t4;
                float s[2] = {1.0f, 1.0f};
                if constexpr (!kFp4) {
#pragma unroll
                    for (uint32_t c = 0; c < 2; ++c)
                        s[c] = col + c < walk.len ? __ldg(reinterpret_cast<const float*>(scales) + (col + c) % kBlockKV)
                                                  : 0.0f;
                }
#pragma unroll
                for (uint32_t ql = 0; ql < kQueries; ++ql) {
                    float v[2];
                    Tile::head_sum(acc, w, ql, j, s[0], s[1], v[0], v[1]);
                    const uint32_t t = (row_group * Tile::kRows) / kHeads + ql;
                    if (g != 0 || t >= next_n) continue;
                    const uint32_t limit =
                        !named   ? 0u
                        : ctx_2d ? paged_clamp_len(__ldg(context_lens + static_cast<size_t>(b) * ctx_ld + t), cap)
                                 : (walk.len + t + 1 > next_n ? walk.len + t + 1 - next_n : 0u);
#pragma unroll
                    for (uint32_t c = 0; c < 2; ++c) {
                        const uint32_t key = col + c;
                        if (key >= max_context_len) continue;
                        logits[static_cast<size_t>(b * next_n + t) * ld_logits + key] =
                            to_logit<LogitT>(key < limit ? v[c] : -INFINITY);
                    }
                }
            }
            if constexpr (kClean) {
                // The batch's last chunk also writes -inf from its end to max_context_len for the group's queries.
                if (walk.chunk + 1 == walk.chunks) {
                    const uint32_t from = (walk.chunk + 1) * Cfg::kTileKeys;
                    for (uint32_t ql = 0; ql < kQueries; ++ql) {
                        const uint32_t t = (row_group * Tile::kRows) / kHeads + ql;
                        if (t >= next_n) break;
                        LogitT* row = logits + static_cast<size_t>(b * next_n + t) * ld_logits;
                        for (uint32_t key = from + warp * 32 + lane; key < max_context_len; key += Cfg::kMathWarps * 32)
                            row[key] = to_logit<LogitT>(-INFINITY);
                    }
                }
            }
        }
    }
    pdl_launch_dependents();
}

}  // namespace sm120
