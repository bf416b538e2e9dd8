"""fp8_fp4_paged_mqa_logits / fp8_paged_mqa_logits: DeepGEMM's decode indexer scores over a paged KV cache.

For batch b, query t < next_n and key j < limit(b, t) (context_lens[b, t] for 2-D lengths, else
context_lens[b] - next_n + t + 1): logits[b * next_n + t, j] = sum_h w * relu(score); -inf from the limit to
max_context_len when clean_logits (otherwise only inside the processed chunks). Returns a view of a buffer whose
row stride is padded to 1024 bytes. schedule_meta comes from get_paged_mqa_logits_metadata (same block_kv)."""

from __future__ import annotations

import torch

from ... import jit
from ...arch import target_of
from ...checks import (
    SCALE_CHECKS,
    check_given_scales,
    device_of,
    get_index_checks,
    get_scale_checks,
    index_checks,
    require_int32,
    require_tensor,
    scale_checks,
)
from ...core.gemm import ceil_div
from ...core.rules import dtype_name
from ...core.tma import tma_request, with_addresses
from ...launch import KEY_ERRORS, CallCache, fast_calls, kernel_memo, launch, recording, tensor_key
from ...launch import empty as fresh_empty
from ...scale_layout import cache_scale_words
from ..mqa_logits.kernel import LOGIT_ALIGN_BYTES, ROWS
from .kernel import PARAMS, PagedMqaLogitsSpec
from .rules import paged_rule

_OFF_Q, _OFF_KV = PARAMS.offsets["tmap_q"], PARAMS.offsets["tmap_kv"]
_pack = PARAMS.packer()
_CALLS = CallCache()  # calls checked once per signature
_LOGIT = {torch.float32: "fp32", torch.bfloat16: "bf16"}
# served in C (launch.fast_calls): q (pair or bare), kv_cache, weights, context_lens, block_table, schedule_meta,
# max_context_len, clean_logits and logits_dtype's name; a hit returns the logits it allocated
_FAST = fast_calls("PTTTTTVVV", returns=True)


@kernel_memo(maxsize=256)
def _kernel(heads: int, head_dim: int, block_kv: int, logit: str, clean: bool, fp4: bool, index: int, target: str):
    spec = PagedMqaLogitsSpec(heads, head_dim, block_kv, logit, clean, fp4)
    return jit.get_kernel(spec, target, index)


def _check_block_table(block_table: torch.Tensor, num_blocks: int, context_lens: torch.Tensor, block_kv: int) -> None:
    """Every entry a valid block index, and no context longer than its table row covers (one reduction each and
    a sync; skipped while a graph is captured, where the caller vouches for them). Entries past a batch's
    context are never read, but must still name a block: pad tables with 0."""
    if not index_checks() or block_table.numel() == 0:
        return
    bad = (block_table < 0) | (block_table >= num_blocks)
    if bool(bad.any()):
        b, i = (int(x) for x in bad.nonzero()[0])
        raise ValueError(
            f"block_table[{b}, {i}] = {int(block_table[b, i])} is not a block of the cache (0 <= index < {num_blocks})"
        )
    covered = block_table.shape[1] * block_kv
    longest = int(context_lens.max()) if context_lens.numel() else 0
    if longest > covered:
        raise ValueError(
            f"a context of {longest} tokens exceeds what a block_table row covers "
            f"({block_table.shape[1]} blocks x {block_kv} = {covered} tokens)"
        )


