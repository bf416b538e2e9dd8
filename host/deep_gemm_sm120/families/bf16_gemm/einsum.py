"""einsum(expr, a, b, d, c=None, epilogue=None, *, use_cublaslt=False): DeepGEMM's BF16 einsum expressions on the BF16 GEMM kernel, runtime shapes.

    bmk,bnk->mn    d[m, n] = sum over b, k of a[b, m, k] * b[b, n, k]; fp32 d accumulates when c is d
                   (c = d gives d += ...; no c: d = ...), bf16 d is written fresh (c must be None).
    bhr,hdr->bhd   d[b, h, :] = b[h] @ a[b, h, :]          (per head h: [b, r] x [d, r]^T, K-major B)
    bhd,hdr->bhr   d[b, h, :] = a[b, h, :] @ b[h]          (per head h: [b, d] x [d, r], B read MN-major)

Operands are read through 3-D TMA maps (the batch or head is dim 2), so any strides whose every dimension but
the last is a multiple of 16 bytes work without copies: e.g. b = y[:, :, :r] of a padded buffer. The batch
reduction runs the K loop over (batch, K block) pairs and splits it across CTAs when the output is small (fp32
slices, added in a fixed order); the per-head products are one launch over all heads."""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

import torch

from ... import jit, keywords
from ...arch import target_of
from ...batched import batched_map, check_batched_operand
from ...checks import device_of, require_tensor, write_empty_reduction
from ...core.arith import ceil_div
from ...core.rules import dtype_name
from ...core.tma import with_addresses
from ...device import num_sms_for
from ...launch import KEY_ERRORS, CallCache, fast_calls, launch, recording, tensor_key
from ...services.split_k_reduce.launch import SplitK
from .kernel import PARAMS, Bf16GemmSpec
from .plan import batch_k_total, batch_reduce_plan, batched_config, m_bucket
from .rules import EINSUM_EXPRS, einsum_rule

_OFF_A, _OFF_B = PARAMS.offsets["tmap_a"], PARAMS.offsets["tmap_b"]
_U32 = 2**32
_pack = PARAMS.packer()  # d, c, layout, aux, m, n, k, ldd, ldc, num_groups, psum_layout, num_splits, split_stride
_CALLS = CallCache()  # einsum calls checked once per signature: (expr, tensor_key of each tensor)


def _nothing(a, b, d, c) -> None:
    """An empty output: nothing to write."""


def _empty_reduction(a, b, d, c) -> None:
    write_empty_reduction(d, c)


def _zero_d(a, b, d, c) -> None:
    d.zero_()


def _require_3d(name: str, t: torch.Tensor, what: str) -> None:
    if t.dim() != 3:
        raise ValueError(f"{name} must be 3-D {what}, got shape {tuple(t.shape)}")


def _map_k_major(offset: int, t: torch.Tensor, rows_dim: int, batch_dim: int, box_rows: int, box_k: int) -> bytes:
    """[.., rows, .., K] with the batch as dim 2: boxes of box_k x box_rows, swizzle = box_k * 2 bytes."""
    return batched_map(offset, "bfloat16", t, -1, rows_dim, batch_dim, (box_k, box_rows), box_k * 2)


def _map_mn_major(offset: int, t: torch.Tensor, box_k: int) -> bytes:
    """b [h, K=d, N=r] read MN-major: dims (r, d, h), 64-wide 128B-swizzled boxes of box_k rows."""
    return batched_map(offset, "bfloat16", t, 2, 1, 0, (64, box_k), 128)


@lru_cache(maxsize=1024)
def _batched_kernel(layout: str, groups: int, rows: int, cols: int, index: int, num_sms: int, target: str):
    cfg = batched_config(groups, rows, cols, num_sms)
    return jit.get_kernel(Bf16GemmSpec(cfg, "bf16", False, False, "batched", layout), target, index), cfg


@lru_cache(maxsize=1024)
def _reduce_kernel(mb: int, n: int, k_total: int, out: str, with_c: bool, index: int, num_sms: int, target: str):
    p = batch_reduce_plan(mb, n, k_total, num_sms)
    spec = Bf16GemmSpec(p.config, "fp32" if p.splits > 1 else out, with_c and p.splits == 1, False, "batch_reduce")
    reduce = SplitK(out, with_c, target, index, num_sms) if p.splits > 1 else None
    return jit.get_kernel(spec, target, index), p, reduce


