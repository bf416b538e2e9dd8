"""The hyper-connection pre-norm kernel (impls/sm120_tf32_hc_prenorm_gemm.cuh): parameters, the stage geometry,
its instantiations and the SASS the gate demands."""

from __future__ import annotations

from dataclasses import dataclass

from ...core.limits import SMEM_LIMIT
from ...core.params import Param, ParamList
from ...core.registry import GateRules, KernelSpec

PARAMS = ParamList(
    Param("tmap_a", "CUtensorMap"),
    Param("tmap_b", "CUtensorMap"),
    Param("d", "float*"),
    Param("sqr_sum", "float*"),
    Param("m", "uint32_t"),
    Param("n", "uint32_t"),
    Param("k", "uint32_t"),
    Param("ldd", "uint32_t"),
    Param("d_split_stride", "uint32_t"),
    Param("s_split_stride", "uint32_t"),
)

BLOCK_K = 64  # the kernel's stage depth and DeepGEMM's split granularity
MATH_WARPS = BLOCK_K // 16  # one k16 step of every stage per warp
BLOCK_M = 64  # 128-row tiles measured no faster on the H200 and spill at N_pad 32
MAX_N = 32
N_PADS = (8, 16, 24, 32)
MAX_STAGES = 8


def _stage_bytes(block_m: int, n_pad: int) -> int:
    return block_m * 128 + n_pad * 2 * 128  # a: BLOCK_M x 64 bf16; b: n_pad x 64 fp32


def _stages(block_m: int, n_pad: int) -> int:
    return min(MAX_STAGES, (SMEM_LIMIT - 2 * 8 * MAX_STAGES) // _stage_bytes(block_m, n_pad))


@dataclass(frozen=True)
class HcPrenormSpec(KernelSpec):
    n_pad: int = 24
    block_m: int = BLOCK_M

    @property
    def stages(self) -> int:
        return _stages(self.block_m, self.n_pad)

    def kernel_name(self) -> str:
        return f"tf32_hc_prenorm_gemm_m{self.block_m}_n{self.n_pad}_s{self.stages}"

    def block_threads(self) -> int:
        return MATH_WARPS * 32 + 32

    def shared_bytes(self) -> int:
        return self.stages * _stage_bytes(self.block_m, self.n_pad) + 2 * 8 * self.stages

    def template_args(self) -> list[str]:
        return [str(self.block_m), str(self.n_pad), str(self.stages)]


def specs() -> list[HcPrenormSpec]:
    return [HcPrenormSpec(n) for n in N_PADS]


# TF32 MMAs for a.hi, one BF16 MMA for a.lo; both run natively on sm_90a, so both builds are the same code.
GATE = GateRules(
    required={
        "sm120": ("HMMA.1688.F32.TF32", "HMMA.16816.F32.BF16", "UTMALDG", "LDSM"),
        "sm90": ("HMMA.1688.F32.TF32", "HMMA.16816.F32.BF16", "UTMALDG", "LDSM"),
    }
)
