"""How a block-scaled call is planned (pure, bucketed), and the kernels a call of a given shape launches
(precompile(shapes=...))."""

from __future__ import annotations

from functools import lru_cache

from ...core import splitk
from ...core.gemm import DensePlan, ceil_div, fewest_waves, wave_cost
from ...core.rules import dtype_name
from ...services.split_k_reduce import SplitKReduceSpec
from .kernel import (
    DENSE_CONFIGS,
    FP4_SIDE_GRAN,
    GROUPED_CONFIGS,
    GROUPED_SMALL_M,
    SCALE_KINDS,
    TILE_EFFICIENCY,
    BlockScaledGemmConfig,
    spec_for,
)


def m_bucket(m: int) -> int:
    """Every BLOCK_M is 64 or 128: tile counts depend on M only through ceil(M / 64)."""
    return ceil_div(max(m, 1), 64) * 64


@lru_cache(maxsize=4096)
def dense_plan(m: int, n: int, k: int, num_sms: int, kind: str) -> DensePlan:
    """The bf16 family's wave model and split-K rule; callers pass m_bucket(m)."""
    cfg = min(
        DENSE_CONFIGS,
        key=lambda c: wave_cost(c.block_m, c.block_n, m, n, num_sms, TILE_EFFICIENCY[c.block_m * c.block_n]),
    )
    tiles = ceil_div(m, cfg.block_m) * ceil_div(n, cfg.block_n)
    return DensePlan(cfg, splitk.choose_splits(tiles, k, SCALE_KINDS[kind].elems_per_stage, num_sms), tiles)


def grouped_config(m_hint: int) -> BlockScaledGemmConfig:
    return GROUPED_CONFIGS[1] if m_hint <= GROUPED_SMALL_M else GROUPED_CONFIGS[0]


def batched_config(groups: int, m: int, n: int, num_sms: int) -> BlockScaledGemmConfig:
    """The tile that gives `groups` problems of m x n the fewest waves of work (ties: larger tiles)."""
    return fewest_waves(DENSE_CONFIGS, TILE_EFFICIENCY, groups, m, n, num_sms)


# ---------------------------------------------------------------- what a call of a given shape launches


def fp8_einsum_specs(
    expr: str,
    num_sms: int,
    b: int = 1,
    h: int = 1,
    r: int = 1,
    d: int = 1,
    out_dtype=None,
    with_c: bool = False,
    kind: str = "mxfp8",
    **_shape,
) -> list:
    out = "fp32" if out_dtype is not None and dtype_name(out_dtype) == "float32" else "bf16"
    if kind not in ("mxfp8", "fp8_fp32"):
        raise ValueError(f"fp8_einsum's kind is mxfp8 (UE8M0 scales) or fp8_fp32 (exact FP32 scales), got {kind!r}")
    return [spec_for(batched_config(h, b, d, num_sms), kind, (128, 128), out, with_c, "batched")]


def _recipe(kind: str, gran_k: int | None, gran_k_b: int | None) -> tuple[int, int]:
    """Instantiated (A, B) granularities for a scale kind: FP4 sides 1x32 (NVFP4 1x16); FP8 sides gran_k (128)."""
    if kind not in SCALE_KINDS:
        raise ValueError(f"kind must be one of {sorted(SCALE_KINDS)}, got {kind!r}")
    g8 = gran_k or 128
    if kind in ("mxfp4", "nvfp4"):
        g = SCALE_KINDS[kind].grans[0]
        return g, g
    if kind in ("mxfp8", "fp8_fp32"):  # fp8_fp32: FP32 scales per 128 K (the spec refuses others)
        return g8, g8
    return (g8, FP4_SIDE_GRAN) if kind == "e4m3_e2m1" else (FP4_SIDE_GRAN, gran_k_b or 128)


def dense_specs(
    m: int,
    n: int,
    k: int,
    num_sms: int,
    kind: str = "mxfp8",
    gran_k: int | None = None,
    gran_k_b: int | None = None,
    out_dtype=None,
    with_c: bool = False,
) -> list:
    out = "fp32" if out_dtype is not None and dtype_name(out_dtype) == "float32" else "bf16"
    p = dense_plan(m_bucket(m), n, k, num_sms, kind)
    main = spec_for(
        p.config, kind, _recipe(kind, gran_k, gran_k_b), "fp32" if p.splits > 1 else out, with_c and p.splits == 1
    )
    return [main] + ([SplitKReduceSpec(out, with_c)] if p.splits > 1 else [])


def grouped_specs(gemm_type: str):
    def plan_specs(
        num_sms: int,
        m: int | None = None,
        expected_m: int | None = None,
        kind: str = "mxfp8",
        gran_k: int | None = None,
        gran_k_b: int | None = None,
        **_shape,
    ) -> list:
        hint = (m if gemm_type == "m_contiguous" else expected_m) or 1
        return [spec_for(grouped_config(hint), kind, _recipe(kind, gran_k, gran_k_b), "bf16", False, gemm_type)]

    return plan_specs
