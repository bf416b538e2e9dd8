"""Hardware and layout facts, one home each (the device headers carry their C++ twins; tests pin them equal)."""

from __future__ import annotations

# SM120 per-block shared memory, dynamic + static (99 KiB opt-in). Twin: sm120::kMaxSmemPerBlock in
# device_layer/common/sm120_arch.cuh.
SMEM_LIMIT = 101376

# TMA: global base addresses and every row stride are multiples of 16 bytes.
TMA_ALIGN = 16

# Rows: each group of an M-grouped contiguous layout starts at a multiple of this. Twin:
# sm120::kMKAlignmentForContiguousLayout in device_layer/layout/sm120_grouped_layout.cuh.
MK_ALIGNMENT_FOR_CONTIGUOUS_LAYOUT = 128

# SM counts of the SM120 parts, for planning without a GPU (precompile of a shape list).
SM120_PART_SMS = {"RTX 5090": 170, "RTX PRO 6000 Blackwell": 188}
