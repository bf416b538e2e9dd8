#pragma once
// Persistent tile schedulers for dense and M-grouped GEMMs. CTA b takes tiles b, b + gridDim.x, ...
// Every role of a CTA (TMA producer, math warps) walks the same sequence, skips the same empty tiles,
// and gets the same TileInfo, so no tile state crosses roles.
//
// Raster (dense / contiguous): tiles are walked in groups of kGroupN consecutive N-blocks; inside a group
// the N-block varies fastest, so the CTAs of one wave share a few B column-tiles (and A row-tiles) in L2.

#include "../common/sm120_math.cuh"
#include "../layout/sm120_grouped_layout.cuh"

namespace sm120 {

enum class GemmType : uint32_t {
    kNormal = 0,              // one problem
    kMGroupedContiguous = 1,  // A rows sorted by group; per-row group ids (-1 = padding) or psum ends
    kMGroupedMasked = 2,      // A [G, M, K]; rows >= masked_m[g] of group g are skipped
    kKGroupedContiguous = 3,  // A [sum K, M], B [sum K, N] split along K by group; D [G, M, N]
    kBatched = 4,             // G independent problems in 3-D operand maps (batch = dim 2); D_g at d + g * stride
    kBatchReduce = 5,         // D = sum over g of A_g B_g^T: the K loop runs over (g, K block) pairs
};

struct TileInfo {
    uint32_t a_row;     // first row of the A (first operand) tile in its 2D descriptor
    uint32_t b_row;     // first row of the B (second operand) tile in its 2D descriptor
    uint32_t d_row;     // first row of D written by this tile (= a_row except for masked groups)
    uint32_t n_col;     // first column of D
    uint32_t m_valid;   // rows of the tile that hold real output rows (<= BLOCK_M)
    int32_t group;      // group id (0 for dense)
    uint32_t k_begin;   // first K block of this tile's slice (split-K), inclusive
    uint32_t k_end;     // last K block, exclusive
    uint32_t split;     // split-K slice index (0 without split-K)
    uint32_t k_offset;  // K-grouped: first K row of the group in A/B (the kernel rebases its descriptors)
};

template <uint32_t BLOCK_M, uint32_t BLOCK_N, uint32_t BLOCK_K, uint32_t kGroupN, GemmType kType>
struct GemmTileScheduler {
    static_assert(kGroupN > 0, "group width must be positive");
    static_assert(kType != GemmType::kMGroupedContiguous || kMKAlignmentForContiguousLayout % BLOCK_M == 0,
                  "contiguous grouped tiles must not straddle a group boundary");

    // m: rows of A (dense/contiguous: all rows; masked: rows per group; K-grouped: rows of each D). n: columns.
    uint32_t m, n, num_groups;
    const int32_t* layout;      // contiguous: per-row ids, or psum ends; masked: masked_m per group; K-grouped: K
    uint32_t cur_k_offset = 0;  // K-grouped: sum of K over groups before cur_group
    bool psum;
    // Split-K (dense only): each output tile is computed as num_splits slices of k_blocks_per_split
    // K blocks; slice s of every tile comes after all slices s-1, so a wave spreads over many tiles.
    uint32_t num_k_blocks, num_splits, k_blocks_per_split, tiles_per_split;
    uint32_t num_m_blocks, num_n_blocks, num_tiles, next_tile;
    // Masked: tiles are numbered over the *valid* tiles of groups 0..G-1 only, so masked-out rows cost no
    // scheduling slot and the CTAs stay balanced. A CTA's tile indices only grow, so it walks the groups
    // forward once, keeping the first tile index of the current group.
    uint32_t cur_group = 0, cur_group_first = 0, cur_group_tiles = 0;

    SM120_DEVICE GemmTileScheduler(uint32_t m_, uint32_t n_, uint32_t groups, const int32_t* layout_, bool psum_,
                                   uint32_t k_blocks, uint32_t splits = 1)
        : m(m_), n(n_), num_groups(groups), layout(layout_), psum(psum_), num_k_blocks(k_blocks), num_splits(splits),
          k_blocks_per_split(ceil_div(k_blocks, splits)), num_m_blocks(ceil_div(m_, BLOCK_M)),
          num_n_blocks(ceil_div(n_, BLOCK_N)), next_tile(blockIdx.x) {
        // Masked: an upper bound; the walk over groups ends the sequence when the valid tiles run out.
        tiles_per_split = num_m_blocks * num_n_blocks;
        const bool per_group =
            kType == GemmType::kMGroupedMasked || kType == GemmType::kKGroupedContiguous || kType == GemmType::kBatched;
        num_tiles = tiles_per_split * (per_group ? groups : num_splits);
        if constexpr (kType == GemmType::kMGroupedMasked)
            cur_group_tiles = groups ? valid_m_blocks(0) * num_n_blocks : 0;
    }

    // Tile `t` of one problem -> (m_block, n_block) in grouped raster order.
    SM120_DEVICE void raster(uint32_t t, uint32_t& m_block, uint32_t& n_block) const {
        const uint32_t tiles_per_group = num_m_blocks * kGroupN;
        const uint32_t group = t / tiles_per_group;
        const uint32_t first_n = group * kGroupN;
        const uint32_t width = min(kGroupN, num_n_blocks - first_n);
        const uint32_t in_group = t - group * tiles_per_group;
        n_block = first_n + in_group % width;
        m_block = in_group / width;
    }

