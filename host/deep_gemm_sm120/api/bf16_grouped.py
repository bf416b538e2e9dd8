"""M-grouped BF16 GEMMs for MoE: contiguous (tokens sorted by expert) and masked (per-expert padded batches).

Layout contract (device_layer/layout/sm120_grouped_layout.cuh): every group of a contiguous layout starts
at a multiple of `get_mk_alignment_for_contiguous_layout()` rows. A boundary inside a block would make
the kernel use one expert's weights for another expert's tokens, so the host checks the layout before the
launch (one device reduction and one sync) unless told not to: `check_layout=False`, or automatically
while a CUDA graph is being captured (a sync is illegal there).
"""
from __future__ import annotations

import os

import torch

from .. import jit, runtime
from ..arch import EMULATE_ENV, target_for_device
from ..configs import BF16_GROUPED_CONFIGS, MK_ALIGNMENT_FOR_CONTIGUOUS_LAYOUT, Bf16GemmSpec
from ..device import num_sms_for
from ..validation import (output_row_stride, require_dtype, require_same_cuda_device, require_tensor,
                          tma_row_stride_bytes)

_plans: dict[tuple, tuple] = {}


def get_mk_alignment_for_contiguous_layout() -> int:
    """Rows: every group of an M-grouped contiguous layout must start at a multiple of this."""
    return MK_ALIGNMENT_FOR_CONTIGUOUS_LAYOUT


def _require_shape(name: str, t: torch.Tensor, shape: tuple, what: str) -> None:
    if tuple(t.shape) != shape:
        raise ValueError(f"{name} must be {what} = {shape}, got {tuple(t.shape)}")


def _grouped_rows_view(name: str, t: torch.Tensor) -> torch.Tensor:
    """[G, R, C] with contiguous rows -> the 2D [G*R, C] view the kernel's descriptors use."""
    g, r, c = t.shape
    if t.stride(2) != 1 and c > 1:
        raise ValueError(f"{name} must have a contiguous last dimension, got strides {tuple(t.stride())}")
    if g > 1 and t.stride(0) != r * t.stride(1):
        raise ValueError(f"{name} groups must be stacked densely (stride(0) == {r} * stride(1)), "
                         f"got strides {tuple(t.stride())}")
    return t.view(g * r, c) if t.is_contiguous() else t.as_strided((g * r, c), (t.stride(1), t.stride(2)))


def _require_grouped_operands(a, b, d, index_name: str, index) -> None:
    """Tensor types and dtypes shared by the M-grouped GEMMs: bf16 a/b/d and an int32 index tensor."""
    for name, t in (("a", a), ("b", b), ("d", d), (index_name, index)):
        require_tensor(name, t)
    require_dtype("a", a, (torch.bfloat16,))
    require_dtype("b", b, (torch.bfloat16,))
    require_dtype("d", d, (torch.bfloat16,), unsupported=True)
    require_dtype(index_name, index, (torch.int32,))


def check_contiguous_layout(layout: torch.Tensor, m: int, num_groups: int, psum: bool) -> None:
    """Raise ValueError unless `layout` obeys the contiguous-layout contract (works on any device)."""
    align = MK_ALIGNMENT_FOR_CONTIGUOUS_LAYOUT
    if not psum:
        blocks = layout.view(-1, align)
        first = blocks[:, :1]
        bad_range = (blocks < -1) | (blocks >= num_groups)
        mixed = (blocks != first) & (blocks != -1)          # two groups in one block
        late_start = (first == -1) & (blocks != -1)          # padding before real rows
        bad = (bad_range | mixed | late_start).any(dim=1)
        if bool(bad.any()):
            i = int(bad.nonzero()[0, 0])
            row = i * align
            if bool(bad_range[i].any()):
                raise ValueError(f"grouped_layout rows {row}..{row + align - 1} hold a group id outside "
                                 f"[-1, {num_groups}) (b has {num_groups} groups)")
            raise ValueError(f"grouped_layout rows {row}..{row + align - 1} mix groups or start with padding: "
                             f"each group must start at a multiple of get_mk_alignment_for_contiguous_layout() "
                             f"= {align} rows, with -1 padding only after a group's rows")
        return
    ends = layout.long()
    prev = torch.cat([ends.new_zeros(1), ends[:-1]])
    starts = (prev + align - 1) // align * align
    bad = (ends < prev) | ((ends < starts) & (ends != prev)) | (ends > m)
    if bool(bad.any()):
        g = int(bad.nonzero()[0, 0])
        raise ValueError(f"grouped_layout (psum) entry {g} = {int(ends[g])} is not a valid group end: ends must "
                         f"not decrease, each non-empty group starts at the previous end rounded up to {align}, "
                         f"and the last end is <= M = {m}")


