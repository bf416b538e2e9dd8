"""Shape and dtype rules of the paged MQA-logits ops, on plain values: the API and is_supported call them."""

from __future__ import annotations

from ...core.rules import require_dim, require_dtype
from ..mqa_logits.rules import operand_rule
from .schedule import BLOCK_KVS


def paged_rule(
    batch: int | None = None,
    next_n: int | None = None,
    heads: int | None = None,
    head_dim: int | None = None,
    block_kv: int | None = None,
    q_dtype: str | None = None,
    q_sf_dtype: str | None = None,
    kv_cache_dtype: str | None = None,
    weights_dtype: str | None = None,
    logits_dtype: str | None = None,
    max_context_len: int | None = None,
    fp4: bool = False,
    indices=None,
) -> None:
    """q [B, next_n, H, D] e4m3 (FP4: [B, next_n, H, D/2] packed + int32 [B, next_n, H]); kv_cache uint8
    [num_blocks, block_kv, 1, D + 4] (FP4: D/2 + 4); weights fp32 [B * next_n, H]."""
    if indices is not None:
        raise NotImplementedError(
            "indices (varlen paged MQA logits) are not supported: DeepGEMM runs them on SM100 "
            "only; pass next_n queries per batch"
        )
    operand_rule(
        fp4, q_dtype, None, q_sf_dtype, "int32" if fp4 else "float32", weights_dtype, logits_dtype, heads, head_dim
    )
    require_dtype("kv_cache", kv_cache_dtype, ("uint8",))
    for name, v in (("batch", batch), ("next_n", next_n), ("block_kv", block_kv), ("max_context_len", max_context_len)):
        if v is not None:
            require_dim(name, v)
    if next_n is not None and next_n < 1:
        raise ValueError(f"next_n must be >= 1, got {next_n}")
    if block_kv is not None and block_kv not in BLOCK_KVS:
        raise NotImplementedError(f"block_kv {block_kv} is not supported; supported: {BLOCK_KVS}")


def metadata_rule(
    num_batches: int | None = None,
    block_kv: int | None = None,
    num_sms: int | None = None,
    context_lens_dtype: str | None = None,
    context_lens_dim: int | None = None,
) -> None:
    require_dtype("context_lens", context_lens_dtype, ("int32",))
    if context_lens_dim is not None and context_lens_dim not in (1, 2):
        raise ValueError(f"context_lens must be [B] or [B, next_n], got {context_lens_dim} dimensions")
    for name, v in (("num_batches", num_batches), ("block_kv", block_kv), ("num_sms", num_sms)):
        if v is not None:
            require_dim(name, v)
    if block_kv is not None and block_kv not in BLOCK_KVS:
        raise NotImplementedError(f"block_kv {block_kv} is not supported; supported: {BLOCK_KVS}")
    if num_sms is not None and num_sms < 1:
        raise ValueError(f"num_sms must be >= 1, got {num_sms}")
