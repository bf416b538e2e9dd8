"""Block-scaled FP8 / FP4 GEMM family (impls/sm120_fp8_fp4_gemm_1d1d.cuh): MXFP8 (and DeepSeek's 1x128 /
128x128), MXFP4, NVFP4 and mixed e4m3 x e2m1, dense with split-K or M-grouped. Declarations only (torch-free)."""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from ...core import splitk
from ...core.gemm import DensePlan, WarpTile, ceil_div, fewest_waves, wave_cost
from ...core.limits import MK_ALIGNMENT_FOR_CONTIGUOUS_LAYOUT
from ...core.params import Param, ParamList
from ...core.registry import Family, GateRules, KernelSpec, Op
from ...core.deepgemm import ALIAS, BLOCK_SCALED_KEYWORDS, Entry, M_CONTIGUOUS_KEYWORDS, NOT_PROVIDED, SUPPORTED
from ...core.rules import dtype_name, require_contiguous_m, require_dim, require_dtype, require_tma_rows, show
from ...services.split_k_reduce import SplitKReduceSpec

PARAMS = ParamList(
    Param("tmap_a", "CUtensorMap"), Param("tmap_b", "CUtensorMap"),
    Param("sfa", "const uint32_t*"), Param("sfb", "const uint32_t*"),
    Param("d", "{out}*"), Param("c", "const {out}*"), Param("layout", "const int32_t*"),
    Param("m", "uint32_t"), Param("n", "uint32_t"), Param("k", "uint32_t"), Param("ldd", "uint32_t"),
    Param("ldc", "uint32_t"), Param("num_groups", "uint32_t"), Param("psum_layout", "uint32_t"),
    Param("num_splits", "uint32_t"), Param("split_stride", "uint32_t"),
    Param("sfa_pack_stride", "uint32_t"), Param("sfa_group_stride", "uint32_t"),
    Param("sfb_pack_stride", "uint32_t"), Param("sfb_group_stride", "uint32_t"),
    Param("alpha", "float"),
)

OUT_DTYPES = ("bf16", "fp32")
CXX_OUT = {"bf16": "sm120::bf16", "fp32": "float"}
GEMM_TYPES = {"normal": "kNormal", "m_contiguous": "kMGroupedContiguous", "m_masked": "kMGroupedMasked",
              "batched": "kBatched"}


@dataclass(frozen=True)
class ScaleKind:
    cxx: str                        # sm120::ScaleKind enumerator
    elems_per_stage: int            # K elements per 128-byte stage row
    grans: tuple[int, ...]          # scale granularities along K (of the e4m3 side for mixed kinds)
    row_bytes: tuple[int, int]      # stage row bytes of A and of B
    sass: str                       # the SM120 MMA the gate requires


SCALE_KINDS = {
    # e4m3; 1x128 (DeepSeek) or 1x32 (MXFP8) UE8M0 scales
    "mxfp8": ScaleKind("kMxFp8", 128, (128, 32), (128, 128), "QMMA.SF.16832.F32.E4M3.E4M3.E8"),
    # packed e2m1; 1x32 UE8M0
    "mxfp4": ScaleKind("kMxFp4", 256, (32,), (128, 128), "OMMA.SF.16864.F32.E2M1.E2M1.E8"),
    # packed e2m1; 1x16 UE4M3 (+ per-tensor scales through alpha)
    "nvfp4": ScaleKind("kNvFp4", 256, (16,), (128, 128), "OMMA.SF.16864.F32.E2M1.E2M1.UE4M3.4X"),
    # mixed: e4m3 x packed e2m1 and the reverse; the e2m1 side takes 1x32 UE8M0
    "e4m3_e2m1": ScaleKind("kMxE4M3E2M1", 128, (128, 32), (128, 64), "QMMA.SF.16832.F32.E4M3.E2M1.E8"),
    "e2m1_e4m3": ScaleKind("kMxE2M1E4M3", 128, (128, 32), (64, 128), "QMMA.SF.16832.F32.E2M1.E4M3.E8"),
}
MIXED_KINDS = ("e4m3_e2m1", "e2m1_e4m3")
FP4_SIDE_GRAN = 32


