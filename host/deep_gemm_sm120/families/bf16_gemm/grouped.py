"""M-grouped (MoE: contiguous and masked) and K-grouped (expert weight gradients) BF16 GEMMs, with DeepGEMM's
signatures. The grouped-layout contract and its check are shared with the block-scaled family (checks.py)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch

from ... import jit, keywords
from ...arch import target_of
from ...checks import (
    device_of,
    get_index_checks,
    maybe_check_contiguous_layout,
    output_row_stride,
    require_contiguous_layout_shape,
    require_int32,
    require_shape,
    require_tensor,
    rows_view,
    tma_operand,
)
from ...core.arith import ceil_div
from ...core.rules import dtype_name
from ...device import num_sms_for
from ...launch import KEY_ERRORS, CallCache, fast_calls, launch, no_fast, recording, tensor_key
from ...utils.layout import get_mk_alignment_for_contiguous_layout
from .api import _operand_map, _operand_maps
from .kernel import PARAMS, Bf16GemmSpec
from .plan import grouped_config, k_grouped_config
from .rules import k_grouped_rule, m_grouped_contiguous_rule, m_grouped_masked_rule

_OFF_A, _OFF_B = PARAMS.offsets["tmap_a"], PARAMS.offsets["tmap_b"]
_pack = PARAMS.packer()  # d, c, layout, aux, m, n, k, ldd, ldc, num_groups, psum_layout, num_splits, split_stride
_K_GROUPED = CallCache()  # K-grouped calls checked and planned once per signature


@lru_cache(maxsize=256)
def _kernel(gemm_type: str, cfg, with_c: bool, index: int, target: str) -> jit.LoadedKernel:
    layout, out = ("tn", "fp32") if gemm_type == "k_contiguous" else ("nt", "bf16")
    return jit.get_kernel(Bf16GemmSpec(cfg, out, with_c, False, gemm_type, layout), target, index)


def _require_bf16_operands(a, b, d, index_name: str, index) -> None:
    for name, t in (("a", a), ("b", b), ("d", d)):
        require_tensor(name, t)
    require_int32(index_name, index)


@dataclass(frozen=True)
class _GroupedCall:
    """What the checks and the plan of one M-grouped call signature (contiguous or masked) produced (kernel
    None: nothing to launch)."""

    target: str
    index: int
    kernel: object
    grid: int
    g: int
    m: int
    n: int
    k: int
    lda: int
    ldb: int
    ldd: int
    block_m: int
    block_n: int
    block_k: int


_GROUPED = CallCache()  # contiguous and masked calls; keys start with 0 / 1


def _prepare_contiguous(a, b, d, grouped_layout, use_psum_layout: bool) -> _GroupedCall:
    """Every check of a contiguous call that its signature decides (each raises the typed error naming what
    was expected), then its plan. The layout's values are checked per call."""
    _require_bf16_operands(a, b, d, "grouped_layout", grouped_layout)
    if a.dim() != 2 or b.dim() != 3:
        raise ValueError(f"a must be [M, K] and b [G, N, K], got {tuple(a.shape)} and {tuple(b.shape)}")
    m, k = a.shape
    g, n, kb = b.shape
    if kb != k:
        raise ValueError(f"a is [M, K] = {tuple(a.shape)} and b is [G, N, K] = {tuple(b.shape)}: K must agree")
    require_shape("d", d, (m, n), "[M, N]")
    m_grouped_contiguous_rule(
        m=m,
        n=n,
        k=k,
        num_groups=g,
        a_dtype=dtype_name(a.dtype),
        b_dtype=dtype_name(b.dtype),
        out_dtype=dtype_name(d.dtype),
        use_psum_layout=use_psum_layout,
    )
    require_contiguous_layout_shape(grouped_layout, m, g, use_psum_layout)
    ldd = output_row_stride("d", d)
    index = device_of(a=a, b=b, d=d, grouped_layout=grouped_layout)
    target = target_of(index)
    if m == 0 or n == 0 or g == 0:
        return _GroupedCall(target, index, None, 0, g, m, n, k, 0, 0, 0, 0, 0, 0)
    (_, lda), (_, ldb) = tma_operand("a", a), tma_operand("b", rows_view("b", b))
    cfg = grouped_config(m)
    tiles = ceil_div(m, cfg.block_m) * ceil_div(n, cfg.block_n)
    kern = _kernel("m_contiguous", cfg, False, index, target)
    grid = min(num_sms_for(index), max(tiles, 1))
    return _GroupedCall(target, index, kern, grid, g, m, n, k, lda, ldb, ldd, cfg.block_m, cfg.block_n, cfg.block_k)


