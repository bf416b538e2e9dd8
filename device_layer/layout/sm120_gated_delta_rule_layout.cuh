#pragma once
// The data layout both gated-delta-rule kernels agree on (impls/sm120_gated_delta_rule_prep.cuh computes each
// chunk's WY factors, impls/sm120_gated_delta_rule_fwd.cuh carries the state through a sequence):
//   - element traits (bf16 / fp16 operands, fp32 accumulation on m16n8k16 mma.sync);
//   - the head-dim tile layout both kernels use for [rows][128] operand tiles: two [rows][64] halves, each in
//     TMA's 128-byte swizzle, so the recurrence kernel's TMA boxes and the prep kernel's plain stores agree;
//   - sequences and chunks: tokens are flattened over (batch, time); sequence n spans [start, end) of them
//     (B rows of T tokens, or the cu_seqlens segments of row 0) and is cut into chunks from its start.
//
// Scratch written by the prep kernel, token-indexed (flat token t, value head hv) so the recurrence kernel
// can read any chunk with one TMA box per array (row i of a chunk's C x C matrix is stored at token first + i):
//   tw, tu    [tokens][HV][C] elements   T diag(beta exp(G) / |k|) and T diag(beta), T = (I + A)^-1
//   attn      [tokens][HV][C] elements   row i: scale exp(G_i - G_j) q_i.k_j / (|q_i||k_j|) for j <= i, else 0
//   gates     [tokens][HV][4] fp32       (G, scale exp(G) / |q|, exp(G_last - G) / |k|, 0)
// with G the inclusive cumsum of g inside the chunk and |x| = 1 unless q/k are l2-normalized in the kernel.

#include "../common/sm120_arch.cuh"
#include "../common/sm120_flag.cuh"
#include "../common/sm120_math.cuh"
#include "../common/sm120_swizzle.cuh"
#include "../common/sm120_types.cuh"
#include "../mma/sm120.cuh"

namespace sm120 {

constexpr uint32_t kGdrHeadDim = 128;   // K = V = 128
constexpr uint32_t kGdrHalfCols = 64;   // one 128-byte swizzle row of bf16 / fp16
constexpr uint32_t kGdrGateFloats = 4;  // (G, q factor, k factor, pad) per token and value head
// The backward's granularity: the states pass stores the state entering every kGdrStateTokens tokens of a
// sequence, the reverse pass the state gradient leaving them (the host's chunks of that many tokens)
constexpr uint32_t kGdrStateTokens = 64;

template <typename Elem>
struct GdrElem;

template <>
struct GdrElem<bf16> {
    SM120_DEVICE static uint32_t pack(float lo, float hi) { return pack_bf16x2(lo, hi); }
    SM120_DEVICE static float to_float(bf16 x) { return __bfloat162float(x); }
    SM120_DEVICE static bf16 from_float(float x) { return __float2bfloat16_rn(x); }
    SM120_DEVICE static void unpack(uint32_t r, float& lo, float& hi) {
        const float2 f = __bfloat1622float2(*reinterpret_cast<const bf16x2*>(&r));
        lo = f.x, hi = f.y;
    }
    SM120_DEVICE static void mma(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
        mma_bf16_16816(d, a, b);
    }
};

template <>
struct GdrElem<fp16> {
    SM120_DEVICE static uint32_t pack(float lo, float hi) { return pack_half2(lo, hi); }
    SM120_DEVICE static float to_float(fp16 x) { return __half2float(x); }
    SM120_DEVICE static fp16 from_float(float x) { return __float2half_rn(x); }
    SM120_DEVICE static void unpack(uint32_t r, float& lo, float& hi) {
        const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&r));
        lo = f.x, hi = f.y;
    }
    SM120_DEVICE static void mma(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
        mma_f16_16816(d, a, b);
    }
};

// Byte offset of (row, 16-byte chunk c of 16) in a [kRows][128] tile of 2-byte elements stored as two
// swizzled [kRows][64] halves (the layout of two TMA boxes of 64 columns).
template <uint32_t kRows>
SM120_HOST_DEVICE uint32_t gdr_tile_offset(uint32_t row, uint32_t chunk) {
    return (chunk / 8) * (kRows * kSwizzle128BRowBytes) + swizzle_offset<kSwizzle128BRowBytes>(row, chunk % 8);
}

// cu_seqlens entry k clamped to [0, T] (T = seq_len: the tokens of row 0).
template <typename Offset>
SM120_DEVICE uint32_t gdr_offset(const Offset* cu_seqlens, uint32_t k, uint32_t seq_len) {
    const Offset v = __ldg(cu_seqlens + k);
    return v <= 0 ? 0u : (v >= static_cast<Offset>(seq_len) ? seq_len : static_cast<uint32_t>(v));
}

