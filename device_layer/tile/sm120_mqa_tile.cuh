#pragma once
// The math shared by the dense, paged and sparse MQA-logits kernels: a block of kRows (queries x heads) rows of
// q held as block-scaled MMA fragments in registers (64 rows for the dense forms, one query's kHeads rows for the
// sparse form), multiplied by a tile of keys from shared memory, and the per-query head reduction
// sum_h w * relu(score) done in registers.
//
// Warp layout: every math warp keeps all kRows rows and takes kWarpKeys keys of the tile, so a query's heads are
// the lane's rows g and g + 8 of the query's m16 tiles, and an xor-shuffle over g (lanes 4, 8, 16 apart)
// finishes the sum in a fixed order (bitwise deterministic).
//
// FP8 (dense forms): kind::mxf8f6f4 m16n8k32 with unit UE8M0 scales (QMMA.SF, the full-rate GeForce form); the
// per-key fp32 scale multiplies the product before the ReLU. MXFP8 (kMxFp8, the sparse form): the same atom with
// the real 1x32 UE8M0 scales, packed one word per q row and per key (lowest block first): k32 step s selects
// byte-id s. FP4: kind::mxf4 m16n8k64 (OMMA.SF) with packed UE8M0 words, one per q row and per key holding the
// four 1x32 blocks of D = 128: k64 step s selects byte-id 2s. Scale words are held as the encoding kEnc says
// (mma/sm120_scale_selectors.cuh): selectors, one q word per two m16 tiles and one key word per four n8 tiles;
// replicated, one of each per tile, every MMA at selector 0.

#include "../common/sm120_arch.cuh"
#include "../common/sm120_ldmatrix.cuh"
#include "../common/sm120_math.cuh"
#include "../common/sm120_pipeline.cuh"
#include "../common/sm120_swizzle.cuh"
#include "../common/sm120_types.cuh"
#include "../mma/sm120.cuh"

namespace sm120 {

constexpr uint32_t kUnitUe8m0x4 = 0x7f7f7f7fu;  // four UE8M0 scales of 2^0

template <typename T>
SM120_DEVICE T to_logit(float v) {
    if constexpr (sizeof(T) == 4) return v;
    else return __float2bfloat16_rn(v);
}

template <uint32_t kHeads, uint32_t kHeadDim, uint32_t kWarpKeys, bool kFp4, uint32_t kRows_ = 64, bool kMxFp8 = false,
          ScaleEncoding kEnc = ScaleEncoding::kSelectors>
struct MqaTile {
    using Lanes = ScaleLanes<kEnc>;
    static constexpr uint32_t kRows = kRows_;  // M: kRows / kHeads queries x kHeads
    static constexpr uint32_t kQueries = kRows / kHeads;
    static constexpr bool kBlockScaled = kFp4 || kMxFp8;                   // scales inside the MMA
    static constexpr uint32_t kRowBytes = kFp4 ? kHeadDim / 2 : kHeadDim;  // one swizzle span per row
    static constexpr uint32_t kMI = kRows / 16, kNI = kWarpKeys / 8, kKSteps = kRowBytes / 32;  // 32 B per MMA
    static constexpr uint32_t kScaleWordsA = Lanes::words_a(kMI);  // q-row scale words per lane
    static constexpr uint32_t kKeyWords = Lanes::words_b(kNI);     // key scale words per lane

    static_assert(kHeads == 16 || kHeads == 32 || kHeads == 64, "heads: 16, 32 or 64");
    static_assert(kHeadDim == 64 || kHeadDim == 128, "head dim: 64 or 128");
    static_assert(!kFp4 || kHeadDim == 128, "FP4: head dim 128 (one packed scale word per row)");
    static_assert(!(kFp4 && kMxFp8), "one operand format");
    static_assert(kRows % kHeads == 0 && kRows % 16 == 0 && kRows <= 64, "whole queries, 1 to 4 m16 tiles");
    static_assert(kNI % 2 == 0 && kNI <= 4, "2 or 4 n8 tiles per warp (B fragments in pairs; one FP4 key word)");

    uint32_t qf[kKSteps][kMI][4];
    uint32_t qs[kScaleWordsA];  // block-scaled: q-row scale words, word w for m16 tile Lanes::tile_a(w, lane)

    // Fragments of the 64 x D q block at q_base (swizzled rows of kRowBytes), once.
    SM120_DEVICE void load_q(uint32_t q_base, uint32_t lane) {
#pragma unroll
        for (uint32_t k = 0; k < kKSteps; ++k)
#pragma unroll
            for (uint32_t i = 0; i < kMI; ++i)
                ldmatrix_x4(q_base + swizzle_offset<kRowBytes>(i * 16 + (lane & 15), 2 * k + (lane >> 4)), qf[k][i][0],
                            qf[k][i][1], qf[k][i][2], qf[k][i][3]);
    }

