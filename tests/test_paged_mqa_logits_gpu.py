"""Paged MQA logits and its GPU scheduler on a real GPU (block-scaled MMA emulated on sm_90a): the metadata
against a Python model of the split, logits against an fp64 reference of the dequantized cache, exact -inf
masks, clean rows written to max_context_len, FP4, next_n 1..6, 1-D and 2-D context lengths, zero-length and
length-1 contexts, determinism, graph replay with new metadata."""

from __future__ import annotations

import pytest
import torch
from gpu_helpers import requires_cuda

from deep_gemm_sm120.core.arith import ceil_div
from deep_gemm_sm120.selftest.workloads.mqa import paged_cache

pytestmark = [pytest.mark.cuda, pytest.mark.emulation, requires_cuda]


def expected_metadata(lens: list[int], block_kv: int, num_sms: int) -> list[tuple[int, int]]:
    chunk = max(64, block_kv)
    counts = [max(1, ceil_div(n, chunk)) for n in lens]
    total = sum(counts)
    out = []
    for s in range(num_sms + 1):
        target = s * total // num_sms
        if s == num_sms or target >= total:
            out.append((len(lens), 0))
            continue
        b, acc = 0, 0
        while target >= acc + counts[b]:  # the batch whose chunks hold `target`
            acc += counts[b]
            b += 1
        out.append((b, target - acc))
    return out


