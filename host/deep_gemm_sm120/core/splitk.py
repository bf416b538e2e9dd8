"""The split-K plan shared by the GEMM families (pure): how many K slices a launch with few output tiles gets.
Slices write fp32 partial sums into a workspace that the split_k_reduce family adds in a fixed order, so
results stay bitwise deterministic (host side: services/split_k_reduce/launch.py)."""

from __future__ import annotations

from ..core.arith import ceil_div

MAX_SPLITS = 16
MIN_K = 2048  # shorter reductions never split
MIN_K_BLOCKS_PER_SPLIT = 8
enabled = True  # benchmarks switch it off to measure the gain (then clear the plan caches)


def choose_splits(tiles: int, k: int, block_k: int, num_sms: int) -> int:
    """Split K when the output has too few tiles to fill the GPU (2 * tiles <= SMs) and K is long: at most
    num_sms // tiles slices of at least 8 K blocks each, rebalanced so no slice is empty."""
    k_blocks = ceil_div(k, block_k)
    if not enabled or k < MIN_K or tiles * 2 > num_sms:
        return 1
    splits = min(num_sms // tiles, k_blocks // MIN_K_BLOCKS_PER_SPLIT, MAX_SPLITS)
    if splits < 2:
        return 1
    per = ceil_div(k_blocks, splits)
    return ceil_div(k_blocks, per)
