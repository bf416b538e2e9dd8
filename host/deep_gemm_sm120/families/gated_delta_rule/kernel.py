"""The gated-delta-rule recurrence kernel (impls/sm120_gated_delta_rule_fwd.cuh): parameters, the stage geometry,
the (V slice, K split) plans it is built for, its instantiations and the SASS the gate demands."""

from __future__ import annotations

from dataclasses import dataclass

from ...core.limits import SMEM_LIMIT
from ...core.params import Param, ParamList
from ...core.registry import GateRules, KernelSpec
from .prep import CHUNKS, CXX_ELEM, HEAD_DIM, align_up, hmma

PARAMS = ParamList(
    Param("tmap_q", "CUtensorMap"),
    Param("tmap_k", "CUtensorMap"),
    Param("tmap_v", "CUtensorMap"),
    Param("tmap_tw", "CUtensorMap"),
    Param("tmap_tu", "CUtensorMap"),
    Param("tmap_attn", "CUtensorMap"),
    Param("tmap_gate", "CUtensorMap"),
    Param("initial_state", "const float*"),
    Param("final_state", "float*"),
    Param("o", "{elem}*"),
    Param("cu_seqlens", "const int32_t*"),
    Param("seq_len", "uint32_t"),
    Param("value_heads", "uint32_t"),
    Param("group", "uint32_t"),
    Param("ready", "const int32_t*"),
    Param("segments", "uint32_t"),
    Param("segment_tokens", "uint32_t"),
    Param("states", "{elem}*"),
    Param("state_slots", "const int32_t*"),
)
STATE_TOKENS = 64  # kGdrStateTokens: the states pass stores the state entering every 64th token of a sequence
V_SLICES = (16, 32, 64, 128)
MAX_STAGES = 2
HEAD_DIMS = (HEAD_DIM,)
ELEM_DTYPES = {"bfloat16": "bf16", "float16": "fp16"}
# 99 KiB per block on SM120: the recurrence double-buffers 32-token chunks. Elsewhere 32 too: on the H200 chunk 32
# was faster than 64 at all 43 shapes of benchmarks/bench_gated_delta_rule.py (docs/gated_delta_rule.md)
SM120_CHUNK, OTHER_CHUNK = 32, 32


def stage_bytes(chunk: int, vslice: int) -> int:
    """GdrFwdConfig::kStageBytes: q, k tiles, the v slice, Tw, Tu, attn and gates, each 1024-aligned."""
    mat = align_up(chunk * chunk * 2, 1024)
    return 2 * chunk * HEAD_DIM * 2 + align_up(chunk * vslice * 2, 1024) + 3 * mat + align_up(chunk * 16, 1024)


def out_bytes(chunk: int, vslice: int, ksplit: int = 1) -> int:
    """The per-group o staging, plus the K-split exchange (GdrFwdConfig::kOutBytes + kXchBytes)."""
    warps = vslice // 16 * ksplit
    return vslice // 16 * chunk * 16 * 2 + (2 * warps * 2 * (chunk // 8 * 4 * 32) * 4 if ksplit > 1 else 0)


def fwd_stages(chunk: int, vslice: int, ksplit: int = 1) -> int:
    """As many stages as fit the SM120 budget, at most MAX_STAGES (64-token chunks fit one); 0: does not fit."""
    free = SMEM_LIMIT - out_bytes(chunk, vslice, ksplit)
    return max(0, min(MAX_STAGES, free // (stage_bytes(chunk, vslice) + 16)))


@dataclass(frozen=True)
class GdrFwdSpec(KernelSpec):
    chunk: int = 32
    vslice: int = 64
    elem: str = "bf16"
    ksplit: int = 1
    transitions: bool = False  # the segmented walk's transition pass (its own instance: no q, attn or o)
    states: bool = False  # the backward's states pass (the output walk storing the state every STATE_TOKENS)

    @property
    def stages(self) -> int:
        return fwd_stages(self.chunk, self.vslice, self.ksplit)

    def kernel_name(self) -> str:
        split = f"_k{self.ksplit}" if self.ksplit > 1 else ""
        mode = "_tr" if self.transitions else "_st" if self.states else ""
        return f"gated_delta_rule_fwd_c{self.chunk}_v{self.vslice}{split}_s{self.stages}_{self.elem}{mode}"

    def block_threads(self) -> int:
        return (self.vslice // 16 * self.ksplit + 1) * 32

    def shared_bytes(self) -> int:
        return self.stages * (stage_bytes(self.chunk, self.vslice) + 16) + out_bytes(
            self.chunk, self.vslice, self.ksplit
        )

    def template_args(self) -> list[str]:
        args = [str(self.chunk), str(self.vslice), str(self.ksplit), str(self.stages), CXX_ELEM[self.elem]]
        # the plain walk keeps the defaults (v0.8.9's instantiation)
        if self.states:
            return args + ["false", "true"]
        return args + ["true"] * self.transitions

    def type_subst(self) -> dict[str, str]:
        return {"elem": CXX_ELEM[self.elem]}


def plans(chunk: int) -> tuple[tuple[int, int], ...]:
    """Every (V slice, K split) the recurrence is built for at this chunk size. 64-token chunks stop at 64-column
    slices (nine warps of a 128-column CTA leave ptxas 168 registers a thread, and the 64-token state step spilled
    there). The K split of two exists only on 16-column slices of 32- and 64-token chunks, the one place it
    measured faster on the H200 (a split of four, or of wider slices, measured slower: docs/gated_delta_rule.md);
    it keeps the unsplit kernel's stage count."""
    slices = V_SLICES if chunk < 64 else V_SLICES[:-1]
    split = ((16, 2),) if chunk >= 32 and fwd_stages(chunk, 16, 2) == fwd_stages(chunk, 16) else ()
    return tuple((vs, 1) for vs in slices) + split


def specs() -> list[GdrFwdSpec]:
    modes = ((False, False), (True, False), (False, True))  # (transitions, states): plain, transition, states
    return [
        GdrFwdSpec(c, vs, e, ks, tr, st) for c in CHUNKS for vs, ks in plans(c) for e in CXX_ELEM for tr, st in modes
    ]


def gate(spec: GdrFwdSpec) -> GateRules:
    return GateRules(
        required={"sm120": (hmma(spec.elem), "LDSM", "UTMALDG"), "sm90": (hmma(spec.elem), "LDSM", "UTMALDG")}
    )
