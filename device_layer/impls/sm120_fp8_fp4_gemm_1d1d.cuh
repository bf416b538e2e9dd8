#pragma once
// Block-scaled GEMM, NT layout, "1D1D" scales:  D[M,N] = alpha * (A·SFA) · (B·SFB)^T (+ C),  fp32 accumulation.
//
//   kMxFp8: A [M, K], B [N, K] e4m3; UE8M0 scales per row and per kGranKA / kGranKB (32 or 128) K elements.
//           DeepSeek's 128x128 weight blocks arrive here as per-row 1x128 scales (the host repeats each block
//           row 128 times, transform_sf_into_required_layout). MMA: QMMA.SF m16n8k32, scale_vec::1X.
//   kMxFp4: A [M, K/2], B [N, K/2] packed e2m1 (low nibble = even K); UE8M0 per 32 K.  OMMA.SF 2X.
//   kNvFp4: as kMxFp4 with UE4M3 scales per 16 K (alpha carries the per-tensor global scales). OMMA.SF 4X.
//   kMxE4M3E2M1 / kMxE2M1E4M3: one operand e4m3, the other packed e2m1; UE8M0 per 32 or 128 K on either
//           side. kind::mxf8f6f4 1X m16n8k32 (QMMA.SF), which takes e2m1 one code per byte: the packed
//           operand is widened in registers (see "Mixed operands" below).
//   kFp8Fp32: A, B e4m3 with FP32 scales per row of A and per column of B for each 128 K (any value, not
//           only powers of two: DeepSeek V3 / Qwen3.5 FP8 checkpoints as shipped). Each stage (one 128-K block)
//           runs QMMA.SF with unit scales into its own FP32 partial, which is then added to the accumulator
//           multiplied by sfa[row] * sfb[col] ("promotion"); no scale is rounded. See "FP32 scales" below.
//
// Scale tensors (sfa, sfb): uint32 words, each packing the scales of 4 consecutive K blocks of one row
// (first block in the lowest byte), stored MN-major: word (g, p, r) at g * group_stride + p * pack_stride + r.
// Because a word's bytes map onto the MMA's byte-id selector, scales go from global memory to the MMA
// without repacking. Every math lane loads the words it must hold under the kernel's scale encoding
// (mma/sm120_scale_selectors.cuh, kEnc: by default one register serves two m16 tiles / four n8 tiles via
// thread-id; the replicated encoding loads one word per tile and runs every MMA at selector 0), one
// stage ahead of their use, straight from global memory (read-only path; the tensors are small and stay in
// L2), so the smem ring holds only A and B.
//
// FP32 scales (kFp8Fp32): sfa / sfb hold floats, [K blocks][rows] MN-major (float k-block stride
// sfa_pack_stride, group stride sfa_group_stride; likewise for B per column), so a lane's rows are one base
// pointer plus compile-time offsets. Each lane loads the scales of the accumulator rows (g, g + 8 of each m16
// tile) and columns (2q, 2q + 1 of each n8 tile) it holds, one stage ahead, as the UE8M0 words are.
//
// Pipeline, scheduling, split-K and M-grouping are the BF16 family's (impls/sm120_bf16_gemm.cuh): a TMA
// producer warpgroup fills kStages 128-byte-per-row stages (128 fp8 or 256 fp4 elements of K), math warps
// read fragments with ldmatrix (the byte layout is the same for e4m3 and packed e2m1) and run four MMA
// steps of 32 bytes of K per stage.
//
// Mixed operands: a stage holds 128 K, i.e. 128-byte rows on the e4m3 side and 64-byte rows (64B swizzle) on
// the packed side. An ldmatrix of the packed side gives lane (g, q) the 8 codes of K 8q..8q+7; they are
// widened to two container words that fill the MMA's slots K 4q..4q+3 and 16+4q..16+4q+3. The e4m3 side is
// read with the same K permutation (8 bytes at K 8q per row, one 64-bit shared load), so A and B agree and
// the sum is unchanged; every MMA step still covers 32 consecutive K, i.e. one scale block.

