#pragma once
// Gated delta rule, chunked forward, stage 2 of 2: the state recurrence and the output, sequential over the
// chunks of one sequence. CTA = (V slice of kVSlice columns, value head hv, sequence n); each group of kKSplit
// math warps owns 16 value columns of the state, each warp of the group a 128 / kKSplit slice of the head dim, and
// keeps its part of S^T (16 x 128 / kKSplit, fp32) in registers for the whole sequence. With kKSplit > 1 (few
// heads: a lone warp walking a long sequence leaves three of an SM's four tensor-core partitions idle) the
// products over the head dim (X, O) are partial sums, exchanged through shared memory once per chunk and added in
// a fixed order, so every warp of a group forms the same v' and the result does not depend on the split's timing.
// Per chunk, with Tw, Tu, attn, gates from the prep kernel (sm120_gated_delta_rule_prep.cuh) and q, k, v as given:
//   u^T  = v^T Tu^T                            [16 x C]   (independent of S: overlaps the products below)
//   X    = S^T k^T,  O = S^T q^T               [16 x C]   A = S^T (bf16 / fp16 registers), B = k / q rows
//   v'^T = u^T - X Tw^T                        (= u^T - S^T w^T with w = Tw k never formed)
//   o^T  = O diag(scale e^G / |q|) + v'^T attn^T
//   S^T  = e^{G_last} S^T + (v'^T diag(e^{G_last - G} / |k|)) k          (tokens past the sequence: factor 0)
// The C x C factors are lower triangular, so their products skip the k-steps above the output block.
// Everything a warp multiplies is in shared memory (TMA ring, a producer warp) or its registers; apart from the
// K-split exchange (one named barrier per group and chunk) the warps share only the loaded tiles. Tokens past the
// sequence's end in a chunk's tiles belong to the next sequence (or are TMA zero fill, or padding past cu_seqlens'
// end): Tu, Tw and attn are zero above the diagonal, those tokens get factor 0 in the state update, and their o
// rows are not stored. Factor 0 does not cancel Inf or NaN, so a sequence's last partial chunk also zeroes those
// tokens' k and v rows (shared memory) and their v' columns (registers): no other sequence's values, and no
// unwritten factors, reach its o or state.
// With `ready` (the overlapped launch, few CTAs here) the prep grid runs alongside: the producer waits for each
// chunk's flag before loading its factors, and the sequence's range comes from the published cu'.
// Segmented (`segments` != 0, docs/gated_delta_rule.md): a CTA walks one segment of a sequence, from the first
// state the combine kernel gives it. kTransitions = true is the transition pass (each segment's affine state map:
// no q, attn or o), an instance of its own so that the plain walk's chunk loop carries none of its branches.

#include <cuda.h>
#include <type_traits>
#include "../common/sm120_arch.cuh"
#include "../common/sm120_fence.cuh"
#include "../common/sm120_flag.cuh"
#include "../common/sm120_ldmatrix.cuh"
#include "../common/sm120_mbarrier.cuh"
#include "../common/sm120_pdl.cuh"
#include "../common/sm120_pipeline.cuh"
#include "../common/sm120_tma.cuh"
#include "../common/sm120_warp.cuh"
#include "../layout/sm120_gated_delta_rule_layout.cuh"

