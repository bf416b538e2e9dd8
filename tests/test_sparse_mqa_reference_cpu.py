"""The sparse MQA-logits reference (host/deep_gemm_sm120/selftest/workloads/sparse_reference.py) against the dense one, on the CPU: every valid
column equals the dense score of its token to float64 rounding (DeepGEMM checks its sparse kernels against its
dense ones the same way, bitwise),
the mask is exactly the documented one, and the paged form equals the contiguous form on an identity page map.
Edge cases the issue names: empty index lists, repeated (padding) indices, indices at the last partial block,
unaligned starts."""

from __future__ import annotations

import pytest
import torch

from deep_gemm_sm120.core.arith import ceil_div
from deep_gemm_sm120.families.sparse_mqa_logits.metadata import metadata_contiguous, metadata_paged
from deep_gemm_sm120.selftest.workloads.mqa import output_mask, sparse_indices, valid_slots
from deep_gemm_sm120.selftest.workloads.sparse_reference import (
    dense_logits,
    logits_from_metadata,
    paged_sparse_mqa_logits,
    sparse_mqa_logits,
)


def _inputs(s: int, n: int, h: int = 4, d: int = 16, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(s, h, d, generator=g), torch.randn(n, d, generator=g), torch.randn(s, h, generator=g))


@pytest.mark.parametrize("block", [8, 16, 32])
@pytest.mark.parametrize("unaligned", [False, True])
def test_valid_columns_equal_dense_scores(block, unaligned):
    n = 20 * block + 5
    ks = [0, 3 * block + (5 if unaligned else 0), 7 * block + (1 if unaligned else 0), 2 * block, n]
    ke = [n, 12 * block + 3, 7 * block + (1 if unaligned else 0) + 1, 2 * block, n]  # full, partial, 1 token,
    # empty (ks = ke), empty at the end of the KV
    num_max = 6
    q, kv, w = _inputs(len(ks), n, seed=block)
    idx = sparse_indices(ks, ke, block, num_max, seed=1)
    ks_t, ke_t = torch.tensor(ks), torch.tensor(ke)
    logits, valid = sparse_mqa_logits(q, kv, w, ks_t, ke_t, idx, block)
    dense = dense_logits(q, kv, w)
    tokens, _ = output_mask(idx, ks_t, ke_t, block)
    assert logits.shape == (len(ks), num_max * block)
    torch.testing.assert_close(logits[valid], dense.gather(1, tokens.clamp(0, n - 1))[valid], rtol=1e-12, atol=1e-12)
    assert torch.isneginf(logits[~valid]).all()
    # the row with a single token has exactly one score; the empty rows none
    assert valid.sum(1).tolist()[2:] == [1, 0, 0]
    # every valid token lies in [ks, ke) and no row scores a token twice (repeated padding indices are masked)
    for r in range(len(ks)):
        t = tokens[r][valid[r]]
        assert ((t >= ks[r]) & (t < ke[r])).all() and t.unique().numel() == t.numel()


def test_valid_slot_count_and_last_partial_block():
    block, num_max = 8, 4
    ks, ke = torch.tensor([0, 0, 5, 5, 10]), torch.tensor([17, 100, 5, 6, 9])
    assert valid_slots(ks, ke, num_max, block).tolist() == [3, 4, 0, 1, 0]
    # the last block of row 0 ([16, 24)) holds one token of the range: columns 16..23 -> only 16 valid
    idx = torch.tensor([[0, 1, 2, 2], [0, 3, 7, 11], [0, 0, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]], dtype=torch.int32)
    _, valid = output_mask(idx, ks, ke, block)
    assert valid[0, 16:24].tolist() == [True] + [False] * 7 and not valid[0, 24:].any()
    assert valid[1].all()  # four full blocks inside [0, 100)
    # ks = 5 unaligned: block 0 is shifted to start at 5; ke = 6 leaves one token
    assert valid[3].nonzero().flatten().tolist() == [0] and not valid[2].any() and not valid[4].any()


def test_fewer_slots_than_blocks_chooses_a_subset():
    block, num_max = 8, 3
    idx = sparse_indices([0], [80], block, num_max, seed=3)
    blocks = idx[0].tolist()
    assert len(set(blocks)) == 3 and blocks == sorted(blocks) and all(0 <= b < 10 for b in blocks)
    q, kv, w = _inputs(1, 80)
    logits, valid = sparse_mqa_logits(q, kv, w, torch.tensor([0]), torch.tensor([80]), idx, block)
    assert valid.all()
    dense = dense_logits(q, kv, w)
    for s, b in enumerate(blocks):
        torch.testing.assert_close(
            logits[0, s * block : (s + 1) * block], dense[0, b * block : (b + 1) * block], rtol=1e-12, atol=1e-12
        )


@pytest.mark.parametrize("page_kv", [16, 64])
def test_paged_equals_contiguous_on_shuffled_pages(page_kv):
    block, num_max, pages = 8, 5, 6
    n = pages * page_kv
    q, kv, w = _inputs(3, n, seed=page_kv)
    lens = [n, n - 3, 0]
    perm = torch.randperm(pages, generator=torch.Generator().manual_seed(0))
    cache = torch.empty(pages, page_kv, kv.shape[1])
    cache[perm] = kv.view(pages, page_kv, -1)  # logical page p lives in physical page perm[p]
    table = perm.to(torch.int32)[None, :].expand(3, pages)
    idx = sparse_indices([0, 0, 0], lens, block, num_max, seed=2)
    paged, pv = paged_sparse_mqa_logits(q, cache, w, torch.tensor(lens), table, idx, block)
    contiguous, cv = sparse_mqa_logits(q, kv, w, torch.zeros(3, dtype=torch.long), torch.tensor(lens), idx, block)
    assert torch.equal(pv, cv) and torch.equal(paged, contiguous)


