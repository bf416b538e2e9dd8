"""Gated delta rule backward, the reverse state pass (impls/sm120_gated_delta_rule_bwd.cuh; issue 41's B2): the
state gradient from each sequence's end to its start, storing it at the end of every 64 tokens and at the start.
A service kernel of this family, launched by the backward (backward.py through api.gdr_state_grads)."""

from __future__ import annotations

from dataclasses import dataclass

from ...core.limits import SMEM_LIMIT
from ...core.params import Param, ParamList
from ...core.registry import Family, GateRules, KernelSpec
from .prep import CHUNKS, CXX_ELEM, HEAD_DIM, align_up, hmma

PARAMS = ParamList(
    Param("tmap_q", "CUtensorMap"),
    Param("tmap_k", "CUtensorMap"),
    Param("tmap_do", "CUtensorMap"),
    Param("tmap_tw", "CUtensorMap"),
    Param("tmap_attn", "CUtensorMap"),
    Param("tmap_gate", "CUtensorMap"),
    Param("dfinal", "const float*"),
    Param("dh0", "float*"),
    Param("dh_next", "{elem}*"),
    Param("state_slots", "const int32_t*"),
    Param("cu_seqlens", "const int32_t*"),
    Param("seq_len", "uint32_t"),
    Param("value_heads", "uint32_t"),
    Param("group", "uint32_t"),
)
V_SLICES = (16, 32, 64, 128)
MAX_STAGES = 2


def stage_bytes(chunk: int, vslice: int) -> int:
    """GdrBwdConfig::kStageBytes: q, k tiles, the do slice, Tw, attn and gates, each 1024-aligned."""
    mat = align_up(chunk * chunk * 2, 1024)
    return 2 * chunk * HEAD_DIM * 2 + align_up(chunk * vslice * 2, 1024) + 2 * mat + align_up(chunk * 16, 1024)


def bwd_stages(chunk: int, vslice: int) -> int:
    return max(0, min(MAX_STAGES, SMEM_LIMIT // (stage_bytes(chunk, vslice) + 16)))


@dataclass(frozen=True)
class GdrBwdSpec(KernelSpec):
    chunk: int = 32
    vslice: int = 64
    elem: str = "bf16"

    @property
    def stages(self) -> int:
        return bwd_stages(self.chunk, self.vslice)

    def kernel_name(self) -> str:
        return f"gated_delta_rule_bwd_c{self.chunk}_v{self.vslice}_s{self.stages}_{self.elem}"

    def block_threads(self) -> int:
        return (self.vslice // 16 + 1) * 32

    def shared_bytes(self) -> int:
        return self.stages * (stage_bytes(self.chunk, self.vslice) + 16)

    def template_args(self) -> list[str]:
        return [str(self.chunk), str(self.vslice), str(self.stages), CXX_ELEM[self.elem]]

    def type_subst(self) -> dict[str, str]:
        return {"elem": CXX_ELEM[self.elem]}


def bwd_slices(chunk: int) -> tuple[int, ...]:
    """The V slices built at this chunk size (64-token chunks stop at 64 columns, as the forward's walk)."""
    return V_SLICES if chunk < 64 else V_SLICES[:-1]


BWD = Family(
    name="gated_delta_rule_bwd",
    params=PARAMS,
    specs=lambda: [GdrBwdSpec(c, vs, e) for c in CHUNKS for vs in bwd_slices(c) for e in CXX_ELEM],
    gate=lambda spec: GateRules(
        required={"sm120": (hmma(spec.elem), "LDSM", "UTMALDG"), "sm90": (hmma(spec.elem), "LDSM", "UTMALDG")}
    ),
    pdl=True,
    api_modules=(),
    service=True,
)
