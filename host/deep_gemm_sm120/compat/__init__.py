"""DeepGEMM's Python surface (`import deep_gemm`) on deep_gemm_sm120's kernels.

Serving stacks call DeepGEMM by module and symbol name; this module has those names, argument orders and
keywords (as sgl-deep-gemm 0.2.5 and DeepGEMM main declare them). Each name is implemented on our kernels,
aliased, or raises NotImplementedError saying what is missing and which issue brings it; every keyword is
honoured, accepted with a documented meaning, or refused by name. The table: docs/deep_gemm_compat.md
(generated from compat/surface.py).

Reach it as `deep_gemm` without patching a stack: set DG_SM120_AS_DEEP_GEMM=1 (a real DeepGEMM, if installed,
still wins) or =force, or call `deep_gemm_sm120.compat.install()`. DeepGEMM's DG_JIT_* variables are mapped to
ours on import (see _ENV_MAP).
"""
from __future__ import annotations

import os

import torch

from .. import launch as _launch
from ..device import get_num_sms, set_num_sms
from ..families.bf16_gemm import api as _bf16, grouped as _bf16_grouped
from ..families.fp8_fp4_gemm_1d1d import api as _fp8
from ..families.tf32_hc_prenorm_gemm import api as _hc
from ..families.bf16_gemm import einsum as _einsum
from ..families.fp8_fp4_gemm_1d1d import einsum as _fp8_einsum
from ..families.mqa_logits import api as _mqa
from ..families.paged_mqa_logits import api as _paged
from ..families.paged_mqa_logits import metadata as _paged_meta
from ..families.sparse_mqa_logits import api as _sparse
from ..families.sparse_mqa_logits import metadata as _sparse_meta
from ..families.fp8_fp4_gemm_1d1d import FP4 as _FP4_NAMES
from ..core.rules import dtype_name as _dtype_name
from ..scale_layout import transform_sf_into_required_layout as _transform_sf
from . import testing, utils
from .testing import calc_diff
from .utils import *  # noqa: F401,F403 - deep_gemm re-exports its utils at top level

# DeepGEMM's variables -> ours (set only when ours is unset).
_ENV_MAP = {"DG_JIT_CACHE_DIR": "DG_SM120_JIT_CACHE_DIR", "DG_JIT_NVCC_COMPILER": "DG_SM120_NVCC",
            "DG_JIT_DEBUG": "DG_SM120_JIT_DEBUG", "DG_JIT_PRINT_COMPILER_COMMAND": "DG_SM120_JIT_DEBUG",
            "DG_JIT_PTXAS_VERBOSE": "DG_SM120_JIT_DEBUG"}


def _map_environment() -> None:
    for theirs, ours in _ENV_MAP.items():
        if os.environ.get(theirs) and not os.environ.get(ours):
            os.environ[ours] = os.environ[theirs]


_map_environment()


def install(force: bool = False):
    """Make `import deep_gemm` give this module, from code (the environment switch does it at start-up).
    A real DeepGEMM that is installed keeps the name unless force=True."""
    import _deep_gemm_sm120_hook

    return _deep_gemm_sm120_hook.install(force=force)


# ---------------------------------------------------------------- keyword policy (one place)

def _no_epilogue(name: str, epilogue) -> None:
    if epilogue is not None:
        raise NotImplementedError(f"{name}(epilogue=...) is not supported: deep_gemm_sm120 has no fused epilogues")


def _compiled_dims(name: str, compiled_dims) -> None:
    """A JIT hint (which dimensions DeepGEMM compiles as constants): accepted, never changes a result here."""
    if not isinstance(compiled_dims, str):
        raise TypeError(f"{name}(compiled_dims=...) must be a str, got {type(compiled_dims).__name__}")


def _flag(name: str, keyword: str, value) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name}({keyword}=...) must be a bool, got {type(value).__name__}")
    return value


