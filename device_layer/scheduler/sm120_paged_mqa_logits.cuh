#pragma once
// Schedule of a paged MQA-logits call (get_paged_mqa_logits_metadata): the work is counted in chunks of
// kChunkKeys keys per batch, chunks(b) = max(1, ceil(len(b) / kChunkKeys)) with len(b) the batch's largest
// context length (a batch of length 0 keeps one chunk, whose CTA writes its -inf rows). Chunks are numbered
// batch-major and SM s takes [floor(s * total / num_sms), floor((s + 1) * total / num_sms)):
//     meta[s] = (batch, chunk within the batch) of its first chunk,   meta[num_sms] = (num_batches, 0).
// One CTA computes it on the GPU (graph-capturable): per-thread segments of batches, a block-wide scan of the
// segment totals, then each SM's first chunk located by a binary search over segments and a walk inside one.

#include "../common/sm120_arch.cuh"
#include "../common/sm120_math.cuh"

namespace sm120 {


// The batch's key count: the largest context length over its next_n queries (row b of a [B, ld] table).
SM120_DEVICE uint32_t paged_batch_len(const int32_t* context_lens, uint32_t b, uint32_t next_n, uint32_t ld) {
    int32_t len = 0;
    for (uint32_t t = 0; t < next_n; ++t) len = max(len, __ldg(context_lens + static_cast<size_t>(b) * ld + t));
    return static_cast<uint32_t>(len);
}

SM120_DEVICE uint32_t paged_chunks(uint32_t len, uint32_t chunk_keys) {
    return len == 0 ? 1u : ceil_div(len, chunk_keys);
}

// Walks the (batch, chunk) sequence of one SM's share, as the metadata numbered it.
struct PagedChunkWalker {
    const int32_t* context_lens;
    uint32_t next_n, ld, chunk_keys;
    uint32_t batch, chunk, end_batch, end_chunk;
    uint32_t len = 0, chunks = 0;  // of the current batch

    SM120_DEVICE PagedChunkWalker(const int32_t* lens, uint32_t next_n_, uint32_t ld_, uint32_t chunk_keys_,
                                  const int32_t* meta, uint32_t sm)
        : context_lens(lens), next_n(next_n_), ld(ld_), chunk_keys(chunk_keys_),
          batch(static_cast<uint32_t>(__ldg(meta + 2 * sm))), chunk(static_cast<uint32_t>(__ldg(meta + 2 * sm + 1))),
          end_batch(static_cast<uint32_t>(__ldg(meta + 2 * sm + 2))),
          end_chunk(static_cast<uint32_t>(__ldg(meta + 2 * sm + 3))) {}

    SM120_DEVICE bool done() const { return batch > end_batch || (batch == end_batch && chunk >= end_chunk); }

    // Refresh len / chunks when `batch` is new; returns whether it changed.
    SM120_DEVICE bool enter(uint32_t& seen_batch) {
        if (batch == seen_batch) return false;
        seen_batch = batch;
        len = paged_batch_len(context_lens, batch, next_n, ld);
        chunks = paged_chunks(len, chunk_keys);
        return true;
    }

    SM120_DEVICE void advance() {
        if (++chunk >= chunks) ++batch, chunk = 0;
    }
};

// context_lens: [B, ld] with `next_n` meaningful columns (1-D lengths: next_n = 1, ld = 1).
template <uint32_t kThreads>
__global__ void __launch_bounds__(kThreads, 1)
sm120_paged_mqa_logits_metadata_kernel(const int32_t* __restrict__ context_lens, uint32_t num_batches,
                                       uint32_t next_n, uint32_t ld, uint32_t chunk_keys, uint32_t num_sms,
                                       int32_t* __restrict__ meta) {
    __shared__ uint32_t seg_prefix[kThreads + 1];
    const uint32_t tid = threadIdx.x;
    const uint32_t per = ceil_div(num_batches, kThreads);
    const uint32_t b0 = min(tid * per, num_batches), b1 = min(b0 + per, num_batches);
    uint32_t mine = 0;
    for (uint32_t b = b0; b < b1; ++b) mine += paged_chunks(paged_batch_len(context_lens, b, next_n, ld), chunk_keys);
    // Inclusive scan of the segment totals (Hillis-Steele over shared memory), shifted to exclusive.
    seg_prefix[tid + 1] = mine;
    if (tid == 0) seg_prefix[0] = 0;
    __syncthreads();
    for (uint32_t off = 1; off < kThreads; off <<= 1) {
        const uint32_t v = tid + 1 > off ? seg_prefix[tid + 1 - off] : 0u;
        __syncthreads();
        seg_prefix[tid + 1] += v;
        __syncthreads();
    }
    const uint32_t total = seg_prefix[kThreads];
    for (uint32_t s = tid; s <= num_sms; s += kThreads) {
        const uint32_t target = static_cast<uint32_t>(static_cast<uint64_t>(s) * total / num_sms);
        int32_t out_b = static_cast<int32_t>(num_batches), out_c = 0;
        if (s < num_sms && target < total) {
            // the segment k with seg_prefix[k] <= target < seg_prefix[k + 1]
            uint32_t lo = 0, hi = kThreads;
            while (hi - lo > 1) {
                const uint32_t mid = (lo + hi) / 2;
                if (seg_prefix[mid] <= target) lo = mid; else hi = mid;
            }
            uint32_t acc = seg_prefix[lo];
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
