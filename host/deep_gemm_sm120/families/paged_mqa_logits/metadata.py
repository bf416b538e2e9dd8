"""get_paged_mqa_logits_metadata(context_lens, block_kv, num_sms, indices=None): the schedule a paged MQA-logits
call takes, computed by the family's service kernel (schedule.py)."""

from __future__ import annotations

from functools import lru_cache

import torch

from ... import jit
from ...arch import target_of
from ...checks import device_of, require_tensor
from ...core.rules import dtype_name
from ...launch import empty as fresh_empty
from ...launch import fast_calls, launch, recording
from .rules import metadata_rule
from .schedule import PARAMS, PagedMetadataSpec, chunk_keys


@lru_cache(maxsize=16)
def _kernel(index: int, target: str):
    return jit.get_kernel(PagedMetadataSpec(), target, index)


def get_paged_mqa_logits_metadata(
    context_lens: torch.Tensor, block_kv: int, num_sms: int, indices: torch.Tensor | None = None
) -> torch.Tensor:
    """int32 [num_sms + 1, 2]: the (batch, chunk) where SM s starts, the total work (chunks of max(64, block_kv)
    keys, at least one per batch) split evenly; row num_sms is (B, 0). Computed on the GPU, graph-capturable.
    context_lens: int32 [B] (one length per batch) or [B, next_n] (per query token; a batch spans its largest).
    indices (DeepGEMM's varlen form, SM100-only upstream): NotImplementedError."""
    sig = _FAST(context_lens, block_kv, num_sms) if indices is None else None
    if sig is not None and sig.__class__ is not bytes:  # served in C: the schedule it allocated and computed
        return sig
    if indices is not None:
        raise NotImplementedError(
            "get_paged_mqa_logits_metadata: indices (varlen) are SM100-only in DeepGEMM and not supported here"
        )
    require_tensor("context_lens", context_lens)
    for name, v in (("block_kv", block_kv), ("num_sms", num_sms)):
        if not isinstance(v, int) or isinstance(v, bool):
            raise TypeError(f"{name} must be an int, got {type(v).__name__}")
    metadata_rule(
        num_batches=context_lens.shape[0] if context_lens.dim() else None,
        block_kv=block_kv,
        num_sms=num_sms,
        context_lens_dtype=dtype_name(context_lens.dtype),
        context_lens_dim=context_lens.dim(),
    )
    if not context_lens.is_contiguous():
        raise ValueError("context_lens must be contiguous")
    index = device_of(context_lens=context_lens)
    b = context_lens.shape[0]
    next_n = context_lens.shape[1] if context_lens.dim() == 2 else 1

    def schedule() -> torch.Tensor:
        meta = fresh_empty((num_sms + 1, 2), torch.int32, context_lens.device)
        launch(
            _kernel(index, target_of(index)),
            1,
            PARAMS.pack(
                context_lens=context_lens.data_ptr(),
                num_batches=b,
                next_n=next_n,
                ld=next_n,
                chunk_keys=chunk_keys(block_kv),
                num_sms=num_sms,
                meta=meta.data_ptr(),
            ),
            b"",
            index,
        )
        return meta

    if sig is None:
        return schedule()
    with recording(_FAST, (context_lens, block_kv, num_sms)) as rec:  # a new signature, kept for the C table
        rec.result = schedule()
    return rec.result


# served in C (launch.fast_calls): context_lens, block_kv, num_sms; a hit returns the schedule it allocated
_FAST = fast_calls("TVV", returns=True)
