#pragma once
// Gated delta rule, chunked forward, stage 2 of 2: the state recurrence and the output, sequential over the
// chunks of one sequence. CTA = (V slice of kVSlice columns, value head hv, sequence n); each math warp owns 16
// value columns of the state and keeps its slice of S^T (16 x 128, fp32) in registers for the whole sequence.
// Per chunk, with w, u, attn, gates from the prep kernel (sm120_gated_delta_rule_prep.cuh) and q, k as given:
//   v'^T = u^T - S^T w^T                       [16 x C]   A = S^T (bf16 / fp16), B = w rows (ldmatrix)
//   o^T  = (S^T q^T) diag(scale e^G / |q|) + v'^T attn^T
//   S^T  = e^{G_last} S^T + (v'^T diag(e^{G_last - G} / |k|)) k          (tokens past the sequence: factor 0)
// Everything a warp multiplies is in shared memory (TMA ring, a producer warp) or its registers; the warps of a
// CTA share only the loaded tiles, so no step needs more than the stage barriers. Tokens past the sequence's
// end in a chunk's tiles belong to the next sequence (or are TMA zero fill): they get factor 0 in the state
// update, attn is zero above the diagonal, and their o rows are not stored.

#include <cuda.h>
#include "../common/sm120_arch.cuh"
#include "../common/sm120_fence.cuh"
#include "../common/sm120_ldmatrix.cuh"
#include "../common/sm120_mbarrier.cuh"
#include "../common/sm120_pdl.cuh"
#include "../common/sm120_tma.cuh"
#include "../common/sm120_warp.cuh"
#include "sm120_gated_delta_rule_common.cuh"

