"""Hyper-connection pre-norm GEMM (impls/sm120_tf32_hc_prenorm_gemm.cuh): d = a.float() @ b.T on TF32 tensor
cores and sqr_sum = (a.float() ** 2).sum(-1) in the same pass over a, for DeepSeek V4's small N (24) and long K.
Declarations only (torch-free): parameters, specs, the split plan, the rule and the SASS the gate demands."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ...core.gemm import ceil_div
from ...core.limits import SMEM_LIMIT
from ...core.params import Param, ParamList
from ...core.registry import Family, GateRules, KernelSpec, Op
from ...core.deepgemm import Entry, SUPPORTED
from ...core.rules import require_dim, require_dtype, require_tma_rows
from ...services.split_k_reduce import SplitKReduceSpec, warp_per_element

PARAMS = ParamList(
    Param("tmap_a", "CUtensorMap"), Param("tmap_b", "CUtensorMap"),
    Param("d", "float*"), Param("sqr_sum", "float*"),
    Param("m", "uint32_t"), Param("n", "uint32_t"), Param("k", "uint32_t"), Param("ldd", "uint32_t"),
    Param("d_split_stride", "uint32_t"), Param("s_split_stride", "uint32_t"),
)

BLOCK_K = 64                  # the kernel's stage depth and DeepGEMM's split granularity
MATH_WARPS = BLOCK_K // 16    # one k16 step of every stage per warp
BLOCK_M = 64                  # 128-row tiles measured no faster on the H200 and spill at N_pad 32
MAX_N = 32
N_PADS = (8, 16, 24, 32)
MAX_STAGES = 8


def _stage_bytes(block_m: int, n_pad: int) -> int:
    return block_m * 128 + n_pad * 2 * 128   # a: BLOCK_M x 64 bf16; b: n_pad x 64 fp32


def _stages(block_m: int, n_pad: int) -> int:
    return min(MAX_STAGES, (SMEM_LIMIT - 2 * 8 * MAX_STAGES) // _stage_bytes(block_m, n_pad))


@dataclass(frozen=True)
class HcPrenormSpec(KernelSpec):
    n_pad: int = 24
    block_m: int = BLOCK_M

    @property
    def stages(self) -> int:
        return _stages(self.block_m, self.n_pad)

    @property
    def name(self) -> str:
        return f"tf32_hc_prenorm_gemm_m{self.block_m}_n{self.n_pad}_s{self.stages}"

    @property
    def threads(self) -> int:
        return MATH_WARPS * 32 + 32

    @property
    def smem_bytes(self) -> int:
        return self.stages * _stage_bytes(self.block_m, self.n_pad) + 2 * 8 * self.stages

    def template_args(self) -> list[str]:
        return [str(self.block_m), str(self.n_pad), str(self.stages)]


def specs() -> list[HcPrenormSpec]:
    return [HcPrenormSpec(n) for n in N_PADS]


# ---------------------------------------------------------------- plan (pure)

MAX_INTERNAL_SPLITS = 128
MIN_BLOCKS_PER_SPLIT = 4
# Internal K splits aim at this many CTAs per SM: several short waves leave a small tail (two CTAs of ~100 KB
# fit an H200 SM, one an SM120 SM). benchmarks/bench_hc_prenorm.py --ctas-per-sm sweeps it.
CTAS_PER_SM = 4


@dataclass(frozen=True)
class HcPlan:
    spec: HcPrenormSpec
    m_blocks: int
    splits: int                              # grid.y
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
    splits = max(1, min(ceil_div(CTAS_PER_SM * num_sms, m_blocks), k_blocks // MIN_BLOCKS_PER_SPLIT,
                        MAX_INTERNAL_SPLITS))
    if splits == 1:
        return HcPlan(spec, m_blocks, 1)
    return HcPlan(spec, m_blocks, splits, SplitKReduceSpec("fp32", False, warp_per_element(m, n, splits)),
                  SplitKReduceSpec("fp32", False, warp_per_element(1, m, splits)))


# ---------------------------------------------------------------- rule (API == is_supported)

def hc_prenorm_rule(m: int | None = None, n: int | None = None, k: int | None = None, a_dtype: str | None = None,
                    b_dtype: str | None = None, d_dtype: str | None = None, sqr_sum_dtype: str | None = None,
                    num_splits=None, lda: int | None = None, ldb: int | None = None) -> None:
    """a [M, K] bf16, b [N, K] fp32, d and sqr_sum fp32; lda / ldb: row strides in elements (None: contiguous)."""
    require_dtype("a", a_dtype, ("bfloat16",))
    require_dtype("b", b_dtype, ("float32",))
    require_dtype("d", d_dtype, ("float32",))
    require_dtype("sqr_sum", sqr_sum_dtype, ("float32",))
    for name, v in (("m", m), ("n", n), ("k", k)):
        if v is not None:
            require_dim(name, v)
    if num_splits is not None:
        if not isinstance(num_splits, int) or isinstance(num_splits, bool):
            raise TypeError(f"num_splits must be None or an int, got {type(num_splits).__name__}")
        if num_splits < 1:
            raise ValueError(f"num_splits must be >= 1, got {num_splits}")
        if num_splits > 65535:
            raise ValueError(f"num_splits must be <= 65535 (one grid row per split), got {num_splits}")
    if n is not None and not 1 <= n <= MAX_N:
        raise ValueError(f"N must be in [1, {MAX_N}] (hyper-connection streams; DeepGEMM allows at most 32), "
                         f"got {n}")
    if k is not None and k == 0:
        raise ValueError("K must be positive")
    if k is not None and m != 0:
        require_tma_rows("a", k, 2, lda, m)
        require_tma_rows("b", k, 4, ldb, n)


def plan_specs(m: int, n: int, k: int, num_sms: int, num_splits: int | None = None, **_shape) -> list:
    p = plan(m_bucket(m), n, k, num_sms, num_splits)
    return [p.spec] + [r for r in (p.reduce_d, p.reduce_s) if r is not None]


FAMILY = Family(
    name="tf32_hc_prenorm_gemm",
    params=PARAMS,
    specs=specs,
    # TF32 MMAs for a.hi, one BF16 MMA for a.lo; both run natively on sm_90a, so both builds are the same code.
    gate=lambda spec: GateRules(required={
        "sm120": ("HMMA.1688.F32.TF32", "HMMA.16816.F32.BF16", "UTMALDG", "LDSM"),
        "sm90": ("HMMA.1688.F32.TF32", "HMMA.16816.F32.BF16", "UTMALDG", "LDSM")}),
    quick_key=lambda s: (s.n_pad,),
    pdl=True,
    ops=(Op("tf32_hc_prenorm_gemm", hc_prenorm_rule, "a [M,K] bf16, b [N,K] fp32 (N <= 32)",
            "d fp32 [M,N] or [S,M,N]; sqr_sum fp32 [M] or [S,M]",
            "one pass over a; b = tf32 hi + bf16 lo (fp64-grade d); num_splits=S writes DeepGEMM's per-split "
            "partial sums, None reduces in a fixed order",
            signature="tf32_hc_prenorm_gemm(a, b, d, sqr_sum, num_splits=None)", plan_specs=plan_specs),),
    sanitizers=("tf32_hc_prenorm_gemm",),
    benchmarks=("hc_prenorm",),
    deepgemm=(
        Entry("tf32_hc_prenorm_gemm", SUPPORTED, "tf32_hc_prenorm_gemm", "`num_splits` honoured (DeepGEMM's split of "
              "64-wide K blocks); N up to 32 (any, not only multiples of 8); K a multiple of 8 (not only of 64)"),
    ),
)