def test_the_documented_worked_example():
    """docs/sparse_mqa_logits.md: B = 8, three slots, ks = 13, ke = 40, indices [1, 3, 4]; plus an empty row."""
    idx = torch.tensor([[1, 3, 4], [2, 2, 2]], dtype=torch.int32)
    ks, ke = torch.tensor([13, 7]), torch.tensor([40, 7])
    tokens, valid = output_mask(idx, ks, ke, 8)
    assert valid_slots(ks, ke, 3, 8).tolist() == [3, 0]
    assert tokens[0].tolist() == list(range(13, 21)) + list(range(29, 37)) + list(range(37, 45))
    assert valid[0].nonzero().flatten().tolist() == list(range(19)) and not valid[1].any()


@pytest.mark.parametrize("block", [8, 16, 32])
def test_metadata_reproduces_the_semantics(block):
    """The kernels' view (per-slot first row and valid count) gives exactly the reference logits, contiguous and
    paged, including unaligned starts, empty rows, partial last blocks and padding."""
    n = 12 * block + 7
    ks = [0, block + 3, 5 * block + 1, 9 * block, n]
    ke = [n, 9 * block + 2, 5 * block + 2, 9 * block, n]
    q, kv, w = _inputs(len(ks), n, seed=block + 1)
    idx = sparse_indices(ks, ke, block, 5, seed=4)
    ks_t, ke_t = torch.tensor(ks), torch.tensor(ke)
    meta = metadata_contiguous(ks_t, ke_t, idx, block)
    ref, _ = sparse_mqa_logits(q, kv, w, ks_t, ke_t, idx, block)
    torch.testing.assert_close(logits_from_metadata(q, kv, w, meta, block), ref, rtol=1e-12, atol=1e-12)
    # paged: pages of 2 blocks, shuffled
    page_kv, lens = 2 * block, [n, n - 5, 0, block + 1, 3]
    pages = ceil_div(n, page_kv)
    flat = torch.cat([kv, torch.zeros(pages * page_kv - n, kv.shape[1])])
    perm = torch.randperm(pages, generator=torch.Generator().manual_seed(block))
    cache = torch.empty(pages, page_kv, kv.shape[1])
    cache[perm] = flat.view(pages, page_kv, -1)
    table = perm.to(torch.int32)[None, :].expand(len(lens), pages).contiguous()
    idx = sparse_indices([0] * len(lens), lens, block, 5, seed=5)
    ctx = torch.tensor(lens)
    meta = metadata_paged(ctx, table, idx, page_kv, block)
    ref, _ = paged_sparse_mqa_logits(q, cache, w, ctx, table, idx, block)
    torch.testing.assert_close(
        logits_from_metadata(q, cache.flatten(0, 1), w, meta, block), ref, rtol=1e-12, atol=1e-12
    )


def test_metadata_never_points_outside_the_range():
    """Indices a caller got wrong (negative, below ks, past ke, past the block table) yield count 0, never a read
    outside [ks, ke) or the table."""
    block = 8
    ks, ke = torch.tensor([16, 0]), torch.tensor([64, 40])
    idx = torch.tensor([[-1, 1, 7, 100], [0, 4, 5, 9]], dtype=torch.int32)
    meta = metadata_contiguous(ks, ke, idx, block)
    assert meta[0, :, 1].tolist() == [0, 0, 8, 0] and meta[1, :, 1].tolist() == [8, 8, 0, 0]
    table = torch.tensor([[3, 2], [1, -1]], dtype=torch.int32)  # row 1's second page is unmapped
    meta = metadata_paged(
        torch.tensor([40, 40]), table, torch.tensor([[0, 2, 4, 9], [0, 2, 3, 4]], dtype=torch.int32), 16, block
    )
    assert meta[0, :, 1].tolist() == [8, 8, 0, 0]  # block 4 is page 2: past the table
    assert meta[1, :, 1].tolist() == [8, 0, 0, 0]  # blocks 2, 3 live on the unmapped page
    assert meta[0, 0].tolist() == [3 * 16, 8] and meta[0, 1].tolist() == [2 * 16, 8]  # pages 3 and 2


def test_metadata_pages_whose_rows_wrap_int32_name_no_page():
    """A block-table entry so large that its first KV row does not fit in int32 (2^26 + 1 pages of 64 rows is
    2^32 + 64, which would wrap to row 64, a real row) is treated like an unmapped page: count 0."""
    block, page_kv = 8, 64
    table = torch.tensor([[2**26 + 1, 3], [2**31 - 1, 2**25 - 1]], dtype=torch.int32)
    idx = torch.tensor([[0, 8], [0, 8]], dtype=torch.int32)  # blocks 0 and 8: page columns 0 and 1
    meta = metadata_paged(torch.tensor([128, 128]), table, idx, page_kv, block)
    assert meta[0].tolist() == [[0, 0], [3 * 64, 8]]
    # (2^25 - 1) * 64 + 8 rows still fit: kept (the logits kernel then drops it unless the cache has those rows)
    assert meta[1].tolist() == [[0, 0], [(2**25 - 1) * 64, 8]]
