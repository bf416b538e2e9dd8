#pragma once
// Block-scaled tensor-core atoms (SM120: full-rate QMMA.SF / OMMA.SF). D += (A * SFA) * (B * SFB), fp32.
//
//   mma_mxf8_e4m3_16832   kind::mxf8f6f4 scale_vec::1X, e4m3 x e4m3, UE8M0   SASS QMMA.SF.16832.F32.E4M3.E4M3.E8
//   mma_mxf4_16864        kind::mxf4 scale_vec::2X, e2m1 x e2m1, UE8M0       SASS OMMA.SF.16864.F32.E2M1.E2M1.E8
//   mma_nvf4_16864        kind::mxf4nvf4 scale_vec::4X, e2m1 x e2m1, UE4M3   SASS OMMA.SF.16864...UE4M3.4X
//   mma_mxf8f6f4_16832    kind::mxf8f6f4 scale_vec::1X, mixed e4m3 / e2m1, UE8M0   SASS QMMA.SF.16832...E8
//                         (e2m1 one per byte, in bits [5:2] of its 8-bit container)
//
// Operand registers have the same byte layout in all three: per m16n8 tile and 32 bytes of K, lane
// (g = lane/4, q = lane%4) holds A bytes 4q..4q+3 of rows g (a[0]) and g+8 (a[1]) and bytes 16+4q.. of the
// same rows (a[2], a[3]); B bytes 4q.. (b[0]) and 16+4q.. (b[1]) of column g. For e2m1 a byte packs two
// K elements, the lower K index in the low nibble. So one ldmatrix addressing serves FP8 and packed FP4.
// Scale selectors: template arguments <byte-id-a, thread-id-a, byte-id-b, thread-id-b>, documented with
// the lane mapping in sm120_scale_selectors.cuh. On targets below SM120 each atom runs its emulation.

#include "../common/sm120_arch.cuh"
#include "sm120_emulation.cuh"
#include "sm120_scale_selectors.cuh"

namespace sm120 {

template <uint32_t kByteA, uint32_t kTidA, uint32_t kByteB, uint32_t kTidB>
SM120_DEVICE void mma_mxf8_e4m3_16832(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2], uint32_t sfa,
                                      uint32_t sfb) {
    static_assert(kByteA < 4 && kByteB < 4 && kTidA < 2 && kTidB < 4, "invalid scale_vec::1X selector");
#if SM120_NATIVE
    asm("mma.sync.aligned.m16n8k32.row.col.kind::mxf8f6f4.block_scale.scale_vec::1X.f32.e4m3.e4m3.f32.ue8m0 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3}, %10, {%12, %13}, %11, {%14, %15};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(sfa), "r"(sfb), "n"(kByteA), "n"(kTidA),
          "n"(kByteB), "n"(kTidB));
#else
    emulation::mxf8_16832<kByteA, kTidA, kByteB, kTidB>(d, a, b, sfa, sfb);
#endif
}

template <uint32_t kByteA, uint32_t kTidA, uint32_t kByteB, uint32_t kTidB>
SM120_DEVICE void mma_mxf4_16864(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2], uint32_t sfa,
                                 uint32_t sfb) {
    static_assert((kByteA == 0 || kByteA == 2) && (kByteB == 0 || kByteB == 2) && kTidA < 2 && kTidB < 4,
                  "invalid scale_vec::2X selector");
#if SM120_NATIVE
    asm("mma.sync.aligned.m16n8k64.row.col.kind::mxf4.block_scale.scale_vec::2X.f32.e2m1.e2m1.f32.ue8m0 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3}, %10, {%12, %13}, %11, {%14, %15};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(sfa), "r"(sfb), "n"(kByteA), "n"(kTidA),
          "n"(kByteB), "n"(kTidB));
#else
    emulation::fp4_16864<ScaleKind::kMxFp4, kByteA, kTidA, kByteB, kTidB>(d, a, b, sfa, sfb);
#endif
}

