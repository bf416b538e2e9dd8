"""Gated delta rule, stage 1 (impls/sm120_gated_delta_rule_prep.cuh): each chunk's WY factors Tw, Tu, the decayed
causal q.k products and the per-token gates, in parallel over chunks and value heads. A service kernel of this
family only: chunk_gated_delta_rule launches it before (or, overlapped, beside) the recurrence."""

from __future__ import annotations

from dataclasses import dataclass

from ...core.arith import round_up
from ...core.limits import SMEM_LIMIT
from ...core.params import Param, ParamList
from ...core.registry import Family, GateRules, KernelSpec

PARAMS = ParamList(
    Param("q", "const {elem}*"),
    Param("k", "const {elem}*"),
    Param("g", "const float*"),
    Param("beta", "const void*"),
    Param("cu_seqlens", "const int32_t*"),
    Param("tw", "{elem}*"),
    Param("tu", "{elem}*"),
    Param("attn", "{elem}*"),
    Param("gates", "float*"),
    Param("num_seqs", "uint32_t"),
    Param("seq_len", "uint32_t"),
    Param("value_heads", "uint32_t"),
    Param("group", "uint32_t"),
    Param("scale", "float"),
    Param("beta_fp32", "uint32_t"),
    Param("l2norm", "uint32_t"),
    Param("cu_effective", "int32_t*"),
    Param("ready", "int32_t*"),
)
CXX_ELEM = {"bf16": "sm120::bf16", "fp16": "sm120::fp16"}
CHUNKS = (16, 32, 64)
THREADS = 128
HEAD_DIM = 128


def align_up(x: int, a: int) -> int:
    return round_up(x, a)


def persistent_teams(chunk: int) -> int:
    """Items a persistent prep CTA works on at once by default: as many 1024-aligned team regions as fit the
    SM120 budget, at most two (GdrPrepConfig::kTeamStride)."""
    return max(1, min(2, SMEM_LIMIT // align_up(prep_smem_bytes(chunk), 1024)))


def prep_smem_bytes(chunk: int) -> int:
    """GdrPrepConfig::kSmemBytes: k / q tiles, A (+ off-diagonal scratch, later Tw / Tu), T (earlier the attn
    staging), four per-token vectors."""
    tile = chunk * HEAD_DIM * 2
    mat = chunk * (chunk + 1) * 4
    scratch = ((chunk // 16 - 1) * 256 if chunk > 16 else 1) * 4
    half = chunk * (chunk + 8) * 2
    region_a, region_t = max(mat + scratch, 2 * half), max(mat, half)
    return 2 * tile + align_up(region_a, 16) + align_up(region_t, 16) + 4 * chunk * 4


@dataclass(frozen=True)
class GdrPrepSpec(KernelSpec):
    chunk: int = 32
    elem: str = "bf16"
    persistent: bool = False  # the overlapped launch's grid: walks the items, publishes each in `ready`
    team_count: int = 0  # persistent: items a CTA works on at once (0: persistent_teams(chunk))

    def kernel_name(self) -> str:
        kind = f"_persistent_t{self.teams}" if self.persistent else ""
        return f"gated_delta_rule_prep_c{self.chunk}{kind}_{self.elem}"

    @property
    def teams(self) -> int:
        return (self.team_count or persistent_teams(self.chunk)) if self.persistent else 1

    def block_threads(self) -> int:
        return THREADS * self.teams

    def shared_bytes(self) -> int:
        if not self.persistent:
            return prep_smem_bytes(self.chunk)
        return self.teams * align_up(prep_smem_bytes(self.chunk), 1024)

    def template_args(self) -> list[str]:
        return [str(self.chunk), "true" if self.persistent else "false", str(self.teams), CXX_ELEM[self.elem]]

    def type_subst(self) -> dict[str, str]:
        return {"elem": CXX_ELEM[self.elem]}


def hmma(elem: str) -> str:
    return "HMMA.16816.F32.BF16" if elem == "bf16" else "HMMA.16816.F32"


PREP = Family(
    name="gated_delta_rule_prep",
    params=PARAMS,
    specs=lambda: [GdrPrepSpec(c, e, p) for c in CHUNKS for p in (False, True) for e in CXX_ELEM],
    gate=lambda spec: GateRules(required={"sm120": (hmma(spec.elem), "LDSM"), "sm90": (hmma(spec.elem), "LDSM")}),
    quick_key=lambda s: (s.chunk, s.persistent),
    pdl=True,
    api_modules=(),
    service=True,
)
