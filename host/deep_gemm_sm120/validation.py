"""Tensor-level argument checks shared by the API (types, dims, strides, pointers). Shape and dtype rules of each
op live in its family declaration (core/rules.py has the error-type rule); the device prologue is launch.py's."""
from __future__ import annotations

import torch

from .core.limits import TMA_ALIGN
from .core.rules import dtype_name, require_dtype


def require_tensor(name: str, t) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    return t


def require_int32(name: str, t) -> torch.Tensor:
    """An index tensor (grouped layout, masked_m, ...): a torch.Tensor of int32 (TypeError otherwise)."""
    require_dtype(name, dtype_name(require_tensor(name, t).dtype), ("int32",))
    return t


def require_2d(name: str, t: torch.Tensor, what: str) -> None:
    if t.dim() != 2:
        raise ValueError(f"{name} must be 2-D {what}, got shape {tuple(t.shape)}")


def tma_operand(name: str, t: torch.Tensor) -> tuple[int | None, int]:
    """A row-major [rows, cols] operand read by TMA: unit inner stride, no overlapping rows, 16-byte aligned base.
    Returns (row stride in elements for the family rule, None for a single row; row stride in bytes for the
    descriptor, padded to 16 bytes for a single row). The 16-byte stride rule itself is the family rule's."""
    rows, cols = t.shape
    s0, s1 = t.stride()
    if s1 != 1 and cols > 1:
        raise ValueError(f"{name} must be row-major with a contiguous last dimension (stride(1) == 1), "
                         f"got strides {(s0, s1)}")
    elem = t.element_size()
    if rows > 1 and s0 < cols:
        raise ValueError(f"{name} rows overlap (stride(0) = {s0} < {cols} columns)")
    if t.data_ptr() % TMA_ALIGN:
        raise ValueError(f"{name} data pointer must be {TMA_ALIGN}-byte aligned for TMA, got {t.data_ptr():#x}")
    if rows > 1:
        return s0, s0 * elem
    return None, -(-cols * elem // TMA_ALIGN) * TMA_ALIGN


def output_row_stride(name: str, t: torch.Tensor) -> int:
    """Row-major output written by the epilogue: unit inner stride, 16-byte aligned base."""
    if t.stride(1) != 1 and t.shape[1] > 1:
        raise ValueError(f"{name} must have a contiguous last dimension (stride(1) == 1), got strides "
                         f"{tuple(t.stride())}")
    if t.shape[0] > 1 and t.stride(0) < t.shape[1]:
        raise ValueError(f"{name} rows overlap (stride(0) = {t.stride(0)} < {t.shape[1]} columns)")
    if t.data_ptr() % TMA_ALIGN:
        raise ValueError(f"{name} data pointer must be {TMA_ALIGN}-byte aligned, got {t.data_ptr():#x}")
    return t.stride(0) if t.shape[0] > 1 else t.shape[1]


def write_empty_reduction(d: torch.Tensor, c: torch.Tensor | None) -> None:
    """d = c (+ nothing) for a product with an empty reduction (K = 0 or no batches): TMA cannot describe a
    zero-extent operand, so no kernel runs. Zeros without c; a copy of c unless c is d itself."""
    if c is None:
        d.zero_()
    elif c.data_ptr() != d.data_ptr():
        d.copy_(c)
