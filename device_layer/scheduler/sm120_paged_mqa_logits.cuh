#pragma once
// Schedule of a paged MQA-logits call (get_paged_mqa_logits_metadata): the work is counted in chunks of
// kChunkKeys keys per batch, chunks(b) = max(1, ceil(len(b) / kChunkKeys)) with len(b) the batch's largest
// context length (a batch of length 0 keeps one chunk, whose CTA writes its -inf rows). Chunks are numbered
// batch-major and SM s takes [floor(s * total / num_sms), floor((s + 1) * total / num_sms)):
//     meta[s] = (batch, chunk within the batch) of its first chunk,   meta[num_sms] = (num_batches, 0).
// One CTA computes it on the GPU (graph-capturable): per-thread segments of batches, a block-wide scan of the
// segment totals, then each SM's first chunk located by a binary search over segments and a walk inside one.
//
// Indices are not trusted (under CUDA-graph capture nobody checked them): counts are 64-bit, so any int32
// lengths give an exact partition, and the kernel's walker clamps every length to what the block table covers
// and every meta entry to the batch range. Meta entries are (batch, chunk) bounds in lexicographic order, so SM
// shares partition the work exactly even where the walker's clamped chunk counts differ from the metadata's.

#include "../common/sm120_arch.cuh"
#include "../common/sm120_math.cuh"

namespace sm120 {

// One context length as the kernel uses it: negative ones are 0, and none is longer than `cap` keys (what the
// batch's block-table row covers; the metadata, which does not see the table, passes ~0u).
SM120_DEVICE uint32_t paged_clamp_len(int32_t len, uint32_t cap) {
    return min(static_cast<uint32_t>(max(len, 0)), cap);
}

// The batch's key count: the largest context length over its next_n queries (row b of a [B, ld] table).
SM120_DEVICE uint32_t paged_batch_len(const int32_t* context_lens, uint32_t b, uint32_t next_n, uint32_t ld,
                                      uint32_t cap = ~0u) {
    uint32_t len = 0;
    for (uint32_t t = 0; t < next_n; ++t)
        len = max(len, paged_clamp_len(__ldg(context_lens + static_cast<size_t>(b) * ld + t), cap));
    return len;
}

SM120_DEVICE uint32_t paged_chunks(uint32_t len, uint32_t chunk_keys) {
    return len == 0 ? 1u : ceil_div(len, chunk_keys);
}

// Walks the (batch, chunk) pairs of one SM's share in order: every pair with chunk < chunks(batch), from the
// SM's meta entry up to the next SM's. Lengths are clamped to `cap` keys and meta entries to [0, num_batches], so
// a corrupt length or schedule never leads outside the batch range or a block-table row.
struct PagedChunkWalker {
    const int32_t* context_lens;
    uint32_t next_n, ld, chunk_keys, num_batches, cap;
    uint32_t batch, chunk, end_batch, end_chunk;
    uint32_t len = 0, chunks = 0;  // of the current batch

    SM120_DEVICE PagedChunkWalker(const int32_t* lens, uint32_t next_n_, uint32_t ld_, uint32_t chunk_keys_,
                                  uint32_t num_batches_, uint32_t cap_, const int32_t* meta, uint32_t sm)
        : context_lens(lens), next_n(next_n_), ld(ld_), chunk_keys(chunk_keys_), num_batches(num_batches_), cap(cap_),
          batch(entry(meta, 2 * sm)), chunk(static_cast<uint32_t>(max(__ldg(meta + 2 * sm + 1), 0))),
          end_batch(entry(meta, 2 * sm + 2)), end_chunk(static_cast<uint32_t>(max(__ldg(meta + 2 * sm + 3), 0))) {
        settle();
    }

    SM120_DEVICE uint32_t entry(const int32_t* meta, uint32_t i) const {
        return min(static_cast<uint32_t>(max(__ldg(meta + i), 0)), num_batches);
    }

    SM120_DEVICE bool done() const {
        return batch >= num_batches || batch > end_batch || (batch == end_batch && chunk >= end_chunk);
    }

    // Whether `batch` differs from the one last seen (the caller then reloads its per-batch state).
    SM120_DEVICE bool enter(uint32_t& seen_batch) const {
        if (batch == seen_batch) return false;
        seen_batch = batch;
        return true;
    }

    SM120_DEVICE void advance() {
        if (++chunk >= chunks) ++batch, chunk = 0;
        settle();
    }

    // len / chunks of `batch`; a chunk past the batch's (clamped) end moves on to the next batch.
    SM120_DEVICE void settle() {
        while (batch < num_batches) {
            len = paged_batch_len(context_lens, batch, next_n, ld, cap);
            chunks = paged_chunks(len, chunk_keys);
            if (chunk < chunks) return;
            ++batch, chunk = 0;
        }
    }
};

// context_lens: [B, ld] with `next_n` meaningful columns (1-D lengths: next_n = 1, ld = 1).
template <uint32_t kThreads>
// clang-format off: a kernel declaration (see .clang-format)
__global__ void __launch_bounds__(kThreads, 1)
sm120_paged_mqa_logits_metadata_kernel(const int32_t* __restrict__ context_lens, uint32_t num_batches,
                                       uint32_t next_n, uint32_t ld, uint32_t chunk_keys, uint32_t num_sms,
                                       int32_t* __restrict__ meta) {
    // clang-format on
    __shared__ uint64_t seg_prefix[kThreads + 1];
    const uint32_t tid = threadIdx.x;
    const uint32_t per = ceil_div(num_batches, kThreads);
    const uint32_t b0 = min(tid * per, num_batches), b1 = min(b0 + per, num_batches);
    uint64_t mine = 0;
    for (uint32_t b = b0; b < b1; ++b) mine += paged_chunks(paged_batch_len(context_lens, b, next_n, ld), chunk_keys);
    // Inclusive scan of the segment totals (Hillis-Steele over shared memory), shifted to exclusive.
    seg_prefix[tid + 1] = mine;
    if (tid == 0) seg_prefix[0] = 0;
    __syncthreads();
    for (uint32_t off = 1; off < kThreads; off <<= 1) {
        const uint64_t v = tid + 1 > off ? seg_prefix[tid + 1 - off] : 0u;
        __syncthreads();
        seg_prefix[tid + 1] += v;
        __syncthreads();
    }
    const uint64_t total = seg_prefix[kThreads];
    for (uint32_t s = tid; s <= num_sms; s += kThreads) {
        const uint64_t target = static_cast<uint64_t>(s) * total / num_sms;
        int32_t out_b = static_cast<int32_t>(num_batches), out_c = 0;
        if (s < num_sms && target < total) {
            // the segment k with seg_prefix[k] <= target < seg_prefix[k + 1]
            uint32_t lo = 0, hi = kThreads;
            while (hi - lo > 1) {
                const uint32_t mid = (lo + hi) / 2;
                if (seg_prefix[mid] <= target) lo = mid;
                else hi = mid;
            }
            uint64_t acc = seg_prefix[lo];
            for (uint32_t b = min(lo * per, num_batches); b < min(lo * per + per, num_batches); ++b) {
                const uint32_t c = paged_chunks(paged_batch_len(context_lens, b, next_n, ld), chunk_keys);
                if (target < acc + c) {
                    out_b = static_cast<int32_t>(b), out_c = static_cast<int32_t>(target - acc);
                    break;
                }
                acc += c;
            }
        }
        meta[2 * s] = out_b;
        meta[2 * s + 1] = out_c;
    }
}

}  // namespace sm120
