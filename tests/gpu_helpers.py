"""Shared GPU-test plumbing: skip cleanly without CUDA (without initializing it), emulation on non-SM120."""

from __future__ import annotations

import pytest
import torch


def cuda_available() -> bool:
    # torch.cuda.is_available() queries the device count without creating a CUDA context
    return torch.cuda.is_available()


requires_cuda = pytest.mark.skipif(not cuda_available(), reason="needs a CUDA GPU")


def poison_like(t: torch.Tensor) -> torch.Tensor:
    return torch.full_like(t, float("nan"))


def contiguous_layout(sizes, align: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """M-grouped contiguous layout for group sizes: (per-row group ids with -1 padding up to `align`, group end
    rows for the psum form), both int32 on the GPU."""
    layout, ends, row = [], [], 0
    for gi, s in enumerate(sizes):
        layout += [gi] * s + [-1] * ((-s) % align)
        row += s
        ends.append(row)
        row += (-s) % align
    return (
        torch.tensor(layout, dtype=torch.int32, device="cuda"),
        torch.tensor(ends, dtype=torch.int32, device="cuda"),
    )
