"""Sparse and paged-sparse MQA logits (impls/sm120_sparse_mqa_logits.cuh): DeepSeek V4.1's indexer scores over
the KV blocks each query selected, MXFP8 or MXFP4 (docs/sparse_mqa_logits.md). One kernel serves both forms (the
contiguous KV is a single page); its slot tables come from a service kernel of this family (slots.py). This
module is the declaration (torch-free): the kernel is kernel.py's, the rules rules.py's (tensor checks:
contract.py), the entry points api.py and metadata.py (DeepGEMM's signatures)."""

from __future__ import annotations

from ...core.names import Op
from ...core.registry import Family
from ..mqa_logits.kernel import gate_rules
from .kernel import PARAMS, plan_specs, specs
from .rules import sparse_rule
from .slots import SLOTS

_GEOMETRY = "H 16/32/64; MXFP8 D 64/128, MXFP4 D 128; sparse blocks 8/16/32 (runtime); QMMA.SF / OMMA.SF"
_OUT = "bf16 [S, num_max_sparse_blocks * sparse_block_kv]; -inf where not a score"
_SLOTS = "int32 [S, num_max, 2] slot table (first physical row, valid count)"
_ONE_LAUNCH = "one kernel launch on the GPU (graph-capturable; torch ops for CPU tensors)"

FAMILY = Family(
    name="sparse_mqa_logits",
    params=PARAMS,
    specs=specs,
    gate=lambda spec: gate_rules(spec.fp4),
    quick_key=lambda s: (s.heads, s.head_dim, s.fp4, s.encoding),
    pdl=True,
    api_modules=("api", "metadata"),
    services=(SLOTS,),
    names=(
        Op(
            "fp8_fp4_sparse_mqa_logits",
            does="fp8_fp4_sparse_mqa_logits (MXFP8 / MXFP4; H 16/32/64, D 64/128 (MXFP4 128), blocks 8/16/32)",
            keywords="`use_unaligned_ks` accepted (the slot table carries the alignment); "
            "-inf written wherever DeepGEMM leaves the output unspecified",
            rule=sparse_rule,
            operands="q (MXFP8 e4m3 [S,H,D] | MXFP4 packed [S,H,D/2], int32 UE8M0 [S,H]), kv (values [N,..], int32 "
            "[N]), weights bf16 [S,H]",
            output=_OUT,
            notes=_GEOMETRY + "; slot table from get_sparse_mqa_logits_metadata",
            signature="fp8_fp4_sparse_mqa_logits(q, kv, weights, metadata, num_max_sparse_blocks, sparse_block_kv, "
            "use_unaligned_ks=False)",
            plan_specs=plan_specs,
        ),
        Op(
            "fp8_fp4_paged_sparse_mqa_logits",
            does="fp8_fp4_paged_sparse_mqa_logits (as the contiguous form, q [S, 1, H, ..])",
            rule=sparse_rule,
            operands="q [S,1,H,..] + int32 [S,1,H], kv_cache uint8 [pages, page_kv, 1, D(/2)+4], weights bf16 [S,H]",
            output=_OUT,
            notes=_GEOMETRY + "; page_kv a multiple of the block; slot table from get_paged_sparse_mqa_logits_metadata",
            signature="fp8_fp4_paged_sparse_mqa_logits(q, kv_cache, weights, metadata, num_max_sparse_blocks, "
            "sparse_block_kv)",
            plan_specs=plan_specs,
        ),
        Op(
            "get_sparse_mqa_logits_metadata",
            does="get_sparse_mqa_logits_metadata (slot table int32 [S, num_max, 2], one GPU launch, graph-capturable)",
            keywords="`use_unaligned_ks` honoured (unaligned ks rejected without it)",
            rule=sparse_rule,
            operands="ks, ke int32 [S], indices int32 [S, num_max]",
            output=_SLOTS,
            notes=_ONE_LAUNCH,
            signature="get_sparse_mqa_logits_metadata(cu_seq_len_k_start, cu_seq_len_k_end, num_kv_tokens, "
            "sparse_kv_block_indices, qk_dtype, sparse_block_kv, use_unaligned_ks=False)",
            plan_specs=lambda num_sms, **_: [],
        ),
        Op(
            "get_paged_sparse_mqa_logits_metadata",
            does="get_paged_sparse_mqa_logits_metadata (slot table; `page_kv` a multiple of `sparse_block_kv`)",
            rule=sparse_rule,
            operands="context_lens int32 [S], block_table int32 [S, pages] (each row its request's pages), indices "
            "int32 [S] (request of each row), sparse_kv_block_indices int32 [S, num_max]",
            output=_SLOTS,
            notes=_ONE_LAUNCH,
            signature="get_paged_sparse_mqa_logits_metadata(context_lens, block_table, indices, page_kv, "
            "sparse_kv_block_indices, qk_dtype, sparse_block_kv)",
            plan_specs=lambda num_sms, **_: [],
        ),
    ),
    sanitizers=("sparse_mqa_logits",),
    benchmarks=("sparse_mqa_logits",),
)
