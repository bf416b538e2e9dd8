"""get_sparse_mqa_logits_metadata / get_paged_sparse_mqa_logits_metadata (docs/sparse_mqa_logits.md):
the per-slot table the sparse MQA-logits kernels read instead of ks / ke and block tables.

Format: int32 [S, num_max_sparse_blocks, 2], per slot (first physical KV row, count of valid rows 0..B).
Contiguous: row = b * B + ks % B. Paged: row = page * page_kv + t0 % page_kv with page = block_table[r, t0 // page_kv].
count = 0 for padding slots (s >= n_r) and for indices outside the row's range, so a wrong index can never make a
kernel read outside [ks, ke) or past a block-table row; otherwise count = min(B, ke - t0).

CUDA tensors: one launch of the slot-table kernel (scheduler/sm120_sparse_mqa_logits_metadata.cuh; family
sparse_mqa_logits_metadata), graph-capturable. CPU tensors: the same table from torch ops (metadata_contiguous /
metadata_paged below, which are also the kernel's reference in the GPU tests).
"""

from __future__ import annotations

from functools import lru_cache

import torch

from ... import jit
from ...arch import target_of
from ...checks import device_of, get_index_checks, index_checks
from ...core.gemm import ceil_div
from ...launch import empty as fresh_empty
from ...launch import fast_calls, launch, recording
from .contract import FP4_VALUE_DTYPES, check_indices, fmt_of
from .rules import geometry_rule
from .slots import PARAMS, THREADS, SparseMetadataSpec

INT32_MAX = 2**31 - 1
# served in C (launch.fast_calls), each returning the table it allocated: the contiguous form's ks, ke,
# num_kv_tokens, indices, qk_dtype (by name), block and use_unaligned_ks; the paged form's context_lens,
# block_table, indices (requests), page_kv, indices, qk_dtype and block
_FAST = fast_calls("TTVTVVV", returns=True)
_FAST_PAGED = fast_calls("TTTVTVV", returns=True)
_QK_NAMES = {dt: str(dt) for dt in (torch.float8_e4m3fn, *FP4_VALUE_DTYPES)}


def _qk_name(qk_dtype) -> str | None:
    """qk_dtype as a signature reads it (a dtype outside the contract: None, and the checks raise)."""
    return _QK_NAMES.get(qk_dtype) if type(qk_dtype) is torch.dtype else None


