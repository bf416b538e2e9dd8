"""BF16 dense GEMMs: D = C + op(A)·op(B) in DeepGEMM's four layouts, D/C [M,N] in bf16 or fp32.

    nt: a [M, K], b [N, K]     nn: a [M, K], b [K, N]     tn: a [K, M], b [K, N]     tt: a [K, M], b [N, K]

(first letter: a as [M, K] "n" or [K, M] "t"; second letter: b as [K, N] "n" or [N, K] "t", DeepGEMM's naming)

The kernel reads MN-major operands (a of tn/tt, b of nn/tt) straight through TMA + ldmatrix.trans.
A call is checked once per signature (dtypes, shapes, strides, devices, the 16-byte alignment class of the
addresses: launch.tensor_key): the first call with a signature runs every check, which raise the typed error
naming what was expected, and plans the launch; later ones only encode the new addresses and launch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ... import jit, keywords
from ...arch import target_of
from ...checks import device_of, output_row_stride, require_2d, require_tensor, tma_operand, write_empty_reduction
from ...core.rules import dtype_name
from ...core.tma import DTYPE, tma_2d, tma_2d_pair
from ...device import num_sms_for
from ...launch import KEY_ERRORS, CallCache, fast_calls, launch, recording, tensor_key
from ...services.split_k_reduce.launch import SplitK
from .kernel import PARAMS, Bf16GemmSpec
from .plan import dense_plan, m_bucket
from .rules import dense_rule

_OUT = {torch.bfloat16: "bf16", torch.float32: "fp32"}
_BF16_CODE = DTYPE["bfloat16"]
_pack = PARAMS.packer()
_OFF_A, _OFF_B = PARAMS.offsets["tmap_a"], PARAMS.offsets["tmap_b"]
_RULES = {lay: dense_rule(lay) for lay in ("nt", "nn", "tn", "tt")}


@dataclass(frozen=True)
class _Call:
    """What the checks and the plan of one call signature produced."""

    target: str
    index: int
    m: int
    n: int
    k: int
    lda: int
    ldb: int
    ldd: int
    ldc: int
    kernel: object = None  # None: nothing to launch (an empty output or an empty reduction)
    grid: int = 0
    block_m: int = 0
    block_n: int = 0
    block_k: int = 0
    swap: bool = False
    splits: int = 1
    reduce: SplitK | None = None


_CALLS = CallCache()


def _shapes(layout: str, a: torch.Tensor, b: torch.Tensor) -> tuple[int, int, int, int]:
    """(m, n, k from a, k from b) for the layout."""
    m, ka = (a.shape[1], a.shape[0]) if layout[0] == "t" else (a.shape[0], a.shape[1])
    n, kb = (b.shape[1], b.shape[0]) if layout[1] == "n" else (b.shape[0], b.shape[1])
    return m, n, ka, kb


def _prepare(layout: str, a, b, d, c) -> _Call:
    """Every check of a call (each raises the typed error naming what was expected), then its plan."""
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
    _RULES[layout](
        m=m,
        n=n,
        k=k,
        a_dtype=dtype_name(a.dtype),
        b_dtype=dtype_name(b.dtype),
        out_dtype=dtype_name(d.dtype),
        c_dtype=dtype_name(c.dtype) if c is not None else None,
        lda=lda,
        ldb=ldb,
    )
    if c is not None and tuple(c.shape) != (m, n):
        raise ValueError(f"c must be [M, N] = ({m}, {n}), got {tuple(c.shape)}")
    ldd = output_row_stride("d", d)
    ldc = output_row_stride("c", c) if c is not None else 0
    index = device_of(**tensors)
    target = target_of(index)
    if m == 0 or n == 0 or k == 0:
        return _Call(target, index, m, n, k, lda_b, ldb_b, ldd, ldc)
    num_sms = num_sms_for(index)
    p = dense_plan(m_bucket(m), n, k, num_sms, layout)
    cfg, splits = p.config, p.splits
    # split-K slices write fp32 partials (no C); the reduce kernel adds them in order, then C
    out = _OUT[d.dtype]
    spec = Bf16GemmSpec(cfg, "fp32" if splits > 1 else out, c is not None and splits == 1, p.swap_ab, "normal", layout)
    reduce = SplitK(out, c is not None, target, index, num_sms) if splits > 1 else None
    return _Call(
        target,
        index,
        m,
        n,
        k,
        lda_b,
        ldb_b,
        ldd,
        ldc,
        jit.get_kernel(spec, target, index),
        p.grid(num_sms),
        cfg.block_m,
        cfg.block_n,
        cfg.block_k,
        p.swap_ab,
        splits,
        reduce,
    )


def _operand_map(offset: int, ptr: int, rows: int, k: int, stride: int, box_rows: int, box_k: int, mn: bool) -> bytes:
    """K-major: [rows][k] with box [box_rows][box_k], swizzle = box_k * 2 bytes. MN-major: [k][rows] with
    64-element (128-byte, 128B-swizzled) boxes of box_k rows; the kernel issues box_rows / 64 of them."""
    if mn:
        return tma_2d(offset, _BF16_CODE, ptr, rows, k, stride, 64, box_k, 128)
    return tma_2d(offset, _BF16_CODE, ptr, k, rows, stride, box_k, box_rows, box_k * 2)


def _operand_maps(
    p1: int,
    rows1: int,
    ld1: int,
    box1: int,
    mn1: bool,
    p2: int,
    rows2: int,
    ld2: int,
    box2: int,
    mn2: bool,
    k: int,
    box_k: int,
) -> bytes:
    """Both operand maps (kernel order) in one pack: _operand_map's layouts."""
    sw = box_k * 2
    return tma_2d_pair(
        _OFF_A,
        _BF16_CODE,
        p1,
        rows1 if mn1 else k,
        k if mn1 else rows1,
        ld1,
        64 if mn1 else box_k,
        box_k if mn1 else box1,
        128 if mn1 else sw,
        _OFF_B,
        _BF16_CODE,
        p2,
        rows2 if mn2 else k,
        k if mn2 else rows2,
        ld2,
        64 if mn2 else box_k,
        box_k if mn2 else box2,
        128 if mn2 else sw,
    )


