"""Kernel configurations and their generated sources. Pure Python (no torch): the compile gate
(tools/compile_gate.py) loads this file directly, so the gate and the host heuristics share one list."""
from __future__ import annotations

from dataclasses import dataclass

SMEM_LIMIT = 101376  # SM120 per-block shared memory (bytes); also enforced by static_assert in the headers
OUT_DTYPES = ("bf16", "fp32")
GEMM_TYPES = {"normal": "kNormal", "m_contiguous": "kMGroupedContiguous", "m_masked": "kMGroupedMasked",
              "k_contiguous": "kKGroupedContiguous"}
MK_ALIGNMENT_FOR_CONTIGUOUS_LAYOUT = 128  # mirrors layout/sm120_grouped_layout.cuh (a test keeps them equal)
_CXX_OUT = {"bf16": "sm120::bf16", "fp32": "float"}


@dataclass(frozen=True)
class Bf16GemmConfig:
    block_m: int
    block_n: int
    stages: int
    warps_m: int
    warps_n: int
    group_n: int = 16
    block_k: int = 64

    @property
    def math_warps(self) -> int:
        return self.warps_m * self.warps_n

    @property
    def threads(self) -> int:
        return self.math_warps * 32 + 128

    @property
    def smem_bytes(self) -> int:
        return self.stages * (self.block_m + self.block_n) * self.block_k * 2 + 2 * self.stages * 8

    @property
    def name(self) -> str:
        return f"{self.block_m}x{self.block_n}x{self.block_k}_s{self.stages}_w{self.warps_m}x{self.warps_n}"