// cu_seqlens is not trusted (a graph replay skips the host check): the kernels use cu'[k] = max over j <= k of
// cu_seqlens[j] clamped to [0, T], its running maximum. Valid offsets (non-decreasing, within T) are unchanged;
// any others give ranges inside the tokens that never overlap, so a decreasing entry is an empty sequence and the
// chunks never outnumber the host's slot count ceil(T / C) + N. The prep kernel computes cu' (a warp scan,
// gdr_effective_offsets) and the forward kernel reads it.
//
// One warp, 32 sequences per step: lane l of the step at `base` gets cu'[base + l] and cu'[base + l + 1] (both
// equal past the last sequence); `carry` is cu' at the previous step's end (0 before the first).
template <typename Offset>
SM120_DEVICE void gdr_scan_step(const Offset* cu_seqlens, uint32_t num_seqs, uint32_t seq_len, uint32_t base,
                                uint32_t lane, uint32_t& carry, uint32_t& s, uint32_t& e) {
    const uint32_t n = base + lane;
    s = n < num_seqs ? gdr_offset(cu_seqlens, n, seq_len) : 0u;
#pragma unroll
    for (uint32_t d = 1; d < 32; d <<= 1) {  // inclusive max-scan over the lanes
        const uint32_t x = __shfl_up_sync(0xffffffffu, s, d);
        if (lane >= d) s = max(s, x);
    }
    s = max(s, carry);
    e = n < num_seqs ? max(s, gdr_offset(cu_seqlens, n + 1, seq_len)) : s;
    carry = __shfl_sync(0xffffffffu, e, 31);
}

// The chunk count of this lane's sequence [s, e) and its inclusive prefix over the warp's 32 sequences.
template <uint32_t kChunk>
SM120_DEVICE void gdr_chunk_scan(uint32_t s, uint32_t e, uint32_t lane, uint32_t& count, uint32_t& incl) {
    count = e > s ? (e - s + kChunk - 1) / kChunk : 0;
    incl = count;
#pragma unroll
    for (uint32_t d = 1; d < 32; d <<= 1) {
        const uint32_t x = __shfl_up_sync(0xffffffffu, incl, d);
        if (lane >= d) incl += x;
    }
}

// cu' of every sequence into out[0, num_seqs] and, after it, each sequence's first chunk slot into
// out[num_seqs + 1 + n] (the chunks of the sequences before it; what gdr_chunk_of_slot enumerates). One warp, the
// prep kernel's first CTA.
template <uint32_t kChunk, typename Offset>
SM120_DEVICE void gdr_effective_offsets(const Offset* cu_seqlens, uint32_t num_seqs, uint32_t seq_len, uint32_t lane,
                                        int32_t* out) {
    uint32_t carry = 0, before = 0;
    for (uint32_t base = 0; base < num_seqs; base += 32) {
        uint32_t s, e;
        gdr_scan_step(cu_seqlens, num_seqs, seq_len, base, lane, carry, s, e);
        uint32_t count, incl;
        gdr_chunk_scan<kChunk>(s, e, lane, count, incl);
        if (base + lane < num_seqs) {
            out[base + lane] = static_cast<int32_t>(s);
            out[num_seqs + 1 + base + lane] = static_cast<int32_t>(before + incl - count);
        }
        if (base + lane + 1 == num_seqs) out[num_seqs] = static_cast<int32_t>(e);
        before += __shfl_sync(0xffffffffu, incl, 31);
    }
}

// Sequence n's flat token range: [n * T, n * T + T) without cu_seqlens, else [cu[n], cu[n + 1]) (the forward
// kernel passes the prep kernel's cu').
template <typename Offset>
SM120_DEVICE void gdr_sequence(const Offset* cu_seqlens, uint32_t seq_len, uint32_t n, uint32_t& start, uint32_t& end) {
    if (cu_seqlens == nullptr) {
        start = n * seq_len, end = start + seq_len;
    } else {
        start = static_cast<uint32_t>(__ldg(cu_seqlens + n)), end = static_cast<uint32_t>(__ldg(cu_seqlens + n + 1));
    }
}

// What a recurrence CTA walks. Whole sequences (segments == 0): unit = sequence. Segmented (context parallelism
// inside the GPU, docs/gated_delta_rule.md): unit = (half, segment, sequence) with the sequence fastest; the
// transition pass (transitions != 0) has two halves, 0 the segment's walk from a zero state (its affine part B),
// 1 from the identity with v = 0 (its linear part A). `slot` indexes the per-unit states: [half][segment][sequence].
struct GdrUnit {
    uint32_t seq, segment, half, slot, num_seqs;
};

