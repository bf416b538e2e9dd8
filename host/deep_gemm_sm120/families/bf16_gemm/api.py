"""BF16 dense GEMMs: D = C + op(A)·op(B) in DeepGEMM's four layouts, D/C [M,N] in bf16 or fp32.

    nt: a [M, K], b [N, K]     nn: a [M, K], b [K, N]     tn: a [K, M], b [K, N]     tt: a [K, M], b [N, K]

(first letter: a as [M, K] "n" or [K, M] "t"; second letter: b as [K, N] "n" or [N, K] "t", DeepGEMM's naming)

The kernel reads MN-major operands (a of tn/tt, b of nn/tt) straight through TMA + ldmatrix.trans.
Hot path: one pass of inline checks that accepts only fully valid arguments; anything else goes through the
detailed validation (the family's shape/dtype rule, then tensor-level checks), which raises the typed error
naming what was expected. Launch plans are memoized per M bucket (m_bucket), N, K, dtype, layout, device and
SM count, in a bounded LRU.
"""
from __future__ import annotations

from functools import lru_cache

import torch

from ... import jit
from ...arch import target_of
from ...core.rules import dtype_name
from ...core.tma import DTYPE, tma_2d, tma_2d_pair
from ...device import num_sms_for
from ...launch import BOUND, bound, device_of, get_pdl
from ...services.split_k_reduce.launch import SplitK
from ...validation import output_row_stride, require_2d, require_tensor, tma_operand, write_empty_reduction
from . import PARAMS, Bf16GemmSpec, FAMILY, dense_plan, m_bucket

_OUT = {torch.bfloat16: "bf16", torch.float32: "fp32"}
_BF16 = torch.bfloat16
_BF16_CODE = DTYPE["bfloat16"]
_pack = PARAMS.packer()
_OFF_A, _OFF_B = PARAMS.offsets["tmap_a"], PARAMS.offsets["tmap_b"]
_RULES = {op.name[-2:]: op.rule for op in FAMILY.ops if op.name.startswith("bf16_gemm_")}


def _shapes(layout: str, a: torch.Tensor, b: torch.Tensor) -> tuple[int, int, int, int]:
    """(m, n, k from a, k from b) for the layout."""
    m, ka = (a.shape[1], a.shape[0]) if layout[0] == "t" else (a.shape[0], a.shape[1])
    n, kb = (b.shape[1], b.shape[0]) if layout[1] == "n" else (b.shape[0], b.shape[1])
    return m, n, ka, kb


def _validate(layout: str, a, b, d, c) -> tuple:
    """Detailed checks; returns (m, n, k, lda_bytes, ldb_bytes, ldd, ldc, device index, a/b/d/c pointers)."""
    for name, t in (("a", a), ("b", b), ("d", d)):
        require_tensor(name, t)
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
        tensors["c"] = c
    (lda, lda_b), (ldb, ldb_b) = tma_operand("a", a), tma_operand("b", b)
    _RULES[layout](m=m, n=n, k=k, a_dtype=dtype_name(a.dtype), b_dtype=dtype_name(b.dtype),
                   out_dtype=dtype_name(d.dtype), c_dtype=dtype_name(c.dtype) if c is not None else None,
                   lda=lda, ldb=ldb)
    if c is not None and tuple(c.shape) != (m, n):
        raise ValueError(f"c must be [M, N] = ({m}, {n}), got {tuple(c.shape)}")
    ldd = output_row_stride("d", d)
    ldc = output_row_stride("c", c) if c is not None else 0
    index = device_of(**tensors)
    return (m, n, k, lda_b, ldb_b, ldd, ldc, index, a.data_ptr(), b.data_ptr(), d.data_ptr(),
            c.data_ptr() if c is not None else 0)


def _fast_checks(a_mn: bool, b_mn: bool, a, b, d, c):
    """The common valid case in few attribute reads, or None (then _validate decides and explains). Device
    agnostic (the caller requires index >= 0), so a CPU test can prove it accepts only what the rule accepts."""
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
        # a single row has no stride to honour: its descriptor gets the row length padded to 16 bytes
        lda = sa0 * 2 if a0 > 1 else (a1 * 2 + 15) // 16 * 16
        ldb = sb0 * 2 if b0 > 1 else (b1 * 2 + 15) // 16 * 16
        if (kb != k or dm != m or dn != n or k == 0 or m == 0 or n == 0
                or a.get_device() != index or b.get_device() != index
                or sa1 != 1 or sb1 != 1 or sd1 != 1 or (a0 > 1 and sa0 < a1) or (b0 > 1 and sb0 < b1)
                or (dm > 1 and sd0 < n) or lda % 16 or ldb % 16 or pa % 16 or pb % 16 or pd % 16):
            return None
        ldc, pc, cm = 0, 0, 2
        if c is not None:
            cm, cn = c.shape
            sc0, sc1 = c.stride()
            pc = c.data_ptr()
            if (c.dtype is not d.dtype or cm != m or cn != n or c.get_device() != index or sc1 != 1
                    or (cm > 1 and sc0 < n) or pc % 16):
                return None
            ldc = sc0
        return m, n, k, lda, ldb, sd0 if dm > 1 else n, ldc if cm > 1 else n, index, pa, pb, pd, pc
    except (AttributeError, TypeError, ValueError):
        return None


