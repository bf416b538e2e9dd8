"""tf32_hc_prenorm_gemm(a, b, d, sqr_sum, num_splits=None): DeepGEMM's hyper-connection pre-norm GEMM.

    d = a.float() @ b.T          sqr_sum = a.float().square().sum(-1)

a is bf16 [M, K] and b fp32 [N, K] (N <= 32), both K-major. With num_splits = S, d is [S, M, N] and sqr_sum
[S, M]: split s holds the partial sums of its contiguous range of 64-wide K blocks (DeepGEMM's split, the first
blocks % S splits one block longer; a split without blocks is zeros) and the caller adds them. Without
num_splits, d is [M, N] and sqr_sum [M]: the full sums, deterministic (any internal K split is reduced in a
fixed order)."""

from __future__ import annotations

from functools import lru_cache

import torch

from ... import jit
from ...arch import target_of
from ...checks import device_of, require_2d, require_tensor, tma_operand
from ...core.arith import ceil_div, round_up
from ...core.rules import dtype_name
from ...core.tma import DTYPE, tma_2d, with_addresses
from ...device import num_sms_for
from ...launch import KEY_ERRORS, CallCache, empty, fast_calls, launch, recording, tensor_key
from ...services.split_k_reduce.launch import SplitK
from .kernel import PARAMS
from .plan import m_bucket, plan
from .rules import hc_prenorm_rule

_pack = PARAMS.packer()
_OFF_A, _OFF_B = PARAMS.offsets["tmap_a"], PARAMS.offsets["tmap_b"]
_U32 = 2**32


def _validate(a, b, d, sqr_sum, num_splits) -> tuple:
    """Returns (m, n, k, lda bytes, ldb bytes, ldd, d split stride, device index)."""
    for name, t in (("a", a), ("b", b), ("d", d), ("sqr_sum", sqr_sum)):
        require_tensor(name, t)
    require_2d("a", a, "[M, K]")
    require_2d("b", b, "[N, K]")
    m, k = a.shape
    n, kb = b.shape
    if kb != k:
        raise ValueError(f"a is [M, K] = {tuple(a.shape)} and b is [N, K] = {tuple(b.shape)}: K must agree")
    split = num_splits is not None and not isinstance(num_splits, bool) and isinstance(num_splits, int)
    want_d, want_s = ((num_splits, m, n), (num_splits, m)) if split else ((m, n), (m,))
    hc_prenorm_rule(
        m=m,
        n=n,
        k=k,
        a_dtype=dtype_name(a.dtype),
        b_dtype=dtype_name(b.dtype),
        d_dtype=dtype_name(d.dtype),
        sqr_sum_dtype=dtype_name(sqr_sum.dtype),
        num_splits=num_splits,
        lda=a.stride(0) if m > 1 else None,
        ldb=b.stride(0) if n > 1 else None,
    )
    if tuple(d.shape) != want_d:
        raise ValueError(f"d must be {'[S, M, N]' if split else '[M, N]'} = {want_d}, got {tuple(d.shape)}")
    if tuple(sqr_sum.shape) != want_s:
        raise ValueError(f"sqr_sum must be {'[S, M]' if split else '[M]'} = {want_s}, got {tuple(sqr_sum.shape)}")
    if m == 0:
        return m, n, k, 0, 0, 0, 0, device_of(a=a, b=b, d=d, sqr_sum=sqr_sum)
    if not sqr_sum.is_contiguous():
        raise ValueError(f"sqr_sum must be contiguous, got strides {tuple(sqr_sum.stride())}")
    if d.stride(-1) != 1 and n > 1:
        raise ValueError(f"d must have a contiguous last dimension (stride(-1) == 1), got strides {tuple(d.stride())}")
    ldd = d.stride(-2) if m > 1 else n
    if ldd < n:
        raise ValueError(f"d rows overlap (stride(-2) = {ldd} < N = {n})")
    d_split = d.stride(0) if split and num_splits > 1 else m * ldd
    if split and num_splits > 1 and d_split < (m - 1) * ldd + n:
        raise ValueError(f"d splits overlap (stride(0) = {d_split} < (M - 1) * stride(1) + N)")
    if max(ldd, d_split, m * num_splits if split else m) >= _U32:
        raise ValueError("d and sqr_sum strides must fit 32 bits")
    _, lda = tma_operand("a", a)
    _, ldb = tma_operand("b", b)
    return m, n, k, lda, ldb, ldd, d_split, device_of(a=a, b=b, d=d, sqr_sum=sqr_sum)