SM120_DEVICE GdrUnit gdr_unit(uint32_t unit, uint32_t units, uint32_t segments, uint32_t transitions) {
    if (segments == 0) return {unit, 0, 0, unit, units};
    const uint32_t per_half = transitions != 0 ? units / 2 : units, num_seqs = per_half / segments;
    const uint32_t half = unit / per_half, in_half = unit % per_half;
    return {in_half % num_seqs, in_half / num_seqs, half, unit, num_seqs};
}

// Segment j of a sequence [start, end): `segment_tokens` (whole chunks) each, clipped to the sequence (empty past it).
SM120_DEVICE void gdr_segment(uint32_t segment, uint32_t segment_tokens, uint32_t& start, uint32_t& end) {
    const uint32_t s = start + min(segment * segment_tokens, end - start);
    start = s, end = s + min(segment_tokens, end - s);
}

// Overlapped launch (few recurrence CTAs): the prep kernel runs beside the recurrence as a persistent grid and
// publishes its work in `ready` (int32, zeroed by the host): ready[0] once cu' (and the first slots) are written,
// ready[1 + slot * HV + hv] once chunk slot `slot` of value head hv is. The recurrence waits on these instead of
// on the prep grid's end.
template <typename Flag>
SM120_DEVICE Flag* gdr_ready_flag(Flag* ready, uint32_t slot, uint32_t value_heads, uint32_t hv) {
    return ready + 1 + static_cast<size_t>(slot) * value_heads + hv;
}

// gdr_sequence for the overlapped launch: waits for cu' (when there is one; read coherently after the flag's
// acquire, not through the non-coherent path: the prep grid writes it meanwhile) and also gives the sequence's
// first chunk slot.
template <uint32_t kChunk>
SM120_DEVICE void gdr_sequence_published(const int32_t* cu_effective, const int32_t* ready, uint32_t num_seqs,
                                         uint32_t seq_len, uint32_t n, uint32_t& start, uint32_t& end,
                                         uint32_t& first_slot) {
    if (cu_effective == nullptr) {
        start = n * seq_len, end = start + seq_len, first_slot = n * ((seq_len + kChunk - 1) / kChunk);
        return;
    }
    flag_wait(ready);
    start = static_cast<uint32_t>(load_relaxed(cu_effective + n));
    end = static_cast<uint32_t>(load_relaxed(cu_effective + n + 1));
    first_slot = static_cast<uint32_t>(load_relaxed(cu_effective + num_seqs + 1 + n));
}

// Chunk slot `slot` (the prep kernel's blockIdx.x) -> its sequence's token range and the chunk's first token.
// Without cu_seqlens every sequence has ceil(T / C) slots; with it, slots enumerate the chunks of all sequences
// in order (one warp scans the chunk counts, 32 sequences per step). Returns false for slots past the last chunk.
template <uint32_t kChunk, typename Offset>
SM120_DEVICE bool gdr_chunk_of_slot(const Offset* cu_seqlens, uint32_t num_seqs, uint32_t seq_len, uint32_t slot,
                                    uint32_t lane, uint32_t& first, uint32_t& end) {
    if (cu_seqlens == nullptr) {
        const uint32_t per_seq = (seq_len + kChunk - 1) / kChunk;
        const uint32_t n = slot / per_seq;
        if (per_seq == 0 || n >= num_seqs) return false;
        first = n * seq_len + (slot % per_seq) * kChunk, end = n * seq_len + seq_len;
        return true;
    }
    uint32_t before = 0, carry = 0;  // chunks of the sequences already scanned; cu' at their end
    for (uint32_t base = 0; base < num_seqs; base += 32) {
        uint32_t s, e;  // cu'[n], cu'[n + 1] of this lane's sequence n = base + lane
        gdr_scan_step(cu_seqlens, num_seqs, seq_len, base, lane, carry, s, e);
        uint32_t count, incl;
        gdr_chunk_scan<kChunk>(s, e, lane, count, incl);
        const uint32_t total = __shfl_sync(0xffffffffu, incl, 31);
        if (slot < before + total) {
            const uint32_t hit = __ballot_sync(0xffffffffu, slot < before + incl);
            const uint32_t owner = __ffs(hit) - 1;
            const uint32_t owner_start = __shfl_sync(0xffffffffu, s, owner);
            const uint32_t owner_excl = __shfl_sync(0xffffffffu, incl - count, owner);
            first = owner_start + (slot - before - owner_excl) * kChunk;
            end = __shfl_sync(0xffffffffu, e, owner);
            return true;
        }
        before += total;
    }
    return false;
}

}  // namespace sm120