def m_grouped_bf16_gemm_nt_contiguous(
    a: torch.Tensor,
    b: torch.Tensor,
    d: torch.Tensor,
    grouped_layout: torch.Tensor,
    compiled_dims: str = "nk",
    use_psum_layout: bool = False,
    ensure_zero_padding: bool = True,
    expected_m_for_psum_layout: int | None = None,
    epilogue=None,
    *,
    check_layout: bool | None = None,
) -> None:
    """d[r] = a[r] @ b[g(r)].T for rows r of group g(r); padding rows of d are left untouched.

    a: [M, K] bf16, rows sorted by group; b: [G, N, K] bf16; d: [M, N] bf16.
    grouped_layout: int32 [M] group id per row (-1 = padding), or with use_psum_layout int32 [G] group ends.
    ensure_zero_padding (psum layout): rows between a group's end and the next group's aligned start become 0.
    expected_m_for_psum_layout: a tile hint, accepted. check_layout (ours, keyword only): None = validate the
    layout unless a CUDA graph is being captured; True/False force it on/off. Checked once per call signature;
    the layout's values (unless check_layout=False) on every call.
    """
    fast_args = (
        a, b, d, grouped_layout, compiled_dims, use_psum_layout, ensure_zero_padding, expected_m_for_psum_layout,
        check_layout,
    )  # fmt: skip
    # served in C only where the checked path reads no layout value (check_layout=False, or index checks off)
    sig = _FAST_CONTIG(*fast_args) if epilogue is None and _layout_unread(check_layout) else None
    if sig is True:
        return
    name = "m_grouped_bf16_gemm_nt_contiguous"
    keywords.gemm(name, compiled_dims, epilogue)
    use_psum_layout = keywords.flag(name, "use_psum_layout", use_psum_layout)
    zero = keywords.flag(name, "ensure_zero_padding", ensure_zero_padding)
    if sig is not None:
        key, call = (0, sig), _GROUPED.get((0, sig))
    else:
        try:
            key = (0, tensor_key(a), tensor_key(b), tensor_key(d), tensor_key(grouped_layout), use_psum_layout)
            call = _GROUPED.get(key)
        except KEY_ERRORS:  # not tensors, or storage-less ones: the checks name what was expected
            key, call = None, None
    if call is None or target_of(call.index) != call.target:
        call = _prepare_contiguous(a, b, d, grouped_layout, use_psum_layout)
        if sig is not None:  # a new signature: what it launches is kept for the C table
            with recording(_FAST_CONTIG, fast_args):
                _run_contiguous(call, check_layout, a, b, d, grouped_layout, use_psum_layout, zero)
        else:
            _run_contiguous(call, check_layout, a, b, d, grouped_layout, use_psum_layout, zero)
        if key is not None:  # stored once the layout's values passed: a failing call leaves no entry (as FP8's)
            _GROUPED.put(key, call)
        return
    _run_contiguous(call, check_layout, a, b, d, grouped_layout, use_psum_layout, zero)


_FAST_CONTIG = fast_calls("TTTTVVVVV")


