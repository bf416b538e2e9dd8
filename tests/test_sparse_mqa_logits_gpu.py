"""Sparse and paged-sparse MQA logits on a real GPU (block-scaled MMA emulated on sm_90a): the float64 reference
of the dequantized MXFP8 / MXFP4 inputs (host/deep_gemm_sm120/selftest/workloads/sparse_reference.py; inputs from workloads.mqa), exact -inf masks, every element written
(poisoned buffers), determinism, graph replay with new indices, empty index lists, repeated indices, the last
partial block, hand-made out-of-range table entries, and every geometry (H 16/32/64, D 64/128, blocks 8/16/32)."""

from __future__ import annotations

import pytest
import torch
from gpu_helpers import requires_cuda

from deep_gemm_sm120.selftest.workloads.mqa import run_sparse, run_sparse_paged, sparse_case, sparse_paged_case
from deep_gemm_sm120.selftest.workloads.sparse_reference import (
    logits_from_metadata,
    paged_sparse_mqa_logits,
    sparse_mqa_logits,
)

pytestmark = [pytest.mark.cuda, pytest.mark.emulation, requires_cuda]

GEOMETRIES = [("mxfp8", 128), ("mxfp8", 64), ("mxfp4", 128)]


def assert_matches(out: torch.Tensor, ref: torch.Tensor, valid: torch.Tensor, label: str) -> None:
    from deep_gemm_sm120.testing import calc_diff

    assert out.dtype == torch.bfloat16 and out.shape == ref.shape, label
    got = out.double()
    assert not torch.isnan(got).any(), f"{label}: NaN (an element was not written)"
    neg_inf = torch.isinf(got) & (got < 0)
    assert torch.equal(neg_inf, ~valid.to(got.device)), f"{label}: -inf mask differs from the reference"
    v = valid.to(got.device)
    if v.any():
        diff = calc_diff(got[v], ref[v])
        assert diff < 3e-5, f"{label}: calc_diff {diff:.3e}"
        err = (got[v] - ref[v]).abs()
        bound = ref[v].abs() * 2.0**-7 + 1e-3 * ref[v].abs().max()
        assert bool((err <= bound).all()), f"{label}: max error {float(err.max()):.3e}"


def reference_contiguous(c):
    return sparse_mqa_logits(c["q_deq"], c["kv_deq"], c["w"].float(), c["ks"], c["ke"], c["idx"], c["block"])


def poison_allocator(numel: int) -> None:
    """Leave NaN in the caching allocator's next block of this size, so an unwritten output element shows."""
    torch.full((numel,), float("nan"), dtype=torch.bfloat16, device="cuda")
    torch.cuda.synchronize()


@pytest.mark.parametrize("fmt,d", GEOMETRIES)
@pytest.mark.parametrize("h", [16, 32, 64])
@pytest.mark.parametrize("block", [8, 16, 32])
def test_contiguous_matches_reference(sm120_or_emulation, fmt, d, h, block):
    c = sparse_case(37, 611, h, d, fmt, block, num_max=9, seed=h + block)
    ref, valid = reference_contiguous(c)
    poison_allocator(ref.numel())
    out = run_sparse(c)
    torch.cuda.synchronize()
    assert_matches(out, ref, valid, f"{fmt} d{d} h{h} b{block}")


@pytest.mark.parametrize("rows,num_max,block", [(2, 128, 16), (1000, 64, 32), (300, 5, 8), (64, 1, 32)])
def test_work_split_and_partial_tiles(sm120_or_emulation, rows, num_max, block):
    """One tile per CTA (few rows), eight (many rows), slot counts whose keys end mid-tile (5 x 8 = 40)."""
    c = sparse_case(rows, 4099, 32, 128, "mxfp8", block, num_max, seed=rows)
    ref, valid = reference_contiguous(c)
    out = run_sparse(c)
    torch.cuda.synchronize()
    assert_matches(out, ref, valid, f"rows {rows} num_max {num_max} b{block}")


@pytest.mark.parametrize("rows,n", [(9, 1), (40, 4)])
def test_more_rows_than_kv_tokens(sm120_or_emulation, rows, n):
    """Rows before the KV's first token see nothing (ks = ke = 0): all -inf, the rest scored as usual."""
    c = sparse_case(rows, n, 16, 128, "mxfp8", 8, 2, seed=rows)
    assert c["ke"].tolist()[: rows - n] == [0] * (rows - n)
    ref, valid = reference_contiguous(c)
    assert not valid[: rows - n].any()
    assert_matches(run_sparse(c), ref, valid, f"rows {rows} n {n}")


def test_aligned_starts_without_unaligned_flag(sm120_or_emulation):
    c = sparse_case(50, 800, 64, 128, "mxfp4", 16, 12, seed=4, unaligned=False)
    ref, valid = reference_contiguous(c)
    assert_matches(run_sparse(c, unaligned=False), ref, valid, "aligned ks")