def valid_slots(ks: torch.Tensor, ke: torch.Tensor, num_max_sparse_blocks: int, sparse_block_kv: int) -> torch.Tensor:
    """n_r per row: min(num_max, ceil(max(0, ke - ks) / B)), the leading real entries of each index row."""
    span = (ke.long() - ks.long()).clamp_min(0)
    return ((span + sparse_block_kv - 1) // sparse_block_kv).clamp_max(num_max_sparse_blocks)


def _table(first_row: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    return torch.stack((torch.where(count > 0, first_row, torch.zeros_like(first_row)), count), -1).to(torch.int32)


def metadata_contiguous(
    ks: torch.Tensor, ke: torch.Tensor, indices: torch.Tensor, sparse_block_kv: int
) -> torch.Tensor:
    b = indices.long()
    slots = b.shape[1]
    n = valid_slots(ks, ke, slots, sparse_block_kv)
    t0 = b * sparse_block_kv + (ks.long() % sparse_block_kv)[:, None]
    count = (ke.long()[:, None] - t0).clamp(0, sparse_block_kv)
    ok = (torch.arange(slots, device=b.device)[None, :] < n[:, None]) & (b >= 0) & (t0 >= ks.long()[:, None])
    return _table(t0, torch.where(ok, count, torch.zeros_like(count)))


def metadata_paged(
    context_lens: torch.Tensor, block_table: torch.Tensor, indices: torch.Tensor, page_kv: int, sparse_block_kv: int
) -> torch.Tensor:
    b = indices.long()
    slots = b.shape[1]
    n = valid_slots(torch.zeros_like(context_lens), context_lens, slots, sparse_block_kv)
    t0 = b * sparse_block_kv
    count = (context_lens.long()[:, None] - t0).clamp(0, sparse_block_kv)
    col = t0.div(page_kv, rounding_mode="floor")
    page = block_table.long().gather(1, col.clamp(0, block_table.shape[1] - 1))
    first = page * page_kv + t0 % page_kv
    # a page whose rows do not fit in int32 names no page (its row would wrap)
    ok = (
        (torch.arange(slots, device=b.device)[None, :] < n[:, None])
        & (b >= 0)
        & (col < block_table.shape[1])
        & (page >= 0)
        & (first + count <= INT32_MAX)
    )
    return _table(first, torch.where(ok, count, torch.zeros_like(count)))


@lru_cache(maxsize=16)
def _kernel(index: int, target: str):
    return jit.get_kernel(SparseMetadataSpec(), target, index)


def _rows(t: torch.Tensor) -> torch.Tensor:
    """Unit stride along the last dimension (the kernel steps rows by stride(0))."""
    return t if t.shape[-1] <= 1 or t.stride(-1) == 1 else t.contiguous()


def metadata_on_device(
    ks: torch.Tensor | None,
    ke: torch.Tensor,
    indices: torch.Tensor,
    sparse_block_kv: int,
    block_table: torch.Tensor | None = None,
    page_kv: int = 1,
) -> torch.Tensor:
    """The slot table by the kernel: contiguous (ks, ke) or paged (ke = context lengths, block_table, page_kv)."""
    rows, slots = indices.shape
    meta = fresh_empty((rows, slots, 2), torch.int32, indices.device)
    tensors = {
        "cu_seq_len_k_end" if block_table is None else "context_lens": ke,
        "sparse_kv_block_indices": indices,
        **({"cu_seq_len_k_start": ks} if block_table is None else {"block_table": block_table}),
    }
    index = device_of(**tensors)
    if rows * slots == 0:
        return meta
    idx = _rows(indices)
    bt = _rows(block_table) if block_table is not None else None
    # contiguous copies live until the launch is enqueued: freed earlier, one could be handed to the next
    # allocation and overwritten ahead of the kernel
    ks_c, ke_c = (ks.contiguous() if ks is not None else None), ke.contiguous()
    params = PARAMS.pack(
        ks=ks_c.data_ptr() if ks_c is not None else 0,
        ke=ke_c.data_ptr(),
        block_table=bt.data_ptr() if bt is not None else 0,
        indices=idx.data_ptr(),
        meta=meta.data_ptr(),
        rows=rows,
        num_slots=slots,
        block_log2=sparse_block_kv.bit_length() - 1,
        page_kv=page_kv,
        max_pages=bt.shape[1] if bt is not None else 0,
        bt_ld=bt.stride(0) if bt is not None else 0,
        idx_ld=idx.stride(0),
    )
    launch(_kernel(index, target_of(index)), ceil_div(rows * slots, THREADS), params, b"", index)
    return meta


def _int32_vector(name: str, t, rows: int) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype != torch.int32:
        raise TypeError(f"{name} must be torch.int32, got {t.dtype}")
    if tuple(t.shape) not in ((rows,), (rows, 1)):
        raise ValueError(f"{name} must be [S] = ({rows},), got {tuple(t.shape)}")
    return t.reshape(rows)


def _block(sparse_block_kv) -> int:
    if not isinstance(sparse_block_kv, int) or isinstance(sparse_block_kv, bool):
        raise TypeError(f"sparse_block_kv must be an int, got {type(sparse_block_kv).__name__}")
    geometry_rule(None, None, None, sparse_block_kv)
    return sparse_block_kv


def get_sparse_mqa_logits_metadata(
    cu_seq_len_k_start: torch.Tensor,
    cu_seq_len_k_end: torch.Tensor,
    num_kv_tokens: int,
    sparse_kv_block_indices: torch.Tensor,
    qk_dtype,
    sparse_block_kv: int,
    use_unaligned_ks: bool = False,
) -> torch.Tensor:
    """The slot table of fp8_fp4_sparse_mqa_logits. ks / ke int32 [S] within [0, num_kv_tokens]; indices int32
    [S, num_max_sparse_blocks]; ks % sparse_block_kv == 0 unless use_unaligned_ks (both checked outside graph
    capture, where they cost a synchronization)."""
    fast_args = (
        cu_seq_len_k_start, cu_seq_len_k_end, num_kv_tokens, sparse_kv_block_indices, _qk_name(qk_dtype),
        sparse_block_kv, use_unaligned_ks,
    )  # fmt: skip
    sig = _FAST(*fast_args) if not get_index_checks() else None  # index checks on: ks / ke read every call
    if sig is not None and sig.__class__ is not bytes:  # served: the table it allocated
        return sig
    fmt_of(qk_dtype)
    block = _block(sparse_block_kv)
    check_indices(sparse_kv_block_indices)
    rows = sparse_kv_block_indices.shape[0]
    ks = _int32_vector("cu_seq_len_k_start", cu_seq_len_k_start, rows)
    ke = _int32_vector("cu_seq_len_k_end", cu_seq_len_k_end, rows)
    if not isinstance(num_kv_tokens, int) or isinstance(num_kv_tokens, bool) or num_kv_tokens < 0:
        raise ValueError(f"num_kv_tokens must be a non-negative int, got {num_kv_tokens!r}")
    if not isinstance(use_unaligned_ks, bool):
        raise TypeError(f"use_unaligned_ks must be a bool, got {type(use_unaligned_ks).__name__}")
    if rows and (not ks.is_cuda or index_checks()):
        bad = (ks < 0) | (ke < ks) | (ke > num_kv_tokens)
        if bool(bad.any()):
            i = int(bad.nonzero()[0, 0])
            raise ValueError(
                f"row {i}: need 0 <= ks <= ke <= num_kv_tokens = {num_kv_tokens}, got [{int(ks[i])}, {int(ke[i])})"
            )
        if not use_unaligned_ks and bool((ks % block != 0).any()):
            raise ValueError(
                f"cu_seq_len_k_start must be multiples of sparse_block_kv = {block} unless use_unaligned_ks=True"
            )
    if not sparse_kv_block_indices.is_cuda:
        return metadata_contiguous(ks, ke, sparse_kv_block_indices, block)
    if sig is None:
        return metadata_on_device(ks, ke, sparse_kv_block_indices, block)
    with recording(_FAST, fast_args) as rec:  # a new signature, kept for the C table
        rec.result = metadata_on_device(ks, ke, sparse_kv_block_indices, block)
    return rec.result


def get_paged_sparse_mqa_logits_metadata(
    context_lens: torch.Tensor,
    block_table: torch.Tensor,
    indices: torch.Tensor,
    page_kv: int,
    sparse_kv_block_indices: torch.Tensor,
    qk_dtype,
    sparse_block_kv: int,
) -> torch.Tensor:
    """The slot table of fp8_fp4_paged_sparse_mqa_logits. context_lens int32 [S] (per query token), block_table
    int32 [S, max_pages] (each row its request's pages), indices int32 [S] (request of each row; the table rows
    already carry it, so it is only checked), page_kv a multiple of sparse_block_kv."""
    fast_args = (
        context_lens,
        block_table,
        indices,
        page_kv,
        sparse_kv_block_indices,
        _qk_name(qk_dtype),
        sparse_block_kv,
    )
    sig = _FAST_PAGED(*fast_args)  # no value is read on the host
    if sig is not None and sig.__class__ is not bytes:  # served: the table it allocated
        return sig
    fmt_of(qk_dtype)
    block = _block(sparse_block_kv)
    check_indices(sparse_kv_block_indices)
    rows = sparse_kv_block_indices.shape[0]
    ctx = _int32_vector("context_lens", context_lens, rows)
    _int32_vector("indices", indices, rows)
    if not isinstance(block_table, torch.Tensor) or block_table.dtype != torch.int32:
        raise TypeError(
            f"block_table must be an int32 torch.Tensor, got "
            f"{getattr(block_table, 'dtype', type(block_table).__name__)}"
        )
    if block_table.dim() != 2 or block_table.shape[0] != rows or block_table.shape[1] < 1:
        raise ValueError(f"block_table must be [S = {rows}, max_pages >= 1], got {tuple(block_table.shape)}")
    if not isinstance(page_kv, int) or isinstance(page_kv, bool) or page_kv < 1 or page_kv % block:
        raise ValueError(f"page_kv must be a positive multiple of sparse_block_kv = {block}, got {page_kv!r}")
    if not sparse_kv_block_indices.is_cuda:
        return metadata_paged(ctx, block_table, sparse_kv_block_indices, page_kv, block)
    if sig is None:
        return metadata_on_device(None, ctx, sparse_kv_block_indices, block, block_table, page_kv)
    with recording(_FAST_PAGED, fast_args) as rec:  # a new signature, kept for the C table
        rec.result = metadata_on_device(None, ctx, sparse_kv_block_indices, block, block_table, page_kv)
    return rec.result