@lru_cache(maxsize=4096)
def _plan(mb: int, n: int, k: int, num_splits, index: int, num_sms: int, target: str):
    p = plan(mb, n, k, num_sms, num_splits)
    kern = jit.get_kernel(p.spec, target, index)
    reduce = None
    if p.reduce_d is not None:
        reduce = (
            SplitK("fp32", False, target, index, num_sms, p.reduce_d.warp_per_element),
            SplitK("fp32", False, target, index, num_sms, p.reduce_s.warp_per_element),
        )
    return kern, p.spec.block_m, p.spec.n_pad, p.splits, reduce


_CALLS = CallCache()  # calls checked once per signature: tensor_key of each tensor, num_splits with its type


def _nothing(a, b, d, sqr_sum) -> None:
    """M = 0: nothing to write."""


def _prepare(a, b, d, sqr_sum, num_splits) -> tuple:
    """(target, device index, what a call of this signature runs, given its tensors) after every check."""
    m, n, k, lda, ldb, ldd, d_split, index = _validate(a, b, d, sqr_sum, num_splits)
    target = target_of(index)
    if m == 0:
        return target, index, _nothing
    kern, block_m, n_pad, splits, reduce = _plan(m_bucket(m), n, k, num_splits, index, num_sms_for(index), target)
    grid = (ceil_div(m, block_m), splits, 1)
    maps = tma_2d(_OFF_A, DTYPE["bfloat16"], a.data_ptr(), k, m, lda, 64, block_m, 128) + tma_2d(
        _OFF_B, DTYPE["float32"], b.data_ptr(), k, n, ldb, 32, n_pad, 128
    )
    if reduce is None:

        def run(a, b, d, sqr_sum) -> None:
            params = _pack(d.data_ptr(), sqr_sum.data_ptr(), m, n, k, ldd, d_split, m)
            launch(kern, grid, params, with_addresses(maps, a.data_ptr(), b.data_ptr()), index)

        return target, index, run
    # Internal K splits: fp32 slices [S, M, N] then [S, M] (16-byte aligned for the reduce's vector loads),
    # added in split order into d and sqr_sum.
    d_elems = round_up(splits * m * n, 4)

    def run_split(a, b, d, sqr_sum) -> None:
        ws = empty((d_elems + splits * m,), torch.float32, d.device)  # held until all launches
        w_d, w_s = ws.data_ptr(), ws.data_ptr() + d_elems * 4
        launch(
            kern, grid, _pack(w_d, w_s, m, n, k, n, m * n, m), with_addresses(maps, a.data_ptr(), b.data_ptr()), index
        )
        reduce[0].reduce(w_d, d.data_ptr(), 0, m, n, ldd, 0, splits, index)
        reduce[1].reduce(w_s, sqr_sum.data_ptr(), 0, 1, m, m, 0, splits, index)

    return target, index, run_split


def tf32_hc_prenorm_gemm(
    a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, sqr_sum: torch.Tensor, num_splits: int | None = None
) -> None:
    """d = a.float() @ b.T and sqr_sum = a.float().square().sum(-1), written into d and sqr_sum (see module doc).
    Checked once per call signature; later calls are served in C (launch.fast_calls; a plan with K splits
    allocates its workspace per call through launch.empty)."""
    sig = _FAST(a, b, d, sqr_sum, num_splits)
    if sig is True:
        return
    try:
        key = sig or (tensor_key(a), tensor_key(b), tensor_key(d), tensor_key(sqr_sum), type(num_splits), num_splits)
        call = _CALLS.get(key)
    except KEY_ERRORS:  # not tensors, storage-less ones, or an unhashable num_splits: the checks name it
        key, call = None, None
    if call is None or target_of(call[1]) != call[0]:
        call = _prepare(a, b, d, sqr_sum, num_splits)
        if key is not None:
            _CALLS.put(key, call)
        if sig is not None:  # a new signature: what it launches is kept for the C table
            with recording(_FAST, (a, b, d, sqr_sum, num_splits)):
                call[2](a, b, d, sqr_sum)
            return
    call[2](a, b, d, sqr_sum)


_FAST = fast_calls("TTTTV")