@dataclass(frozen=True)
class BlockScaledGemmConfig(WarpTile):
    """Tile of the block-scaled kernel: every stage row is 128 bytes of K (128 fp8 / 256 fp4 elements)."""

    @property
    def stage_row_bytes(self) -> int:
        return 128

    @property
    def name(self) -> str:
        return f"{self.block_m}x{self.block_n}_s{self.stages}_w{self.warps_m}x{self.warps_n}"


@dataclass(frozen=True)
class BlockScaledGemmSpec(KernelSpec):
    config: BlockScaledGemmConfig
    kind: str = "mxfp8"
    gran_k: int = 128     # K elements per scale of A (and of B unless gran_k_b is given)
    out_dtype: str = "bf16"
    with_c: bool = False
    gemm_type: str = "normal"
    gran_k_b: int = 0     # mixed operands: K elements per scale of B (0: same as A)

    def __post_init__(self) -> None:
        grans = SCALE_KINDS[self.kind].grans if self.kind in SCALE_KINDS else ()
        if self.gran_k not in grans or (self.gran_k_b and (self.kind not in MIXED_KINDS or self.gran_k_b not in grans)):
            raise ValueError(f"unsupported block-scaled kind/granularity {self.kind}/{self.gran_k}")
        if (self.kind == "e4m3_e2m1" and self.grans[1] != FP4_SIDE_GRAN
                or self.kind == "e2m1_e4m3" and self.grans[0] != FP4_SIDE_GRAN):
            raise ValueError(f"the e2m1 operand of {self.kind} takes 1x32 scales, got {self.grans}")

    @property
    def grans(self) -> tuple[int, int]:
        return self.gran_k, self.gran_k_b or self.gran_k

    @property
    def name(self) -> str:
        g = f"g{self.gran_k}" + (f"x{self.gran_k_b}" if self.gran_k_b else "")
        return (f"fp8_fp4_gemm_1d1d_{self.kind}_{g}_{self.config.name}_{self.out_dtype}"
                f"{'_c' if self.with_c else ''}{'' if self.gemm_type == 'normal' else '_' + self.gemm_type}")

    @property
    def row_bytes(self) -> tuple[int, int]:
        """Bytes per stage row of A and of B (one TMA box and swizzle span each)."""
        return SCALE_KINDS[self.kind].row_bytes

    @property
    def threads(self) -> int:
        return self.config.threads

    @property
    def smem_bytes(self) -> int:
        c, (ra, rb) = self.config, self.row_bytes
        return c.stages * (c.block_m * ra + c.block_n * rb) + 2 * c.stages * 8

    def template_args(self) -> list[str]:
        c = self.config
        return [f"sm120::ScaleKind::{SCALE_KINDS[self.kind].cxx}", str(self.grans[0]), str(self.grans[1]),
                str(c.block_m), str(c.block_n), str(c.stages), str(c.warps_m), str(c.warps_n), str(c.group_n),
                CXX_OUT[self.out_dtype], "true" if self.with_c else "false",
                f"sm120::GemmType::{GEMM_TYPES[self.gemm_type]}"]

    def type_subst(self) -> dict[str, str]:
        return {"out": CXX_OUT[self.out_dtype]}


DENSE_CONFIGS = (
    BlockScaledGemmConfig(128, 128, 3, 2, 4),
    BlockScaledGemmConfig(128, 64, 4, 2, 2),
    BlockScaledGemmConfig(64, 128, 4, 1, 4),
    BlockScaledGemmConfig(64, 64, 6, 2, 2),
)
# M-grouped: BLOCK_M divides the contiguous-layout alignment. [large, small M]
GROUPED_CONFIGS = (BlockScaledGemmConfig(128, 128, 3, 2, 4), BlockScaledGemmConfig(64, 128, 4, 1, 4))
GROUPED_SMALL_M = 64
# Mixed e4m3 x e2m1 stages are 24 KiB at 128x128 (one operand packs 128 K elements into 64-byte rows): three of
# them left 27 KiB of the 99 KiB idle, so mixed kinds take a fourth stage (96 KiB) on that tile (issue 13).
MIXED_DEEP_STAGES = 4


