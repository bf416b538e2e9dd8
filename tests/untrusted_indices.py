"""Kernels on untrusted indices: most cases capture a CUDA graph with valid inputs (the host checks run then),
corrupt the index tensors in place the way a stale or corrupt decode step would (negative, past the end, huge,
decreasing), replay, and compare with the result each op documents for such entries (docs/untrusted_indices.md);
the gated delta rule's "below T" and "neighbour" cases call eagerly with the value check off and non-finite
values where no sequence (or another one) owns the tokens.
Used by tests/test_untrusted_indices_gpu.py and by the families' compute-sanitizer drivers, where memcheck must
report 0 errors on the same replays."""

from __future__ import annotations

import contextlib

import pytest
import torch

from deep_gemm_sm120.core.arith import ceil_div

INT32_MAX = 2**31 - 1


def _capture(fn):
    """(graph, fn's outputs): fn run once eagerly (compiles, and the host checks pass on the valid inputs), then
    captured."""
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    return graph, out


def _replay(graph, *outs: torch.Tensor, fill: float = float("nan")) -> None:
    """Poison the outputs (an element the replay does not write shows), replay, wait."""
    for out in outs:
        out.fill_(fill)
    graph.replay()
    torch.cuda.synchronize()


# ---------------------------------------------------------------- paged MQA logits


def paged_reference(q_deq, deq, table, lens_2d, w, max_len, num_blocks):
    """fp64 paged logits with the documented reading of bad entries: a length is clamped to [0, what the table
    row covers]; keys in a block whose table entry names no block are -inf."""
    b_, n_, h_, d_ = q_deq.shape
    block_kv = deq.shape[1]
    cap = table.shape[1] * block_kv
    out = torch.full((b_ * n_, max_len), float("-inf"), dtype=torch.float64, device="cuda")
    for b in range(b_):
        lims = [min(max(int(x), 0), cap) for x in lens_2d[b]]
        L = max(lims)
        if L == 0:
            continue
        entries = table[b, : ceil_div(L, block_kv)].long()
        named = (entries >= 0) & (entries < num_blocks)
        kv = deq[entries.clamp(0, num_blocks - 1)].reshape(-1, d_)[:L]
        score = torch.einsum("thd,kd->thk", q_deq[b], kv).relu()
        s = (score * w[b * n_ : (b + 1) * n_].double()[:, :, None]).sum(1)
        s[:, ~named.repeat_interleave(block_kv)[:L]] = float("-inf")
        for t in range(n_):
            lim = min(lims[t], max_len)
            out[b * n_ + t, :lim] = s[t, :lim]
    return out


def paged_case(corrupt: str, two_d: bool = False, block_kv: int = 64, next_n: int = 2, h: int = 32, d: int = 128):
    import deep_gemm_sm120 as dg
    from deep_gemm_sm120.selftest.workloads.mqa import paged_cache
    from deep_gemm_sm120.testing import calc_diff

    lens0 = [300, 129, 64, 500]
    cache, table, deq = paged_cache(lens0, block_kv, d, False, 11)
    bsz, num_blocks = len(lens0), cache.shape[0]
    q8 = (torch.randn(bsz * next_n * h, d, device="cuda") * 0.5).to(torch.float8_e4m3fn).view(bsz, next_n, h, d)
    w = torch.randn(bsz * next_n, h, device="cuda")
    lens = torch.tensor(lens0, dtype=torch.int32, device="cuda")
    t = torch.arange(next_n, device="cuda")
    ctx = (lens[:, None] - next_n + t[None, :] + 1).clamp_min(0).int().contiguous() if two_d else lens
    max_len = table.shape[1] * block_kv

    def step():
        meta = dg.get_paged_mqa_logits_metadata(ctx, block_kv, 13)
        return dg.fp8_paged_mqa_logits(q8, cache, w, ctx, table, meta, max_len, clean_logits=True)

    graph, out = _capture(step)
    if corrupt == "table past the cache":
        table[0, 1], table[3, 0] = num_blocks + 5, INT32_MAX
    elif corrupt == "negative table entries":
        table[1, 0], table[3, 4] = -1, -(2**31)
    elif corrupt == "length past its table row":
        ctx.view(-1)[0] = max_len + 1000
        ctx.view(-1)[-1] = INT32_MAX
    elif corrupt == "negative lengths":
        ctx.view(-1)[1] = -5
        ctx.view(-1)[2] = -(2**31)
    else:
        raise ValueError(corrupt)
    # the documented reading: lengths clamped to [0, max_len] first; 1-D per-query limits follow from them
    if two_d:
        lens_2d = ctx.long().clamp(0, max_len)
    else:
        lens_2d = (ctx.long().clamp(0, max_len)[:, None] - next_n + t[None, :] + 1).clamp_min(0)
    _replay(graph, out)
    ref = paged_reference(q8.double(), deq, table, lens_2d, w, max_len, num_blocks)
    inside = ~torch.isinf(ref)
    assert not torch.isnan(out).any(), f"{corrupt}: rows left unwritten"
    assert torch.equal(torch.isinf(out) & (out < 0), ~inside), f"{corrupt}: -inf mask differs from the documented one"
    diff = calc_diff(out.double().masked_fill(~inside, 0), ref.masked_fill(~inside, 0))
    assert diff < 1e-6, f"{corrupt}: calc_diff {diff:.3e}"