    // psum layout: group g owns rows [align_up(end[g-1]), end[g]); find the group whose span holds `row`.
    SM120_DEVICE int32_t psum_group(uint32_t row, uint32_t& end) const {
        uint32_t lo = 0, hi = num_groups;  // first g with end[g] > row
        while (lo < hi) {
            const uint32_t mid = (lo + hi) / 2;
            if (static_cast<uint32_t>(__ldg(layout + mid)) > row) hi = mid;
            else lo = mid + 1;
        }
        if (lo == num_groups) return -1;
        end = static_cast<uint32_t>(__ldg(layout + lo));
        return static_cast<int32_t>(lo);
    }

    SM120_DEVICE uint32_t valid_m_blocks(uint32_t g) const {
        return ceil_div(min(static_cast<uint32_t>(max(__ldg(layout + g), 0)), m), BLOCK_M);
    }

    // Next non-empty tile of this CTA, or false when done.
    SM120_DEVICE bool next(TileInfo& t) {
        while (next_tile < num_tiles) {
            const uint32_t tile = next_tile;
            next_tile += gridDim.x;
            uint32_t m_block, n_block;
            if constexpr (kType == GemmType::kKGroupedContiguous) {
                const uint32_t g = tile / tiles_per_split;
                for (; cur_group < g; ++cur_group) cur_k_offset += static_cast<uint32_t>(__ldg(layout + cur_group));
                raster(tile - g * tiles_per_split, m_block, n_block);
                t.group = static_cast<int32_t>(g);
                t.a_row = m_block * BLOCK_M;  // MN-major operands: the row coordinate is along M / N
                t.b_row = n_block * BLOCK_N;
                t.d_row = g * m + m_block * BLOCK_M;
                t.m_valid = min(BLOCK_M, m - m_block * BLOCK_M);
                t.n_col = n_block * BLOCK_N;
                t.split = 0;
                t.k_offset = cur_k_offset;
                t.k_begin = 0;  // K blocks count from the group's own (rebased) descriptor
                t.k_end = ceil_div(static_cast<uint32_t>(__ldg(layout + g)), BLOCK_K);
                return true;
            } else if constexpr (kType == GemmType::kBatched) {
                const uint32_t g = tile / tiles_per_split;
                raster(tile - g * tiles_per_split, m_block, n_block);
                t.group = static_cast<int32_t>(g);
                t.a_row = m_block * BLOCK_M;  // rows within the batch's slice; the batch is the maps' dim 2
                t.b_row = n_block * BLOCK_N;
                t.d_row = t.a_row;
                t.m_valid = min(BLOCK_M, m - t.a_row);
                t.split = 0;
            } else if constexpr (kType == GemmType::kMGroupedMasked) {
                while (tile >= cur_group_first + cur_group_tiles) {  // advance to the group holding `tile`
                    cur_group_first += cur_group_tiles;
                    if (++cur_group >= num_groups) return false;
                    cur_group_tiles = valid_m_blocks(cur_group) * num_n_blocks;
                }
                const uint32_t g = cur_group;
                const uint32_t rows = min(static_cast<uint32_t>(max(__ldg(layout + g), 0)), m);
                // N-block fastest inside the group, over its valid m-blocks only
                const uint32_t local = tile - cur_group_first;
                n_block = local % num_n_blocks;
                m_block = local / num_n_blocks;
                t.group = static_cast<int32_t>(g);
                t.a_row = g * m + m_block * BLOCK_M;
                t.b_row = g * n + n_block * BLOCK_N;
                t.d_row = t.a_row;
                t.m_valid = min(BLOCK_M, rows - m_block * BLOCK_M);
            } else {
                t.split = tile / tiles_per_split;  // 0 unless split-K (grouped kinds never split)
                raster(tile - t.split * tiles_per_split, m_block, n_block);
                t.a_row = m_block * BLOCK_M;
                t.d_row = t.a_row;
                t.m_valid = min(BLOCK_M, m - t.a_row);
                t.group = 0;
                t.b_row = n_block * BLOCK_N;
                if constexpr (kType == GemmType::kMGroupedContiguous) {
                    if (psum) {
                        uint32_t end = 0;
                        t.group = psum_group(t.a_row, end);
                        if (t.group < 0) continue;
                        // rows before the group's aligned start are padding after the previous group
                        const uint32_t start = t.group == 0
                                                   ? 0u
                                                   : align_up(static_cast<uint32_t>(__ldg(layout + t.group - 1)),
                                                              kMKAlignmentForContiguousLayout);
                        if (t.a_row < start) continue;
                        t.m_valid = min(t.m_valid, end - t.a_row);
                    } else {
                        // the host guarantees one group per block (the block's first row names it); an id
                        // outside [0, G) is padding (-1) or untrusted (a graph replay skips the host check):
                        // either way the block is skipped and its rows of d are left as they are
                        t.group = __ldg(layout + t.a_row);
                        if (t.group < 0 || static_cast<uint32_t>(t.group) >= num_groups) continue;
                    }
                    t.b_row = static_cast<uint32_t>(t.group) * n + n_block * BLOCK_N;
                }
            }
            t.n_col = n_block * BLOCK_N;
            if constexpr (kType == GemmType::kMGroupedMasked || kType == GemmType::kBatched) t.split = 0;
            t.k_offset = 0;
            t.k_begin = t.split * k_blocks_per_split;
            t.k_end = min(num_k_blocks, t.k_begin + k_blocks_per_split);
            return true;
        }
        return false;
    }
};

}  // namespace sm120