#include <cuda.h>
#include "../common/sm120_arch.cuh"
#include "../common/sm120_ldmatrix.cuh"
#include "../common/sm120_math.cuh"
#include "../common/sm120_mbarrier.cuh"
#include "../common/sm120_pdl.cuh"
#include "../common/sm120_pipeline.cuh"
#include "../common/sm120_swizzle.cuh"
#include "../common/sm120_tma.cuh"
#include "../common/sm120_warp.cuh"
#include "../mma/sm120.cuh"
#include "../scheduler/sm120_gemm.cuh"
#include "../epilogue/sm120_gemm_epilogue.cuh"
#include "../tile/sm120_gemm_mainloop.cuh"
#include "../tile/sm120_gemm_tile.cuh"

namespace sm120 {

SM120_HOST_DEVICE constexpr bool is_mixed(ScaleKind k) {
    return k == ScaleKind::kMxE4M3E2M1 || k == ScaleKind::kMxE2M1E4M3;
}

// How one operand's scales line up with a stage and its four MMA steps.
template <ScaleKind kKind, uint32_t kGranK>
struct StageScales {
    // 1X MMAs over 32 K (e4m3 or one e2m1 code per byte)
    static constexpr bool kOneByte = kKind == ScaleKind::kMxFp8 || kKind == ScaleKind::kFp8Fp32 || is_mixed(kKind);
    static_assert(!kOneByte || kGranK == 32 || kGranK == 128, "FP8 / mixed scales cover 32 or 128 K");
    static_assert(kKind != ScaleKind::kFp8Fp32 || kGranK == 128, "FP32 scales cover 128 K (one stage)");
    static_assert(kKind != ScaleKind::kMxFp4 || kGranK == 32, "MXFP4 scales cover 32 K");
    static_assert(kKind != ScaleKind::kNvFp4 || kGranK == 16, "NVFP4 scales cover 16 K");
    static constexpr uint32_t kElemsPerStage = kOneByte ? 128 : 256;
    // Words (4 scale blocks each) read per stage: FP8 / mixed 1 (1x32: all four steps; 1x128: one byte of
    // it), MXFP4 2 (two steps each), NVFP4 4 (one step each).
    static constexpr uint32_t kWords = kOneByte ? 1 : kElemsPerStage / kGranK / 4;
    static constexpr bool kCoarse = kGranK == 128;  // one scale per stage, 4 stages per word

