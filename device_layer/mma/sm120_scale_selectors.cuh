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
//
// Two encodings (issue 44; chosen per kernel at JIT time, DG_SM120_SCALE_ENCODING):
//   kSelectors   the mapping above: one register per lane serves two m16 / four n8 tiles through non-zero
//                thread-id selectors, and byte-id walks K through the packed scale words.
//   kReplicated  selector 0 for every MMA. Every lane holds the scale word of the row (A: lane / 4 + 8 (lane % 2),
//                the same in both thread pairs of a quad) or column (B: lane / 4, in all four lanes of a quad) it
//                would supply at thread-id 0, for each tile separately, and the bytes the MMA reads at byte-id 0
//                are repeated across the whole register (1X: one byte four times; 2X: a byte pair twice). Nothing
//                depends on how silicon reads a non-zero selector; this is the layout CUTLASS's SM120 atoms use.

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

enum class ScaleEncoding : uint32_t { kSelectors = 0, kReplicated = 1 };

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

// Which scale words a lane holds for a warp tile of kMI m16 x kNI n8 MMA tiles, and which word and thread-id
// selector the MMA of tile (i, j) takes.
template <ScaleEncoding kEnc>
struct ScaleLanes {
    static constexpr bool kSel = kEnc == ScaleEncoding::kSelectors;
    SM120_HOST_DEVICE static constexpr uint32_t words_a(uint32_t mi) { return kSel ? (mi + 1) / 2 : mi; }
    SM120_HOST_DEVICE static constexpr uint32_t words_b(uint32_t ni) { return kSel ? (ni + 3) / 4 : ni; }
    // the m16 (n8) tile whose rows (column) word w of `lane` carries
    SM120_HOST_DEVICE static constexpr uint32_t tile_a(uint32_t w, uint32_t lane) {
        return kSel ? 2 * w + sfa_thread_id_of_lane(lane) : w;
    }
    SM120_HOST_DEVICE static constexpr uint32_t tile_b(uint32_t w, uint32_t lane) {
        return kSel ? 4 * w + sfb_thread_id_of_lane(lane) : w;
    }
    SM120_HOST_DEVICE static constexpr uint32_t word_a(uint32_t i) { return kSel ? i / 2 : i; }
    SM120_HOST_DEVICE static constexpr uint32_t word_b(uint32_t j) { return kSel ? j / 4 : j; }
    SM120_HOST_DEVICE static constexpr uint32_t tid_a(uint32_t i) { return kSel ? i % 2 : 0; }
    SM120_HOST_DEVICE static constexpr uint32_t tid_b(uint32_t j) { return kSel ? j % 4 : 0; }
};

// The register a replicated-encoding MMA gets for the kVec scale bytes at `byte`: those bytes repeated over
// all four (scale_vec::1X: byte `byte` x4; 2X: bytes byte, byte + 1 twice; 4X: the word as it is).
template <uint32_t kVec>
SM120_DEVICE uint32_t replicate_scale_bytes(uint32_t word, uint32_t byte) {
    static_assert(kVec == 1 || kVec == 2 || kVec == 4, "scale_vec is 1X, 2X or 4X");
    if constexpr (kVec == 4) return word;
    else if constexpr (kVec == 2) return __byte_perm(word, 0u, (byte | (byte + 1) << 4) * 0x0101u);
    else return __byte_perm(word, 0u, byte * 0x1111u);
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
