"""MQA logits (impls/sm120_mqa_logits.cuh): the DeepSeek V3.2/V4 indexer's scores, dense FP8 and FP4 forms (the
paged form is families/paged_mqa_logits; docs/mqa_logits.md). This module is the declaration (torch-free): the
kernel is kernel.py's, the rules rules.py's, the entry points api.py's (DeepGEMM's signatures)."""

from __future__ import annotations

from ...core.names import Op
from ...core.registry import Family
from .kernel import PARAMS, gate_rules, plan_specs, specs
from .rules import metadata_rule, mqa_logits_rule

_FORMS = (
    "DeepGEMM 2.8.1's order (max_seqlen_k 6th, schedule_meta 7th: accepted and unused; sgl-deep-gemm 0.2.5's "
    "too) and DeepGEMM main's (a bool 6th is clean_logits, then an int 7th max_seqlen_k); `clean_logits` and "
    "`logits_dtype` (fp32 / bf16) keyword only; `clean_logits` defaults to True unless max_seqlen_k > 0 "
    "(compressed rows are never cleaned); bf16 weights: NotImplementedError"
)
_SIGNATURE = (
    "(q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, max_seqlen_k=0, schedule_meta=None, *, "
    "clean_logits=None, logits_dtype=torch.float32)"
)

FAMILY = Family(
    name="mqa_logits",
    params=PARAMS,
    specs=specs,
    gate=lambda spec: gate_rules(spec.fp4),
    quick_key=lambda s: (s.heads, s.head_dim, s.fp4, s.encoding),
    pdl=True,
    names=(
        Op(
            "fp8_fp4_mqa_logits",
            does="fp8_fp4_mqa_logits (FP8; FP4 with packed UE8M0 1x32 scales)",
            keywords=_FORMS,
            rule=mqa_logits_rule,
            operands="q e4m3 [S,H,D], kv e4m3 [SK,D] + fp32 [SK], weights fp32 [S,H]",
            output="fp32 or bf16 [S, SK] (row stride padded to 1024 B) or compressed [S, max_seqlen_k]",
            notes="H 16/32/64; FP8 D 64/128 (QMMA.SF, unit scales, kv scale after the product); FP4 D 128 "
            "(OMMA.SF with packed UE8M0 1x32 scales)",
            signature="fp8_fp4_mqa_logits" + _SIGNATURE,
            plan_specs=plan_specs,
        ),
        Op(
            "fp8_mqa_logits",
            does="fp8_fp4_mqa_logits with q a tensor",
            keywords="as fp8_fp4_mqa_logits",
            rule=mqa_logits_rule,
            operands="q e4m3 [S,H,D] (a tensor), kv and weights as fp8_fp4_mqa_logits",
            output="as fp8_fp4_mqa_logits",
            notes="the FP8 form of fp8_fp4_mqa_logits",
            signature="fp8_mqa_logits" + _SIGNATURE,
            plan_specs=plan_specs,
        ),
        Op(
            "get_mqa_logits_metadata",
            does="an empty int32 tensor: the SM120 dense kernel finds each CTA's key range on the device",
            rule=metadata_rule,
            operands="cu_seq_len_k_start / _end int32 [S]",
            output="int32 [0]",
            notes="accepted by fp8_fp4_mqa_logits as schedule_meta",
            signature="get_mqa_logits_metadata(cu_seq_len_k_start, cu_seq_len_k_end, num_kv_tokens, num_heads)",
        ),
    ),
    sanitizers=("mqa_logits",),
    benchmarks=("mqa_logits",),
)
