"""`deep_gemm.utils.layout`: TMA alignment, the contiguous-layout alignment and the MN-major scale layouts, under
DeepGEMM 2.8.1's names (its module re-exports them from `_C`), on deep_gemm_sm120's implementations."""

from __future__ import annotations

import torch

from .. import quant
from ..core.limits import MK_ALIGNMENT_FOR_CONTIGUOUS_LAYOUT, TMA_ALIGN
from ..scale_layout import mn_major, pack_scale_bytes
from .math import align

_alignment = [MK_ALIGNMENT_FOR_CONTIGUOUS_LAYOUT]


def get_tma_aligned_size(mn: int, element_size: int) -> int:
    """MN rounded up so that MN elements fill whole 16-byte TMA units."""
    per = TMA_ALIGN // element_size if element_size <= TMA_ALIGN else 1
    return align(mn, per)


def get_mk_alignment_for_contiguous_layout() -> int:
    return _alignment[0]


def set_mk_alignment_for_contiguous_layout(value: int | None = None, *, new_value: int | None = None) -> None:
    """Larger alignments are fine as long as the kernels' 128-row blocks still never straddle two groups.
    `value` is DeepGEMM 2.8.1's parameter name; sgl-deep-gemm's `new_value` is accepted by keyword."""
    if (value is None) == (new_value is None):
        raise TypeError("set_mk_alignment_for_contiguous_layout takes one alignment (value, or new_value)")
    new_value = value if new_value is None else new_value
    if not isinstance(new_value, int) or isinstance(new_value, bool):
        raise TypeError(f"the alignment must be an int, got {type(new_value).__name__}")
    if new_value <= 0 or new_value % MK_ALIGNMENT_FOR_CONTIGUOUS_LAYOUT:
        raise ValueError(
            f"the contiguous-layout alignment must be a positive multiple of "
            f"{MK_ALIGNMENT_FOR_CONTIGUOUS_LAYOUT} on SM120, got {new_value}"
        )
    _alignment[0] = new_value


def get_theoretical_mk_alignment_for_contiguous_layout(
    expected_m: int | None = None, num_groups: int | None = None
) -> int:
    """The alignment in force: our tiles do not depend on the expected group size."""
    return _alignment[0]


get_m_alignment_for_contiguous_layout = get_mk_alignment_for_contiguous_layout
get_k_alignment_for_contiguous_layout = get_mk_alignment_for_contiguous_layout


def get_mn_major_tma_aligned_tensor(sf: torch.Tensor) -> torch.Tensor:
    return quant.get_mn_major_tma_aligned_tensor(sf)


def get_mn_major_tma_aligned_packed_ue8m0_tensor(
    sf: torch.Tensor, psum_layout: torch.Tensor | None = None
) -> torch.Tensor:
    if psum_layout is not None:
        raise NotImplementedError(
            "get_mn_major_tma_aligned_packed_ue8m0_tensor(psum_layout=...) is not supported: "
            "SM120 scale layouts are per row, with no psum compaction"
        )
    # DeepGEMM's bytes: K padding scales are 0 (quant's own packer writes 1.0 there; both scale nothing)
    return mn_major(pack_scale_bytes(quant.ue8m0_exponent_bytes(sf)))


def get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor(
    sf, grouped_layout, ks, gran_k, k_alignment=None, use_psum_layout=False, use_padded_sf_layout=False
):
    raise NotImplementedError(
        "get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor: deep_gemm_sm120 has no "
        "block-scaled K-grouped GEMM that reads this layout"
    )


__all__ = [
    "get_tma_aligned_size",
    "get_mn_major_tma_aligned_tensor",
    "get_mn_major_tma_aligned_packed_ue8m0_tensor",
    "get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor",
    "set_mk_alignment_for_contiguous_layout",
    "get_mk_alignment_for_contiguous_layout",
    "get_theoretical_mk_alignment_for_contiguous_layout",
    "get_m_alignment_for_contiguous_layout",
    "get_k_alignment_for_contiguous_layout",
]
