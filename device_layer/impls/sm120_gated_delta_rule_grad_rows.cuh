#pragma once
// Gated delta rule backward, the last step of dq and dk (issue 41): B3 leaves each q / k head's gradient as fp32
// parts [rows][parts][K] (rows = tokens x heads, each part summed over `fold` value heads); this kernel adds the
// parts in part order, applies the in-kernel l2norm's backward when the forward normalized q and k
//   y = x / n, n = sqrt(|x|^2 + eps):   dx = dy / n - x (x . dy) / n^3   (x the forward's input row)
// and writes the result in the inputs' dtype, rounded once. One launch does dq (the first half of the grid) and dk
// (the second); a warp per row, four columns a lane (16-byte loads of the parts, 8-byte loads and stores of the
// Elem rows), the two row sums of the l2norm by warp shuffles in a fixed order: bitwise repeatable, no shared
// memory. It replaces about five torch passes a tensor (the parts' sum, the l2norm's four, the cast), each
// moving the whole [tokens, heads, 128] fp32 gradient. Launched with PDL behind B3.

#include "../common/sm120_arch.cuh"
#include "../common/sm120_pdl.cuh"
#include "../common/sm120_warp.cuh"
#include "../layout/sm120_gated_delta_rule_layout.cuh"

namespace sm120 {

constexpr uint32_t kGdrRowsThreads = 256;                  // eight warps: eight rows a CTA
constexpr uint32_t kGdrRowsPerCta = kGdrRowsThreads / 32;  // a warp per row
constexpr float kGdrL2normEps = 1e-6f;                     // the forward's (and FLA's) l2norm epsilon

template <typename Elem>
// clang-format off: a kernel declaration (see .clang-format)
__global__ void __launch_bounds__(kGdrRowsThreads)
sm120_gated_delta_rule_grad_rows_kernel(const float* __restrict__ dq_parts, const float* __restrict__ dk_parts,
                                        const Elem* __restrict__ q, const Elem* __restrict__ k,
                                        Elem* __restrict__ dq, Elem* __restrict__ dk, uint32_t rows, uint32_t parts,
                                        uint32_t l2norm) {
    // clang-format on
    using E = GdrElem<Elem>;
    constexpr uint32_t K = kGdrHeadDim;
    static_assert(K == 4 * 32, "four columns a lane");
    pdl_wait_primary();  // the parts come from B3, before this kernel in the stream
    const uint32_t ctas = (rows + kGdrRowsPerCta - 1) / kGdrRowsPerCta;  // a tensor's half of the grid
    const bool second = blockIdx.x >= ctas;
    const uint32_t row = (blockIdx.x - (second ? ctas : 0)) * kGdrRowsPerCta + warp_idx();
    if (row >= rows) return;  // warp-uniform
    const uint32_t lane = lane_idx();
    const float* src = (second ? dk_parts : dq_parts) + static_cast<size_t>(row) * parts * K + 4 * lane;
    float4 d = __ldg(reinterpret_cast<const float4*>(src));
    for (uint32_t p = 1; p < parts; ++p) {  // in part order (value-head order)
        const float4 x = __ldg(reinterpret_cast<const float4*>(src + static_cast<size_t>(p) * K));
        d.x += x.x, d.y += x.y, d.z += x.z, d.w += x.w;
    }
    const size_t at = static_cast<size_t>(row) * K + 4 * lane;
    if (l2norm) {
        const uint2 raw = __ldg(reinterpret_cast<const uint2*>((second ? k : q) + at));
        float x0, x1, x2, x3;
        E::unpack(raw.x, x0, x1);
        E::unpack(raw.y, x2, x3);
        float ss = x0 * x0 + x1 * x1 + x2 * x2 + x3 * x3, dot = x0 * d.x + x1 * d.y + x2 * d.z + x3 * d.w;
#pragma unroll
        for (uint32_t o = 16; o >= 1; o /= 2) {
            ss += __shfl_xor_sync(0xffffffffu, ss, o);
            dot += __shfl_xor_sync(0xffffffffu, dot, o);
        }
        const float r = rsqrtf(ss + kGdrL2normEps);  // 1 / n
        const float c = dot * r * r * r;
        d.x = d.x * r - x0 * c, d.y = d.y * r - x1 * c, d.z = d.z * r - x2 * c, d.w = d.w * r - x3 * c;
    }
    *reinterpret_cast<uint2*>((second ? dk : dq) + at) = make_uint2(E::pack(d.x, d.y), E::pack(d.z, d.w));
}

}  // namespace sm120