def _layout_unread(check_layout) -> bool:
    """Whether a contiguous call's checked path reads no value of its layout (the C table may serve it)."""
    return check_layout is False or (check_layout is None and not get_index_checks())


def _run_contiguous(call: _GroupedCall, check_layout, a, b, d, grouped_layout, use_psum_layout, zero) -> None:
    maybe_check_contiguous_layout(check_layout, grouped_layout, call.m, call.g, use_psum_layout)
    if call.kernel is None:
        return
    tmaps = _operand_maps(
        a.data_ptr(), call.m, call.lda, call.block_m, False,
        b.data_ptr(), call.g * call.n, call.ldb, call.block_n, False, call.k, call.block_k,
    )  # fmt: skip
    params = _pack(
        d.data_ptr(), 0, grouped_layout.data_ptr(), 0, call.m, call.n, call.k, call.ldd, 0, call.g,
        int(use_psum_layout), 1, 0,
    )  # fmt: skip
    launch(call.kernel, call.grid, params, tmaps, call.index)
    if zero and use_psum_layout:
        no_fast()  # torch operations on the layout's values, not a recorded launch
        keywords.zero_psum_padding(d, grouped_layout, get_mk_alignment_for_contiguous_layout())


def m_grouped_bf16_gemm_nn_contiguous(
    a, b, d, grouped_layout, compiled_dims="nk", use_psum_layout=False, ensure_zero_padding=True, epilogue=None
):
    raise NotImplementedError(
        "m_grouped_bf16_gemm_nn_contiguous: M-grouped BF16 takes b as [G, N, K] (K-major) "
        "only; use m_grouped_bf16_gemm_nt_contiguous"
    )


def _prepare_masked(a, b, d, masked_m, expected_m) -> _GroupedCall:
    """Every check of a masked call (each raises the typed error naming what was expected), then its plan."""
    _require_bf16_operands(a, b, d, "masked_m", masked_m)
    if a.dim() != 3 or b.dim() != 3:
        raise ValueError(f"a must be [G, M, K] and b [G, N, K], got {tuple(a.shape)} and {tuple(b.shape)}")
    g, m, k = a.shape
    if tuple(b.shape[::2]) != (g, k):
        raise ValueError(f"a is [G, M, K] = {tuple(a.shape)} and b is [G, N, K] = {tuple(b.shape)}: G and K must agree")
    n = b.shape[1]
    require_shape("d", d, (g, m, n), "[G, M, N]")
    require_shape("masked_m", masked_m, (g,), "[G]")
    m_grouped_masked_rule(
        num_groups=g,
        m=m,
        n=n,
        k=k,
        expected_m=keywords.expected_m("m_grouped_bf16_gemm_nt_masked", expected_m),
        a_dtype=dtype_name(a.dtype),
        b_dtype=dtype_name(b.dtype),
        out_dtype=dtype_name(d.dtype),
    )
    index = device_of(a=a, b=b, d=d, masked_m=masked_m)
    target = target_of(index)
    if g == 0 or m == 0 or n == 0:
        return _GroupedCall(target, index, None, 0, g, m, n, k, 0, 0, 0, 0, 0, 0)
    a2, b2, d2 = rows_view("a", a), rows_view("b", b), rows_view("d", d)
    (_, lda), (_, ldb) = tma_operand("a", a2), tma_operand("b", b2)
    cfg = grouped_config(max(expected_m, 1))
    tiles = g * ceil_div(m, cfg.block_m) * ceil_div(n, cfg.block_n)
    kern = _kernel("m_masked", cfg, False, index, target)
    grid = min(num_sms_for(index), max(tiles, 1))
    return _GroupedCall(
        target,
        index,
        kern,
        grid,
        g,
        m,
        n,
        k,
        lda,
        ldb,
        output_row_stride("d", d2),
        cfg.block_m,
        cfg.block_n,
        cfg.block_k,
    )


