"""`deep_gemm.utils` on deep_gemm_sm120: the cast and layout helpers under DeepGEMM's names and signatures,
delegating to deep_gemm_sm120.quant (no second implementation)."""
from __future__ import annotations

import torch

from .. import quant
from ..core.limits import MK_ALIGNMENT_FOR_CONTIGUOUS_LAYOUT, TMA_ALIGN
from ..quant import ceil_to_ue8m0, pack_ue8m0_to_int

_alignment = [MK_ALIGNMENT_FOR_CONTIGUOUS_LAYOUT]


def ceil_div(x: int, y: int) -> int:
    return -(-x // y)


def align(x: int, y: int) -> int:
    return ceil_div(x, y) * y


def get_tma_aligned_size(mn: int, element_size: int) -> int:
    """MN rounded up so that MN elements fill whole 16-byte TMA units."""
    per = TMA_ALIGN // element_size if element_size <= TMA_ALIGN else 1
    return align(mn, per)


def get_mk_alignment_for_contiguous_layout() -> int:
    return _alignment[0]


def set_mk_alignment_for_contiguous_layout(new_value: int) -> None:
    """Larger alignments are fine as long as the kernels' 128-row blocks still never straddle two groups."""
    if not isinstance(new_value, int) or isinstance(new_value, bool):
        raise TypeError(f"the alignment must be an int, got {type(new_value).__name__}")
    if new_value <= 0 or new_value % MK_ALIGNMENT_FOR_CONTIGUOUS_LAYOUT:
        raise ValueError(f"the contiguous-layout alignment must be a positive multiple of "
                         f"{MK_ALIGNMENT_FOR_CONTIGUOUS_LAYOUT} on SM120, got {new_value}")
    _alignment[0] = new_value


def get_theoretical_mk_alignment_for_contiguous_layout(expected_m: int | None = None,
                                                      num_groups: int | None = None) -> int:
    """The alignment in force: our tiles do not depend on the expected group size."""
    return _alignment[0]


get_m_alignment_for_contiguous_layout = get_mk_alignment_for_contiguous_layout
get_k_alignment_for_contiguous_layout = get_mk_alignment_for_contiguous_layout


def get_mn_major_tma_aligned_tensor(sf: torch.Tensor) -> torch.Tensor:
    return quant.get_mn_major_tma_aligned_tensor(sf)


def get_mn_major_tma_aligned_packed_ue8m0_tensor(sf: torch.Tensor, psum_layout: torch.Tensor | None = None) -> torch.Tensor:
    if psum_layout is not None:
        raise NotImplementedError("get_mn_major_tma_aligned_packed_ue8m0_tensor(psum_layout=...) is not supported: "
                                  "SM120 scale layouts are per row, with no psum compaction")
    return quant.get_mn_major_tma_aligned_packed_ue8m0_tensor(sf)


def get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor(sf, grouped_layout, ks, gran_k, k_alignment=None,
                                                           use_psum_layout=False, use_padded_sf_layout=False):
    raise NotImplementedError("get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor: deep_gemm_sm120 has no "
                              "block-scaled K-grouped GEMM that reads this layout")


def _packed(sf: torch.Tensor, use_packed_ue8m0: bool, use_ue8m0: bool) -> torch.Tensor:
    if use_packed_ue8m0 and not use_ue8m0:
        raise ValueError("use_packed_ue8m0=True needs use_ue8m0=True (only powers of two pack into UE8M0)")
    return pack_ue8m0_to_int(sf) if use_packed_ue8m0 else sf


def per_token_cast_to_fp8(x: torch.Tensor, use_ue8m0: bool, gran_k: int = 128,
                          use_packed_ue8m0: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    q, sf = quant.per_token_cast_to_fp8(x, use_ue8m0, gran_k)
    return q, _packed(sf, use_packed_ue8m0, use_ue8m0)


def per_channel_cast_to_fp8(x: torch.Tensor, use_ue8m0: bool, gran_k: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    return quant.per_channel_cast_to_fp8(x, use_ue8m0, gran_k)


def per_block_cast_to_fp8(x: torch.Tensor, use_ue8m0: bool, gran_k: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    return quant.per_block_cast_to_fp8(x, use_ue8m0, gran_k)


def per_token_cast_to_fp4(x: torch.Tensor, use_ue8m0: bool, gran_k: int = 128,
                          use_packed_ue8m0: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """MXFP4 only: packed e2m1 with UE8M0 scales per 32 K (DeepGEMM's default gran_k of 128 is refused: SM120's
    FP4 MMAs read one scale per 32 or 16 elements)."""
    if gran_k != 32 or not use_ue8m0:
        raise NotImplementedError(f"per_token_cast_to_fp4 supports MXFP4 (gran_k=32, use_ue8m0=True), got gran_k="
                                  f"{gran_k}, use_ue8m0={use_ue8m0}; NVFP4 is quant.per_token_cast_to_fp4(x, 'nvfp4')")
    packed, sf, _ = quant.per_token_cast_to_fp4(x, "mxfp4")
    return packed, _packed(sf, use_packed_ue8m0, use_ue8m0)


__all__ = ["ceil_div", "align", "get_tma_aligned_size", "get_mk_alignment_for_contiguous_layout",
           "set_mk_alignment_for_contiguous_layout", "get_theoretical_mk_alignment_for_contiguous_layout",
           "get_m_alignment_for_contiguous_layout", "get_k_alignment_for_contiguous_layout",
           "get_mn_major_tma_aligned_tensor", "get_mn_major_tma_aligned_packed_ue8m0_tensor",
           "get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor", "ceil_to_ue8m0", "pack_ue8m0_to_int",
           "per_token_cast_to_fp8", "per_channel_cast_to_fp8", "per_block_cast_to_fp8", "per_token_cast_to_fp4"]
