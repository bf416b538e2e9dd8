"""fp8_fp4_sparse_mqa_logits / fp8_fp4_paged_sparse_mqa_logits: DeepSeek V4.1's indexer scores over the KV blocks
each query row selected (docs/sparse_mqa_logits.md). The slot table comes from get_sparse_mqa_logits_metadata /
get_paged_sparse_mqa_logits_metadata (metadata.py) and already resolves every block to its physical KV rows, so
one kernel serves both forms: the contiguous KV is a single page of N rows.

Output: bf16 [S, num_max_sparse_blocks * sparse_block_kv]; column s * B + o is the score of the slot's o-th token,
-inf wherever it is not a score (padding slots, tokens past the row's range). Every element is written."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ... import jit
from ...arch import target_of
from ...checks import SCALE_CHECKS, check_given_scales, device_of, get_scale_checks, require_int32
from ...core.gemm import ceil_div
from ...core.tma import tma_request, with_addresses
from ...device import num_sms_for
from ...launch import KEY_ERRORS, CallCache, fast_calls, kernel_memo, launch, recording, tensor_key
from ...launch import empty as fresh_empty
from .contract import SparseProblem, check_paged_sparse_call, check_sparse_call
from .kernel import PARAMS, TILE_KEYS, SparseMqaLogitsSpec, tiles_per_cta

_OFF_Q, _OFF_KV = PARAMS.offsets["tmap_q"], PARAMS.offsets["tmap_kv"]
_pack = PARAMS.packer()  # the parameters after the two tensor maps, in declaration order
_SEQ = (tuple, list)
_CALLS = CallCache()  # contiguous-KV calls checked once per signature
_PAGED_CALLS = CallCache()  # paged calls likewise


@kernel_memo(maxsize=64)
def _kernel(heads: int, head_dim: int, fp4: bool, index: int, target: str):
    return jit.get_kernel(SparseMqaLogitsSpec(heads, head_dim, fp4), target, index)


def _check_metadata(metadata, p: SparseProblem) -> torch.Tensor:
    require_int32("metadata", metadata)
    want = (p.rows, p.num_max_sparse_blocks, 2)
    if tuple(metadata.shape) != want or not metadata.is_contiguous():
        raise ValueError(
            f"metadata must be the contiguous int32 {list(want)} slot table of the metadata function "
            f"(same rows and num_max_sparse_blocks), got {tuple(metadata.shape)}"
        )
    return metadata


def _tma_rows(name: str, t: torch.Tensor, row_bytes: int) -> None:
    """TMA reads rows of `row_bytes` at a 16-byte aligned address and row stride."""
    if t.stride(-1) != 1 or (t.shape[0] > 1 and (t.stride(0) * t.element_size()) % 16) or t.data_ptr() % 16:
        raise ValueError(
            f"{name} rows must be dense ({row_bytes} bytes, unit last stride) and start 16-byte aligned "
            f"with a row stride a multiple of 16 bytes, got strides {tuple(t.stride())}"
        )


def _plan(
    p: SparseProblem,
    qv: torch.Tensor,
    kv_rows: torch.Tensor,
    page_rows: int,
    pages: int,
    row_stride: int,
    page_stride: int,
    sf_page_stride: int,
    index: int,
) -> Callable[..., torch.Tensor]:
    """What a call of this signature runs: run(qv, q_sf, weights, metadata, kv_rows, kv_sf_address) -> logits.
    kv_rows: the value rows' base tensor (for its address); rows of a page are row_stride bytes apart, pages
    page_stride bytes apart; scale words at kv_sf_address + page * sf_page_stride + 4 * row."""
    rows, cols = p.rows, p.num_max_sparse_blocks * p.sparse_block_kv
    if rows == 0 or page_rows * pages == 0:  # no KV rows: nothing can be a score

        def empty(qv, q_sf, weights, metadata, kv_rows, kv_sf_address) -> torch.Tensor:
            out = torch.empty(rows, cols, dtype=torch.bfloat16, device=qv.device)
            return out if rows == 0 else out.fill_(float("-inf"))

        return empty
    row_bytes = p.head_dim // 2 if p.fmt == "mxfp4" else p.head_dim
    kern = _kernel(p.heads, p.head_dim, p.fmt == "mxfp4", index, target_of(index))
    tpc = tiles_per_cta(rows, p.num_max_sparse_blocks, p.sparse_block_kv, num_sms_for(index))
    grid = (rows, ceil_div(ceil_div(cols, TILE_KEYS), tpc), 1)
    maps = tma_request(
        _OFF_Q, "uint8", qv.data_ptr(), (row_bytes, rows * p.heads), (row_bytes,), (row_bytes, p.heads), row_bytes
    ) + tma_request(
        _OFF_KV,
        "uint8",
        kv_rows.data_ptr(),
        (row_bytes, page_rows, pages),
        (row_stride, page_stride),
        (row_bytes, p.sparse_block_kv, 1),
        row_bytes,
    )
    fixed = (p.num_max_sparse_blocks, p.sparse_block_kv.bit_length() - 1, page_rows, page_rows * pages)
    heads = p.heads

    def run(qv, q_sf, weights, metadata, kv_rows, kv_sf_address) -> torch.Tensor:
        out = fresh_empty((rows, cols), torch.bfloat16, qv.device)
        ldw = weights.stride(0) if rows > 1 else heads
        params = _pack(
            q_sf.data_ptr(), kv_sf_address, weights.data_ptr(), metadata.data_ptr(), out.data_ptr(), *fixed,
            sf_page_stride, tpc, ldw, cols,
        )  # fmt: skip
        launch(kern, grid, params, with_addresses(maps, qv.data_ptr(), kv_rows.data_ptr()), index)
        return out

    return run


def _q_operands(q) -> tuple[torch.Tensor, torch.Tensor]:
    qv, q_sf = q
    if not qv.is_contiguous() or not q_sf.is_contiguous():
        raise ValueError("q values and q scales must be contiguous")
    if qv.data_ptr() % 16:  # the tensor map's base
        raise ValueError(f"q values must start 16-byte aligned, got address {qv.data_ptr():#x}")
    return qv, q_sf


def _option_key(num_max_sparse_blocks, sparse_block_kv) -> tuple:
    """The Python values of a call as key parts, typed (True == 1 and 16.0 == 16 as dict keys)."""
    return type(num_max_sparse_blocks), num_max_sparse_blocks, type(sparse_block_kv), sparse_block_kv


def fp8_fp4_sparse_mqa_logits(
    q,
    kv,
    weights: torch.Tensor,
    metadata: torch.Tensor,
    num_max_sparse_blocks: int,
    sparse_block_kv: int,
    use_unaligned_ks: bool = False,
) -> torch.Tensor:
    """q = (values [S, H, D] e4m3 | packed e2m1 [S, H, D/2], int32 packed UE8M0 [S, H]); kv = (values [N, D] |
    [N, D/2] of q's format, int32 [N]); weights bf16 [S, H]; metadata from get_sparse_mqa_logits_metadata with
    the same num_max_sparse_blocks and sparse_block_kv (it already holds each row's ks alignment, so
    use_unaligned_ks only has to be a bool here). Checked once per call signature (every tensor's dtype, shape,
    strides, device and alignment class, and the Python values); the opt-in scale check runs per call."""
    fast_args = (q, kv, weights, metadata, num_max_sparse_blocks, sparse_block_kv, use_unaligned_ks)
    # served in C unless the opt-in scale check reads the scales; the metadata is read by the kernel only
    sig = _FAST(*fast_args) if SCALE_CHECKS.value is False or not get_scale_checks() else None
    if sig is not None and sig.__class__ is not bytes:  # served: the logits it allocated
        return sig
    if not isinstance(use_unaligned_ks, bool):
        raise TypeError(f"use_unaligned_ks must be a bool, got {type(use_unaligned_ks).__name__}")
    try:
        if type(q) not in _SEQ or type(kv) not in _SEQ:  # the checks take tuples and lists (an iterator unpacked
            raise TypeError("not a signature the cache keys")  # here would reach them spent)
        (qv, q_sf), (kvv, kv_sf) = q, kv
        key = sig or (
            tensor_key(qv),
            tensor_key(q_sf),
            tensor_key(kvv),
            tensor_key(kv_sf),
            tensor_key(weights),
            tensor_key(metadata),
            *_option_key(num_max_sparse_blocks, sparse_block_kv),
        )
        call = _CALLS.get(key)
    except (*KEY_ERRORS, ValueError):  # not pairs of tensors, storage-less, or unhashable: the checks name it
        key, call = None, None
    fresh = call is None or target_of(call[1]) != call[0]
    if fresh:
        call = _prepare_contiguous(q, kv, weights, metadata, num_max_sparse_blocks, sparse_block_kv)
        qv, q_sf = q
        kvv, kv_sf = kv
    check_given_scales("ue8m0", ("q scales", q_sf), ("kv scales", kv_sf))  # opt-in (DG_SM120_CHECK_SCALES)
    if fresh and sig is not None:  # a new signature: what it launches and returns is kept for the C table
        with recording(_FAST, fast_args) as rec:
            rec.result = out = call[2](qv, q_sf, weights, metadata, kvv, kv_sf.data_ptr())
    else:
        out = call[2](qv, q_sf, weights, metadata, kvv, kv_sf.data_ptr())
    if fresh and key is not None:  # stored once the call succeeded: a failing call leaves no entry
        _CALLS.put(key, call)
    return out


# served in C (launch.fast_calls): the contiguous form's q and kv pairs, weights, metadata and the three values; a
# hit returns the logits it allocated
_FAST = fast_calls("PPTTVVV", returns=True)


def _prepare_contiguous(q, kv, weights, metadata, num_max_sparse_blocks, sparse_block_kv) -> tuple:
    """Every check of a contiguous-KV call, then (target, device index, run)."""
    p = check_sparse_call(q, kv, weights, num_max_sparse_blocks, sparse_block_kv)
    _check_metadata(metadata, p)
    qv, q_sf = _q_operands(q)
    kvv, kv_sf = kv
    row_bytes = kvv.shape[1] * kvv.element_size()
    _tma_rows("kv", kvv, row_bytes)
    if not kv_sf.is_contiguous():
        raise ValueError("kv scales must be contiguous")
    index = device_of(q=qv, q_sf=q_sf, kv=kvv, kv_sf=kv_sf, weights=weights, metadata=metadata)
    n = kvv.shape[0]
    stride = kvv.stride(0) * kvv.element_size() if n > 1 else row_bytes
    # One page of all N rows (a padded row stride is fine); the page step is never taken but must be valid.
    return target_of(index), index, _plan(p, qv, kvv, n, 1, stride, stride * max(n, 1), 0, index)


def fp8_fp4_paged_sparse_mqa_logits(
    q,
    kv_cache: torch.Tensor,
    weights: torch.Tensor,
    metadata: torch.Tensor,
    num_max_sparse_blocks: int,
    sparse_block_kv: int,
) -> torch.Tensor:
    """q = (values [S, 1, H, D] | [S, 1, H, D/2], int32 [S, 1, H]); kv_cache uint8 [num_pages, page_kv, 1,
    D(/2) + 4] (a page's value rows, then its scale words); weights bf16 [S, H]; metadata from
    get_paged_sparse_mqa_logits_metadata (same page_kv, blocks and num_max_sparse_blocks). Checked once per call
    signature, as the contiguous form."""
    fast_args = (q, kv_cache, weights, metadata, num_max_sparse_blocks, sparse_block_kv)
    sig = _FAST_PAGED(*fast_args) if SCALE_CHECKS.value is False or not get_scale_checks() else None
    if sig is not None and sig.__class__ is not bytes:  # served: the logits it allocated
        return sig
    try:
        if type(q) not in _SEQ:
            raise TypeError("not a signature the cache keys")
        qv, q_sf = q
        key = sig or (
            tensor_key(qv),
            tensor_key(q_sf),
            tensor_key(kv_cache),
            tensor_key(weights),
            tensor_key(metadata),
            *_option_key(num_max_sparse_blocks, sparse_block_kv),
        )
        call = _PAGED_CALLS.get(key)
    except (*KEY_ERRORS, ValueError):
        key, call = None, None
    fresh = call is None or target_of(call[1]) != call[0]
    if fresh:
        call = _prepare_paged(q, kv_cache, weights, metadata, num_max_sparse_blocks, sparse_block_kv)
        qv, q_sf = q
    # opt-in (DG_SM120_CHECK_SCALES): the q words as given. The cache's words are not checked here: which pages a
    # row reads is in the metadata's slot table, and stale pages of a pool hold bytes no kernel reads.
    check_given_scales("ue8m0", ("q scales", q_sf))
    if fresh and sig is not None:  # a new signature: what it launches and returns is kept for the C table
        with recording(_FAST_PAGED, fast_args) as rec:
            rec.result = out = call[2](qv, q_sf, weights, metadata, kv_cache, kv_cache.data_ptr() + call[3])
    else:
        out = call[2](qv, q_sf, weights, metadata, kv_cache, kv_cache.data_ptr() + call[3])
    if fresh and key is not None:
        _PAGED_CALLS.put(key, call)
    return out


# the paged form (q pair, kv_cache, weights, metadata, the two values): its scale words sit at a fixed offset
# inside kv_cache, patched as kv_cache's address plus that offset (FastCalls: an address inside one argument)
_FAST_PAGED = fast_calls("PTTTVV", returns=True)


def _prepare_paged(q, kv_cache, weights, metadata, num_max_sparse_blocks, sparse_block_kv) -> tuple:
    """Every check of a paged call, then (target, device index, run, scale words' offset in the cache)."""
    p = check_paged_sparse_call(q, kv_cache, weights, num_max_sparse_blocks, sparse_block_kv)
    _check_metadata(metadata, p)
    qv, q_sf = _q_operands(q)
    pages, page_kv, _, row = kv_cache.shape
    row_bytes = row - 4
    if kv_cache.stride(3) != 1 or kv_cache.stride(1) != row or kv_cache.stride(0) % 16 or kv_cache.data_ptr() % 16:
        raise ValueError(
            f"kv_cache pages must be dense ([page_kv, 1, {row}] bytes each) and start 16-byte aligned, "
            f"got strides {tuple(kv_cache.stride())}"
        )
    index = device_of(q=qv, q_sf=q_sf, kv_cache=kv_cache, weights=weights, metadata=metadata)
    page = kv_cache.stride(0)
    run = _plan(p, qv, kv_cache, page_kv, pages, row_bytes, page, page, index)
    return target_of(index), index, run, page_kv * row_bytes
