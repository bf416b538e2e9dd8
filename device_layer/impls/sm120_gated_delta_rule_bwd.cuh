#pragma once
// Gated delta rule backward, the reverse state pass (issue 41's B2; docs/gated_delta_rule.md, "Backward plan"):
// the state gradient dh carried through a sequence from its end to its start, chunk by chunk, with the prep
// kernel's factors (sm120_gated_delta_rule_prep.cuh: Tw, attn, gates) and q, k, do as given. CTA = (V slice of
// kVSlice columns, value head hv, sequence n); each math warp owns 16 value columns of dh^T (16 x 128, fp32) in
// registers for the whole sequence, as the forward's warps own S^T. Per chunk, last first, with dh' = dh_{c+1}:
//   Y     = dh'^T k^T                         [16 x C]   (the forward's X = S^T k^T)
//   dv'^T = do^T attn + Y diag(kf)            kf = e^{G_last - G} / |k| (0 past the sequence)
//   Z     = dv'^T Tw                          (W^T dv' = k^T Tw^T dv': W = Tw k never formed)
//   dh^T  = e^{G_last} dh'^T + (do^T diag(gq)) q - Z k          gq = scale e^G / |q| (0 past the sequence)
// from o = diag(gq) q h + attn v', v' = u - Tw k h, h' = e^{G_last} h + k^T diag(kf) v'. The C x C factors are lower
// triangular, so do^T attn and dv'^T Tw skip the blocks above the diagonal. Stored: dh' at the end of every
// kGdrStateTokens tokens of a sequence (the gradient of the state leaving that stretch, fp32 [K][V] at the host's
// slot, as the forward's states instance numbers its states), and dh_0 (the initial state's gradient). dv' is not
// stored: the host forms it from dh' for its own chunking.
// A sequence's last, partial chunk is walked first: the q, k, do, Tw and attn rows past it (the next sequence's
// tokens, padding past cu_seqlens' end, or factors nobody wrote) are zeroed in shared memory before any read, so
// nothing from another sequence reaches this one's gradients.

#include <cuda.h>
#include <type_traits>
#include "../common/sm120_arch.cuh"
#include "../common/sm120_fence.cuh"
#include "../common/sm120_ldmatrix.cuh"
#include "../common/sm120_mbarrier.cuh"
#include "../common/sm120_pdl.cuh"
#include "../common/sm120_pipeline.cuh"
#include "../common/sm120_tma.cuh"
#include "../common/sm120_warp.cuh"
#include "../layout/sm120_gated_delta_rule_layout.cuh"
#include "sm120_gated_delta_rule_fwd.cuh"  // gdr_pack_a, gdr_zero_rows_from

