#pragma once
// Pieces shared by the warp-specialized GEMM families (bf16_gemm, fp8_fp4_gemm_1d1d): the tile / warp /
// register budget of a kernel configuration, and the register epilogue.

#include "../common/sm120_arch.cuh"
#include "../common/sm120_math.cuh"
#include "../common/sm120_swizzle.cuh"
#include "../common/sm120_types.cuh"
#include "../common/sm120_warp.cuh"
#include "../scheduler/sm120_gemm.cuh"

namespace sm120 {

// A BLOCK_M x BLOCK_N tile whose A stages are kRowBytes per row and B stages kRowBytesB (one swizzle span each;
// they differ only for mixed FP8 x packed-FP4 operands), kWarpsM x kWarpsN math warps plus one producer warpgroup.
template <uint32_t BLOCK_M, uint32_t BLOCK_N, uint32_t kRowBytes_, uint32_t kStages, uint32_t kWarpsM, uint32_t kWarpsN,
          uint32_t kRowBytesB_ = kRowBytes_>
struct GemmTileConfig {
    static constexpr uint32_t kRowBytes = kRowBytes_;
    static constexpr uint32_t kRowBytesB = kRowBytesB_;
    static constexpr uint32_t kMathWarps = kWarpsM * kWarpsN;
    static constexpr uint32_t kMathThreads = kMathWarps * 32;
    static constexpr uint32_t kThreads = kMathThreads + 128;  // + one producer warpgroup
    static constexpr uint32_t kWarpM = BLOCK_M / kWarpsM;
    static constexpr uint32_t kWarpN = BLOCK_N / kWarpsN;
    static constexpr uint32_t kMI = kWarpM / 16;
    static constexpr uint32_t kNI = kWarpN / 8;
    static constexpr uint32_t kTileABytes = BLOCK_M * kRowBytes;
    static constexpr uint32_t kTileBBytes = BLOCK_N * kRowBytesB;
    static constexpr uint32_t kStageBytes = kTileABytes + kTileBBytes;
    static constexpr uint32_t kBarrierBytes = 2 * kStages * sizeof(uint64_t);
    static constexpr uint32_t kSmemBytes = kStages * kStageBytes + kBarrierBytes;
    // Register split after setmaxnreg: the producer keeps 40, math warps take the rest (multiple of 8).
    static constexpr uint32_t kProducerRegs = 40;
    static constexpr uint32_t kMathRegs =
        ((65536 - 128 * kProducerRegs) / kMathThreads) / 8 * 8 > 240 ? 240
                                                                     : ((65536 - 128 * kProducerRegs) / kMathThreads) / 8 * 8;

    // Registers per thread at entry under __launch_bounds__(kThreads, 1). setmaxnreg.inc may only grow a
    // warp's allocation, so reallocate only when the math warps want more than that (384-thread kernels);
    // 256-thread kernels already start with the 255-register maximum.
    static constexpr uint32_t kEntryRegs = (65536 / kThreads) / 8 * 8 > 255 ? 255 : (65536 / kThreads) / 8 * 8;
    static constexpr bool kReallocRegs = kMathRegs > kEntryRegs;

    static_assert(kMathWarps % 4 == 0, "math warps must form whole warpgroups (setmaxnreg is per warpgroup)");
    static_assert(kWarpM % 16 == 0 && kWarpN % 16 == 0, "warp tile must be a multiple of 16x16");
    static_assert((kRowBytes == 64 || kRowBytes == 128) && (kRowBytesB == 64 || kRowBytesB == 128),
                  "stage rows are one 64B or 128B swizzle span");
    static_assert(kTileABytes % kSwizzleAtomBytes == 0 && kTileBBytes % kSwizzleAtomBytes == 0,
                  "tiles must keep 1024-byte swizzle-atom alignment");
    static_assert(kSmemBytes <= kMaxSmemPerBlock, "shared memory exceeds the SM120 per-block budget (101376 B)");
    static_assert(BLOCK_M <= 256 && BLOCK_N <= 256, "TMA box dimensions are limited to 256");
};

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
                                    dr[col + e] = __ushort_as_bfloat16(static_cast<unsigned short>(w[e / 2] >> (16 * (e % 2))));
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

}  // namespace sm120
