"""Numeric helpers in DeepGEMM's conventions (`deep_gemm.testing` is this module): calc_diff and the small
helpers DeepGEMM's tests use. Test inputs and fixtures live in the repository's tests/, not here."""

from __future__ import annotations

import torch


def calc_diff(x: torch.Tensor, y: torch.Tensor) -> float:
    """1 - 2·Σxy / Σ(x² + y²) in float64: 0 for identical tensors, scale-invariant."""
    x, y = x.double(), y.double()
    denominator = (x * x + y * y).sum()
    if denominator == 0:
        return 0.0
    return float(1 - 2 * (x * y).sum() / denominator)


def count_bytes(*tensors) -> int:
    """Bytes held by the tensors (None and nested tuples/lists allowed), for bandwidth figures."""
    total = 0
    for t in tensors:
        if isinstance(t, (tuple, list)):
            total += count_bytes(*t)
        elif t is not None:
            total += t.numel() * t.element_size()
    return total


def assert_bitwise_equal(x: torch.Tensor, y: torch.Tensor, label: str = "") -> None:
    """Same shape, dtype and bytes (NaNs with equal payloads compare equal, unlike torch.equal)."""
    same = (
        x.shape == y.shape
        and x.dtype == y.dtype
        and torch.equal(x.contiguous().view(-1).view(torch.uint8), y.contiguous().view(-1).view(torch.uint8))
    )
    if not same:
        raise AssertionError(f"{label or 'tensors'} are not bitwise equal")


def get_arch_major() -> int:
    return torch.cuda.get_device_capability()[0]


__all__ = ["calc_diff", "count_bytes", "assert_bitwise_equal", "get_arch_major"]