def require_contiguous_layout_shape(grouped_layout: torch.Tensor, m: int, groups: int, psum: bool) -> None:
    """Shape / contiguity of a contiguous-layout index tensor (no device access)."""
    align = MK_ALIGNMENT_FOR_CONTIGUOUS_LAYOUT
    if psum:
        _require_shape("grouped_layout", grouped_layout, (groups,), "[G] (group end rows, psum layout)")
    else:
        _require_shape("grouped_layout", grouped_layout, (m,), "[M] (one group id per row)")
        if m % align:
            raise ValueError(f"M = {m} must be a multiple of get_mk_alignment_for_contiguous_layout() = {align} "
                             f"(pad each group with -1 rows)")
    if not grouped_layout.is_contiguous():
        raise ValueError("grouped_layout must be contiguous")


def maybe_check_contiguous_layout(check: bool | None, grouped_layout: torch.Tensor, m: int, groups: int,
                                  psum: bool) -> None:
    """The layout contract check (one device reduction + sync), skipped while a CUDA graph is captured unless
    `check` forces it either way."""
    if check is None:
        check = not torch.cuda.is_current_stream_capturing()
    if check:
        check_contiguous_layout(grouped_layout, m, groups, psum)


def _plan(kind: str, m_hint: int, k: int, index: int) -> tuple:
    num_sms = num_sms_for(index)
    key = (kind, m_hint <= 64, index, num_sms, os.environ.get(EMULATE_ENV))
    plan = _plans.get(key)
    if plan is None:
        target = target_for_device(index)
        cfg = BF16_GROUPED_CONFIGS[1] if m_hint <= 64 else BF16_GROUPED_CONFIGS[0]
        kern = jit.get_kernel(Bf16GemmSpec(cfg, "bf16", False, False, kind), target, index)
        plan = (kern.handle, kern.threads, cfg, num_sms)
        _plans[key] = plan
    return plan


def _launch(plan, tiles: int, index: int, a2, m_rows_a: int, b2, rows_b: int, d_ptr: int, layout_ptr: int,
            m: int, n: int, k: int, ldd: int, groups: int, psum: bool) -> None:
    handle, threads, cfg, num_sms = plan
    lda = tma_row_stride_bytes("a", a2)
    ldb = tma_row_stride_bytes("b", b2)
    stream = runtime.current_stream_fn()(index)
    runtime.gemm_launcher()(handle, min(num_sms, max(tiles, 1)), threads, stream, a2.data_ptr(), m_rows_a, lda,
                            cfg.block_m, b2.data_ptr(), rows_b, ldb, cfg.block_n, cfg.block_k, d_ptr, 0, layout_ptr, 0,
                            m, n, k, ldd, 0, groups, 1 if psum else 0, False, False, 1, 0)