@lru_cache(maxsize=4096)
def _plan(mb: int, n: int, k: int, out: str, with_c: bool, index: int, num_sms: int, target: str, layout: str):
    """Everything a launch needs that depends on (M bucket, N, K, dtype, layout, device): bounded LRU."""
    p = dense_plan(mb, n, k, num_sms, layout)
    cfg, swap, splits = p.config, p.swap_ab, p.splits
    # split-K slices write fp32 partials (no C); the reduce kernel adds them in order, then C
    spec = Bf16GemmSpec(cfg, "fp32" if splits > 1 else out, with_c and splits == 1, swap, "normal", layout)
    kern = jit.get_kernel(spec, target, index)
    reduce = SplitK(out, with_c, target, index, num_sms) if splits > 1 else None
    return kern, p.grid(num_sms), cfg.block_m, cfg.block_n, cfg.block_k, swap, splits, reduce


def _operand_map(offset: int, ptr: int, rows: int, k: int, stride: int, box_rows: int, box_k: int, mn: bool) -> bytes:
    """K-major: [rows][k] with box [box_rows][box_k], swizzle = box_k * 2 bytes. MN-major: [k][rows] with
    64-element (128-byte, 128B-swizzled) boxes of box_k rows; the kernel issues box_rows / 64 of them."""
    if mn:
        return tma_2d(offset, _BF16_CODE, ptr, rows, k, stride, 64, box_k, 128)
    return tma_2d(offset, _BF16_CODE, ptr, k, rows, stride, box_k, box_rows, box_k * 2)


def _operand_maps(p1: int, rows1: int, ld1: int, box1: int, mn1: bool, p2: int, rows2: int, ld2: int, box2: int,
                  mn2: bool, k: int, box_k: int) -> bytes:
    """Both operand maps (kernel order) in one pack: _operand_map's layouts, for the hot path."""
    sw = box_k * 2
    return tma_2d_pair(_OFF_A, _BF16_CODE, p1, rows1 if mn1 else k, k if mn1 else rows1, ld1, 64 if mn1 else box_k,
                       box_k if mn1 else box1, 128 if mn1 else sw,
                       _OFF_B, _BF16_CODE, p2, rows2 if mn2 else k, k if mn2 else rows2, ld2, 64 if mn2 else box_k,
                       box_k if mn2 else box2, 128 if mn2 else sw)


def _gemm(layout: str, a, b, d, c) -> None:
    a_mn, b_mn = layout[0] == "t", layout[1] == "n"
    args = _fast_checks(a_mn, b_mn, a, b, d, c)
    if args is None or args[7] < 0:
        args = _validate(layout, a, b, d, c)
    m, n, k, lda, ldb, ldd, ldc, index, pa, pb, pd, pc = args
    if m == 0 or n == 0:
        return
    if k == 0:
        write_empty_reduction(d, c)
        return
    num_sms = num_sms_for(index)
    kern, grid, block_m, block_n, block_k, swap, splits, reduce = _plan(
        m_bucket(m), n, k, _OUT[d.dtype], c is not None, index, num_sms, target_of(index), layout)
    out_ptr, out_ld, c_ptr, c_ld, split_stride = pd, ldd, pc, ldc, 0
    if splits > 1:  # fp32 workspace [splits, M, N]
        ws = SplitK.workspace(splits, m, n, d.device)
        out_ptr, out_ld, c_ptr, c_ld, split_stride = ws.data_ptr(), n, 0, 0, m * n
    if swap:  # first operand = B (rows N), second = A (rows M); kernel m/n = N/M
        tmaps = _operand_maps(pb, n, ldb, block_m, b_mn, pa, m, lda, block_n, a_mn, k, block_k)
        params = _pack(out_ptr, c_ptr, 0, 0, n, m, k, out_ld, c_ld, 1, 0, splits, split_stride)
    else:
        tmaps = _operand_maps(pa, m, lda, block_m, a_mn, pb, n, ldb, block_n, b_mn, k, block_k)
        params = _pack(out_ptr, c_ptr, 0, 0, m, n, k, out_ld, c_ld, 1, 0, splits, split_stride)
    b_ = BOUND if BOUND.launch is not None else bound()
    b_.launch(kern.handle, grid, 1, 1, kern.threads, kern.smem_bytes, b_.stream(index),
              b_.pdl if b_.pdl is not None else get_pdl(), params, tmaps)
    if splits > 1:
        reduce.reduce(out_ptr, pd, pc, m, n, ldd, ldc, splits, index)


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
