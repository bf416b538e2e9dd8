"""BF16 GEMM family (impls/sm120_bf16_gemm.cuh): dense NT/NN/TN/TT with swap-AB and split-K, M-grouped
contiguous/masked, K-grouped, einsum. This module is the declaration (torch-free): the kernel is kernel.py's,
the planning plan.py's, the shape/dtype rules rules.py's, the entry points api.py (dense), grouped.py and
einsum.py, each with DeepGEMM's signature."""

from __future__ import annotations

from ...core.names import BF16_KEYWORDS, EPILOGUE_IDENTITY, M_CONTIGUOUS_KEYWORDS, Op, alias, refused
from ...core.registry import Family
from . import plan, rules
from .kernel import GATE, LAYOUTS, PARAMS, specs

_LAYOUT_TEXT = {
    "nt": ("a [M,K], b [N,K]", "C may alias D; swap-AB for M <= 32; split-K for few tiles and K >= 2048"),
    "nn": ("a [M,K], b [K,N]", "b read MN-major (TMA + `ldmatrix.trans`); swap-AB for M <= 32"),
    "tn": ("a [K,M], b [K,N]", "M and N multiples of 8 (16-byte TMA rows)"),
    "tt": ("a [K,M], b [N,K]", "M multiple of 8"),
}

FAMILY = Family(
    name="bf16_gemm",
    kernel="sm120::sm120_bf16_gemm_nt_kernel",
    params=PARAMS,
    specs=specs,
    gate=lambda spec: GATE,
    quick_key=lambda s: (s.config, s.gemm_type, s.layout, s.swap_ab),
    pdl=True,
    names=(
        *(
            Op(
                f"bf16_gemm_{lay}",
                does=f"bf16_gemm_{lay}",
                keywords=BF16_KEYWORDS,
                rule=rules.dense_rule(lay),
                operands=_LAYOUT_TEXT[lay][0] + " bf16",
                output="bf16 or fp32",
                notes=_LAYOUT_TEXT[lay][1],
                signature=f"bf16_gemm_{lay}(a, b, d, c=None, compiled_dims='{'mn' if lay[0] == 't' else 'nk'}', "
                "alpha=None, epilogue=None)",
                plan_specs=plan.dense_specs(lay),
            )
            for lay in LAYOUTS
        ),
        Op(
            "m_grouped_bf16_gemm_nt_contiguous",
            does="m_grouped_bf16_gemm_nt_contiguous",
            keywords=M_CONTIGUOUS_KEYWORDS + "; `compiled_dims` accepted; " + EPILOGUE_IDENTITY,
            rule=rules.m_grouped_contiguous_rule,
            operands="a [M,K], b [G,N,K] bf16",
            output="bf16",
            notes="groups start at multiples of 128 rows; -1 padding rows untouched; layout checked unless capturing",
            signature="m_grouped_bf16_gemm_nt_contiguous(a, b, d, grouped_layout, compiled_dims='nk', "
            "use_psum_layout=False, ensure_zero_padding=True, expected_m_for_psum_layout=None, "
            "epilogue=None, *, check_layout=None)",
            plan_specs=plan.m_grouped_specs("m_contiguous"),
        ),
        refused(
            "m_grouped_bf16_gemm_nn_contiguous",
            "M-grouped BF16 takes a K-major B ([G, N, K]) only: use m_grouped_bf16_gemm_nt_contiguous",
        ),
        Op(
            "m_grouped_bf16_gemm_nt_masked",
            does="m_grouped_bf16_gemm_nt_masked",
            keywords="`compiled_dims` accepted; " + EPILOGUE_IDENTITY,
            rule=rules.m_grouped_masked_rule,
            operands="a [G,M,K], b [G,N,K] bf16",
            output="bf16 [G,M,N]",
            notes="no host sync, no allocation: CUDA-graph safe",
            signature="m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, expected_m, compiled_dims='nk', epilogue=None)",
            plan_specs=plan.m_grouped_specs("m_masked"),
        ),
        alias("bf16_m_grouped_gemm_nt_masked", "m_grouped_bf16_gemm_nt_masked"),
        Op(
            "k_grouped_bf16_gemm_tn_contiguous",
            does="k_grouped_bf16_gemm_tn_contiguous (DeepGEMM 2.8.1's order: a, b, d, ks_cpu, grouped_layout, c)",
            keywords="`ks_cpu` (CPU ints; sgl-deep-gemm's `ks=` by keyword) "
            "required: without it the K split lives only on the device; `use_psum_layout=True`: NotImplementedError; "
            "`compiled_dims` accepted",
            rule=rules.k_grouped_rule,
            operands="a [sum K,M], b [sum K,N] bf16",
            output="fp32 [G,M,N] (+C)",
            notes="one launch; descriptors rebased on device per group; any K_g including 0",
            signature="k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks_cpu=None, grouped_layout=None, c=None, "
            "compiled_dims='mn', use_psum_layout=False, epilogue=None, *, ks=None)",
            plan_specs=plan.k_grouped_specs,
        ),
        Op(
            "einsum",
            does="einsum: bmk,bnk->mn, bhr,hdr->bhd, bhd,hdr->bhr (runtime shapes); other expressions raise "
            "NotImplementedError listing these",
            keywords="`c` honoured for bmk,bnk->mn (fp32 d: c is d accumulates); "
            "`use_cublaslt=True` (keyword only: 2.8.1 has `epilogue` 6th) computes with torch.einsum (cuBLAS); "
            + EPILOGUE_IDENTITY,
            rule=rules.einsum_rule,
            operands="bmk,bnk->mn: a [B,M,K], b [B,N,K]; bhr,hdr->bhd / bhd,hdr->bhr: a [b,h,*], b [h,d,r] bf16",
            output="bmk: bf16 or fp32 [M,N] (c is d accumulates); bhd / bhr: bf16 [b,h,*]",
            notes="runtime shapes (3-D TMA maps; no recompilation per shape); batch reduction split over (batch, K) "
            "blocks; per-head products batched over h in one launch",
            signature="einsum(expr, a, b, d, c=None, epilogue=None, *, use_cublaslt=False)",
            plan_specs=plan.einsum_specs,
        ),
    ),
    api_modules=("api", "grouped", "einsum"),
    sanitizers=("bf16_gemm", "einsum"),
    benchmarks=("bf16_gemm", "einsum"),
)