def _prepare(
    q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len, indices, clean_logits, logits_dtype
):
    """(target, device index, what a call of this signature runs, given its tensors) after every check that the
    signature decides; the block table's values are checked per call (index_checks())."""
    if isinstance(q, torch.Tensor):
        q = (q, None)
    if not isinstance(q, (tuple, list)) or len(q) != 2:
        raise TypeError(f"q must be a (values, scale factors or None) pair, got {type(q).__name__}")
    qv, q_sf = q
    fp4 = q_sf is not None
    for name, t in (("q", qv), ("kv_cache", kv_cache), ("weights", weights), ("schedule_meta", schedule_meta)) + (
        (("q scales", q_sf),) if fp4 else ()
    ):
        require_tensor(name, t)
    require_int32("context_lens", context_lens)
    require_int32("block_table", block_table)
    require_int32("schedule_meta", schedule_meta)
    if not isinstance(max_context_len, int) or isinstance(max_context_len, bool):
        raise TypeError(f"max_context_len must be an int, got {type(max_context_len).__name__}")
    if not isinstance(logits_dtype, torch.dtype):
        raise TypeError(f"logits_dtype must be a torch.dtype, got {type(logits_dtype).__name__}")
    if qv.dim() != 4:
        raise ValueError(f"q must be [B, next_n, H, D{'/2' if fp4 else ''}], got shape {tuple(qv.shape)}")
    batch, next_n, heads = qv.shape[:3]
    row_bytes = qv.shape[3] * qv.element_size()
    head_dim = 2 * row_bytes if fp4 else row_bytes
    if kv_cache.dim() != 4:
        raise ValueError(f"kv_cache must be [num_blocks, block_kv, 1, D + 4], got shape {tuple(kv_cache.shape)}")
    num_blocks, block_kv = kv_cache.shape[:2]
    paged_rule(
        batch=batch,
        next_n=next_n,
        heads=heads,
        head_dim=head_dim,
        block_kv=block_kv,
        q_dtype=dtype_name(qv.dtype),
        q_sf_dtype=dtype_name(q_sf.dtype) if fp4 else None,
        kv_cache_dtype=dtype_name(kv_cache.dtype),
        weights_dtype=dtype_name(weights.dtype),
        logits_dtype=dtype_name(logits_dtype),
        max_context_len=max_context_len,
        fp4=fp4,
        indices=indices,
    )
    if (
        tuple(kv_cache.shape[2:]) != (1, row_bytes + 4)
        or kv_cache.stride(3) != 1
        or kv_cache.stride(1) != row_bytes + 4
    ):
        raise ValueError(
            f"kv_cache must be [num_blocks, block_kv, 1, {row_bytes + 4}] with rows of {row_bytes + 4} "
            f"bytes, got shape {tuple(kv_cache.shape)} strides {tuple(kv_cache.stride())}"
        )
    if kv_cache.stride(0) % 16 or kv_cache.data_ptr() % 16:
        raise ValueError(f"kv_cache blocks must start 16-byte aligned (stride(0) = {kv_cache.stride(0)} bytes)")
    if fp4 and (tuple(q_sf.shape) != (batch, next_n, heads) or not q_sf.is_contiguous()):
        raise ValueError(
            f"q scales must be contiguous [B, next_n, H] = {(batch, next_n, heads)}, got {tuple(q_sf.shape)}"
        )
    if not qv.is_contiguous():
        raise ValueError("q must be contiguous")
    if tuple(weights.shape) != (batch * next_n, heads) or (weights.stride(1) != 1 and heads > 1):
        raise ValueError(
            f"weights must be [B * next_n, H] = ({batch * next_n}, {heads}) with stride(1) == 1, got "
            f"{tuple(weights.shape)}"
        )
    if context_lens.dim() == 1:
        ctx_2d = False
        ok = tuple(context_lens.shape) == (batch,)
    else:
        ctx_2d = True
        ok = tuple(context_lens.shape) == (batch, next_n)
    if not ok or not context_lens.is_contiguous():
        raise ValueError(
            f"context_lens must be contiguous [B] or [B, next_n] = ({batch}, {next_n}), got {tuple(context_lens.shape)}"
        )
    if (
        block_table.dim() != 2
        or block_table.shape[0] != batch
        or (block_table.stride(1) != 1 and block_table.shape[1] > 1)
    ):
        raise ValueError(
            f"block_table must be [B = {batch}, max_blocks] with stride(1) == 1, got {tuple(block_table.shape)}"
        )
    if (
        schedule_meta.dim() != 2
        or schedule_meta.shape[1] != 2
        or schedule_meta.shape[0] < 2
        or not schedule_meta.is_contiguous()
    ):
        raise ValueError(
            f"schedule_meta must be contiguous [num_sms + 1, 2] from get_paged_mqa_logits_metadata, got "
            f"{tuple(schedule_meta.shape)}"
        )
    tensors = dict(
        q=qv,
        kv_cache=kv_cache,
        weights=weights,
        context_lens=context_lens,
        block_table=block_table,
        schedule_meta=schedule_meta,
    )
    index = device_of(**tensors, **({"q_sf": q_sf} if fp4 else {}))
    elem = 4 if logits_dtype == torch.float32 else 2
    per = LOGIT_ALIGN_BYTES // elem
    stride = max(ceil_div(max_context_len, per) * per, per)
    rows_out = batch * next_n
    target = target_of(index)

    def empty(qv, q_sf, kv_cache, weights, context_lens, block_table, schedule_meta) -> torch.Tensor:
        return torch.empty(max(rows_out, 1), stride, dtype=logits_dtype, device=qv.device)[:rows_out, :max_context_len]

    if batch == 0:
        return target, index, empty
    kern = _kernel(heads, head_dim, block_kv, _LOGIT[logits_dtype], bool(clean_logits), fp4, index, target)
    rows = batch * next_n * heads
    maps = tma_request(
        _OFF_Q, "uint8", qv.data_ptr(), (row_bytes, rows), (row_bytes,), (row_bytes, ROWS), row_bytes
    ) + tma_request(
        _OFF_KV,
        "uint8",
        kv_cache.data_ptr(),
        (row_bytes, block_kv, num_blocks),
        (row_bytes, kv_cache.stride(0)),
        (row_bytes, block_kv, 1),
        row_bytes,
    )
    grid = (schedule_meta.shape[0] - 1, ceil_div(next_n * heads, ROWS), 1)
    kv_stride, ctx_ld = kv_cache.stride(0), next_n if ctx_2d else 1
    bt_ld = block_table.stride(0) if block_table.shape[0] > 1 else block_table.shape[1]
    ld_weights, bt_cols = weights.stride(0) if weights.shape[0] > 1 else heads, block_table.shape[1]

    def run(qv, q_sf, kv_cache, weights, context_lens, block_table, schedule_meta) -> torch.Tensor:
        buf = fresh_empty((max(rows_out, 1), stride), logits_dtype, qv.device)
        _check_block_table(block_table, num_blocks, context_lens, block_kv)
        params = _pack(
            kv_cache.data_ptr(),
            q_sf.data_ptr() if fp4 else 0,
            weights.data_ptr(),
            context_lens.data_ptr(),
            block_table.data_ptr(),
            schedule_meta.data_ptr(),
            buf.data_ptr(),
            kv_stride,
            next_n,
            ctx_ld,
            int(ctx_2d),
            bt_ld,
            ld_weights,
            stride,
            max_context_len,
            batch,
            bt_cols,
            num_blocks,
        )
        launch(kern, grid, params, with_addresses(maps, qv.data_ptr(), kv_cache.data_ptr()), index)
        return buf[:rows_out, :max_context_len]

    return target, index, run