@pytest.mark.parametrize("block_kv", [32, 64, 128])
@pytest.mark.parametrize("num_sms", [1, 7, 132])
def test_metadata_matches_the_split(sm120_or_emulation, block_kv, num_sms):
    import deep_gemm_sm120 as dg

    g = torch.Generator().manual_seed(block_kv + num_sms)
    for lens in ([0], [1], [5000, 0, 1, 64, 65, 128, 129], torch.randint(0, 9000, (3000,), generator=g).tolist()):
        ctx = torch.tensor(lens, dtype=torch.int32, device="cuda")
        meta = dg.get_paged_mqa_logits_metadata(ctx, block_kv, num_sms)
        assert meta.shape == (num_sms + 1, 2)
        assert [tuple(r) for r in meta.tolist()] == expected_metadata(lens, block_kv, num_sms)
        # 2-D lengths: a batch spans its largest
        ctx2 = torch.stack([ctx // 2, ctx], 1).contiguous()
        assert torch.equal(dg.get_paged_mqa_logits_metadata(ctx2, block_kv, num_sms), meta)


def reference(q_deq, deq, table, lens_2d, w, max_len):
    """fp64; lens_2d [B, next_n] limits."""
    b_, n_, h_, d_ = q_deq.shape
    out = torch.full((b_ * n_, max_len), float("-inf"), dtype=torch.float64, device="cuda")
    for b in range(b_):
        L = int(lens_2d[b].max())
        if L == 0:
            continue
        blocks = table[b, : ceil_div(L, deq.shape[1])].long()
        kv = deq[blocks].reshape(-1, d_)[:L]
        score = torch.einsum("thd,kd->thk", q_deq[b], kv).relu()
        s = (score * w[b * n_ : (b + 1) * n_].double()[:, :, None]).sum(1)
        for t in range(n_):
            lim = min(int(lens_2d[b, t]), max_len)
            out[b * n_ + t, :lim] = s[t, :lim]
    return out


def run(batch_lens, next_n, h, d, block_kv, fp4=False, two_d=False, clean=True, seed=0, num_sms=13):
    import deep_gemm_sm120 as dg
    from deep_gemm_sm120.quant import dequantize_fp4, pack_ue8m0_to_int, per_token_cast_to_fp4
    from deep_gemm_sm120.testing import calc_diff

    g = torch.Generator(device="cuda").manual_seed(seed + 7)
    lens = torch.tensor(batch_lens, dtype=torch.int32, device="cuda")
    cache, table, deq = paged_cache(batch_lens, block_kv, d, fp4, seed)
    bsz = len(batch_lens)
    qf = torch.randn(bsz * next_n * h, d, device="cuda", generator=g)
    if fp4:
        qp, qsf, _ = per_token_cast_to_fp4(qf, "mxfp4")
        q_in = (qp.view(bsz, next_n, h, d // 2), pack_ue8m0_to_int(qsf).view(bsz, next_n, h))
        q_deq = dequantize_fp4(qp, qsf).double().view(bsz, next_n, h, d)
    else:
        q8 = qf.to(torch.float8_e4m3fn)
        q_in = (q8.view(bsz, next_n, h, d), None)
        q_deq = q8.double().view(bsz, next_n, h, d)
    w = torch.randn(bsz * next_n, h, device="cuda", generator=g)
    if two_d:  # per token lengths, the last equal to the batch's
        frac = torch.rand(bsz, next_n, device="cuda", generator=g)
        ctx = ((lens[:, None] + 1) * frac).int().clamp(max=lens[:, None])
        ctx[:, -1] = lens
        lens_2d = ctx.contiguous()
        ctx_in = lens_2d
    else:
        t = torch.arange(next_n, device="cuda")
        lens_2d = (lens[:, None] - next_n + t[None, :] + 1).clamp_min(0).int()
        ctx_in = lens
    max_len = int(table.shape[1] * block_kv)
    meta = dg.get_paged_mqa_logits_metadata(ctx_in, block_kv, num_sms)
    out = dg.fp8_fp4_paged_mqa_logits(q_in, cache, w, ctx_in, table, meta, max_len, clean_logits=clean)
    torch.cuda.synchronize()
    ref = reference(q_deq, deq, table, lens_2d, w, max_len)
    inside = ~torch.isinf(ref)
    got = out.double()
    if clean:
        assert torch.equal(torch.isinf(got) & (got < 0), ~inside), "-inf mask differs from the reference"
    diff = calc_diff(got.masked_fill(~inside, 0), ref.masked_fill(~inside, 0))
    assert diff < (1e-5 if fp4 else 1e-6), f"calc_diff {diff:.3e}"
    return out, inside


@pytest.mark.parametrize("h,d", [(64, 128), (32, 128), (16, 64)])
@pytest.mark.parametrize("block_kv", [32, 64, 128])
def test_fp8_paged(sm120_or_emulation, h, d, block_kv):
    run([700, 1, 0, 129, 64, 2000], 2, h, d, block_kv)


@pytest.mark.parametrize("next_n", [1, 3, 6])
@pytest.mark.parametrize("two_d", [False, True])
def test_next_n_and_context_forms(sm120_or_emulation, next_n, two_d):
    run([333, 5, 1024, 77], next_n, 32, 128, 64, two_d=two_d)


@pytest.mark.parametrize("h", [16, 64])
@pytest.mark.parametrize("block_kv", [32, 64])
def test_fp4_paged(sm120_or_emulation, h, block_kv):
    run([700, 1, 0, 129, 2000], 2, h, 128, block_kv, fp4=True)


def test_not_clean_and_deterministic(sm120_or_emulation):
    # without cleaning, positions past a query's limit and past the last chunk are unspecified: compare the rest
    a, inside = run([900, 31, 4000], 4, 64, 128, 64, clean=False, num_sms=5)
    b, _ = run([900, 31, 4000], 4, 64, 128, 64, clean=False, num_sms=5)
    assert torch.equal(a[inside], b[inside])
    c, inside_c = run([900, 31, 4000], 4, 64, 128, 64, clean=True, num_sms=5)
    d, _ = run([900, 31, 4000], 4, 64, 128, 64, clean=True, num_sms=5)
    assert torch.equal(c, d) and torch.equal(c[inside_c], a[inside])


def test_graph_replay_with_new_lengths(sm120_or_emulation):
    import deep_gemm_sm120 as dg
    from deep_gemm_sm120.testing import calc_diff

    lens0, block_kv, h, d, next_n = [500, 64, 1500], 64, 64, 128, 2
    cache, table, deq = paged_cache([1500, 1500, 1500], block_kv, d, False, 5)
    q8 = torch.randn(3 * next_n * h, d, device="cuda").to(torch.float8_e4m3fn).view(3, next_n, h, d)
    w = torch.randn(3 * next_n, h, device="cuda")
    lens = torch.tensor(lens0, dtype=torch.int32, device="cuda")
    max_len = table.shape[1] * block_kv
    dg.fp8_paged_mqa_logits(
        q8, cache, w, lens, table, dg.get_paged_mqa_logits_metadata(lens, block_kv, 11), max_len, clean_logits=True
    )
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        meta = dg.get_paged_mqa_logits_metadata(lens, block_kv, 11)
        out = dg.fp8_paged_mqa_logits(q8, cache, w, lens, table, meta, max_len, clean_logits=True)
    for new in ([1500, 0, 1], [7, 1499, 300]):
        lens.copy_(torch.tensor(new, dtype=torch.int32))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        t = torch.arange(next_n, device="cuda")
        lens_2d = (lens[:, None] - next_n + t[None, :] + 1).clamp_min(0).int()
        ref = reference(q8.double(), deq, table, lens_2d, w, max_len)
        inside = ~torch.isinf(ref)
        assert torch.equal(torch.isinf(out) & (out < 0), ~inside)
        assert calc_diff(out.double().masked_fill(~inside, 0), ref.masked_fill(~inside, 0)) < 1e-6


def test_bad_block_table_raises(sm120_or_emulation):
    import deep_gemm_sm120 as dg

    cache, table, _ = paged_cache([100], 64, 128, False, 1)
    table[0, 0] = cache.shape[0]
    lens = torch.tensor([100], dtype=torch.int32, device="cuda")
    q8 = torch.zeros(1, 1, 64, 128, device="cuda").to(torch.float8_e4m3fn)
    meta = dg.get_paged_mqa_logits_metadata(lens, 64, 4)
    with pytest.raises(ValueError, match=r"block_table\[0, 0\]"):
        dg.fp8_paged_mqa_logits(q8, cache, torch.zeros(1, 64, device="cuda"), lens, table, meta, 256)