    SM120_DEVICE static uint32_t word_index(uint32_t kb, uint32_t w) { return kCoarse ? kb / 4 : kb * kWords + w; }
    // Coarse scales: move this stage's byte to byte 0, which every step then selects.
    SM120_DEVICE static uint32_t shift(uint32_t kb) { return kCoarse ? 8 * (kb % 4) : 0; }
    // Register and byte-id for MMA step `step` (0..3) of a stage.
    SM120_HOST_DEVICE static constexpr uint32_t word_of_step(uint32_t step) {
        return kWords == 1 ? 0 : step / (4 / kWords);
    }
    SM120_HOST_DEVICE static constexpr uint32_t byte_of_step(uint32_t step) {
        return kOneByte ? (kCoarse ? 0 : step) : (kKind == ScaleKind::kMxFp4 ? 2 * (step % 2) : 0);
    }
    SM120_HOST_DEVICE static constexpr uint32_t num_words(uint32_t k) { return ceil_div(ceil_div(k, kGranK), 4u); }
};

// The tile of a scale kind: stage rows are 128 bytes, except a packed e2m1 operand next to an e4m3 one (64-byte
// rows: 128 K per stage on both sides, so mixed stages are smaller and fit deeper pipelines).
template <ScaleKind kKind, uint32_t BLOCK_M, uint32_t BLOCK_N, uint32_t kStages, uint32_t kWarpsM, uint32_t kWarpsN>
using BlockScaledTileConfig = GemmTileConfig<BLOCK_M, BLOCK_N, kKind == ScaleKind::kMxE2M1E4M3 ? 64 : 128, kStages,
                                             kWarpsM, kWarpsN, kKind == ScaleKind::kMxE4M3E2M1 ? 64 : 128>;

// One operand's packed scale words for K block kb (Side: its selector traits, mma/sm120_scale_selectors.cuh):
// word s of each of the lane's kW rows (A) or columns (B), shifted to the block's byte. 0 where the row is outside
// the tile, or the word lies past the last K block (it multiplies TMA's zero fill: 0 keeps the product finite).
template <typename Side, uint32_t kW>
SM120_DEVICE void load_scale_words(uint32_t kb, uint32_t (&words)[Side::kWords][kW], const uint32_t* const (&base)[kW],
                                   const bool (&ok)[kW], uint32_t count, uint32_t stride) {
#pragma unroll
    for (uint32_t s = 0; s < Side::kWords; ++s) {
        const uint32_t p = Side::word_index(kb, s);
#pragma unroll
        for (uint32_t w = 0; w < kW; ++w)
            words[s][w] = ok[w] && p < count ? __ldg(base[w] + static_cast<size_t>(p) * stride) >> Side::shift(kb) : 0u;
    }
}

// Where a math lane's scale words for `tile` of group g come from (ScaleLanes of the encoding,
// mma/sm120_scale_selectors.cuh). Selectors: word w of A serves m16 tiles 2w (lanes % 4 in {0,1}) and 2w+1 ({2,3}),
// word w of B n8 tiles 4w .. 4w+3 (lane % 4). Replicated: word w serves m16 (n8) tile w alone. Masked / batched
// kinds read their group's slices; rows and columns outside the tile are not ok (their words load as 0).
template <typename Cfg, GemmType kType, ScaleEncoding kEnc, uint32_t kWA, uint32_t kWB>
SM120_DEVICE void scale_sources(const TileInfo& tile, uint32_t g, uint32_t m, uint32_t n, uint32_t wm, uint32_t wn,
                                uint32_t lane, const uint32_t* sfa, const uint32_t* sfb, uint32_t sfa_group_stride,
                                uint32_t sfb_group_stride, const uint32_t* (&rows)[kWA], bool (&a_ok)[kWA],
                                const uint32_t* (&cols)[kWB], bool (&b_ok)[kWB]) {
    const uint32_t a_row0 = kType == GemmType::kMGroupedMasked ? tile.a_row - g * m : tile.a_row;
#pragma unroll
    for (uint32_t w = 0; w < kWA; ++w) {
        const uint32_t i = ScaleLanes<kEnc>::tile_a(w, lane);
        const uint32_t local = wm * Cfg::kWarpM + i * 16 + sfa_row_of_lane(lane);
        a_ok[w] = i < Cfg::kMI && local < tile.m_valid;
        rows[w] = sfa +
                  (kType == GemmType::kMGroupedMasked || kType == GemmType::kBatched
                       ? static_cast<size_t>(g) * sfa_group_stride
                       : 0) +
                  a_row0 + local;
    }
#pragma unroll
    for (uint32_t w = 0; w < kWB; ++w) {
        const uint32_t j = ScaleLanes<kEnc>::tile_b(w, lane);
        const uint32_t col = tile.n_col + wn * Cfg::kWarpN + j * 8 + sfb_col_of_lane(lane);
        b_ok[w] = j < Cfg::kNI && col < n;
        cols[w] = sfb + (kType == GemmType::kNormal ? 0 : static_cast<size_t>(g) * sfb_group_stride) + col;
    }
}

// A math lane's FP32 scales (kFp8Fp32) for one tile: the rows g, g + 8 of each of its kMI m16 tiles and the
// columns 2q, 2q + 1 of each of its kNI n8 tiles, as floats at K block kb. Rows and columns outside the tile
// read as 0 (their accumulators are never stored; 0 keeps them finite).
template <typename Cfg, GemmType kType>
struct Fp32TileScales {
    static constexpr uint32_t kMI = Cfg::kMI, kNI = Cfg::kNI;
    const float* a_base;  // row g of the lane's first m16 tile, K block 0
    const float* b_base;  // column 2q of its first n8 tile, K block 0
    uint32_t a_local, b_col, m_valid, n, a_stride, b_stride;