def _pair(name: str, x):
    """(data, scale factors), or a bare tensor meaning unit scales (DeepGEMM passes a 1.0 scale then)."""
    if isinstance(x, (tuple, list)):
        if len(x) != 2:
            raise TypeError(f"{name} must be a (tensor, scale factors) pair or a tensor, got a {len(x)}-sequence")
        return tuple(x)
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a (tensor, scale factors) pair or a tensor, got {type(x).__name__}")
    fp4 = _dtype_name(x.dtype) in _FP4_NAMES
    k = x.shape[-1] * (2 if fp4 else 1)
    gran = 32 if fp4 else 128
    return x, torch.ones(*x.shape[:-1], -(-k // gran), dtype=torch.float32, device=x.device)  # 2**0: exact


def _recipe(name: str, recipe, recipe_a, recipe_b, a, b):
    """DeepGEMM's recipe forms -> ours: (gran_m, gran_n, gran_k), or per operand (gran_mn, gran_k) pairs."""
    if recipe_a is None and recipe_b is None:
        return recipe
    if recipe is not None:
        raise ValueError(f"{name}: pass recipe or recipe_a/recipe_b, not both")
    if recipe_a is None or recipe_b is None or len(recipe_a) != 2 or len(recipe_b) != 2:
        raise ValueError(f"{name}: recipe_a and recipe_b are (gran_mn, gran_k) pairs, given together; got "
                         f"{recipe_a!r} and {recipe_b!r}")
    (ma, ka), (nb, kb) = recipe_a, recipe_b
    if ka == kb:
        return (ma, nb, ka)
    a4, b4 = (_dtype_name(t.dtype) in _FP4_NAMES for t in (a, b))
    if a4 != b4:  # mixed e4m3 x e2m1: our recipe's gran_k is the e4m3 side's; the e2m1 side is 1x32
        g8, g4 = (kb, ka) if a4 else (ka, kb)
        if g4 != 32:
            raise NotImplementedError(f"{name}: the packed FP4 operand of a mixed GEMM takes 1x32 scales, got 1x{g4}")
        return (ma, nb, g8)
    raise NotImplementedError(f"{name}: a and b scale granularities differ (recipe_a {recipe_a}, recipe_b "
                              f"{recipe_b}); SM120 kernels use one K granularity for both")


def _alpha(alpha):
    return 1.0 if alpha is None else alpha


def _ue8m0_cast(name: str, disable_ue8m0_cast) -> None:
    """Either way FP32 scales must already be powers of two: we never reinterpret them (ValueError otherwise,
    from the scale packing), so True and False compute the same, exact result."""
    _flag(name, "disable_ue8m0_cast", disable_ue8m0_cast)


# ---------------------------------------------------------------- block-scaled GEMMs

def fp8_fp4_gemm_nt(a, b, d, c=None, recipe=None, recipe_a=None, recipe_b=None, compiled_dims="",
                    disable_ue8m0_cast=False, alpha=None, epilogue=None):
    name = "fp8_fp4_gemm_nt"
    _no_epilogue(name, epilogue), _compiled_dims(name, compiled_dims), _ue8m0_cast(name, disable_ue8m0_cast)
    a, b = _pair("a", a), _pair("b", b)
    _fp8.fp8_fp4_gemm_nt(a, b, d, c, recipe=_recipe(name, recipe, recipe_a, recipe_b, a[0], b[0]),
                         alpha=_alpha(alpha))


fp8_gemm_nt = fp4_gemm_nt = fp8_fp4_gemm_nt


def _not_nt(name: str):
    def refuse(a, b, d, c=None, recipe=None, recipe_a=None, recipe_b=None, compiled_dims="",
               disable_ue8m0_cast=False, alpha=None, epilogue=None):
        raise NotImplementedError(f"{name}: the SM120 block-scaled kernel reads K-major operands only; call "
                                  f"fp8_fp4_gemm_nt with contiguous transposes of the MN-major operand(s)")
    refuse.__name__ = refuse.__qualname__ = name
    return refuse


fp8_fp4_gemm_nn, fp8_fp4_gemm_tn, fp8_fp4_gemm_tt = (_not_nt(f"fp8_fp4_gemm_{lay}") for lay in ("nn", "tn", "tt"))
fp8_gemm_nn, fp8_gemm_tn, fp8_gemm_tt = fp8_fp4_gemm_nn, fp8_fp4_gemm_tn, fp8_fp4_gemm_tt


def _zero_psum_padding(d: torch.Tensor, ends: torch.Tensor) -> None:
    """ensure_zero_padding with a psum layout: rows between a group's end and the next group's aligned start,
    and rows past the last end, become 0. Device-side (no sync), so it stays legal in CUDA-graph capture."""
    m = d.shape[0]
    if m == 0 or ends.numel() == 0:
        return
    align_rows = utils.get_mk_alignment_for_contiguous_layout()
    rows = torch.arange(m, device=d.device)
    ends64 = ends.long()
    g = torch.searchsorted(ends64, rows, right=True)
    prev = torch.cat([ends64.new_zeros(1), ends64])[g]
    start = (prev + align_rows - 1) // align_rows * align_rows
    d.masked_fill_(((g >= ends64.numel()) | (rows < start)).unsqueeze(1), 0)


def m_grouped_fp8_fp4_gemm_nt_contiguous(a, b, d, grouped_layout, recipe=None, recipe_a=None, recipe_b=None,
                                         compiled_dims="nk", disable_ue8m0_cast=False, use_psum_layout=False,
                                         ensure_zero_padding=True, expected_m_for_psum_layout=None, epilogue=None):
    name = "m_grouped_fp8_fp4_gemm_nt_contiguous"
    _no_epilogue(name, epilogue), _compiled_dims(name, compiled_dims), _ue8m0_cast(name, disable_ue8m0_cast)
    psum, zero = _flag(name, "use_psum_layout", use_psum_layout), _flag(name, "ensure_zero_padding", ensure_zero_padding)
    a, b = _pair("a", a), _pair("b", b)
    _fp8.m_grouped_fp8_fp4_gemm_nt_contiguous(a, b, d, grouped_layout,
                                              recipe=_recipe(name, recipe, recipe_a, recipe_b, a[0], b[0]),
                                              use_psum_layout=psum)
    if zero and psum:
        _zero_psum_padding(d, grouped_layout)


m_grouped_fp8_gemm_nt_contiguous = m_grouped_fp4_gemm_nt_contiguous = m_grouped_fp8_fp4_gemm_nt_contiguous


def m_grouped_fp8_fp4_gemm_nn_contiguous(a, b, d, grouped_layout, recipe=None, recipe_a=None, recipe_b=None,
                                         compiled_dims="nk", disable_ue8m0_cast=False, use_psum_layout=False,
                                         ensure_zero_padding=True, epilogue=None):
    raise NotImplementedError("m_grouped_fp8_fp4_gemm_nn_contiguous: the SM120 block-scaled kernel takes b as "
                              "[G, N, K] (K-major) only; use m_grouped_fp8_fp4_gemm_nt_contiguous")


m_grouped_fp8_gemm_nn_contiguous = m_grouped_fp8_fp4_gemm_nn_contiguous


def m_grouped_fp8_fp4_gemm_nt_masked(a, b, d, masked_m, expected_m, recipe=None, recipe_a=None, recipe_b=None,
                                     compiled_dims="nk", disable_ue8m0_cast=False, epilogue=None):
    name = "m_grouped_fp8_fp4_gemm_nt_masked"
    _no_epilogue(name, epilogue), _compiled_dims(name, compiled_dims), _ue8m0_cast(name, disable_ue8m0_cast)
    a, b = _pair("a", a), _pair("b", b)
    _fp8.m_grouped_fp8_fp4_gemm_nt_masked(a, b, d, masked_m, expected_m,
                                          recipe=_recipe(name, recipe, recipe_a, recipe_b, a[0], b[0]))


m_grouped_fp8_gemm_nt_masked = m_grouped_fp4_gemm_nt_masked = m_grouped_fp8_fp4_gemm_nt_masked
fp8_m_grouped_gemm_nt_masked = m_grouped_fp8_fp4_gemm_nt_masked


def _no_k_grouped_block_scaled(name: str, default_recipe: tuple):
    def refuse(a, b, d, ks, grouped_layout, c=None, recipe=default_recipe, compiled_dims="mn",
               use_psum_layout=False, use_padded_sf_layout=False, epilogue=None):
        raise NotImplementedError(f"{name}: deep_gemm_sm120 has no block-scaled K-grouped GEMM "
                                  f"(k_grouped_bf16_gemm_tn_contiguous covers BF16)")
    refuse.__name__ = refuse.__qualname__ = name
    return refuse


k_grouped_fp8_gemm_tn_contiguous = _no_k_grouped_block_scaled("k_grouped_fp8_gemm_tn_contiguous", (1, 1, 128))
k_grouped_fp8_gemm_nt_contiguous = _no_k_grouped_block_scaled("k_grouped_fp8_gemm_nt_contiguous", (1, 1, 128))


def k_grouped_fp4_gemm_nt_contiguous(a, b, d, ks, grouped_layout, c=None, recipe=(1, 1, 32), compiled_dims="mn",
                                     use_psum_layout=False, epilogue=None):
    raise NotImplementedError("k_grouped_fp4_gemm_nt_contiguous: deep_gemm_sm120 has no block-scaled K-grouped GEMM")


# ---------------------------------------------------------------- BF16 GEMMs

def _bf16_dense(layout: str):
    ours = getattr(_bf16, f"bf16_gemm_{layout}")
    name = f"bf16_gemm_{layout}"

    def gemm(a, b, d, c=None, compiled_dims="", alpha=None, epilogue=None):
        _no_epilogue(name, epilogue), _compiled_dims(name, compiled_dims)
        if alpha is not None and alpha != 1:
            raise NotImplementedError(f"{name}(alpha={alpha!r}): the BF16 kernels compute d = c + a @ b without a "
                                      f"scale; only alpha None or 1")
        ours(a, b, d, c)
    gemm.__name__ = gemm.__qualname__ = name
    gemm.__doc__ = ours.__doc__
    return gemm


bf16_gemm_nt, bf16_gemm_nn, bf16_gemm_tn, bf16_gemm_tt = (_bf16_dense(lay) for lay in ("nt", "nn", "tn", "tt"))


def m_grouped_bf16_gemm_nt_contiguous(a, b, d, grouped_layout, compiled_dims="nk", use_psum_layout=False,
                                      ensure_zero_padding=True, expected_m_for_psum_layout=None, epilogue=None):
    name = "m_grouped_bf16_gemm_nt_contiguous"
    _no_epilogue(name, epilogue), _compiled_dims(name, compiled_dims)
    psum, zero = _flag(name, "use_psum_layout", use_psum_layout), _flag(name, "ensure_zero_padding", ensure_zero_padding)
    _bf16_grouped.m_grouped_bf16_gemm_nt_contiguous(a, b, d, grouped_layout, use_psum_layout=psum)
    if zero and psum:
        _zero_psum_padding(d, grouped_layout)


def m_grouped_bf16_gemm_nn_contiguous(a, b, d, grouped_layout, compiled_dims="nk", use_psum_layout=False,
                                      ensure_zero_padding=True, epilogue=None):
    raise NotImplementedError("m_grouped_bf16_gemm_nn_contiguous: M-grouped BF16 takes b as [G, N, K] (K-major) "
                              "only; use m_grouped_bf16_gemm_nt_contiguous")


def m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, expected_m, compiled_dims="nk", epilogue=None):
    name = "m_grouped_bf16_gemm_nt_masked"
    _no_epilogue(name, epilogue), _compiled_dims(name, compiled_dims)
    _bf16_grouped.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, expected_m)