def _prepare_bmk(a, b, d, c) -> tuple[int, Callable]:
    """bmk,bnk->mn: every check (each raises the typed error naming what was expected), then what a call of
    this signature runs, given its tensors."""
    _require_3d("a", a, "[B, M, K]")
    _require_3d("b", b, "[B, N, K]")
    if d.dim() != 2:
        raise ValueError(f"d must be 2-D [M, N], got shape {tuple(d.shape)}")
    bs, m, k = a.shape
    bs_b, n, k_b = b.shape
    if bs_b != bs or k_b != k:
        raise ValueError(f"a is [B, M, K] = {tuple(a.shape)} and b is [B, N, K] = {tuple(b.shape)}: B and K must agree")
    einsum_rule(
        "bmk,bnk->mn",
        b=bs,
        m=m,
        n=n,
        k=k,
        a_dtype=dtype_name(a.dtype),
        b_dtype=dtype_name(b.dtype),
        out_dtype=dtype_name(d.dtype),
        c_dtype=dtype_name(c.dtype) if c is not None else None,
    )
    if tuple(d.shape) != (m, n):
        raise ValueError(f"d must be [M, N] = ({m}, {n}), got {tuple(d.shape)}")
    if c is not None and (tuple(c.shape) != (m, n) or c.stride() != d.stride()):
        raise ValueError("c must have d's shape and strides (DeepGEMM: c is d)")
    for name, t in (("d", d),) + ((("c", c),) if c is not None else ()):
        if t.stride(1) != 1 and n > 1:
            raise ValueError(f"{name} must have a contiguous last dimension, got strides {tuple(t.stride())}")
    tensors = {"a": a, "b": b, "d": d} | ({"c": c} if c is not None else {})
    if m and n and bs and k:
        check_batched_operand("a", a)
        check_batched_operand("b", b)
    index = device_of(**tensors)
    if m == 0 or n == 0:
        return index, _nothing
    if bs == 0 or k == 0:
        return index, _empty_reduction
    ldd = d.stride(0) if m > 1 else n
    if ldd >= _U32:
        raise ValueError("d's row stride must fit 32 bits")
    num_sms = num_sms_for(index)
    k_total = batch_k_total(bs, k)
    kern, p, reduce = _reduce_kernel(
        m_bucket(m),
        n,
        k_total,
        "fp32" if d.dtype == torch.float32 else "bf16",
        c is not None,
        index,
        num_sms,
        target_of(index),
    )
    cfg = p.config
    maps = _map_k_major(_OFF_A, a, 1, 0, cfg.block_m, cfg.block_k) + _map_k_major(
        _OFF_B, b, 1, 0, cfg.block_n, cfg.block_k
    )
    grid, splits = p.grid(num_sms), p.splits

    def run(a, b, d, c) -> None:
        tmaps = with_addresses(maps, a.data_ptr(), b.data_ptr())
        pc = c.data_ptr() if c is not None else 0
        if reduce is None:
            launch(kern, grid, _pack(d.data_ptr(), pc, 0, 0, m, n, k, ldd, ldd, bs, 0, 1, 0), tmaps, index)
            return
        ws = SplitK.workspace(splits, m, n, d.device)  # held until both launches are enqueued
        launch(kern, grid, _pack(ws.data_ptr(), 0, 0, 0, m, n, k, n, 0, bs, 0, splits, m * n), tmaps, index)
        reduce.reduce(ws.data_ptr(), d.data_ptr(), pc, m, n, ldd, ldd, splits, index)

    return index, run