def m_grouped_bf16_gemm_nt_masked(
    a: torch.Tensor,
    b: torch.Tensor,
    d: torch.Tensor,
    masked_m: torch.Tensor,
    expected_m: int,
    compiled_dims: str = "nk",
    epilogue=None,
) -> None:
    """d[g, :masked_m[g]] = a[g, :masked_m[g]] @ b[g].T; rows past masked_m[g] are left untouched.

    a: [G, M, K] bf16; b: [G, N, K] bf16; d: [G, M, N] bf16; masked_m: int32 [G] on the device (read by the
    kernel, never by the host: CUDA-graph safe, no sync, no allocation). expected_m: typical rows per
    group, used only to pick the tile size. Checked once per call signature (launch.tensor_key of every tensor,
    and expected_m with its type); later calls encode the new addresses and launch.
    """
    sig = _FAST_MASKED(a, b, d, masked_m, expected_m, compiled_dims) if epilogue is None else None
    if sig is True:  # served in C (launch.fast_calls)
        return
    keywords.gemm("m_grouped_bf16_gemm_nt_masked", compiled_dims, epilogue)
    if sig is not None:
        key, call = (1, sig), _GROUPED.get((1, sig))
    else:
        try:
            key = (1, tensor_key(a), tensor_key(b), tensor_key(d), tensor_key(masked_m), type(expected_m), expected_m)
            call = _GROUPED.get(key)
        except KEY_ERRORS:  # not tensors, storage-less ones, or an unhashable expected_m: the checks name it
            key, call = None, None
    if call is None or target_of(call.index) != call.target:
        call = _prepare_masked(a, b, d, masked_m, expected_m)
        if key is not None:
            _GROUPED.put(key, call)
        if sig is not None:  # a new signature: what it launches is kept for the C table
            with recording(_FAST_MASKED, (a, b, d, masked_m, expected_m, compiled_dims)):
                _run_masked(call, a, b, d, masked_m)
            return
    _run_masked(call, a, b, d, masked_m)


_FAST_MASKED = fast_calls("TTTTVV")


def _run_masked(call: _GroupedCall, a, b, d, masked_m) -> None:
    if call.kernel is None:
        return
    tmaps = _operand_maps(
        a.data_ptr(), call.g * call.m, call.lda, call.block_m, False,
        b.data_ptr(), call.g * call.n, call.ldb, call.block_n, False, call.k, call.block_k,
    )  # fmt: skip
    params = _pack(d.data_ptr(), 0, masked_m.data_ptr(), 0, call.m, call.n, call.k, call.ldd, 0, call.g, 0, 1, 0)
    launch(call.kernel, call.grid, params, tmaps, call.index)


