#pragma once
// Gated delta rule backward, the per-chunk gradients (issue 41's B3; docs/gated_delta_rule.md, "Backward plan"):
// stages 0 and 3 of the chunk-form backward (selftest/workloads/gdr_backward_reference.py, backward.py's
// _factors and _chunk_grads) for one chunk of C = kGdrStateTokens tokens and one value head per CTA, from the
// token-major inputs and the two sequential passes' outputs: the state entering the chunk (h, [K][V] in Elem, the
// states instance of the forward) and the state gradient leaving it (dh', the reverse pass), both at the chunk's
// slot and rounded to Elem by the pass that stored them (they are mma operands here, so fp32 only doubled the
// bytes; sum(h * dh') takes the rounded values too). Every product runs on mma.sync with Elem operands and fp32
// accumulation (the precision study bounds that at 5.4e-3 relative L2, a quarter of the issue's 0.02); T =
// (I + A)^-1 and the elementwise terms stay fp32.
//
// With Kn, Qn the (optionally l2-normalized) rows, G = cumsum(g), gamma = e^G, tail = e^(G_last - G),
// D_ij = e^(G_i - G_j) (j <= i), Ar = strict(Kn Kn^T * D), M = causal(Qn Kn^T * D), T = (I + diag(beta) Ar)^-1:
//   phase 1, over 16-column slices of V (h, dh' and v, do sliced; everything below per slice):
//     Y    = Kn h,  Yd = Kn dh'                           Z = diag(beta) v - diag(beta gamma) Y,  vnew = T Z
//     dvn  = s M^T do + diag(tail) Yd                      dvb = T^T dvn,  dv = diag(beta) dvb
//     accumulated over V: dm = do vnew^T, dt = dvn Z^T (= dvn vb^T + dw kb^T with w's gradient dw = -dvn h^T),
//     dqg = do h^T, dkp = diag(tail) vnew dh'^T - diag(beta gamma) dvb h^T (dk's terms through kd and through
//     kb: T^T dw = -dvb h^T), and per row sum_v dvb v, sum_v vnew Yd (= sum_k dkd Kn), sum_v dvb Y
//     (= -sum_k dkb Kn), sum(h * dh'): no C x 128 gradient of w, kd or kb is ever formed
//   phase 2, the C x C algebra: dqk = causal(s dm * D); dq = dqk Kn + s gamma dqg; dA = strict(-T^T dt T^T);
//     dk = dkp + dqk^T Qn + (dkk + dkk^T) Kn with dkk = diag(beta) dA * D; dbeta and dg from the row sums (dg the
//     reverse cumsum of G's gradient: every term of backward.py's dcum).
// A CTA works `fold` value heads of one q / k head in turn (GVA: a head's group of value heads comes in group /
// fold parts), so dq and dk come summed over each part: fp32 [tokens][heads x parts][K] (the host sums the parts,
// if more than one, then applies the l2norm's backward); dv token-major in Elem (rounded once from fp32); dg, dbeta
// fp32 per value head. Rows past the chunk's length are zero in shared memory (their g = 0 keeps G flat) and never
// written. No atomics anywhere: bitwise repeatable.
//
// Latency, since one CTA fills an SM: T is inverted by 16 x 16 blocks (a 16-step chain, not 64); each slice's
// products are split between the two warp halves; the next slice's global values load while the current one is
// worked on; G's cumsum and dg's reverse cumsum are warp scans; the product loops keep two k-steps in flight
// (an mma waited on its own ldmatrix: a third of the stall samples under ncu, run 147); dq / dk rows are written
// 8 bytes a lane; phase 1's three row sums fold at one barrier pair; the upper half's two stage-A products (Yd and
// M^T do) interleave their k-steps; the first slice's values, phase 0's q / k rows and g, and phase 2's Qn all
// load ahead of the work that hides their latency; T's level products have fixed lengths, so they unroll.
//
// Shared memory (bytes): Kn 17408, T 9216, M 9216 (later dqk, then the symmetric dkk), Ar fp32 16640, vectors and
// reduction rows 4608, and one work region of 34816 that holds, in turn, Qn + T's fp32 build (phase 0), the slice
// tiles (phase 1: h, dh' 6144 each, seven 64 x 16 tiles 3072 each), Qn, then dt and P (phase 2; dkk takes Ar's
// place once Ar is read for the last time): 91904 in all. Sixteen warps, 128 registers, no spill (CUDA 13.0).

#include "../common/sm120_arch.cuh"
#include "../common/sm120_ldmatrix.cuh"
#include "../common/sm120_mbarrier.cuh"
#include "../common/sm120_pdl.cuh"
#include "../common/sm120_warp.cuh"
#include "../layout/sm120_gated_delta_rule_layout.cuh"

