"""3-D operand maps for batched calls (einsum's heads or batches): the operand is read as [K, rows, batch] with
the batch as the map's dim 2, so any strides that are multiples of 16 bytes work without copies. Shared by the
BF16 and block-scaled einsum modules."""

from __future__ import annotations

import torch

from .core.arith import round_up
from .core.limits import TMA_ALIGN
from .core.tma import tma_request


def check_batched_operand(name: str, t: torch.Tensor) -> None:
    """Unit last stride, TMA_ALIGN-aligned base, and every other stride of a dimension longer than 1 a
    multiple of TMA_ALIGN bytes (ValueError naming the rule otherwise)."""
    if t.stride(-1) != 1 and t.shape[-1] > 1:
        raise ValueError(
            f"{name} must have a contiguous last dimension (stride(-1) == 1), got strides {tuple(t.stride())}"
        )
    elem = t.element_size()
    if any(n > 1 and (s * elem) % TMA_ALIGN for s, n in zip(t.stride()[:-1], t.shape[:-1])):
        raise ValueError(
            f"{name} strides {tuple(t.stride())} must be multiples of {TMA_ALIGN} bytes "
            f"({TMA_ALIGN // elem} elements) except the last"
        )
    if t.data_ptr() % TMA_ALIGN:
        raise ValueError(f"{name} data pointer must be {TMA_ALIGN}-byte aligned for TMA, got {t.data_ptr():#x}")


def stride_bytes(t: torch.Tensor, dim: int) -> int:
    """A dimension's stride for the map; a size-1 dimension's is never used, so any multiple of 16 bytes does."""
    s = t.stride(dim) * t.element_size()
    return s if t.shape[dim] > 1 else max(TMA_ALIGN, round_up(s, TMA_ALIGN))


def batched_map(
    offset: int,
    dtype: str,
    t: torch.Tensor,
    inner_dim: int,
    rows_dim: int,
    batch_dim: int,
    box: tuple[int, int],
    swizzle: int,
) -> bytes:
    """The map of `t` with dims (inner, rows, batch) taken from the given tensor dimensions; box (inner, rows, 1).
    inner_dim is the contiguous one (K for K-major operands, N for an MN-major one)."""
    return tma_request(
        offset,
        dtype,
        t.data_ptr(),
        (t.shape[inner_dim], t.shape[rows_dim], t.shape[batch_dim]),
        (stride_bytes(t, rows_dim), stride_bytes(t, batch_dim)),
        (box[0], box[1], 1),
        swizzle,
    )