namespace sm120 {

template <uint32_t kChunk, uint32_t kVSlice, uint32_t kKSplit, uint32_t kStages>
struct GdrFwdConfig {
    static constexpr uint32_t kGroups = kVSlice / 16;  // 16 value columns each
    static constexpr uint32_t kMathWarps = kGroups * kKSplit;
    static constexpr uint32_t kThreads = (kMathWarps + 1) * 32;  // + the producer warp
    static constexpr uint32_t kTokens = kChunk;                  // a chunk's tokens (rows of every tile)
    static constexpr uint32_t kHeadTileBytes = kChunk * kGdrHeadDim * 2;
    static constexpr uint32_t kVRowBytes = (kVSlice < kGdrHalfCols ? kVSlice : kGdrHalfCols) * 2;
    static constexpr uint32_t kVBoxes = kVSlice * 2 / kVRowBytes;
    static constexpr uint32_t kVBytes = kChunk * kVSlice * 2;
    static constexpr uint32_t kMatBytes = kChunk * kChunk * 2;
    static constexpr uint32_t kGateBytes = kChunk * kGdrGateFloats * 4;
    // stage: q | k | v slice | Tw | Tu | attn | gates, each 1024-aligned (swizzle atoms)
    static constexpr uint32_t kOffK = kHeadTileBytes, kOffV = 2 * kHeadTileBytes;
    static constexpr uint32_t kOffTw = kOffV + align_up(kVBytes, kSwizzleAtomBytes);
    static constexpr uint32_t kOffTu = kOffTw + align_up(kMatBytes, kSwizzleAtomBytes);
    static constexpr uint32_t kOffAttn = kOffTu + align_up(kMatBytes, kSwizzleAtomBytes);
    static constexpr uint32_t kOffGate = kOffAttn + align_up(kMatBytes, kSwizzleAtomBytes);
    static constexpr uint32_t kStageBytes = kOffGate + align_up(kGateBytes, kSwizzleAtomBytes);
    static constexpr uint32_t kTxBytes = 2 * kHeadTileBytes + kVBytes + 3 * kMatBytes + kGateBytes;
    static constexpr uint32_t kOutBytes = kGroups * kChunk * 16 * 2;  // per-group o staging [C][16]
    // K-split exchange: per warp, its partial X and O ([C / 8][4] fp32 a lane), two buffers (chunk parity)
    static constexpr uint32_t kPartFloats = kChunk / 8 * 4 * 32;
    static constexpr uint32_t kXchBytes = kKSplit > 1 ? 2 * kMathWarps * 2 * kPartFloats * 4 : 0;
    static constexpr uint32_t kSmemBytes = kStages * kStageBytes + kOutBytes + kXchBytes + 2 * kStages * 8;
    static_assert(kChunk == 16 || kChunk == 32 || kChunk == 64, "chunk size: 16, 32 or 64");
    static_assert(kVSlice == 16 || kVSlice == 32 || kVSlice == 64 || kVSlice == 128, "V slice: 16, 32, 64 or 128");
    static_assert(kKSplit == 1 || kKSplit == 2, "K split: 1 or 2 warps per 16 value columns");
    static_assert(kGroups + 1 <= 15,
                  "named barriers: one per group for the K split (1..kGroups), kGroups + 1 for the tail");
    static_assert(kStages >= 1, "at least one stage");
    static_assert(kSmemBytes <= kMaxSmemPerBlock, "shared memory exceeds the SM120 per-block budget (101376 B)");
};

// acc[2 np], acc[2 np + 1] += A (k-step ks over tokens) * M^T for a lower-triangular C x C tile M ([i][j] rows,
// swizzled rows of C * 2 bytes): B[k = j][n = i] = M[i][j], only the blocks with ks <= np.
// With kEvery > 1 only the n pairs np = own (mod kEvery) are formed (a K-split warp's share of o).
template <typename E, uint32_t C, uint32_t kEvery = 1>
SM120_DEVICE void gdr_mma_lower_t(float (&acc)[C / 8][4], const uint32_t (&a)[4], uint32_t ks, const uint8_t* tile,
                                  uint32_t lane, uint32_t own = 0) {
#pragma unroll
    for (uint32_t np = 0; np < C / 16; ++np) {
        if (np < ks || np % kEvery != own) continue;
        uint32_t b[4];
        ldmatrix_x4(
            smem_addr(tile + swizzle_offset<C * 2>(16 * np + lane % 8 + 8 * (lane / 16), 2 * ks + (lane / 8) % 2)),
            b[0], b[1], b[2], b[3]);
        E::mma(acc[2 * np], a, {b[0], b[1]});
        E::mma(acc[2 * np + 1], a, {b[2], b[3]});
    }
}

// The A fragment of k-step ks from a [16 x C] accumulator (two adjacent n8 tiles), each column scaled by f.
template <typename E, uint32_t C>
SM120_DEVICE void gdr_pack_a(uint32_t (&a)[4], const float (&x)[C / 8][4], uint32_t ks, const float (&f)[C / 8][2]) {
    a[0] = E::pack(x[2 * ks][0] * f[2 * ks][0], x[2 * ks][1] * f[2 * ks][1]);
    a[1] = E::pack(x[2 * ks][2] * f[2 * ks][0], x[2 * ks][3] * f[2 * ks][1]);
    a[2] = E::pack(x[2 * ks + 1][0] * f[2 * ks + 1][0], x[2 * ks + 1][1] * f[2 * ks + 1][1]);
    a[3] = E::pack(x[2 * ks + 1][2] * f[2 * ks + 1][0], x[2 * ks + 1][3] * f[2 * ks + 1][1]);
}

// The same without scaling.
template <typename E, uint32_t C>
SM120_DEVICE void gdr_pack_a(uint32_t (&a)[4], const float (&x)[C / 8][4], uint32_t ks) {
    a[0] = E::pack(x[2 * ks][0], x[2 * ks][1]), a[1] = E::pack(x[2 * ks][2], x[2 * ks][3]);
    a[2] = E::pack(x[2 * ks + 1][0], x[2 * ks + 1][1]), a[3] = E::pack(x[2 * ks + 1][2], x[2 * ks + 1][3]);
}

// Zero rows [len, kRows) of a tile stored as [boxes][kRows][kRowUnits 16-byte units] (kUnits in all), kStride
// threads sharing the stores. A row of a swizzled tile keeps its bytes within its own row, so store i clears unit
// i, on row i / kRowUnits % kRows, whatever the swizzle.
template <uint32_t kRows, uint32_t kRowUnits, uint32_t kUnits, uint32_t kStride>
SM120_DEVICE void gdr_zero_rows_from(uint8_t* tile, uint32_t len, uint32_t thread) {
    const uint4 zero = make_uint4(0, 0, 0, 0);
#pragma unroll 1
    for (uint32_t i = thread; i < kUnits; i += kStride)
        if (i / kRowUnits % kRows >= len) *reinterpret_cast<uint4*>(tile + 16 * i) = zero;
}

// Zero rows [len, C) of a stage's k tile (both 64-column halves) and v slice, the math warps' threads sharing the
// work.
template <typename Cfg>
SM120_DEVICE void gdr_zero_tail_rows(uint8_t* stage, uint32_t len, uint32_t thread) {
    constexpr uint32_t kC = Cfg::kTokens, kKRow = kSwizzle128BRowBytes / 16, kVRow = Cfg::kVRowBytes / 16;
    constexpr uint32_t kStride = Cfg::kMathWarps * 32;
    gdr_zero_rows_from<kC, kKRow, 2 * kC * kKRow, kStride>(stage + Cfg::kOffK, len, thread);
    gdr_zero_rows_from<kC, kVRow, Cfg::kVBoxes * kC * kVRow, kStride>(stage + Cfg::kOffV, len, thread);
}

// The backward's states pass (kStates): the walk that stores, every kGdrStateTokens tokens of a sequence, the state
// entering them: states[(slot * HV + hv) * K * K + k * K + v] ([K][V] as initial_state, rounded to Elem: the
// backward's per-chunk kernel reads the states as Elem mma operands, so fp32 would only double the bytes), slot =
// state_slots[seq] + state_slots[num_seqs + j] for the j-th such point of sequence seq (the host numbers them). It
// forms no o (the backward recomputes what it needs from the states), so like the transition pass it loads
// neither q nor attn; the final state is stored as the plain walk stores it.
template <uint32_t kChunk, uint32_t kVSlice, uint32_t kKSplit, uint32_t kStages, typename Elem,
          bool kTransitions = false, bool kStates = false>
// clang-format off: a kernel declaration (see .clang-format)
__global__ void __launch_bounds__(GdrFwdConfig<kChunk, kVSlice, kKSplit, kStages>::kThreads, 1)
sm120_gated_delta_rule_fwd_kernel(const __grid_constant__ CUtensorMap tmap_q, const __grid_constant__ CUtensorMap tmap_k,
                                  const __grid_constant__ CUtensorMap tmap_v, const __grid_constant__ CUtensorMap tmap_tw,
                                  const __grid_constant__ CUtensorMap tmap_tu, const __grid_constant__ CUtensorMap tmap_attn,
                                  const __grid_constant__ CUtensorMap tmap_gate, const float* __restrict__ initial_state,
                                  float* __restrict__ final_state, Elem* __restrict__ o,
                                  const int32_t* __restrict__ cu_seqlens, uint32_t seq_len, uint32_t value_heads,
                                  uint32_t group, const int32_t* ready, uint32_t segments, uint32_t segment_tokens,
                                  Elem* __restrict__ states, const int32_t* __restrict__ state_slots) {
    // clang-format on
    static_assert(!(kTransitions && kStates), "the transition pass stores no states");
    constexpr bool kOutput = !kTransitions && !kStates;  // the plain walk: o formed and stored
    static_assert(kGdrStateTokens % kChunk == 0, "a state point starts a chunk");
    using Cfg = GdrFwdConfig<kChunk, kVSlice, kKSplit, kStages>;
    using E = GdrElem<Elem>;
    constexpr uint32_t C = kChunk, kNT = C / 8, kKT = kGdrHeadDim / 8;
    constexpr uint32_t kSlices = kGdrHeadDim / kVSlice;
    constexpr uint32_t kWarpKT = kKT / kKSplit;  // k8 tiles of the head dim a warp's state part holds

    extern __shared__ __align__(1024) uint8_t smem[];
    uint8_t* s_out = smem + kStages * Cfg::kStageBytes;
    float* s_xch = reinterpret_cast<float*>(s_out + Cfg::kOutBytes);
    const auto ring = StageRing<kStages>::at(s_out + Cfg::kOutBytes + Cfg::kXchBytes);

    const uint32_t warp = warp_idx(), lane = lane_idx();
    const uint32_t slice = blockIdx.x % kSlices, hv = blockIdx.x / kSlices % value_heads, h = hv / group;
    const GdrUnit u =
        gdr_unit(blockIdx.x / kSlices / value_heads, gridDim.x / kSlices / value_heads, segments, kTransitions);
    uint32_t start, end, first_slot = 0;
    ring.init(Cfg::kMathWarps);
    if (ready == nullptr) {
        pdl_wait_primary();
        gdr_sequence(cu_seqlens, seq_len, u.seq, start, end);  // cu_seqlens: the prep kernel's clamped cu'
    } else {
        // overlapped with the prep grid (never segmented): its flags, not its end
        gdr_sequence_published<C>(cu_seqlens, ready, u.num_seqs, seq_len, u.seq, start, end, first_slot);
    }
    const uint32_t seq_start = start, seq_end = end;
    if (segments != 0) gdr_segment(u.segment, segment_tokens, start, end);
    // a segment's map is needed only by the segments after it: the last one's state is carried by the output pass
    if (kTransitions && end == seq_end) return;
    // a segment past its sequence's end has nothing to walk, no first state (the combine writes none) and no final
    // state to store (an empty sequence's is segment 0's)
    if (segments != 0 && start == end && u.segment != 0) return;
    // the transition half: v = 0 and S = I, so the final S is the segment's linear map A (K x K)
    const bool identity = kTransitions && u.half == 1;
    const uint32_t num_chunks = (end - start + C - 1) / C;

    if (warp == Cfg::kMathWarps) {
        // ---------------- producer: one TMA batch per chunk ----------------
        if (lane == 0) {
            tma_prefetch_descriptor(&tmap_q), tma_prefetch_descriptor(&tmap_k), tma_prefetch_descriptor(&tmap_v);
            tma_prefetch_descriptor(&tmap_tw), tma_prefetch_descriptor(&tmap_tu), tma_prefetch_descriptor(&tmap_attn);
            tma_prefetch_descriptor(&tmap_gate);
            PipelineState<kStages> ps;
            for (uint32_t c = 0; c < num_chunks; ++c, ps.advance()) {
                const int32_t t = static_cast<int32_t>(start + c * C), hvi = static_cast<int32_t>(hv);
                uint8_t* s = smem + ps.stage * Cfg::kStageBytes;
                if (ready != nullptr) {  // this chunk's factors are written (then read by TMA, the async proxy)
                    flag_wait(gdr_ready_flag(ready, first_slot + c, value_heads, hv));
                    fence_proxy_async_global();
                }
                // the transition and states passes write no o: they load neither q nor attn
                constexpr uint32_t kTx = kOutput ? Cfg::kTxBytes : Cfg::kTxBytes - Cfg::kHeadTileBytes - Cfg::kMatBytes;
                uint64_t* bar = ring.acquire(ps, identity ? kTx - Cfg::kVBytes : kTx);
#pragma unroll
                for (uint32_t half = 0; half < 2; ++half) {
                    const int32_t col = static_cast<int32_t>(half * kGdrHalfCols);
                    const uint32_t off = half * C * kSwizzle128BRowBytes;
                    if constexpr (kOutput) tma_load_3d(s + off, &tmap_q, bar, col, static_cast<int32_t>(h), t);
                    tma_load_3d(s + Cfg::kOffK + off, &tmap_k, bar, col, static_cast<int32_t>(h), t);
                }
#pragma unroll
                for (uint32_t b = 0; b < Cfg::kVBoxes; ++b)
                    if (!identity)
                        tma_load_3d(s + Cfg::kOffV + b * C * Cfg::kVRowBytes, &tmap_v, bar,
                                    static_cast<int32_t>(slice * kVSlice + b * kGdrHalfCols), hvi, t);
                tma_load_3d(s + Cfg::kOffTw, &tmap_tw, bar, 0, hvi, t);
                tma_load_3d(s + Cfg::kOffTu, &tmap_tu, bar, 0, hvi, t);
                if constexpr (kOutput) tma_load_3d(s + Cfg::kOffAttn, &tmap_attn, bar, 0, hvi, t);
                tma_load_3d(s + Cfg::kOffGate, &tmap_gate, bar, 0, hvi, t);
            }
        }
        return;
    }

    // ---------------- math warps: value columns [v0, v0 + 16), head-dim part kq ----------------
    const uint32_t gid = lane >> 2, t4 = lane & 3;
    const uint32_t vg = warp / kKSplit, kq = warp % kKSplit;
    const uint32_t v0 = slice * kVSlice + vg * 16, kt0 = kq * kWarpKT;
    const size_t state_at = (static_cast<size_t>(u.slot) * value_heads + hv) * kGdrHeadDim * kGdrHeadDim;
    // segmented output pass: the sequence's final state from its last segment (the first, when it is empty)
    const bool store_final = final_state != nullptr &&
                             (segments == 0 || kTransitions || (end == seq_end && (start < end || u.segment == 0)));
    const size_t final_at = segments != 0 && !kTransitions
                                ? (static_cast<size_t>(u.seq) * value_heads + hv) * kGdrHeadDim * kGdrHeadDim
                                : state_at;
    float st[kWarpKT][4];  // S^T rows v0 + gid (+8), columns (k) 8 (kt0 + kt) + 2 t4 (+1)
#pragma unroll
    for (uint32_t kt = 0; kt < kWarpKT; ++kt)
#pragma unroll
        for (uint32_t e = 0; e < 4; ++e) {
            const uint32_t kd = 8 * (kt0 + kt) + 2 * t4 + e % 2, vd = v0 + gid + 8 * (e / 2);
            st[kt][e] = identity                   ? (kd == vd ? 1.0f : 0.0f)
                        : initial_state != nullptr ? __ldg(initial_state + state_at + kd * kGdrHeadDim + vd)
                                                   : 0.0f;
        }
    Elem* s_o = reinterpret_cast<Elem*>(s_out) + vg * C * 16;  // the group's warps write disjoint token pairs

    // One chunk; kTail (a std::bool_constant) marks a sequence's last, partial chunk, an instance of its own so
    // that the loop over whole chunks carries none of its branches.
    auto walk_chunk = [&](uint32_t c, const PipelineState<kStages>& ps, auto tail) {
        constexpr bool kTail = decltype(tail)::value;
        const uint32_t first = start + c * C, len = kTail ? end - first : C;
        const uint8_t* s = smem + ps.stage * Cfg::kStageBytes;
        const float4* gate = reinterpret_cast<const float4*>(s + Cfg::kOffGate);
        if constexpr (kStates) {
            // the state entering this chunk, at every kGdrStateTokens-th token of the sequence (segments start on
            // chunk boundaries of the sequence, so the points are the same whichever unit walks them)
            if ((first - seq_start) % kGdrStateTokens == 0) {
                const uint32_t point = (first - seq_start) / kGdrStateTokens;
                const size_t at =
                    (static_cast<size_t>(state_slots[u.seq] + state_slots[u.num_seqs + point]) * value_heads + hv) *
                    kGdrHeadDim * kGdrHeadDim;
#pragma unroll
                for (uint32_t kt = 0; kt < kWarpKT; ++kt)
#pragma unroll
                    for (uint32_t e = 0; e < 4; ++e) {
                        const uint32_t kd = 8 * (kt0 + kt) + 2 * t4 + e % 2, vd = v0 + gid + 8 * (e / 2);
                        states[at + kd * kGdrHeadDim + vd] = E::from_float(st[kt][e]);
                    }
            }
        }
        ring.wait_full(ps);
        if constexpr (kTail) {
            // the k and v rows past the sequence are the next sequence's tokens or, past the end of cu_seqlens,
            // padding, and need not be finite. Their factors are 0 in every product below, but 0 x Inf is NaN:
            // zero the rows, each warp a share, all of them before any reads the tiles. The first barrier is for
            // racecheck: the stage's previous reads are already ordered before these writes (release, the
            // producer's wait, TMA, wait_full), a chain through the async proxy that racecheck does not follow.
            named_barrier_sync(1 + Cfg::kGroups, Cfg::kMathWarps * 32);  // after the K split's 1 + group
            gdr_zero_tail_rows<Cfg>(smem + ps.stage * Cfg::kStageBytes, len, warp * 32 + lane);
            named_barrier_sync(1 + Cfg::kGroups, Cfg::kMathWarps * 32);
        }

        // S^T as the A operand (k16 steps over the warp's part of the head dim)
        uint32_t sa[kWarpKT / 2][4];
#pragma unroll
        for (uint32_t kk = 0; kk < kWarpKT / 2; ++kk) {
            sa[kk][0] = E::pack(st[2 * kk][0], st[2 * kk][1]);
            sa[kk][1] = E::pack(st[2 * kk][2], st[2 * kk][3]);
            sa[kk][2] = E::pack(st[2 * kk + 1][0], st[2 * kk + 1][1]);
            sa[kk][3] = E::pack(st[2 * kk + 1][2], st[2 * kk + 1][3]);
        }
        // u^T = v^T Tu^T (v^T read transposed from the [token][v] tile), independent of S
        float vp[kNT][4] = {};
#pragma unroll
        for (uint32_t ks = 0; ks < kNT / 2; ++ks) {
            if (identity) break;  // v = 0: u = 0
            constexpr uint32_t kChunksPerRow = Cfg::kVRowBytes / 16;
            const uint32_t m = lane / 8, row = 16 * ks + 8 * (m / 2) + lane % 8;
            const uint32_t chunk = 2 * vg + m % 2;  // the group's 16 columns of the slice
            uint32_t a[4];
            ldmatrix_x4_trans(smem_addr(s + Cfg::kOffV + chunk / kChunksPerRow * (C * Cfg::kVRowBytes) +
                                        swizzle_offset<Cfg::kVRowBytes>(row, chunk % kChunksPerRow)),
                              a[0], a[1], a[2], a[3]);
            gdr_mma_lower_t<E, C>(vp, a, ks, s + Cfg::kOffTu, lane);
        }
        // X = S^T k^T and O = S^T q^T (tokens on n; partial sums over the warp's head-dim part)
        float x[kNT][4] = {}, out[kNT][4] = {};
#pragma unroll
        for (uint32_t kk = 0; kk < kWarpKT / 2; ++kk)
#pragma unroll
            for (uint32_t jp = 0; jp < kNT / 2; ++jp) {
                const uint32_t off =
                    gdr_tile_offset<C>(16 * jp + lane % 8 + 8 * (lane / 16), 2 * (kt0 / 2 + kk) + (lane / 8) % 2);
                uint32_t bk[4];
                ldmatrix_x4(smem_addr(s + Cfg::kOffK + off), bk[0], bk[1], bk[2], bk[3]);
                E::mma(x[2 * jp], sa[kk], {bk[0], bk[1]});
                E::mma(x[2 * jp + 1], sa[kk], {bk[2], bk[3]});
                if constexpr (kOutput) {
                    uint32_t bq[4];
                    ldmatrix_x4(smem_addr(s + off), bq[0], bq[1], bq[2], bq[3]);
                    E::mma(out[2 * jp], sa[kk], {bq[0], bq[1]});
                    E::mma(out[2 * jp + 1], sa[kk], {bq[2], bq[3]});
                }
            }
        if constexpr (kKSplit > 1) {
            // publish the partials, then add the group's in warp order (identical X in every warp of the group)
            float* part = s_xch + (c % 2) * Cfg::kMathWarps * 2 * Cfg::kPartFloats;
            float* mine = part + warp * 2 * Cfg::kPartFloats;
#pragma unroll
            for (uint32_t j = 0; j < kNT; ++j)
#pragma unroll
                for (uint32_t e = 0; e < 4; ++e) {
                    mine[(j * 4 + e) * 32 + lane] = x[j][e];
                    if constexpr (kOutput) mine[Cfg::kPartFloats + (j * 4 + e) * 32 + lane] = out[j][e];
                }
            named_barrier_sync(1 + vg, kKSplit * 32);
            const float* grp = part + vg * kKSplit * 2 * Cfg::kPartFloats;
#pragma unroll
            for (uint32_t j = 0; j < kNT; ++j)
#pragma unroll
                for (uint32_t e = 0; e < 4; ++e) {
                    float sx = 0.0f, so = 0.0f;
                    const bool owned = (j / 2) % kKSplit == kq;
#pragma unroll
                    for (uint32_t w = 0; w < kKSplit; ++w) {
                        sx += grp[w * 2 * Cfg::kPartFloats + (j * 4 + e) * 32 + lane];
                        if (kOutput && owned) so += grp[(w * 2 + 1) * Cfg::kPartFloats + (j * 4 + e) * 32 + lane];
                    }
                    x[j][e] = sx, out[j][e] = owned ? so : 0.0f;
                }
        }
        // per-token factors: scale e^G / |q| (O's columns), e^{G_last - G} / |k| (0 past the end)
        float kf[kNT][2];
#pragma unroll
        for (uint32_t j = 0; j < kNT; ++j)
#pragma unroll
            for (uint32_t e = 0; e < 2; ++e) {
                const uint32_t tok = 8 * j + 2 * t4 + e;
                const float4 gt = gate[tok];
                if constexpr (kOutput) out[j][e] *= gt.y, out[j][e + 2] *= gt.y;
                kf[j][e] = !kTail || tok < len ? gt.z : 0.0f;
            }
        // v'^T = u^T - X Tw^T
#pragma unroll
        for (uint32_t ks = 0; ks < kNT / 2; ++ks) {
            uint32_t a[4];
            gdr_pack_a<E, C>(a, x, ks);
#pragma unroll
            for (uint32_t r = 0; r < 4; ++r) a[r] ^= 0x80008000u;  // -X: flip both halves' sign bits (exact)
            gdr_mma_lower_t<E, C>(vp, a, ks, s + Cfg::kOffTw, lane);
        }
        if constexpr (kTail) {
            // the tile rows past the sequence may hold factors nobody wrote (overlapped: the next
            // sequence's, not yet written; cu_seqlens ending below T: the tokens past its end are in no sequence and
            // never prepared). Their v' columns are zeroed, so o and the state update see 0, never 0 x garbage
#pragma unroll
            for (uint32_t j = 0; j < kNT; ++j)
#pragma unroll
                for (uint32_t e = 0; e < 4; ++e)
                    if (8 * j + 2 * t4 + e % 2 >= len) vp[j][e] = 0.0f;
        }
        // O += v'^T attn^T, v' as the A operand (the warp's token pairs)
        if constexpr (kOutput) {
#pragma unroll
            for (uint32_t ks = 0; ks < kNT / 2; ++ks) {
                uint32_t a[4];
                gdr_pack_a<E, C>(a, vp, ks);
                gdr_mma_lower_t<E, C, kKSplit>(out, a, ks, s + Cfg::kOffAttn, lane, kq);
            }
        }
        // S^T = e^{G_last} S^T + (v'^T diag(kf)) k   (the warp's head-dim part)
        const float decay = __expf(gate[len - 1].x);
#pragma unroll
        for (uint32_t kt = 0; kt < kWarpKT; ++kt)
#pragma unroll
            for (uint32_t e = 0; e < 4; ++e) st[kt][e] *= decay;
#pragma unroll
        for (uint32_t ks = 0; ks < kNT / 2; ++ks) {
            uint32_t a[4];
            gdr_pack_a<E, C>(a, vp, ks, kf);
#pragma unroll
            for (uint32_t np = 0; np < kWarpKT / 2; ++np) {
                uint32_t b[4];
                const uint32_t m = lane / 8;
                ldmatrix_x4_trans(
                    smem_addr(s + Cfg::kOffK +
                              gdr_tile_offset<C>(16 * ks + 8 * (m % 2) + lane % 8, 2 * (kt0 / 2 + np) + m / 2)),
                    b[0], b[1], b[2], b[3]);
                E::mma(st[2 * np], a, {b[0], b[1]});
                E::mma(st[2 * np + 1], a, {b[2], b[3]});
            }
        }
        ring.release(ps, lane);  // every read of the stage is done

        // o rows of the warp's token pairs: transpose through the group's staging tile, 16-byte stores (none in the
        // transition and states passes)
        if constexpr (kOutput) {
#pragma unroll
            for (uint32_t j = 0; j < kNT; ++j) {
                if ((j / 2) % kKSplit != kq) continue;
#pragma unroll
                for (uint32_t e = 0; e < 4; ++e)
                    s_o[(8 * j + 2 * t4 + e % 2) * 16 + gid + 8 * (e / 2)] = static_cast<Elem>(out[j][e]);
            }
            __syncwarp();
#pragma unroll
            for (uint32_t np = kq; np < C / 16; np += kKSplit) {
                const uint32_t row = 16 * np + lane / 2, part = lane % 2;
                if (row < len)
                    *reinterpret_cast<uint4*>(o + (static_cast<size_t>(first + row) * value_heads + hv) * kGdrHeadDim +
                                              v0 + 8 * part) =
                        *reinterpret_cast<const uint4*>(s_o + row * 16 + 8 * part);
            }
            __syncwarp();
        }
    };
    const uint32_t whole_chunks = (end - start) / C;
    PipelineState<kStages> ps;
    for (uint32_t c = 0; c < whole_chunks; ++c, ps.advance()) walk_chunk(c, ps, std::false_type{});
    if (whole_chunks < num_chunks) walk_chunk(whole_chunks, ps, std::true_type{});

    if (store_final) {
#pragma unroll
        for (uint32_t kt = 0; kt < kWarpKT; ++kt)
#pragma unroll
            for (uint32_t e = 0; e < 4; ++e) {
                const uint32_t kd = 8 * (kt0 + kt) + 2 * t4 + e % 2, vd = v0 + gid + 8 * (e / 2);
                final_state[final_at + kd * kGdrHeadDim + vd] = st[kt][e];
            }
    }
    if (ready != nullptr) pdl_wait_primary();  // overlapped: the prep grid (whose scratch is freed after us) ends first
    pdl_launch_dependents();
}

}  // namespace sm120