bf16_m_grouped_gemm_nt_masked = m_grouped_bf16_gemm_nt_masked


def k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks, grouped_layout=None, c=None, compiled_dims="mn",
                                      use_psum_layout=False, epilogue=None):
    """DeepGEMM's order (a, b, d, ks, grouped_layout, c): `ks` are the per-group K as CPU ints; `grouped_layout`
    (their device copy in DeepGEMM) is not needed here."""
    name = "k_grouped_bf16_gemm_tn_contiguous"
    _no_epilogue(name, epilogue), _compiled_dims(name, compiled_dims)
    if _flag(name, "use_psum_layout", use_psum_layout):
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
    _bf16_grouped.k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks, c)


# ---------------------------------------------------------------- cuBLAS(Lt) names, through torch

def _cublas(layout: str):
    name = f"cublaslt_gemm_{layout}"

    def gemm(a, b, d, c=None):
        """d = a' @ b' (+ c) through torch (cuBLAS): fp32 accumulation, for comparisons."""
        lhs = a.T if layout[0] == "t" else a
        rhs = b if layout[1] == "n" else b.T
        out = torch.matmul(lhs.float(), rhs.float()) if d.dtype == torch.float32 else torch.matmul(lhs, rhs)
        if c is not None:
            out = out + c
        d.copy_(out)
    gemm.__name__ = gemm.__qualname__ = name
    return gemm