template <uint32_t kByteA, uint32_t kTidA, uint32_t kByteB, uint32_t kTidB>
SM120_DEVICE void mma_nvf4_16864(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2], uint32_t sfa,
                                 uint32_t sfb) {
    static_assert(kByteA == 0 && kByteB == 0 && kTidA < 2 && kTidB < 4, "invalid scale_vec::4X selector");
#if SM120_NATIVE
    asm("mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::4X.f32.e2m1.e2m1.f32.ue4m3 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3}, %10, {%12, %13}, %11, {%14, %15};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(sfa), "r"(sfb), "n"(kByteA), "n"(kTidA),
          "n"(kByteB), "n"(kTidB));
#else
    emulation::fp4_16864<ScaleKind::kNvFp4, kByteA, kTidA, kByteB, kTidB>(d, a, b, sfa, sfb);
#endif
}

// Operand element types of kind::mxf8f6f4 (one element per byte; e2m1 sits in bits [5:2] of its byte).
enum class F8F6F4Type : uint32_t { kE4M3 = 0, kE2M1 = 1 };

// Mixed-precision block-scaled MMA, m16n8k32, one UE8M0 scale per row / column (K = 32). The e4m3 x e4m3
// combination is mma_mxf8_e4m3_16832.
template <F8F6F4Type kA, F8F6F4Type kB, uint32_t kByteA, uint32_t kTidA, uint32_t kByteB, uint32_t kTidB>
SM120_DEVICE void mma_mxf8f6f4_16832(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2], uint32_t sfa,
                                     uint32_t sfb) {
    static_assert(kByteA < 4 && kByteB < 4 && kTidA < 2 && kTidB < 4, "invalid scale_vec::1X selector");
    if constexpr (kA == F8F6F4Type::kE4M3 && kB == F8F6F4Type::kE4M3) {
        mma_mxf8_e4m3_16832<kByteA, kTidA, kByteB, kTidB>(d, a, b, sfa, sfb);
    } else {
#if SM120_NATIVE
#define SM120_MXF8F6F4_ASM(TYPES)                                                                             \
    asm("mma.sync.aligned.m16n8k32.row.col.kind::mxf8f6f4.block_scale.scale_vec::1X.f32." TYPES               \
        ".f32.ue8m0 "                                                                                         \
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3}, %10, {%12, %13}, %11, {%14, %15};\n" \
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                                      \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(sfa), "r"(sfb), "n"(kByteA),  \
          "n"(kTidA), "n"(kByteB), "n"(kTidB))
        if constexpr (kA == F8F6F4Type::kE4M3) SM120_MXF8F6F4_ASM("e4m3.e2m1");
        else if constexpr (kB == F8F6F4Type::kE4M3) SM120_MXF8F6F4_ASM("e2m1.e4m3");
        else SM120_MXF8F6F4_ASM("e2m1.e2m1");
#undef SM120_MXF8F6F4_ASM
#else
        const uint32_t a8[4] = {emulation::operand_to_e4m3<kA == F8F6F4Type::kE2M1>(a[0]),
                                emulation::operand_to_e4m3<kA == F8F6F4Type::kE2M1>(a[1]),
                                emulation::operand_to_e4m3<kA == F8F6F4Type::kE2M1>(a[2]),
                                emulation::operand_to_e4m3<kA == F8F6F4Type::kE2M1>(a[3])};
        const uint32_t b8[2] = {emulation::operand_to_e4m3<kB == F8F6F4Type::kE2M1>(b[0]),
                                emulation::operand_to_e4m3<kB == F8F6F4Type::kE2M1>(b[1])};
        emulation::mxf8_16832<kByteA, kTidA, kByteB, kTidB>(d, a8, b8, sfa, sfb);
#endif
    }
}