def paged_garbage_schedule():
    """A schedule that is not get_paged_mqa_logits_metadata's (random entries): which rows it covers is not
    defined, but nothing is read or written outside the buffers (memcheck) and nothing hangs."""
    import deep_gemm_sm120 as dg
    from deep_gemm_sm120.selftest.workloads.mqa import paged_cache

    lens0 = [300, 129, 64]
    cache, table, _ = paged_cache(lens0, 64, 128, False, 3)
    q8 = torch.zeros(3, 1, 32, 128, device="cuda").to(torch.float8_e4m3fn)
    w = torch.randn(3, 32, device="cuda")
    lens = torch.tensor(lens0, dtype=torch.int32, device="cuda")
    meta = dg.get_paged_mqa_logits_metadata(lens, 64, 8)
    gen = torch.Generator(device="cuda").manual_seed(5)
    meta.copy_(torch.randint(-(2**31), 2**31 - 1, meta.shape, device="cuda", generator=gen, dtype=torch.int64).int())
    out = dg.fp8_paged_mqa_logits(q8, cache, w, lens, table, meta, table.shape[1] * 64, clean_logits=True)
    torch.cuda.synchronize()
    assert out.shape == (3, table.shape[1] * 64)


# ---------------------------------------------------------------- dense MQA logits, compressed rows


def dense_compressed_case():
    from test_mqa_logits_gpu import reference

    import deep_gemm_sm120 as dg
    from deep_gemm_sm120.selftest.workloads.mqa import dense_case
    from deep_gemm_sm120.testing import calc_diff

    s, sk = 96, 700
    q, kv, kv_sf, w, ks, ke = dense_case(s, sk, 32, 128, "window", 4)
    max_k = int((ke - ks).max())

    def step():
        return dg.fp8_fp4_mqa_logits((q, None), (kv, kv_sf), w, ks, ke, clean_logits=False, max_seqlen_k=max_k)

    graph, out = _capture(step)
    ks[0], ke[0] = -50, 40  # starts before the first key
    ks[1], ke[1] = 600, INT32_MAX  # ends past the last key
    ks[2], ke[2] = 0, sk  # longer than max_seqlen_k: the first columns kept
    ks[3], ke[3] = 500, 100  # empty
    ks[4], ke[4] = -(2**31), -(2**31) + 5
    _replay(graph, out)
    ks_c, ke_c = ks.clamp(0, sk), ke.clamp(0, sk)
    ref, inside = reference(q, kv, kv_sf, w, ks_c, torch.maximum(ke_c, ks_c))
    for i in range(s):
        n = min(max(int(ke_c[i] - ks_c[i]), 0), max_k)
        if n:
            a, b = out[i, :n].double(), ref[i, int(ks_c[i]) : int(ks_c[i]) + n]
            assert not torch.isnan(a).any(), f"row {i}: columns left unwritten"
            assert calc_diff(a, b) < 1e-6 or torch.equal(a, b), f"row {i}"