def test_empty_repeated_and_last_partial_block(sm120_or_emulation):
    """Row 0 empty (its indices are padding), row 1 repeats a valid block inside its valid prefix, row 2 selects
    the last partial block of the KV (n = 203: tokens 200..202 of block 25 with B = 8) and the box past n."""
    import deep_gemm_sm120 as dg

    n, block = 203, 8
    c = sparse_case(3, n, 32, 128, "mxfp8", block, 4, ranges=([50, 0, 8], [50, 40, n]))
    c["idx"] = torch.tensor([[0, 0, 0, 0], [1, 1, 3, 4], [1, 7, 24, 25]], dtype=torch.int32, device="cuda")
    ref, valid = reference_contiguous(c)
    assert not valid[0].any() and valid[1, :8].all() and valid[1, 8:16].all()
    assert valid[2, 24:27].all() and not valid[2, 27:].any()
    out = run_sparse(c)
    torch.cuda.synchronize()
    assert_matches(out, ref, valid, "edge rows")
    assert torch.equal(out[1, :8], out[1, 8:16]), "a repeated block scores the same"
    meta = dg.get_sparse_mqa_logits_metadata(
        c["ks"], c["ke"], n, c["idx"], torch.float8_e4m3fn, block, use_unaligned_ks=True
    )
    assert meta[2, 3].tolist() == [200, 3]


def test_out_of_range_table_entries_are_never_read(sm120_or_emulation):
    """A hand-made slot table pointing past the KV (or negative) yields -inf there, not a fault."""
    import deep_gemm_sm120 as dg

    c = sparse_case(4, 100, 16, 64, "mxfp8", 16, 3, seed=9)
    meta = torch.tensor(
        [
            [[0, 16], [90, 16], [-16, 16]],
            [[84, 16], [100, 1], [2**30, 16]],
            [[0, 0], [0, -3], [16, 5]],
            [[1, 16], [50, 16], [99, 1]],
        ],
        dtype=torch.int32,
        device="cuda",
    )
    out = dg.fp8_fp4_sparse_mqa_logits(c["q"], c["kv"], c["w"], meta, 3, 16)
    torch.cuda.synchronize()
    # the entries inside [0, 100) rows with a positive count, the rest zeroed
    kept = torch.tensor(
        [
            [[0, 16], [0, 0], [0, 0]],
            [[84, 16], [0, 0], [0, 0]],
            [[0, 0], [0, 0], [16, 5]],
            [[1, 16], [50, 16], [99, 1]],
        ],
        dtype=torch.int32,
        device="cuda",
    )
    want = torch.zeros(4, 48, dtype=torch.bool, device="cuda")
    want[0, :16] = want[1, :16] = want[2, 32:37] = want[3, :33] = True
    ref = logits_from_metadata(c["q_deq"], c["kv_deq"], c["w"].float(), kept, 16)
    assert_matches(out, ref, want, "hand-made table")


def test_deterministic(sm120_or_emulation):
    c = sparse_case(129, 2000, 64, 128, "mxfp4", 32, 17, seed=5)
    outs = [run_sparse(c) for _ in range(3)]
    for o in outs[1:]:
        assert torch.equal(o, outs[0])


def test_graph_replay_with_new_indices(sm120_or_emulation):
    import deep_gemm_sm120 as dg

    c = sparse_case(48, 900, 32, 128, "mxfp8", 16, 11, seed=6)
    qk = c["q"][0].dtype

    def step():
        meta = dg.get_sparse_mqa_logits_metadata(c["ks"], c["ke"], c["n"], c["idx"], qk, 16, use_unaligned_ks=True)
        return dg.fp8_fp4_sparse_mqa_logits(c["q"], c["kv"], c["w"], meta, 11, 16, use_unaligned_ks=True)

    step()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()
    new = sparse_case(48, 900, 32, 128, "mxfp8", 16, 11, seed=7)
    for key in ("ks", "ke", "idx"):
        c[key].copy_(new[key])
    for dst, src in zip(c["q"] + c["kv"], new["q"] + new["kv"]):
        dst.copy_(src)
    c["w"].copy_(new["w"])
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    ref, valid = reference_contiguous(new)
    assert_matches(out, ref, valid, "graph replay")


# ---------------------------------------------------------------- paged form


@pytest.mark.parametrize("fmt,d", GEOMETRIES)
@pytest.mark.parametrize("h,block", [(16, 8), (32, 16), (64, 32)])
def test_paged_matches_reference(sm120_or_emulation, fmt, d, h, block):
    c = sparse_paged_case(23, h, d, fmt, block, num_max=13, seed=h)
    ref, valid = paged_sparse_mqa_logits(
        c["q_deq"], c["pages_deq"], c["w"].float(), c["lens"], c["table"], c["idx"], block
    )
    poison_allocator(ref.numel())
    out = run_sparse_paged(c)
    torch.cuda.synchronize()
    assert_matches(out, ref, valid, f"paged {fmt} d{d} h{h} b{block}")


