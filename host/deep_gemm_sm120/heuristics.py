"""Block-size choice from shape and SM count (memoized: a repeated shape costs one dict lookup)."""
from __future__ import annotations

from functools import lru_cache

from .configs import (BF16_CONFIGS, BF16_LAYOUT_CONFIGS, BF16_SWAP_CONFIGS, BLOCK_SCALED_CONFIGS, SCALE_KINDS,
                      SWAP_AB_MAX_M, BlockScaledGemmConfig, Bf16GemmConfig)

# Relative main-loop efficiency of each tile area: smaller tiles issue more ldmatrix per MMA and
# reload operands more often. Rough ratios; they only break ties between wave counts.
# Measured on an H200 via the sm_90 path (benchmarks/bench_bf16_gemm.py --sweep): 128x256 ran ~8% faster
# than 128x128 per unit of work at 4096^3 and 8192^3.
_TILE_EFFICIENCY = {128 * 256: 1.08, 128 * 128: 1.0, 128 * 64: 0.82, 64 * 64: 0.65}


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@lru_cache(maxsize=8192)
def choose_bf16_config(m: int, n: int, k: int, num_sms: int, layout: str = "nt") -> Bf16GemmConfig:
    """Minimize (waves x tile work / efficiency): the critical path of a persistent launch."""
    best, best_cost = None, None
    for cfg in (BF16_CONFIGS if layout == "nt" else BF16_LAYOUT_CONFIGS):
        tiles = _ceil_div(m, cfg.block_m) * _ceil_div(n, cfg.block_n)
        waves = _ceil_div(tiles, num_sms)
        cost = waves * cfg.block_m * cfg.block_n / _TILE_EFFICIENCY[cfg.block_m * cfg.block_n]
        if best_cost is None or cost < best_cost:
            best, best_cost = cfg, cost
    assert best is not None
    return best


SPLIT_K_ENABLED = True  # benchmarks turn it off to measure the gain (clear the plan caches after changing it)
MAX_SPLITS = 16


def choose_splits(tiles: int, k: int, block_k: int, num_sms: int) -> int:
    """Split K when the output has too few tiles to fill the GPU and K is long (>= 2048): at most
    num_sms // tiles slices, each at least 8 K blocks; rebalanced so no slice is empty."""
    k_blocks = -(-k // block_k)
    if not SPLIT_K_ENABLED or k < 2048 or tiles * 2 > num_sms:
        return 1
    splits = min(num_sms // tiles, k_blocks // 8, MAX_SPLITS)
    if splits < 2:
        return 1
    per = -(-k_blocks // splits)
    return -(-k_blocks // per)


def choose_bf16_split_plan(m: int, n: int, k: int, num_sms: int, layout: str = "nt"):
    """(config, swap_ab, splits) for a dense GEMM."""
    cfg, swap = choose_bf16_plan(m, n, k, num_sms, layout)
    km, kn = (n, m) if swap else (m, n)
    tiles = _ceil_div(km, cfg.block_m) * _ceil_div(kn, cfg.block_n)
    return cfg, swap, choose_splits(tiles, k, cfg.block_k, num_sms)


@lru_cache(maxsize=8192)
def choose_bf16_plan(m: int, n: int, k: int, num_sms: int, layout: str = "nt") -> tuple[Bf16GemmConfig, bool]:
    """(config, swap_ab). Decode-sized M (<= 32) swaps A and B so the weights fill the wide tile side;
    the token side then needs only 16 or 32 columns, and the smaller stages allow a deeper pipeline.
    Only when A is K-major (nt, nn): an MN-major A cannot be fetched in 16/32-wide boxes."""
    if m <= SWAP_AB_MAX_M and layout[0] == "n":
        narrow = [c for c in BF16_SWAP_CONFIGS if c.block_n >= m]
        cfg = min(narrow, key=lambda c: c.block_n)
        return cfg, True
    return choose_bf16_config(m, n, k, num_sms, layout), False


@lru_cache(maxsize=8192)
def choose_block_scaled_plan(m: int, n: int, k: int, num_sms: int, kind: str) -> tuple[BlockScaledGemmConfig, int]:
    """(config, splits) for a dense block-scaled GEMM: the same wave model and split-K rule as BF16."""
    best, best_cost = None, None
    for cfg in BLOCK_SCALED_CONFIGS:
        tiles = _ceil_div(m, cfg.block_m) * _ceil_div(n, cfg.block_n)
        cost = _ceil_div(tiles, num_sms) * cfg.block_m * cfg.block_n / _TILE_EFFICIENCY[cfg.block_m * cfg.block_n]
        if best_cost is None or cost < best_cost:
            best, best_cost = cfg, cost
    assert best is not None
    tiles = _ceil_div(m, best.block_m) * _ceil_div(n, best.block_n)
    return best, choose_splits(tiles, k, SCALE_KINDS[kind][1], num_sms)
