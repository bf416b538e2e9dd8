#pragma once
// Sparse and paged-sparse MQA logits (DeepSeek V4.1 indexer; docs/sparse_mqa_logits.md). Query row r scores
// only the KV blocks its slot table names: for slot s, (first physical KV row p, valid count n) =
// metadata[r][s], and for o < B (B = sparse block, a runtime power of two):
//     logits[r][s * B + o] = sum_h w[r][h] * relu( (q[r][h] * sq[r][h]) . (kv[p + o] * skv[p + o]) )   if o < n
//                          = -inf                                                                     otherwise
// with MXFP8 (e4m3) or MXFP4 (packed e2m1) values and packed UE8M0 1x32 scales on both sides (inside the MMA:
// QMMA.SF / OMMA.SF at full rate). Every element of the [rows, num_slots * B] output is written.
//
// KV rows live in pages: a 3-D TMA map (row bytes, page_rows, pages), physical row p = page * page_rows + in-page
// row. The contiguous form is one page of all N rows; the paged form is the cache [pages][page_rows][D + 4] (a
// page's values, then its scales). total_rows = pages * page_rows bounds every table entry. A block never straddles a page (page_rows % B == 0, or one page), so each
// block is one TMA box of B rows. Scale words: kv_sf + page * sf_page_stride + 4 * in-page row.
//
// Work: grid (rows, tile groups). A CTA owns one query row (its kHeads rows of q stay in registers) and
// `tiles_per_cta` consecutive 64-key tiles of that row's slots; the producer warp issues one box per valid block
// of a tile (padding slots load nothing and come out -inf), four math warps take 16 keys of each tile.

#include <cuda.h>
#include "../common/sm120_arch.cuh"
#include "../common/sm120_mbarrier.cuh"
#include "../common/sm120_pdl.cuh"
#include "../common/sm120_pipeline.cuh"
#include "../common/sm120_tma.cuh"
#include "../common/sm120_warp.cuh"
#include "../tile/sm120_mqa_tile.cuh"

