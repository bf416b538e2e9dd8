#pragma once
// Address math for TMA's CU_TENSOR_MAP_SWIZZLE_128B layout: within each 1024-byte atom (8 rows of
// 128 bytes) the 16-byte chunk c of row r is stored at chunk c ^ (r % 8). Tiles must be 1024-byte aligned.

#include "sm120_arch.cuh"

namespace sm120 {

constexpr uint32_t kSwizzle128BRowBytes = 128;
constexpr uint32_t kSwizzle128BAtomBytes = 1024;

// Byte offset of 16-byte chunk `chunk` (0..7) of row `row` in a 128B-swizzled tile.
SM120_HOST_DEVICE uint32_t swizzle_128b_offset(uint32_t row, uint32_t chunk) {
    return row * kSwizzle128BRowBytes + ((chunk ^ (row & 7u)) << 4);
}

}  // namespace sm120