namespace sm120 {

struct GdrChunkGradConfig {
    static constexpr uint32_t kThreads = 512;  // sixteen warps: the five accumulators over V take 64 registers
    static constexpr uint32_t C = kGdrStateTokens, K = kGdrHeadDim, kSlice = 16;
    static constexpr uint32_t kLdK = K + 8, kLdC = C + 8, kLdS = kSlice + 8, kLdF = C + 1;  // padded row strides
    static constexpr uint32_t kTileK = C * kLdK * 2, kTileC = C * kLdC * 2, kTileF = C * kLdF * 4;
    static constexpr uint32_t kTileH = K * kLdS * 2, kTileS = C * kLdS * 2;
    static constexpr uint32_t kOffK = 0, kOffT = kOffK + kTileK, kOffM = kOffT + kTileC, kOffF = kOffM + kTileC;
    static constexpr uint32_t kVecFloats = 8 * C;   // cum, beta, gamma, tail, rq, a spare row, bg, misc
    static constexpr uint32_t kRedFloats = 10 * C;  // row partials [4][C], column partials [4][C], two sums
    static constexpr uint32_t kOffVec = kOffF + kTileF;
    static constexpr uint32_t kOffRed = kOffVec + kVecFloats * 4;
    static constexpr uint32_t kOffWork = align_up(kOffRed + kRedFloats * 4, 128u);
    static constexpr uint32_t kWorkBytes = 2 * kTileK > kTileK + kTileF ? 2 * kTileK : kTileK + kTileF;
    static constexpr uint32_t kSmemBytes = kOffWork + kWorkBytes;
    static_assert(2 * kTileH + 7 * kTileS <= kWorkBytes, "the phase-1 slice tiles fit the work region");
    static_assert(2 * kTileC <= kWorkBytes, "dt and P fit the work region");
    static_assert(kSmemBytes <= kMaxSmemPerBlock, "shared memory exceeds the SM120 per-block budget (101376 B)");
};

// The A fragment of one k-step (16 rows from m0, k from k0) of an Elem tile in shared memory (byte address a,
// row stride lda elements), stored [m][k] (or [k][m] with kATrans: read through ldmatrix's .trans).
template <bool kATrans>
SM120_DEVICE void gdr_load_a(uint32_t a, uint32_t lda, uint32_t m0, uint32_t k0, uint32_t lane, uint32_t (&af)[4]) {
    if constexpr (!kATrans) {
        const uint32_t row = m0 + lane % 8 + 8 * (lane / 8 % 2), col = k0 + 8 * (lane / 16);
        ldmatrix_x4(a + (row * lda + col) * 2, af[0], af[1], af[2], af[3]);
    } else {
        const uint32_t row = k0 + lane % 8 + 8 * (lane / 16), col = m0 + 8 * (lane / 8 % 2);
        ldmatrix_x4_trans(a + (row * lda + col) * 2, af[0], af[1], af[2], af[3]);
    }
}

// Two k-steps (k0 .. k0 + 31) of a 16 x 8 tile: one x4 load holds B for both, and the second step's loads are in
// flight while the first mma waits. B is stored [n][k] (or [k][n] with kBTrans).
template <typename E, bool kATrans, bool kBTrans>
SM120_DEVICE void gdr_mma_16x8_k32(float (&acc)[4], uint32_t a, uint32_t lda, uint32_t b, uint32_t ldb, uint32_t m0,
                                   uint32_t n0, uint32_t k0, uint32_t lane) {
    uint32_t a0[4], a1[4], bf[4];
    gdr_load_a<kATrans>(a, lda, m0, k0, lane, a0);
    gdr_load_a<kATrans>(a, lda, m0, k0 + 16, lane, a1);
    if constexpr (!kBTrans) {
        const uint32_t row = n0 + lane % 8, col = k0 + 8 * (lane / 8);
        ldmatrix_x4(b + (row * ldb + col) * 2, bf[0], bf[1], bf[2], bf[3]);
    } else {
        const uint32_t row = k0 + lane % 8 + 8 * (lane / 8), col = n0;
        ldmatrix_x4_trans(b + (row * ldb + col) * 2, bf[0], bf[1], bf[2], bf[3]);
    }
    E::mma(acc, a0, {bf[0], bf[1]});
    E::mma(acc, a1, {bf[2], bf[3]});
}

// acc[NT] (+)= A (16 rows from m0) x B (8 NT columns from n0), summed over k in [0, kK), on Elem operands in
// shared memory with row strides lda / ldb (elements). A is stored [m][k] (or [k][m] with kATrans), B [n][k] (or
// [k][n] with kBTrans): the transposed readings come from ldmatrix's .trans, never from a copy.
template <typename E, uint32_t NT, uint32_t kK, bool kATrans, bool kBTrans>
SM120_DEVICE void gdr_tile_mma(float (&acc)[NT][4], const void* a, uint32_t lda, const void* b, uint32_t ldb,
                               uint32_t m0, uint32_t n0, uint32_t lane) {
    static_assert(NT % 2 == 0 || NT == 1, "n8 tiles come in pairs");
    const uint32_t a_base = smem_addr(a), b_base = smem_addr(b);
    auto load_a = [&](uint32_t k0, uint32_t (&af)[4]) { gdr_load_a<kATrans>(a_base, lda, m0, k0, lane, af); };
    if constexpr (NT == 1) {
        // one n8 tile, two k-steps a turn (a step at a time, each mma waited on its own loads)
        static_assert(kK % 32 == 0, "k-steps come in pairs");
#pragma unroll 1
        for (uint32_t k0 = 0; k0 < kK; k0 += 32)
            gdr_mma_16x8_k32<E, kATrans, kBTrans>(acc[0], a_base, lda, b_base, ldb, m0, n0, k0, lane);
    } else {
        // two k-steps unrolled, so the second's loads issue while the first's mmas wait (fully unrolled, the
        // loads of every step would be issued first and hold registers the callers' accumulators need)
#pragma unroll 2
        for (uint32_t k0 = 0; k0 < kK; k0 += 16) {
            uint32_t af[4];
            load_a(k0, af);
#pragma unroll
            for (uint32_t nt = 0; nt < NT; nt += 2) {
                uint32_t bf[4];
                if constexpr (!kBTrans) {
                    const uint32_t row = n0 + 8 * nt + lane % 8 + 8 * (lane / 16), col = k0 + 8 * (lane / 8 % 2);
                    ldmatrix_x4(b_base + (row * ldb + col) * 2, bf[0], bf[1], bf[2], bf[3]);
                } else {
                    const uint32_t row = k0 + lane % 8 + 8 * (lane / 8 % 2), col = n0 + 8 * nt + 8 * (lane / 16);
                    ldmatrix_x4_trans(b_base + (row * ldb + col) * 2, bf[0], bf[1], bf[2], bf[3]);
                }
                E::mma(acc[nt], af, {bf[0], bf[1]});
                E::mma(acc[nt + 1], af, {bf[2], bf[3]});
            }
        }
    }
}

// Two independent 16 x 8 products of one warp, their k-steps interleaved while both have some (kK2 <= kK1): the
// second's loads and mmas fill the first's waits, so the pair takes about the longer one's time, not the sum.
template <typename E, uint32_t kK1, bool kA1Trans, bool kB1Trans, uint32_t kK2, bool kA2Trans, bool kB2Trans>
SM120_DEVICE void gdr_tile_mma_pair(float (&acc1)[4], const void* a1, uint32_t lda1, const void* b1, uint32_t ldb1,
                                    float (&acc2)[4], const void* a2, uint32_t lda2, const void* b2, uint32_t ldb2,
                                    uint32_t m0, uint32_t n0, uint32_t lane) {
    static_assert(kK2 <= kK1 && kK1 % 32 == 0 && kK2 % 32 == 0, "k-steps come in pairs, the longer first");
    const uint32_t a1s = smem_addr(a1), b1s = smem_addr(b1), a2s = smem_addr(a2), b2s = smem_addr(b2);
#pragma unroll 1
    for (uint32_t k0 = 0; k0 < kK2; k0 += 32) {
        gdr_mma_16x8_k32<E, kA1Trans, kB1Trans>(acc1, a1s, lda1, b1s, ldb1, m0, n0, k0, lane);
        gdr_mma_16x8_k32<E, kA2Trans, kB2Trans>(acc2, a2s, lda2, b2s, ldb2, m0, n0, k0, lane);
    }
#pragma unroll 1
    for (uint32_t k0 = kK2; k0 < kK1; k0 += 32)
        gdr_mma_16x8_k32<E, kA1Trans, kB1Trans>(acc1, a1s, lda1, b1s, ldb1, m0, n0, k0, lane);
}

// Where accumulator element e of n8 tile nt sits (mma.sync m16n8 C layout).
SM120_DEVICE uint32_t gdr_acc_row(uint32_t m0, uint32_t lane, uint32_t e) { return m0 + lane / 4 + 8 * (e / 2); }
SM120_DEVICE uint32_t gdr_acc_col(uint32_t n0, uint32_t nt, uint32_t lane, uint32_t e) {
    return n0 + 8 * nt + 2 * (lane % 4) + e % 2;
}

// acc -> an Elem tile (rows ld elements apart), each value through f(row, col, value).
template <typename E, typename Elem, uint32_t NT, typename F>
SM120_DEVICE void gdr_store_tile(const float (&acc)[NT][4], Elem* tile, uint32_t ld, uint32_t m0, uint32_t n0,
                                 uint32_t lane, F f) {
#pragma unroll
    for (uint32_t nt = 0; nt < NT; ++nt)
#pragma unroll
        for (uint32_t h = 0; h < 2; ++h) {
            const uint32_t row = gdr_acc_row(m0, lane, 2 * h), col = gdr_acc_col(n0, nt, lane, 0);
            *reinterpret_cast<uint32_t*>(tile + row * ld + col) =
                E::pack(f(row, col, acc[nt][2 * h]), f(row, col + 1, acc[nt][2 * h + 1]));
        }
}

// Row sums of f(row, col, acc) over a warp's columns, one partial per (column group, row): red[group * C + row].
// The quad's four lanes hold a row's columns; lane 0 of the quad writes.
template <uint32_t C, uint32_t NT, typename F>
SM120_DEVICE void gdr_row_partials(const float (&acc)[NT][4], float* red, uint32_t group, uint32_t m0, uint32_t n0,
                                   uint32_t lane, F f) {
#pragma unroll
    for (uint32_t h = 0; h < 2; ++h) {
        float s = 0.0f;
#pragma unroll
        for (uint32_t nt = 0; nt < NT; ++nt)
#pragma unroll
            for (uint32_t e = 2 * h; e < 2 * h + 2; ++e)
                s += f(gdr_acc_row(m0, lane, e), gdr_acc_col(n0, nt, lane, e), acc[nt][e]);
        s += __shfl_xor_sync(0xffffffffu, s, 1);
        s += __shfl_xor_sync(0xffffffffu, s, 2);
        if (lane % 4 == 0) red[group * C + gdr_acc_row(m0, lane, 2 * h)] = s;
    }
}

// Column sums of f(row, col, acc) over a warp's 16 rows, one partial per (row group, column): red[group * C + col].
template <uint32_t C, uint32_t NT, typename F>
SM120_DEVICE void gdr_col_partials(const float (&acc)[NT][4], float* red, uint32_t group, uint32_t m0, uint32_t n0,
                                   uint32_t lane, F f) {
#pragma unroll
    for (uint32_t nt = 0; nt < NT; ++nt)
#pragma unroll
        for (uint32_t c = 0; c < 2; ++c) {
            float s = f(gdr_acc_row(m0, lane, c), gdr_acc_col(n0, nt, lane, c), acc[nt][c]) +
                      f(gdr_acc_row(m0, lane, 2 + c), gdr_acc_col(n0, nt, lane, 2 + c), acc[nt][2 + c]);
            s += __shfl_xor_sync(0xffffffffu, s, 4);
            s += __shfl_xor_sync(0xffffffffu, s, 8);
            s += __shfl_xor_sync(0xffffffffu, s, 16);
            if (lane < 4) red[group * C + gdr_acc_col(n0, nt, lane, c)] = s;
        }
}

// The inclusive prefix sum of a warp's 64 values, lane l holding values 2l and 2l + 1 (in x, y).
SM120_DEVICE void gdr_scan64(float2& x, uint32_t lane) {
    x.y += x.x;
    float run = x.y;
#pragma unroll
    for (uint32_t o = 1; o < 32; o *= 2) {
        const float up = __shfl_up_sync(0xffffffffu, run, o);
        if (lane >= o) run += up;
    }
    const float before = run - x.y;  // the lanes below this one
    x.x += before, x.y += before;
}

// T = (I + diag(beta) Ar)^-1 (fp32, C x C, row stride ld; Ar strictly lower) by 16 x 16 blocks, so that the
// dependent chain is 16 steps, not C: the diagonal blocks by forward substitution (one column of one block per
// thread), then the off-diagonal blocks level by level (i - j = 1, 2, 3), T_ij = -T_ii X with
// X = sum_{j <= m < i} diag(beta) Ar_im T_mj. X waits in the mirror block (j, i) of T's upper triangle, which T
// leaves zero: the caller reads only j <= i. Ends with a barrier.
template <uint32_t C, uint32_t ld, uint32_t kThreads>
SM120_DEVICE void gdr_inverse_blocks(const float* ar, const float* beta, float* t, uint32_t tid) {
    constexpr uint32_t B = 16, kBlocks = C / B;
    static_assert(kThreads >= C, "a thread per column of a diagonal block");
    if (tid < C) {
        // column jl of diagonal block o, in registers: each row's sum is a chain of FMAs whose Ar operands do
        // not depend on it (so they load early), and rows above jl are zero (their terms vanish)
        const uint32_t o = B * (tid / B), jl = tid % B;
        float col[B];
#pragma unroll
        for (uint32_t i = 0; i < B; ++i) {
            float s = 0.0f;
#pragma unroll
            for (uint32_t m = 0; m < i; ++m) s += ar[(o + i) * ld + o + m] * col[m];
            col[i] = i < jl ? 0.0f : (i == jl ? 1.0f : -beta[o + i] * s);
        }
#pragma unroll
        for (uint32_t i = 0; i < B; ++i) t[(o + i) * ld + o + jl] = col[i];
    }
    __syncthreads();
    // The levels unrolled, so every inner product has a fixed length (16 d, then 16) and unrolls: its shared
    // loads issue together instead of one per dependent step.
#pragma unroll
    for (uint32_t d = 1; d < kBlocks; ++d) {
        const uint32_t count = (kBlocks - d) * B * B;
        for (uint32_t x = tid; x < count; x += kThreads) {  // X of block (bi, bi - d), into block (bi - d, bi)
            const uint32_t bi = d + x / (B * B), r = B * bi + x / B % B, c = B * (bi - d) + x % B;
            const float* arow = ar + r * ld + B * (bi - d);
            const float* tcol = t + B * (bi - d) * ld + c;
            float s = 0.0f;
#pragma unroll 16
            for (uint32_t u = 0; u < B * d; ++u) s += arow[u] * tcol[u * ld];
            t[c * ld + r] = beta[r] * s;  // X(r, c) at the mirror position
        }
        __syncthreads();
        for (uint32_t x = tid; x < count; x += kThreads) {  // T_ij = -T_ii X (T_ii lower triangular: m <= r)
            const uint32_t bi = d + x / (B * B), rl = x / B % B, r = B * bi + rl, c = B * (bi - d) + x % B;
            const float* trow = t + r * ld + B * bi;
            const float* xrow = t + c * ld + B * bi;
            float s = 0.0f;
#pragma unroll
            for (uint32_t u = 0; u < B; ++u)
                if (u <= rl) s += trow[u] * xrow[u];
            t[r * ld + c] = -s;
        }
        __syncthreads();
    }
}

template <typename Elem>
// clang-format off: a kernel declaration (see .clang-format)
__global__ void __launch_bounds__(GdrChunkGradConfig::kThreads, 1)
sm120_gated_delta_rule_bwd_chunk_kernel(const Elem* __restrict__ q, const Elem* __restrict__ k,
                                        const Elem* __restrict__ v, const Elem* __restrict__ dout,
                                        const float* __restrict__ g, const void* __restrict__ beta,
                                        const Elem* __restrict__ states, const Elem* __restrict__ dh_next,
                                        const int32_t* __restrict__ chunk_first, const int32_t* __restrict__ chunk_len,
                                        float* __restrict__ dq, float* __restrict__ dk, Elem* __restrict__ dv,
                                        float* __restrict__ dg, float* __restrict__ dbeta, uint32_t heads,
                                        uint32_t value_heads, float scale, uint32_t beta_fp32, uint32_t l2norm,
                                        uint32_t fold) {
    // clang-format on
    using Cfg = GdrChunkGradConfig;
    using E = GdrElem<Elem>;
    constexpr uint32_t C = Cfg::C, K = Cfg::K, kS = Cfg::kSlice;
    constexpr uint32_t kLdK = Cfg::kLdK, kLdC = Cfg::kLdC, kLdS = Cfg::kLdS, kLdF = Cfg::kLdF;
    constexpr float kEps = 1e-6f;  // backward.py's _l2norm

    extern __shared__ __align__(1024) uint8_t smem[];
    Elem* s_k = reinterpret_cast<Elem*>(smem + Cfg::kOffK);
    Elem* s_t = reinterpret_cast<Elem*>(smem + Cfg::kOffT);
    Elem* s_m = reinterpret_cast<Elem*>(smem + Cfg::kOffM);
    float* s_ar = reinterpret_cast<float*>(smem + Cfg::kOffF);
    float* vec = reinterpret_cast<float*>(smem + Cfg::kOffVec);
    float *s_cum = vec, *s_beta = vec + C, *s_gamma = vec + 2 * C, *s_tail = vec + 3 * C;
    float *s_rq = vec + 4 * C, *s_bg = vec + 6 * C, *s_misc = vec + 7 * C;  // (vec + 5 C: spare)
    float* red = reinterpret_cast<float*>(smem + Cfg::kOffRed);             // [4][C] partials, then [4][C] more
    uint8_t* work = smem + Cfg::kOffWork;

    const uint32_t tid = threadIdx.x, warp = warp_idx(), lane = lane_idx();
    // a CTA per (chunk, q / k head, part of its value heads): the part's `fold` value heads in turn, dq and dk
    // summed over them in place (in value-head order). Only the value head is carried across the loop (the part's
    // first is a multiple of fold); the rest is re-derived from the block index and the parameters: carried, it
    // spilled.
    pdl_wait_primary();
    const uint32_t hv0 = [&] {
        const uint32_t parts = value_heads / heads / fold, units = heads * parts;
        return blockIdx.x % units / parts * (value_heads / heads) + blockIdx.x % parts * fold;
    }();
#pragma unroll 1
    for (uint32_t hv = hv0;; ++hv) {
        const uint32_t chunk = blockIdx.x / (value_heads / fold);  // a chunk's CTAs: heads x parts
        const uint32_t head = hv / (value_heads / heads);
        const int32_t len_raw = __ldg(chunk_len + chunk);
        if (len_raw <= 0) return;  // a padding chunk: no token, nothing to write
        const uint32_t len = len_raw > static_cast<int32_t>(C) ? C : static_cast<uint32_t>(len_raw);
        const size_t first = static_cast<size_t>(__ldg(chunk_first + chunk));
        auto tok = [&](uint32_t i, uint32_t nheads, uint32_t hh) { return ((first + i) * nheads + hh); };
        // the next slice's global values, in registers while the current slice is worked on: h and dh' (128 x 16
        // each: 4 Elem a thread), v and do (64 x 16: 2). The first slice's load here: its latency hides behind phase 0.
        uint2 nh, nd;
        uint32_t nv, ndo;
        auto load_slice = [&](uint32_t vs) {
            // the state's address from the loop's value head, not kept across the phases (kept, it spilled)
            const size_t state_at = (static_cast<size_t>(chunk) * value_heads + opaque(hv)) * K * K;
            const uint32_t kd = tid / 4, c0 = 4 * (tid % 4);
            nh = __ldg(reinterpret_cast<const uint2*>(states + state_at + kd * K + vs + c0));
            nd = __ldg(reinterpret_cast<const uint2*>(dh_next + state_at + kd * K + vs + c0));
            const uint32_t row = tid / 8, c = 2 * (tid % 8);
            const bool in = row < len;
            const size_t at = tok(row, value_heads, hv) * K + vs + c;
            nv = in ? __ldg(reinterpret_cast<const uint32_t*>(v + at)) : 0u;
            ndo = in ? __ldg(reinterpret_cast<const uint32_t*>(dout + at)) : 0u;
        };
        load_slice(0);

        // warp tilings (16 warps): 64 x 64 (two n8 tiles a warp), 64 x 128 (four); the slices' 64 x 16 in phase 1
        const uint32_t m0 = 16 * (warp % 4), n64 = 16 * (warp / 4), n128 = 32 * (warp / 4);

        // ---------------- phase 0: gates, Qn / Kn, Ar, M, T ----------------
        // Every global load of the phase is issued before any of them is waited on: warp 0's g (scanned once the
        // q / k rows are stored), beta, then the q / k rows.
        if (tid < C) {
            float b = 0.0f;
            if (tid < len)
                b = beta_fp32 ? __ldg(static_cast<const float*>(beta) + tok(tid, value_heads, hv))
                              : E::to_float(static_cast<const Elem*>(beta)[tok(tid, value_heads, hv)]);
            s_beta[tid] = b;
        }
        float2 gx = make_float2(0.0f, 0.0f);  // warp 0: g of rows 2 lane and 2 lane + 1 (0 past the end)
        if (warp == 0) {
            if (2 * lane < len) gx.x = __ldg(g + tok(2 * lane, value_heads, hv));
            if (2 * lane + 1 < len) gx.y = __ldg(g + tok(2 * lane + 1, value_heads, hv));
        }
        // q and k rows: eight threads a row, 16 elements each; their norms (l2norm) or 1
        Elem* s_q = reinterpret_cast<Elem*>(work);
        float* s_tf = reinterpret_cast<float*>(work + Cfg::kTileK);  // T in fp32 while it is formed
        {
            const uint32_t row = tid / 8, part = tid % 8;
            const bool in = row < len;
#pragma unroll
            for (uint32_t which = 0; which < 2; ++which) {
                const Elem* src = (which == 0 ? q : k) + tok(row, heads, head) * K + 16 * part;
                float x[16];
                float ss = 0.0f;
#pragma unroll
                for (uint32_t c = 0; c < 16; c += 8) {
                    uint4 raw = in ? __ldg(reinterpret_cast<const uint4*>(src + c)) : make_uint4(0, 0, 0, 0);
                    const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
                    for (uint32_t j = 0; j < 4; ++j) E::unpack(w[j], x[c + 2 * j], x[c + 2 * j + 1]);
                }
#pragma unroll
                for (uint32_t c = 0; c < 16; ++c) ss += x[c] * x[c];
                ss += __shfl_xor_sync(0xffffffffu, ss, 1);
                ss += __shfl_xor_sync(0xffffffffu, ss, 2);
                ss += __shfl_xor_sync(0xffffffffu, ss, 4);
                const float r = l2norm ? rsqrtf(ss + kEps) : 1.0f;
                Elem* dst = (which == 0 ? s_q : s_k) + row * kLdK + 16 * part;
#pragma unroll
                for (uint32_t c = 0; c < 16; c += 2)
                    *reinterpret_cast<uint32_t*>(dst + c) = E::pack(x[c] * r, x[c + 1] * r);
                if (part == 0 && which == 0) s_rq[row] = r;
            }
        }
        if (warp == 0) {  // G = the inclusive cumsum, in token order (rows past the end stay flat: g = 0 there)
            gdr_scan64(gx, lane);
            s_cum[2 * lane] = gx.x, s_cum[2 * lane + 1] = gx.y;
        }
        __syncthreads();
        if (tid < C) {
            const float last = s_cum[C - 1];
            s_gamma[tid] = __expf(s_cum[tid]);
            s_tail[tid] = __expf(last - s_cum[tid]);
            s_bg[tid] = s_beta[tid] * s_gamma[tid];
        }
        {
            // Kn Kn^T and Qn Kn^T, then Ar (fp32) and M (Elem)
            float kk[2][4] = {}, qk[2][4] = {};
            gdr_tile_mma<E, 2, K, false, false>(kk, s_k, kLdK, s_k, kLdK, m0, n64, lane);
            gdr_tile_mma<E, 2, K, false, false>(qk, s_q, kLdK, s_k, kLdK, m0, n64, lane);
#pragma unroll
            for (uint32_t nt = 0; nt < 2; ++nt)
#pragma unroll
                for (uint32_t e = 0; e < 4; ++e) {
                    const uint32_t i = gdr_acc_row(m0, lane, e), j = gdr_acc_col(n64, nt, lane, e);
                    const float d = j <= i ? __expf(s_cum[i] - s_cum[j]) : 0.0f;
                    s_ar[i * kLdF + j] = j < i ? kk[nt][e] * d : 0.0f;
                    qk[nt][e] *= d;
                }
            gdr_store_tile<E>(qk, s_m, kLdC, m0, n64, lane, [](uint32_t, uint32_t, float x) { return x; });
        }
        __syncthreads();
        gdr_inverse_blocks<C, kLdF, Cfg::kThreads>(s_ar, s_beta, s_tf, tid);
        for (uint32_t x = tid; x < C * C / 2; x += Cfg::kThreads) {
            // T is lower triangular: its upper triangle held the level products' scratch
            const uint32_t i = x / (C / 2), j = 2 * (x % (C / 2));
            const float a = j <= i ? s_tf[i * kLdF + j] : 0.0f, b = j + 1 <= i ? s_tf[i * kLdF + j + 1] : 0.0f;
            *reinterpret_cast<uint32_t*>(s_t + i * kLdC + j) = E::pack(a, b);
        }
        __syncthreads();

        // ---------------- phase 1: the V slices ----------------
        constexpr uint32_t kTS = C * kLdS;  // elements of a 64 x 16 tile
        // accumulated over V: dm = do vnew^T, dt = dvn Z^T (= dvn vb^T + dw kb^T, since Z = vb - diag(beta gamma) Kn h
        // and dw = -dvn h^T), dqg = do h^T, dkp = diag(tail) vnew dh'^T - diag(beta gamma) dvb h^T (dk's terms through
        // kd and through kb = T^T dw)
        float dm[2][4] = {}, dt[2][4] = {}, dqg[4][4] = {}, dkp[4][4] = {};
        float hdh = 0.0f;  // this thread's part of sum(h * dh')
        // Each slice's 64 x 16 products are split between the warp halves, each half covering the tile (eight warps
        // of 16 x 8): the lower half forms Y = Kn h, Z, then dvb, dv and the row sums that need Y (sum_v dvb v: beta's;
        // sum_v dvb Y = -sum_k dkb Kn: kb's); the upper half Yd = Kn dh', dvn, then vnew and sum_v vnew Yd
        // (= sum_k dkd Kn: the tail's). A half's sums for the other half's terms stay zero (slice_rows adds all four
        // column groups).
        const bool lower = warp < 8;
        // the halves' row sums share registers: r_a is beta's sum through v (lower) or the tail's (upper), r_b
        // kb's sum (lower; zero in the upper half)
        float r_a[2] = {}, r_b[2] = {};
#pragma unroll 1
        for (uint32_t vs = 0; vs < K; vs += kS) {
            // The tiles' addresses from a base the compiler cannot see through: hoisted out of the loop, the
            // ldmatrix addresses of every product below would hold registers the accumulators need.
            uint8_t* base = opaque(smem);
            const Elem* s_k = reinterpret_cast<const Elem*>(base + Cfg::kOffK);
            const Elem* s_t = reinterpret_cast<const Elem*>(base + Cfg::kOffT);
            const Elem* s_m = reinterpret_cast<const Elem*>(base + Cfg::kOffM);
            Elem* s_h = reinterpret_cast<Elem*>(base + Cfg::kOffWork);
            Elem* s_dh = reinterpret_cast<Elem*>(base + Cfg::kOffWork + Cfg::kTileH);
            Elem* s_vr = reinterpret_cast<Elem*>(base + Cfg::kOffWork + 2 * Cfg::kTileH);
            Elem *s_do = s_vr + kTS, *s_z = s_vr + 2 * kTS, *s_dvn = s_vr + 3 * kTS, *s_vn = s_vr + 4 * kTS;
            Elem *s_vnt = s_vr + 5 * kTS, *s_dvbg = s_vr + 6 * kTS;
            {
                const uint32_t kd = tid / 4, c0 = 4 * (tid % 4), row = tid / 8, c = 2 * (tid % 8);
                float h[4], d[4];
                E::unpack(nh.x, h[0], h[1]), E::unpack(nh.y, h[2], h[3]);
                E::unpack(nd.x, d[0], d[1]), E::unpack(nd.y, d[2], d[3]);
                hdh += h[0] * d[0] + h[1] * d[1] + h[2] * d[2] + h[3] * d[3];
                *reinterpret_cast<uint2*>(s_h + kd * kLdS + c0) = nh;
                *reinterpret_cast<uint2*>(s_dh + kd * kLdS + c0) = nd;
                *reinterpret_cast<uint32_t*>(s_vr + row * kLdS + c) = nv;
                *reinterpret_cast<uint32_t*>(s_do + row * kLdS + c) = ndo;
            }
            __syncthreads();
            if (vs + kS < K) load_slice(vs + kS);
            const uint32_t ln = lane_idx(), ms = 16 * (warp_idx() % 4), ns = 8 * (warp_idx() / 4 % 2);
            float y[1][4] = {};  // the lower half's Y, the upper half's Yd
            if (lower) {
                // Z = diag(beta) v - diag(beta gamma) Kn h
                gdr_tile_mma<E, 1, K, false, true>(y, s_k, kLdK, s_h, kLdS, ms, ns, ln);
                gdr_store_tile<E>(y, s_z, kLdS, ms, ns, ln, [&](uint32_t i, uint32_t c, float x) {
                    return s_beta[i] * E::to_float(s_vr[i * kLdS + c]) - s_bg[i] * x;
                });
            } else {
                // dvn = s M^T do + diag(tail) Kn dh'
                float mdo[1][4] = {};
                gdr_tile_mma_pair<E, K, false, true, C, true, true>(y[0], s_k, kLdK, s_dh, kLdS, mdo[0], s_m, kLdC,
                                                                    s_do, kLdS, ms, ns, ln);
#pragma unroll
                for (uint32_t e = 0; e < 4; ++e)
                    mdo[0][e] = scale * mdo[0][e] + s_tail[gdr_acc_row(ms, ln, e)] * y[0][e];
                gdr_store_tile<E>(mdo, s_dvn, kLdS, ms, ns, ln, [](uint32_t, uint32_t, float x) { return x; });
            }
            __syncthreads();
            {
                float w[1][4] = {};
                if (lower) {
                    // dvb = T^T dvn: dv = diag(beta) dvb, and the row sums through dvb
                    gdr_tile_mma<E, 1, C, true, true>(w, s_t, kLdC, s_dvn, kLdS, ms, ns, ln);
#pragma unroll
                    for (uint32_t h = 0; h < 2; ++h) {
                        const uint32_t i = gdr_acc_row(ms, ln, 2 * h), c = gdr_acc_col(ns, 0, ln, 0);
                        float a, b;
                        E::unpack(*reinterpret_cast<const uint32_t*>(s_vr + i * kLdS + c), a, b);
                        r_a[h] += w[0][2 * h] * a + w[0][2 * h + 1] * b;
                        r_b[h] += w[0][2 * h] * y[0][2 * h] + w[0][2 * h + 1] * y[0][2 * h + 1];
                        if (i < len)
                            *reinterpret_cast<uint32_t*>(dv + tok(i, value_heads, hv) * K + vs + c) =
                                E::pack(s_beta[i] * w[0][2 * h], s_beta[i] * w[0][2 * h + 1]);
                    }
                    gdr_store_tile<E>(w, s_dvbg, kLdS, ms, ns, ln,
                                      [&](uint32_t i, uint32_t, float x) { return -s_bg[i] * x; });
                } else {
                    // vnew = T Z, and sum_v vnew Yd
                    gdr_tile_mma<E, 1, C, false, true>(w, s_t, kLdC, s_z, kLdS, ms, ns, ln);
#pragma unroll
                    for (uint32_t e = 0; e < 4; ++e) r_a[e / 2] += w[0][e] * y[0][e];
                    gdr_store_tile<E>(w, s_vn, kLdS, ms, ns, ln, [](uint32_t, uint32_t, float x) { return x; });
                    gdr_store_tile<E>(w, s_vnt, kLdS, ms, ns, ln,
                                      [&](uint32_t i, uint32_t, float x) { return s_tail[i] * x; });
                }
            }
            __syncthreads();
            // the accumulators over V (their row offset re-derived here: kept from before the loop, it spilled)
            const uint32_t mc = opaque(m0);
            gdr_tile_mma<E, 2, kS, false, false>(dm, s_do, kLdS, s_vn, kLdS, mc, n64, lane);
            gdr_tile_mma<E, 2, kS, false, false>(dt, s_dvn, kLdS, s_z, kLdS, mc, n64, lane);
            gdr_tile_mma<E, 4, kS, false, false>(dqg, s_do, kLdS, s_h, kLdS, mc, n128, lane);
            gdr_tile_mma<E, 4, kS, false, false>(dkp, s_vnt, kLdS, s_dh, kLdS, mc, n128, lane);
            gdr_tile_mma<E, 4, kS, false, false>(dkp, s_dvbg, kLdS, s_h, kLdS, mc, n128, lane);
            __syncthreads();
        }

        // ---------------- phase 2: the C x C algebra and the input gradients ----------------
        // Row sums are added in a fixed order: each partial lands in its own slot, one thread a row adds them.
        float* part_r = red;            // [4][C] row partials (the tilings' column groups)
        float* part_c = red + 4 * C;    // [4][C] column partials (row groups)
        float* acc_cum = s_misc;        // G's gradient, per row
        float* acc_beta = red + 8 * C;  // beta's gradient, per row
        float* acc_tail = red + 9 * C;  // dtail per row, for G_last's gradient
        // into[r] += coef(r) (row partials - column partials, when with_cols)
        auto fold_rows = [&](float* into, bool with_cols, auto coef) {
            __syncthreads();
            if (tid < C) {
                float s = part_r[tid] + part_r[C + tid] + part_r[2 * C + tid] + part_r[3 * C + tid];
                if (with_cols) s -= part_c[tid] + part_c[C + tid] + part_c[2 * C + tid] + part_c[3 * C + tid];
                into[tid] += coef(tid) * s;
            }
            __syncthreads();
        };
        auto one = [](uint32_t) { return 1.0f; };
        // a 64 x 128 result (the 128-wide tiling) into the chunk's token rows of a [tokens][heads x parts][K] output
        // (after the part's first value head: added to what this thread stored there for the heads before)
        auto store_rows = [&](const float (&acc)[4][4], float* out) {
#pragma unroll
            for (uint32_t nt = 0; nt < 4; ++nt)
#pragma unroll
                for (uint32_t h = 0; h < 2; ++h) {  // a quad writes a row's 32 contiguous bytes
                    const uint32_t i = gdr_acc_row(m0, lane, 2 * h), c = gdr_acc_col(n128, nt, lane, 0);
                    if (i < len) {
                        // dq / dk have heads x parts rows a token; this CTA's is blockIdx.x modulo that
                        const uint32_t units = value_heads / fold;
                        float2* at = reinterpret_cast<float2*>(out + tok(i, units, blockIdx.x % units) * K + c);
                        float2 x = make_float2(acc[nt][2 * h], acc[nt][2 * h + 1]);
                        if (hv % fold != 0) {  // after the part's first value head
                            const float2 before = *at;
                            x.x = before.x + x.x, x.y = before.y + x.y;
                        }
                        *at = x;
                    }
                }
        };
        // Qn again (its rows' norms kept), into the work region (free since the last slice): loaded here, stored
        // after the row-sum folds below, which hide the loads' latency
        Elem* s_q2 = reinterpret_cast<Elem*>(work);
        uint4 q_raw[2];
        {
            const uint32_t row = opaque(tid / 8), part = tid % 8;  // phase 0's row address is not kept to here
            const Elem* src = q + tok(row, heads, head) * K + 16 * part;
#pragma unroll
            for (uint32_t c = 0; c < 2; ++c)
                q_raw[c] = row < len ? __ldg(reinterpret_cast<const uint4*>(src + 8 * c)) : make_uint4(0, 0, 0, 0);
        }
        // phase 1's row sums in one fold: a quad's sums land in its warp group's slot, the lower half's (beta's sum
        // through v and kb's) in groups 0-1 of the row and column partials, the upper half's (the tail's) in groups
        // 2-3 of the row partials. dtail = tail sum_k dkd Kn before the chunk's last row; sum_k dkb Kn =
        // -sum_v dvb (Kn h) feeds beta's gradient (times -gamma) and G's (times -beta gamma).
#pragma unroll
        for (uint32_t h = 0; h < 2; ++h) {
            float a = r_a[h], b = r_b[h];
            a += __shfl_xor_sync(0xffffffffu, a, 1);
            a += __shfl_xor_sync(0xffffffffu, a, 2);
            b += __shfl_xor_sync(0xffffffffu, b, 1);
            b += __shfl_xor_sync(0xffffffffu, b, 2);
            const uint32_t row = gdr_acc_row(m0, lane, 2 * h);
            if (lane % 4 == 0) {
                part_r[(warp / 4) * C + row] = a;
                if (lower) part_c[(warp / 4) * C + row] = b;
            }
        }
        __syncthreads();
        if (tid < C) {
            const float bv = part_r[tid] + part_r[C + tid], tl = part_r[2 * C + tid] + part_r[3 * C + tid];
            const float kb = part_c[tid] + part_c[C + tid];
            acc_beta[tid] = bv - s_gamma[tid] * kb;
            acc_tail[tid] = (tid + 1 < len ? s_tail[tid] : 0.0f) * tl;
            acc_cum[tid] = -s_bg[tid] * kb;
        }
        __syncthreads();

        // dqk = causal(s dm * D); G's gradient from the decay: rows minus columns of strict(s dm * M)
        auto decay = [&](uint32_t i, uint32_t j) { return j <= i ? __expf(s_cum[i] - s_cum[j]) : 0.0f; };
        auto x_dm = [&](uint32_t i, uint32_t j, float x) {
            return j < i ? scale * x * E::to_float(s_m[i * kLdC + j]) : 0.0f;
        };
        gdr_row_partials<C>(dm, part_r, warp / 4, m0, n64, lane, x_dm);
        gdr_col_partials<C>(dm, part_c, warp % 4, m0, n64, lane, x_dm);
        {
            const uint32_t row = opaque(tid / 8), part = tid % 8;  // (as above)
            const float r = s_rq[row];
#pragma unroll
            for (uint32_t c = 0; c < 2; ++c) {
                const uint32_t w[4] = {q_raw[c].x, q_raw[c].y, q_raw[c].z, q_raw[c].w};
                uint32_t out[4];
#pragma unroll
                for (uint32_t j = 0; j < 4; ++j) {
                    float a, b;
                    E::unpack(w[j], a, b);
                    out[j] = E::pack(a * r, b * r);
                }
                *reinterpret_cast<uint4*>(s_q2 + row * kLdK + 16 * part + 8 * c) =
                    make_uint4(out[0], out[1], out[2], out[3]);
            }
        }
        fold_rows(acc_cum, true, one);  // (its barriers also publish Qn)
        Elem* s_dqk = s_m;              // M is read for the last time above
        gdr_store_tile<E>(dm, s_dqk, kLdC, m0, n64, lane,
                          [&](uint32_t i, uint32_t j, float x) { return scale * x * decay(i, j); });

        // G's gradient: + gamma sum_k (s dqg * Qn)
        gdr_row_partials<C>(dqg, part_r, warp / 4, m0, n128, lane, [&](uint32_t i, uint32_t c, float x) {
            return scale * x * E::to_float(s_q2[i * kLdK + c]);
        });
        fold_rows(acc_cum, false, [&](uint32_t i) { return s_gamma[i]; });

        // dq = dqk Kn + s gamma dqg
        {
            float acc[4][4];
#pragma unroll
            for (uint32_t nt = 0; nt < 4; ++nt)
#pragma unroll
                for (uint32_t e = 0; e < 4; ++e) acc[nt][e] = scale * s_gamma[gdr_acc_row(m0, lane, e)] * dqg[nt][e];
            gdr_tile_mma<E, 4, C, false, true>(acc, s_dqk, kLdC, s_k, kLdK, m0, n128, lane);
            store_rows(acc, dq);
        }
        // dk = dkp + dqk^T Qn (+ the symmetric dkk term below)
        gdr_tile_mma<E, 4, C, true, true>(dkp, s_dqk, kLdC, s_q2, kLdK, m0, n128, lane);
        __syncthreads();  // Qn and dqk are read for the last time

        // dA = strict(-T^T dt T^T): P = T^T dt, then -(P T^T)
        Elem* s_dt = reinterpret_cast<Elem*>(work);
        Elem* s_p = reinterpret_cast<Elem*>(work + Cfg::kTileC);
        gdr_store_tile<E>(dt, s_dt, kLdC, m0, n64, lane, [](uint32_t, uint32_t, float x) { return x; });
        __syncthreads();
        {
            float p[2][4] = {};
            gdr_tile_mma<E, 2, C, true, true>(p, s_t, kLdC, s_dt, kLdC, m0, n64, lane);
            gdr_store_tile<E>(p, s_p, kLdC, m0, n64, lane, [](uint32_t, uint32_t, float x) { return x; });
        }
        __syncthreads();
        {
            float da[2][4] = {};
            gdr_tile_mma<E, 2, C, false, false>(da, s_p, kLdC, s_t, kLdC, m0, n64, lane);
#pragma unroll
            for (uint32_t nt = 0; nt < 2; ++nt)
#pragma unroll
                for (uint32_t e = 0; e < 4; ++e) {
                    const uint32_t i = gdr_acc_row(m0, lane, e), j = gdr_acc_col(n64, nt, lane, e);
                    da[nt][e] = j < i ? -da[nt][e] : 0.0f;
                }
            // beta's gradient: sum_j dA Ar;  G's: rows minus columns of dp Ar, dp = diag(beta) dA
            auto x_da = [&](uint32_t i, uint32_t j, float x) { return x * s_ar[i * kLdF + j]; };
            gdr_row_partials<C>(da, part_r, warp / 4, m0, n64, lane, x_da);
            fold_rows(acc_beta, false, one);
            auto x_dp = [&](uint32_t i, uint32_t j, float x) { return s_beta[i] * x * s_ar[i * kLdF + j]; };
            gdr_row_partials<C>(da, part_r, warp / 4, m0, n64, lane, x_dp);
            gdr_col_partials<C>(da, part_c, warp % 4, m0, n64, lane, x_dp);
            fold_rows(acc_cum, true, one);
            float* s_dkk = s_ar;  // Ar is read for the last time above
#pragma unroll
            for (uint32_t nt = 0; nt < 2; ++nt)
#pragma unroll
                for (uint32_t e = 0; e < 4; ++e) {
                    const uint32_t i = gdr_acc_row(m0, lane, e), j = gdr_acc_col(n64, nt, lane, e);
                    s_dkk[i * kLdF + j] = s_beta[i] * da[nt][e] * decay(i, j);
                }
        }
        __syncthreads();
        Elem* s_sym = s_m;  // dkk + dkk^T (symmetric), where dqk was
        for (uint32_t x = tid; x < C * C / 2; x += Cfg::kThreads) {
            const uint32_t i = x / (C / 2), j = 2 * (x % (C / 2));
            const float a = s_ar[i * kLdF + j] + s_ar[j * kLdF + i];
            const float b = s_ar[i * kLdF + j + 1] + s_ar[(j + 1) * kLdF + i];
            *reinterpret_cast<uint32_t*>(s_sym + i * kLdC + j) = E::pack(a, b);
        }
        __syncthreads();
        gdr_tile_mma<E, 4, C, false, true>(dkp, s_sym, kLdC, s_k, kLdK, m0, n128, lane);
        store_rows(dkp, dk);

        // G_last's gradient: sum(dtail) + e^{G_last} sum(h * dh'), added to the last row (G is flat past the end);
        // then dg = the reverse cumsum of G's gradient (g_t feeds every G_i with i >= t)
        {
            float x = hdh;
#pragma unroll
            for (uint32_t o = 16; o >= 1; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
            if (lane == 0) part_c[warp] = x;  // (the column partials are free again)
        }
        __syncthreads();
        if (warp == 0) {
            float hsum = lane < Cfg::kThreads / 32 ? part_c[lane] : 0.0f;
            float tsum = acc_tail[2 * lane] + acc_tail[2 * lane + 1];
#pragma unroll
            for (uint32_t o = 16; o >= 1; o /= 2) {
                hsum += __shfl_xor_sync(0xffffffffu, hsum, o);
                tsum += __shfl_xor_sync(0xffffffffu, tsum, o);
            }
            // lane l holds rows C - 1 - 2l and C - 2 - 2l: the scan in that order is the reverse cumsum
            const uint32_t i0 = C - 1 - 2 * lane, i1 = i0 - 1;
            float2 d = make_float2(acc_cum[i0] - acc_tail[i0], acc_cum[i1] - acc_tail[i1]);
            if (lane == 0) d.x += tsum + __expf(s_cum[C - 1]) * hsum;
            gdr_scan64(d, lane);
            if (i0 < len) dg[tok(i0, value_heads, hv)] = d.x;
            if (i1 < len) dg[tok(i1, value_heads, hv)] = d.y;
        }
        if (tid < len) dbeta[tok(tid, value_heads, hv)] = acc_beta[tid];
        if ((hv + 1) % fold == 0) break;  // the part's last value head
        __syncthreads();                  // the next value head's phase 0 rewrites what the scans above read
    }
}

}  // namespace sm120