    SM120_DEVICE Fp32TileScales(const TileInfo& tile, uint32_t g, uint32_t m, uint32_t n_, uint32_t wm, uint32_t wn,
                                uint32_t lane, const uint32_t* sfa, const uint32_t* sfb, uint32_t sfa_pack_stride,
                                uint32_t sfa_group_stride, uint32_t sfb_pack_stride, uint32_t sfb_group_stride)
        : a_local(wm * Cfg::kWarpM + lane / 4), b_col(tile.n_col + wn * Cfg::kWarpN + 2 * (lane % 4)),
          m_valid(tile.m_valid), n(n_), a_stride(sfa_pack_stride), b_stride(sfb_pack_stride) {
        const uint32_t a_row0 = kType == GemmType::kMGroupedMasked ? tile.a_row - g * m : tile.a_row;
        const bool a_grouped = kType == GemmType::kMGroupedMasked || kType == GemmType::kBatched;
        a_base = reinterpret_cast<const float*>(sfa) + (a_grouped ? static_cast<size_t>(g) * sfa_group_stride : 0) +
                 a_row0 + a_local;
        b_base = reinterpret_cast<const float*>(sfb) +
                 (kType == GemmType::kNormal ? 0 : static_cast<size_t>(g) * sfb_group_stride) + b_col;
    }

    SM120_DEVICE void load(uint32_t kb, float (&fa)[kMI][2], float (&fb)[kNI][2]) const {
        const float* a = a_base + static_cast<size_t>(kb) * a_stride;
        const float* b = b_base + static_cast<size_t>(kb) * b_stride;
#pragma unroll
        for (uint32_t i = 0; i < kMI; ++i)
#pragma unroll
            for (uint32_t h = 0; h < 2; ++h)
                fa[i][h] = a_local + i * 16 + 8 * h < m_valid ? __ldg(a + i * 16 + 8 * h) : 0.0f;
#pragma unroll
        for (uint32_t j = 0; j < kNI; ++j)
#pragma unroll
            for (uint32_t e = 0; e < 2; ++e) fb[j][e] = b_col + j * 8 + e < n ? __ldg(b + j * 8 + e) : 0.0f;
    }
};

// acc += part * sfa[row] * sfb[col] for each accumulator element a lane holds (m16n8 layout: element e of tile
// (i, j) is row g + 8 * (e / 2), column 2q + e % 2), then part = 0 for the next K block.
template <uint32_t kMI, uint32_t kNI>
SM120_DEVICE void promote(float (&acc)[kMI][kNI][4], float (&part)[kMI][kNI][4], const float (&fa)[kMI][2],
                          const float (&fb)[kNI][2]) {
#pragma unroll
    for (uint32_t i = 0; i < kMI; ++i)
#pragma unroll
        for (uint32_t j = 0; j < kNI; ++j)
#pragma unroll
            for (uint32_t e = 0; e < 4; ++e) {
                acc[i][j][e] = fmaf(part[i][j][e], fa[i][e / 2] * fb[j][e % 2], acc[i][j][e]);
                part[i][j][e] = 0.0f;
            }
}

// A math lane's fragment reads of one MMA step (32 bytes of K) from a stage. 128-byte rows: ldmatrix as for bf16.
// Mixed operands (see the header comment): the packed side's 64-byte rows by ldmatrix, widened to containers; the
// e4m3 side permuted to match, 8 bytes at K 8q of each row by one 64-bit shared load.
template <typename Cfg, ScaleKind kKind>
struct BlockScaledFragments {
    static constexpr uint32_t kMI = Cfg::kMI, kNI = Cfg::kNI;
    // Which operand is packed e2m1 next to an e4m3 one (64-byte stage rows: 128 K per stage on both sides).
    static constexpr bool kAPacked4 = kKind == ScaleKind::kMxE2M1E4M3, kBPacked4 = kKind == ScaleKind::kMxE4M3E2M1;
    static_assert(!kAPacked4 || kMI % 2 == 0, "packed-A fragments are read two m16 tiles at a time");
    static_assert(!kBPacked4 || kNI % 4 == 0, "packed-B fragments are read four n8 tiles at a time");
    uint32_t wm, wn, lane;
    uint32_t a_row, a_chunk, b_row, b_chunk;  // 128-byte rows: the lane's ldmatrix row and 16-byte chunk
    uint32_t g8, q8;                          // mixed: lane (g, q) reads K 8q..8q+7 of its rows

