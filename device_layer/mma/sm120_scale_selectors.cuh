#pragma once
// Where a block-scaled mma.sync reads its scale factors, and the scale encodings.
//
// Every lane passes one 32-bit scale register for A and one for B; the immediate selectors
// {byte-id, thread-id} say which lanes' registers, and which bytes of them, the tensor core reads
// (PTX ISA, "Block Scaling for mma.sync"). For an m16n8 tile, with g = row % 8:
//
//   A row r (0..15), thread-id-a ta (0..1):  lane 4 * (r % 8) + 2 * ta + r / 8
//        i.e. in quad q the thread pair {4q + 2ta, 4q + 2ta + 1} carries rows q and q + 8.
//   B column c (0..7), thread-id-b tb (0..3): lane 4 * c + tb
//        i.e. in quad q the thread 4q + tb carries column q.
//
// Bytes: scale_vec::1X reads byte `byte-id` (0..3): the scale of the MMA's single K chunk.
//        scale_vec::2X reads bytes byte-id, byte-id + 1 (byte-id 0 or 2): K chunks 0 and 1 (32 each).
//        scale_vec::4X reads bytes 0..3 (byte-id 0): K chunks 0..3 (16 each).
// The lowest byte always belongs to the lowest K chunk. Because byte-id is an immediate, four
// consecutive scale blocks of one row packed in one register (DeepGEMM's packed-UE8M0 layout, first
// block in the lowest byte) serve four 1X MMAs, two 2X MMAs or one 4X MMA without any repacking.
//
// thread-id lets one register per lane serve several tiles: lanes with lane % 4 in {0,1} hold the
// scales of one m16 tile and lanes {2,3} those of the next (ta = tile % 2); each of the four lanes of
// a quad holds the column scale of a different n8 tile (tb = tile % 4). The kernels load scales this
// way, and the sm_90 emulation (mma/sm120_emulation.cuh) fetches them from exactly these lanes, so a
// kernel that put a scale into the wrong lane or byte fails the emulated tests as it would on silicon.
// What emulation cannot prove is that silicon follows this reading of the PTX ISA; see
// docs/qualification.md.

#include "../common/sm120_arch.cuh"

namespace sm120 {

enum class ScaleKind : uint32_t {
    kMxFp8 = 0,       // e4m3 x e4m3, kind::mxf8f6f4 scale_vec::1X, UE8M0, one scale per 32 K (m16n8k32)
    kMxFp4 = 1,       // e2m1 x e2m1, kind::mxf4 scale_vec::2X, UE8M0, one scale per 32 K (m16n8k64)
    kNvFp4 = 2,       // e2m1 x e2m1, kind::mxf4nvf4 scale_vec::4X, UE4M3, one scale per 16 K (m16n8k64)
    kMxE4M3E2M1 = 3,  // e4m3 x e2m1 (one code per byte), kind::mxf8f6f4 scale_vec::1X, UE8M0 per 32 K (m16n8k32)
    kMxE2M1E4M3 = 4,  // e2m1 x e4m3, likewise
    kFp8Fp32 = 5,     // e4m3 x e4m3 with FP32 scales per 128 K: unit-scale 1X MMAs, promoted in FP32 per K block
};

// The lane that supplies row `r` of A / column `c` of B for the given thread-id selector.
SM120_HOST_DEVICE constexpr uint32_t sfa_lane(uint32_t r, uint32_t thread_id_a) {
    return 4 * (r % 8) + 2 * thread_id_a + r / 8;
}
SM120_HOST_DEVICE constexpr uint32_t sfb_lane(uint32_t c, uint32_t thread_id_b) { return 4 * c + thread_id_b; }

// Inverses, used by kernels to decide what each lane loads: which tile-local row this lane supplies
// (for the m16 tile selected by thread-id-a = (lane / 2) % 2) and which column (for thread-id-b = lane % 4).
SM120_HOST_DEVICE constexpr uint32_t sfa_row_of_lane(uint32_t lane) { return lane / 4 + 8 * (lane % 2); }
SM120_HOST_DEVICE constexpr uint32_t sfa_thread_id_of_lane(uint32_t lane) { return (lane / 2) % 2; }
SM120_HOST_DEVICE constexpr uint32_t sfb_col_of_lane(uint32_t lane) { return lane / 4; }
SM120_HOST_DEVICE constexpr uint32_t sfb_thread_id_of_lane(uint32_t lane) { return lane % 4; }

// UE8M0: 2^(e - 127); e = 0 is 2^-127 (an fp32 subnormal), e = 255 is NaN.
SM120_DEVICE float ue8m0_to_float(uint32_t e) {
    e &= 0xFFu;
    const uint32_t bits = e == 0xFFu ? 0x7FC00000u : (e == 0 ? 0x00400000u : e << 23);
    return __uint_as_float(bits);
}

// UE4M3: e4m3 without the sign bit (bias 7, 3 mantissa bits, subnormals m * 2^-9, 0x7F is NaN).
SM120_DEVICE float ue4m3_to_float(uint32_t v) {
    v &= 0x7Fu;
    const uint32_t e = v >> 3, m = v & 7u;
    if (v == 0x7Fu) return __uint_as_float(0x7FC00000u);
    if (e == 0) return static_cast<float>(m) * 0.001953125f;  // 2^-9
    return __uint_as_float(((e + 120u) << 23) | (m << 20));
}

}  // namespace sm120
