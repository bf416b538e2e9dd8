#pragma once
// Slot table of a sparse or paged-sparse MQA-logits call (get_sparse_mqa_logits_metadata /
// get_paged_sparse_mqa_logits_metadata; docs/sparse_mqa_logits.md), one thread per (row, slot), one launch,
// graph-capturable:
//     meta[r][s] = (first physical KV row, valid count 0..B)
// Contiguous (block_table == nullptr): the row's range is [ks[r], ke[r]), block b covers tokens from
// t0 = b * B + ks % B, and its physical row is t0. Paged: the range is [0, context_lens[r]), t0 = b * B, and the
// physical row is page * page_kv + t0 % page_kv with page = block_table[r][t0 / page_kv].
// Slot s holds a block only if s < n_r = min(num_slots, ceil((ke - ks) / B)), b >= 0, t0 >= ks and (paged) the
// page column lies inside the table row and names a page (>= 0) whose rows fit in int32; then count = min(B, ke - t0) (0 if t0 >= ke).
// Every other slot is (0, 0), so the logits kernel never reads outside the row's KV for it.

#include "../common/sm120_arch.cuh"

namespace sm120 {

template <uint32_t kThreads>
// clang-format off: a kernel declaration (see .clang-format)
__global__ void __launch_bounds__(kThreads)
sm120_sparse_mqa_logits_metadata_kernel(const int32_t* __restrict__ ks, const int32_t* __restrict__ ke,
                                        const int32_t* __restrict__ block_table, const int32_t* __restrict__ indices,
                                        int32_t* __restrict__ meta, uint32_t rows, uint32_t num_slots,
                                        uint32_t block_log2, uint32_t page_kv, uint32_t max_pages, uint32_t bt_ld,
                                        uint32_t idx_ld) {
    // clang-format on
    const uint64_t slot_id = static_cast<uint64_t>(blockIdx.x) * kThreads + threadIdx.x;
    if (slot_id >= static_cast<uint64_t>(rows) * num_slots) return;
    const uint32_t r = static_cast<uint32_t>(slot_id / num_slots), s = static_cast<uint32_t>(slot_id % num_slots);
    const int64_t block = int64_t{1} << block_log2;
    // Paged rows start at token 0 and end at their context length (passed as ke).
    const int64_t lo = block_table == nullptr ? __ldg(ks + r) : 0, hi = __ldg(ke + r);
    const int64_t span = hi > lo ? hi - lo : 0;
    const int64_t valid = min(static_cast<int64_t>(num_slots), (span + block - 1) >> block_log2);
    const int64_t b = __ldg(indices + static_cast<size_t>(r) * idx_ld + s);
    const int64_t t0 = b * block + (lo & (block - 1));
    int64_t first = t0, count = min(block, max(hi - t0, int64_t{0}));
    bool ok = s < valid && b >= 0 && t0 >= lo;
    if (ok && block_table != nullptr) {
        const int64_t col = t0 / page_kv;
        const int64_t page = col < max_pages ? __ldg(block_table + static_cast<size_t>(r) * bt_ld + col) : -1;
        first = page * page_kv + (t0 - col * page_kv);
        // A page number too large for its first row to fit in int32 names no page either: the entry would wrap.
        ok = page >= 0 && first + count <= INT32_MAX;
    }
    if (!ok || count == 0) first = 0, count = 0;
    reinterpret_cast<int2*>(meta)[slot_id] = make_int2(static_cast<int32_t>(first), static_cast<int32_t>(count));
}

}  // namespace sm120