# ---------------------------------------------------------------- M-grouped GEMMs

SENTINEL = 777.0


GROUPS, BLOCKS = 3, 6  # M-grouped contiguous cases: six 128-row blocks, block i in group i % 3


def _replay_with_bad_ids(run, d, bad: dict[int, int], reference, tol: float) -> None:
    """Capture `run` on valid per-row ids, give the blocks in `bad` those ids, replay: a block whose id is outside
    [0, G) keeps d's values, every other block equals reference(rows, group) within calc_diff `tol`."""
    from deep_gemm_sm120.testing import calc_diff

    lay = torch.arange(BLOCKS, device="cuda", dtype=torch.int32).repeat_interleave(128) % GROUPS
    graph, _ = _capture(lambda: run(lay))
    for blk, gid in bad.items():
        lay[blk * 128 : (blk + 1) * 128] = gid
    _replay(graph, d, fill=SENTINEL)
    for blk in range(BLOCKS):
        rows, g = slice(blk * 128, blk * 128 + 128), int(lay[blk * 128])
        if not 0 <= g < GROUPS:
            assert bool((d[rows] == SENTINEL).all()), f"block {blk} (group id {g}) was written"
        else:
            assert calc_diff(d[rows], reference(rows, g)) < tol, f"block {blk}"


