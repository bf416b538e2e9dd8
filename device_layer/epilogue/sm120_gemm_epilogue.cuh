#pragma once
// The register epilogue of the warp-specialized GEMMs (bf16_gemm, fp8_fp4_gemm_1d1d): a math warp's m16n8
// accumulators to global memory (D = alpha * acc (+ C), or its transpose for swap-AB), and C loaded into
// accumulators before the main loop.

#include "../common/sm120_arch.cuh"
#include "../common/sm120_math.cuh"
#include "../common/sm120_types.cuh"
#include "../common/sm120_warp.cuh"
#include "../scheduler/sm120_gemm.cuh"

namespace sm120 {

// Whether tile-local row `local` is a real output row: inside the tile's valid rows and, for contiguous
// per-row group ids, not a padding row (-1).
template <GemmType kType>
SM120_DEVICE bool tile_row_ok(const TileInfo& tile, uint32_t local, const int32_t* layout, bool psum) {
    if (local >= tile.m_valid) return false;
    if constexpr (kType == GemmType::kMGroupedContiguous)
        if (!psum && __ldg(layout + tile.d_row + local) < 0) return false;
    return true;
}

// C into a warp's accumulators before the main loop (0 where the tile has no output element): the loads then
// overlap the tile's operand TMA and MMAs instead of stalling the epilogue, and the epilogue only stores. Used
// where D = acc + C (alpha 1, no split-K); each thread reads exactly the elements it will write, so C may alias D.
template <uint32_t kMI, uint32_t kNI, GemmType kType, typename OutT>
SM120_DEVICE void load_accumulators(float (&acc)[kMI][kNI][4], const TileInfo& tile, const OutT* c,
                                    const int32_t* layout, bool psum, uint32_t n, uint32_t ldc, uint32_t warp_row0,
                                    uint32_t warp_col0, uint32_t lane) {
    const uint32_t row0 = warp_row0 + (lane >> 2);
    const uint32_t col0 = tile.n_col + warp_col0 + (lane & 3) * 2;
    const bool pairs = ldc % 2 == 0 && reinterpret_cast<uintptr_t>(c) % (2 * sizeof(OutT)) == 0;
#pragma unroll
    for (uint32_t i = 0; i < kMI; ++i)
#pragma unroll
        for (uint32_t h = 0; h < 2; ++h) {
            const uint32_t local = row0 + i * 16 + h * 8;
            const bool row_ok = tile_row_ok<kType>(tile, local, layout, psum);
            const OutT* cr = c + static_cast<size_t>(tile.d_row + local) * ldc;
#pragma unroll
            for (uint32_t j = 0; j < kNI; ++j) {
                const uint32_t col = col0 + j * 8;
                float v0 = 0.0f, v1 = 0.0f;
                if (row_ok && pairs && col + 1 < n) {
                    if constexpr (sizeof(OutT) == 4) {
                        const float2 cv = *reinterpret_cast<const float2*>(cr + col);
                        v0 = cv.x, v1 = cv.y;
                    } else {
                        const float2 cv = __bfloat1622float2(*reinterpret_cast<const bf16x2*>(cr + col));
                        v0 = cv.x, v1 = cv.y;
                    }
                } else if (row_ok) {
                    if (col < n) v0 = static_cast<float>(cr[col]);
                    if (col + 1 < n) v1 = static_cast<float>(cr[col + 1]);
                }
                acc[i][j][2 * h] = v0, acc[i][j][2 * h + 1] = v1;
            }
        }
}

// Register epilogue for a warp's kMI x kNI grid of m16n8 accumulators: D = alpha * acc (+ C), straight
// from registers with bounds checks; each thread reads C only where it writes D, so C may alias D.
// Columns are stored in pairs (8 B fp32 / 4 B bf16) when the row strides allow it.
template <uint32_t kMI, uint32_t kNI, GemmType kType, bool kWithC, typename OutT>
SM120_DEVICE void store_accumulators(const float (&acc)[kMI][kNI][4], const TileInfo& tile, OutT* d, const OutT* c,
                                     const int32_t* layout, bool psum, uint32_t n, uint32_t ldd, uint32_t ldc,
                                     uint32_t warp_row0, uint32_t warp_col0, uint32_t lane, float alpha) {
    const uint32_t row0 = warp_row0 + (lane >> 2);
    const uint32_t col0 = tile.n_col + warp_col0 + (lane & 3) * 2;
    if constexpr (std::is_same<OutT, bf16>::value && !kWithC && kNI % 4 == 0) {
        // bf16 D: a quad holds 4-byte pieces of one row for each n8 tile. Transposed within the quad, every lane
        // owns one tile's whole 16-byte row chunk, so a row leaves in whole sectors with a quarter of the
        // store instructions (run 66: the 4-byte stores cost 8-15 % of mid-K GEMMs). Needs 16-byte rows.
        if (ldd % 8 == 0 && reinterpret_cast<uintptr_t>(d) % 16 == 0) {
            const uint32_t q = lane & 3;
#pragma unroll
            for (uint32_t i = 0; i < kMI; ++i) {
#pragma unroll
                for (uint32_t h = 0; h < 2; ++h) {
                    const uint32_t local = row0 + i * 16 + h * 8;
                    const bool row_ok = tile_row_ok<kType>(tile, local, layout, psum);
                    OutT* dr = d + static_cast<size_t>(tile.d_row + local) * ldd;
#pragma unroll
                    for (uint32_t g = 0; g < kNI / 4; ++g) {
                        uint32_t w[4];
#pragma unroll
                        for (uint32_t t = 0; t < 4; ++t)
                            w[t] = pack_bf16x2(alpha * acc[i][4 * g + t][2 * h], alpha * acc[i][4 * g + t][2 * h + 1]);
                        quad_transpose4(w, lane);  // every lane: the row checks below are per quad
                        const uint32_t col = tile.n_col + warp_col0 + (4 * g + q) * 8;
                        if (!row_ok) continue;
                        if (col + 8 <= n) {
                            *reinterpret_cast<uint4*>(dr + col) = make_uint4(w[0], w[1], w[2], w[3]);
                        } else {
#pragma unroll
                            for (uint32_t e = 0; e < 8; ++e)
                                if (col + e < n)
                                    dr[col + e] =
                                        __ushort_as_bfloat16(static_cast<unsigned short>(w[e / 2] >> (16 * (e % 2))));
                        }
                    }
                }
            }
            return;
        }
    }
    // Pairs need even strides and pair-aligned bases (a batch's D may start at an odd element offset).
    const bool pairs = (ldd % 2 == 0) && (reinterpret_cast<uintptr_t>(d) % (2 * sizeof(OutT)) == 0) &&
                       (!kWithC || (ldc % 2 == 0 && reinterpret_cast<uintptr_t>(c) % (2 * sizeof(OutT)) == 0));
#pragma unroll
    for (uint32_t i = 0; i < kMI; ++i) {
#pragma unroll
        for (uint32_t h = 0; h < 2; ++h) {
            const uint32_t local = row0 + i * 16 + h * 8;
            if (!tile_row_ok<kType>(tile, local, layout, psum)) continue;
            const uint32_t row = tile.d_row + local;
#pragma unroll
            for (uint32_t j = 0; j < kNI; ++j) {
                const uint32_t col = col0 + j * 8;
                float v0 = alpha * acc[i][j][2 * h], v1 = alpha * acc[i][j][2 * h + 1];
                OutT* dp = d + static_cast<size_t>(row) * ldd + col;
                const OutT* cp = kWithC ? c + static_cast<size_t>(row) * ldc + col : nullptr;
                if (pairs && col + 1 < n) {
                    if constexpr (sizeof(OutT) == 4) {
                        if constexpr (kWithC) {
                            const float2 cv = *reinterpret_cast<const float2*>(cp);
                            v0 += cv.x, v1 += cv.y;
                        }
                        *reinterpret_cast<float2*>(dp) = make_float2(v0, v1);
                    } else {
                        if constexpr (kWithC) {
                            const float2 cv = __bfloat1622float2(*reinterpret_cast<const bf16x2*>(cp));
                            v0 += cv.x, v1 += cv.y;
                        }
                        *reinterpret_cast<bf16x2*>(dp) = __floats2bfloat162_rn(v0, v1);
                    }
                } else {
                    if (col < n) {
                        if constexpr (kWithC) v0 += static_cast<float>(cp[0]);
                        dp[0] = static_cast<OutT>(v0);
                    }
                    if (col + 1 < n) {
                        if constexpr (kWithC) v1 += static_cast<float>(cp[1]);
                        dp[1] = static_cast<OutT>(v1);
                    }
                }
            }
        }
    }
}

// Swap-AB epilogue (the kernel computed D^T = B A^T): kernel rows index D's columns and kernel columns D's rows,
// D = acc^T (+ C). Lanes with consecutive kernel rows write consecutive addresses; each thread reads C only where
// it writes D, so C may alias D.
template <uint32_t kMI, uint32_t kNI, GemmType kType, bool kWithC, typename OutT>
SM120_DEVICE void store_accumulators_transposed(const float (&acc)[kMI][kNI][4], const TileInfo& tile, OutT* d,
                                                const OutT* c, const int32_t* layout, bool psum, uint32_t n,
                                                uint32_t ldd, uint32_t ldc, uint32_t warp_row0, uint32_t warp_col0,
                                                uint32_t lane) {
    const uint32_t row0 = warp_row0 + (lane >> 2);
    const uint32_t col0 = tile.n_col + warp_col0 + (lane & 3) * 2;
#pragma unroll
    for (uint32_t i = 0; i < kMI; ++i)
#pragma unroll
        for (uint32_t h = 0; h < 2; ++h) {
            const uint32_t local = row0 + i * 16 + h * 8;
            if (!tile_row_ok<kType>(tile, local, layout, psum)) continue;
            const uint32_t row = tile.d_row + local;
#pragma unroll
            for (uint32_t j = 0; j < kNI; ++j)
#pragma unroll
                for (uint32_t e = 0; e < 2; ++e) {
                    const uint32_t col = col0 + j * 8 + e;
                    if (col >= n) continue;
                    float v = acc[i][j][2 * h + e];
                    if constexpr (kWithC) v += static_cast<float>(c[static_cast<size_t>(col) * ldc + row]);
                    d[static_cast<size_t>(col) * ldd + row] = static_cast<OutT>(v);
                }
        }
}

}  // namespace sm120
