"""Paged MQA logits (impls/sm120_paged_mqa_logits.cuh): the DeepSeek V3.2/V4 indexer's decode scores over a paged
FP8 or FP4 KV cache, scheduled by get_paged_mqa_logits_metadata (its service kernel: schedule.py). This module
is the declaration (torch-free): the kernel is kernel.py's, the rules rules.py's, the entry points api.py and
metadata.py (DeepGEMM's signatures)."""

from __future__ import annotations

from ...core.names import Op
from ...core.registry import Family
from ..mqa_logits.kernel import gate_rules
from .kernel import PARAMS, plan_specs, specs
from .rules import metadata_rule, paged_rule
from .schedule import SCHEDULE, PagedMetadataSpec

_OPERANDS = "q e4m3 [B,next_n,H,D] (FP4 packed + int32 scales), kv_cache uint8 [blocks, block_kv, 1, D+4]"
_NOTES = (
    "H 16/32/64; FP8 D 64/128, FP4 D 128; block_kv 32/64/128; any next_n; schedule from get_paged_mqa_logits_metadata"
)

FAMILY = Family(
    name="paged_mqa_logits",
    params=PARAMS,
    specs=specs,
    gate=lambda spec: gate_rules(spec.fp4),
    quick_key=lambda s: (s.heads, s.head_dim, s.block_kv, s.fp4, s.encoding),
    pdl=True,
    names=(
        Op(
            "fp8_fp4_paged_mqa_logits",
            does="fp8_fp4_paged_mqa_logits",
            keywords="DeepGEMM 2.8.1's order (`indices` "
            "8th; `indices` not None: NotImplementedError); `clean_logits`, `logits_dtype` keyword-only extensions "
            "(default: uncleaned float32, as 2.8.1); 1-D and 2-D context_lens",
            rule=paged_rule,
            operands=_OPERANDS,
            output="fp32 or bf16 [B * next_n, max_context_len]",
            notes=_NOTES,
            signature="fp8_fp4_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta, "
            "max_context_len, indices=None, *, clean_logits=False, logits_dtype=torch.float32)",
            plan_specs=plan_specs,
        ),
        Op(
            "fp8_paged_mqa_logits",
            does="fp8_fp4_paged_mqa_logits with q a tensor",
            rule=paged_rule,
            operands="q e4m3 [B,next_n,H,D] (a tensor), kv_cache as fp8_fp4_paged_mqa_logits",
            output="as fp8_fp4_paged_mqa_logits",
            notes="the FP8 form of fp8_fp4_paged_mqa_logits",
            signature="fp8_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta, "
            "max_context_len, clean_logits=False, logits_dtype=torch.float32)",
            plan_specs=plan_specs,
        ),
        Op(
            "get_paged_mqa_logits_metadata",
            does="get_paged_mqa_logits_metadata (GPU-computed, graph-capturable)",
            keywords="`indices` (varlen, SM100-only upstream): NotImplementedError",
            rule=metadata_rule,
            operands="context_lens int32 [B] or [B, next_n]",
            output="int32 [num_sms + 1, 2]",
            notes="(batch, chunk) where each SM starts; chunks of max(64, block_kv) keys; computed on the GPU by the "
            "family's service kernel (schedule.py)",
            signature="get_paged_mqa_logits_metadata(context_lens, block_kv, num_sms, indices=None)",
            plan_specs=lambda num_sms, **_: [PagedMetadataSpec()],
        ),
    ),
    api_modules=("api", "metadata"),
    services=(SCHEDULE,),
    sanitizers=("mqa_logits",),
    benchmarks=("mqa_logits",),
)