def grouped_contiguous_case():
    """Per-row group ids: a block whose id is past G or below -1 is skipped (its rows of d keep their values).
    The block-scaled M-grouped GEMM walks its tiles with the same scheduler (scheduler/sm120_gemm.cuh)."""
    import deep_gemm_sm120 as dg

    a = torch.randn(BLOCKS * 128, 512, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(GROUPS, 256, 512, device="cuda", dtype=torch.bfloat16)
    d = torch.empty(BLOCKS * 128, 256, device="cuda", dtype=torch.bfloat16)
    _replay_with_bad_ids(
        lambda lay: dg.m_grouped_bf16_gemm_nt_contiguous(a, b, d, lay),
        d,
        {1: GROUPS + 4, 3: -(2**31), 5: INT32_MAX},
        lambda rows, g: a[rows].double() @ b[g].double().T,
        1e-5,
    )


def grouped_block_scaled_case():
    """The block-scaled M-grouped GEMM (MXFP8) on corrupted per-row ids: skipped blocks keep d's values (its scale
    loads follow the group id, so an unchecked id would read outside sfb)."""
    import deep_gemm_sm120 as dg
    from deep_gemm_sm120.selftest.workloads.block_scaled import quantize_side

    gen = torch.Generator(device="cuda").manual_seed(28)
    a, sfa, deq_a = quantize_side("e4m3", BLOCKS * 128, 512, gen)
    parts = [quantize_side("e4m3", 256, 512, gen, block_rows=128) for _ in range(GROUPS)]
    b, sfb = torch.stack([x[0] for x in parts]), torch.stack([x[1] for x in parts])
    recipe = (1, 128, 128)  # scales packed once, outside the capture, as a serving engine does
    sfa = dg.transform_sf_into_required_layout(sfa, BLOCKS * 128, 512, recipe, is_sfa=True)
    sfb = dg.transform_sf_into_required_layout(sfb, 256, 512, recipe, num_groups=GROUPS)
    d = torch.empty(BLOCKS * 128, 256, device="cuda", dtype=torch.bfloat16)
    _replay_with_bad_ids(
        lambda lay: dg.m_grouped_fp8_fp4_gemm_nt_contiguous((a, sfa), (b, sfb), d, lay, recipe=recipe),
        d,
        {0: -2, 2: GROUPS, 4: INT32_MAX},
        lambda rows, g: deq_a[rows] @ parts[g][2].T,
        1e-3,
    )


def grouped_masked_case():
    """masked_m past M computes all M rows; a negative one computes none."""
    import deep_gemm_sm120 as dg
    from deep_gemm_sm120.testing import calc_diff

    G, M, N, K = 4, 192, 256, 512
    a = torch.randn(G, M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(G, N, K, device="cuda", dtype=torch.bfloat16)
    d = torch.full((G, M, N), SENTINEL, device="cuda", dtype=torch.bfloat16)
    masked = torch.tensor([10, 20, 30, 40], dtype=torch.int32, device="cuda")
    graph, _ = _capture(lambda: dg.m_grouped_bf16_gemm_nt_masked(a, b, d, masked, expected_m=32))
    masked.copy_(torch.tensor([INT32_MAX, -1, M + 1, -(2**31)], dtype=torch.int32))
    _replay(graph, d, fill=SENTINEL)
    for g, rows in enumerate([M, 0, M, 0]):
        assert bool((d[g, rows:] == SENTINEL).all()), f"group {g}: rows past {rows} written"
        if rows:
            assert calc_diff(d[g, :rows], a[g, :rows].double() @ b[g].double().T) < 1e-5, f"group {g}"


# ---------------------------------------------------------------- gated delta rule, varlen


@contextlib.contextmanager
def _gdr_planned(overlap: bool | None = None, segment_chunks: int = 0, plan: tuple[int, int] | None = None):
    """The GDR planner patched for one case: overlap True / False forces the prep grid beside the recurrence or
    before it (None: the plan's), segment_chunks the segment length (0: never split), plan the recurrence's
    (V slice, K split). Cached calls are forgotten on entry and exit, since neither the overlap choice nor the
    plan is in a call's key (a signature seen before would keep its old plan). Yields the overlap choices made,
    so a case can assert that the overlapped launch was asked for."""
    from deep_gemm_sm120 import launch
    from deep_gemm_sm120.families.gated_delta_rule import api
    from deep_gemm_sm120.families.gated_delta_rule.plan import SEGMENT_ENV

    chosen: list[tuple] = []
    with pytest.MonkeyPatch.context() as mp:
        if overlap is not None:
            mp.setattr(api, "choose_overlap", lambda *a: chosen.append(a) or (3 if overlap and a[2] else 0))
        if plan is not None:
            mp.setattr(api, "choose_plan", lambda *a: plan)
        mp.setenv(SEGMENT_ENV, str(segment_chunks))
        launch.forget_calls()
        try:
            yield chosen
        finally:
            launch.forget_calls()


def _gdr_matches(o, final, ro, rf, unfinite: str, label: str = "") -> None:
    """o and final state finite (else `unfinite`) and within the suite's relative-L2 bound of the reference."""
    from test_gated_delta_rule_gpu import BOUND

    from deep_gemm_sm120.selftest.workloads.gdr_reference import relative_l2

    assert torch.isfinite(o).all() and torch.isfinite(final).all(), label + unfinite
    eo, ef = relative_l2(o, ro), relative_l2(final, rf)
    assert eo <= BOUND and ef <= BOUND, f"{label}relative L2: o {eo:.2e}, final state {ef:.2e}"


def gdr_varlen_case(overlap: bool | None = None, segment_chunks: int | None = None):
    """cu_seqlens read as its running maximum clamped to [0, T]: [0, 40, 20, 300, -5, 73] with T = 73 is
    [0, 40, 40, 73, 73, 73]: sequences of 40, 0, 33, 0, 0 tokens. overlap True / False forces the prep grid beside
    the recurrence (cu' and the sequences' first chunks published through flags) or before it; None: the plan's.
    segment_chunks: each sequence cut into segments of that many chunks (the segmented passes read cu' too)."""
    from test_gated_delta_rule_gpu import make_inputs

    import deep_gemm_sm120 as dg
    from deep_gemm_sm120.selftest.workloads.gdr_reference import naive_recurrence

    t_total, n = 73, 5
    cu = torch.tensor([0, 10, 30, 50, 60, 73], dtype=torch.int32, device="cuda")
    args, init = make_inputs(1, t_total, 2, 4, seed=9, state_n=n)
    with _gdr_planned(overlap, segment_chunks or 0) as chosen:
        graph, out = _capture(
            lambda: dg.chunk_gated_delta_rule(
                *args, initial_state=init, output_final_state=True, cu_seqlens=cu, chunk_size=32
            )
        )
    assert not overlap or (chosen and chosen[0][2]), "the overlapped launch was not planned"
    cu.copy_(torch.tensor([0, 40, 20, 300, -5, 73], dtype=torch.int32))
    _replay(graph, *out)
    effective = torch.tensor([0, 40, 40, 73, 73, 73], dtype=torch.int32, device="cuda")
    ro, rf = naive_recurrence(*args, initial_state=init, output_final_state=True, cu_seqlens=effective)
    _gdr_matches(out[0], out[1], ro, rf, "tokens or states left unwritten")


def _nan_empty(real_empty):
    """torch.empty whose floating-point tensors come filled with NaN: scratch the kernels fail to write, or read
    where they should not, shows."""

    def empty(*args, **kwargs):
        t = real_empty(*args, **kwargs)
        return t.fill_(float("nan")) if t.is_floating_point() else t

    return empty


def gdr_cu_seqlens_ending_below_t_case(segment_chunks: int = 0, overlap: bool = False):
    """cu_seqlens ending below T ([0, 40, 50, 60] with T = 73, the host's value check off): tokens 60..72 are in no
    sequence. They share the last sequence's last (partial) chunk tiles, yet their inputs are NaN and the prep
    kernel never writes their factors (the scratch comes NaN-filled): the recurrence must keep both out of every
    product (0 x NaN is NaN), so each sequence's o rows and final state stay exact. The rows past cu_seqlens[-1]
    belong to no sequence and are not written. Launched after the prep grid, beside it (overlap) or segmented."""
    from test_gated_delta_rule_gpu import make_inputs

    import deep_gemm_sm120 as dg
    from deep_gemm_sm120.selftest.workloads.gdr_reference import naive_recurrence

    t_total, n, end = 73, 3, 60
    cu = torch.tensor([0, 40, 50, end], dtype=torch.int32, device="cuda")
    args, init = make_inputs(1, t_total, 2, 4, seed=13, state_n=n)
    ro, rf = naive_recurrence(*args, initial_state=init, output_final_state=True, cu_seqlens=cu)
    for x in args:  # q, k, v, g, beta past the last sequence: padding nobody promised to be finite
        x[:, end:] = float("nan")
    was = dg.get_index_checks()
    dg.set_index_checks(False)
    try:
        with _gdr_planned(overlap, segment_chunks) as chosen, pytest.MonkeyPatch.context() as mp:
            mp.setattr(torch, "empty", _nan_empty(torch.empty))
            o, final = dg.chunk_gated_delta_rule(
                *args, initial_state=init, output_final_state=True, cu_seqlens=cu, chunk_size=32
            )
            torch.cuda.synchronize()
    finally:
        dg.set_index_checks(was)
    assert not overlap or (chosen and chosen[0][2]), "the overlapped launch was not planned"
    _gdr_matches(o[:, :end], final, ro[:, :end], rf, "NaN from the tokens past cu_seqlens")


def gdr_non_finite_neighbour_case(overlap: bool = False, chunk: int = 32, plan: tuple[int, int] | None = None):
    """A pack whose last sequence's inputs are Inf / NaN (an overflowed request): the sequences before it share
    its first chunk's tiles in their last partial chunk and must come out exact. plan forces the recurrence's
    (V slice, K split): the tail rows it zeroes depend on the tile geometry (swizzle width, boxes, barrier id)."""
    from test_gated_delta_rule_gpu import make_inputs

    import deep_gemm_sm120 as dg
    from deep_gemm_sm120.selftest.workloads.gdr_reference import naive_recurrence

    t_total, good = 73, 50
    cu = torch.tensor([0, 40, good, t_total], dtype=torch.int32, device="cuda")
    args, init = make_inputs(1, t_total, 2, 4, seed=17, state_n=3)
    ro, rf = naive_recurrence(*args, initial_state=init, output_final_state=True, cu_seqlens=cu)
    for x, bad in zip(args, (float("nan"), float("inf"), float("nan"), float("-inf"), float("nan"))):
        x[:, good:] = bad  # q, k, v, g, beta
    with _gdr_planned(overlap, 0, plan) as chosen:
        o, final = dg.chunk_gated_delta_rule(
            *args, initial_state=init, output_final_state=True, cu_seqlens=cu, chunk_size=chunk
        )
        torch.cuda.synchronize()
    label = f"chunk {chunk} plan {plan}"
    assert not overlap or (chosen and chosen[0][2]), f"{label}: the overlapped launch was not planned"
    _gdr_matches(o[:, :good], final[:2], ro[:, :good], rf[:2], "the bad sequence leaked", f"{label}: ")


def gdr_non_finite_neighbour_every_plan_case():
    """The same at every chunk size and every (V slice, K split) the recurrence is built for."""
    from deep_gemm_sm120.families.gated_delta_rule.kernel import plans
    from deep_gemm_sm120.families.gated_delta_rule.prep import CHUNKS

    for chunk in CHUNKS:
        for plan in plans(chunk):
            gdr_non_finite_neighbour_case(chunk=chunk, plan=plan)


# ---------------------------------------------------------------- sparse MQA logits and their slot tables


def _as_kernel_reads(meta: torch.Tensor, total_rows: int) -> torch.Tensor:
    """The slot table as the logits kernel reads it: an entry whose rows leave the KV is (0, 0), i.e. -inf."""
    x, y = meta[..., 0].long(), meta[..., 1].long()
    ok = (y > 0) & (x >= 0) & (x + y <= total_rows)
    return torch.stack((torch.where(ok, x, 0), torch.where(ok, y, 0)), -1).int()


def _check_sparse(label, meta, want_meta, out, q_deq, kv_rows, w, block) -> None:
    from test_sparse_mqa_logits_gpu import assert_matches

    from deep_gemm_sm120.selftest.workloads.sparse_reference import logits_from_metadata

    assert torch.equal(meta, want_meta), f"{label}: the replayed slot table differs from the torch builder's"
    ref = logits_from_metadata(q_deq, kv_rows, w.float(), _as_kernel_reads(meta, kv_rows.shape[0]), block)
    assert_matches(out, ref, ~torch.isinf(ref), label)


def sparse_contiguous_case():
    """Indices negative, huge or past the KV; ks / ke negative, past the KV, reversed, at the int32 limits: the
    slot table is the torch builder's (entries it cannot place are (0, 0)) and the kernel drops every slot whose
    rows leave the KV (-inf)."""
    import deep_gemm_sm120 as dg
    from deep_gemm_sm120.families.sparse_mqa_logits.metadata import metadata_contiguous
    from deep_gemm_sm120.selftest.workloads.mqa import sparse_case

    block, n = 16, 500
    c = sparse_case(24, n, 32, 128, "mxfp8", block, 6, seed=28)
    qk = c["q"][0].dtype

    def step():
        meta = dg.get_sparse_mqa_logits_metadata(c["ks"], c["ke"], n, c["idx"], qk, block, use_unaligned_ks=True)
        return meta, dg.fp8_fp4_sparse_mqa_logits(c["q"], c["kv"], c["w"], meta, 6, block, use_unaligned_ks=True)

    graph, (meta, out) = _capture(step)
    idx, ks, ke = c["idx"], c["ks"], c["ke"]
    ks[:4], ke[:4] = 0, n
    idx[0, 0], idx[1, :], idx[2, 1], idx[3, 0] = -1, INT32_MAX, n // block + 3, -(2**31)
    ks[4], ke[4] = -40, 60  # starts before the KV
    ks[5], ke[5] = 450, INT32_MAX  # ends past it
    ks[6], ke[6] = 300, 100  # reversed: empty
    ks[7], ke[7] = -(2**31), -(2**31) + 5
    ks[8], ke[8] = INT32_MAX - 3, INT32_MAX
    idx[5] = torch.arange(28, 34, device="cuda", dtype=torch.int32)  # blocks around the KV's end
    _replay(graph, out)
    _check_sparse(
        "sparse contiguous", meta, metadata_contiguous(ks, ke, idx, block), out, c["q_deq"], c["kv_deq"], c["w"], block
    )


def sparse_paged_case():
    """Block-table entries negative, past the cache, at INT32_MAX or large enough that their first row would wrap
    int32 (2^26 + 1 pages of 64 rows); context lengths negative or INT32_MAX; indices negative or huge."""
    import deep_gemm_sm120 as dg
    from deep_gemm_sm120.families.sparse_mqa_logits.metadata import metadata_paged
    from deep_gemm_sm120.selftest.workloads.mqa import sparse_paged_case as make

    block, page_kv = 16, 64
    c = make(16, 32, 128, "mxfp8", block, num_max=8, page_kv=page_kv, seed=28)
    lens, table, idx = c["lens"], c["table"], c["idx"]
    req = torch.arange(16, dtype=torch.int32, device="cuda")
    num_pages = c["cache"].shape[0]

    def step():
        meta = dg.get_paged_sparse_mqa_logits_metadata(lens, table, req, page_kv, idx, c["q"][0].dtype, block)
        return meta, dg.fp8_fp4_paged_sparse_mqa_logits(c["q"], c["cache"], c["w"], meta, 8, block)

    graph, (meta, out) = _capture(step)
    for r in (2, 3, 4, 5):
        lens[r], idx[r, 0] = 200, 0  # slot 0 reads page column 0
    table[2, 0], table[3, :], table[4, 0], table[5, 0] = num_pages + 3, -1, 2**26 + 1, INT32_MAX
    lens[6], lens[7], lens[8] = INT32_MAX, -5, -(2**31)
    idx[9, 0], idx[10, :] = -3, INT32_MAX
    _replay(graph, out)
    assert meta[4, 0].tolist() == [0, 0], "a page whose first row wraps int32 must name no page"
    _check_sparse(
        "sparse paged",
        meta,
        metadata_paged(lens, table, idx, page_kv, block),
        out,
        c["q_deq"],
        c["pages_deq"].reshape(-1, c["pages_deq"].shape[-1]),
        c["w"],
        block,
    )


CASES = [
    *(
        (f"paged {c}{' 2-D' if two else ''}", lambda c=c, two=two: paged_case(c, two))
        for c in ("table past the cache", "negative table entries", "length past its table row", "negative lengths")
        for two in (False, True)
    ),
    ("paged garbage schedule", paged_garbage_schedule),
    ("dense compressed ks/ke", dense_compressed_case),
    ("m-grouped contiguous ids", grouped_contiguous_case),
    ("m-grouped masked_m", grouped_masked_case),
    ("block-scaled m-grouped contiguous ids", grouped_block_scaled_case),
    ("gdr varlen cu_seqlens", gdr_varlen_case),
    ("gdr varlen cu_seqlens, overlapped launch", lambda: gdr_varlen_case(overlap=True)),
    ("gdr varlen cu_seqlens, segmented", lambda: gdr_varlen_case(segment_chunks=1)),
    ("gdr cu_seqlens ending below T", gdr_cu_seqlens_ending_below_t_case),
    ("gdr cu_seqlens ending below T, segmented", lambda: gdr_cu_seqlens_ending_below_t_case(segment_chunks=1)),
    ("gdr non-finite neighbour", gdr_non_finite_neighbour_case),
    ("gdr non-finite neighbour, overlapped launch", lambda: gdr_non_finite_neighbour_case(overlap=True)),
    ("gdr tail rows at every plan", gdr_non_finite_neighbour_every_plan_case),
    ("gdr cu_seqlens ending below T, overlapped launch", lambda: gdr_cu_seqlens_ending_below_t_case(overlap=True)),
    ("sparse contiguous indices and ranges", sparse_contiguous_case),
    ("sparse paged table, lengths and indices", sparse_paged_case),
]