// Four packed e2m1 codes (bits 0..15) -> the kind::mxf8f6f4 operand format: one code per byte, in bits [5:2].
SM120_HOST_DEVICE uint32_t e2m1x4_to_containers(uint32_t codes) {
    uint32_t t = ((codes & 0xFFFFu) | ((codes & 0xFFFFu) << 8)) & 0x00FF00FFu;  // code pairs to bytes 0 and 2
    t = (t | (t << 4)) & 0x0F0F0F0Fu;                                           // one code per byte
    return t << 2;
}

// UE8M0 2^0 in all four bytes: the scale word of an MMA whose block scales are applied outside it (kFp8Fp32).
constexpr uint32_t kUnitScaleWord = 0x7F7F7F7Fu;

// The atom for a ScaleKind, so kernels can be written once for all of them.
template <ScaleKind kKind, uint32_t kByteA, uint32_t kTidA, uint32_t kByteB, uint32_t kTidB>
SM120_DEVICE void mma_block_scaled(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2], uint32_t sfa,
                                   uint32_t sfb) {
    using T = F8F6F4Type;
    if constexpr (kKind == ScaleKind::kMxFp8 || kKind == ScaleKind::kFp8Fp32)  // kFp8Fp32: the caller's unit scales
        mma_mxf8_e4m3_16832<kByteA, kTidA, kByteB, kTidB>(d, a, b, sfa, sfb);
    else if constexpr (kKind == ScaleKind::kMxFp4) mma_mxf4_16864<kByteA, kTidA, kByteB, kTidB>(d, a, b, sfa, sfb);
    else if constexpr (kKind == ScaleKind::kNvFp4) mma_nvf4_16864<kByteA, kTidA, kByteB, kTidB>(d, a, b, sfa, sfb);
    else if constexpr (kKind == ScaleKind::kMxE4M3E2M1)
        mma_mxf8f6f4_16832<T::kE4M3, T::kE2M1, kByteA, kTidA, kByteB, kTidB>(d, a, b, sfa, sfb);
    else mma_mxf8f6f4_16832<T::kE2M1, T::kE4M3, kByteA, kTidA, kByteB, kTidB>(d, a, b, sfa, sfb);
}

// Scale bytes one MMA of a kind reads from a register (scale_vec::1X / 2X / 4X).
SM120_HOST_DEVICE constexpr uint32_t scale_vec(ScaleKind k) {
    return k == ScaleKind::kMxFp4 ? 2 : (k == ScaleKind::kNvFp4 ? 4 : 1);
}

// The MMA of m16 tile kI x n8 tile kJ of a warp tile whose scale words the lane holds under encoding kEnc
// (ScaleLanes in sm120_scale_selectors.cuh), reading the scale bytes at kByteA / kByteB of those words.
template <ScaleKind kKind, ScaleEncoding kEnc, uint32_t kI, uint32_t kJ, uint32_t kByteA, uint32_t kByteB, uint32_t kWA,
          uint32_t kWB>
SM120_DEVICE void mma_tile_scaled(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                                  const uint32_t (&sa)[kWA], const uint32_t (&sb)[kWB]) {
    using L = ScaleLanes<kEnc>;
    static_assert(L::word_a(kI) < kWA && L::word_b(kJ) < kWB, "a scale word per tile the lane serves");
    if constexpr (kEnc == ScaleEncoding::kSelectors) {
        mma_block_scaled<kKind, kByteA, L::tid_a(kI), kByteB, L::tid_b(kJ)>(d, a, b, sa[L::word_a(kI)],
                                                                            sb[L::word_b(kJ)]);
    } else {
        constexpr uint32_t kVec = scale_vec(kKind);
        mma_block_scaled<kKind, 0, 0, 0, 0>(d, a, b, replicate_scale_bytes<kVec>(sa[kI], kByteA),
                                            replicate_scale_bytes<kVec>(sb[kJ], kByteB));
    }
}

}  // namespace sm120
