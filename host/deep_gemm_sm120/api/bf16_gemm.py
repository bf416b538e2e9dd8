"""BF16 dense GEMMs: D = C + op(A)·op(B) in DeepGEMM's four layouts, D/C [M,N] in bf16 or fp32.

    nt: a [M, K], b [N, K]     nn: a [M, K], b [K, N]     tn: a [K, M], b [K, N]     tt: a [K, M], b [N, K]

(first letter: a as [M, K] "n" or [K, M] "t"; second letter: b as [K, N] "n" or [N, K] "t", DeepGEMM's naming)

The kernel reads MN-major operands (a of tn/tt, b of nn/tt) straight through TMA + ldmatrix.trans.
Hot path: one pass of inline checks that accepts only fully valid arguments; anything else goes through
the detailed validators, which raise the typed error naming what was expected. Launch plans (kernel
handle, grid, block sizes) are memoized per shape/dtype/layout/device/SM count.
"""
from __future__ import annotations

import os

import torch

from .. import jit, runtime
from ..arch import EMULATE_ENV, target_for_device
from ..configs import Bf16GemmSpec, SplitKReduceSpec
from ..device import num_sms_for
from ..heuristics import choose_bf16_split_plan
from ..validation import (output_row_stride, require_2d, require_dtype, require_same_cuda_device,
                          require_tensor, tma_row_stride_bytes)

_OUT = {torch.bfloat16: "bf16", torch.float32: "fp32"}
_BF16 = torch.bfloat16
_plans: dict[tuple, tuple] = {}
_launch = None
_stream = None


def _shapes(layout: str, a: torch.Tensor, b: torch.Tensor) -> tuple[int, int, int, int]:
    """(m, n, k from a, k from b) for the layout."""
    m, ka = (a.shape[1], a.shape[0]) if layout[0] == "t" else (a.shape[0], a.shape[1])
    n, kb = (b.shape[1], b.shape[0]) if layout[1] == "n" else (b.shape[0], b.shape[1])
    return m, n, ka, kb


def _validate(layout: str, a, b, d, c) -> tuple:
    """Detailed checks; returns (m, n, k, lda_bytes, ldb_bytes, ldd, ldc, device index, a/b/d/c pointers)."""
    for name, t in (("a", a), ("b", b), ("d", d)):
        require_tensor(name, t)
    require_dtype("a", a, (torch.bfloat16,))
    require_dtype("b", b, (torch.bfloat16,))
    require_dtype("d", d, (torch.bfloat16, torch.float32), unsupported=True)
    a_desc = "[K, M]" if layout[0] == "t" else "[M, K]"
    b_desc = "[K, N]" if layout[1] == "n" else "[N, K]"
    require_2d("a", a, a_desc)
    require_2d("b", b, b_desc)
    require_2d("d", d, "[M, N]")
    m, n, k, kb = _shapes(layout, a, b)
    if kb != k:
        raise ValueError(f"a is {a_desc} = {tuple(a.shape)} and b is {b_desc} = {tuple(b.shape)}: K must agree")
    if tuple(d.shape) != (m, n):
        raise ValueError(f"d must be [M, N] = ({m}, {n}), got {tuple(d.shape)}")
    tensors = {"a": a, "b": b, "d": d}
    if c is not None:
        require_tensor("c", c)
        if c.dtype != d.dtype:
            raise TypeError(f"c must have d's dtype {d.dtype}, got {c.dtype}")
        if tuple(c.shape) != (m, n):
            raise ValueError(f"c must be [M, N] = ({m}, {n}), got {tuple(c.shape)}")
        tensors["c"] = c
    dev = require_same_cuda_device(**tensors)
    ldd = output_row_stride("d", d)
    ldc = output_row_stride("c", c) if c is not None else 0
    lda = tma_row_stride_bytes("a", a) if k and m else 0
    ldb = tma_row_stride_bytes("b", b) if k and n else 0
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    return (m, n, k, lda, ldb, ldd, ldc, index, a.data_ptr(), b.data_ptr(), d.data_ptr(),
            c.data_ptr() if c is not None else 0)


def _fast_checks(a_mn: bool, b_mn: bool, a, b, d, c):
    """The common valid case in few attribute reads, or None (then _validate decides and explains)."""
    try:
        if a.dtype is not _BF16 or b.dtype is not _BF16 or d.dtype not in _OUT:
            return None
        a0, a1 = a.shape
        b0, b1 = b.shape
        dm, dn = d.shape
        sa0, sa1 = a.stride()
        sb0, sb1 = b.stride()
        sd0, sd1 = d.stride()
        m, k = (a1, a0) if a_mn else (a0, a1)
        n, kb = (b1, b0) if b_mn else (b0, b1)
        index = d.get_device()
        pa, pb, pd = a.data_ptr(), b.data_ptr(), d.data_ptr()
        if (kb != k or dm != m or dn != n or k == 0 or m == 0 or n == 0 or index < 0
                or a.get_device() != index or b.get_device() != index
                or sa1 != 1 or sb1 != 1 or sd1 != 1 or sa0 < a1 or sb0 < b1 or sd0 < n
                or (sa0 * 2) % 16 or (sb0 * 2) % 16 or pa % 16 or pb % 16 or pd % 16):
            return None
        ldc, pc = 0, 0
        if c is not None:
            cm, cn = c.shape
            sc0, sc1 = c.stride()
            pc = c.data_ptr()
            if (c.dtype is not d.dtype or cm != m or cn != n or c.get_device() != index or sc1 != 1
                    or sc0 < n or pc % 16):
                return None
            ldc = sc0
        return m, n, k, sa0 * 2, sb0 * 2, sd0, ldc, index, pa, pb, pd, pc
    except (AttributeError, TypeError, ValueError):
        return None


