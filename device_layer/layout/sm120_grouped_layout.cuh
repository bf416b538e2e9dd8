#pragma once
// Grouped-GEMM layout contract shared by the host API and the kernels.
//
// M-grouped contiguous: A's rows are sorted by group; every group starts at a multiple of
// kMKAlignmentForContiguousLayout rows. The layout is either
//   - per row: int32 group id for each row of A (-1 marks padding rows, which are never written), or
//   - psum:    int32 end row (exclusive) of each group; group g owns rows
//              [align_up(end[g-1], kMKAlignmentForContiguousLayout), end[g]) and the gap before is padding.
// M-grouped masked: A is [G, M, K]; masked_m[g] <= M rows of group g are computed, the rest left untouched.

#include "../common/sm120_arch.cuh"

namespace sm120 {

constexpr uint32_t kMKAlignmentForContiguousLayout = 128;

}  // namespace sm120
