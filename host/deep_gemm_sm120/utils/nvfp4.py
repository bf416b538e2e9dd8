"""`deep_gemm.utils.nvfp4`: DeepGEMM 2.8.1's NVFP4 preparation helpers (its MegaMoE reference): per-16 UE4M3 block
scales under a caller-chosen tensor-wide scale, packed four per int32. Same results as DeepGEMM's on the same
input (see math.py for the e2m1 rounding)."""

from __future__ import annotations

import math as _math

import torch

from .math import _e2m1_codes, _pack_nibbles, _tensor, cast_back_from_fp4

_BLOCK = 16


def per_token_cast_to_nvfp4(x: torch.Tensor, global_scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, K] (K % 64 == 0) -> (packed e2m1 int8 [M, K/2], int32 [M, K/64] of four e4m3 block scales each):
    x ~= e2m1 * block scale * global_scale, block scale = e4m3(amax / (6 global_scale)) within [2**-9, 448]."""
    _tensor("x", x, dims=2)
    if x.shape[1] % 64:
        raise ValueError(f"K must be a multiple of 64 (four 16-element blocks per scale word), got {x.shape[1]}")
    if not isinstance(global_scale, (int, float)) or not 0 < global_scale < _math.inf:
        raise ValueError(f"global_scale must be a positive finite number, got {global_scale!r}")
    m, k = x.shape
    blocks = x.float().reshape(m, k // _BLOCK, _BLOCK)
    sf = (blocks.abs().amax(-1) / (6.0 * global_scale)).clamp(2.0**-9, 448).to(torch.float8_e4m3fn)
    codes = _e2m1_codes(blocks / (sf.float().unsqueeze(-1) * global_scale)).reshape(m, k)
    return _pack_nibbles(codes).contiguous(), sf.view(torch.int32).contiguous()


def cast_back_from_nvfp4(packed: torch.Tensor, sf: torch.Tensor, global_scale: float = 1.0) -> torch.Tensor:
    """per_token_cast_to_nvfp4's inverse (row-major int32-packed block scales) -> float32 [M, K]."""
    scales = sf.contiguous().view(torch.float8_e4m3fn).float() * global_scale
    return cast_back_from_fp4(packed, scales, gran_k=_BLOCK)


__all__ = ["per_token_cast_to_nvfp4", "cast_back_from_nvfp4"]
