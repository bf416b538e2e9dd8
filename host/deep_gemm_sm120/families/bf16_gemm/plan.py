"""How a BF16 call is planned (pure, bucketed): the tile, swap-AB and split-K of a dense GEMM, the tiles of the
grouped and batched forms, and the kernels a call of a given shape launches (precompile(shapes=...))."""

from __future__ import annotations

from functools import lru_cache

from ...core import splitk
from ...core.gemm import DensePlan, ceil_div, fewest_waves, wave_cost
from ...core.rules import dtype_name
from ...services.split_k_reduce import SplitKReduceSpec
from .kernel import (
    BATCH_REDUCE_CONFIGS,
    BATCHED_CONFIGS,
    DENSE_CONFIGS,
    GROUPED_CONFIGS,
    GROUPED_SMALL_M,
    K_GROUPED_CONFIGS,
    K_GROUPED_SMALL_MN,
    LAYOUT_CONFIGS,
    SWAP_AB_MAX_M,
    SWAP_CONFIGS,
    TILE_EFFICIENCY,
    Bf16GemmConfig,
    Bf16GemmSpec,
)
from .rules import EINSUM_EXPRS


def m_bucket(m: int) -> int:
    """The plan depends on M only through this: 16 / 32 (swap-AB widths), else M rounded up to 64 (every
    BLOCK_M divides 128 and is >= 64, so tile counts are unchanged). Plan caches key on it, so a server that
    sees every M from 1 to 8192 holds at most 130 dense plans per (N, K), not 8192."""
    return 16 if m <= 16 else 32 if m <= SWAP_AB_MAX_M else ceil_div(m, 64) * 64


def choose_config(m: int, n: int, num_sms: int, layout: str = "nt") -> Bf16GemmConfig:
    return min(
        DENSE_CONFIGS if layout == "nt" else LAYOUT_CONFIGS,
        key=lambda c: wave_cost(c.block_m, c.block_n, m, n, num_sms, TILE_EFFICIENCY[c.block_m * c.block_n]),
    )


@lru_cache(maxsize=4096)
def dense_plan(m: int, n: int, k: int, num_sms: int, layout: str = "nt") -> DensePlan:
    """Config, swap-AB and split-K of a dense GEMM. Decode-sized M (<= 32) swaps A and B so the weights fill
    the wide tile side (only when A is K-major: an MN-major A cannot be fetched in 16/32-wide boxes).
    Callers pass m_bucket(m); the result is the same for every M of a bucket (tests/test_registry_cpu.py)."""
    if m <= SWAP_AB_MAX_M and layout[0] == "n":
        cfg = min((c for c in SWAP_CONFIGS if c.block_n >= m), key=lambda c: c.block_n)
        km, kn, swap = n, m, True
    else:
        cfg, km, kn, swap = choose_config(m, n, num_sms, layout), m, n, False
    tiles = ceil_div(km, cfg.block_m) * ceil_div(kn, cfg.block_n)
    return DensePlan(cfg, splitk.choose_splits(tiles, k, cfg.block_k, num_sms), tiles, swap)


def grouped_config(m_hint: int) -> Bf16GemmConfig:
    """M-grouped tile: the narrow one when groups are small (contiguous: all rows; masked: expected_m)."""
    return GROUPED_CONFIGS[1] if m_hint <= GROUPED_SMALL_M else GROUPED_CONFIGS[0]


def k_grouped_config(m: int, n: int) -> Bf16GemmConfig:
    return K_GROUPED_CONFIGS[1] if m * n <= K_GROUPED_SMALL_MN else K_GROUPED_CONFIGS[0]


def batched_config(groups: int, m: int, n: int, num_sms: int) -> Bf16GemmConfig:
    """The tile that gives `groups` problems of m x n the fewest waves of work (ties: larger tiles)."""
    return fewest_waves(BATCHED_CONFIGS, TILE_EFFICIENCY, groups, m, n, num_sms)


def batch_k_total(batches: int, k: int) -> int:
    """The reduction length the batch-reduce kernel walks: every batch's K rounded up to whole 64-wide blocks."""
    return batches * ceil_div(k, 64) * 64


@lru_cache(maxsize=4096)
def batch_reduce_plan(m: int, n: int, k_total: int, num_sms: int) -> DensePlan:
    """bmk,bnk->mn: an M x N output over a long (batch x K) reduction, so split-K carries the parallelism;
    the small tile when the large one leaves most SMs idle. Callers pass m_bucket(m)."""
    cfg = BATCH_REDUCE_CONFIGS[0]
    if ceil_div(m, cfg.block_m) * ceil_div(n, cfg.block_n) * splitk.MAX_SPLITS < num_sms:
        cfg = BATCH_REDUCE_CONFIGS[1]
    tiles = ceil_div(m, cfg.block_m) * ceil_div(n, cfg.block_n)
    return DensePlan(cfg, splitk.choose_splits(tiles, k_total, cfg.block_k, num_sms), tiles)


# ---------------------------------------------------------------- what a call of a given shape launches


def _out(out_dtype) -> str:
    return "fp32" if out_dtype is not None and dtype_name(out_dtype) == "float32" else "bf16"


def dense_specs(layout: str):
    def plan_specs(m: int, n: int, k: int, num_sms: int, out_dtype=None, with_c: bool = False) -> list:
        p = dense_plan(m_bucket(m), n, k, num_sms, layout)
        out = _out(out_dtype)
        main = Bf16GemmSpec(
            p.config, "fp32" if p.splits > 1 else out, with_c and p.splits == 1, p.swap_ab, "normal", layout
        )
        return [main] + ([SplitKReduceSpec(out, with_c)] if p.splits > 1 else [])

    return plan_specs


def m_grouped_specs(gemm_type: str):
    def plan_specs(num_sms: int, m: int | None = None, expected_m: int | None = None, **_shape) -> list:
        hint = (m if gemm_type == "m_contiguous" else expected_m) or 1
        return [Bf16GemmSpec(grouped_config(hint), "bf16", False, False, gemm_type)]

    return plan_specs


def einsum_specs(
    expr: str,
    num_sms: int,
    b: int = 1,
    m: int = 1,
    n: int = 1,
    k: int = 1,
    h: int = 1,
    r: int = 1,
    d: int = 1,
    out_dtype=None,
    with_c: bool = False,
    **_shape,
) -> list:
    if EINSUM_EXPRS[expr] == "batch_reduce":
        p = batch_reduce_plan(m_bucket(m), n, batch_k_total(b, k), num_sms)
        out = _out(out_dtype)
        main = Bf16GemmSpec(p.config, "fp32" if p.splits > 1 else out, with_c and p.splits == 1, False, "batch_reduce")
        return [main] + ([SplitKReduceSpec(out, with_c)] if p.splits > 1 else [])
    rows, cols = (b, d) if expr == "bhr,hdr->bhd" else (b, r)
    return [
        Bf16GemmSpec(
            batched_config(h, rows, cols, num_sms),
            "bf16",
            False,
            False,
            "batched",
            "nt" if expr == "bhr,hdr->bhd" else "nn",
        )
    ]


def k_grouped_specs(m: int, n: int, num_sms: int, with_c: bool = False, **_shape) -> list:
    return [Bf16GemmSpec(k_grouped_config(m, n), "fp32", with_c, False, "k_contiguous", "tn")]
