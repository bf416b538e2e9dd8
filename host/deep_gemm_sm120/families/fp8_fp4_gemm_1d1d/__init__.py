"""Block-scaled FP8 / FP4 GEMM family (impls/sm120_fp8_fp4_gemm_1d1d.cuh): MXFP8 (and DeepSeek's 1x128 /
128x128), MXFP4, NVFP4 and mixed e4m3 x e2m1, dense with split-K or M-grouped, and fp8_einsum. This module is
the declaration (torch-free): the kernel is kernel.py's, the planning plan.py's, the shape/dtype rules
rules.py's, the entry points api.py and einsum.py, each with DeepGEMM's signature."""

from __future__ import annotations

from ...core.names import BLOCK_SCALED_KEYWORDS, EPILOGUE_IDENTITY, M_CONTIGUOUS_KEYWORDS, Op, alias, refused
from ...core.registry import Family
from . import plan, rules
from .kernel import PARAMS, gate, specs

_NO_K_GROUPED = "no block-scaled K-grouped kernel (BF16 K-grouped exists: k_grouped_bf16_gemm_tn_contiguous)"

FAMILY = Family(
    name="fp8_fp4_gemm_1d1d",
    params=PARAMS,
    specs=specs,
    gate=gate,
    quick_key=lambda s: (s.config, s.gemm_type, s.kind, s.encoding),
    pdl=True,
    names=(
        Op(
            "fp8_fp4_gemm_nt",
            does="fp8_fp4_gemm_nt (FP8, MXFP4, NVFP4, mixed)",
            keywords=BLOCK_SCALED_KEYWORDS,
            rule=rules.dense_rule,
            operands="e4m3 a [M,K], b [N,K]; UE8M0 scales 1x128 (b: 128x128 or 1x128) or 1x32 (MXFP8), or exact "
            "FP32 scales 1x128 (b: 128x128 or 1x128; docs/fp32_scales.md); or packed "
            "e2m1 [M,K/2], [N,K/2] with MXFP4 (UE8M0 1x32) / NVFP4 (UE4M3 1x16) scales; or mixed e4m3 x e2m1",
            output="bf16 or fp32",
            notes="`QMMA.SF` / `OMMA.SF` (block-scaled, full rate); split-K; C may alias D; K % 16 (FP8) or % 32 "
            "(FP4); NVFP4 per-tensor scales via `alpha`; NVFP4 scales on a mixed operand: `NotImplementedError`",
            signature="fp8_fp4_gemm_nt(a, b, d, c=None, recipe=None, recipe_a=None, recipe_b=None, "
            "compiled_dims='nk', disable_ue8m0_cast=False, alpha=None, epilogue=None)",
            plan_specs=plan.dense_specs,
        ),
        alias("fp8_gemm_nt", "fp8_fp4_gemm_nt"),
        alias("fp4_gemm_nt", "fp8_fp4_gemm_nt"),
        *(
            refused(
                f"fp8_fp4_gemm_{lay}",
                "the SM120 block-scaled kernel reads K-major operands (NT) only: pass "
                "contiguous transposes to fp8_fp4_gemm_nt",
            )
            for lay in ("nn", "tn", "tt")
        ),
        *(alias(f"fp8_gemm_{lay}", f"fp8_fp4_gemm_{lay}") for lay in ("nn", "tn", "tt")),
        Op(
            "m_grouped_fp8_fp4_gemm_nt_contiguous",
            does="m_grouped_fp8_fp4_gemm_nt_contiguous",
            keywords=BLOCK_SCALED_KEYWORDS + "; " + M_CONTIGUOUS_KEYWORDS,
            rule=rules.m_grouped_contiguous_rule,
            operands="FP8, FP4 or mixed; b [G,N,K(/2)], sfb per group",
            output="bf16",
            notes="same layout contract as BF16",
            signature="m_grouped_fp8_fp4_gemm_nt_contiguous(a, b, d, grouped_layout, recipe=None, recipe_a=None, "
            "recipe_b=None, compiled_dims='nk', disable_ue8m0_cast=False, use_psum_layout=False, "
            "ensure_zero_padding=True, expected_m_for_psum_layout=None, epilogue=None, *, "
            "check_layout=None, alpha=None)",
            plan_specs=plan.grouped_specs("m_contiguous"),
        ),
        alias("m_grouped_fp8_gemm_nt_contiguous", "m_grouped_fp8_fp4_gemm_nt_contiguous"),
        alias("m_grouped_fp4_gemm_nt_contiguous", "m_grouped_fp8_fp4_gemm_nt_contiguous"),
        refused(
            "m_grouped_fp8_fp4_gemm_nn_contiguous",
            "MN-major block-scaled B is not supported (NT only): use m_grouped_fp8_fp4_gemm_nt_contiguous",
        ),
        alias("m_grouped_fp8_gemm_nn_contiguous", "m_grouped_fp8_fp4_gemm_nn_contiguous"),
        Op(
            "m_grouped_fp8_fp4_gemm_nt_masked",
            does="m_grouped_fp8_fp4_gemm_nt_masked",
            keywords=BLOCK_SCALED_KEYWORDS,
            rule=rules.m_grouped_masked_rule,
            operands="FP8, FP4 or mixed; a [G,M,K(/2)]",
            output="bf16 [G,M,N]",
            notes="graph-safe with packed int32 scales",
            signature="m_grouped_fp8_fp4_gemm_nt_masked(a, b, d, masked_m, expected_m, recipe=None, recipe_a=None, "
            "recipe_b=None, compiled_dims='nk', disable_ue8m0_cast=False, epilogue=None, *, alpha=None)",
            plan_specs=plan.grouped_specs("m_masked"),
        ),
        alias("m_grouped_fp8_gemm_nt_masked", "m_grouped_fp8_fp4_gemm_nt_masked"),
        alias("m_grouped_fp4_gemm_nt_masked", "m_grouped_fp8_fp4_gemm_nt_masked"),
        alias("fp8_m_grouped_gemm_nt_masked", "m_grouped_fp8_fp4_gemm_nt_masked"),
        refused("k_grouped_fp8_gemm_tn_contiguous", _NO_K_GROUPED),
        refused("k_grouped_fp8_gemm_nt_contiguous", _NO_K_GROUPED),
        refused("k_grouped_fp4_gemm_nt_contiguous", _NO_K_GROUPED),
        Op(
            "fp8_einsum",
            does="fp8_einsum: bhr,hdr->bhd with recipe (1, 128, 128) (DeepGEMM's other two expressions "
            "are SM100-only there: NotImplementedError)",
            keywords="`c` honoured (d's dtype and strides); unpacked "
            "UE8M0 scales (float32 powers of two or float8_e8m0fnu), or float32 scales that are not powers of two on both "
            "sides (the exact FP32-scale kernel, since v0.8.8); FP8 output (`d` as (d, sfd), "
            "`use_128x4_sfd_layout`'s subject): NotImplementedError; " + EPILOGUE_IDENTITY,
            rule=rules.fp8_einsum_rule,
            operands="e4m3 x [b,h,r] (1x128 scales), y [h,d,r] (128x128 scales)",
            output="bf16 or fp32 [b,h,d] (+ c)",
            notes="`bhr,hdr->bhd`, recipe (1, 128, 128); one launch over all "
            "heads (3-D TMA maps, `QMMA.SF`); runtime shapes",
            signature="fp8_einsum(expr, a, b, d, c=None, recipe=(1, 128, 128), epilogue=None, "
            "use_128x4_sfd_layout=False)",
            plan_specs=plan.fp8_einsum_specs,
        ),
    ),
    api_modules=("api", "einsum"),
    sanitizers=("fp8_fp4_gemm",),
    benchmarks=("fp8_fp4_gemm",),
)
