"""Gated delta rule backward, the last step of dq and dk (impls/sm120_gated_delta_rule_grad_rows.cuh): B3's fp32
parts of each q / k head's gradient added in part order, the in-kernel l2norm's backward applied when the forward
normalized q and k, the result written in the inputs' dtype; dq and dk in one launch. A service kernel of this
family, launched by the backward (backward.py through api.gdr_grad_rows)."""

from __future__ import annotations

from dataclasses import dataclass

from ...core.arith import ceil_div
from ...core.params import Param, ParamList
from ...core.registry import Family, GateRules, KernelSpec
from .prep import CXX_ELEM

PARAMS = ParamList(
    Param("dq_parts", "const float*"),
    Param("dk_parts", "const float*"),
    Param("q", "const {elem}*"),
    Param("k", "const {elem}*"),
    Param("dq", "{elem}*"),
    Param("dk", "{elem}*"),
    Param("rows", "uint32_t"),
    Param("parts", "uint32_t"),
    Param("l2norm", "uint32_t"),
)
THREADS = 256  # kGdrRowsThreads: a warp per row
ROWS_PER_CTA = THREADS // 32


def grad_rows_ctas(rows: int) -> int:
    """dq's CTAs, then dk's: eight rows each."""
    return 2 * ceil_div(rows, ROWS_PER_CTA)


@dataclass(frozen=True)
class GdrGradRowsSpec(KernelSpec):
    elem: str = "bf16"

    def kernel_name(self) -> str:
        return f"gated_delta_rule_grad_rows_{self.elem}"

    def block_threads(self) -> int:
        return THREADS

    def shared_bytes(self) -> int:
        return 0

    def template_args(self) -> list[str]:
        return [CXX_ELEM[self.elem]]

    def type_subst(self) -> dict[str, str]:
        return {"elem": CXX_ELEM[self.elem]}


GRAD_ROWS = Family(
    name="gated_delta_rule_grad_rows",
    params=PARAMS,
    specs=lambda: [GdrGradRowsSpec(e) for e in CXX_ELEM],
    # the parts' 16-byte loads, the rows' rsqrt (MUFU) and the two row sums' shuffles
    gate=lambda spec: GateRules(
        required={"sm120": ("LDG.E.128", "MUFU.RSQ", "SHFL.BFLY"), "sm90": ("LDG.E.128", "MUFU.RSQ", "SHFL.BFLY")}
    ),
    pdl=True,
    api_modules=(),
    service=True,
)