cublaslt_gemm_nt, cublaslt_gemm_nn, cublaslt_gemm_tn, cublaslt_gemm_tt = (_cublas(lay) for lay in ("nt", "nn", "tn", "tt"))


def cublaslt_nvfp4_gemm_nt(a, b, d, c=None):
    raise NotImplementedError("cublaslt_nvfp4_gemm_nt is not provided; fp8_fp4_gemm_nt runs NVFP4 on SM120 kernels")


# ---------------------------------------------------------------- hyper-connection

def tf32_hc_prenorm_gemm(a, b, d, sqr_sum, num_splits=None):
    _hc.tf32_hc_prenorm_gemm(a, b, d, sqr_sum, num_splits)


def einsum(expr, a, b, d, c=None, use_cublaslt=False, epilogue=None):
    if epilogue is not None:
        raise NotImplementedError("einsum: epilogue other than None is not supported")
    if use_cublaslt:  # DeepGEMM's comparison path: cuBLAS through torch, same contract
        if c is not None:
            raise ValueError("einsum: use_cublaslt takes no c (DeepGEMM's contract)")
        d.copy_(torch.einsum(expr, a, b))
        return
    _einsum.einsum(expr, a, b, d, c)


def fp8_einsum(expr, a, b, d, c=None, recipe=(1, 128, 128), epilogue=None):
    if epilogue is not None:
        raise NotImplementedError("fp8_einsum: epilogue other than None is not supported")
    _fp8_einsum.fp8_einsum(expr, a, b, d, c, recipe)