@pytest.mark.parametrize("page_kv", [8, 32, 256])
def test_paged_page_sizes(sm120_or_emulation, page_kv):
    c = sparse_paged_case(17, 64, 128, "mxfp4", 8, num_max=40, page_kv=page_kv, seed=page_kv)
    ref, valid = paged_sparse_mqa_logits(c["q_deq"], c["pages_deq"], c["w"].float(), c["lens"], c["table"], c["idx"], 8)
    assert_matches(run_sparse_paged(c), ref, valid, f"page_kv {page_kv}")


# ---------------------------------------------------------------- the slot-table kernel


@pytest.mark.parametrize("block", [8, 16, 32])
def test_metadata_kernel_matches_torch_reference(sm120_or_emulation, block):
    """The one-launch slot-table kernel equals the torch-op builder entry for entry, on adversarial indices:
    negative, below ks, past ke, past the block-table row, on unmapped pages, padding, duplicates."""
    import deep_gemm_sm120 as dg
    from deep_gemm_sm120.families.sparse_mqa_logits.metadata import metadata_contiguous, metadata_paged

    g = torch.Generator().manual_seed(block)
    rows, slots, n = 301, 37, 5000
    ke = torch.randint(0, n + 1, (rows,), generator=g)
    ks = (ke - torch.randint(0, 3 * slots * block, (rows,), generator=g)).clamp_min(0)
    ks[::9] = ke[::9]
    idx = torch.randint(-3, n // block + 3, (rows, slots), generator=g).int()
    ks, ke, idx = ks.int().cuda(), ke.int().cuda(), idx.cuda()
    got = dg.get_sparse_mqa_logits_metadata(ks, ke, n, idx, torch.float8_e4m3fn, block, use_unaligned_ks=True)
    assert torch.equal(got, metadata_contiguous(ks, ke, idx, block))
    page_kv, max_pages = 4 * block, 40
    ctx = torch.randint(0, page_kv * (max_pages + 2), (rows,), generator=g).int().cuda()
    table = torch.randint(-1, 500, (rows, max_pages), generator=g).int().cuda()
    got = dg.get_paged_sparse_mqa_logits_metadata(
        ctx, table, torch.arange(rows, dtype=torch.int32, device="cuda"), page_kv, idx, torch.uint8, block
    )
    assert torch.equal(got, metadata_paged(ctx, table, idx, page_kv, block))
    # strided indices (a slice of a wider tensor) and a zero-row call
    wide = torch.zeros(rows, slots + 5, dtype=torch.int32, device="cuda")
    wide[:, :slots] = idx
    got = dg.get_sparse_mqa_logits_metadata(
        ks, ke, n, wide[:, :slots], torch.float8_e4m3fn, block, use_unaligned_ks=True
    )
    assert torch.equal(got, metadata_contiguous(ks, ke, idx, block))
    assert dg.get_sparse_mqa_logits_metadata(ks[:0], ke[:0], n, idx[:0], torch.float8_e4m3fn, block).shape == (
        0,
        slots,
        2,
    )


# ---------------------------------------------------------------- host errors on the GPU


def test_metadata_mismatch_and_zero_rows(sm120_or_emulation):
    import deep_gemm_sm120 as dg

    c = sparse_case(6, 200, 32, 128, "mxfp8", 16, 4, seed=2)
    meta = dg.get_sparse_mqa_logits_metadata(
        c["ks"], c["ke"], 200, c["idx"], torch.float8_e4m3fn, 16, use_unaligned_ks=True
    )
    with pytest.raises(ValueError, match="slot table"):
        dg.fp8_fp4_sparse_mqa_logits(c["q"], c["kv"], c["w"], meta, 5, 16)
    with pytest.raises(ValueError, match="slot table"):
        dg.fp8_fp4_sparse_mqa_logits(c["q"], c["kv"], c["w"], meta.transpose(0, 1).contiguous().transpose(0, 1), 4, 16)
    with pytest.raises(TypeError, match="use_unaligned_ks"):
        dg.fp8_fp4_sparse_mqa_logits(c["q"], c["kv"], c["w"], meta, 4, 16, use_unaligned_ks=1)
    empty = dg.fp8_fp4_sparse_mqa_logits((c["q"][0][:0], c["q"][1][:0]), c["kv"], c["w"][:0], meta[:0], 4, 16)
    assert empty.shape == (0, 64)
    none = dg.fp8_fp4_sparse_mqa_logits(c["q"], (c["kv"][0][:0], c["kv"][1][:0]), c["w"], torch.zeros_like(meta), 4, 16)
    assert bool(torch.isneginf(none.float()).all())