namespace sm120 {

template <uint32_t kChunk, uint32_t kVSlice, uint32_t kStages>
struct GdrFwdConfig {
    static constexpr uint32_t kMathWarps = kVSlice / 16;
    static constexpr uint32_t kThreads = (kMathWarps + 1) * 32;   // + the producer warp
    static constexpr uint32_t kHeadTileBytes = kChunk * kGdrHeadDim * 2;
    static constexpr uint32_t kURowBytes = (kVSlice < kGdrHalfCols ? kVSlice : kGdrHalfCols) * 2;
    static constexpr uint32_t kUBoxes = kVSlice * 2 / kURowBytes;
    static constexpr uint32_t kUBytes = kChunk * kVSlice * 2;
    static constexpr uint32_t kAttnBytes = kChunk * kChunk * 2;
    static constexpr uint32_t kGateBytes = kChunk * kGdrGateFloats * 4;
    // stage: w | q | k | u | attn | gates, each 1024-aligned (swizzle atoms)
    static constexpr uint32_t kOffQ = kHeadTileBytes, kOffK = 2 * kHeadTileBytes, kOffU = 3 * kHeadTileBytes;
    static constexpr uint32_t kOffAttn = kOffU + align_up(kUBytes, kSwizzleAtomBytes);
    static constexpr uint32_t kOffGate = kOffAttn + align_up(kAttnBytes, kSwizzleAtomBytes);
    static constexpr uint32_t kStageBytes = kOffGate + align_up(kGateBytes, kSwizzleAtomBytes);
    static constexpr uint32_t kTxBytes = 3 * kHeadTileBytes + kUBytes + kAttnBytes + kGateBytes;
    static constexpr uint32_t kOutBytes = kMathWarps * kChunk * 16 * 2;   // per-warp o staging [C][16]
    static constexpr uint32_t kSmemBytes = kStages * kStageBytes + kOutBytes + 2 * kStages * 8;
    static_assert(kChunk == 16 || kChunk == 32 || kChunk == 64, "chunk size: 16, 32 or 64");
    static_assert(kVSlice == 16 || kVSlice == 32 || kVSlice == 64 || kVSlice == 128, "V slice: 16, 32, 64 or 128");
    static_assert(kStages >= 1, "at least one stage");
    static_assert(kSmemBytes <= kMaxSmemPerBlock, "shared memory exceeds the SM120 per-block budget (101376 B)");
};

template <uint32_t kChunk, uint32_t kVSlice, uint32_t kStages, typename Elem>
__global__ void __launch_bounds__(GdrFwdConfig<kChunk, kVSlice, kStages>::kThreads, 1)
sm120_gated_delta_rule_fwd_kernel(const __grid_constant__ CUtensorMap tmap_w, const __grid_constant__ CUtensorMap tmap_u,
                                  const __grid_constant__ CUtensorMap tmap_q, const __grid_constant__ CUtensorMap tmap_k,
                                  const __grid_constant__ CUtensorMap tmap_attn,
                                  const __grid_constant__ CUtensorMap tmap_gate, const float* __restrict__ initial_state,
                                  float* __restrict__ final_state, Elem* __restrict__ o,
                                  const int32_t* __restrict__ cu_seqlens, uint32_t seq_len, uint32_t value_heads,
                                  uint32_t group) {
    using Cfg = GdrFwdConfig<kChunk, kVSlice, kStages>;
    using E = GdrElem<Elem>;
    constexpr uint32_t C = kChunk, kNT = C / 8, kKT = kGdrHeadDim / 8;
    constexpr uint32_t kSlices = kGdrHeadDim / kVSlice;

    extern __shared__ __align__(1024) uint8_t smem[];
    uint8_t* s_out = smem + kStages * Cfg::kStageBytes;
    uint64_t* full_bar = reinterpret_cast<uint64_t*>(s_out + Cfg::kOutBytes);
    uint64_t* empty_bar = full_bar + kStages;

    const uint32_t warp = warp_idx(), lane = lane_idx();
    const uint32_t slice = blockIdx.x % kSlices, hv = blockIdx.x / kSlices % value_heads;
    const uint32_t n = blockIdx.x / kSlices / value_heads, h = hv / group;
    uint32_t start, end;
    init_stage_barriers(full_bar, empty_bar, kStages, Cfg::kMathWarps);
    pdl_wait_primary();
    gdr_sequence(cu_seqlens, seq_len, n, start, end);
    const uint32_t num_chunks = (end - start + C - 1) / C;

    if (warp == Cfg::kMathWarps) {
        // ---------------- producer: one TMA batch per chunk ----------------
        if (lane == 0) {
            tma_prefetch_descriptor(&tmap_w), tma_prefetch_descriptor(&tmap_u), tma_prefetch_descriptor(&tmap_q);
            tma_prefetch_descriptor(&tmap_k), tma_prefetch_descriptor(&tmap_attn), tma_prefetch_descriptor(&tmap_gate);
            uint32_t stage = 0, phase = 0;
            for (uint32_t c = 0; c < num_chunks; ++c) {
                const int32_t t = static_cast<int32_t>(start + c * C);
                uint8_t* s = smem + stage * Cfg::kStageBytes;
                uint64_t* bar = &full_bar[stage];
                mbarrier_wait(&empty_bar[stage], phase ^ 1);
                mbarrier_arrive_expect_tx(bar, Cfg::kTxBytes);
#pragma unroll
                for (uint32_t half = 0; half < 2; ++half) {
                    const int32_t col = static_cast<int32_t>(half * kGdrHalfCols);
                    const uint32_t off = half * C * kSwizzle128BRowBytes;
                    tma_load_3d(s + off, &tmap_w, bar, col, static_cast<int32_t>(hv), t);
                    tma_load_3d(s + Cfg::kOffQ + off, &tmap_q, bar, col, static_cast<int32_t>(h), t);
                    tma_load_3d(s + Cfg::kOffK + off, &tmap_k, bar, col, static_cast<int32_t>(h), t);
                }
#pragma unroll
                for (uint32_t b = 0; b < Cfg::kUBoxes; ++b)
                    tma_load_3d(s + Cfg::kOffU + b * C * Cfg::kURowBytes, &tmap_u, bar,
                                static_cast<int32_t>(slice * kVSlice + b * kGdrHalfCols), static_cast<int32_t>(hv), t);
                tma_load_3d(s + Cfg::kOffAttn, &tmap_attn, bar, 0, static_cast<int32_t>(hv), t);
                tma_load_3d(s + Cfg::kOffGate, &tmap_gate, bar, 0, static_cast<int32_t>(hv), t);
                if (++stage == kStages) stage = 0, phase ^= 1;
            }
        }
        return;
    }

    // ---------------- math warps: value columns [v0, v0 + 16) ----------------
    const uint32_t gid = lane >> 2, t4 = lane & 3;
    const uint32_t v0 = slice * kVSlice + warp * 16;
    const size_t state_at = (static_cast<size_t>(n) * value_heads + hv) * kGdrHeadDim * kGdrHeadDim;
    float st[kKT][4];  // S^T rows v0 + gid (+8), columns (k) 8 kt + 2 t4 (+1)
#pragma unroll
    for (uint32_t kt = 0; kt < kKT; ++kt)
#pragma unroll
        for (uint32_t e = 0; e < 4; ++e) {
            const uint32_t kd = 8 * kt + 2 * t4 + e % 2, vd = v0 + gid + 8 * (e / 2);
            st[kt][e] = initial_state != nullptr ? __ldg(initial_state + state_at + kd * kGdrHeadDim + vd) : 0.0f;
        }
    Elem* s_o = reinterpret_cast<Elem*>(s_out) + warp * C * 16;

    uint32_t stage = 0, phase = 0;
    for (uint32_t c = 0; c < num_chunks; ++c) {
        const uint32_t first = start + c * C, len = min(C, end - first);
        const uint8_t* s = smem + stage * Cfg::kStageBytes;
        const float4* gate = reinterpret_cast<const float4*>(s + Cfg::kOffGate);
        mbarrier_wait(&full_bar[stage], phase);

        // S^T as the A operand (k16 steps over the head dim)
        uint32_t sa[kKT / 2][4];
#pragma unroll
        for (uint32_t kk = 0; kk < kKT / 2; ++kk) {
            sa[kk][0] = E::pack(st[2 * kk][0], st[2 * kk][1]);
            sa[kk][1] = E::pack(st[2 * kk][2], st[2 * kk][3]);
            sa[kk][2] = E::pack(st[2 * kk + 1][0], st[2 * kk + 1][1]);
            sa[kk][3] = E::pack(st[2 * kk + 1][2], st[2 * kk + 1][3]);
        }
        // P = S^T w^T and O = S^T q^T (tokens on n)
        float p[kNT][4] = {}, out[kNT][4] = {};
#pragma unroll
        for (uint32_t kk = 0; kk < kKT / 2; ++kk)
#pragma unroll
            for (uint32_t jp = 0; jp < kNT / 2; ++jp) {
                const uint32_t off = gdr_tile_offset<C>(16 * jp + lane % 8 + 8 * (lane / 16), 2 * kk + (lane / 8) % 2);
                uint32_t bw[4], bq[4];
                ldmatrix_x4(smem_addr(s + off), bw[0], bw[1], bw[2], bw[3]);
                ldmatrix_x4(smem_addr(s + Cfg::kOffQ + off), bq[0], bq[1], bq[2], bq[3]);
                E::mma(p[2 * jp], sa[kk], {bw[0], bw[1]});
                E::mma(p[2 * jp + 1], sa[kk], {bw[2], bw[3]});
                E::mma(out[2 * jp], sa[kk], {bq[0], bq[1]});
                E::mma(out[2 * jp + 1], sa[kk], {bq[2], bq[3]});
            }
        // v'^T = u^T - P (u^T read transposed from the [token][v] tile); O columns times scale e^G / |q|
        float vp[kNT][4];
#pragma unroll
        for (uint32_t jp = 0; jp < kNT / 2; ++jp) {
            const uint32_t m = lane / 8, row = 16 * jp + 8 * (m / 2) + lane % 8;
            const uint32_t chunk = 2 * warp + m % 2;   // the warp's 16 columns of the slice
            constexpr uint32_t kChunksPerRow = Cfg::kURowBytes / 16;
            const uint32_t off = Cfg::kOffU + chunk / kChunksPerRow * (C * Cfg::kURowBytes) +
                                 swizzle_offset<Cfg::kURowBytes>(row, chunk % kChunksPerRow);
            uint32_t r[4];
            ldmatrix_x4_trans(smem_addr(s + off), r[0], r[1], r[2], r[3]);
#pragma unroll
            for (uint32_t x = 0; x < 2; ++x) {
                float u0, u1, u2, u3;
                E::unpack(r[2 * x], u0, u1), E::unpack(r[2 * x + 1], u2, u3);
                float* d = vp[2 * jp + x];
                const float* pp = p[2 * jp + x];
                d[0] = u0 - pp[0], d[1] = u1 - pp[1], d[2] = u2 - pp[2], d[3] = u3 - pp[3];
            }
        }
        float kf[kNT][2];
#pragma unroll
        for (uint32_t j = 0; j < kNT; ++j)
#pragma unroll
            for (uint32_t e = 0; e < 2; ++e) {
                const uint32_t tok = 8 * j + 2 * t4 + e;
                const float4 gt = gate[tok];
                out[j][e] *= gt.y, out[j][e + 2] *= gt.y;
                kf[j][e] = tok < len ? gt.z : 0.0f;
            }
        // O += v'^T attn^T (causal: k-steps up to the output block), v' as the A operand
#pragma unroll
        for (uint32_t ks = 0; ks < kNT / 2; ++ks) {
            const uint32_t a[4] = {E::pack(vp[2 * ks][0], vp[2 * ks][1]), E::pack(vp[2 * ks][2], vp[2 * ks][3]),
                                   E::pack(vp[2 * ks + 1][0], vp[2 * ks + 1][1]),
                                   E::pack(vp[2 * ks + 1][2], vp[2 * ks + 1][3])};
#pragma unroll
            for (uint32_t np = ks; np < kNT / 2; ++np) {
                uint32_t b[4];
                ldmatrix_x4(smem_addr(s + Cfg::kOffAttn +
                                      swizzle_offset<C * 2>(16 * np + lane % 8 + 8 * (lane / 16), 2 * ks + (lane / 8) % 2)),
                            b[0], b[1], b[2], b[3]);
                E::mma(out[2 * np], a, {b[0], b[1]});
                E::mma(out[2 * np + 1], a, {b[2], b[3]});
            }
        }
        // S^T = e^{G_last} S^T + (v'^T diag(kf)) k
        const float decay = __expf(gate[len - 1].x);
#pragma unroll
        for (uint32_t kt = 0; kt < kKT; ++kt)
#pragma unroll
            for (uint32_t e = 0; e < 4; ++e) st[kt][e] *= decay;
#pragma unroll
        for (uint32_t ks = 0; ks < kNT / 2; ++ks) {
            const uint32_t a[4] = {E::pack(vp[2 * ks][0] * kf[2 * ks][0], vp[2 * ks][1] * kf[2 * ks][1]),
                                   E::pack(vp[2 * ks][2] * kf[2 * ks][0], vp[2 * ks][3] * kf[2 * ks][1]),
                                   E::pack(vp[2 * ks + 1][0] * kf[2 * ks + 1][0], vp[2 * ks + 1][1] * kf[2 * ks + 1][1]),
                                   E::pack(vp[2 * ks + 1][2] * kf[2 * ks + 1][0], vp[2 * ks + 1][3] * kf[2 * ks + 1][1])};
#pragma unroll
            for (uint32_t np = 0; np < kKT / 2; ++np) {
                uint32_t b[4];
                const uint32_t m = lane / 8;
                ldmatrix_x4_trans(smem_addr(s + Cfg::kOffK +
                                            gdr_tile_offset<C>(16 * ks + 8 * (m % 2) + lane % 8, 2 * np + m / 2)),
                                  b[0], b[1], b[2], b[3]);
                E::mma(st[2 * np], a, {b[0], b[1]});
                E::mma(st[2 * np + 1], a, {b[2], b[3]});
            }
        }
        // every read of the stage is done: fence the generic reads against the next TMA write, release
        fence_proxy_async_smem();
        __syncwarp();
        if (lane == 0) mbarrier_arrive(&empty_bar[stage]);
        if (++stage == kStages) stage = 0, phase ^= 1;

        // o rows of the chunk's tokens: transpose through the warp's staging tile, 16-byte stores
#pragma unroll
        for (uint32_t j = 0; j < kNT; ++j)
#pragma unroll
            for (uint32_t e = 0; e < 4; ++e)
                s_o[(8 * j + 2 * t4 + e % 2) * 16 + gid + 8 * (e / 2)] = static_cast<Elem>(out[j][e]);
        __syncwarp();
        for (uint32_t i = lane; i < len * 2; i += 32) {
            const uint32_t row = i / 2, part = i % 2;
            *reinterpret_cast<uint4*>(o + (static_cast<size_t>(first + row) * value_heads + hv) * kGdrHeadDim + v0 +
                                      8 * part) = *reinterpret_cast<const uint4*>(s_o + row * 16 + 8 * part);
        }
        __syncwarp();
    }

    if (final_state != nullptr) {
#pragma unroll
        for (uint32_t kt = 0; kt < kKT; ++kt)
#pragma unroll
            for (uint32_t e = 0; e < 4; ++e) {
                const uint32_t kd = 8 * kt + 2 * t4 + e % 2, vd = v0 + gid + 8 * (e / 2);
                final_state[state_at + kd * kGdrHeadDim + vd] = st[kt][e];
            }
    }
    pdl_launch_dependents();
}

}  // namespace sm120