namespace sm120 {

template <uint32_t kChunk, uint32_t kVSlice, uint32_t kStages>
struct GdrBwdConfig {
    static constexpr uint32_t kGroups = kVSlice / 16;  // one math warp per 16 value columns
    static constexpr uint32_t kMathWarps = kGroups;
    static constexpr uint32_t kThreads = (kMathWarps + 1) * 32;  // + the producer warp
    static constexpr uint32_t kHeadTileBytes = kChunk * kGdrHeadDim * 2;
    static constexpr uint32_t kVRowBytes = (kVSlice < kGdrHalfCols ? kVSlice : kGdrHalfCols) * 2;
    static constexpr uint32_t kVBoxes = kVSlice * 2 / kVRowBytes;
    static constexpr uint32_t kVBytes = kChunk * kVSlice * 2;
    static constexpr uint32_t kMatBytes = kChunk * kChunk * 2;
    static constexpr uint32_t kGateBytes = kChunk * kGdrGateFloats * 4;
    // stage: q | k | do slice | Tw | attn | gates, each 1024-aligned (swizzle atoms)
    static constexpr uint32_t kOffK = kHeadTileBytes, kOffDo = 2 * kHeadTileBytes;
    static constexpr uint32_t kOffTw = kOffDo + align_up(kVBytes, kSwizzleAtomBytes);
    static constexpr uint32_t kOffAttn = kOffTw + align_up(kMatBytes, kSwizzleAtomBytes);
    static constexpr uint32_t kOffGate = kOffAttn + align_up(kMatBytes, kSwizzleAtomBytes);
    static constexpr uint32_t kStageBytes = kOffGate + align_up(kGateBytes, kSwizzleAtomBytes);
    static constexpr uint32_t kTxBytes = 2 * kHeadTileBytes + kVBytes + 2 * kMatBytes + kGateBytes;
    static constexpr uint32_t kSmemBytes = kStages * kStageBytes + 2 * kStages * 8;
    static_assert(kChunk == 16 || kChunk == 32 || kChunk == 64, "chunk size: 16, 32 or 64");
    static_assert(kVSlice == 16 || kVSlice == 32 || kVSlice == 64 || kVSlice == 128, "V slice: 16, 32, 64 or 128");
    static_assert(kStages >= 1, "at least one stage");
    static_assert(kSmemBytes <= kMaxSmemPerBlock, "shared memory exceeds the SM120 per-block budget (101376 B)");
};

// acc[2 np], acc[2 np + 1] += A (k-step ks over tokens i) * M for a lower-triangular C x C tile M ([i][j] rows,
// swizzled rows of C * 2 bytes): B[k = i][n = j] = M[i][j], only the blocks with np <= ks (the transpose of
// gdr_mma_lower_t's reading).
template <typename E, uint32_t C>
SM120_DEVICE void gdr_mma_upper(float (&acc)[C / 8][4], const uint32_t (&a)[4], uint32_t ks, const uint8_t* tile,
                                uint32_t lane) {
    const uint32_t m = lane / 8;
#pragma unroll
    for (uint32_t np = 0; np < C / 16; ++np) {
        if (np > ks) continue;
        uint32_t b[4];
        ldmatrix_x4_trans(smem_addr(tile + swizzle_offset<C * 2>(16 * ks + 8 * (m % 2) + lane % 8, 2 * np + m / 2)),
                          b[0], b[1], b[2], b[3]);
        E::mma(acc[2 * np], a, {b[0], b[1]});
        E::mma(acc[2 * np + 1], a, {b[2], b[3]});
    }
}

template <uint32_t kChunk, uint32_t kVSlice, uint32_t kStages, typename Elem>
// clang-format off: a kernel declaration (see .clang-format)
__global__ void __launch_bounds__(GdrBwdConfig<kChunk, kVSlice, kStages>::kThreads, 1)
sm120_gated_delta_rule_bwd_kernel(const __grid_constant__ CUtensorMap tmap_q, const __grid_constant__ CUtensorMap tmap_k,
                                  const __grid_constant__ CUtensorMap tmap_do, const __grid_constant__ CUtensorMap tmap_tw,
                                  const __grid_constant__ CUtensorMap tmap_attn, const __grid_constant__ CUtensorMap tmap_gate,
                                  const float* __restrict__ dfinal, float* __restrict__ dh0, Elem* __restrict__ dh_next,
                                  const int32_t* __restrict__ state_slots, const int32_t* __restrict__ cu_seqlens,
                                  uint32_t seq_len, uint32_t value_heads, uint32_t group) {
    // clang-format on
    using Cfg = GdrBwdConfig<kChunk, kVSlice, kStages>;
    using E = GdrElem<Elem>;
    constexpr uint32_t C = kChunk, kNT = C / 8, kKT = kGdrHeadDim / 8;
    constexpr uint32_t kSlices = kGdrHeadDim / kVSlice;
    static_assert(kGdrStateTokens % kChunk == 0, "a stored dh' ends a chunk");

    extern __shared__ __align__(1024) uint8_t smem[];
    const auto ring = StageRing<kStages>::at(smem + kStages * Cfg::kStageBytes);

    const uint32_t warp = warp_idx(), lane = lane_idx();
    const uint32_t slice = blockIdx.x % kSlices, hv = blockIdx.x / kSlices % value_heads, h = hv / group;
    const uint32_t n = blockIdx.x / kSlices / value_heads, num_seqs = gridDim.x / kSlices / value_heads;
    uint32_t start, end;
    ring.init(Cfg::kMathWarps);
    pdl_wait_primary();
    gdr_sequence(cu_seqlens, seq_len, n, start, end);  // cu_seqlens: the prep kernel's clamped cu'
    const uint32_t num_chunks = (end - start + C - 1) / C;

    if (warp == Cfg::kMathWarps) {
        // ---------------- producer: one TMA batch per chunk, last chunk first ----------------
        if (lane == 0) {
            tma_prefetch_descriptor(&tmap_q), tma_prefetch_descriptor(&tmap_k), tma_prefetch_descriptor(&tmap_do);
            tma_prefetch_descriptor(&tmap_tw), tma_prefetch_descriptor(&tmap_attn);
            tma_prefetch_descriptor(&tmap_gate);
            PipelineState<kStages> ps;
            for (uint32_t r = 0; r < num_chunks; ++r, ps.advance()) {
                const uint32_t c = num_chunks - 1 - r;
                const int32_t t = static_cast<int32_t>(start + c * C), hvi = static_cast<int32_t>(hv);
                uint8_t* s = smem + ps.stage * Cfg::kStageBytes;
                uint64_t* bar = ring.acquire(ps, Cfg::kTxBytes);
#pragma unroll
                for (uint32_t half = 0; half < 2; ++half) {
                    const int32_t col = static_cast<int32_t>(half * kGdrHalfCols);
                    const uint32_t off = half * C * kSwizzle128BRowBytes;
                    tma_load_3d(s + off, &tmap_q, bar, col, static_cast<int32_t>(h), t);
                    tma_load_3d(s + Cfg::kOffK + off, &tmap_k, bar, col, static_cast<int32_t>(h), t);
                }
#pragma unroll
                for (uint32_t b = 0; b < Cfg::kVBoxes; ++b)
                    tma_load_3d(s + Cfg::kOffDo + b * C * Cfg::kVRowBytes, &tmap_do, bar,
                                static_cast<int32_t>(slice * kVSlice + b * kGdrHalfCols), hvi, t);
                tma_load_3d(s + Cfg::kOffTw, &tmap_tw, bar, 0, hvi, t);
                tma_load_3d(s + Cfg::kOffAttn, &tmap_attn, bar, 0, hvi, t);
                tma_load_3d(s + Cfg::kOffGate, &tmap_gate, bar, 0, hvi, t);
            }
        }
        return;
    }

    // ---------------- math warps: value columns [v0, v0 + 16), the whole head dim ----------------
    const uint32_t gid = lane >> 2, t4 = lane & 3, m = lane / 8;
    const uint32_t v0 = slice * kVSlice + warp * 16;
    const size_t pair_at = (static_cast<size_t>(n) * value_heads + hv) * kGdrHeadDim * kGdrHeadDim;
    float dht[kKT][4];  // dh^T rows v0 + gid (+8), columns (k) 8 kt + 2 t4 (+1)
#pragma unroll
    for (uint32_t kt = 0; kt < kKT; ++kt)
#pragma unroll
        for (uint32_t e = 0; e < 4; ++e) {
            const uint32_t kd = 8 * kt + 2 * t4 + e % 2, vd = v0 + gid + 8 * (e / 2);
            dht[kt][e] = dfinal != nullptr ? __ldg(dfinal + pair_at + kd * kGdrHeadDim + vd) : 0.0f;
        }
    // dh0 in fp32; dh_next rounded to Elem (the per-chunk kernel reads it as Elem mma operands)
    auto store_dh = [&](auto* dst, size_t at) {
#pragma unroll
        for (uint32_t kt = 0; kt < kKT; ++kt)
#pragma unroll
            for (uint32_t e = 0; e < 4; ++e) {
                const uint32_t kd = 8 * kt + 2 * t4 + e % 2, vd = v0 + gid + 8 * (e / 2);
                if constexpr (sizeof(*dst) == sizeof(float)) dst[at + kd * kGdrHeadDim + vd] = dht[kt][e];
                else dst[at + kd * kGdrHeadDim + vd] = E::from_float(dht[kt][e]);
            }
    };
    // do^T of the warp's 16 columns as the A operand of token k-step ks (read transposed from the [token][v] tile)
    auto load_do_t = [&](const uint8_t* s, uint32_t ks, uint32_t (&a)[4]) {
        constexpr uint32_t kChunksPerRow = Cfg::kVRowBytes / 16;
        const uint32_t row = 16 * ks + 8 * (m / 2) + lane % 8, chunk = 2 * warp + m % 2;
        ldmatrix_x4_trans(smem_addr(s + Cfg::kOffDo + chunk / kChunksPerRow * (C * Cfg::kVRowBytes) +
                                    swizzle_offset<Cfg::kVRowBytes>(row, chunk % kChunksPerRow)),
                          a[0], a[1], a[2], a[3]);
    };

    auto walk_chunk = [&](uint32_t c, const PipelineState<kStages>& ps, auto tail) {
        constexpr bool kTail = decltype(tail)::value;
        const uint32_t first = start + c * C, len = kTail ? end - first : C;
        uint8_t* s = smem + ps.stage * Cfg::kStageBytes;
        const float4* gate = reinterpret_cast<const float4*>(s + Cfg::kOffGate);
        // dh' leaving a kGdrStateTokens stretch of the sequence (or the sequence): the host's dh_next
        const uint32_t rel = first - start;
        if (dh_next != nullptr && ((rel + C) % kGdrStateTokens == 0 || first + C >= end)) {
            const uint32_t point = rel / kGdrStateTokens;
            store_dh(dh_next, (static_cast<size_t>(state_slots[n] + state_slots[num_seqs + point]) * value_heads + hv) *
                                  kGdrHeadDim * kGdrHeadDim);
        }
        ring.wait_full(ps);
        if constexpr (kTail) {
            // the rows past the sequence: zeroed before any warp reads the stage (walked first: no earlier reads)
            constexpr uint32_t kStride = Cfg::kMathWarps * 32, kHeadUnits = 2 * C * (kSwizzle128BRowBytes / 16);
            const uint32_t thread = warp * 32 + lane;
            gdr_zero_rows_from<C, kSwizzle128BRowBytes / 16, kHeadUnits, kStride>(s, len, thread);
            gdr_zero_rows_from<C, kSwizzle128BRowBytes / 16, kHeadUnits, kStride>(s + Cfg::kOffK, len, thread);
            gdr_zero_rows_from<C, Cfg::kVRowBytes / 16, Cfg::kVBoxes * C*(Cfg::kVRowBytes / 16), kStride>(
                s + Cfg::kOffDo, len, thread);
            gdr_zero_rows_from<C, C / 8, C * C / 8, kStride>(s + Cfg::kOffTw, len, thread);
            gdr_zero_rows_from<C, C / 8, C * C / 8, kStride>(s + Cfg::kOffAttn, len, thread);
            named_barrier_sync(1, Cfg::kMathWarps * 32);
        }
        // dh'^T as the A operand (k16 steps over the head dim)
        uint32_t sa[kKT / 2][4];
#pragma unroll
        for (uint32_t kk = 0; kk < kKT / 2; ++kk) {
            sa[kk][0] = E::pack(dht[2 * kk][0], dht[2 * kk][1]);
            sa[kk][1] = E::pack(dht[2 * kk][2], dht[2 * kk][3]);
            sa[kk][2] = E::pack(dht[2 * kk + 1][0], dht[2 * kk + 1][1]);
            sa[kk][3] = E::pack(dht[2 * kk + 1][2], dht[2 * kk + 1][3]);
        }
        // Y = dh'^T k^T (tokens on n)
        float y[kNT][4] = {};
#pragma unroll
        for (uint32_t kk = 0; kk < kKT / 2; ++kk)
#pragma unroll
            for (uint32_t jp = 0; jp < kNT / 2; ++jp) {
                const uint32_t off = gdr_tile_offset<C>(16 * jp + lane % 8 + 8 * (lane / 16), 2 * kk + (lane / 8) % 2);
                uint32_t bk[4];
                ldmatrix_x4(smem_addr(s + Cfg::kOffK + off), bk[0], bk[1], bk[2], bk[3]);
                E::mma(y[2 * jp], sa[kk], {bk[0], bk[1]});
                E::mma(y[2 * jp + 1], sa[kk], {bk[2], bk[3]});
            }
        // per-token factors, 0 past the sequence: kf (the state update's), gq (o's)
        float kf[kNT][2], gq[kNT][2];
#pragma unroll
        for (uint32_t j = 0; j < kNT; ++j)
#pragma unroll
            for (uint32_t e = 0; e < 2; ++e) {
                const uint32_t tok = 8 * j + 2 * t4 + e;
                const float4 gt = gate[tok];
                const bool in = !kTail || tok < len;
                kf[j][e] = in ? gt.z : 0.0f, gq[j][e] = in ? gt.y : 0.0f;
            }
        // dv'^T = do^T attn + Y diag(kf)
        float dvp[kNT][4] = {};
#pragma unroll
        for (uint32_t ks = 0; ks < kNT / 2; ++ks) {
            uint32_t a[4];
            load_do_t(s, ks, a);
            gdr_mma_upper<E, C>(dvp, a, ks, s + Cfg::kOffAttn, lane);
        }
#pragma unroll
        for (uint32_t j = 0; j < kNT; ++j)
#pragma unroll
            for (uint32_t e = 0; e < 4; ++e) dvp[j][e] += y[j][e] * kf[j][e % 2];
        // Z = dv'^T Tw
        float z[kNT][4] = {};
#pragma unroll
        for (uint32_t ks = 0; ks < kNT / 2; ++ks) {
            uint32_t a[4];
            gdr_pack_a<E, C>(a, dvp, ks);
            gdr_mma_upper<E, C>(z, a, ks, s + Cfg::kOffTw, lane);
        }
        // dh^T = e^{G_last} dh'^T - Z k + (do^T diag(gq)) q
        const float decay = __expf(gate[len - 1].x);
#pragma unroll
        for (uint32_t kt = 0; kt < kKT; ++kt)
#pragma unroll
            for (uint32_t e = 0; e < 4; ++e) dht[kt][e] *= decay;
#pragma unroll
        for (uint32_t ks = 0; ks < kNT / 2; ++ks) {
            uint32_t az[4], aq[4];
            gdr_pack_a<E, C>(az, z, ks);
#pragma unroll
            for (uint32_t r = 0; r < 4; ++r) az[r] ^= 0x80008000u;  // -Z: flip both halves' sign bits (exact)
            load_do_t(s, ks, aq);
#pragma unroll
            for (uint32_t r = 0; r < 4; ++r) {  // column (token) 16 ks + 8 (r / 2) + 2 t4 (+1) scaled by gq
                float lo, hi;
                E::unpack(aq[r], lo, hi);
                aq[r] = E::pack(lo * gq[2 * ks + r / 2][0], hi * gq[2 * ks + r / 2][1]);
            }
#pragma unroll
            for (uint32_t np = 0; np < kKT / 2; ++np) {
                const uint32_t off = gdr_tile_offset<C>(16 * ks + 8 * (m % 2) + lane % 8, 2 * np + m / 2);
                uint32_t b[4];
                ldmatrix_x4_trans(smem_addr(s + Cfg::kOffK + off), b[0], b[1], b[2], b[3]);
                E::mma(dht[2 * np], az, {b[0], b[1]});
                E::mma(dht[2 * np + 1], az, {b[2], b[3]});
                ldmatrix_x4_trans(smem_addr(s + off), b[0], b[1], b[2], b[3]);
                E::mma(dht[2 * np], aq, {b[0], b[1]});
                E::mma(dht[2 * np + 1], aq, {b[2], b[3]});
            }
        }
        ring.release(ps, lane);  // every read of the stage is done
    };

    PipelineState<kStages> ps;
    uint32_t c = num_chunks;
    if ((end - start) % C != 0) walk_chunk(--c, ps, std::true_type{}), ps.advance();
    for (; c > 0; ps.advance()) walk_chunk(--c, ps, std::false_type{});
    if (dh0 != nullptr) store_dh(dh0, pair_at);
    pdl_launch_dependents();
}

}  // namespace sm120
