"""How a pre-norm call is split (pure, bucketed): M blocks, internal K splits and their fixed-order reduction,
and the kernels a call of a given shape launches."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ...core.gemm import ceil_div
from ...services.split_k_reduce import SplitKReduceSpec, warp_per_element
from .kernel import BLOCK_K, BLOCK_M, HcPrenormSpec

MAX_INTERNAL_SPLITS = 128
MIN_BLOCKS_PER_SPLIT = 4
# Internal K splits aim at this many CTAs per SM: several short waves leave a small tail (two CTAs of ~100 KB
# fit an H200 SM, one an SM120 SM). benchmarks/bench_hc_prenorm.py --ctas-per-sm sweeps it.
CTAS_PER_SM = 4


@dataclass(frozen=True)
class HcPlan:
    spec: HcPrenormSpec
    m_blocks: int
    splits: int  # grid.y
    reduce_d: SplitKReduceSpec | None = None  # num_splits=None with internal splits: d's slices, added in order
    reduce_s: SplitKReduceSpec | None = None  # and sqr_sum's


def m_bucket(m: int) -> int:
    """The plan depends on M only through its 64-row block count."""
    return ceil_div(max(m, 1), BLOCK_M) * BLOCK_M


@lru_cache(maxsize=4096)
def plan(m: int, n: int, k: int, num_sms: int, num_splits: int | None) -> HcPlan:
    """Callers pass m_bucket(m). With num_splits the grid is (M blocks, num_splits) and each split writes its
    own slice. Without, too few M blocks to fill the GPU get K splits of their own (at least 4 K blocks each)
    whose slices the split-K reduce adds in a fixed order, so d stays deterministic."""
    spec = HcPrenormSpec(ceil_div(n, 8) * 8)
    m_blocks = ceil_div(m, BLOCK_M)
    if num_splits is not None:
        return HcPlan(spec, m_blocks, num_splits)
    k_blocks = ceil_div(k, BLOCK_K)
    splits = max(
        1, min(ceil_div(CTAS_PER_SM * num_sms, m_blocks), k_blocks // MIN_BLOCKS_PER_SPLIT, MAX_INTERNAL_SPLITS)
    )
    if splits == 1:
        return HcPlan(spec, m_blocks, 1)
    return HcPlan(
        spec,
        m_blocks,
        splits,
        SplitKReduceSpec("fp32", False, warp_per_element(m, n, splits)),
        SplitKReduceSpec("fp32", False, warp_per_element(1, m, splits)),
    )


def plan_specs(m: int, n: int, k: int, num_sms: int, num_splits: int | None = None, **_shape) -> list:
    p = plan(m_bucket(m), n, k, num_sms, num_splits)
    return [p.spec] + [r for r in (p.reduce_d, p.reduce_s) if r is not None]
