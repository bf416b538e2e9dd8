"""DeepGEMM's paged MQA-logits names on this family's kernel and its schedule (the Entry table is in
__init__.py's declaration)."""
from __future__ import annotations

import torch

from . import api as _paged, metadata as _paged_meta

def get_paged_mqa_logits_metadata(context_lens, block_kv, num_sms, indices=None):
    if indices is not None:
        raise NotImplementedError("get_paged_mqa_logits_metadata: indices (varlen) are SM100-only in DeepGEMM and "
                                  "not supported here")
    return _paged_meta.get_paged_mqa_logits_metadata(context_lens, block_kv, num_sms)


def fp8_fp4_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len,
                             indices=None, *, clean_logits=False, logits_dtype=torch.float32):
    """DeepGEMM 2.8.1's order (`indices` 8th); as there, columns past a row's context are left uncleaned and the
    logits are float32 unless asked otherwise: `clean_logits` / `logits_dtype` (keyword only) are ours."""
    return _paged.fp8_fp4_paged_mqa_logits(q if isinstance(q, (tuple, list)) else (q, None), kv_cache, weights,
                                           context_lens, block_table, schedule_meta, max_context_len, clean_logits,
                                           logits_dtype, indices)


def fp8_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len,
                         clean_logits=False, logits_dtype=torch.float32):
    return _paged.fp8_fp4_paged_mqa_logits((q, None), kv_cache, weights, context_lens, block_table, schedule_meta,
                                           max_context_len, clean_logits, logits_dtype)
