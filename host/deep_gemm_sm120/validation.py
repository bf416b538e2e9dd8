"""Argument checks shared by the API: typed errors that name what was expected."""
from __future__ import annotations

import torch

TMA_ALIGN = 16  # bytes: TMA global addresses and row strides


def require_tensor(name: str, t) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    return t


def require_dtype(name: str, t: torch.Tensor, allowed: tuple[torch.dtype, ...], unsupported: bool = False) -> None:
    if t.dtype not in allowed:
        want = " or ".join(str(a) for a in allowed)
        exc = NotImplementedError if unsupported else TypeError
        raise exc(f"{name} must be {want}, got {t.dtype}")


def require_2d(name: str, t: torch.Tensor, what: str) -> None:
    if t.dim() != 2:
        raise ValueError(f"{name} must be 2-D {what}, got shape {tuple(t.shape)}")


def require_same_cuda_device(**tensors: torch.Tensor) -> torch.device:
    devs = {name: t.device for name, t in tensors.items()}
    for name, dev in devs.items():
        if dev.type != "cuda":
            raise ValueError(f"{name} must be on a CUDA device, got {dev}")
    first = next(iter(devs.values()))
    for name, dev in devs.items():
        if dev != first:
            listing = ", ".join(f"{n}={d}" for n, d in devs.items())
            raise ValueError(f"all tensors must be on one CUDA device, got {listing}")
    return first


def tma_row_stride_bytes(name: str, t: torch.Tensor) -> int:
    """Row-major [rows, cols] operand read by TMA: unit inner stride, 16-byte aligned base and row stride."""
    rows, cols = t.shape
    if t.stride(1) != 1 and cols > 1:
        raise ValueError(f"{name} must be row-major with a contiguous last dimension (stride(1) == 1), "
                         f"got strides {tuple(t.stride())}")
    elem = t.element_size()
    stride = t.stride(0) if rows > 1 else -(-cols * elem // TMA_ALIGN) * TMA_ALIGN // elem
    if rows > 1 and stride < cols:
        raise ValueError(f"{name} rows overlap (stride(0) = {stride} < {cols} columns)")
    if (stride * elem) % TMA_ALIGN:
        raise ValueError(f"{name} row stride must be a multiple of {TMA_ALIGN} bytes for TMA "
                         f"(got {stride * elem} bytes: the last dimension must be a multiple of {TMA_ALIGN // elem})")
    if t.data_ptr() % TMA_ALIGN:
        raise ValueError(f"{name} data pointer must be {TMA_ALIGN}-byte aligned for TMA, got {t.data_ptr():#x}")
    return stride * elem


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