def m_grouped_bf16_gemm_nt_contiguous(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor,
                                      grouped_layout: torch.Tensor, use_psum_layout: bool = False,
                                      check_layout: bool | None = None) -> None:
    """d[r] = a[r] @ b[g(r)].T for rows r of group g(r); padding rows of d are left untouched.

    a: [M, K] bf16, rows sorted by group; b: [G, N, K] bf16; d: [M, N] bf16.
    grouped_layout: int32 [M] group id per row (-1 = padding), or with use_psum_layout int32 [G] group ends.
    check_layout: None = validate unless a CUDA graph is being captured; True/False force it on/off.
    """
    _require_grouped_operands(a, b, d, "grouped_layout", grouped_layout)
    if a.dim() != 2 or b.dim() != 3:
        raise ValueError(f"a must be [M, K] and b [G, N, K], got {tuple(a.shape)} and {tuple(b.shape)}")
    m, k = a.shape
    g, n, kb = b.shape
    if kb != k:
        raise ValueError(f"a is [M, K] = {tuple(a.shape)} and b is [G, N, K] = {tuple(b.shape)}: K must agree")
    _require_shape("d", d, (m, n), "[M, N]")
    require_contiguous_layout_shape(grouped_layout, m, g, use_psum_layout)
    dev = require_same_cuda_device(a=a, b=b, d=d, grouped_layout=grouped_layout)
    ldd = output_row_stride("d", d)
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    target_for_device(index)
    maybe_check_contiguous_layout(check_layout, grouped_layout, m, g, use_psum_layout)
    if m == 0 or n == 0 or g == 0:
        return
    if k == 0:
        raise ValueError("K must be positive for grouped GEMMs")
    b2 = _grouped_rows_view("b", b)
    plan = _plan("m_contiguous", m, k, index)
    cfg = plan[2]
    tiles = -(-m // cfg.block_m) * -(-n // cfg.block_n)
    _launch(plan, tiles, index, a, m, b2, g * n, d.data_ptr(), grouped_layout.data_ptr(), m, n, k, ldd, g,
            use_psum_layout)


def m_grouped_bf16_gemm_nt_masked(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, masked_m: torch.Tensor,
                                  expected_m: int) -> None:
    """d[g, :masked_m[g]] = a[g, :masked_m[g]] @ b[g].T; rows past masked_m[g] are left untouched.

    a: [G, M, K] bf16; b: [G, N, K] bf16; d: [G, M, N] bf16; masked_m: int32 [G] on the device (read by the
    kernel, never by the host: CUDA-graph safe, no sync, no allocation). expected_m: typical rows per
    group, used only to pick the tile size.
    """
    _require_grouped_operands(a, b, d, "masked_m", masked_m)
    if a.dim() != 3 or b.dim() != 3:
        raise ValueError(f"a must be [G, M, K] and b [G, N, K], got {tuple(a.shape)} and {tuple(b.shape)}")
    g, m, k = a.shape
    if tuple(b.shape[::2]) != (g, k):
        raise ValueError(f"a is [G, M, K] = {tuple(a.shape)} and b is [G, N, K] = {tuple(b.shape)}: G and K must agree")
    n = b.shape[1]
    _require_shape("d", d, (g, m, n), "[G, M, N]")
    _require_shape("masked_m", masked_m, (g,), "[G]")
    if not isinstance(expected_m, int) or isinstance(expected_m, bool) or expected_m < 0:
        raise TypeError(f"expected_m must be a non-negative int, got {expected_m!r}")
    dev = require_same_cuda_device(a=a, b=b, d=d, masked_m=masked_m)
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    target_for_device(index)
    if g == 0 or m == 0 or n == 0:
        return
    if k == 0:
        raise ValueError("K must be positive for grouped GEMMs")
    a2, b2, d2 = _grouped_rows_view("a", a), _grouped_rows_view("b", b), _grouped_rows_view("d", d)
    ldd = output_row_stride("d", d2)
    plan = _plan("m_masked", max(expected_m, 1), k, index)
    cfg = plan[2]
    tiles = g * -(-m // cfg.block_m) * -(-n // cfg.block_n)
    _launch(plan, tiles, index, a2, g * m, b2, g * n, d2.data_ptr(), masked_m.data_ptr(), m, n, k, ldd, g, False)


def k_grouped_bf16_gemm_tn_contiguous(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, ks,
                                      c: torch.Tensor | None = None) -> None:
    """d[g] = c[g] + a_g.T @ b_g for every group g (weight gradients of MoE experts).

    a: [sum(ks), M] bf16 and b: [sum(ks), N] bf16 hold the groups' K rows back to back (a_g = rows
    sum(ks[:g]) .. sum(ks[:g+1])); d and c: [G, M, N] fp32 (c optional, may alias d). ks: per-group K as
    Python ints (any values, including 0: an empty group gives d[g] = c[g]). One launch for all groups: the
    kernel rebases its TMA descriptors on the device when the group changes (tensormap.replace), so each
    group's last K block is zero-filled instead of reading the next group's rows.
    """
    for name, t in (("a", a), ("b", b), ("d", d)):
        require_tensor(name, t)
    require_dtype("a", a, (torch.bfloat16,))
    require_dtype("b", b, (torch.bfloat16,))
    require_dtype("d", d, (torch.float32,), unsupported=True)
    if a.dim() != 2 or b.dim() != 2 or d.dim() != 3:
        raise ValueError(f"a must be [sum K, M], b [sum K, N] and d [G, M, N], got {tuple(a.shape)}, "
                         f"{tuple(b.shape)} and {tuple(d.shape)}")
    try:
        ks = [int(x) for x in ks]
    except (TypeError, ValueError):
        raise TypeError(f"ks must be a sequence of ints, got {ks!r}") from None
    if any(x < 0 for x in ks):
        raise ValueError(f"ks must be non-negative, got {ks}")
    total_k, m = a.shape
    g = len(ks)
    n = b.shape[1]
    if b.shape[0] != total_k or sum(ks) != total_k:
        raise ValueError(f"a is [sum K, M] = {tuple(a.shape)}, b is [sum K, N] = {tuple(b.shape)} and sum(ks) = "
                         f"{sum(ks)}: the K extents must agree")
    _require_shape("d", d, (g, m, n), "[G, M, N]")
    tensors = {"a": a, "b": b, "d": d}
    if c is not None:
        require_tensor("c", c)
        require_dtype("c", c, (torch.float32,))
        _require_shape("c", c, (g, m, n), "[G, M, N]")
        tensors["c"] = c
    dev = require_same_cuda_device(**tensors)
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    target_for_device(index)
    if g == 0 or m == 0 or n == 0:
        return
    d2 = _grouped_rows_view("d", d)
    c2 = _grouped_rows_view("c", c) if c is not None else None
    ldd = output_row_stride("d", d2)
    ldc = output_row_stride("c", c2) if c2 is not None else 0
    if total_k == 0:  # every group empty: nothing for TMA to describe
        if c is None:
            d.zero_()
        elif c.data_ptr() != d.data_ptr():
            d.copy_(c)
        return
    lda = tma_row_stride_bytes("a", a)
    ldb = tma_row_stride_bytes("b", b)
    num_sms = num_sms_for(index)
    key = ("k_contiguous", m * n <= 512 * 512, c is not None, index, num_sms, os.environ.get(EMULATE_ENV))
    plan = _plans.get(key)
    if plan is None:
        from ..configs import BF16_K_GROUPED_CONFIGS

        cfg = BF16_K_GROUPED_CONFIGS[1] if key[1] else BF16_K_GROUPED_CONFIGS[0]
        kern = jit.get_kernel(Bf16GemmSpec(cfg, "fp32", c is not None, False, "k_contiguous", "tn"),
                              target_for_device(index), index)
        plan = (kern.handle, kern.threads, cfg, num_sms)
        _plans[key] = plan
    handle, threads, cfg, _ = plan
    grid = min(num_sms, g * -(-m // cfg.block_m) * -(-n // cfg.block_n))
    # per (CTA, group) descriptor slots, and the kernel's aux block: bases, row strides, slots
    slots = torch.empty(grid * g * 2 * 128, dtype=torch.uint8, device=dev)
    # Small metadata goes through pinned host memory with stream-ordered copies: no sync, and legal inside
    # CUDA-graph capture (a replay re-sends the same ks, so capture with the ks the replays will use).
    ks_dev = torch.tensor(ks, dtype=torch.int32).pin_memory().to(dev, non_blocking=True)
    aux = torch.tensor([a.data_ptr(), b.data_ptr(), lda, ldb, slots.data_ptr()],
                       dtype=torch.int64).pin_memory().to(dev, non_blocking=True)
    stream = runtime.current_stream_fn()(index)
    runtime.gemm_launcher()(handle, grid, threads, stream, a.data_ptr(), m, lda, cfg.block_m, b.data_ptr(), n, ldb,
                            cfg.block_n, cfg.block_k, d2.data_ptr(), c2.data_ptr() if c2 is not None else 0,
                            ks_dev.data_ptr(), aux.data_ptr(), m, n, total_k, ldd, ldc, g, 0, True, True, 1, 0)