def _prepare_per_head(expr: str, a, b, d) -> tuple[int, Callable]:
    """bhr,hdr->bhd (K = r, N = d, B K-major) or bhd,hdr->bhr (K = d, N = r, B MN-major); M = b, batch = h.
    Every check, then what a call of this signature runs, given its tensors."""
    bhd = expr == "bhr,hdr->bhd"
    _require_3d("a", a, "[b, h, r]" if bhd else "[b, h, d]")
    _require_3d("b", b, "[h, d, r]")
    _require_3d("d", d, "[b, h, d]" if bhd else "[b, h, r]")
    bs, h, ka = a.shape
    hb, dd, r = b.shape
    want = (bs, h, dd) if bhd else (bs, h, r)
    if hb != h or ka != (r if bhd else dd):
        raise ValueError(
            f"einsum {expr!r}: a {tuple(a.shape)} and b {tuple(b.shape)} disagree on h or the contracted dimension"
        )
    einsum_rule(
        expr,
        b=bs,
        h=h,
        r=r,
        d=dd,
        a_dtype=dtype_name(a.dtype),
        b_dtype=dtype_name(b.dtype),
        out_dtype=dtype_name(d.dtype),
    )
    if tuple(d.shape) != want:
        raise ValueError(f"d must be {want}, got {tuple(d.shape)}")
    if d.stride(2) != 1 and want[2] > 1:
        raise ValueError(f"d must have a contiguous last dimension, got strides {tuple(d.stride())}")
    if bs and h and dd and r:
        check_batched_operand("a", a)
        check_batched_operand("b", b)
    index = device_of(a=a, b=b, d=d)
    if bs == 0 or h == 0 or want[2] == 0:
        return index, _nothing
    if ka == 0:
        return index, _zero_d
    if max(d.stride(0), d.stride(1)) >= _U32:
        raise ValueError("d's strides must fit 32 bits")
    m, n, k = bs, want[2], ka
    num_sms = num_sms_for(index)
    kern, cfg = _batched_kernel("nt" if bhd else "nn", h, m, n, index, num_sms, target_of(index))
    maps = _map_k_major(_OFF_A, a, 0, 1, cfg.block_m, cfg.block_k)
    maps += _map_k_major(_OFF_B, b, 1, 0, cfg.block_n, cfg.block_k) if bhd else _map_mn_major(_OFF_B, b, cfg.block_k)
    ldd, split_stride = d.stride(0) if m > 1 else n, d.stride(1)
    grid = min(num_sms, h * ceil_div(m, cfg.block_m) * ceil_div(n, cfg.block_n))

    def run(a, b, d, c) -> None:
        params = _pack(d.data_ptr(), 0, 0, 0, m, n, k, ldd, 0, h, 0, 1, split_stride)
        launch(kern, grid, params, with_addresses(maps, a.data_ptr(), b.data_ptr()), index)

    return index, run


def einsum(
    expr: str,
    a: torch.Tensor,
    b: torch.Tensor,
    d: torch.Tensor,
    c: torch.Tensor | None = None,
    epilogue=None,
    *,
    use_cublaslt: bool = False,
) -> None:
    """DeepGEMM's einsum for the expressions in EINSUM_EXPRS (see the module doc); writes d in place. DeepGEMM
    2.8.1's order; sgl-deep-gemm's `use_cublaslt` (keyword only) computes with torch.einsum (cuBLAS) instead,
    DeepGEMM's comparison path."""
    sig = _FAST(expr, a, b, d, c) if epilogue is None and use_cublaslt is False else None
    if sig is True:  # served in C (launch.fast_calls)
        return
    keywords.epilogue("einsum", epilogue)
    if use_cublaslt:
        require_tensor("d", d)  # d.copy_ below would be an AttributeError
        if c is not None:
            raise ValueError("einsum: use_cublaslt takes no c (DeepGEMM's contract)")
        d.copy_(torch.einsum(expr, a, b))
        return
    if not isinstance(expr, str):
        raise TypeError(f"expr must be a str, got {type(expr).__name__}")
    norm = expr.replace(" ", "")
    try:
        key = sig or (norm, tensor_key(a), tensor_key(b), tensor_key(d), None if c is None else tensor_key(c))
        call = _CALLS.get(key)
    except KEY_ERRORS:  # not tensors, or storage-less ones: the checks name what was expected
        key, call = None, None
    if call is None or target_of(call[1]) != call[0]:
        call = _prepare(expr, norm, a, b, d, c)
        if key is not None:
            _CALLS.put(key, call)
        if sig is not None:  # a new signature: what it launches is kept for the C table
            with recording(_FAST, (expr, a, b, d, c)):
                call[2](a, b, d, c)
            return
    call[2](a, b, d, c)


_FAST = fast_calls("VTTTT")


def _prepare(expr: str, norm: str, a, b, d, c) -> tuple:
    """(target, device index, what a call of this signature runs) after every check of the call."""
    if norm not in EINSUM_EXPRS:
        raise NotImplementedError(f"einsum expression {expr!r} is not supported; supported: {sorted(EINSUM_EXPRS)}")
    for name, t in (("a", a), ("b", b), ("d", d)):
        require_tensor(name, t)
    if c is not None:
        require_tensor("c", c)
    if norm == "bmk,bnk->mn":
        index, run = _prepare_bmk(a, b, d, c)
    elif c is not None:
        raise ValueError(f"einsum {expr!r} takes no c (DeepGEMM's contract)")
    else:
        index, run = _prepare_per_head(norm, a, b, d)
    return target_of(index), index, run
