#pragma once
// sm_90 emulation of the SM120-only block-scaled MMAs. It exists so that complete SM120 kernels (TMA,
// pipeline, scale loading, epilogue) can be validated on an sm_90 GPU from the same source; the atoms in
// mma/sm120_block_scaled.cuh take this branch only when compiled for __CUDA_ARCH__ < 1200.
//
// Scales are fetched with shuffles from exactly the lanes and bytes that mma/sm120_scale_selectors.cuh
// documents for the hardware selectors, never from the calling lane's own register, so a kernel that
// distributes scales wrongly fails here as it would on SM120.
//
// Every variant reduces to unscaled e4m3 m16n8k32 MMAs (sm_89+) into a zeroed temporary that is then
// scaled per accumulator row and column: exact products, fp32 sums, one scale chunk per temporary.
//  - FP8 (1X): one MMA. Mixed e4m3 / e2m1 (kind::mxf8f6f4, e2m1 in bits [5:2] of a byte): e2m1 widened first.
//  - FP4: e2m1 codes are widened to e4m3 (exact; a byte permute over an 8-entry table). A thread's eight
//    codes in a[0] (row g, K 8q..8q+7) fill its e4m3 slots K 4q..4q+3 and 16+4q..16+4q+3; B is permuted the
//    same way, which leaves the sum unchanged. MXFP4 (2X): one MMA per 32-K chunk. NVFP4 (4X): 16-K chunks
//    are split across threads (q/2), so each chunk gets its own MMA with the other threads' B zeroed.
// UE8M0 scales are applied by adding exponents (ldexpf of the fp32 sum), as silicon does, so a product of two
// large scales does not overflow where the scaled result is finite; UE4M3 pairs (at most 448^2) are multiplied.
//
// SM120_EMULATION_SELECTORS_IGNORED=1 (set by the host for sm_90 builds only, DG_SM120_EMULATE_SELECTORS=ignored):
// the emulation reads every non-zero thread-id / byte-id selector as 0, as silicon that disagreed with our reading
// of the PTX ISA might. Kernels in the selector encoding then compute wrong results and the replicated encoding
// stays right, which is how the self-test's verdicts and the automatic fallback are tested without SM120 silicon.

#include "../common/sm120_arch.cuh"
#include "sm120_scale_selectors.cuh"

#ifndef SM120_EMULATION_SELECTORS_IGNORED
#define SM120_EMULATION_SELECTORS_IGNORED 0
#endif

