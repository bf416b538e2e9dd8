"""DeepGEMM's sparse MQA-logits names on this family's kernel and its slot tables (the Entry table is in
__init__.py's declaration)."""
from __future__ import annotations

from . import api as _sparse, metadata as _sparse_meta

def get_sparse_mqa_logits_metadata(cu_seq_len_k_start, cu_seq_len_k_end, num_kv_tokens, sparse_kv_block_indices,
                                   qk_dtype, sparse_block_kv, use_unaligned_ks=False):
    return _sparse_meta.get_sparse_mqa_logits_metadata(cu_seq_len_k_start, cu_seq_len_k_end, num_kv_tokens,
                                                       sparse_kv_block_indices, qk_dtype, sparse_block_kv,
                                                       use_unaligned_ks)


def get_paged_sparse_mqa_logits_metadata(context_lens, block_table, indices, page_kv, sparse_kv_block_indices,
                                         qk_dtype, sparse_block_kv):
    return _sparse_meta.get_paged_sparse_mqa_logits_metadata(context_lens, block_table, indices, page_kv,
                                                             sparse_kv_block_indices, qk_dtype, sparse_block_kv)


def fp8_fp4_sparse_mqa_logits(q, kv, weights, metadata, num_max_sparse_blocks, sparse_block_kv,
                              use_unaligned_ks=False):
    return _sparse.fp8_fp4_sparse_mqa_logits(q, kv, weights, metadata, num_max_sparse_blocks, sparse_block_kv,
                                             use_unaligned_ks)


def fp8_fp4_paged_sparse_mqa_logits(q, kv_cache, weights, metadata, num_max_sparse_blocks, sparse_block_kv):
    return _sparse.fp8_fp4_paged_sparse_mqa_logits(q, kv_cache, weights, metadata, num_max_sparse_blocks,
                                                   sparse_block_kv)