def kind_config(cfg: BlockScaledGemmConfig, kind: str) -> BlockScaledGemmConfig:
    """The tile as instantiated for `kind`: the planners pick block sizes, this picks the pipeline depth."""
    if kind in MIXED_KINDS and (cfg.block_m, cfg.block_n) == (128, 128):
        return replace(cfg, stages=MIXED_DEEP_STAGES)
    return cfg
TILE_EFFICIENCY = {128 * 128: 1.0, 128 * 64: 0.82, 64 * 64: 0.65}


def kind_grans() -> list[tuple[str, int, int]]:
    """(kind, A granularity, B granularity for mixed kinds else 0) of every instantiated scale recipe."""
    out = [(kind, g, 0) for kind in ("mxfp8", "mxfp4", "nvfp4") for g in SCALE_KINDS[kind].grans]
    out += [("e4m3_e2m1", g, FP4_SIDE_GRAN) for g in SCALE_KINDS["mxfp8"].grans]
    out += [("e2m1_e4m3", FP4_SIDE_GRAN, g) for g in SCALE_KINDS["mxfp8"].grans]
    return out


def specs() -> list[BlockScaledGemmSpec]:
    S = BlockScaledGemmSpec
    dense = [S(kind_config(cfg, kind), kind, g, out, c, gran_k_b=gb) for kind, g, gb in kind_grans()
             for cfg in DENSE_CONFIGS
             for out in OUT_DTYPES for c in (False, True)]
    grouped = [S(kind_config(cfg, kind), kind, g, "bf16", False, t, gb) for kind, g, gb in kind_grans()
               for cfg in GROUPED_CONFIGS
               for t in ("m_contiguous", "m_masked")]
    # fp8_einsum bhr,hdr->bhd: DeepSeek's recipe (1x128 activations, 128x128 weights as per-row 1x128)
    batched = [S(cfg, "mxfp8", 128, out, c, "batched") for cfg in DENSE_CONFIGS for out in OUT_DTYPES
               for c in (False, True)]
    return dense + grouped + batched


def spec_for(cfg: BlockScaledGemmConfig, kind: str, grans: tuple[int, int], out: str, with_c: bool,
             gemm_type: str = "normal") -> BlockScaledGemmSpec:
    return BlockScaledGemmSpec(kind_config(cfg, kind), kind, grans[0], out, with_c, gemm_type,
                               grans[1] if kind in MIXED_KINDS else 0)


# ---------------------------------------------------------------- heuristics (pure, bucketed)

def m_bucket(m: int) -> int:
    """Every BLOCK_M is 64 or 128: tile counts depend on M only through ceil(M / 64)."""
    return ceil_div(max(m, 1), 64) * 64


@lru_cache(maxsize=4096)
def dense_plan(m: int, n: int, k: int, num_sms: int, kind: str) -> DensePlan:
    """The bf16 family's wave model and split-K rule; callers pass m_bucket(m)."""
    cfg = min(DENSE_CONFIGS, key=lambda c: wave_cost(c.block_m, c.block_n, m, n, num_sms,
                                                     TILE_EFFICIENCY[c.block_m * c.block_n]))
    tiles = ceil_div(m, cfg.block_m) * ceil_div(n, cfg.block_n)
    return DensePlan(cfg, splitk.choose_splits(tiles, k, SCALE_KINDS[kind].elems_per_stage, num_sms), tiles)


def grouped_config(m_hint: int) -> BlockScaledGemmConfig:
    return GROUPED_CONFIGS[1] if m_hint <= GROUPED_SMALL_M else GROUPED_CONFIGS[0]


def batched_config(groups: int, m: int, n: int, num_sms: int) -> BlockScaledGemmConfig:
    """The tile that gives `groups` problems of m x n the fewest waves of work (ties: larger tiles)."""
    return fewest_waves(DENSE_CONFIGS, TILE_EFFICIENCY, groups, m, n, num_sms)


