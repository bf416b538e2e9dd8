"""The block-scaled GEMM kernel (impls/sm120_fp8_fp4_gemm_1d1d.cuh): parameters, scale kinds, tiles, the
instantiations the API can launch, and the SASS the compile gate demands of them."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ...core import encoding as enc
from ...core.gemm import CXX_OUT, GEMM_TYPES, OUT_DTYPES, WarpTile
from ...core.params import Param, ParamList
from ...core.registry import GateRules, KernelSpec

PARAMS = ParamList(
    Param("tmap_a", "CUtensorMap"),
    Param("tmap_b", "CUtensorMap"),
    Param("sfa", "const uint32_t*"),
    Param("sfb", "const uint32_t*"),
    Param("d", "{out}*"),
    Param("c", "const {out}*"),
    Param("layout", "const int32_t*"),
    Param("m", "uint32_t"),
    Param("n", "uint32_t"),
    Param("k", "uint32_t"),
    Param("ldd", "uint32_t"),
    Param("ldc", "uint32_t"),
    Param("num_groups", "uint32_t"),
    Param("psum_layout", "uint32_t"),
    Param("num_splits", "uint32_t"),
    Param("split_stride", "uint32_t"),
    Param("sfa_pack_stride", "uint32_t"),
    Param("sfa_group_stride", "uint32_t"),
    Param("sfb_pack_stride", "uint32_t"),
    Param("sfb_group_stride", "uint32_t"),
    Param("alpha", "float"),
)


@dataclass(frozen=True)
class ScaleKind:
    cxx: str  # sm120::ScaleKind enumerator
    elems_per_stage: int  # K elements per 128-byte stage row
    grans: tuple[int, ...]  # scale granularities along K (of the e4m3 side for mixed kinds)
    row_bytes: tuple[int, int]  # stage row bytes of A and of B
    sass: str  # the SM120 MMA the gate requires


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
    # e4m3 with FP32 scales per 128 K (any value): unit-scale QMMA.SF per K block, promoted in FP32
    "fp8_fp32": ScaleKind("kFp8Fp32", 128, (128,), (128, 128), "QMMA.SF.16832.F32.E4M3.E4M3.E8"),
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
    gran_k: int = 128  # K elements per scale of A (and of B unless gran_k_b is given)
    out_dtype: str = "bf16"
    with_c: bool = False
    gemm_type: str = "normal"
    gran_k_b: int = 0  # mixed operands: K elements per scale of B (0: same as A)
    encoding: str = enc.SELECTORS  # how scales reach the MMA (core/encoding.py)

    def __post_init__(self) -> None:
        grans = SCALE_KINDS[self.kind].grans if self.kind in SCALE_KINDS else ()
        if self.gran_k not in grans or (self.gran_k_b and (self.kind not in MIXED_KINDS or self.gran_k_b not in grans)):
            raise ValueError(f"unsupported block-scaled kind/granularity {self.kind}/{self.gran_k}")
        if (
            self.kind == "e4m3_e2m1"
            and self.grans[1] != FP4_SIDE_GRAN
            or self.kind == "e2m1_e4m3"
            and self.grans[0] != FP4_SIDE_GRAN
        ):
            raise ValueError(f"the e2m1 operand of {self.kind} takes 1x32 scales, got {self.grans}")
        enc.check(self)
        super().__post_init__()

    @property
    def uses_selectors(self) -> bool:
        """Per-tile scales inside the MMA (FP32 scales run unit-scale MMAs at selector 0 and promote outside)."""
        return self.kind != "fp8_fp32"

    @property
    def scale_kind(self) -> str:
        """The atom kind whose self-test verdict picks this kernel's encoding (scale_encoding.py)."""
        return self.kind

    @property
    def grans(self) -> tuple[int, int]:
        return self.gran_k, self.gran_k_b or self.gran_k

    def kernel_name(self) -> str:
        g = f"g{self.gran_k}" + (f"x{self.gran_k_b}" if self.gran_k_b else "")
        return (
            f"fp8_fp4_gemm_1d1d_{self.kind}_{g}_{self.config.name}_{self.out_dtype}"
            f"{'_c' if self.with_c else ''}{'' if self.gemm_type == 'normal' else '_' + self.gemm_type}"
            f"{enc.NAME_SUFFIX[self.encoding]}"
        )

    @property
    def row_bytes(self) -> tuple[int, int]:
        """Bytes per stage row of A and of B (one TMA box and swizzle span each)."""
        return SCALE_KINDS[self.kind].row_bytes

    def shared_bytes(self) -> int:
        c, (ra, rb) = self.config, self.row_bytes
        return c.stages * (c.block_m * ra + c.block_n * rb) + 2 * c.stages * 8

    def template_args(self) -> list[str]:
        c = self.config
        return [
            f"sm120::ScaleKind::{SCALE_KINDS[self.kind].cxx}",
            str(self.grans[0]),
            str(self.grans[1]),
            str(c.block_m),
            str(c.block_n),
            str(c.stages),
            str(c.warps_m),
            str(c.warps_n),
            str(c.group_n),
            CXX_OUT[self.out_dtype],
            "true" if self.with_c else "false",
            f"sm120::GemmType::{GEMM_TYPES[self.gemm_type]}",
            *enc.template_tail(self.encoding),
        ]

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
    out = [(kind, g, 0) for kind in ("mxfp8", "mxfp4", "nvfp4", "fp8_fp32") for g in SCALE_KINDS[kind].grans]
    out += [("e4m3_e2m1", g, FP4_SIDE_GRAN) for g in SCALE_KINDS["mxfp8"].grans]
    out += [("e2m1_e4m3", FP4_SIDE_GRAN, g) for g in SCALE_KINDS["mxfp8"].grans]
    return out