_MQA_REQUIRED = ("q", "kv", "weights", "cu_seq_len_k_start", "cu_seq_len_k_end")
_MQA_OPTIONAL = ("clean_logits", "max_seqlen_k", "logits_dtype", "schedule_meta")


def mqa_logits_arguments(args: tuple, kwargs: dict) -> dict:
    """Both published forms of fp8_fp4_mqa_logits / fp8_mqa_logits, without ambiguity:
    DeepGEMM main: (q, kv, weights, ks, ke, clean_logits=True, max_seqlen_k=0, logits_dtype=float32)
    sgl-deep-gemm 0.2.5: (q, kv, weights, ks, ke, max_seqlen_k, schedule_meta=None)
    A bool 6th positional is clean_logits, an int is max_seqlen_k: an int is never read as clean_logits."""
    kwargs = dict(kwargs)
    unknown = sorted(set(kwargs) - set(_MQA_REQUIRED) - set(_MQA_OPTIONAL))
    if unknown:
        raise TypeError(f"mqa_logits got unexpected keyword(s) {unknown}")
    out = dict(zip(_MQA_REQUIRED, args))
    for name in _MQA_REQUIRED[len(out):]:
        if name not in kwargs:
            raise TypeError(f"mqa_logits is missing {name}")
        out[name] = kwargs.pop(name)
    tail = list(args[len(_MQA_REQUIRED):])
    if tail:
        if isinstance(tail[0], bool):      # DeepGEMM main
            order = ("clean_logits", "max_seqlen_k", "logits_dtype")
        elif isinstance(tail[0], int):     # sgl-deep-gemm 0.2.5
            order = ("max_seqlen_k", "schedule_meta")
        else:
            raise TypeError(f"mqa_logits: the 6th argument is clean_logits (bool) or max_seqlen_k (int), got "
                            f"{type(tail[0]).__name__}")
        if len(tail) > len(order):
            raise TypeError("mqa_logits got too many positional arguments")
        out.update(zip(order, tail))
    for name, value in kwargs.items():
        if name in out:
            raise TypeError(f"mqa_logits got multiple values for {name}")
        out[name] = value
    explicit_clean = "clean_logits" in out
    out.setdefault("max_seqlen_k", 0)
    out.setdefault("logits_dtype", torch.float32)
    out.setdefault("schedule_meta", None)
    if isinstance(out["max_seqlen_k"], bool) or not isinstance(out["max_seqlen_k"], int):
        raise TypeError(f"max_seqlen_k must be an int, got {type(out['max_seqlen_k']).__name__}")
    # compressed logits ([S, max_seqlen_k]) are never cleaned: the default follows the form
    out.setdefault("clean_logits", out["max_seqlen_k"] == 0)
    if not isinstance(out["clean_logits"], bool):
        raise TypeError(f"clean_logits must be a bool, got {type(out['clean_logits']).__name__}")
    if explicit_clean and out["clean_logits"] and out["max_seqlen_k"] > 0:
        raise ValueError("compressed logits (max_seqlen_k > 0) require clean_logits=False")
    return out


