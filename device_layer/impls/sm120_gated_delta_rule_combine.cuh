#pragma once
// Gated delta rule, segmented walk, the combine between its two passes (docs/gated_delta_rule.md, "Segmented
// walk"): each segment's first state from the initial one and the segments' affine maps,
//   h_0 = initial state (or 0),   h_{j+1} = A_j h_j + B_j   (j = 0 .. held - 2: the segments holding tokens),
// per (sequence, value head) pair: `maps` holds [2][segments][pairs][128][128] fp32, B_j in half 0 ([K][V]) and A_j
// in half 1 ([K][K], acting on the state's K index, the recurrence's [kd][vd] layout), and `firsts`
// [segments][pairs][128][128] receives every h_j. A chain of plain FP32 FMAs in a fixed order: no TF32, bitwise
// repeatable, one launch for the whole chain.
// CTA = (column block of kCombineCols value columns, pair): its h block stays in shared memory across the chain;
// thread t forms row t / 2, columns 8 (t % 2) .. + 8, reading its row of A_j with 16-byte loads (from L2: the
// transition pass wrote the maps just before) and the h block's rows from shared memory (broadcasts).
// Launched with PDL behind the transition pass: it waits in griddepcontrol before reading anything.

#include "../common/sm120_arch.cuh"
#include "../common/sm120_pdl.cuh"
#include "../common/sm120_types.cuh"
#include "../layout/sm120_gated_delta_rule_layout.cuh"

namespace sm120 {

constexpr uint32_t kCombineCols = 16;                         // value columns a CTA carries
constexpr uint32_t kCombineThreads = kGdrHeadDim * 2;         // two threads a row, eight columns each
constexpr uint32_t kCombineTile = kGdrHeadDim * kGdrHeadDim;  // one 128 x 128 fp32 state or map

template <uint32_t kCols>
// clang-format off: a kernel declaration (see .clang-format)
__global__ void __launch_bounds__(kCombineThreads, 1)
sm120_gated_delta_rule_combine_kernel(const float* __restrict__ maps, const float* __restrict__ initial_state,
                                      float* __restrict__ firsts, uint32_t segments, uint32_t pairs,
                                      const int32_t* __restrict__ cu_seqlens, uint32_t seq_len,
                                      uint32_t value_heads, uint32_t segment_tokens) {
    // clang-format on
    static_assert(kCols == 16, "two threads of eight columns a row");
    __shared__ __align__(16) float h[kGdrHeadDim][kCols];
    constexpr uint32_t kBlocks = kGdrHeadDim / kCols;
    const uint32_t block = blockIdx.x % kBlocks, pair = blockIdx.x / kBlocks;
    const uint32_t row = threadIdx.x / 2, c0 = (threadIdx.x % 2) * 8, col = block * kCols + c0;
    const size_t at = static_cast<size_t>(pair) * kCombineTile + static_cast<size_t>(row) * kGdrHeadDim + col;
    const size_t seg_stride = static_cast<size_t>(pairs) * kCombineTile;
    const float* b_maps = maps;
    const float* a_maps = maps + static_cast<size_t>(segments) * seg_stride;

    pdl_wait_primary();  // the maps come from the transition pass before this kernel in the stream
    // only the segments holding tokens of this pair's sequence (one for an empty sequence): the output pass
    // stores nothing for the others and reads no first state there, and the transition pass left their maps
    // unwritten
    uint32_t start, end;
    gdr_sequence(cu_seqlens, seq_len, pair / value_heads, start, end);
    const uint32_t held = end > start ? (end - start + segment_tokens - 1) / segment_tokens : 1;
    const uint32_t steps = held < segments ? held : segments;
    float acc[8];
#pragma unroll
    for (uint32_t q = 0; q < 2; ++q) {
        const float4 v = initial_state != nullptr ? *reinterpret_cast<const float4*>(initial_state + at + 4 * q)
                                                  : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        acc[4 * q] = v.x, acc[4 * q + 1] = v.y, acc[4 * q + 2] = v.z, acc[4 * q + 3] = v.w;
    }
    for (uint32_t j = 0;; ++j) {
        // h_j: to shared memory (the next step's operand) and to firsts[j]
#pragma unroll
        for (uint32_t q = 0; q < 2; ++q) {
            const float4 v = make_float4(acc[4 * q], acc[4 * q + 1], acc[4 * q + 2], acc[4 * q + 3]);
            *reinterpret_cast<float4*>(&h[row][c0 + 4 * q]) = v;
            *reinterpret_cast<float4*>(firsts + j * seg_stride + at + 4 * q) = v;
        }
        if (j + 1 >= steps) break;
        __syncthreads();  // every row of h_j is in place
        const float* a_row =
            a_maps + j * seg_stride + static_cast<size_t>(pair) * kCombineTile + static_cast<size_t>(row) * kGdrHeadDim;
#pragma unroll
        for (uint32_t q = 0; q < 2; ++q) {
            const float4 v = *reinterpret_cast<const float4*>(b_maps + j * seg_stride + at + 4 * q);
            acc[4 * q] = v.x, acc[4 * q + 1] = v.y, acc[4 * q + 2] = v.z, acc[4 * q + 3] = v.w;
        }
#pragma unroll 4
        for (uint32_t k4 = 0; k4 < kGdrHeadDim / 4; ++k4) {
            const float4 a = *reinterpret_cast<const float4*>(a_row + 4 * k4);
            const float av[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
            for (uint32_t kk = 0; kk < 4; ++kk) {
                const float4 lo = *reinterpret_cast<const float4*>(&h[4 * k4 + kk][c0]);
                const float4 hi = *reinterpret_cast<const float4*>(&h[4 * k4 + kk][c0 + 4]);
                acc[0] = fmaf(av[kk], lo.x, acc[0]), acc[1] = fmaf(av[kk], lo.y, acc[1]);
                acc[2] = fmaf(av[kk], lo.z, acc[2]), acc[3] = fmaf(av[kk], lo.w, acc[3]);
                acc[4] = fmaf(av[kk], hi.x, acc[4]), acc[5] = fmaf(av[kk], hi.y, acc[5]);
                acc[6] = fmaf(av[kk], hi.z, acc[6]), acc[7] = fmaf(av[kk], hi.w, acc[7]);
            }
        }
        __syncthreads();  // every read of h_j is done before h_{j+1} replaces it
    }
    pdl_launch_dependents();
}

}  // namespace sm120