@dataclass(frozen=True)
class Bf16GemmSpec:
    """One kernel instantiation: what the JIT compiles and the compile gate checks."""
    config: Bf16GemmConfig
    out_dtype: str = "bf16"
    with_c: bool = False
    swap_ab: bool = False
    gemm_type: str = "normal"
    layout: str = "nt"  # DeepGEMM naming: a [M,K] "n" or [K,M] "t"; then b [K,N] "n" or [N,K] "t"

    family = "bf16_gemm_nt"
    header = "impls/sm120_bf16_gemm.cuh"

    @property
    def name(self) -> str:
        return (f"{self.family}_{self.config.name}_{self.out_dtype}{'_c' if self.with_c else ''}"
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

    def source(self) -> str:
        c = self.config
        out = _CXX_OUT[self.out_dtype]
        return (
            f'#include "{self.header}"\n'
            "// One instantiation per translation unit; the runtime finds it as the module's only kernel.\n"
            "template __global__ void sm120::sm120_bf16_gemm_nt_kernel<"
            f"{c.block_m}, {c.block_n}, {c.block_k}, {c.stages}, {c.warps_m}, {c.warps_n}, {c.group_n}, {out}, "
            f"{'true' if self.with_c else 'false'}, {'true' if self.swap_ab else 'false'}, "
            f"sm120::GemmType::{GEMM_TYPES[self.gemm_type]}, {str(self.mn_major[0]).lower()}, "
            f"{str(self.mn_major[1]).lower()}>(\n"
            "    const __grid_constant__ CUtensorMap, const __grid_constant__ CUtensorMap, "
            f"{out}*, const {out}*, const int32_t*, const uint64_t*, uint32_t, uint32_t, uint32_t, uint32_t, "
            "uint32_t, uint32_t, uint32_t, uint32_t, uint32_t);\n"
        )


@dataclass(frozen=True)
class SplitKReduceSpec:
    """The split-K reduction kernel: fp32 slices -> D (+ C), in a fixed order."""
    out_dtype: str = "bf16"
    with_c: bool = False

    family = "split_k_reduce"
    header = "impls/sm120_split_k_reduce.cuh"
    threads = 256
    smem_bytes = 0

    @property
    def name(self) -> str:
        return f"{self.family}_{self.out_dtype}{'_c' if self.with_c else ''}"

    def source(self) -> str:
        out = _CXX_OUT[self.out_dtype]
        return (f'#include "{self.header}"\n'
                f"template __global__ void sm120::sm120_split_k_reduce_kernel<{out}, "
                f"{'true' if self.with_c else 'false'}>(const float*, {out}*, const {out}*, uint32_t, uint32_t, "
                "uint32_t, uint32_t, uint32_t);\n")


def split_k_reduce_specs() -> list[SplitKReduceSpec]:
    return [SplitKReduceSpec(out, c) for out in OUT_DTYPES for c in (False, True)]


# Every configuration the heuristics may pick, largest tiles first.
BF16_CONFIGS: tuple[Bf16GemmConfig, ...] = (
    # 64x64 warp tiles: fewest ldmatrix per MMA; BLOCK_K 32 (64B swizzle) leaves room for 4 stages
    Bf16GemmConfig(128, 256, 4, 2, 4, block_k=32),
    Bf16GemmConfig(128, 128, 3, 2, 4),
    Bf16GemmConfig(128, 64, 4, 2, 2),
    Bf16GemmConfig(64, 128, 4, 1, 4),
    Bf16GemmConfig(64, 64, 6, 2, 2),
)


# Swap-AB configurations for small M: block_m tiles N (weights), block_n tiles M (tokens).
BF16_SWAP_CONFIGS: tuple[Bf16GemmConfig, ...] = (
    Bf16GemmConfig(64, 16, 9, 4, 1),
    Bf16GemmConfig(128, 32, 4, 4, 1),
)
SWAP_AB_MAX_M = 32


# M-grouped configurations: BLOCK_M divides the contiguous-layout alignment, so no tile straddles groups.
BF16_GROUPED_CONFIGS: tuple[Bf16GemmConfig, ...] = (
    Bf16GemmConfig(128, 128, 3, 2, 4),
    Bf16GemmConfig(64, 128, 4, 1, 4),
)


# NN / TN / TT (an MN-major operand): 64-wide boxes need BLOCK_M/BLOCK_N multiples of 64, BLOCK_K 64.
BF16_LAYOUT_CONFIGS: tuple[Bf16GemmConfig, ...] = tuple(c for c in BF16_CONFIGS if c.block_k == 64)
LAYOUTS = ("nt", "nn", "tn", "tt")
# K-grouped (weight gradients): both operands MN-major ("tn"), fp32 D accumulated onto C
BF16_K_GROUPED_CONFIGS: tuple[Bf16GemmConfig, ...] = (Bf16GemmConfig(128, 128, 3, 2, 4),
                                                      Bf16GemmConfig(64, 64, 6, 2, 2))


def bf16_specs() -> list[Bf16GemmSpec]:
    """All instantiations reachable from the host API."""
    plain = [Bf16GemmSpec(cfg, out, c) for cfg in BF16_CONFIGS for out in OUT_DTYPES for c in (False, True)]
    swap = [Bf16GemmSpec(cfg, out, c, True) for cfg in BF16_SWAP_CONFIGS for out in OUT_DTYPES for c in (False, True)]
    grouped = [Bf16GemmSpec(cfg, "bf16", False, False, t) for cfg in BF16_GROUPED_CONFIGS
               for t in ("m_contiguous", "m_masked")]
    layouts = [Bf16GemmSpec(cfg, out, c, False, "normal", lay) for lay in ("nn", "tn", "tt")
               for cfg in BF16_LAYOUT_CONFIGS for out in OUT_DTYPES for c in (False, True)]
    swap_nn = [Bf16GemmSpec(cfg, out, c, True, "normal", "nn") for cfg in BF16_SWAP_CONFIGS
               for out in OUT_DTYPES for c in (False, True)]
    k_grouped = [Bf16GemmSpec(cfg, "fp32", c, False, "k_contiguous", "tn") for cfg in BF16_K_GROUPED_CONFIGS
                 for c in (False, True)]
    return plain + swap + grouped + layouts + swap_nn + k_grouped


# ---------------------------------------------------------------- block-scaled FP8 / FP4 (1D1D scales)

# kind -> (C++ ScaleKind, K elements per 128-byte stage row, scale granularity along K, scale format)
SCALE_KINDS = {
    "mxfp8": ("kMxFp8", 128, (128, 32), "ue8m0"),   # e4m3; 1x128 (DeepSeek) or 1x32 (MXFP8) UE8M0 scales
    "mxfp4": ("kMxFp4", 256, (32,), "ue8m0"),       # packed e2m1; 1x32 UE8M0
    "nvfp4": ("kNvFp4", 256, (16,), "ue4m3"),       # packed e2m1; 1x16 UE4M3 (+ per-tensor scales via alpha)
    # mixed: e4m3 x packed e2m1 (and the reverse); UE8M0, 1x128 or 1x32 on the e4m3 side, 1x32 on the e2m1 side
    "e4m3_e2m1": ("kMxE4M3E2M1", 128, (128, 32), "ue8m0"),
    "e2m1_e4m3": ("kMxE2M1E4M3", 128, (128, 32), "ue8m0"),
}
MIXED_KINDS = ("e4m3_e2m1", "e2m1_e4m3")
# (A row bytes, B row bytes) per stage: 128 K elements of e4m3 or 256 / 128 of packed e2m1
_ROW_BYTES = {"mxfp8": (128, 128), "mxfp4": (128, 128), "nvfp4": (128, 128), "e4m3_e2m1": (128, 64),
              "e2m1_e4m3": (64, 128)}


@dataclass(frozen=True)
class BlockScaledGemmConfig:
    """Tile of the block-scaled kernel: every stage row is 128 bytes of K (128 fp8 / 256 fp4 elements)."""
    block_m: int
    block_n: int
    stages: int
    warps_m: int
    warps_n: int
    group_n: int = 16

    @property
    def threads(self) -> int:
        return self.warps_m * self.warps_n * 32 + 128

    @property
    def smem_bytes(self) -> int:
        return self.stages * (self.block_m + self.block_n) * 128 + 2 * self.stages * 8

    @property
    def name(self) -> str:
        return f"{self.block_m}x{self.block_n}_s{self.stages}_w{self.warps_m}x{self.warps_n}"


BLOCK_SCALED_CONFIGS: tuple[BlockScaledGemmConfig, ...] = (
    BlockScaledGemmConfig(128, 128, 3, 2, 4),
    BlockScaledGemmConfig(128, 64, 4, 2, 2),
    BlockScaledGemmConfig(64, 128, 4, 1, 4),
    BlockScaledGemmConfig(64, 64, 6, 2, 2),
)
# M-grouped: BLOCK_M divides the contiguous-layout alignment
BLOCK_SCALED_GROUPED_CONFIGS: tuple[BlockScaledGemmConfig, ...] = (
    BlockScaledGemmConfig(128, 128, 3, 2, 4),
    BlockScaledGemmConfig(64, 128, 4, 1, 4),
)


@dataclass(frozen=True)
class BlockScaledGemmSpec:
    config: BlockScaledGemmConfig
    kind: str = "mxfp8"
    gran_k: int = 128     # K elements per scale of A (and of B unless gran_k_b is given)
    out_dtype: str = "bf16"
    with_c: bool = False
    gemm_type: str = "normal"
    gran_k_b: int = 0     # mixed operands: K elements per scale of B (0: same as A)

    family = "fp8_fp4_gemm_1d1d"
    header = "impls/sm120_fp8_fp4_gemm_1d1d.cuh"

    def __post_init__(self) -> None:
        grans = SCALE_KINDS[self.kind][2] if self.kind in SCALE_KINDS else ()
        if self.gran_k not in grans or (self.gran_k_b and (self.kind not in MIXED_KINDS or self.gran_k_b not in grans)):
            raise ValueError(f"unsupported block-scaled kind/granularity {self.kind}/{self.gran_k}")
        # the e2m1 side of mixed operands carries MX scales (1x32)
        if self.kind == "e4m3_e2m1" and self.grans[1] != 32 or self.kind == "e2m1_e4m3" and self.grans[0] != 32:
            raise ValueError(f"the e2m1 operand of {self.kind} takes 1x32 scales, got {self.grans}")

    @property
    def grans(self) -> tuple[int, int]:
        return self.gran_k, self.gran_k_b or self.gran_k

    @property
    def name(self) -> str:
        g = f"g{self.gran_k}" + (f"x{self.gran_k_b}" if self.gran_k_b else "")
        return (f"{self.family}_{self.kind}_{g}_{self.config.name}_{self.out_dtype}"
                f"{'_c' if self.with_c else ''}{'' if self.gemm_type == 'normal' else '_' + self.gemm_type}")

    @property
    def row_bytes(self) -> tuple[int, int]:
        """Bytes per stage row of A and of B (one TMA box and swizzle span each)."""
        return _ROW_BYTES[self.kind]

    @property
    def threads(self) -> int:
        return self.config.threads

    @property
    def smem_bytes(self) -> int:
        c, (ra, rb) = self.config, self.row_bytes
        return c.stages * (c.block_m * ra + c.block_n * rb) + 2 * c.stages * 8

    @property
    def elems_per_stage(self) -> int:
        return SCALE_KINDS[self.kind][1]

    def source(self) -> str:
        c = self.config
        out = _CXX_OUT[self.out_dtype]
        return (
            f'#include "{self.header}"\n'
            "// One instantiation per translation unit; the runtime finds it as the module's only kernel.\n"
            "template __global__ void sm120::sm120_fp8_fp4_gemm_1d1d_kernel<"
            f"sm120::ScaleKind::{SCALE_KINDS[self.kind][0]}, {self.grans[0]}, {self.grans[1]}, {c.block_m}, {c.block_n}, "
            f"{c.stages}, {c.warps_m}, {c.warps_n}, {c.group_n}, {out}, {'true' if self.with_c else 'false'}, "
            f"sm120::GemmType::{GEMM_TYPES[self.gemm_type]}>(\n"
            "    const __grid_constant__ CUtensorMap, const __grid_constant__ CUtensorMap, const uint32_t*, "
            f"const uint32_t*, {out}*, const {out}*, const int32_t*, uint32_t, uint32_t, uint32_t, uint32_t, "
            "uint32_t, uint32_t, uint32_t, uint32_t, uint32_t, uint32_t, uint32_t, uint32_t, uint32_t, float);\n"
        )


def block_scaled_specs() -> list[BlockScaledGemmSpec]:
    """All block-scaled instantiations reachable from the host API."""
    kinds = [(kind, g, 0) for kind in ("mxfp8", "mxfp4", "nvfp4") for g in SCALE_KINDS[kind][2]]
    kinds += [("e4m3_e2m1", g, 32) for g in (128, 32)] + [("e2m1_e4m3", 32, g) for g in (128, 32)]
    dense = [BlockScaledGemmSpec(cfg, kind, g, out, c, gran_k_b=gb) for kind, g, gb in kinds
             for cfg in BLOCK_SCALED_CONFIGS for out in OUT_DTYPES for c in (False, True)]
    grouped = [BlockScaledGemmSpec(cfg, kind, g, "bf16", False, t, gb) for kind, g, gb in kinds
               for cfg in BLOCK_SCALED_GROUPED_CONFIGS for t in ("m_contiguous", "m_masked")]
    return dense + grouped


def all_specs() -> list:
    """Every kernel the host can launch: what precompile() warms and the compile gate checks."""
    return bf16_specs() + block_scaled_specs() + split_k_reduce_specs()


for _cfg in (BF16_CONFIGS + BF16_SWAP_CONFIGS + BF16_GROUPED_CONFIGS + BLOCK_SCALED_CONFIGS
             + BLOCK_SCALED_GROUPED_CONFIGS):  # fail at import, not at compile time, if a config breaks the budget
    assert _cfg.smem_bytes <= SMEM_LIMIT, _cfg
