#pragma once
// Warp-level tensor-core atoms (mma.sync, row.col). Fragment layouts follow the PTX ISA:
// for m16n8k16 bf16, lane l holds A rows {l/4, l/4+8} x cols {2(l%4), 2(l%4)+1, +8, +9},
// B rows (k) {2(l%4), +1, +8, +9} x col (n) l/4, and C/D rows {l/4, l/4+8} x cols {2(l%4), 2(l%4)+1}.
// The block-scaled FP8/FP4 atoms (SM120-only, with sm_90 emulation) live in sm120_block_scaled.cuh; this
// header includes it, so mma/sm120.cuh stays the one include for every atom.

#include "../common/sm120_arch.cuh"
#include "sm120_block_scaled.cuh"

namespace sm120 {

// The MMA asm statements are not volatile: they only read and write registers, so the compiler may
// interleave them with the (volatile, ordered) ldmatrix loads that feed the next step.

// D = A(16x16 bf16) * B(16x8 bf16) + D, fp32 accumulate.  SASS: HMMA.16816.F32.BF16.
SM120_DEVICE void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// The same atom with fp16 operands.  SASS: HMMA.16816.F32 (no .BF16 suffix).
SM120_DEVICE void mma_f16_16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// D = A(16x8 tf32) * B(8x8 tf32) + D, fp32 accumulate.  SASS: HMMA.1688.F32.TF32.
SM120_DEVICE void mma_tf32_1688(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// fp32 -> tf32 operand bits, rounded to nearest (ties away); the low 13 mantissa bits come back zero.
// mma .tf32 would otherwise ignore those bits (truncation, a biased 2^-11 relative error).
SM120_DEVICE uint32_t tf32_round(float x) {
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r;
}

}  // namespace sm120
