"""`deep_gemm.legacy`: DeepGEMM's Triton BF16 grouped GEMMs for A100. Not provided: SM120 runs the same problems on
its own kernels; each name refuses naming the call to use instead."""

from __future__ import annotations

from ..core.names import make_refusal as refusal

INSTEAD = {
    "m_grouped_bf16_gemm_nt_contiguous_tl": "m_grouped_bf16_gemm_nt_contiguous",
    "m_grouped_bf16_gemm_nn_contiguous_tl": "m_grouped_bf16_gemm_nt_contiguous (b as [G, N, K])",
    "a_fused_m_grouped_bf16_gemm_nt_contiguous_tl": "m_grouped_bf16_gemm_nt_contiguous",
    "a_fused_m_grouped_bf16_gemm_nn_contiguous_tl": "m_grouped_bf16_gemm_nt_contiguous (b as [G, N, K])",
    "a_fused_k_grouped_bf16_gemm_tn_contiguous_tl": "k_grouped_bf16_gemm_tn_contiguous",
    "b_fused_k_grouped_bf16_gemm_tn_contiguous_tl": "k_grouped_bf16_gemm_tn_contiguous",
}
globals().update(
    {
        n: refusal(n, f"DeepGEMM's A100 Triton kernels are not part of deep_gemm_sm120; use {use}")
        for n, use in INSTEAD.items()
    }
)
__all__ = list(INSTEAD)