def fp8_fp4_paged_mqa_logits(
    q,
    kv_cache: torch.Tensor,
    weights: torch.Tensor,
    context_lens: torch.Tensor,
    block_table: torch.Tensor,
    schedule_meta: torch.Tensor,
    max_context_len: int,
    indices: torch.Tensor | None = None,
    *,
    clean_logits: bool = False,
    logits_dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """q = (q [B, next_n, H, D] e4m3, None) or (packed e2m1 [B, next_n, H, D/2], int32 [B, next_n, H]); a bare
    tensor is the FP8 form. kv_cache uint8 [num_blocks, block_kv, 1, D + 4] (FP4: D/2 + 4); weights fp32
    [B * next_n, H]; context_lens int32 [B] or [B, next_n]; block_table int32 [B, max_blocks]. DeepGEMM 2.8.1's
    order (`indices`, varlen, SM100-only there: NotImplementedError); as there, columns past a row's context
    are left uncleaned and the logits are float32 unless asked otherwise (`clean_logits` / `logits_dtype`,
    keyword only, are ours). Checked once per call signature; the block table on every call (index_checks())."""
    fast_args = (
        q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len, clean_logits,
        _LOGIT.get(logits_dtype) if type(logits_dtype) is torch.dtype else None,
    )  # fmt: skip
    # served in C where no value is read per call: index checks off (the block table), scale checks off
    sig = (
        _FAST(*fast_args)
        if indices is None and (SCALE_CHECKS.value is False or not get_scale_checks()) and not get_index_checks()
        else None
    )
    if sig is not None and sig.__class__ is not bytes:  # served: the logits it allocated
        return sig
    if isinstance(q, torch.Tensor):
        q = (q, None)
    try:
        qv, q_sf = q
        key = sig or (
            tensor_key(qv),
            None if q_sf is None else tensor_key(q_sf),
            tensor_key(kv_cache),
            tensor_key(weights),
            tensor_key(context_lens),
            tensor_key(block_table),
            tensor_key(schedule_meta),
            type(max_context_len),
            max_context_len,
            indices is None,
            type(clean_logits),
            clean_logits,
            logits_dtype,
        )
        call = _CALLS.get(key) if indices is None else None
    except (*KEY_ERRORS, ValueError):  # not tensors, storage-less, or unhashable: the checks name it
        key, call = None, None
    if call is None or target_of(call[1]) != call[0]:
        call = _prepare(
            q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len, indices, clean_logits,
            logits_dtype,
        )  # fmt: skip
        if key is not None and indices is None:
            _CALLS.put(key, call)
        qv, q_sf = q
        if sig is not None:  # a new signature: what it launches and returns is kept for the C table
            with recording(_FAST, fast_args) as rec:
                rec.result = call[2](qv, q_sf, kv_cache, weights, context_lens, block_table, schedule_meta)
            return rec.result
    if q_sf is not None and get_scale_checks() and scale_checks():  # opt-in (DG_SM120_CHECK_SCALES), not captured
        rows, row = kv_cache.shape[1], kv_cache.shape[-1] - 4
        words = cache_scale_words(kv_cache, rows, row, block_table, context_lens)
        check_given_scales("ue8m0", ("q scales", q_sf), ("kv_cache scales", words))
    return call[2](qv, q_sf, kv_cache, weights, context_lens, block_table, schedule_meta)


def fp8_paged_mqa_logits(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    weights: torch.Tensor,
    context_lens: torch.Tensor,
    block_table: torch.Tensor,
    schedule_meta: torch.Tensor,
    max_context_len: int,
    clean_logits: bool = False,
    logits_dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """The FP8 form of fp8_fp4_paged_mqa_logits (q a tensor [B, next_n, H, D] e4m3), DeepGEMM's older order."""
    return fp8_fp4_paged_mqa_logits(
        (q, None),
        kv_cache,
        weights,
        context_lens,
        block_table,
        schedule_meta,
        max_context_len,
        clean_logits=clean_logits,
        logits_dtype=logits_dtype,
    )