    // Block-scaled: the q-row scale words this lane supplies; row_word(r) is the packed word of block row r.
    template <typename RowWord>
    SM120_DEVICE void load_q_scales(uint32_t lane, RowWord&& row_word) {
#pragma unroll
        for (uint32_t w = 0; w < kScaleWordsA; ++w)
            qs[w] = kBlockScaled && Lanes::tile_a(w, lane) < kMI
                        ? row_word(Lanes::tile_a(w, lane) * 16 + sfa_row_of_lane(lane))
                        : 0u;
    }

    // acc = q block x keys [key_row0, key_row0 + kWarpKeys) of the tile at kv_base; kvs: block-scaled key words.
    SM120_DEVICE void mma(uint32_t kv_base, uint32_t key_row0, uint32_t lane, const uint32_t (&kvs)[kKeyWords],
                          float (&acc)[kMI][kNI][4]) const {
        const uint32_t b_row = key_row0 + (lane & 7) + ((lane >> 4) << 3), b_chunk = (lane >> 3) & 1;
        fill(acc, 0.0f);
        static_for<0, kKSteps>([&](auto k_c) {
            constexpr uint32_t k = decltype(k_c)::value;
            uint32_t bf[kNI][2];
#pragma unroll
            for (uint32_t j = 0; j < kNI / 2; ++j)
                ldmatrix_x4(kv_base + swizzle_offset<kRowBytes>(b_row + j * 16, 2 * k + b_chunk), bf[2 * j][0],
                            bf[2 * j][1], bf[2 * j + 1][0], bf[2 * j + 1][1]);
            static_for<0, kMI>([&](auto i_c) {
                constexpr uint32_t i = decltype(i_c)::value;
                static_for<0, kNI>([&](auto j_c) {
                    constexpr uint32_t j = decltype(j_c)::value;
                    if constexpr (kFp4)
                        mma_tile_scaled<ScaleKind::kMxFp4, kEnc, i, j, 2 * k, 2 * k>(acc[i][j], qf[k][i], bf[j], qs,
                                                                                     kvs);
                    else if constexpr (kMxFp8)
                        mma_tile_scaled<ScaleKind::kMxFp8, kEnc, i, j, k, k>(acc[i][j], qf[k][i], bf[j], qs, kvs);
                    else mma_mxf8_e4m3_16832<0, 0, 0, 0>(acc[i][j], qf[k][i], bf[j], kUnitUe8m0x4, kUnitUe8m0x4);
                });
            });
        });
    }

    // The consumer step of a KV ring: wait for stage `st` (tiles of stage_bytes from `stages`), acc = q block x
    // the warp's keys [key_row0, key_row0 + kWarpKeys) of it, hand the stage back.
    template <uint32_t kStages>
    SM120_DEVICE void mma_stage(const StageRing<kStages>& ring, PipelineState<kStages> st, const uint8_t* stages,
                                uint32_t stage_bytes, uint32_t key_row0, uint32_t lane,
                                const uint32_t (&kvs)[kKeyWords], float (&acc)[kMI][kNI][4]) const {
        ring.wait_full(st);
        mma(smem_addr(stages + st.stage * stage_bytes), key_row0, lane, kvs, acc);
        ring.release(st, lane);  // every ldmatrix of the stage is done
    }

    // Block-scaled: the key whose scale word w of this lane holds, for keys [key0, key0 + kWarpKeys): key
    // key0 + 8 * (n8 tile) + lane / 4 (selectors: tile 4w + lane % 4; replicated: tile w).
    SM120_DEVICE static uint32_t key_of_scale_word(uint32_t key0, uint32_t w, uint32_t lane) {
        return key0 + Lanes::tile_b(w, lane) * 8 + sfb_col_of_lane(lane);
    }

    // Query q's sum over its heads of w * relu(acc * s) for the lane's columns 2t, 2t + 1 of n8 tile j, reduced
    // over the eight lanes of the column (the result is in every lane). w[i][h]: weight of row i * 16 + h * 8 + g.
    SM120_DEVICE static void head_sum(const float (&acc)[kMI][kNI][4], const float (&w)[kMI][2], uint32_t q, uint32_t j,
                                      float s0, float s1, float& v0, float& v1) {
        v0 = 0.0f, v1 = 0.0f;
#pragma unroll
        for (uint32_t i = 0; i < kMI; ++i) {
            if (i / (kHeads / 16) != q) continue;  // the m16 tiles of query q
#pragma unroll
            for (uint32_t h = 0; h < 2; ++h) {
                v0 = fmaf(w[i][h], fmaxf(acc[i][j][2 * h] * s0, 0.0f), v0);
                v1 = fmaf(w[i][h], fmaxf(acc[i][j][2 * h + 1] * s1, 0.0f), v1);
            }
        }
#pragma unroll
        for (uint32_t off = 4; off < 32; off <<= 1) {
            v0 += __shfl_xor_sync(0xffffffffu, v0, off);
            v1 += __shfl_xor_sync(0xffffffffu, v1, off);
        }
    }
};

}  // namespace sm120
