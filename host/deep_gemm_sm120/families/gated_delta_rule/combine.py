"""Gated delta rule, segmented walk: the combine between the transition and output passes
(impls/sm120_gated_delta_rule_combine.cuh): each segment's first state, h_{j+1} = A_j h_j + B_j in plain FP32,
one launch for the whole chain. A service kernel of this family only."""

from __future__ import annotations

from dataclasses import dataclass

from ...core.params import Param, ParamList
from ...core.registry import Family, GateRules, KernelSpec

PARAMS = ParamList(
    Param("maps", "const float*"),
    Param("initial_state", "const float*"),
    Param("firsts", "float*"),
    Param("segments", "uint32_t"),
    Param("pairs", "uint32_t"),
    Param("cu_seqlens", "const int32_t*"),
    Param("seq_len", "uint32_t"),
    Param("value_heads", "uint32_t"),
    Param("segment_tokens", "uint32_t"),
)
COLUMNS = 16  # value columns a CTA carries (kCombineCols)
THREADS = 256  # two threads a state row


@dataclass(frozen=True)
class GdrCombineSpec(KernelSpec):
    cols: int = COLUMNS

    def kernel_name(self) -> str:
        return f"gated_delta_rule_combine_c{self.cols}"

    def block_threads(self) -> int:
        return THREADS

    def shared_bytes(self) -> int:
        return 0  # its 8 KiB h block is static shared memory

    def template_args(self) -> list[str]:
        return [str(self.cols)]


def combine_ctas(pairs: int) -> int:
    """One CTA per (column block, pair)."""
    return pairs * (128 // COLUMNS)


COMBINE = Family(
    name="gated_delta_rule_combine",
    params=PARAMS,
    specs=lambda: [GdrCombineSpec()],
    gate=lambda spec: GateRules(required={"sm120": ("FFMA", "LDS.128"), "sm90": ("FFMA", "LDS.128")}),
    pdl=True,
    api_modules=(),
    service=True,
)