def _plan(m: int, n: int, k: int, out: str, with_c: bool, index: int, layout: str) -> tuple:
    key = (m, n, k, out, with_c, index, num_sms_for(index), os.environ.get(EMULATE_ENV), layout)
    plan = _plans.get(key)
    if plan is None:
        target = target_for_device(index)  # NotImplementedError on non-SM120 unless emulation is requested
        cfg, swap, splits = choose_bf16_split_plan(m, n, k, key[6], layout)
        # split-K slices write fp32 partials (no C); the reduce kernel adds them in order, then C
        spec = Bf16GemmSpec(cfg, "fp32" if splits > 1 else out, with_c and splits == 1, swap, "normal", layout)
        kern = jit.get_kernel(spec, target, index)
        km, kn = (n, m) if swap else (m, n)  # kernel-space rows/columns
        grid = min(key[6], -(-km // cfg.block_m) * -(-kn // cfg.block_n) * splits)
        reduce = None
        if splits > 1:
            rk = jit.get_kernel(SplitKReduceSpec(out, with_c), target, index)
            reduce = (rk.handle, min(-(-m * -(-n // 4) // rk.threads), key[6] * 8), rk.threads)
        plan = (kern.handle, grid, kern.threads, cfg.block_m, cfg.block_n, cfg.block_k, swap, splits, reduce)
        _plans[key] = plan
    return plan


def _gemm(layout: str, a, b, d, c) -> None:
    global _launch, _stream
    a_mn, b_mn = layout[0] == "t", layout[1] == "n"
    args = _fast_checks(a_mn, b_mn, a, b, d, c)
    if args is None:
        args = _validate(layout, a, b, d, c)
    m, n, k, lda, ldb, ldd, ldc, index, pa, pb, pd, pc = args
    if m == 0 or n == 0:
        target_for_device(index)  # unsupported archs fail even on empty problems
        return
    if k == 0:  # empty reduction: TMA cannot describe a zero-extent tensor; nothing to read from a or b
        target_for_device(index)
        if c is None:
            d.zero_()
        elif pc != pd:
            d.copy_(c)
        return
    handle, grid, threads, block_m, block_n, block_k, swap, splits, reduce = _plan(
        m, n, k, _OUT[d.dtype], c is not None, index, layout)
    if _launch is None:
        _launch, _stream = runtime.gemm_launcher(), runtime.current_stream_fn()
    stream = _stream(index)
    out_ptr, out_ld, c_ptr, c_ld, split_stride = pd, ldd, pc, ldc, 0
    if splits > 1:  # fp32 workspace [splits, M, N]; the stream-ordered allocator keeps it valid for the launches
        ws = torch.empty(splits * m * n, dtype=torch.float32, device=d.device)
        out_ptr, out_ld, c_ptr, c_ld, split_stride = ws.data_ptr(), n, 0, 0, m * n
    if swap:  # first operand = B (rows N), second = A (rows M); kernel m/n = N/M
        _launch(handle, grid, threads, stream, pb, n, ldb, block_m, pa, m, lda, block_n, block_k, out_ptr, c_ptr, 0, 0,
                n, m, k, out_ld, c_ld, 1, 0, b_mn, a_mn, splits, split_stride)
    else:
        _launch(handle, grid, threads, stream, pa, m, lda, block_m, pb, n, ldb, block_n, block_k, out_ptr, c_ptr, 0, 0,
                m, n, k, out_ld, c_ld, 1, 0, a_mn, b_mn, splits, split_stride)
    if splits > 1:
        r_handle, r_grid, r_threads = reduce
        runtime.launch(r_handle, r_grid, r_threads, stream, [], [out_ptr, pd, pc], [m, n, ldd, ldc, splits])


def bf16_gemm_nt(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: torch.Tensor | None = None) -> None:
    """d = c + a @ b.T with a [M, K], b [N, K] (c optional, may alias d); written into the preallocated d."""
    _gemm("nt", a, b, d, c)


def bf16_gemm_nn(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: torch.Tensor | None = None) -> None:
    """d = c + a @ b with a [M, K], b [K, N]."""
    _gemm("nn", a, b, d, c)


def bf16_gemm_tn(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: torch.Tensor | None = None) -> None:
    """d = c + a.T @ b with a [K, M], b [K, N] (e.g. weight gradients)."""
    _gemm("tn", a, b, d, c)


def bf16_gemm_tt(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: torch.Tensor | None = None) -> None:
    """d = c + a.T @ b.T with a [K, M], b [N, K]."""
    _gemm("tt", a, b, d, c)
