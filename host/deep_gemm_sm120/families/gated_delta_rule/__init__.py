"""Gated delta rule chunked forward (Qwen3-Next / Qwen3.5 linear attention; docs/gated_delta_rule.md): the
recurrence kernel (impls/sm120_gated_delta_rule_fwd.cuh) and the public op chunk_gated_delta_rule, which runs
the family's prep kernel (prep.py, a service kernel) first. This module is the declaration (torch-free): the
kernel is kernel.py's, the plan plan.py's, the rule rules.py's, the entry points api.py and contract.py (FLA's
names, not DeepGEMM's)."""

from __future__ import annotations

from ...core.names import Name, Op
from ...core.registry import Family
from .bwd import BWD
from .bwd_chunk import BWD_CHUNK
from .combine import COMBINE
from .grad_rows import GRAD_ROWS
from .kernel import PARAMS, gate, specs
from .plan import plan_specs
from .prep import PREP
from .rules import gdr_rule

FAMILY = Family(
    name="gated_delta_rule",
    header="impls/sm120_gated_delta_rule_fwd.cuh",
    kernel="sm120::sm120_gated_delta_rule_fwd_kernel",
    params=PARAMS,
    specs=specs,
    gate=gate,
    quick_key=lambda s: (s.chunk, s.vslice, s.ksplit, s.transitions, s.states),
    pdl=True,
    names=(
        Op(
            "chunk_gated_delta_rule",
            deepgemm=False,
            rule=gdr_rule,
            operands="q, k [B,T,H,128], v [B,T,HV,128] bf16/fp16; g fp32 [B,T,HV]; beta [B,T,HV]",
            output="(o [B,T,HV,128] in v's dtype, final_state fp32 [N,HV,128,128] or None)",
            notes="FLA's forward semantics; varlen (cu_seqlens), initial state, in-kernel q/k l2norm; chunk 16/32/64 "
            "(default 32); differentiable (the backward recomputes from the saved inputs: on CUDA four kernels, "
            "the states, the state gradients, the per-chunk gradients and dq / dk's rows; is_supported(..., backward=True))",
            signature="chunk_gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None, "
            "output_final_state=False, cu_seqlens=None, use_qk_l2norm_in_kernel=False, chunk_size=None, *, "
            "cu_seqlens_cpu=None)",
            plan_specs=plan_specs,
        ),
        Name(
            "chunk_gated_delta_rule_bwd",
            does="FLA's internal backward signature: NotImplementedError (autograd through chunk_gated_delta_rule)",
            deepgemm=False,
        ),
        Name("default_chunk_size", does="the chunk size chunk_gated_delta_rule uses on a device", deepgemm=False),
    ),
    api_modules=("api", "contract"),
    services=(PREP, COMBINE, BWD, BWD_CHUNK, GRAD_ROWS),
    sanitizers=("gated_delta_rule",),
    benchmarks=("gated_delta_rule",),
)
