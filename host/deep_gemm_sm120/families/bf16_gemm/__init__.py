"""BF16 GEMM family (impls/sm120_bf16_gemm.cuh): dense NT/NN/TN/TT with swap-AB and split-K, M-grouped
contiguous/masked, K-grouped. Declarations only (torch-free): kernel parameters, configurations and specs, the
plan heuristic, the shape/dtype rules of each op, and the SASS the compile gate demands."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ...core import splitk
from ...core.gemm import DensePlan, WarpTile, ceil_div, fewest_waves, wave_cost
from ...core.limits import MK_ALIGNMENT_FOR_CONTIGUOUS_LAYOUT
from ...core.params import Param, ParamList
from ...core.registry import Family, GateRules, KernelSpec, Op
from ...core.deepgemm import ALIAS, BF16_KEYWORDS, Entry, M_CONTIGUOUS_KEYWORDS, NOT_PROVIDED, SUPPORTED
from ...core.rules import dtype_name, require_contiguous_m, require_dim, require_dtype, require_tma_rows, show
from ...services.split_k_reduce import SplitKReduceSpec

PARAMS = ParamList(
    Param("tmap_a", "CUtensorMap"), Param("tmap_b", "CUtensorMap"),
    Param("d", "{out}*"), Param("c", "const {out}*"), Param("layout", "const int32_t*"),
    Param("aux", "const uint64_t*"),
    Param("m", "uint32_t"), Param("n", "uint32_t"), Param("k", "uint32_t"), Param("ldd", "uint32_t"),
    Param("ldc", "uint32_t"), Param("num_groups", "uint32_t"), Param("psum_layout", "uint32_t"),
    Param("num_splits", "uint32_t"), Param("split_stride", "uint32_t"),
)

OUT_DTYPES = ("bf16", "fp32")
CXX_OUT = {"bf16": "sm120::bf16", "fp32": "float"}
GEMM_TYPES = {"normal": "kNormal", "m_contiguous": "kMGroupedContiguous", "m_masked": "kMGroupedMasked",
              "k_contiguous": "kKGroupedContiguous", "batched": "kBatched", "batch_reduce": "kBatchReduce"}
LAYOUTS = ("nt", "nn", "tn", "tt")   # DeepGEMM naming: a [M,K] "n" or [K,M] "t"; then b [K,N] "n" or [N,K] "t"


@dataclass(frozen=True)
class Bf16GemmConfig(WarpTile):
    block_k: int = 64

    @property
    def stage_row_bytes(self) -> int:
        return self.block_k * 2  # bf16

    @property
    def name(self) -> str:
        return f"{self.block_m}x{self.block_n}x{self.block_k}_s{self.stages}_w{self.warps_m}x{self.warps_n}"


@dataclass(frozen=True)
class Bf16GemmSpec(KernelSpec):
    """One kernel instantiation: what the JIT compiles and the compile gate checks."""
    config: Bf16GemmConfig
    out_dtype: str = "bf16"
    with_c: bool = False
    swap_ab: bool = False
    gemm_type: str = "normal"
    layout: str = "nt"

    @property
    def name(self) -> str:
        return (f"bf16_gemm_nt_{self.config.name}_{self.out_dtype}{'_c' if self.with_c else ''}"
                f"{'_swap' if self.swap_ab else ''}{'' if self.gemm_type == 'normal' else '_' + self.gemm_type}"
                f"{'' if self.layout == 'nt' else '_' + self.layout}")

    @property
    def threads(self) -> int:
        return self.config.threads

    @property
    def smem_bytes(self) -> int:
        if self.gemm_type == "k_contiguous":  # + two 128-byte tensor-map copies for tensormap.replace
            return -(-self.config.smem_bytes // 128) * 128 + 256
        return self.config.smem_bytes

    @property
    def mn_major(self) -> tuple[bool, bool]:
        """(first operand MN-major, second operand MN-major) in kernel order (after swap-AB)."""
        a_mn, b_mn = self.layout[0] == "t", self.layout[1] == "n"
        return (b_mn, a_mn) if self.swap_ab else (a_mn, b_mn)

    def template_args(self) -> list[str]:
        c, b = self.config, lambda x: "true" if x else "false"
        return [str(c.block_m), str(c.block_n), str(c.block_k), str(c.stages), str(c.warps_m), str(c.warps_n),
                str(c.group_n), CXX_OUT[self.out_dtype], b(self.with_c), b(self.swap_ab),
                f"sm120::GemmType::{GEMM_TYPES[self.gemm_type]}", b(self.mn_major[0]), b(self.mn_major[1])]

    def type_subst(self) -> dict[str, str]:
        return {"out": CXX_OUT[self.out_dtype]}


# ---------------------------------------------------------------- configurations (largest tiles first)

DENSE_CONFIGS = (
    # 64x64 warp tiles: fewest ldmatrix per MMA; BLOCK_K 32 (64B swizzle) leaves room for 4 stages
    Bf16GemmConfig(128, 256, 4, 2, 4, block_k=32),
    Bf16GemmConfig(128, 128, 3, 2, 4),
    Bf16GemmConfig(128, 64, 4, 2, 2),
    Bf16GemmConfig(64, 128, 4, 1, 4),
    Bf16GemmConfig(64, 64, 6, 2, 2),
)
# Swap-AB for small M: block_m tiles N (weights), block_n tiles M (tokens).
SWAP_CONFIGS = (Bf16GemmConfig(64, 16, 9, 4, 1), Bf16GemmConfig(128, 32, 4, 4, 1))
SWAP_AB_MAX_M = 32
# M-grouped: BLOCK_M divides the contiguous-layout alignment, so no tile straddles groups. [large, small M]
GROUPED_CONFIGS = (Bf16GemmConfig(128, 128, 3, 2, 4), Bf16GemmConfig(64, 128, 4, 1, 4))
GROUPED_SMALL_M = 64
# NN / TN / TT (an MN-major operand): 64-wide boxes need BLOCK_M/BLOCK_N multiples of 64; these use BLOCK_K 64.
LAYOUT_CONFIGS = tuple(c for c in DENSE_CONFIGS if c.block_k == 64)
# K-grouped (weight gradients): both operands MN-major ("tn"), fp32 D accumulated onto C. [large, small MxN]
# The large tile is the dense one (BLOCK_K 32: [32][64] MN-major boxes, 4 stages): on the H200 it ran DeepSeek-V3
# expert weight gradients 7-11 % faster than 128x128x64 s3 (qualification run 70).
K_GROUPED_CONFIGS = (Bf16GemmConfig(128, 256, 4, 2, 4, block_k=32), Bf16GemmConfig(64, 64, 6, 2, 2))
K_GROUPED_SMALL_MN = 512 * 512
# einsum: per-head batched products (3-D maps, batch = heads) and the batch reduction bmk,bnk->mn.
BATCHED_CONFIGS = LAYOUT_CONFIGS
BATCH_REDUCE_CONFIGS = (Bf16GemmConfig(128, 128, 3, 2, 4), Bf16GemmConfig(64, 64, 6, 2, 2))
EINSUM_EXPRS = {"bmk,bnk->mn": "batch_reduce", "bhr,hdr->bhd": "batched", "bhd,hdr->bhr": "batched"}

# Relative main-loop efficiency per tile area: smaller tiles issue more ldmatrix per MMA. Rough ratios that
# only break ties between wave counts; 128x256 ran ~8% faster than 128x128 per unit of work at 4096^3 and
# 8192^3 on the H200 (benchmarks/bench_bf16_gemm.py --sweep).
TILE_EFFICIENCY = {128 * 256: 1.08, 128 * 128: 1.0, 128 * 64: 0.82, 64 * 64: 0.65}


def specs() -> list[Bf16GemmSpec]:
    """All instantiations reachable from the host API."""
    S = Bf16GemmSpec
    plain = [S(cfg, out, c) for cfg in DENSE_CONFIGS for out in OUT_DTYPES for c in (False, True)]
    swap = [S(cfg, out, c, True) for cfg in SWAP_CONFIGS for out in OUT_DTYPES for c in (False, True)]
    grouped = [S(cfg, "bf16", False, False, t) for cfg in GROUPED_CONFIGS for t in ("m_contiguous", "m_masked")]
    layouts = [S(cfg, out, c, False, "normal", lay) for lay in ("nn", "tn", "tt") for cfg in LAYOUT_CONFIGS
               for out in OUT_DTYPES for c in (False, True)]
    swap_nn = [S(cfg, out, c, True, "normal", "nn") for cfg in SWAP_CONFIGS for out in OUT_DTYPES
               for c in (False, True)]
    k_grouped = [S(cfg, "fp32", c, False, "k_contiguous", "tn") for cfg in K_GROUPED_CONFIGS for c in (False, True)]
    batched = [S(cfg, "bf16", False, False, "batched", lay) for cfg in BATCHED_CONFIGS for lay in ("nt", "nn")]
    batch_reduce = [S(cfg, out, c, False, "batch_reduce") for cfg in BATCH_REDUCE_CONFIGS for out in OUT_DTYPES
                    for c in (False, True)]
    return plain + swap + grouped + layouts + swap_nn + k_grouped + batched + batch_reduce


# ---------------------------------------------------------------- heuristics (pure, bucketed)

def m_bucket(m: int) -> int:
    """The plan depends on M only through this: 16 / 32 (swap-AB widths), else M rounded up to 64 (every
    BLOCK_M divides 128 and is >= 64, so tile counts are unchanged). Plan caches key on it, so a server that
    sees every M from 1 to 8192 holds at most 130 dense plans per (N, K), not 8192."""
    return 16 if m <= 16 else 32 if m <= SWAP_AB_MAX_M else ceil_div(m, 64) * 64


def choose_config(m: int, n: int, num_sms: int, layout: str = "nt") -> Bf16GemmConfig:
    return min(DENSE_CONFIGS if layout == "nt" else LAYOUT_CONFIGS,
               key=lambda c: wave_cost(c.block_m, c.block_n, m, n, num_sms, TILE_EFFICIENCY[c.block_m * c.block_n]))


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


# ---------------------------------------------------------------- shape and dtype rules (API == is_supported)

BF16 = ("bfloat16",)
_OUT_NAMES = ("bfloat16", "float32")


def _common(dtypes: tuple, out_dtype, c_dtype, out_allowed=_OUT_NAMES, **dims) -> None:
    """dtypes: (ab_dtype, a_dtype, b_dtype); a_dtype / b_dtype override ab_dtype for one operand."""
    ab, a, b = dtypes
    require_dtype("a", a if a is not None else ab, BF16)
    require_dtype("b", b if b is not None else ab, BF16)
    require_dtype("d", out_dtype, out_allowed)
    if c_dtype is not None and out_dtype is not None and c_dtype != out_dtype:
        raise TypeError(f"c must have d's dtype {show(out_dtype)}, got {show(c_dtype)}")
    for name, v in dims.items():
        if v is not None:
            require_dim(name, v)


def dense_rule(layout: str):
    a_mn, b_mn = layout[0] == "t", layout[1] == "n"

    def rule(m: int | None = None, n: int | None = None, k: int | None = None, ab_dtype: str | None = None,
             a_dtype: str | None = None, b_dtype: str | None = None, out_dtype: str | None = None,
             c_dtype: str | None = None, lda: int | None = None, ldb: int | None = None) -> None:
        """lda / ldb: row strides (elements) of a and b as stored; None for contiguous."""
        _common((ab_dtype, a_dtype, b_dtype), out_dtype, c_dtype, m=m, n=n, k=k)
        if k == 0 or m == 0 or n == 0:
            return  # nothing is read through TMA
        (a_inner, a_rows), (b_inner, b_rows) = ((m, k) if a_mn else (k, m)), ((n, k) if b_mn else (k, n))
        if a_inner is not None:
            require_tma_rows("a", a_inner, 2, lda, a_rows)
        if b_inner is not None:
            require_tma_rows("b", b_inner, 2, ldb, b_rows)
    return rule


def m_grouped_contiguous_rule(m: int | None = None, n: int | None = None, k: int | None = None,
                              num_groups: int | None = None, ab_dtype: str | None = None,
                              a_dtype: str | None = None, b_dtype: str | None = None, out_dtype: str | None = None,
                              use_psum_layout: bool = False) -> None:
    _common((ab_dtype, a_dtype, b_dtype), out_dtype, None, ("bfloat16",), m=m, n=n, k=k, num_groups=num_groups)
    if m is not None and not use_psum_layout:
        require_contiguous_m(m, MK_ALIGNMENT_FOR_CONTIGUOUS_LAYOUT)
    _grouped_k(k, m, n, num_groups)


def _grouped_k(k, *others) -> None:
    if k is None or any(x == 0 for x in others):
        return
    if k == 0:
        raise ValueError("K must be positive for grouped GEMMs")
    require_tma_rows("a and b", k, 2)


def m_grouped_masked_rule(num_groups: int | None = None, m: int | None = None, n: int | None = None,
                          k: int | None = None, expected_m: int | None = None, ab_dtype: str | None = None,
                          a_dtype: str | None = None, b_dtype: str | None = None,
                          out_dtype: str | None = None) -> None:
    _common((ab_dtype, a_dtype, b_dtype), out_dtype, None, ("bfloat16",), num_groups=num_groups, m=m, n=n, k=k)
    if expected_m is not None and (not isinstance(expected_m, int) or isinstance(expected_m, bool)
                                   or expected_m < 0):
        raise TypeError(f"expected_m must be a non-negative int, got {expected_m!r}")
    _grouped_k(k, num_groups, m, n)


def k_grouped_rule(m: int | None = None, n: int | None = None, k: int | None = None,
                   num_groups: int | None = None, ab_dtype: str | None = None, a_dtype: str | None = None,
                   b_dtype: str | None = None, out_dtype: str | None = None, c_dtype: str | None = None) -> None:
    """k: the total K over all groups (sum of ks)."""
    _common((ab_dtype, a_dtype, b_dtype), out_dtype, c_dtype, ("float32",), m=m, n=n, k=k, num_groups=num_groups)
    if k == 0 or num_groups == 0 or m == 0 or n == 0:
        return
    if m is not None:
        require_tma_rows("a", m, 2, None, k)   # a [sum K, M]: MN-major rows of M
    if n is not None:
        require_tma_rows("b", n, 2, None, k)


def einsum_rule(expr: str | None = None, b: int | None = None, m: int | None = None, n: int | None = None,
                k: int | None = None, h: int | None = None, r: int | None = None, d: int | None = None,
                a_dtype: str | None = None, b_dtype: str | None = None, out_dtype: str | None = None,
                c_dtype: str | None = None, c_is_d: bool | None = None) -> None:
    """DeepGEMM's einsum: `bmk,bnk->mn` (b, m, n, k), `bhr,hdr->bhd` and `bhd,hdr->bhr` (b, h, r, d); runtime
    shapes. Operand strides: every stride but the last a multiple of 16 bytes (the API checks them)."""
    if expr is not None and expr not in EINSUM_EXPRS:
        raise NotImplementedError(f"einsum expression {expr!r} is not supported; supported: {sorted(EINSUM_EXPRS)}")
    require_dtype("a", a_dtype, BF16)
    require_dtype("b", b_dtype, BF16)
    if expr == "bmk,bnk->mn" or expr is None:
        require_dtype("d", out_dtype, _OUT_NAMES)
    else:
        require_dtype("d", out_dtype, BF16)
    for name, v in (("b", b), ("m", m), ("n", n), ("k", k), ("h", h), ("r", r), ("d", d)):
        if v is not None:
            require_dim(name, v)
    if c_dtype is not None:
        if expr is not None and expr != "bmk,bnk->mn":
            raise ValueError(f"einsum {expr!r} takes no c (DeepGEMM's contract)")
        if out_dtype is not None and out_dtype != "float32":
            raise ValueError("c is only taken with an fp32 d (d += a.b); a bf16 d is written fresh")
        if c_dtype != "float32":
            raise TypeError(f"c must be torch.float32 like d, got {show(c_dtype)}")
    if expr == "bmk,bnk->mn" and k:
        require_tma_rows("a and b", k, 2)
    elif expr == "bhr,hdr->bhd" and r:
        require_tma_rows("a and b", r, 2)
    elif expr == "bhd,hdr->bhr":
        if d:
            require_tma_rows("a", d, 2)
        if r:
            require_tma_rows("b", r, 2)


# ---------------------------------------------------------------- what a call of a given shape launches

def _out(out_dtype) -> str:
    return "fp32" if out_dtype is not None and dtype_name(out_dtype) == "float32" else "bf16"


def dense_specs(layout: str):
    def plan_specs(m: int, n: int, k: int, num_sms: int, out_dtype=None, with_c: bool = False) -> list:
        p = dense_plan(m_bucket(m), n, k, num_sms, layout)
        out = _out(out_dtype)
        main = Bf16GemmSpec(p.config, "fp32" if p.splits > 1 else out, with_c and p.splits == 1, p.swap_ab,
                            "normal", layout)
        return [main] + ([SplitKReduceSpec(out, with_c)] if p.splits > 1 else [])
    return plan_specs


def m_grouped_specs(gemm_type: str):
    def plan_specs(num_sms: int, m: int | None = None, expected_m: int | None = None, **_shape) -> list:
        hint = (m if gemm_type == "m_contiguous" else expected_m) or 1
        return [Bf16GemmSpec(grouped_config(hint), "bf16", False, False, gemm_type)]
    return plan_specs


def einsum_specs(expr: str, num_sms: int, b: int = 1, m: int = 1, n: int = 1, k: int = 1, h: int = 1, r: int = 1,
                 d: int = 1, out_dtype=None, with_c: bool = False, **_shape) -> list:
    if EINSUM_EXPRS[expr] == "batch_reduce":
        p = batch_reduce_plan(m_bucket(m), n, batch_k_total(b, k), num_sms)
        out = _out(out_dtype)
        main = Bf16GemmSpec(p.config, "fp32" if p.splits > 1 else out, with_c and p.splits == 1, False, "batch_reduce")
        return [main] + ([SplitKReduceSpec(out, with_c)] if p.splits > 1 else [])
    rows, cols = (b, d) if expr == "bhr,hdr->bhd" else (b, r)
    return [Bf16GemmSpec(batched_config(h, rows, cols, num_sms), "bf16", False, False, "batched",
                         "nt" if expr == "bhr,hdr->bhd" else "nn")]


def k_grouped_specs(m: int, n: int, num_sms: int, with_c: bool = False, **_shape) -> list:
    return [Bf16GemmSpec(k_grouped_config(m, n), "fp32", with_c, False, "k_contiguous", "tn")]


# ---------------------------------------------------------------- the SASS the gate demands

_GATE = GateRules(required={"sm120": ("HMMA.16816.F32.BF16", "UTMALDG"), "sm90": ("HMMA.16816.F32.BF16", "UTMALDG")})

_LAYOUT_TEXT = {"nt": ("a [M,K], b [N,K]", "C may alias D; swap-AB for M <= 32; split-K for few tiles and K >= 2048"),
                "nn": ("a [M,K], b [K,N]", "b read MN-major (TMA + `ldmatrix.trans`); swap-AB for M <= 32"),
                "tn": ("a [K,M], b [K,N]", "M and N multiples of 8 (16-byte TMA rows)"),
                "tt": ("a [K,M], b [N,K]", "M multiple of 8")}

FAMILY = Family(
    name="bf16_gemm",
    kernel="sm120::sm120_bf16_gemm_nt_kernel",
    params=PARAMS,
    specs=specs,
    gate=lambda spec: _GATE,
    quick_key=lambda s: (s.config, s.gemm_type, s.layout, s.swap_ab),
    pdl=True,
    ops=tuple(Op(f"bf16_gemm_{lay}", dense_rule(lay), _LAYOUT_TEXT[lay][0] + " bf16", "bf16 or fp32",
                 _LAYOUT_TEXT[lay][1], signature=f"bf16_gemm_{lay}(a, b, d, c=None)",
                 plan_specs=dense_specs(lay)) for lay in LAYOUTS) + (
        Op("m_grouped_bf16_gemm_nt_contiguous", m_grouped_contiguous_rule, "a [M,K], b [G,N,K] bf16", "bf16",
           "groups start at multiples of 128 rows; -1 padding rows untouched; layout checked unless capturing",
           signature="m_grouped_bf16_gemm_nt_contiguous(a, b, d, grouped_layout, use_psum_layout=False, "
                     "check_layout=None)", plan_specs=m_grouped_specs("m_contiguous")),
        Op("m_grouped_bf16_gemm_nt_masked", m_grouped_masked_rule, "a [G,M,K], b [G,N,K] bf16", "bf16 [G,M,N]",
           "no host sync, no allocation: CUDA-graph safe",
           signature="m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, expected_m)",
           plan_specs=m_grouped_specs("m_masked")),
        Op("k_grouped_bf16_gemm_tn_contiguous", k_grouped_rule, "a [sum K,M], b [sum K,N] bf16", "fp32 [G,M,N] (+C)",
           "one launch; descriptors rebased on device per group; any K_g including 0",
           signature="k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks, c=None)", plan_specs=k_grouped_specs),
        Op("einsum", einsum_rule, "bmk,bnk->mn: a [B,M,K], b [B,N,K]; bhr,hdr->bhd / bhd,hdr->bhr: a [b,h,*], "
           "b [h,d,r] bf16", "bmk: bf16 or fp32 [M,N] (c is d accumulates); bhd / bhr: bf16 [b,h,*]",
           "runtime shapes (3-D TMA maps; no recompilation per shape); batch reduction split over (batch, K) "
           "blocks; per-head products batched over h in one launch",
           signature="einsum(expr, a, b, d, c=None)", plan_specs=einsum_specs),
    ),
    api_modules=("api", "grouped", "einsum"),
    sanitizers=("bf16_gemm", "einsum"),
    benchmarks=("bf16_gemm", "einsum"),
    deepgemm=(
        *(Entry(f"bf16_gemm_{lay}", SUPPORTED, f"bf16_gemm_{lay}", BF16_KEYWORDS) for lay in ("nt", "nn", "tn", "tt")),
        Entry("m_grouped_bf16_gemm_nt_contiguous", SUPPORTED, "m_grouped_bf16_gemm_nt_contiguous",
              M_CONTIGUOUS_KEYWORDS + "; `compiled_dims` accepted; " + "`epilogue`: Identity/None, Alpha(1); others NotImplementedError"),
        Entry("m_grouped_bf16_gemm_nn_contiguous", NOT_PROVIDED, "M-grouped BF16 takes a K-major B ([G, N, K]) only"),
        Entry("m_grouped_bf16_gemm_nt_masked", SUPPORTED, "m_grouped_bf16_gemm_nt_masked",
              "`compiled_dims` accepted; `epilogue`: Identity/None, Alpha(1); others NotImplementedError"),
        Entry("bf16_m_grouped_gemm_nt_masked", ALIAS, "m_grouped_bf16_gemm_nt_masked"),
        Entry("k_grouped_bf16_gemm_tn_contiguous", SUPPORTED, "k_grouped_bf16_gemm_tn_contiguous (DeepGEMM 2.8.1's "
              "order: a, b, d, ks_cpu, grouped_layout, c)", "`ks_cpu` (CPU ints; sgl-deep-gemm's `ks=` by keyword) "
              "required: without it the K split lives only on the device; `use_psum_layout=True`: "
              "NotImplementedError; `compiled_dims` accepted"),
        Entry("einsum", SUPPORTED, "einsum: bmk,bnk->mn, bhr,hdr->bhd, bhd,hdr->bhr (runtime shapes); other "
              "expressions raise NotImplementedError listing these", "`c` honoured for bmk,bnk->mn (fp32 d: c is d "
              "accumulates); `use_cublaslt=True` (keyword only: 2.8.1 has `epilogue` 6th) computes with torch.einsum "
              "(cuBLAS); " + "`epilogue`: Identity/None, Alpha(1); others NotImplementedError"),
    ),
)