# ---------------------------------------------------------------- shape and dtype rules (API == is_supported)

FP8 = "float8_e4m3fn"
FP4 = ("uint8", "int8", "float4_e2m1fn_x2")   # packed e2m1, two per byte (even K in the low nibble)
_OPERANDS = (FP8, *FP4)


def operand_kind(a_dtype: str | None, b_dtype: str | None) -> tuple[bool | None, bool | None]:
    """(a is packed FP4, b is packed FP4), None where unspecified; TypeError outside FP8 / FP4."""
    for what, dt in (("a", a_dtype), ("b", b_dtype)):
        if dt is not None and dt not in _OPERANDS:
            raise TypeError(f"a and b must be float8_e4m3fn or packed FP4 (uint8 / int8 / float4_e2m1fn_x2), "
                            f"got {what} = {show(dt)}")
    return (None if a_dtype is None else a_dtype in FP4), (None if b_dtype is None else b_dtype in FP4)


def _check_k(k: int | None, fp4: tuple[bool | None, bool | None], lda: int | None = None,
             ldb: int | None = None, m: int | None = None, n: int | None = None) -> None:
    """K-major byte rows: K (FP8) or K/2 (packed FP4) bytes per row, 16-byte TMA rows on both sides."""
    if k is None or k == 0:
        return
    any_fp4 = any(bool(x) for x in fp4)
    if any_fp4 and k % 32:
        raise ValueError(f"K = {k} must be a multiple of 32 with a packed FP4 operand (16-byte TMA rows)")
    for name, is4, ld, rows in (("a", fp4[0], lda, m), ("b", fp4[1], ldb, n)):
        require_tma_rows(name, k // 2 if is4 else k, 1, ld, rows)


def _dtypes(ab_dtype, a_dtype, b_dtype) -> tuple[str | None, str | None]:
    return (a_dtype if a_dtype is not None else ab_dtype), (b_dtype if b_dtype is not None else ab_dtype)


def dense_rule(m: int | None = None, n: int | None = None, k: int | None = None, ab_dtype: str | None = None,
               a_dtype: str | None = None, b_dtype: str | None = None, out_dtype: str | None = None,
               c_dtype: str | None = None, lda: int | None = None, ldb: int | None = None) -> None:
    """k counts elements (packed FP4: two per byte); lda / ldb: row strides in bytes as stored."""
    fp4 = operand_kind(*_dtypes(ab_dtype, a_dtype, b_dtype))
    require_dtype("d", out_dtype, ("bfloat16", "float32"))
    if c_dtype is not None and out_dtype is not None and c_dtype != out_dtype:
        raise TypeError(f"c must have d's dtype {show(out_dtype)}, got {show(c_dtype)}")
    for name, v in (("m", m), ("n", n), ("k", k)):
        if v is not None:
            require_dim(name, v)
    if m == 0 or n == 0:
        return
    _check_k(k, fp4, lda, ldb, m, n)


def _grouped(k, fp4, *others) -> None:
    if k is None or any(x == 0 for x in others):
        return
    if k == 0:
        raise ValueError(f"K = {k} must be positive{' and a multiple of 32 for FP4' if any(fp4) else ''}")
    _check_k(k, fp4)


def m_grouped_contiguous_rule(m: int | None = None, n: int | None = None, k: int | None = None,
                              num_groups: int | None = None, ab_dtype: str | None = None,
                              a_dtype: str | None = None, b_dtype: str | None = None, out_dtype: str | None = None,
                              use_psum_layout: bool = False) -> None:
    fp4 = operand_kind(*_dtypes(ab_dtype, a_dtype, b_dtype))
    require_dtype("d", out_dtype, ("bfloat16",))
    for name, v in (("m", m), ("n", n), ("k", k), ("num_groups", num_groups)):
        if v is not None:
            require_dim(name, v)
    if m is not None and not use_psum_layout:
        require_contiguous_m(m, MK_ALIGNMENT_FOR_CONTIGUOUS_LAYOUT)
    _grouped(k, fp4, m, n, num_groups)


def m_grouped_masked_rule(num_groups: int | None = None, m: int | None = None, n: int | None = None,
                          k: int | None = None, expected_m: int | None = None, ab_dtype: str | None = None,
                          a_dtype: str | None = None, b_dtype: str | None = None,
                          out_dtype: str | None = None) -> None:
    fp4 = operand_kind(*_dtypes(ab_dtype, a_dtype, b_dtype))
    require_dtype("d", out_dtype, ("bfloat16",))
    for name, v in (("num_groups", num_groups), ("m", m), ("n", n), ("k", k)):
        if v is not None:
            require_dim(name, v)
    if expected_m is not None and (not isinstance(expected_m, int) or isinstance(expected_m, bool)
                                   or expected_m < 0):
        raise TypeError(f"expected_m must be a non-negative int, got {expected_m!r}")
    _grouped(k, fp4, num_groups, m, n)


# ---------------------------------------------------------------- what a call of a given shape launches

FP8_EINSUM_EXPRS = ("bhr,hdr->bhd",)
FP8_EINSUM_RECIPE = (1, 128, 128)


def fp8_einsum_rule(expr: str | None = None, b: int | None = None, h: int | None = None, r: int | None = None,
                    d: int | None = None, a_dtype: str | None = None, b_dtype: str | None = None,
                    out_dtype: str | None = None, c_dtype: str | None = None, recipe=None) -> None:
    """fp8_einsum: `bhr,hdr->bhd` with e4m3 x [b,h,r] (1x128 scales) and y [h,d,r] (128x128 scales)."""
    if expr is not None and expr not in FP8_EINSUM_EXPRS:
        raise NotImplementedError(f"fp8_einsum expression {expr!r} is not supported; supported: "
                                  f"{list(FP8_EINSUM_EXPRS)} (DeepGEMM runs its other two on SM100 only)")
    if recipe is not None and tuple(recipe) != FP8_EINSUM_RECIPE:
        raise NotImplementedError(f"fp8_einsum recipe {tuple(recipe)} is not supported; supported: "
                                  f"{FP8_EINSUM_RECIPE}")
    require_dtype("a", a_dtype, ("float8_e4m3fn",))
    require_dtype("b", b_dtype, ("float8_e4m3fn",))
    require_dtype("d", out_dtype, ("bfloat16", "float32"))
    if c_dtype is not None and out_dtype is not None and c_dtype != out_dtype:
        raise TypeError(f"c must have d's dtype {show(out_dtype)}, got {show(c_dtype)}")
    for name, v in (("b", b), ("h", h), ("r", r), ("d", d)):
        if v is not None:
            require_dim(name, v)
    if r:
        require_tma_rows("a and b", r, 1)


def fp8_einsum_specs(expr: str, num_sms: int, b: int = 1, h: int = 1, r: int = 1, d: int = 1, out_dtype=None,
                     with_c: bool = False, **_shape) -> list:
    out = "fp32" if out_dtype is not None and dtype_name(out_dtype) == "float32" else "bf16"
    return [spec_for(batched_config(h, b, d, num_sms), "mxfp8", (128, 128), out, with_c, "batched")]


def _recipe(kind: str, gran_k: int | None, gran_k_b: int | None) -> tuple[int, int]:
    """Instantiated (A, B) granularities for a scale kind: FP4 sides 1x32 (NVFP4 1x16); FP8 sides gran_k (128)."""
    if kind not in SCALE_KINDS:
        raise ValueError(f"kind must be one of {sorted(SCALE_KINDS)}, got {kind!r}")
    g8 = gran_k or 128
    if kind in ("mxfp4", "nvfp4"):
        g = SCALE_KINDS[kind].grans[0]
        return g, g
    if kind == "mxfp8":
        return g8, g8
    return (g8, FP4_SIDE_GRAN) if kind == "e4m3_e2m1" else (FP4_SIDE_GRAN, gran_k_b or 128)


def dense_specs(m: int, n: int, k: int, num_sms: int, kind: str = "mxfp8", gran_k: int | None = None,
                gran_k_b: int | None = None, out_dtype=None, with_c: bool = False) -> list:
    out = "fp32" if out_dtype is not None and dtype_name(out_dtype) == "float32" else "bf16"
    p = dense_plan(m_bucket(m), n, k, num_sms, kind)
    main = spec_for(p.config, kind, _recipe(kind, gran_k, gran_k_b), "fp32" if p.splits > 1 else out,
                    with_c and p.splits == 1)
    return [main] + ([SplitKReduceSpec(out, with_c)] if p.splits > 1 else [])


def grouped_specs(gemm_type: str):
    def plan_specs(num_sms: int, m: int | None = None, expected_m: int | None = None, kind: str = "mxfp8",
                   gran_k: int | None = None, gran_k_b: int | None = None, **_shape) -> list:
        hint = (m if gemm_type == "m_contiguous" else expected_m) or 1
        return [spec_for(grouped_config(hint), kind, _recipe(kind, gran_k, gran_k_b), "bf16", False, gemm_type)]
    return plan_specs


def _gate(spec: BlockScaledGemmSpec) -> GateRules:
    # SM120: the full-rate block-scaled MMA and never an unscaled FP8/FP4 one (half rate on GeForce).
    # sm_90a: the emulation (unscaled e4m3 MMAs, lowered to f16 HMMA), whose spills are reported, not failed.
    return GateRules(required={"sm120": (SCALE_KINDS[spec.kind].sass, "UTMALDG"), "sm90": ("HMMA.16816.F32", "UTMALDG")},
                     forbidden={"sm120": (r"^(QMMA\.16832|OMMA\.16864)",)}, emulation_spills_allowed=True)


FAMILY = Family(
    name="fp8_fp4_gemm_1d1d",
    params=PARAMS,
    specs=specs,
    gate=_gate,
    quick_key=lambda s: (s.config, s.gemm_type, s.kind),
    pdl=True,
    ops=(
        Op("fp8_fp4_gemm_nt", dense_rule,
           "e4m3 a [M,K], b [N,K]; UE8M0 scales 1x128 (b: 128x128 or 1x128) or 1x32 (MXFP8); or packed e2m1 "
           "[M,K/2], [N,K/2] with MXFP4 (UE8M0 1x32) / NVFP4 (UE4M3 1x16) scales; or mixed e4m3 x e2m1",
           "bf16 or fp32",
           "`QMMA.SF` / `OMMA.SF` (block-scaled, full rate); split-K; C may alias D; K % 16 (FP8) or % 32 "
           "(FP4); NVFP4 per-tensor scales via `alpha`; NVFP4 scales on a mixed operand: `NotImplementedError`",
           aliases=("fp8_gemm_nt",),
           signature="fp8_fp4_gemm_nt((a, sfa), (b, sfb), d, c=None, recipe=None, alpha=1.0)",
           plan_specs=dense_specs),
        Op("m_grouped_fp8_fp4_gemm_nt_contiguous", m_grouped_contiguous_rule,
           "FP8, FP4 or mixed; b [G,N,K(/2)], sfb per group", "bf16", "same layout contract as BF16",
           aliases=("m_grouped_fp8_gemm_nt_contiguous",),
           signature="m_grouped_fp8_fp4_gemm_nt_contiguous((a, sfa), (b, sfb), d, grouped_layout, recipe=None, "
                     "use_psum_layout=False, check_layout=None, alpha=1.0)",
           plan_specs=grouped_specs("m_contiguous")),
        Op("m_grouped_fp8_fp4_gemm_nt_masked", m_grouped_masked_rule, "FP8, FP4 or mixed; a [G,M,K(/2)]",
           "bf16 [G,M,N]", "graph-safe with packed int32 scales", aliases=("m_grouped_fp8_gemm_nt_masked",),
           signature="m_grouped_fp8_fp4_gemm_nt_masked((a, sfa), (b, sfb), d, masked_m, expected_m, recipe=None, "
                     "alpha=1.0)", plan_specs=grouped_specs("m_masked")),
        Op("fp8_einsum", fp8_einsum_rule, "e4m3 x [b,h,r] (1x128 scales), y [h,d,r] (128x128 scales)",
           "bf16 or fp32 [b,h,d] (+ c)", "`bhr,hdr->bhd`, recipe (1, 128, 128); one launch over all heads "
           "(3-D TMA maps, `QMMA.SF`); runtime shapes",
           signature="fp8_einsum(expr, (x, sfx), (y, sfy), d, c=None, recipe=(1, 128, 128))",
           plan_specs=fp8_einsum_specs),
    ),
    api_modules=("api", "einsum"),
    sanitizers=("fp8_fp4_gemm",),
    benchmarks=("fp8_fp4_gemm",),
    deepgemm=(
        Entry("fp8_fp4_gemm_nt", SUPPORTED, "fp8_fp4_gemm_nt (FP8, MXFP4, NVFP4, mixed)", BLOCK_SCALED_KEYWORDS),
        Entry("fp8_gemm_nt", ALIAS, "fp8_fp4_gemm_nt"),
        Entry("fp4_gemm_nt", ALIAS, "fp8_fp4_gemm_nt"),
        *(Entry(f"fp8_fp4_gemm_{lay}", NOT_PROVIDED, "the SM120 block-scaled kernel reads K-major operands (NT) only: "
                "pass contiguous transposes to fp8_fp4_gemm_nt") for lay in ("nn", "tn", "tt")),
        *(Entry(f"fp8_gemm_{lay}", ALIAS, f"fp8_fp4_gemm_{lay}") for lay in ("nn", "tn", "tt")),
        Entry("m_grouped_fp8_fp4_gemm_nt_contiguous", SUPPORTED, "m_grouped_fp8_fp4_gemm_nt_contiguous",
              BLOCK_SCALED_KEYWORDS + "; " + M_CONTIGUOUS_KEYWORDS),
        Entry("m_grouped_fp8_gemm_nt_contiguous", ALIAS, "m_grouped_fp8_fp4_gemm_nt_contiguous"),
        Entry("m_grouped_fp4_gemm_nt_contiguous", ALIAS, "m_grouped_fp8_fp4_gemm_nt_contiguous"),
        Entry("m_grouped_fp8_fp4_gemm_nn_contiguous", NOT_PROVIDED, "MN-major block-scaled B is not supported (NT only)"),
        Entry("m_grouped_fp8_gemm_nn_contiguous", ALIAS, "m_grouped_fp8_fp4_gemm_nn_contiguous"),
        Entry("m_grouped_fp8_fp4_gemm_nt_masked", SUPPORTED, "m_grouped_fp8_fp4_gemm_nt_masked", BLOCK_SCALED_KEYWORDS),
        Entry("m_grouped_fp8_gemm_nt_masked", ALIAS, "m_grouped_fp8_fp4_gemm_nt_masked"),
        Entry("m_grouped_fp4_gemm_nt_masked", ALIAS, "m_grouped_fp8_fp4_gemm_nt_masked"),
        Entry("fp8_m_grouped_gemm_nt_masked", ALIAS, "m_grouped_fp8_fp4_gemm_nt_masked"),
        Entry("k_grouped_fp8_gemm_tn_contiguous", NOT_PROVIDED, "no block-scaled K-grouped kernel (BF16 K-grouped exists)"),
        Entry("k_grouped_fp8_gemm_nt_contiguous", NOT_PROVIDED, "no block-scaled K-grouped kernel"),
        Entry("k_grouped_fp4_gemm_nt_contiguous", NOT_PROVIDED, "no block-scaled K-grouped kernel"),
        Entry("fp8_einsum", SUPPORTED, "fp8_einsum: bhr,hdr->bhd with recipe (1, 128, 128) (DeepGEMM's other two "
              "expressions are SM100-only there: NotImplementedError)", "`c` honoured (d's dtype and strides); "
              "unpacked UE8M0 scales (float32 powers of two or float8_e8m0fnu); FP8 output (`d` as (d, sfd), "
              "`use_128x4_sfd_layout`'s subject): NotImplementedError; " + "`epilogue`: Identity/None, Alpha(1); others NotImplementedError"),
    ),
)