namespace sm120 {
namespace emulation {

constexpr bool kSelectorsIgnored = SM120_EMULATION_SELECTORS_IGNORED != 0;
// The selector the emulated hardware acts on (the documented one, or 0 under the switch above).
SM120_HOST_DEVICE constexpr uint32_t seen(uint32_t selector) { return kSelectorsIgnored ? 0u : selector; }

SM120_DEVICE uint32_t scale_byte(uint32_t word, uint32_t byte) { return (word >> (8 * byte)) & 0xFFu; }

// The scale register held by `lane` (all lanes take part in the shuffle).
SM120_DEVICE uint32_t scale_word_of(uint32_t word, uint32_t lane) { return __shfl_sync(0xffffffffu, word, lane); }

// Four e2m1 codes (bits 0..15, sign in bit 3 of each) -> four e4m3 bytes. Magnitudes 0, .5, 1, 1.5, 2, 3, 4, 6
// are e4m3 0x00, 0x30, 0x38, 0x3C, 0x40, 0x44, 0x48, 0x4C; signs move from bit 4j+3 to bit 8j+7.
SM120_DEVICE uint32_t e2m1x4_to_e4m3x4(uint32_t codes) {
    const uint32_t mag = __byte_perm(0x3C383000u, 0x4C484440u, codes & 0x7777u);
    const uint32_t s = codes & 0x8888u;
    return mag | ((s & 0x8u) << 4) | ((s & 0x80u) << 8) | ((s & 0x800u) << 12) | ((s & 0x8000u) << 16);
}

// One operand register of kind::mxf8f6f4: four e4m3 bytes as they are, or four e2m1 codes held in bits
// [5:2] of each byte, widened to e4m3.
template <bool kE2M1>
SM120_DEVICE uint32_t operand_to_e4m3(uint32_t word) {
    if constexpr (!kE2M1) {
        return word;
    } else {
        const uint32_t c = (word >> 2) & 0x0F0F0F0Fu;  // code j in bits 8j..8j+3
        return e2m1x4_to_e4m3x4((c & 0xFu) | ((c >> 4) & 0xF0u) | ((c >> 8) & 0xF00u) | ((c >> 12) & 0xF000u));
    }
}

// D = A(16x32 e4m3) * B(32x8 e4m3) with fp32 accumulation, no scaling; exists on sm_89+.
SM120_DEVICE void mma_e4m3_16832_unscaled(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    asm("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// d += (A * B) scaled by this lane's accumulator rows (g, g+8) and columns (2q, 2q+1), whose scales are
// byte `byte_a` / `byte_b` of the registers the selectors name.
template <ScaleKind kKind, uint32_t kTidA, uint32_t kTidB>
SM120_DEVICE void scaled_e4m3_16832(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2], uint32_t sfa,
                                    uint32_t sfb, uint32_t byte_a, uint32_t byte_b) {
    float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    mma_e4m3_16832_unscaled(t, a, b);
    const uint32_t lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
    const uint32_t ea[2] = {scale_byte(scale_word_of(sfa, sfa_lane(g, kTidA)), byte_a),
                            scale_byte(scale_word_of(sfa, sfa_lane(g + 8, kTidA)), byte_a)};
    const uint32_t eb[2] = {scale_byte(scale_word_of(sfb, sfb_lane(2 * q, kTidB)), byte_b),
                            scale_byte(scale_word_of(sfb, sfb_lane(2 * q + 1, kTidB)), byte_b)};
#pragma unroll
    for (uint32_t e = 0; e < 4; ++e) {
        const uint32_t x = ea[e / 2], y = eb[e % 2];
        if constexpr (kKind == ScaleKind::kNvFp4) {
            d[e] += t[e] * (ue4m3_to_float(x) * ue4m3_to_float(y));
        } else {  // 2^(x - 127) * 2^(y - 127); 0xFF is NaN
            const bool nan = x == 0xFFu || y == 0xFFu;
            d[e] += nan ? __uint_as_float(0x7FC00000u) : ldexpf(t[e], static_cast<int>(x + y) - 254);
        }
    }
}

template <uint32_t kByteA, uint32_t kTidA, uint32_t kByteB, uint32_t kTidB>
SM120_DEVICE void mxf8_16832(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2], uint32_t sfa,
                             uint32_t sfb) {
    scaled_e4m3_16832<ScaleKind::kMxFp8, seen(kTidA), seen(kTidB)>(d, a, b, sfa, sfb, seen(kByteA), seen(kByteB));
}

template <ScaleKind kKind, uint32_t kByteA, uint32_t kTidA, uint32_t kByteB, uint32_t kTidB>
SM120_DEVICE void fp4_16864(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2], uint32_t sfa, uint32_t sfb) {
    // m16n8k64 e2m1 fragments (PTX ISA): a[0] row g, K 8q..8q+7; a[1] row g+8, same K; a[2] / a[3] the same
    // rows at K 32+8q..; b[0] column g, K 8q..8q+7; b[1] K 32+8q...
    const uint32_t q = (threadIdx.x % 32) % 4;
#pragma unroll
    for (uint32_t h = 0; h < 2; ++h) {  // K 0..31, then 32..63
        const uint32_t a8[4] = {e2m1x4_to_e4m3x4(a[2 * h]), e2m1x4_to_e4m3x4(a[2 * h + 1]),
                                e2m1x4_to_e4m3x4(a[2 * h] >> 16), e2m1x4_to_e4m3x4(a[2 * h + 1] >> 16)};
        const uint32_t b8[2] = {e2m1x4_to_e4m3x4(b[h]), e2m1x4_to_e4m3x4(b[h] >> 16)};
        if constexpr (kKind == ScaleKind::kMxFp4) {
            scaled_e4m3_16832<kKind, seen(kTidA), seen(kTidB)>(d, a8, b8, sfa, sfb, seen(kByteA) + h, seen(kByteB) + h);
        } else {
#pragma unroll
            for (uint32_t p = 0; p < 2; ++p) {  // 16-K chunk 2h + p lives in the threads with q / 2 == p
                const bool mine = q / 2 == p;
                const uint32_t bp[2] = {mine ? b8[0] : 0u, mine ? b8[1] : 0u};
                scaled_e4m3_16832<kKind, seen(kTidA), seen(kTidB)>(d, a8, bp, sfa, sfb, 2 * h + p, 2 * h + p);
            }
        }
    }
}

}  // namespace emulation
}  // namespace sm120
