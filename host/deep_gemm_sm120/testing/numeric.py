"""Numerics helpers in DeepGEMM's conventions."""
from __future__ import annotations

import torch


def calc_diff(x: torch.Tensor, y: torch.Tensor) -> float:
    """1 - 2·Σxy / Σ(x² + y²) in float64: 0 for identical tensors, scale-invariant."""
    x, y = x.double(), y.double()
    denominator = (x * x + y * y).sum()
    if denominator == 0:
        return 0.0
    return float(1 - 2 * (x * y).sum() / denominator)