    SM120_DEVICE BlockScaledFragments(uint32_t wm_, uint32_t wn_, uint32_t lane_)
        : wm(wm_), wn(wn_), lane(lane_), a_row(wm_ * Cfg::kWarpM + (lane_ & 15)), a_chunk(lane_ >> 4),
          b_row(wn_ * Cfg::kWarpN + (lane_ & 7) + ((lane_ >> 4) << 3)), b_chunk((lane_ >> 3) & 1), g8(lane_ / 4),
          q8(lane_ % 4) {}

    // x4 of a packed-FP4 operand (64-byte rows): lane l addresses row row0 + l, 16 bytes at K step kk
    SM120_DEVICE void ldmatrix_packed(const uint8_t* tile, uint32_t row0, uint32_t kk, uint32_t (&r)[4]) const {
        ldmatrix_x4(smem_addr(tile + swizzle_offset<64>(row0 + lane, kk)), r[0], r[1], r[2], r[3]);
    }
    // the e4m3 side next to a packed one: 8 bytes at K 8q of row `row`
    SM120_DEVICE uint2 load_permuted(const uint8_t* tile, uint32_t row, uint32_t kk) const {
        return *reinterpret_cast<const uint2*>(tile + swizzle_offset<128>(row, kk * 2 + q8 / 2) + 8 * (q8 % 2));
    }

