"""The wave model the GEMM families plan with (pure, torch-free): tiles per wave on a persistent grid, and the
plan a dense launch carries."""

from __future__ import annotations

from dataclasses import dataclass

from .arith import ceil_div

# what the GEMM kernels (and the split-K reduce) are instantiated with: output types and their C++ names, and the
# GemmType enumerators of scheduler/sm120_gemm.cuh by the name the host uses
OUT_DTYPES = ("bf16", "fp32")
CXX_OUT = {"bf16": "sm120::bf16", "fp32": "float"}
GEMM_TYPES = {
    "normal": "kNormal",
    "m_contiguous": "kMGroupedContiguous",
    "m_masked": "kMGroupedMasked",
    "k_contiguous": "kKGroupedContiguous",
    "batched": "kBatched",
    "batch_reduce": "kBatchReduce",
}


def wave_cost(block_m: int, block_n: int, m: int, n: int, num_sms: int, efficiency: float) -> float:
    """Waves x tile work / main-loop efficiency: the critical path of a persistent launch."""
    tiles = ceil_div(m, block_m) * ceil_div(n, block_n)
    return ceil_div(tiles, num_sms) * block_m * block_n / efficiency


def fewest_waves(configs, efficiency: dict, groups: int, m: int, n: int, num_sms: int):
    """The tile configuration that gives `groups` independent m x n problems the least critical-path work
    (waves x tile area / efficiency); min() keeps the first, i.e. largest, of equals."""

    def cost(c) -> float:
        tiles = groups * ceil_div(m, c.block_m) * ceil_div(n, c.block_n)
        return ceil_div(tiles, num_sms) * c.block_m * c.block_n / efficiency[c.block_m * c.block_n]

    return min(configs, key=cost)


@dataclass(frozen=True)
class WarpTile:
    """The tile shape every mma.sync GEMM of the device layer shares: warps_m x warps_n math warps plus one
    128-thread producer warpgroup, `stages` pipeline stages each with a full/empty mbarrier pair."""

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
    def stage_row_bytes(self) -> int:
        """Bytes of one A or B row in one pipeline stage (the family's K depth per stage)."""
        raise NotImplementedError

    @property
    def smem_bytes(self) -> int:
        """Operand stages plus a full/empty mbarrier pair per stage."""
        return self.stages * (self.block_m + self.block_n) * self.stage_row_bytes + 2 * self.stages * 8


@dataclass(frozen=True)
class DensePlan:
    config: object
    splits: int
    tiles: int  # output tiles in kernel space (after swap-AB)
    swap_ab: bool = False

    def grid(self, num_sms: int) -> int:
        return min(num_sms, self.tiles * self.splits)
