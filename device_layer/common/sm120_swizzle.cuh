#pragma once
// Address math for TMA's swizzled shared-memory layouts (CU_TENSOR_MAP_SWIZZLE_{32,64,128}B).
// A tile is stored in rows of kRowBytes (= the swizzle span); the 16-byte chunk c of row r lands at
// chunk c ^ ((r / (128 / kRowBytes)) % (kRowBytes / 16)), i.e. byte-address bits [4, 4+log2(span/16))
// are XORed with bits [7, ...). Tiles must be aligned to 1024 bytes (the largest swizzle atom).

#include "sm120_arch.cuh"

namespace sm120 {

constexpr uint32_t kSwizzle128BRowBytes = 128;
constexpr uint32_t kSwizzleAtomBytes = 1024;

template <uint32_t kRowBytes>
SM120_HOST_DEVICE uint32_t swizzle_offset(uint32_t row, uint32_t chunk) {
    static_assert(kRowBytes == 32 || kRowBytes == 64 || kRowBytes == 128, "swizzle span is 32, 64 or 128 bytes");
    constexpr uint32_t kChunks = kRowBytes / 16;
    constexpr uint32_t kRowsPer128B = 128 / kRowBytes;
    return row * kRowBytes + ((chunk ^ ((row / kRowsPer128B) % kChunks)) << 4);
}

}  // namespace sm120
