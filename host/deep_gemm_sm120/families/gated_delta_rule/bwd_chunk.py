"""Gated delta rule backward, the per-chunk gradients (impls/sm120_gated_delta_rule_bwd_chunk.cuh; issue 41's B3):
stages 0 and 3 of the chunk-form backward in one CTA per (64-token chunk, q / k head, part of its value heads),
from the token-major inputs, the states pass's states and the reverse pass's state gradients. A service kernel of
this family, launched by the backward (backward.py through api.gdr_chunk_grads)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from ...core.params import Param, ParamList
from ...core.registry import Family, GateRules, KernelSpec
from .prep import CXX_ELEM, HEAD_DIM, align_up, hmma

PARAMS = ParamList(
    Param("q", "const {elem}*"),
    Param("k", "const {elem}*"),
    Param("v", "const {elem}*"),
    Param("dout", "const {elem}*"),
    Param("g", "const float*"),
    Param("beta", "const void*"),
    Param("states", "const {elem}*"),
    Param("dh_next", "const {elem}*"),
    Param("chunk_first", "const int32_t*"),
    Param("chunk_len", "const int32_t*"),
    Param("dq", "float*"),
    Param("dk", "float*"),
    Param("dv", "{elem}*"),
    Param("dg", "float*"),
    Param("dbeta", "float*"),
    Param("heads", "uint32_t"),
    Param("value_heads", "uint32_t"),
    Param("scale", "float"),
    Param("beta_fp32", "uint32_t"),
    Param("l2norm", "uint32_t"),
    Param("fold", "uint32_t"),
)
CHUNK = 64  # kGdrStateTokens: the states and state gradients come every 64 tokens
THREADS = 512
SLICE = 16
FOLD_ENV = "DG_SM120_GDR_FOLD"  # value heads a B3 CTA works, for measurement; unset or 0: planned (choose_fold)


def fold_setting() -> int | None:
    """The measurement knob's fold (DG_SM120_GDR_FOLD), None when unset (0 also plans); gdr_chunk_grads refuses one
    that does not divide the group as it refuses an explicit fold."""
    raw = os.environ.get(FOLD_ENV, "").strip()
    if not raw:
        return None
    if not raw.isdigit():
        raise ValueError(f"{FOLD_ENV}={raw!r}: expected a positive integer (a divisor of the GVA group) or unset")
    return int(raw)


def choose_fold(chunks: int, heads: int, group: int, num_sms: int) -> int:
    """Value heads a CTA works in turn (a divisor of the GVA group): dq and dk come summed over them, so the host
    sums group / fold parts (none at fold = group). A CTA fills an SM, so a grid's time goes as its waves times
    the CTA's length: the fold with the fewest waves x fold, the largest of equals (1 x 2048 tokens at (2, 8): 64
    CTAs of four heads would leave half the SMs idle; 128 of two take one wave, as 256 of one take two)."""
    folds = [f for f in range(1, group + 1) if group % f == 0]
    cost = {f: -(-chunks * heads * (group // f) // max(1, num_sms)) * f for f in folds}
    return min(folds, key=lambda f: (cost[f], -f))


def chunk_grads_smem_bytes() -> int:
    """GdrChunkGradConfig::kSmemBytes: Kn, T, M, Ar (fp32), the per-row vectors and reduction rows, the work
    region (the larger of two Kn-sized tiles and Kn + an fp32 C x C matrix)."""
    c, k = CHUNK, HEAD_DIM
    tile_k, tile_c, tile_f = c * (k + 8) * 2, c * (c + 8) * 2, c * (c + 1) * 4
    head = tile_k + 2 * tile_c + tile_f + 8 * c * 4 + 10 * c * 4
    return align_up(head, 128) + max(2 * tile_k, tile_k + tile_f)


@dataclass(frozen=True)
class GdrChunkGradSpec(KernelSpec):
    elem: str = "bf16"

    def kernel_name(self) -> str:
        return f"gated_delta_rule_bwd_chunk_c{CHUNK}_{self.elem}"

    def block_threads(self) -> int:
        return THREADS

    def shared_bytes(self) -> int:
        return chunk_grads_smem_bytes()

    def template_args(self) -> list[str]:
        return [CXX_ELEM[self.elem]]

    def type_subst(self) -> dict[str, str]:
        return {"elem": CXX_ELEM[self.elem]}


BWD_CHUNK = Family(
    name="gated_delta_rule_bwd_chunk",
    params=PARAMS,
    specs=lambda: [GdrChunkGradSpec(e) for e in CXX_ELEM],
    gate=lambda spec: GateRules(required={"sm120": (hmma(spec.elem), "LDSM"), "sm90": (hmma(spec.elem), "LDSM")}),
    pdl=True,
    api_modules=(),
    service=True,
)