namespace sm120 {

template <uint32_t kHeads, uint32_t kHeadDim, uint32_t kStages, bool kFp4,
          ScaleEncoding kEnc = ScaleEncoding::kSelectors>
struct SparseMqaLogitsConfig {
    static constexpr uint32_t kMathWarps = 4;
    static constexpr uint32_t kThreads = kMathWarps * 32 + 32;  // + the producer warp
    static constexpr uint32_t kTileKeys = 64;                   // 8, 4 or 2 blocks of 8, 16 or 32 keys
    static constexpr uint32_t kWarpKeys = kTileKeys / kMathWarps;
    using Tile = MqaTile<kHeads, kHeadDim, kWarpKeys, kFp4, kHeads, !kFp4, kEnc>;
    static constexpr uint32_t kTileQBytes = kHeads * Tile::kRowBytes;
    static constexpr uint32_t kTileKVBytes = kTileKeys * Tile::kRowBytes;
    static constexpr uint32_t kSmemBytes = kTileQBytes + kStages * kTileKVBytes + (2 * kStages + 1) * 8;
    // Two CTAs per SM: one streams while the other runs its epilogue.
    static_assert(2 * kSmemBytes <= kMaxSmemPerBlock, "two CTAs per SM within the SM120 shared-memory budget");
    static_assert(kTileQBytes % kSwizzleAtomBytes == 0, "the KV ring keeps the swizzle atom alignment");
};

// A slot's table entry (first physical row, valid count); (0, 0) past the row's slots and for any entry whose
// rows leave the KV (a hand-made table can never make the kernel read outside it).
SM120_DEVICE int2 sparse_slot(const int2* __restrict__ row_meta, uint32_t slot, uint32_t num_slots,
                              uint32_t total_rows) {
    const int2 m = slot < num_slots ? __ldg(row_meta + slot) : make_int2(0, 0);
    const bool ok = m.y > 0 && m.x >= 0 && static_cast<uint64_t>(m.x) + static_cast<uint32_t>(m.y) <= total_rows;
    return ok ? m : make_int2(0, 0);
}

template <uint32_t kHeads, uint32_t kHeadDim, uint32_t kStages, bool kFp4,
          ScaleEncoding kEnc = ScaleEncoding::kSelectors>
// clang-format off: a kernel declaration (see .clang-format)
__global__ void __launch_bounds__(SparseMqaLogitsConfig<kHeads, kHeadDim, kStages, kFp4, kEnc>::kThreads, 2)
sm120_sparse_mqa_logits_kernel(const __grid_constant__ CUtensorMap tmap_q, const __grid_constant__ CUtensorMap tmap_kv,
                               const uint32_t* __restrict__ q_sf, const uint8_t* __restrict__ kv_sf,
                               const bf16* __restrict__ weights, const int32_t* __restrict__ metadata,
                               bf16* __restrict__ logits, uint32_t num_slots, uint32_t block_log2,
                               uint32_t page_rows, uint32_t total_rows, uint32_t sf_page_stride,
                               uint32_t tiles_per_cta,
                               uint32_t ld_weights, uint32_t ld_logits) {
    // clang-format on
    using Cfg = SparseMqaLogitsConfig<kHeads, kHeadDim, kStages, kFp4, kEnc>;
    using Tile = typename Cfg::Tile;
    constexpr uint32_t kMI = Tile::kMI, kNI = Tile::kNI, kTileKeys = Cfg::kTileKeys, kWarpKeys = Cfg::kWarpKeys;

    extern __shared__ __align__(1024) uint8_t smem[];
    uint8_t* smem_q = smem;
    uint8_t* smem_kv = smem + Cfg::kTileQBytes;
    const auto ring = StageRing<kStages>::at(smem_kv + kStages * Cfg::kTileKVBytes);
    uint64_t* q_bar = ring.after();  // q is loaded once

    const uint32_t warp = warp_idx(), lane = lane_idx();
    const uint32_t row = blockIdx.x;
    const uint32_t block = 1u << block_log2;
    const uint32_t row_keys = num_slots << block_log2;
    const uint32_t first_tile = blockIdx.y * tiles_per_cta;
    const uint32_t num_tiles = min(tiles_per_cta, ceil_div(row_keys, kTileKeys) - first_tile);
    const int2* row_meta = reinterpret_cast<const int2*>(metadata) + static_cast<size_t>(row) * num_slots;

    ring.init(Cfg::kMathWarps);
    init_barrier(q_bar, 1);
    pdl_wait_primary();

    if (warp == Cfg::kMathWarps) {
        // ---------------- producer warp: one B-row box per valid block ----------------
        if (lane == 0) {
            tma_prefetch_descriptor(&tmap_q);
            tma_prefetch_descriptor(&tmap_kv);
            mbarrier_arrive_expect_tx(q_bar, Cfg::kTileQBytes);
            tma_load_2d(smem_q, &tmap_q, q_bar, 0, static_cast<int32_t>(row * kHeads));
            const uint32_t box_bytes = block * Tile::kRowBytes, blocks_per_tile = kTileKeys >> block_log2;
            PipelineState<kStages> st;
            for (uint32_t t = 0; t < num_tiles; ++t, st.advance()) {
                const uint32_t slot0 = (first_tile + t) * blocks_per_tile;
                ring.wait_empty(st);
                uint32_t boxes = 0;
                for (uint32_t i = 0; i < blocks_per_tile; ++i)
                    boxes += sparse_slot(row_meta, slot0 + i, num_slots, total_rows).y > 0 ? 1u : 0u;
                // Arm the barrier with the whole tile's bytes before the first box can complete on it.
                uint64_t* full = ring.arm(st, boxes * box_bytes);
                for (uint32_t i = 0; i < blocks_per_tile; ++i) {
                    const int2 m = sparse_slot(row_meta, slot0 + i, num_slots, total_rows);
                    if (m.y <= 0) continue;
                    const uint32_t p = static_cast<uint32_t>(m.x), page = p / page_rows;
                    tma_load_3d(smem_kv + st.stage * Cfg::kTileKVBytes + i * box_bytes, &tmap_kv, full, 0,
                                static_cast<int32_t>(p - page * page_rows), static_cast<int32_t>(page));
                }
            }
        }
    } else {
        // ---------------- math warps: keys [16 warp, 16 warp + 16) of every tile ----------------
        const uint32_t g = lane >> 2, t4 = lane & 3;
        float w[kMI][2];  // weights of this lane's heads i * 16 + h * 8 + g
#pragma unroll
        for (uint32_t i = 0; i < kMI; ++i)
#pragma unroll
            for (uint32_t h = 0; h < 2; ++h)
                w[i][h] = __bfloat162float(weights[static_cast<size_t>(row) * ld_weights + i * 16 + h * 8 + g]);
        Tile tile;
        tile.load_q_scales(lane, [&](uint32_t head) { return __ldg(q_sf + static_cast<size_t>(row) * kHeads + head); });
        mbarrier_wait(q_bar, 0);
        tile.load_q(smem_addr(smem_q), lane);

        PipelineState<kStages> st;
        for (uint32_t t = 0; t < num_tiles; ++t, st.advance()) {
            const uint32_t key0 = (first_tile + t) * kTileKeys + warp * kWarpKeys;  // the warp's first column
            // The key scale words this lane supplies: 0 (2^-127) for a masked key, whose score is never kept.
            uint32_t kvs[Tile::kKeyWords] = {};
#pragma unroll
            for (uint32_t w = 0; w < Tile::kKeyWords; ++w) {
                const uint32_t col = Tile::key_of_scale_word(key0, w, lane);
                const int2 m = sparse_slot(row_meta, col >> block_log2, num_slots, total_rows);
                const uint32_t o = col & (block - 1);
                if (static_cast<int32_t>(o) < m.y) {
                    const uint32_t p = static_cast<uint32_t>(m.x) + o, page = p / page_rows;
                    kvs[w] = __ldg(reinterpret_cast<const uint32_t*>(
                        kv_sf + static_cast<size_t>(page) * sf_page_stride + 4ull * (p - page * page_rows)));
                }
            }
            float acc[kMI][kNI][4];
            tile.mma_stage(ring, st, smem_kv, Cfg::kTileKVBytes, warp * kWarpKeys, lane, kvs, acc);

#pragma unroll
            for (uint32_t j = 0; j < kNI; ++j) {
                float v[2];
                Tile::head_sum(acc, w, 0, j, 1.0f, 1.0f, v[0], v[1]);
                const uint32_t c = key0 + j * 8 + 2 * t4;  // columns c, c + 1: one block (B is even)
                if (g != j || c >= row_keys) continue;     // lanes g = j store n8 tile j (after the reduction)
                const int32_t count = sparse_slot(row_meta, c >> block_log2, num_slots, total_rows).y;
                const int32_t oc = static_cast<int32_t>(c & (block - 1));
                __nv_bfloat162 pair;
                pair.x = to_logit<bf16>(oc < count ? v[0] : -INFINITY);
                pair.y = to_logit<bf16>(oc + 1 < count ? v[1] : -INFINITY);
                *reinterpret_cast<__nv_bfloat162*>(logits + static_cast<size_t>(row) * ld_logits + c) = pair;
            }
        }
    }
    pdl_launch_dependents();
}

}  // namespace sm120
