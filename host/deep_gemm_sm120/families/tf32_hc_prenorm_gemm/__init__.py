"""Hyper-connection pre-norm GEMM (impls/sm120_tf32_hc_prenorm_gemm.cuh): d = a.float() @ b.T on TF32 tensor
cores and sqr_sum = (a.float() ** 2).sum(-1) in the same pass over a, for DeepSeek V4's small N (24) and long K.
This module is the declaration (torch-free): the kernel is kernel.py's, the split plan plan.py's, the rule
rules.py's, the entry point api.py's (DeepGEMM's signature)."""

from __future__ import annotations

from ...core.names import Op
from ...core.registry import Family
from .kernel import GATE, PARAMS, specs
from .plan import plan_specs
from .rules import hc_prenorm_rule

FAMILY = Family(
    name="tf32_hc_prenorm_gemm",
    params=PARAMS,
    specs=specs,
    gate=lambda spec: GATE,
    quick_key=lambda s: (s.n_pad,),
    pdl=True,
    names=(
        Op(
            "tf32_hc_prenorm_gemm",
            does="tf32_hc_prenorm_gemm",
            keywords="`num_splits` honoured (DeepGEMM's split of "
            "64-wide K blocks); N up to 32 (any, not only multiples of 8); K a multiple of 8 (not only of 64)",
            rule=hc_prenorm_rule,
            operands="a [M,K] bf16, b [N,K] fp32 (N <= 32)",
            output="d fp32 [M,N] or [S,M,N]; sqr_sum fp32 [M] or [S,M]",
            notes="one pass over a; b = tf32 hi + bf16 lo (fp64-grade d); num_splits=S writes DeepGEMM's per-split "
            "partial sums, None reduces in a fixed order",
            signature="tf32_hc_prenorm_gemm(a, b, d, sqr_sum, num_splits=None)",
            plan_specs=plan_specs,
        ),
    ),
    sanitizers=("tf32_hc_prenorm_gemm",),
    benchmarks=("hc_prenorm",),
)