def fp8_fp4_mqa_logits(*args, **kwargs):
    a = mqa_logits_arguments(args, dict(kwargs))  # schedule_meta (sgl-deep-gemm's form) is accepted and unused
    return _mqa.fp8_fp4_mqa_logits(a["q"], a["kv"], a["weights"], a["cu_seq_len_k_start"], a["cu_seq_len_k_end"],
                                   a["clean_logits"], a["max_seqlen_k"], a["logits_dtype"])


def fp8_mqa_logits(*args, **kwargs):
    a = mqa_logits_arguments(args, dict(kwargs))
    q = a["q"]
    return _mqa.fp8_fp4_mqa_logits(q if isinstance(q, (tuple, list)) else (q, None), a["kv"], a["weights"],
                                   a["cu_seq_len_k_start"], a["cu_seq_len_k_end"], a["clean_logits"],
                                   a["max_seqlen_k"], a["logits_dtype"])


def get_mqa_logits_metadata(cu_seq_len_k_start, cu_seq_len_k_end, num_kv_tokens, num_heads):
    """sgl-deep-gemm's dense schedule. The SM120 dense kernel derives each CTA's key range from ks / ke on the
    device, so there is nothing to precompute: an empty int32 tensor on ks's device, which fp8_fp4_mqa_logits
    accepts as schedule_meta. The arguments are checked as that call would."""
    from ..validation import require_int32

    require_int32("cu_seq_len_k_start", cu_seq_len_k_start)
    require_int32("cu_seq_len_k_end", cu_seq_len_k_end)
    if cu_seq_len_k_start.shape != cu_seq_len_k_end.shape or cu_seq_len_k_start.dim() != 1:
        raise ValueError("cu_seq_len_k_start and cu_seq_len_k_end must be [S] tensors of one shape")
    for name, v in (("num_kv_tokens", num_kv_tokens), ("num_heads", num_heads)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise ValueError(f"{name} must be a non-negative int, got {v!r}")
    return torch.empty(0, dtype=torch.int32, device=cu_seq_len_k_start.device)


def get_paged_mqa_logits_metadata(context_lens, block_kv, num_sms, indices=None):
    if indices is not None:
        raise NotImplementedError("get_paged_mqa_logits_metadata: indices (varlen) are SM100-only in DeepGEMM and "
                                  "not supported here")
    return _paged_meta.get_paged_mqa_logits_metadata(context_lens, block_kv, num_sms)


def fp8_fp4_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len,
                             clean_logits=False, logits_dtype=torch.float32, indices=None):
    return _paged.fp8_fp4_paged_mqa_logits(q if isinstance(q, (tuple, list)) else (q, None), kv_cache, weights,
                                           context_lens, block_table, schedule_meta, max_context_len, clean_logits,
                                           logits_dtype, indices)


def fp8_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len,
                         clean_logits=False, logits_dtype=torch.float32):
    return _paged.fp8_fp4_paged_mqa_logits((q, None), kv_cache, weights, context_lens, block_table, schedule_meta,
                                           max_context_len, clean_logits, logits_dtype)


def get_sparse_mqa_logits_metadata(cu_seq_len_k_start, cu_seq_len_k_end, num_kv_tokens, sparse_kv_block_indices,
                                   qk_dtype, sparse_block_kv, use_unaligned_ks=False):
    return _sparse_meta.get_sparse_mqa_logits_metadata(cu_seq_len_k_start, cu_seq_len_k_end, num_kv_tokens,
                                                       sparse_kv_block_indices, qk_dtype, sparse_block_kv,
                                                       use_unaligned_ks)


def get_paged_sparse_mqa_logits_metadata(context_lens, block_table, indices, page_kv, sparse_kv_block_indices,
                                         qk_dtype, sparse_block_kv):
    return _sparse_meta.get_paged_sparse_mqa_logits_metadata(context_lens, block_table, indices, page_kv,
                                                             sparse_kv_block_indices, qk_dtype, sparse_block_kv)


