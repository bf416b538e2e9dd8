"""DeepGEMM's BF16 names on this family's kernels: positional orders and keywords as DeepGEMM declares them
(the Entry table is in __init__.py's declaration; policies: compat/policy.py)."""
from __future__ import annotations

import torch

from ...compat import policy
from ...compat.utils import get_mk_alignment_for_contiguous_layout
from . import api as _bf16, einsum as _einsum, grouped as _grouped


def _dense(layout: str):
    ours = getattr(_bf16, f"bf16_gemm_{layout}")
    name = f"bf16_gemm_{layout}"

    def gemm(a, b, d, c=None, compiled_dims="", alpha=None, epilogue=None):
        policy.compiled_dims(name, compiled_dims), policy.epilogue(name, epilogue, alpha)
        ours(a, b, d, c)
    gemm.__name__ = gemm.__qualname__ = name
    gemm.__doc__ = ours.__doc__
    return gemm


bf16_gemm_nt, bf16_gemm_nn, bf16_gemm_tn, bf16_gemm_tt = (_dense(lay) for lay in ("nt", "nn", "tn", "tt"))


def m_grouped_bf16_gemm_nt_contiguous(a, b, d, grouped_layout, compiled_dims="nk", use_psum_layout=False,
                                      ensure_zero_padding=True, expected_m_for_psum_layout=None, epilogue=None):
    name = "m_grouped_bf16_gemm_nt_contiguous"
    policy.epilogue(name, epilogue), policy.compiled_dims(name, compiled_dims)
    psum = policy.flag(name, "use_psum_layout", use_psum_layout)
    zero = policy.flag(name, "ensure_zero_padding", ensure_zero_padding)
    _grouped.m_grouped_bf16_gemm_nt_contiguous(a, b, d, grouped_layout, use_psum_layout=psum)
    if zero and psum:
        policy.zero_psum_padding(d, grouped_layout, get_mk_alignment_for_contiguous_layout())


def m_grouped_bf16_gemm_nn_contiguous(a, b, d, grouped_layout, compiled_dims="nk", use_psum_layout=False,
                                      ensure_zero_padding=True, epilogue=None):
    raise NotImplementedError("m_grouped_bf16_gemm_nn_contiguous: M-grouped BF16 takes b as [G, N, K] (K-major) "
                              "only; use m_grouped_bf16_gemm_nt_contiguous")


def m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, expected_m, compiled_dims="nk", epilogue=None):
    name = "m_grouped_bf16_gemm_nt_masked"
    policy.epilogue(name, epilogue), policy.compiled_dims(name, compiled_dims)
    _grouped.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, expected_m)


def k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks_cpu=None, grouped_layout=None, c=None, compiled_dims="mn",
                                      use_psum_layout=False, epilogue=None, *, ks=None):
    """DeepGEMM 2.8.1's order (a, b, d, ks_cpu, grouped_layout, c): `ks_cpu` are the per-group K as CPU ints
    (sgl-deep-gemm calls it `ks`: accepted by keyword); `grouped_layout` (their device copy) is not needed here."""
    name = "k_grouped_bf16_gemm_tn_contiguous"
    if ks is not None and ks_cpu is not None:
        raise TypeError(f"{name}: pass the per-group K once (ks_cpu, or sgl-deep-gemm's ks)")
    ks = ks_cpu if ks is None else ks
    policy.epilogue(name, epilogue), policy.compiled_dims(name, compiled_dims)
    if policy.flag(name, "use_psum_layout", use_psum_layout):
        raise NotImplementedError(f"{name}(use_psum_layout=True) is not supported: pass the per-group K as ks")
    if ks is None:
        raise NotImplementedError(f"{name}: ks=None (K split only on the device) is not supported; pass the "
                                  f"per-group K as CPU ints")
    if grouped_layout is not None:  # DeepGEMM's device copy of ks: refuse anything else (e.g. c passed here)
        if not isinstance(grouped_layout, torch.Tensor) or grouped_layout.dtype != torch.int32:
            raise TypeError(f"{name}: grouped_layout (5th argument) is DeepGEMM's int32 [G] copy of ks, got "
                            f"{getattr(grouped_layout, 'dtype', type(grouped_layout).__name__)}; c is the 6th argument")
        if tuple(grouped_layout.shape) != (len(ks),):
            raise ValueError(f"{name}: grouped_layout must be [G] = ({len(ks)},), got {tuple(grouped_layout.shape)}")
    _grouped.k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks, c)


def einsum(expr, a, b, d, c=None, epilogue=None, *, use_cublaslt=False):
    """DeepGEMM 2.8.1's order; sgl-deep-gemm's `use_cublaslt` by keyword."""
    policy.epilogue("einsum", epilogue)
    if use_cublaslt:  # DeepGEMM's comparison path: cuBLAS through torch, same contract
        if c is not None:
            raise ValueError("einsum: use_cublaslt takes no c (DeepGEMM's contract)")
        d.copy_(torch.einsum(expr, a, b))
        return
    _einsum.einsum(expr, a, b, d, c)
