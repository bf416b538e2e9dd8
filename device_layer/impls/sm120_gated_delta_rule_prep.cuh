#pragma once
// Gated delta rule, chunked forward, stage 1 of 2: the per-chunk factors (parallel over chunks and value heads).
// For the chunk of C tokens at `first` of value head hv (q / k head hv / group), with G = cumsum(g) in the chunk,
// beta, and 1/|q|, 1/|k| (1 unless l2-normalizing in the kernel):
//   A    = strictly_lower(beta_i exp(G_i - G_j) k_i.k_j / (|k_i||k_j|))      (K K^T on mma.sync, fp32)
//   T    = (I + A)^-1: 16x16 diagonal blocks by forward substitution, then the off-diagonal blocks
//          T_ij = -T_ii sum_{j <= m < i} A_im T_mj, in fp32 SIMT
//   Tw   = T diag(beta exp(G) / |k|),   Tu = T diag(beta)                    (the WY factors: w = Tw k, u = Tu v)
//   attn = scale exp(G_i - G_j) q_i.k_j / (|q_i||k_j|) for j <= i           (Q K^T on mma.sync)
//   gates: (G, scale exp(G) / |q|, exp(G_last - G) / |k|, 0) per token
// and writes them token-indexed (layout in layout/sm120_gated_delta_rule_layout.cuh). w and u themselves are never
// stored: the recurrence multiplies by Tw and Tu (C x C per chunk instead of C x 128), which moves 6 KiB per
// 32-token chunk and value head instead of 16. Rows past the chunk's end are zero in shared memory and never written.
//
// CTAs of four warps over the items (chunk slot, value head), item = slot * HV + hv: one item per CTA, or, with
// kPersistent (the host overlaps this kernel with a recurrence of few CTAs, which leaves SMs idle), a persistent
// grid that walks the items in slot order, publishes each in `ready` and lets the recurrence start at once
// (layout/sm120_gated_delta_rule_layout.cuh). Such a CTA holds kTeams teams of four warps, each with its own
// shared memory and named barrier, so one SM works on kTeams items at once (an item's phases are short and
// barrier-bound). A separate instantiation: the loop costs the one-item kernel registers (51 -> 99 at C = 32
// on sm_90a) and so occupancy. q and k tiles come in by plain 16-byte loads (a chunk may start
// anywhere in a packed varlen batch and ends at its sequence's end, which a TMA box cannot stop at).

#include "../common/sm120_arch.cuh"
#include "../common/sm120_fence.cuh"
#include "../common/sm120_flag.cuh"
#include "../common/sm120_ldmatrix.cuh"
#include "../common/sm120_mbarrier.cuh"
#include "../common/sm120_pdl.cuh"
#include "../common/sm120_warp.cuh"
#include "../layout/sm120_gated_delta_rule_layout.cuh"

