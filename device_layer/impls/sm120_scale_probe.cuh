#pragma once
// Scale probe: one warp runs one block-scaled MMA of kind kKind exactly as the kernels issue it
// (mma_tile_scaled: the scale encoding, the m16 / n8 tile it serves, the byte-ids that walk K) on operand and
// scale registers the host chose, and writes the accumulator. The self-test (deep_gemm_sm120.selftest) judges
// the results against float64, decodes which lane and byte each row's and column's scale came from, and so
// tells on the user's GPU whether each encoding reads its scales where mma/sm120_scale_selectors.cuh says.
//
// Case table of a kind (block b runs case b % kCases on the 256 words at words + 256 b):
//   selectors   every m16 tile i in {0, 1} (thread-id-a i) x n8 tile j in {0..3} (thread-id-b j) x every
//               (byte-id-a, byte-id-b) pair the scale_vec allows (1X: 0..3, 2X: 0 or 2, 4X: 0)
//   replicated  tile (0, 0) x every byte-id pair: selector 0, bytes repeated by replicate_scale_bytes
// Words per block: A fragment registers 0..3 at [32 r + lane], B 0..1 at [128 + 32 r + lane], the A scale word
// at [192 + lane], the B one at [224 + lane]. Block b writes its case's descriptor to table[b] (encoding |
// i << 4 | j << 8 | byte-a << 12 | byte-b << 16), so the host checks its copy of the table against this one.

#include "../common/sm120_arch.cuh"
#include "../common/sm120_math.cuh"
#include "../mma/sm120.cuh"

namespace sm120 {

template <ScaleKind kKind>
struct ScaleProbeTable {
    static constexpr uint32_t kVec = scale_vec(kKind);
    static constexpr uint32_t kBytes = kVec == 1 ? 4 : (kVec == 2 ? 2 : 1);  // byte-ids a selector may name
    static constexpr uint32_t kPairs = kBytes * kBytes;
    static constexpr uint32_t kSelectorCases = 8 * kPairs;
    static constexpr uint32_t kCases = kSelectorCases + kPairs;

    SM120_HOST_DEVICE static constexpr bool replicated(uint32_t c) { return c >= kSelectorCases; }
    SM120_HOST_DEVICE static constexpr uint32_t pair(uint32_t c) { return c % kPairs; }
    SM120_HOST_DEVICE static constexpr uint32_t tile(uint32_t c) { return replicated(c) ? 0 : c / kPairs; }
    SM120_HOST_DEVICE static constexpr uint32_t i(uint32_t c) { return tile(c) % 2; }
    SM120_HOST_DEVICE static constexpr uint32_t j(uint32_t c) { return tile(c) / 2; }
    SM120_HOST_DEVICE static constexpr uint32_t byte_a(uint32_t c) { return (pair(c) / kBytes) * (4 / kBytes); }
    SM120_HOST_DEVICE static constexpr uint32_t byte_b(uint32_t c) { return (pair(c) % kBytes) * (4 / kBytes); }
    SM120_HOST_DEVICE static constexpr uint32_t descriptor(uint32_t c) {
        return (replicated(c) ? 1u : 0u) | i(c) << 4 | j(c) << 8 | byte_a(c) << 12 | byte_b(c) << 16;
    }
};

template <ScaleKind kKind>
// clang-format off: a kernel declaration (see .clang-format)
__global__ void __launch_bounds__(32, 1)
sm120_scale_probe_kernel(const uint32_t* __restrict__ words, float* __restrict__ out, uint32_t* __restrict__ table) {
    // clang-format on
    using T = ScaleProbeTable<kKind>;
    const uint32_t lane = threadIdx.x % 32, c = blockIdx.x % T::kCases;
    const uint32_t* w = words + static_cast<size_t>(blockIdx.x) * 256;
    const uint32_t a[4] = {w[lane], w[32 + lane], w[64 + lane], w[96 + lane]};
    const uint32_t b[2] = {w[128 + lane], w[160 + lane]};
    const uint32_t sa[1] = {w[192 + lane]}, sb[1] = {w[224 + lane]};
    float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    // c is the same in every lane of the warp, so each MMA (and the emulation's shuffles) runs warp-uniform.
    static_for<0, T::kCases>([&](auto k) {
        constexpr uint32_t kc = decltype(k)::value;
        if (c == kc) {
            constexpr ScaleEncoding kEnc = T::replicated(kc) ? ScaleEncoding::kReplicated : ScaleEncoding::kSelectors;
            mma_tile_scaled<kKind, kEnc, T::i(kc), T::j(kc), T::byte_a(kc), T::byte_b(kc)>(d, a, b, sa, sb);
        }
    });
#pragma unroll
    for (uint32_t e = 0; e < 4; ++e) out[static_cast<size_t>(blockIdx.x) * 128 + 4 * lane + e] = d[e];
    if (lane == 0) table[blockIdx.x] = T::descriptor(c);
}

}  // namespace sm120