def k_grouped_bf16_gemm_tn_contiguous(
    a: torch.Tensor,
    b: torch.Tensor,
    d: torch.Tensor,
    ks_cpu=None,
    grouped_layout: torch.Tensor | None = None,
    c: torch.Tensor | None = None,
    compiled_dims: str = "mn",
    use_psum_layout: bool = False,
    epilogue=None,
    *,
    ks=None,
) -> None:
    """d[g] = c[g] + a_g.T @ b_g for every group g (weight gradients of MoE experts), DeepGEMM 2.8.1's order.

    a: [sum(ks), M] bf16 and b: [sum(ks), N] bf16 hold the groups' K rows back to back (a_g = rows
    sum(ks[:g]) .. sum(ks[:g+1])); d and c: [G, M, N] fp32 (c optional, may alias d). ks_cpu: per-group K as
    Python ints (any values, including 0: an empty group gives d[g] = c[g]); sgl-deep-gemm calls it `ks` (by
    keyword). grouped_layout: DeepGEMM's int32 [G] device copy of ks, checked and not needed here. One launch
    for all groups: the kernel rebases its TMA descriptors on the device when the group changes
    (tensormap.replace), so each group's last K block is zero-filled instead of reading the next group's rows.
    Checked and planned once per signature (the tensors' dtype, shape, strides, device and alignment class, the
    per-group K, the options); per call, the descriptor slots and the metadata block (the operands' addresses)
    are made and sent, then the one launch.
    """
    try:
        per_group = ks_cpu if ks is None else ks
        if (
            (ks is not None and ks_cpu is not None)
            or type(per_group) not in (list, tuple)
            or epilogue is not None
            or type(compiled_dims) is not str
            or use_psum_layout is not False
        ):
            raise TypeError("not a signature the cache keys")
        ks_key = tuple(per_group)
        if any(type(x) is not int for x in ks_key):  # numpy ints, bools: checked (and converted) every time
            raise TypeError("not a signature the cache keys")
        key = (
            tensor_key(a),
            tensor_key(b),
            tensor_key(d),
            None if grouped_layout is None else tensor_key(grouped_layout),
            None if c is None else tensor_key(c),
            ks_key,
            compiled_dims,
        )
        call = _K_GROUPED.get(key)
    except KEY_ERRORS:  # not tensors or a K list no key holds: checked every time
        key, call = None, None
    if call is None or target_of(call[1]) != call[0]:
        call = _prepare_k_grouped(a, b, d, ks_cpu, grouped_layout, c, compiled_dims, use_psum_layout, epilogue, ks)
        call[2](a, b, d, c)
        if key is not None:  # stored once the call succeeded
            _K_GROUPED.put(key, call)
        return
    call[2](a, b, d, c)