    SM120_DEVICE void load(const uint8_t* sa, const uint8_t* sb, uint32_t kk, uint32_t (&af)[kMI][4],
                           uint32_t (&bfr)[kNI][2]) const {
        if constexpr (kAPacked4) {  // 64-byte rows; x4 = rows 0-15 of m16 tiles i and i+1
#pragma unroll
            for (uint32_t i = 0; i < kMI; i += 2) {
                uint32_t r[4];
                ldmatrix_packed(sa, wm * Cfg::kWarpM + i * 16, kk, r);
#pragma unroll
                for (uint32_t t = 0; t < 2; ++t) {
                    af[i + t][0] = e2m1x4_to_containers(r[2 * t]), af[i + t][1] = e2m1x4_to_containers(r[2 * t + 1]);
                    af[i + t][2] = e2m1x4_to_containers(r[2 * t] >> 16);
                    af[i + t][3] = e2m1x4_to_containers(r[2 * t + 1] >> 16);
                }
            }
        } else if constexpr (kBPacked4) {  // rows g and g+8 of each m16 tile
#pragma unroll
            for (uint32_t i = 0; i < kMI; ++i)
#pragma unroll
                for (uint32_t h = 0; h < 2; ++h) {
                    const uint2 v = load_permuted(sa, wm * Cfg::kWarpM + i * 16 + h * 8 + g8, kk);
                    af[i][h] = v.x, af[i][2 + h] = v.y;
                }
        } else {
#pragma unroll
            for (uint32_t i = 0; i < kMI; ++i)
                ldmatrix_x4(smem_addr(sa + swizzle_offset<128>(a_row + i * 16, kk * 2 + a_chunk)), af[i][0], af[i][1],
                            af[i][2], af[i][3]);
        }
        if constexpr (kBPacked4) {  // 64-byte rows; x4 = columns of n8 tiles j .. j+3
#pragma unroll
            for (uint32_t j = 0; j < kNI; j += 4) {
                uint32_t r[4];
                ldmatrix_packed(sb, wn * Cfg::kWarpN + j * 8, kk, r);
#pragma unroll
                for (uint32_t t = 0; t < 4; ++t)
                    bfr[j + t][0] = e2m1x4_to_containers(r[t]), bfr[j + t][1] = e2m1x4_to_containers(r[t] >> 16);
            }
        } else if constexpr (kAPacked4) {  // column g of each n8 tile
#pragma unroll
            for (uint32_t j = 0; j < kNI; ++j) {
                const uint2 v = load_permuted(sb, wn * Cfg::kWarpN + j * 8 + g8, kk);
                bfr[j][0] = v.x, bfr[j][1] = v.y;
            }
        } else {
#pragma unroll
            for (uint32_t j = 0; j < kNI / 2; ++j)
                ldmatrix_x4(smem_addr(sb + swizzle_offset<128>(b_row + j * 16, kk * 2 + b_chunk)), bfr[2 * j][0],
                            bfr[2 * j][1], bfr[2 * j + 1][0], bfr[2 * j + 1][1]);
        }
    }
};

template <ScaleKind kKind, uint32_t kGranKA, uint32_t kGranKB, uint32_t BLOCK_M, uint32_t BLOCK_N, uint32_t kStages,
          uint32_t kWarpsM, uint32_t kWarpsN, uint32_t kGroupN, typename OutT, bool kWithC, GemmType kType,
          ScaleEncoding kEnc = ScaleEncoding::kSelectors>
// clang-format off: a kernel declaration (see .clang-format)
__global__ void __launch_bounds__(BlockScaledTileConfig<kKind, BLOCK_M, BLOCK_N, kStages, kWarpsM, kWarpsN>::kThreads, 1)
sm120_fp8_fp4_gemm_1d1d_kernel(const __grid_constant__ CUtensorMap tmap_a, const __grid_constant__ CUtensorMap tmap_b,
                               const uint32_t* __restrict__ sfa, const uint32_t* __restrict__ sfb,
                               OutT* d, const OutT* c, const int32_t* layout, uint32_t m, uint32_t n,
                               uint32_t k, uint32_t ldd, uint32_t ldc, uint32_t num_groups, uint32_t psum_layout,
                               uint32_t num_splits, uint32_t split_stride, uint32_t sfa_pack_stride,
                               uint32_t sfa_group_stride, uint32_t sfb_pack_stride, uint32_t sfb_group_stride,
                               float alpha) {
    // clang-format on
    // k counts elements (fp4: unpacked); C may alias D. Grouped kinds: B and SFB hold one [N, ...] slice per
    // group; masked A / SFA / D hold one [m, ...] slice per group. Split-K slices write fp32 partials to
    // d + s * split_stride.
    // Batched (fp8_einsum's per-head products): 3-D operand maps with the batch as dim 2; batch g's scales at
    // sfa / sfb + g * group_stride, its D (and C) at d / c + g * split_stride.
    static_assert(kType == GemmType::kNormal || kType == GemmType::kMGroupedContiguous ||
                      kType == GemmType::kMGroupedMasked || kType == GemmType::kBatched,
                  "K-grouped and batch-reduce block-scaled GEMMs are not provided");
    static_assert(kKind == ScaleKind::kMxFp8 || is_mixed(kKind) || kGranKA == kGranKB,
                  "FP4 operands share one scale format");
    using Cfg = BlockScaledTileConfig<kKind, BLOCK_M, BLOCK_N, kStages, kWarpsM, kWarpsN>;
    using SA = StageScales<kKind, kGranKA>;
    using SB = StageScales<kKind, kGranKB>;
    constexpr uint32_t kMI = Cfg::kMI, kNI = Cfg::kNI;
    constexpr bool kFp32 = kKind == ScaleKind::kFp8Fp32;
    constexpr uint32_t kWA = ScaleLanes<kEnc>::words_a(kMI);  // scale words per lane (selectors: one per pair of
    constexpr uint32_t kWB = ScaleLanes<kEnc>::words_b(kNI);  // m16 tiles / four n8 tiles; replicated: one per tile)
    static_assert(!kFp32 || kEnc == ScaleEncoding::kSelectors, "FP32 scales: unit-scale MMAs at selector 0 already");
    constexpr uint32_t kElemsPerStage = SA::kElemsPerStage;
    constexpr uint32_t kSteps = 4;  // MMA steps per stage: 32 bytes of K each
    using Mainloop = GemmMainloop<Cfg, kSteps>;
    using Scheduler = GemmTileScheduler<BLOCK_M, BLOCK_N, kElemsPerStage, kGroupN, kType>;

    extern __shared__ __align__(1024) uint8_t smem[];
    const auto ml = Mainloop::at(smem);
    const uint32_t warp = warp_idx(), lane = lane_idx();
    ml.init();
    pdl_wait_primary();  // inputs may come from the previous kernel in the stream

    const uint32_t num_k_blocks = ceil_div(k, kElemsPerStage);

    // The producer: one lane walks the tiles and issues the TMA loads (byte coordinates along K).
    auto load_stage = [&](const TileInfo& tile, uint32_t kb, uint32_t s, uint64_t* full) {
        const int32_t ka = static_cast<int32_t>(kb * Cfg::kRowBytes);
        const int32_t kbb = static_cast<int32_t>(kb * Cfg::kRowBytesB);
        if constexpr (kType == GemmType::kBatched) {
            tma_load_3d(ml.tile_a(s), &tmap_a, full, ka, static_cast<int32_t>(tile.a_row), tile.group);
            tma_load_3d(ml.tile_b(s), &tmap_b, full, kbb, static_cast<int32_t>(tile.b_row), tile.group);
        } else {
            tma_load_2d(ml.tile_a(s), &tmap_a, full, ka, static_cast<int32_t>(tile.a_row));
            tma_load_2d(ml.tile_b(s), &tmap_b, full, kbb, static_cast<int32_t>(tile.b_row));
        }
    };
    auto producer = [&] {
        if (lane != 0) return;
        ml.produce(
            Scheduler(m, n, num_groups, layout, psum_layout != 0, num_k_blocks, num_splits), &tmap_a, &tmap_b, lane,
            [](const TileInfo&) {}, load_stage);
    };
    // The math warps: double-buffered fragments, and the scale words of the current and the next K block.
    auto math = [&] {
        Scheduler sched(m, n, num_groups, layout, psum_layout != 0, num_k_blocks, num_splits);
        const uint32_t wm = warp / kWarpsN, wn = warp % kWarpsN;
        const BlockScaledFragments<Cfg, kKind> frags(wm, wn, lane);
        const uint32_t words_a = SA::num_words(k), words_b = SB::num_words(k);
        TileInfo tile;
        PipelineState<kStages> st;
        uint32_t af[2][kMI][4];
        uint32_t bfr[2][kNI][2];
        auto load_step = [&](uint32_t s, uint32_t kk, auto buf) {
            frags.load(ml.tile_a(s), ml.tile_b(s), kk, af[buf], bfr[buf]);
        };
        while (sched.next(tile)) {
            const uint32_t g = tile.group < 0 ? 0u : static_cast<uint32_t>(tile.group);
            float acc[kMI][kNI][4];
            fill(acc, 0.0f);
            if constexpr (kFp32) {
                const Fp32TileScales<Cfg, kType> src(tile, g, m, n, wm, wn, lane, sfa, sfb, sfa_pack_stride,
                                                     sfa_group_stride, sfb_pack_stride, sfb_group_stride);
                // One set of scale registers: block kb's are used by its promotion at the stage's last step,
                // then block kb + 1's are loaded in their place (advance() runs after that step), a whole
                // stage of MMAs ahead of their use. A second, in-flight set (as the UE8M0 words have) costs
                // kMI * 2 + kNI * 2 registers, which the 128x128 tile does not have under CUDA 13.3+.
                float fa[kMI][2], fb[kNI][2];
                float part[kMI][kNI][4];  // this K block's unscaled products
                fill(part, 0.0f);
                uint32_t kb_next = 0;
                auto scales = stage_data([&](uint32_t kb) { src.load(kb, fa, fb); }, [&](uint32_t kb) { kb_next = kb; },
                                         [&] { src.load(kb_next, fa, fb); });
                auto mma_step = [&](auto step, auto buf) {
                    static_for<0, kMI>([&](auto i_c) {
                        constexpr uint32_t i = decltype(i_c)::value;
                        static_for<0, kNI>([&](auto j_c) {
                            constexpr uint32_t j = decltype(j_c)::value;
                            mma_block_scaled<kKind, 0, 0, 0, 0>(part[i][j], af[buf][i], bfr[buf][j], kUnitScaleWord,
                                                                kUnitScaleWord);
                        });
                    });
                    if constexpr (decltype(step)::value + 1 == kSteps) promote(acc, part, fa, fb);
                };
                ml.consume(st, tile, lane, scales, load_step, mma_step);
            } else {
                const uint32_t* sfa_rows[kWA];
                const uint32_t* sfb_cols[kWB];
                bool a_ok[kWA], b_ok[kWB];
                scale_sources<Cfg, kType, kEnc>(tile, g, m, n, wm, wn, lane, sfa, sfb, sfa_group_stride,
                                                sfb_group_stride, sfa_rows, a_ok, sfb_cols, b_ok);
                uint32_t sa[SA::kWords][kWA], sb[SB::kWords][kWB];            // this K block's
                uint32_t sa_next[SA::kWords][kWA], sb_next[SB::kWords][kWB];  // the next one's, in flight
                auto load_scales = [&](uint32_t kb, uint32_t (&wa)[SA::kWords][kWA], uint32_t (&wb)[SB::kWords][kWB]) {
                    load_scale_words<SA>(kb, wa, sfa_rows, a_ok, words_a, sfa_pack_stride);
                    load_scale_words<SB>(kb, wb, sfb_cols, b_ok, words_b, sfb_pack_stride);
                };
                auto scales = stage_data([&](uint32_t kb) { load_scales(kb, sa, sb); },
                                         [&](uint32_t kb) { load_scales(kb, sa_next, sb_next); },
                                         [&] { assign(sa, sa_next), assign(sb, sb_next); });
                auto mma_step = [&](auto step, auto buf) {
                    constexpr uint32_t kk = decltype(step)::value;
                    static_for<0, kMI>([&](auto i_c) {
                        constexpr uint32_t i = decltype(i_c)::value;
                        static_for<0, kNI>([&](auto j_c) {
                            constexpr uint32_t j = decltype(j_c)::value;
                            mma_tile_scaled<kKind, kEnc, i, j, SA::byte_of_step(kk), SB::byte_of_step(kk)>(
                                acc[i][j], af[buf][i], bfr[buf][j], sa[SA::word_of_step(kk)], sb[SB::word_of_step(kk)]);
                        });
                    });
                };
                ml.consume(st, tile, lane, scales, load_step, mma_step);
            }

            const size_t slice = kType == GemmType::kBatched ? static_cast<size_t>(g) : tile.split;
            const OutT* const c_slice = kType == GemmType::kBatched && kWithC ? c + slice * split_stride : c;
            store_accumulators<kMI, kNI, kType, kWithC>(acc, tile, d + slice * split_stride, c_slice, layout,
                                                        psum_layout != 0, n, ldd, ldc, wm * Cfg::kWarpM,
                                                        wn * Cfg::kWarpN, lane, alpha);
        }
    };
    run_gemm_roles<Cfg, Cfg::kProducerRegs, Cfg::kMathRegs>(warp, producer, math);
}

}  // namespace sm120
