"""Sparse and paged-sparse MQA logits (DeepSeek V4.1 indexer; issue 17): a readable float64 reference of the
semantics DeepGEMM's public tests define (docs/sparse_mqa_logits.md), on dequantized inputs, any device.

Row r (one query token) scores the KV blocks its index list names:
    ks, ke            the row's KV range [ks, ke)   (paged: ks = 0, ke = context_lens[r])
    n_r               = min(num_max_sparse_blocks, ceil(max(0, ke - ks) / sparse_block_kv))   valid slots
    slot s < n_r      block b = sparse_kv_block_indices[r, s]; its tokens t = b * B + ks % B + o, o in [0, B)
                      (B = sparse_block_kv; ks % B must be 0 unless use_unaligned_ks, which only permits it)
    logits[r, s * B + o] = sum_h weights[r, h] * relu(q[r, h] . kv[t])      if ks <= t < ke
with kv[t] of the paged form at page block_table[r, t // page_kv], row t % page_kv. Every other position of the
[rows, num_max_sparse_blocks * B] output (slots past n_r, tokens outside [ks, ke)) is not a score: DeepGEMM leaves
it unspecified; this repository writes -inf there, so `valid` below is also the exact mask.
"""

from __future__ import annotations

import torch

from deep_gemm_sm120.selftest.workloads.mqa import output_mask


def _scores(q: torch.Tensor, keys: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """q [H, D], keys [T, D], weights [H] -> [T]: sum_h w_h relu(q_h . k)."""
    return (torch.relu(keys @ q.T) * weights[None, :]).sum(-1)


def sparse_mqa_logits(
    q: torch.Tensor,
    kv: torch.Tensor,
    weights: torch.Tensor,
    ks: torch.Tensor,
    ke: torch.Tensor,
    indices: torch.Tensor,
    sparse_block_kv: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Contiguous KV. q [S, H, D], kv [N, D], weights [S, H] (dequantized, any float dtype); ks, ke [S];
    indices [S, num_max_sparse_blocks]. Returns (float64 logits [S, num_max * B] with -inf outside `valid`, valid)."""
    q, kv, weights = q.double(), kv.double(), weights.double()
    tokens, valid = output_mask(indices, ks, ke, sparse_block_kv)
    out = torch.full(tokens.shape, float("-inf"), dtype=torch.float64, device=q.device)
    for r in range(q.shape[0]):
        cols = valid[r].nonzero().flatten()
        if cols.numel():
            out[r, cols] = _scores(q[r], kv[tokens[r, cols]], weights[r])
    return out, valid


def paged_sparse_mqa_logits(
    q: torch.Tensor,
    kv_pages: torch.Tensor,
    weights: torch.Tensor,
    context_lens: torch.Tensor,
    block_table: torch.Tensor,
    indices: torch.Tensor,
    sparse_block_kv: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Paged KV. q [S, H, D] (DeepGEMM's [S, 1, H, D] with next_n = 1, squeezed), kv_pages [num_pages, page_kv, D]
    (dequantized), weights [S, H], context_lens [S] (per query token), block_table [S, max_pages] (the row's
    request's pages), indices [S, num_max_sparse_blocks]. Tokens count from 0 (ks = 0)."""
    q, kv_pages, weights = q.double(), kv_pages.double(), weights.double()
    page_kv = kv_pages.shape[1]
    ks = torch.zeros_like(context_lens)
    tokens, valid = output_mask(indices, ks, context_lens, sparse_block_kv)
    out = torch.full(tokens.shape, float("-inf"), dtype=torch.float64, device=q.device)
    for r in range(q.shape[0]):
        cols = valid[r].nonzero().flatten()
        if cols.numel():
            t = tokens[r, cols]
            keys = kv_pages[block_table[r, t // page_kv].long(), t % page_kv]
            out[r, cols] = _scores(q[r], keys, weights[r])
    return out, valid


def dense_logits(q: torch.Tensor, kv: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """[S, N] scores of every key, no mask: what a sparse column must equal at its token."""
    return torch.einsum("shd,nd->shn", q.double(), kv.double()).relu().mul(weights.double()[:, :, None]).sum(1)


# ---- what the kernels compute from the metadata alone (format: deep_gemm_sm120.families.sparse_mqa_logits.metadata) ----


def logits_from_metadata(
    q: torch.Tensor, kv_rows: torch.Tensor, weights: torch.Tensor, metadata: torch.Tensor, sparse_block_kv: int
) -> torch.Tensor:
    """What the kernels compute from the metadata alone: kv_rows [R, D] is the contiguous KV or the page cache
    flattened to rows (page * page_kv + row). -inf where o >= count."""
    q, kv_rows, weights = q.double(), kv_rows.double(), weights.double()
    rows, slots, _ = metadata.shape
    out = torch.full((rows, slots * sparse_block_kv), float("-inf"), dtype=torch.float64, device=q.device)
    for r in range(rows):
        for s in range(slots):
            base, count = metadata[r, s].tolist()
            if count:
                out[r, s * sparse_block_kv : s * sparse_block_kv + count] = _scores(
                    q[r], kv_rows[base : base + count], weights[r]
                )
    return out
