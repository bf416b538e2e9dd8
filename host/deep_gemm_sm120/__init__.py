"""deep_gemm_sm120: DeepGEMM-style API for SM120 GEMM kernels, JIT-compiled from device_layer/.

Importing this package never initializes CUDA and works without a GPU, driver or toolkit.
"""
from __future__ import annotations

from . import arch, testing
from .api.bf16_gemm import bf16_gemm_nn, bf16_gemm_nt, bf16_gemm_tn, bf16_gemm_tt
from .api.bf16_grouped import (get_mk_alignment_for_contiguous_layout, k_grouped_bf16_gemm_tn_contiguous,
                               m_grouped_bf16_gemm_nt_contiguous, m_grouped_bf16_gemm_nt_masked)
from .api.fp8_fp4_gemm import (fp8_fp4_gemm_nt, fp8_gemm_nt, m_grouped_fp8_fp4_gemm_nt_contiguous,
                               m_grouped_fp8_fp4_gemm_nt_masked, m_grouped_fp8_gemm_nt_contiguous,
                               m_grouped_fp8_gemm_nt_masked)
from .device import get_num_sms, set_num_sms
from .quant import (ceil_to_ue8m0, get_mn_major_tma_aligned_packed_ue8m0_tensor, get_mn_major_tma_aligned_tensor,
                    pack_ue8m0_to_int, per_block_cast_to_fp8, per_token_cast_to_fp4, per_token_cast_to_fp8)
from .scale_layout import transform_sf_into_required_layout
from .support import is_supported

__version__ = "0.3.0"


def precompile(specs=None, targets=None) -> int:
    """Warm the JIT disk cache (no GPU needed). Defaults: every shipped kernel for the release targets."""
    from . import jit
    from .configs import all_specs

    return jit.precompile(specs if specs is not None else all_specs(),
                          targets if targets is not None else arch.RELEASE_TARGETS)


__all__ = ["fp8_gemm_nt", "fp8_fp4_gemm_nt", "m_grouped_fp8_gemm_nt_contiguous", "m_grouped_fp8_gemm_nt_masked",
           "m_grouped_fp8_fp4_gemm_nt_contiguous", "m_grouped_fp8_fp4_gemm_nt_masked",
           "transform_sf_into_required_layout", "bf16_gemm_nt", "bf16_gemm_nn", "bf16_gemm_tn", "bf16_gemm_tt", "m_grouped_bf16_gemm_nt_contiguous", "m_grouped_bf16_gemm_nt_masked",
           "k_grouped_bf16_gemm_tn_contiguous",
           "get_mk_alignment_for_contiguous_layout", "per_token_cast_to_fp8", "per_block_cast_to_fp8",
           "per_token_cast_to_fp4", "ceil_to_ue8m0", "pack_ue8m0_to_int", "get_mn_major_tma_aligned_tensor",
           "get_mn_major_tma_aligned_packed_ue8m0_tensor", "get_num_sms", "set_num_sms", "is_supported", "precompile", "arch", "testing"]