namespace sm120 {

template <uint32_t kChunk>
struct GdrPrepConfig {
    static constexpr uint32_t kThreads = 128;
    static constexpr uint32_t kBlocks = kChunk / 16;  // 16x16 blocks per side of A
    static constexpr uint32_t kTileBytes = kChunk * kGdrHeadDim * 2;
    static constexpr uint32_t kLdA = kChunk + 1;    // fp32 row stride (words) of A and T
    static constexpr uint32_t kLdT16 = kChunk + 8;  // 2-byte row stride of Tw / Tu / attn staging
    static constexpr uint32_t kMatBytes = kChunk * kLdA * 4;
    static constexpr uint32_t kScratchBytes = (kBlocks > 1 ? (kBlocks - 1) * 256 : 1) * 4;
    static constexpr uint32_t kHalfMatBytes = kChunk * kLdT16 * 2;
    // [k | q tiles][A + off-diagonal scratch, later Tw + Tu][T, earlier the attn staging][G, beta, 1/|k|, 1/|q|]
    static constexpr uint32_t kRegionA =
        kMatBytes + kScratchBytes > 2 * kHalfMatBytes ? kMatBytes + kScratchBytes : 2 * kHalfMatBytes;
    static constexpr uint32_t kRegionT = kMatBytes > kHalfMatBytes ? kMatBytes : kHalfMatBytes;
    static constexpr uint32_t kOffA = 2 * kTileBytes;
    static constexpr uint32_t kOffT = kOffA + align_up(kRegionA, 16u);
    static constexpr uint32_t kOffVec = kOffT + align_up(kRegionT, 16u);
    static constexpr uint32_t kSmemBytes = kOffVec + 4 * kChunk * 4;
    static constexpr uint32_t kTeamStride = align_up(kSmemBytes, 1024u);  // per team of a persistent CTA
    static_assert(kChunk == 16 || kChunk == 32 || kChunk == 64, "chunk size: 16, 32 or 64");
    static_assert(kSmemBytes <= kMaxSmemPerBlock, "shared memory exceeds the SM120 per-block budget (101376 B)");
};

template <uint32_t kChunk, bool kPersistent, uint32_t kTeams, typename Elem>
// clang-format off: a kernel declaration (see .clang-format)
__global__ void __launch_bounds__(GdrPrepConfig<kChunk>::kThreads * kTeams, 1)
sm120_gated_delta_rule_prep_kernel(const Elem* __restrict__ q, const Elem* __restrict__ k,
                                   const float* __restrict__ g, const void* __restrict__ beta,
                                   const int32_t* __restrict__ cu_seqlens, Elem* __restrict__ tw,
                                   Elem* __restrict__ tu, Elem* __restrict__ attn,
                                   float* __restrict__ gates, uint32_t num_seqs, uint32_t seq_len,
                                   uint32_t value_heads, uint32_t group, float scale, uint32_t beta_fp32,
                                   uint32_t l2norm, int32_t* __restrict__ cu_effective, int32_t* ready) {
    // clang-format on
    using Cfg = GdrPrepConfig<kChunk>;
    using E = GdrElem<Elem>;
    constexpr uint32_t C = kChunk, kNB = Cfg::kBlocks, kLdA = Cfg::kLdA, kLd16 = Cfg::kLdT16;
    static_assert(kTeams >= 1 && (kPersistent || kTeams == 1), "teams: persistent CTAs only");
    static_assert(kTeams * Cfg::kTeamStride <= kMaxSmemPerBlock, "teams exceed the SM120 per-block budget");

    // a team of four warps runs one item at a time, with its own shared memory and barrier
    const uint32_t team = warp_idx() / 4;
    extern __shared__ __align__(1024) uint8_t smem_all[];
    uint8_t* smem = smem_all + team * Cfg::kTeamStride;
    uint8_t* s_k = smem;
    uint8_t* s_q = smem + Cfg::kTileBytes;
    float* s_a = reinterpret_cast<float*>(smem + Cfg::kOffA);
    float* s_x = s_a + C * kLdA;                              // off-diagonal products
    Elem* s_tw = reinterpret_cast<Elem*>(smem + Cfg::kOffA);  // after the inverse: T diag(beta e^G / |k|)
    Elem* s_tu = s_tw + C * kLd16;                            //                    T diag(beta)
    float* s_t = reinterpret_cast<float*>(smem + Cfg::kOffT);
    Elem* s_attn = reinterpret_cast<Elem*>(smem + Cfg::kOffT);  // staging, before T is written
    float* s_g = reinterpret_cast<float*>(smem + Cfg::kOffVec);
    float* s_beta = s_g + C;
    float* s_rk = s_beta + C;
    float* s_rq = s_rk + C;

    const uint32_t warp = warp_idx() % 4, lane = lane_idx(), tid = threadIdx.x % Cfg::kThreads;
    const uint32_t gid = lane >> 2, t4 = lane & 3;
    const auto team_sync = [&] {
        if constexpr (kTeams == 1) __syncthreads();
        else named_barrier_sync(1 + team, Cfg::kThreads);
    };

    pdl_wait_primary();
    // persistent (overlapped launch): the recurrence may start now; it waits on `ready`, not on this grid's end
    if constexpr (kPersistent) pdl_launch_dependents();
    // the forward kernel reads the clamped running maximum of cu_seqlens (layout/sm120_gated_delta_rule_layout.cuh)
    if (cu_seqlens != nullptr && blockIdx.x == 0 && warp_idx() == 0) {
        gdr_effective_offsets<C>(cu_seqlens, num_seqs, seq_len, lane, cu_effective);
        __syncwarp();
        if (kPersistent && lane == 0) flag_publish(ready);
    }

    // One item (chunk slot, value head), item = slot * HV + hv: value heads fastest, so the CTAs of one chunk slot
    // run together and read / write each token's heads as one contiguous stretch. False past the last chunk.
    auto run_item = [&](uint32_t item) -> bool {
        const uint32_t hv = item % value_heads, slot = item / value_heads, h = hv / group;
        uint32_t first, end;
        if (!gdr_chunk_of_slot<C>(cu_seqlens, num_seqs, seq_len, slot, lane, first, end)) return false;
        const uint32_t len = min(C, end - first);

        // ---- load the k, q tiles (zero rows past the chunk) and the per-token scalars ----
        for (uint32_t i = tid; i < C * 16; i += Cfg::kThreads) {
            const uint32_t row = i / 16, chunk = i % 16;
            uint4 kq = make_uint4(0, 0, 0, 0), qq = kq;
            if (row < len) {
                const size_t tok = first + row;
                kq = __ldg(reinterpret_cast<const uint4*>(k + (tok * (value_heads / group) + h) * kGdrHeadDim) + chunk);
                qq = __ldg(reinterpret_cast<const uint4*>(q + (tok * (value_heads / group) + h) * kGdrHeadDim) + chunk);
            }
            const uint32_t off = gdr_tile_offset<C>(row, chunk);
            *reinterpret_cast<uint4*>(s_k + off) = kq;
            *reinterpret_cast<uint4*>(s_q + off) = qq;
        }
        if (tid < C) {
            float gv = 0.0f, bv = 0.0f;
            if (tid < len) {
                const size_t idx = static_cast<size_t>(first + tid) * value_heads + hv;
                gv = __ldg(g + idx);
                bv = beta_fp32 ? __ldg(static_cast<const float*>(beta) + idx)
                               : E::to_float(static_cast<const Elem*>(beta)[idx]);
            }
            s_g[tid] = gv, s_beta[tid] = bv;
        }
        team_sync();

        // ---- cumsum of g (warp 0); 1/|k|, 1/|q| (warps 1-3, a row per warp step) ----
        if (warp == 0) {
            float carry = 0.0f;
#pragma unroll
            for (uint32_t base = 0; base < C; base += 32) {
                float x = base + lane < C ? s_g[base + lane] : 0.0f;
#pragma unroll
                for (uint32_t d = 1; d < 32; d <<= 1) {
                    const float y = __shfl_up_sync(0xffffffffu, x, d);
                    if (lane >= d) x += y;
                }
                if (base + lane < C) s_g[base + lane] = x + carry;
                carry += __shfl_sync(0xffffffffu, x, 31);
            }
        } else if (!l2norm) {
            for (uint32_t row = tid - 32; row < C; row += Cfg::kThreads - 32) s_rk[row] = 1.0f, s_rq[row] = 1.0f;
        } else {
            for (uint32_t row = warp - 1; row < C; row += 3) {
                // lane reads columns [4 lane, 4 lane + 4): 8 bytes of 16-byte chunk lane / 2
                const uint32_t off = gdr_tile_offset<C>(row, lane / 2) + (lane % 2) * 8;
                float ss[2];
#pragma unroll
                for (uint32_t which = 0; which < 2; ++which) {
                    const uint2 r = *reinterpret_cast<const uint2*>((which ? s_q : s_k) + off);
                    float a, b, c, d;
                    E::unpack(r.x, a, b), E::unpack(r.y, c, d);
                    float s = a * a + b * b + c * c + d * d;
#pragma unroll
                    for (uint32_t m = 16; m > 0; m >>= 1) s += __shfl_xor_sync(0xffffffffu, s, m);
                    ss[which] = s;
                }
                if (lane == 0) s_rk[row] = rsqrtf(ss[0] + 1e-6f), s_rq[row] = rsqrtf(ss[1] + 1e-6f);
            }
        }
        team_sync();

        // ---- K K^T (strict lower -> A, fp32) and Q K^T (lower incl. diagonal -> attn staging) ----
        {
            constexpr uint32_t kLowerBlocks = kNB * (kNB + 1) / 2;
            for (uint32_t task = warp; task < 2 * kLowerBlocks; task += 4) {
                const bool is_qk = task >= kLowerBlocks;
                uint32_t b = is_qk ? task - kLowerBlocks : task, bi = 0;
                while (b > bi) b -= ++bi;  // (bi, bj = b) with bj <= bi, row-major over the lower triangle
                const uint32_t bj = b;
                const uint8_t* s_lhs = is_qk ? s_q : s_k;
                float acc[2][4] = {};
#pragma unroll
                for (uint32_t kk = 0; kk < kGdrHeadDim / 16; ++kk) {
                    uint32_t a[4], bf[4];
                    ldmatrix_x4(smem_addr(s_lhs + gdr_tile_offset<C>(16 * bi + lane % 16, 2 * kk + lane / 16)), a[0],
                                a[1], a[2], a[3]);
                    ldmatrix_x4(smem_addr(s_k + gdr_tile_offset<C>(16 * bj + lane % 8 + 8 * (lane / 16),
                                                                   2 * kk + (lane / 8) % 2)),
                                bf[0], bf[1], bf[2], bf[3]);
                    E::mma(acc[0], a, {bf[0], bf[1]});
                    E::mma(acc[1], a, {bf[2], bf[3]});
                }
#pragma unroll
                for (uint32_t nt = 0; nt < 2; ++nt)
#pragma unroll
                    for (uint32_t e = 0; e < 4; ++e) {
                        const uint32_t i = 16 * bi + gid + 8 * (e / 2), j = 16 * bj + 8 * nt + 2 * t4 + e % 2;
                        const float decay = i >= j ? __expf(s_g[i] - s_g[j]) : 0.0f;
                        if (is_qk) {
                            const float x = i >= j ? scale * s_rq[i] * s_rk[j] * acc[nt][e] * decay : 0.0f;
                            s_attn[i * kLd16 + j] = static_cast<Elem>(x);
                        } else {
                            s_a[i * kLdA + j] = i > j ? s_beta[i] * s_rk[i] * s_rk[j] * acc[nt][e] * decay : 0.0f;
                        }
                    }
            }
            // attn above the diagonal blocks is zero
            for (uint32_t e = tid; e < C * C; e += Cfg::kThreads) {
                const uint32_t i = e / C, j = e % C;
                if (j / 16 > i / 16) s_attn[i * kLd16 + j] = static_cast<Elem>(0.0f);
            }
        }
        team_sync();

        // ---- attn rows out; diagonal 16x16 blocks of T by forward substitution (thread = one column) ----
        for (uint32_t e = tid; e < len * (C / 8); e += Cfg::kThreads) {
            const uint32_t row = e / (C / 8), part = e % (C / 8);
            const uint4 x = *reinterpret_cast<const uint4*>(s_attn + row * kLd16 + part * 8);
            *reinterpret_cast<uint4*>(attn + (static_cast<size_t>(first + row) * value_heads + hv) * C + part * 8) = x;
        }
        team_sync();  // the staging is T's space from here
        if (tid < C) {
            // column cc of the block's inverse in registers (fully unrolled: x[j] stays a register); rows above the
            // diagonal come out zero because x[j] = 0 for j < cc
            const uint32_t b0 = tid / 16 * 16, cc = tid % 16;
            float x[16];
#pragma unroll
            for (uint32_t r = 0; r < 16; ++r) {
                float acc = r == cc ? 1.0f : 0.0f;
#pragma unroll
                for (uint32_t j = 0; j < r; ++j) acc -= s_a[(b0 + r) * kLdA + b0 + j] * x[j];
                x[r] = r < cc ? 0.0f : acc;
                s_t[(b0 + r) * kLdA + b0 + cc] = x[r];
            }
        }
        for (uint32_t e = tid; e < C * C; e += Cfg::kThreads) {
            const uint32_t i = e / C, j = e % C;
            if (j / 16 > i / 16) s_t[i * kLdA + j] = 0.0f;
        }
        team_sync();
        // ---- off-diagonal blocks, block row by block row: X = sum_m A_im T_mj, then T_ij = -T_ii X ----
#pragma unroll 1
        for (uint32_t bi = 1; bi < kNB; ++bi) {
            for (uint32_t e = tid; e < bi * 256; e += Cfg::kThreads) {
                const uint32_t bj = e / 256, r = e % 256 / 16, c = e % 16;
                float x = 0.0f;
                for (uint32_t m = 16 * bj; m < 16 * bi; ++m)
                    x += s_a[(16 * bi + r) * kLdA + m] * s_t[m * kLdA + 16 * bj + c];
                s_x[e] = x;
            }
            team_sync();
            for (uint32_t e = tid; e < bi * 256; e += Cfg::kThreads) {
                const uint32_t bj = e / 256, r = e % 256 / 16, c = e % 16;
                float x = 0.0f;
#pragma unroll
                for (uint32_t m = 0; m <= 15; ++m)
                    x += s_t[(16 * bi + r) * kLdA + 16 * bi + m] * s_x[bj * 256 + m * 16 + c];
                s_t[(16 * bi + r) * kLdA + 16 * bj + c] = -x;
            }
            team_sync();
        }

        // ---- the WY factors (A's space) and the gates ----
        for (uint32_t e = tid; e < C * C; e += Cfg::kThreads) {
            const uint32_t i = e / C, j = e % C;
            const float t = s_t[i * kLdA + j], bj = s_beta[j];
            s_tw[i * kLd16 + j] = static_cast<Elem>(t * bj * __expf(s_g[j]) * s_rk[j]);
            s_tu[i * kLd16 + j] = static_cast<Elem>(t * bj);
        }
        if (tid < len) {
            const float gi = s_g[tid], glast = s_g[len - 1];
            const float4 gate = make_float4(gi, scale * __expf(gi) * s_rq[tid], __expf(glast - gi) * s_rk[tid], 0.0f);
            *reinterpret_cast<float4*>(gates + (static_cast<size_t>(first + tid) * value_heads + hv) * kGdrGateFloats) =
                gate;
        }
        team_sync();
        for (uint32_t e = tid; e < len * (C / 8); e += Cfg::kThreads) {
            const uint32_t row = e / (C / 8), part = e % (C / 8);
            const size_t at = (static_cast<size_t>(first + row) * value_heads + hv) * C + part * 8;
            *reinterpret_cast<uint4*>(tw + at) = *reinterpret_cast<const uint4*>(s_tw + row * kLd16 + part * 8);
            *reinterpret_cast<uint4*>(tu + at) = *reinterpret_cast<const uint4*>(s_tu + row * kLd16 + part * 8);
        }
        if constexpr (kPersistent) {
            team_sync();  // every thread's stores (and shared-memory reads) of this item, then one release
            if (tid == 0) flag_publish(gdr_ready_flag(ready, slot, value_heads, hv));
        }
        return true;
    };

    if constexpr (kPersistent) {
        // the items in slot order, the order the recurrence consumes them
        const uint32_t per_seq = (seq_len + C - 1) / C;
        const uint32_t items = (cu_seqlens != nullptr ? per_seq + num_seqs : num_seqs * per_seq) * value_heads;
#pragma unroll 1
        for (uint32_t item = blockIdx.x * kTeams + team; item < items && run_item(item); item += gridDim.x * kTeams) {}
    } else {
        run_item(blockIdx.x);
        pdl_launch_dependents();
    }
}

}  // namespace sm120