def fp8_fp4_sparse_mqa_logits(q, kv, weights, metadata, num_max_sparse_blocks, sparse_block_kv,
                              use_unaligned_ks=False):
    return _sparse.fp8_fp4_sparse_mqa_logits(q, kv, weights, metadata, num_max_sparse_blocks, sparse_block_kv,
                                             use_unaligned_ks)


def fp8_fp4_paged_sparse_mqa_logits(q, kv_cache, weights, metadata, num_max_sparse_blocks, sparse_block_kv):
    return _sparse.fp8_fp4_paged_sparse_mqa_logits(q, kv_cache, weights, metadata, num_max_sparse_blocks,
                                                   sparse_block_kv)


def batched_syrk(a, d):
    raise NotImplementedError("batched_syrk is not provided by deep_gemm_sm120 (no SM120 kernel)")


def batched_symm(a, b, d):
    raise NotImplementedError("batched_symm is not provided by deep_gemm_sm120 (no SM120 kernel)")


def _out_of_scope(name: str):
    def refuse(*args, **kwargs):
        raise NotImplementedError(f"{name} is out of scope for deep_gemm_sm120 (MegaMoE, symmetric memory and "
                                  f"locality entry points are not provided)")
    refuse.__name__ = refuse.__qualname__ = name
    return refuse


for _name in ("bf16_mega_gate", "mega_mhc", "SymmBuffer", "SM90SymmBuffer", "transform_weights_for_mega_moe",
              "transform_weights_for_mega_moe_sm90", "transform_scales_for_mega_moe", "fp8_fp4_mega_moe",
              "nvfp4_mega_moe", "bf16_mega_moe", "fp8_mega_moe", "mega_moe_pre_dispatch", "mega_moe_pre_dispatch_sm90",
              "get_block_m_for_mega_moe", "get_symm_buffer_for_mega_moe", "get_symm_buffer_for_sm90_mega_moe",
              "get_num_locality_domains", "is_localization_available", "localize", "localize_rows", "is_localized",
              "destroy_localizer"):
    globals()[_name] = _out_of_scope(_name)
del _name


# ---------------------------------------------------------------- layout helpers and runtime controls

def transform_sf_into_required_layout(sf, mn, k, recipe, num_groups=None, is_sfa=None, disable_ue8m0_cast=False,
                                      psum_layout=None):
    name = "transform_sf_into_required_layout"
    _ue8m0_cast(name, disable_ue8m0_cast)
    if psum_layout is not None:
        raise NotImplementedError(f"{name}(psum_layout=...) is not supported: SM120 scale layouts are per row")
    if not isinstance(recipe, (tuple, list)) or len(recipe) not in (2, 3):
        raise ValueError(f"{name}: recipe is (gran_m, gran_n, gran_k) or (gran_mn, gran_k), got {recipe!r}")
    full = tuple(recipe) if len(recipe) == 3 else (recipe[0], recipe[0], recipe[1])
    return _transform_sf(sf, mn, k, full, num_groups, bool(is_sfa))


get_pdl, set_pdl = _launch.get_pdl, _launch.set_pdl
_settings = {"deterministic": True, "tc_util": None, "block_size_multiple_of": None, "ignore_compile_dims": False}


def use_deterministic_algorithms(flag: bool = True) -> None:
    """Every deep_gemm_sm120 kernel is deterministic already (split-K adds its slices in a fixed order)."""
    _settings["deterministic"] = bool(flag)


def get_deterministic_algorithms() -> bool:
    return True


def set_tc_util(value) -> None:
    """An SM100 tensor-core utilisation knob: recorded, no effect on SM120."""
    _settings["tc_util"] = value


def get_tc_util():
    return _settings["tc_util"]


def set_block_size_multiple_of(value) -> None:
    """A DeepGEMM tile constraint: recorded; our heuristics choose tiles (results never depend on it)."""
    _settings["block_size_multiple_of"] = value


def set_ignore_compile_dims(value) -> None:
    _settings["ignore_compile_dims"] = bool(value)


def shutdown() -> None:
    """Nothing to release before interpreter exit (kernels live in the primary context)."""


__all__ = [n for n in dir() if not n.startswith("_") and n not in ("annotations", "os", "torch", "utils", "testing")]
__all__ += ["utils", "testing"]