def _prepare_k_grouped(a, b, d, ks_cpu, grouped_layout, c, compiled_dims, use_psum_layout, epilogue, ks) -> tuple:
    """Every check of a K-grouped call, then (target, device index, run(a, b, d, c))."""
    name = "k_grouped_bf16_gemm_tn_contiguous"
    if ks is not None and ks_cpu is not None:
        raise TypeError(f"{name}: pass the per-group K once (ks_cpu, or sgl-deep-gemm's ks)")
    ks = ks_cpu if ks is None else ks
    if isinstance(ks, (str, bytes)):  # iterable, but "64" is not the K list [64]
        raise TypeError(f"{name}: the per-group K is a sequence of ints, got {type(ks).__name__}")
    keywords.gemm(name, compiled_dims, epilogue)
    if keywords.flag(name, "use_psum_layout", use_psum_layout):
        raise NotImplementedError(f"{name}(use_psum_layout=True) is not supported: pass the per-group K as ks_cpu")
    if ks is None:
        raise NotImplementedError(
            f"{name}: ks_cpu=None (K split only on the device) is not supported; pass the per-group K as CPU ints"
        )
    if grouped_layout is not None:  # DeepGEMM's device copy of ks: refuse anything else (e.g. c passed here)
        if not isinstance(grouped_layout, torch.Tensor) or grouped_layout.dtype != torch.int32:
            raise TypeError(
                f"{name}: grouped_layout (5th argument) is DeepGEMM's int32 [G] copy of ks, got "
                f"{getattr(grouped_layout, 'dtype', type(grouped_layout).__name__)}; c is the 6th argument"
            )
        if tuple(grouped_layout.shape) != (len(ks),):
            raise ValueError(f"{name}: grouped_layout must be [G] = ({len(ks)},), got {tuple(grouped_layout.shape)}")
    for name, t in (("a", a), ("b", b), ("d", d)):
        require_tensor(name, t)
    if a.dim() != 2 or b.dim() != 2 or d.dim() != 3:
        raise ValueError(
            f"a must be [sum K, M], b [sum K, N] and d [G, M, N], got {tuple(a.shape)}, "
            f"{tuple(b.shape)} and {tuple(d.shape)}"
        )
    try:
        ks = [int(x) for x in ks]
    except (TypeError, ValueError):
        raise TypeError(f"ks must be a sequence of ints, got {ks!r}") from None
    if any(x < 0 or x >= 2**31 for x in ks):  # the kernel reads them as int32
        raise ValueError(f"ks must be non-negative int32 values (0 <= K < 2**31), got {ks}")
    total_k, m = a.shape
    g = len(ks)
    n = b.shape[1]
    if b.shape[0] != total_k or sum(ks) != total_k:
        raise ValueError(
            f"a is [sum K, M] = {tuple(a.shape)}, b is [sum K, N] = {tuple(b.shape)} and sum(ks) = "
            f"{sum(ks)}: the K extents must agree"
        )
    require_shape("d", d, (g, m, n), "[G, M, N]")
    tensors = {"a": a, "b": b, "d": d}
    if c is not None:
        require_tensor("c", c)
        tensors["c"] = c
    k_grouped_rule(
        m=m,
        n=n,
        k=total_k,
        num_groups=g,
        a_dtype=dtype_name(a.dtype),
        b_dtype=dtype_name(b.dtype),
        out_dtype=dtype_name(d.dtype),
        c_dtype=dtype_name(c.dtype) if c is not None else None,
    )
    if c is not None:
        require_shape("c", c, (g, m, n), "[G, M, N]")
    index = device_of(**tensors)
    target = target_of(index)
    if g == 0 or m == 0 or n == 0:
        return target, index, _k_grouped_nothing
    d2 = rows_view("d", d)
    c2 = rows_view("c", c) if c is not None else None
    ldd = output_row_stride("d", d2)
    ldc = output_row_stride("c", c2) if c2 is not None else 0
    if total_k == 0:  # every group empty: nothing for TMA to describe
        return target, index, _k_grouped_no_k
    (_, lda), (_, ldb) = tma_operand("a", a), tma_operand("b", b)
    cfg = k_grouped_config(m, n)
    grid = min(num_sms_for(index), g * ceil_div(m, cfg.block_m) * ceil_div(n, cfg.block_n))
    kern = _kernel("k_contiguous", cfg, c is not None, index, target)
    pairs = [x | (y << 32) for x, y in zip(ks[0::2], ks[1::2] + [0])]  # ks < 2**31 (checked above): no sign bit
    slot_bytes = grid * g * 2 * 128
    with_c = c is not None

    def run(a, b, d, c) -> None:
        # per (CTA, group) descriptor slots, and the kernel's aux block: bases, row strides, slots
        slots = torch.empty(slot_bytes, dtype=torch.uint8, device=d.device)
        # Small metadata goes through pinned host memory with one stream-ordered copy: no sync, and legal inside
        # CUDA-graph capture (a replay re-sends the same ks, so capture with the ks the replays will use). One
        # int64 buffer: the aux block (bases, row strides, slots) at 0, then ks as int32 pairs at byte 40.
        meta = (
            torch.tensor([a.data_ptr(), b.data_ptr(), lda, ldb, slots.data_ptr(), *pairs], dtype=torch.int64)
            .pin_memory()
            .to(d.device, non_blocking=True)
        )
        tmaps = _operand_map(_OFF_A, a.data_ptr(), m, total_k, lda, cfg.block_m, cfg.block_k, True) + _operand_map(
            _OFF_B, b.data_ptr(), n, total_k, ldb, cfg.block_n, cfg.block_k, True
        )
        c_ptr = c.data_ptr() if with_c else 0
        params = _pack(d.data_ptr(), c_ptr, meta.data_ptr() + 40, meta.data_ptr(), m, n, total_k, ldd, ldc, g, 0, 1, 0)
        launch(kern, grid, params, tmaps, index)

    return target, index, run


def _k_grouped_nothing(a, b, d, c) -> None:
    """No group, row or column: nothing to write."""


def _k_grouped_no_k(a, b, d, c) -> None:
    """Every group empty: d[g] = c[g] (or 0)."""
    if c is None:
        d.zero_()
    elif c.data_ptr() != d.data_ptr():
        d.copy_(c)
