#pragma once
// sm_90 emulation of the SM120-only block-scaled MMAs. It exists so that complete SM120 kernels (TMA,
// pipeline, scale loading, epilogue) can be validated on an sm_90 GPU from the same source; the atoms in
// mma/sm120.cuh take this branch only when compiled for __CUDA_ARCH__ < 1200.
//
// Scales are fetched with shuffles from exactly the lanes and bytes that mma/sm120_scale_selectors.cuh
// documents for the hardware selectors, never from the calling lane's own register, so a kernel that
// distributes scales wrongly fails here as it would on SM120.
//  - FP8 (1X): one plain e4m3 m16n8k32 MMA (sm_89+) into a zeroed temporary, scaled per row and column.
//  - FP4 (2X / 4X): e2m1 values are multiplied by their (UE8M0 or UE4M3) scale and rounded to bf16, which
//    is exact (at most 6 significant bits), then fed to four bf16 m16n8k16 MMAs. K is reduced in a
//    permuted order that is the same for A and B, which leaves the sum unchanged.

#include "../common/sm120_arch.cuh"
#include "../common/sm120_types.cuh"
#include "sm120.cuh"
#include "sm120_scale_selectors.cuh"

namespace sm120 {
namespace emulation {

SM120_DEVICE uint32_t scale_byte(uint32_t word, uint32_t byte) { return (word >> (8 * byte)) & 0xFFu; }

// The scale register held by `lane` (all lanes take part in the shuffle).
SM120_DEVICE uint32_t scale_word_of(uint32_t word, uint32_t lane) { return __shfl_sync(0xffffffffu, word, lane); }

// e2m1 code (sign in bit 3) -> float: 0, 0.5, 1, 1.5, 2, 3, 4, 6.
SM120_DEVICE float e2m1_to_float(uint32_t code) {
    const uint32_t mag = code & 7u;
    uint32_t bits = mag == 0 ? 0u : (mag == 1 ? 0x3F000000u : (((mag >> 1) + 126u) << 23) | ((mag & 1u) << 22));
    bits |= (code & 8u) << 28;
    return __uint_as_float(bits);
}

// D = A(16x32 e4m3) * B(32x8 e4m3) with fp32 accumulation, no scaling; exists on sm_89+.
SM120_DEVICE void mma_e4m3_16832_unscaled(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    asm(
        "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <uint32_t kByteA, uint32_t kTidA, uint32_t kByteB, uint32_t kTidB>
SM120_DEVICE void mxf8_16832(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2], uint32_t sfa,
                             uint32_t sfb) {
    float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    mma_e4m3_16832_unscaled(t, a, b);
    // This lane's accumulators: rows g, g + 8; columns 2q, 2q + 1.
    const uint32_t lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
    const float sa0 = ue8m0_to_float(scale_byte(scale_word_of(sfa, sfa_lane(g, kTidA)), kByteA));
    const float sa1 = ue8m0_to_float(scale_byte(scale_word_of(sfa, sfa_lane(g + 8, kTidA)), kByteA));
    const float sb0 = ue8m0_to_float(scale_byte(scale_word_of(sfb, sfb_lane(2 * q, kTidB)), kByteB));
    const float sb1 = ue8m0_to_float(scale_byte(scale_word_of(sfb, sfb_lane(2 * q + 1, kTidB)), kByteB));
    d[0] += t[0] * (sa0 * sb0);
    d[1] += t[1] * (sa0 * sb1);
    d[2] += t[2] * (sa1 * sb0);
    d[3] += t[3] * (sa1 * sb1);
}

template <ScaleKind kKind>
SM120_DEVICE float decode_scale(uint32_t byte) {
    if constexpr (kKind == ScaleKind::kNvFp4) return ue4m3_to_float(byte);
    else return ue8m0_to_float(byte);
}

// Four e2m1 codes of `reg` starting at nibble `first`, times `scale`, as two bf16x2: (n0, n1) and (n2, n3).
SM120_DEVICE void dequant_e2m1x4(uint32_t reg, uint32_t first, float scale, uint32_t& lo, uint32_t& hi) {
    const uint32_t s = 4 * first;
    lo = pack_bf16x2(e2m1_to_float(reg >> s) * scale, e2m1_to_float(reg >> (s + 4)) * scale);
    hi = pack_bf16x2(e2m1_to_float(reg >> (s + 8)) * scale, e2m1_to_float(reg >> (s + 12)) * scale);
}

template <ScaleKind kKind, uint32_t kByteA, uint32_t kTidA, uint32_t kByteB, uint32_t kTidB>
SM120_DEVICE void fp4_16864(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2], uint32_t sfa,
                            uint32_t sfb) {
    // m16n8k64 e2m1 fragments (PTX ISA): a[0] row g, K 8q..8q+7; a[1] row g+8, same K; a[2] / a[3] the same
    // rows at K 32+8q..; b[0] column g, K 8q..8q+7; b[1] K 32+8q... Every register lies in one scale chunk:
    // 2X (32 K per scale): chunk 0 for a[0], a[1], b[0] and chunk 1 for the rest; 4X (16 K): q/2 and 2+q/2.
    const uint32_t lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
    const uint32_t wa0 = scale_word_of(sfa, sfa_lane(g, kTidA));
    const uint32_t wa1 = scale_word_of(sfa, sfa_lane(g + 8, kTidA));
    const uint32_t wb = scale_word_of(sfb, sfb_lane(g, kTidB));
    const uint32_t lo_chunk = kKind == ScaleKind::kMxFp4 ? 0u : q / 2;
    const uint32_t hi_chunk = kKind == ScaleKind::kMxFp4 ? 1u : 2 + q / 2;
    const float sa[2][2] = {{decode_scale<kKind>(scale_byte(wa0, kByteA + lo_chunk)),
                             decode_scale<kKind>(scale_byte(wa1, kByteA + lo_chunk))},
                            {decode_scale<kKind>(scale_byte(wa0, kByteA + hi_chunk)),
                             decode_scale<kKind>(scale_byte(wa1, kByteA + hi_chunk))}};
    const float sb[2] = {decode_scale<kKind>(scale_byte(wb, kByteB + lo_chunk)),
                         decode_scale<kKind>(scale_byte(wb, kByteB + hi_chunk))};
    // bf16 m16n8k16 j takes nibbles 4(j%2)..4(j%2)+3 of the low (j < 2) or high K registers: nibbles 0,1 fill
    // the slots at K 2q, 2q+1 and nibbles 2,3 the slots at K 8+2q, 9+2q, in A and B alike.
#pragma unroll
    for (uint32_t j = 0; j < 4; ++j) {
        const uint32_t h = j / 2, first = 4 * (j % 2);
        uint32_t af[4], bf[2];
        dequant_e2m1x4(a[2 * h], first, sa[h][0], af[0], af[2]);
        dequant_e2m1x4(a[2 * h + 1], first, sa[h][1], af[1], af[3]);
        dequant_e2m1x4(b[h], first, sb[h], bf[0], bf[1]);
        mma_bf16_16816(d, af, bf);
    }
}

}  // namespace emulation
}  // namespace sm120
