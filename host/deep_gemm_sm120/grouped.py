"""Grouped-layout helpers shared by the M-grouped and K-grouped entry points of every GEMM family.

Contract (device_layer/layout/sm120_grouped_layout.cuh): every group of a contiguous layout starts at a
multiple of `get_mk_alignment_for_contiguous_layout()` rows. A boundary inside a block would make the
kernel use one expert's weights for another expert's tokens, so the host checks the layout before the launch
(one device reduction and one sync) unless told not to: `check_layout=False`, or automatically while a CUDA
graph is being captured (a sync is illegal there).
"""
from __future__ import annotations

import torch

from .core.limits import MK_ALIGNMENT_FOR_CONTIGUOUS_LAYOUT


def get_mk_alignment_for_contiguous_layout() -> int:
    """Rows: every group of an M-grouped contiguous layout must start at a multiple of this."""
    return MK_ALIGNMENT_FOR_CONTIGUOUS_LAYOUT


def require_shape(name: str, t: torch.Tensor, shape: tuple, what: str) -> None:
    if tuple(t.shape) != shape:
        raise ValueError(f"{name} must be {what} = {shape}, got {tuple(t.shape)}")


def rows_view(name: str, t: torch.Tensor) -> torch.Tensor:
    """[G, R, C] with contiguous rows -> the 2-D [G*R, C] view the kernels' descriptors use."""
    g, r, c = t.shape
    s0, s1, s2 = t.stride()
    if s2 != 1 and c > 1:
        raise ValueError(f"{name} must have a contiguous last dimension, got strides {(s0, s1, s2)}")
    if g > 1 and s0 != r * s1:
        raise ValueError(f"{name} groups must be stacked densely (stride(0) == {r} * stride(1)), "
                         f"got strides {(s0, s1, s2)}")
    return t.view(g * r, c) if t.is_contiguous() else t.as_strided((g * r, c), (s1, s2))


def check_contiguous_layout(layout: torch.Tensor, m: int, num_groups: int, psum: bool) -> None:
    """Raise ValueError unless `layout` obeys the contiguous-layout contract (works on any device)."""
    align = MK_ALIGNMENT_FOR_CONTIGUOUS_LAYOUT
    if not psum:
        blocks = layout.view(-1, align)
        first = blocks[:, :1]
        bad_range = (blocks < -1) | (blocks >= num_groups)
        mixed = (blocks != first) & (blocks != -1)          # two groups in one block
        late_start = (first == -1) & (blocks != -1)          # padding before real rows
        bad = (bad_range | mixed | late_start).any(dim=1)
        if bool(bad.any()):
            i = int(bad.nonzero()[0, 0])
            row = i * align
            if bool(bad_range[i].any()):
                raise ValueError(f"grouped_layout rows {row}..{row + align - 1} hold a group id outside "
                                 f"[-1, {num_groups}) (b has {num_groups} groups)")
            raise ValueError(f"grouped_layout rows {row}..{row + align - 1} mix groups or start with padding: "
                             f"each group must start at a multiple of get_mk_alignment_for_contiguous_layout() "
                             f"= {align} rows, with -1 padding only after a group's rows")
        return
    ends = layout.long()
    prev = torch.cat([ends.new_zeros(1), ends[:-1]])
    starts = (prev + align - 1) // align * align
    bad = (ends < prev) | ((ends < starts) & (ends != prev)) | (ends > m)
    if bool(bad.any()):
        g = int(bad.nonzero()[0, 0])
        raise ValueError(f"grouped_layout (psum) entry {g} = {int(ends[g])} is not a valid group end: ends must "
                         f"not decrease, each non-empty group starts at the previous end rounded up to {align}, "
                         f"and the last end is <= M = {m}")


def require_contiguous_layout_shape(grouped_layout: torch.Tensor, m: int, groups: int, psum: bool) -> None:
    """Shape / contiguity of a contiguous-layout index tensor (no device access). M's alignment is part of
    each family's shape rule."""
    if psum:
        require_shape("grouped_layout", grouped_layout, (groups,), "[G] (group end rows, psum layout)")
    else:
        require_shape("grouped_layout", grouped_layout, (m,), "[M] (one group id per row)")
    if not grouped_layout.is_contiguous():
        raise ValueError("grouped_layout must be contiguous")


def maybe_check_contiguous_layout(check: bool | None, grouped_layout: torch.Tensor, m: int, groups: int,
                                  psum: bool) -> None:
    """The layout contract check (one device reduction + sync), skipped while a CUDA graph is captured unless
    `check` forces it either way."""
    if check is None:
        check = not torch.cuda.is_current_stream_capturing()
    if check:
        check_contiguous_layout(grouped_layout, m, groups, psum)
