"""The BF16 GEMM kernel (impls/sm120_bf16_gemm.cuh): its parameters, tile configurations, the instantiations
the API can launch, and the SASS the compile gate demands of them."""

from __future__ import annotations

from dataclasses import dataclass

from ...core.arith import round_up
from ...core.gemm import CXX_OUT, GEMM_TYPES, OUT_DTYPES, WarpTile
from ...core.params import Param, ParamList
from ...core.registry import GateRules, KernelSpec

PARAMS = ParamList(
    Param("tmap_a", "CUtensorMap"),
    Param("tmap_b", "CUtensorMap"),
    Param("d", "{out}*"),
    Param("c", "const {out}*"),
    Param("layout", "const int32_t*"),
    Param("aux", "const uint64_t*"),
    Param("m", "uint32_t"),
    Param("n", "uint32_t"),
    Param("k", "uint32_t"),
    Param("ldd", "uint32_t"),
    Param("ldc", "uint32_t"),
    Param("num_groups", "uint32_t"),
    Param("psum_layout", "uint32_t"),
    Param("num_splits", "uint32_t"),
    Param("split_stride", "uint32_t"),
)

LAYOUTS = ("nt", "nn", "tn", "tt")  # DeepGEMM naming: a [M,K] "n" or [K,M] "t"; then b [K,N] "n" or [N,K] "t"


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

    def kernel_name(self) -> str:
        return (
            f"bf16_gemm_nt_{self.config.name}_{self.out_dtype}{'_c' if self.with_c else ''}"
            f"{'_swap' if self.swap_ab else ''}{'' if self.gemm_type == 'normal' else '_' + self.gemm_type}"
            f"{'' if self.layout == 'nt' else '_' + self.layout}"
        )

    def shared_bytes(self) -> int:
        if self.gemm_type == "k_contiguous":  # + two 128-byte tensor-map copies for tensormap.replace
            return round_up(self.config.smem_bytes, 128) + 256
        return self.config.smem_bytes

    @property
    def mn_major(self) -> tuple[bool, bool]:
        """(first operand MN-major, second operand MN-major) in kernel order (after swap-AB)."""
        a_mn, b_mn = self.layout[0] == "t", self.layout[1] == "n"
        return (b_mn, a_mn) if self.swap_ab else (a_mn, b_mn)

    def template_args(self) -> list[str]:
        c, b = self.config, lambda x: "true" if x else "false"
        return [
            str(c.block_m),
            str(c.block_n),
            str(c.block_k),
            str(c.stages),
            str(c.warps_m),
            str(c.warps_n),
            str(c.group_n),
            CXX_OUT[self.out_dtype],
            b(self.with_c),
            b(self.swap_ab),
            f"sm120::GemmType::{GEMM_TYPES[self.gemm_type]}",
            b(self.mn_major[0]),
            b(self.mn_major[1]),
        ]

    def type_subst(self) -> dict[str, str]:
        return {"out": CXX_OUT[self.out_dtype]}


# configurations, largest tiles first
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
    layouts = [
        S(cfg, out, c, False, "normal", lay)
        for lay in ("nn", "tn", "tt")
        for cfg in LAYOUT_CONFIGS
        for out in OUT_DTYPES
        for c in (False, True)
    ]
    swap_nn = [
        S(cfg, out, c, True, "normal", "nn") for cfg in SWAP_CONFIGS for out in OUT_DTYPES for c in (False, True)
    ]
    k_grouped = [S(cfg, "fp32", c, False, "k_contiguous", "tn") for cfg in K_GROUPED_CONFIGS for c in (False, True)]
    batched = [S(cfg, "bf16", False, False, "batched", lay) for cfg in BATCHED_CONFIGS for lay in ("nt", "nn")]
    batch_reduce = [
        S(cfg, out, c, False, "batch_reduce")
        for cfg in BATCH_REDUCE_CONFIGS
        for out in OUT_DTYPES
        for c in (False, True)
    ]
    return plain + swap + grouped + layouts + swap_nn + k_grouped + batched + batch_reduce


GATE = GateRules(required={"sm120": ("HMMA.16816.F32.BF16", "UTMALDG"), "sm90": ("HMMA.16816.F32.BF16", "UTMALDG")})
