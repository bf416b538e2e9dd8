"""DeepGEMM's block-scaled names on this family's kernels: positional orders and keywords as DeepGEMM declares
them (the Entry table is in __init__.py's declaration; policies: compat/policy.py)."""
from __future__ import annotations

from ...compat import policy
from ...compat.utils import get_mk_alignment_for_contiguous_layout
from . import FP4, api as _fp8, einsum as _fp8_einsum


def _pair(name: str, x):
    return policy.pair(name, x, FP4)


def _recipe(name, recipe, recipe_a, recipe_b, a, b):
    return policy.recipe(name, recipe, recipe_a, recipe_b, a, b, FP4)


def _prologue(name: str, epilogue, compiled_dims, disable_ue8m0_cast, alpha=None, scales: bool = False):
    """The shared keyword checks; returns the alpha to apply (from `alpha` or an Alpha epilogue)."""
    policy.compiled_dims(name, compiled_dims), policy.ue8m0_cast(name, disable_ue8m0_cast)
    return policy.epilogue(name, epilogue, alpha, scales)


def fp8_fp4_gemm_nt(a, b, d, c=None, recipe=None, recipe_a=None, recipe_b=None, compiled_dims="",
                    disable_ue8m0_cast=False, alpha=None, epilogue=None):
    name = "fp8_fp4_gemm_nt"
    alpha = _prologue(name, epilogue, compiled_dims, disable_ue8m0_cast, alpha, scales=True)
    a, b = _pair("a", a), _pair("b", b)
    _fp8.fp8_fp4_gemm_nt(a, b, d, c, recipe=_recipe(name, recipe, recipe_a, recipe_b, a[0], b[0]),
                         alpha=policy.alpha(alpha))


def _not_nt(name: str):
    def refuse(a, b, d, c=None, recipe=None, recipe_a=None, recipe_b=None, compiled_dims="",
               disable_ue8m0_cast=False, alpha=None, epilogue=None):
        raise NotImplementedError(f"{name}: the SM120 block-scaled kernel reads K-major operands only; call "
                                  f"fp8_fp4_gemm_nt with contiguous transposes of the MN-major operand(s)")
    refuse.__name__ = refuse.__qualname__ = name
    return refuse


fp8_fp4_gemm_nn, fp8_fp4_gemm_tn, fp8_fp4_gemm_tt = (_not_nt(f"fp8_fp4_gemm_{lay}") for lay in ("nn", "tn", "tt"))


def m_grouped_fp8_fp4_gemm_nt_contiguous(a, b, d, grouped_layout, recipe=None, recipe_a=None, recipe_b=None,
                                         compiled_dims="nk", disable_ue8m0_cast=False, use_psum_layout=False,
                                         ensure_zero_padding=True, expected_m_for_psum_layout=None, epilogue=None):
    name = "m_grouped_fp8_fp4_gemm_nt_contiguous"
    _prologue(name, epilogue, compiled_dims, disable_ue8m0_cast)
    psum = policy.flag(name, "use_psum_layout", use_psum_layout)
    zero = policy.flag(name, "ensure_zero_padding", ensure_zero_padding)
    a, b = _pair("a", a), _pair("b", b)
    _fp8.m_grouped_fp8_fp4_gemm_nt_contiguous(a, b, d, grouped_layout,
                                              recipe=_recipe(name, recipe, recipe_a, recipe_b, a[0], b[0]),
                                              use_psum_layout=psum)
    if zero and psum:
        policy.zero_psum_padding(d, grouped_layout, get_mk_alignment_for_contiguous_layout())


def m_grouped_fp8_fp4_gemm_nn_contiguous(a, b, d, grouped_layout, recipe=None, recipe_a=None, recipe_b=None,
                                         compiled_dims="nk", disable_ue8m0_cast=False, use_psum_layout=False,
                                         ensure_zero_padding=True, epilogue=None):
    raise NotImplementedError("m_grouped_fp8_fp4_gemm_nn_contiguous: the SM120 block-scaled kernel takes b as "
                              "[G, N, K] (K-major) only; use m_grouped_fp8_fp4_gemm_nt_contiguous")


def m_grouped_fp8_fp4_gemm_nt_masked(a, b, d, masked_m, expected_m, recipe=None, recipe_a=None, recipe_b=None,
                                     compiled_dims="nk", disable_ue8m0_cast=False, epilogue=None):
    name = "m_grouped_fp8_fp4_gemm_nt_masked"
    _prologue(name, epilogue, compiled_dims, disable_ue8m0_cast)
    a, b = _pair("a", a), _pair("b", b)
    _fp8.m_grouped_fp8_fp4_gemm_nt_masked(a, b, d, masked_m, expected_m,
                                          recipe=_recipe(name, recipe, recipe_a, recipe_b, a[0], b[0]))


def _no_k_grouped_block_scaled(name: str, default_recipe: tuple):
    def refuse(a, b, d, ks_cpu, grouped_layout, c=None, recipe=default_recipe, compiled_dims="mn",
               use_psum_layout=False, epilogue=None, *, use_padded_sf_layout=False):
        raise NotImplementedError(f"{name}: deep_gemm_sm120 has no block-scaled K-grouped GEMM "
                                  f"(k_grouped_bf16_gemm_tn_contiguous covers BF16)")
    refuse.__name__ = refuse.__qualname__ = name
    return refuse


k_grouped_fp8_gemm_tn_contiguous = _no_k_grouped_block_scaled("k_grouped_fp8_gemm_tn_contiguous", (1, 1, 128))
k_grouped_fp8_gemm_nt_contiguous = _no_k_grouped_block_scaled("k_grouped_fp8_gemm_nt_contiguous", (1, 1, 128))


def k_grouped_fp4_gemm_nt_contiguous(a, b, d, ks_cpu, grouped_layout, c=None, recipe=(1, 1, 32), compiled_dims="mn",
                                     use_psum_layout=False, epilogue=None):
    raise NotImplementedError("k_grouped_fp4_gemm_nt_contiguous: deep_gemm_sm120 has no block-scaled K-grouped GEMM")


def fp8_einsum(expr, a, b, d, c=None, recipe=(1, 128, 128), epilogue=None, use_128x4_sfd_layout=False):
    """DeepGEMM 2.8.1's order. `d` a tensor: BF16/FP32 output. `d` as (d, sfd) or an FP8 epilogue asks for FP8
    output with scales in sfd (128x4 blocks with use_128x4_sfd_layout): not provided (NotImplementedError)."""
    name = "fp8_einsum"
    policy.flag(name, "use_128x4_sfd_layout", use_128x4_sfd_layout)
    if isinstance(d, (tuple, list)):
        raise NotImplementedError(f"{name}(d=(d, sfd)): FP8 output with scale factors is not provided; SM120 "
                                  f"einsum writes BF16 or FP32 d")
    policy.epilogue(name, epilogue)
    _fp8_einsum.fp8_einsum(expr, a, b, d, c, recipe)