def specs() -> list[BlockScaledGemmSpec]:
    S = BlockScaledGemmSpec
    dense = [
        S(kind_config(cfg, kind), kind, g, out, c, gran_k_b=gb)
        for kind, g, gb in kind_grans()
        for cfg in DENSE_CONFIGS
        for out in OUT_DTYPES
        for c in (False, True)
    ]
    grouped = [
        S(kind_config(cfg, kind), kind, g, "bf16", False, t, gb)
        for kind, g, gb in kind_grans()
        for cfg in GROUPED_CONFIGS
        for t in ("m_contiguous", "m_masked")
    ]
    # fp8_einsum bhr,hdr->bhd: DeepSeek's recipe (1x128 activations, 128x128 weights as per-row 1x128), with
    # UE8M0 or exact FP32 scales
    batched = [
        S(cfg, kind, 128, out, c, "batched")
        for kind in ("mxfp8", "fp8_fp32")
        for cfg in DENSE_CONFIGS
        for out in OUT_DTYPES
        for c in (False, True)
    ]
    return enc.variants(dense + grouped + batched)


def spec_for(
    cfg: BlockScaledGemmConfig, kind: str, grans: tuple[int, int], out: str, with_c: bool, gemm_type: str = "normal"
) -> BlockScaledGemmSpec:
    return BlockScaledGemmSpec(
        kind_config(cfg, kind), kind, grans[0], out, with_c, gemm_type, grans[1] if kind in MIXED_KINDS else 0
    )


def gate(spec: BlockScaledGemmSpec) -> GateRules:
    # SM120: the full-rate block-scaled MMA and never an unscaled FP8/FP4 one (half rate on GeForce).
    # sm_90a: the emulation (unscaled e4m3 MMAs, lowered to f16 HMMA), whose spills are reported, not failed.
    return GateRules(
        required={"sm120": (SCALE_KINDS[spec.kind].sass, "UTMALDG"), "sm90": ("HMMA.16816.F32", "UTMALDG")},
        forbidden={"sm120": (r"^(QMMA\.16832|OMMA\.16864)",)},
        emulation_spills_allowed=True,
    )