def _gemm(layout: str, a, b, d, c, served: tuple | None = None) -> None:
    """served: (FastCalls table, the signature it read, the arguments it was called with), or None."""
    if served is not None:
        key = (layout, served[1])
    else:
        try:
            key = (layout, tensor_key(a), tensor_key(b), tensor_key(d), None if c is None else tensor_key(c))
        except KEY_ERRORS:  # not tensors, or storage-less ones: _prepare names what was expected
            key = None
    call = _CALLS.get(key) if key is not None else None
    if call is None or target_of(call.index) != call.target:
        call = _prepare(layout, a, b, d, c)
        if key is not None:
            _CALLS.put(key, call)
        if served is not None:  # a new signature: what it launches is kept for the C table
            with recording(served[0], served[2]):
                _run(call, layout, a, b, d, c)
            return
    _run(call, layout, a, b, d, c)


def _run(call: _Call, layout: str, a, b, d, c) -> None:
    if call.kernel is None:
        if call.m and call.n:  # K = 0: d = c
            write_empty_reduction(d, c)
        return
    m, n, k, index, splits = call.m, call.n, call.k, call.index, call.splits
    pa, pb, pd, pc = a.data_ptr(), b.data_ptr(), d.data_ptr(), 0 if c is None else c.data_ptr()
    out_ptr, out_ld, c_ptr, c_ld, split_stride = pd, call.ldd, pc, call.ldc, 0
    if splits > 1:  # fp32 workspace [splits, M, N]
        ws = SplitK.workspace(splits, m, n, d.device)
        out_ptr, out_ld, c_ptr, c_ld, split_stride = ws.data_ptr(), n, 0, 0, m * n
    a_mn, b_mn = layout[0] == "t", layout[1] == "n"
    if call.swap:  # first operand = B (rows N), second = A (rows M); kernel m/n = N/M
        tmaps = _operand_maps(pb, n, call.ldb, call.block_m, b_mn, pa, m, call.lda, call.block_n, a_mn, k, call.block_k)
        params = _pack(out_ptr, c_ptr, 0, 0, n, m, k, out_ld, c_ld, 1, 0, splits, split_stride)
    else:
        tmaps = _operand_maps(pa, m, call.lda, call.block_m, a_mn, pb, n, call.ldb, call.block_n, b_mn, k, call.block_k)
        params = _pack(out_ptr, c_ptr, 0, 0, m, n, k, out_ld, c_ld, 1, 0, splits, split_stride)
    launch(call.kernel, call.grid, params, tmaps, index)
    if splits > 1:
        call.reduce.reduce(out_ptr, pd, pc, m, n, call.ldd, call.ldc, splits, index)


def _dense(layout: str, doc: str):
    name = f"bf16_gemm_{layout}"
    dims = "mn" if layout[0] == "t" else "nk"  # DeepGEMM's defaults (no effect here)

    fast = fast_calls("TTTTV")

    def gemm(a, b, d, c=None, compiled_dims=dims, alpha=None, epilogue=None) -> None:
        sig = fast(a, b, d, c, compiled_dims) if alpha is None and epilogue is None else None
        if sig is True:  # served in C: what the checked call of this signature launched, at these addresses
            return
        keywords.gemm(name, compiled_dims, epilogue, alpha)
        _gemm(layout, a, b, d, c, None if sig is None else (fast, sig, (a, b, d, c, compiled_dims)))

    gemm.__name__ = gemm.__qualname__ = name
    gemm.__doc__ = doc + (
        "\n\nDeepGEMM's signature: `compiled_dims` is accepted (no effect), `alpha` None or 1, "
        "`epilogue` None / Identity() / Alpha(1)."
    )
    return gemm


bf16_gemm_nt = _dense(
    "nt", "d = c + a @ b.T with a [M, K], b [N, K] (c optional, may alias d); written into the preallocated d."
)
bf16_gemm_nn = _dense("nn", "d = c + a @ b with a [M, K], b [K, N].")
bf16_gemm_tn = _dense("tn", "d = c + a.T @ b with a [K, M], b [K, N] (e.g. weight gradients).")
bf16_gemm_tt = _dense("tt", "d = c + a.T @ b.T with a [K, M], b [N, K].")
