"""`deep_gemm.mega`: DeepGEMM's MegaMoE (fused dispatch + expert GEMMs + combine over symmetric memory), SM100 and
SM90 only upstream. Every name refuses with the compat table's reason (the same objects as the top-level names);
SM120 serving stacks run MoE through the M-grouped GEMMs."""

from __future__ import annotations

from .refusals import declared_refusal

NAMES = (
    "SymmBuffer",
    "NVFP4SymmBuffer",
    "get_symm_buffer_for_mega_moe",
    "transform_weights_for_mega_moe",
    "transform_scales_for_mega_moe",
    "fp8_fp4_mega_moe",
    "fp4_fp4_mega_moe",
    "bf16_mega_moe",
    "nvfp4_mega_moe",
    "get_block_m_for_mega_moe",
    "get_block_m_for_nvfp4_mega_moe",
    "mega_moe_pre_dispatch",
    "mega_moe_pre_dispatch_sm90",
)

globals().update({n: declared_refusal(n) for n in NAMES})
__all__ = list(NAMES)
