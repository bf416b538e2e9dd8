#pragma once
// Persistent tile scheduler for dense GEMMs. CTA b takes tiles b, b + gridDim.x, ...
// Raster: tiles are walked in groups of kGroupN consecutive N-blocks; inside a group the N-block
// varies fastest, so the CTAs of one wave share a few B column-tiles (and a few A row-tiles) in L2.

#include "../common/sm120_math.cuh"

namespace sm120 {

template <uint32_t BLOCK_M, uint32_t BLOCK_N, uint32_t kGroupN>
struct GemmTileScheduler {
    static_assert(kGroupN > 0, "group width must be positive");

    uint32_t num_m_blocks;
    uint32_t num_n_blocks;
    uint32_t num_tiles;
    uint32_t next_tile;

    SM120_DEVICE GemmTileScheduler(uint32_t m, uint32_t n)
        : num_m_blocks(ceil_div(m, BLOCK_M)), num_n_blocks(ceil_div(n, BLOCK_N)),
          num_tiles(ceil_div(m, BLOCK_M) * ceil_div(n, BLOCK_N)), next_tile(blockIdx.x) {}

    // Tile `t` -> (m_block, n_block) in grouped raster order.
    SM120_DEVICE void tile_coords(uint32_t t, uint32_t& m_block, uint32_t& n_block) const {
        const uint32_t tiles_per_group = num_m_blocks * kGroupN;
        const uint32_t group = t / tiles_per_group;
        const uint32_t first_n = group * kGroupN;
        const uint32_t width = min(kGroupN, num_n_blocks - first_n);
        const uint32_t in_group = t - group * tiles_per_group;
        n_block = first_n + in_group % width;
        m_block = in_group / width;
    }

    SM120_DEVICE bool next(uint32_t& m_block, uint32_t& n_block) {
        if (next_tile >= num_tiles) return false;
        tile_coords(next_tile, m_block, n_block);
        next_tile += gridDim.x;
        return true;
    }
};

}  // namespace sm120
