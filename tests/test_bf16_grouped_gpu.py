"""M-grouped BF16 GEMMs on a GPU: per-group fp64 references, untouched padding, empty groups, psum, masks, graphs."""

from __future__ import annotations

import pytest
import torch
from gpu_helpers import contiguous_layout, requires_cuda

pytestmark = [pytest.mark.cuda, pytest.mark.emulation, requires_cuda]
SENTINEL = 777.0  # exactly representable in bf16; padding rows must keep it
ALIGN = 128


def _contiguous_problem(sizes, n, k, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    lay, psum = contiguous_layout(sizes, ALIGN)
    m = lay.numel()
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=g)
    b = torch.randn(len(sizes), n, k, device="cuda", dtype=torch.bfloat16, generator=g)
    return a, b, lay, psum


def _check_contiguous(a, b, lay, d):
    from deep_gemm_sm120.testing import calc_diff

    torch.cuda.synchronize()
    lay_cpu = lay.cpu()
    pad = lay_cpu == -1
    assert bool((d[pad.cuda()] == SENTINEL).all()), "padding rows were written"
    for gi in range(b.shape[0]):
        sel = (lay_cpu == gi).cuda()
        if not bool(sel.any()):
            continue
        ref = a[sel].double() @ b[gi].double().T
        got = d[sel]
        assert not torch.isnan(got).any() and not bool((got == SENTINEL).all(dim=1).any())
        assert calc_diff(got, ref) <= 1e-5, f"group {gi}"


@pytest.mark.parametrize(
    "sizes,n,k",
    [
        ([100, 0, 256, 1], 512, 1024),  # an empty middle group must not disturb later groups
        ([128, 300, 7], 200, 136),  # N and K tails
        ([1000, 24, 0, 0, 513], 4096, 512),
    ],
)
def test_contiguous_per_row_and_psum(sm120_or_emulation, sizes, n, k):
    import deep_gemm_sm120 as dg

    a, b, lay, psum = _contiguous_problem(sizes, n, k)
    d = torch.full((a.shape[0], n), SENTINEL, device="cuda", dtype=torch.bfloat16)
    dg.m_grouped_bf16_gemm_nt_contiguous(a, b, d, lay)
    _check_contiguous(a, b, lay, d)
    d2 = torch.full_like(d, SENTINEL)
    dg.m_grouped_bf16_gemm_nt_contiguous(a, b, d2, psum, use_psum_layout=True, ensure_zero_padding=False)
    _check_contiguous(a, b, lay, d2)
    assert torch.equal(d, d2)  # both layouts describe the same problem, bit for bit
    d4 = torch.full_like(d, SENTINEL)
    dg.m_grouped_bf16_gemm_nt_contiguous(a, b, d4, psum, use_psum_layout=True)  # DeepGEMM's default: zero padding
    pad = (lay == -1).unsqueeze(1).expand_as(d)
    assert torch.equal(d4[~pad], d[~pad]) and bool((d4[pad] == 0).all())
    d3 = torch.full_like(d, SENTINEL)
    dg.m_grouped_bf16_gemm_nt_contiguous(a, b, d3, lay)
    assert torch.equal(d, d3)  # deterministic


def test_contiguous_rejects_a_misaligned_layout(sm120_or_emulation):
    import deep_gemm_sm120 as dg

    a, b, lay, _ = _contiguous_problem([100, 100], 256, 256)
    bad = lay.clone()
    bad[64:128] = 1  # group 1 starts inside the first block
    d = torch.zeros(a.shape[0], 256, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="mix groups"):
        dg.m_grouped_bf16_gemm_nt_contiguous(a, b, d, bad)


def test_masked(sm120_or_emulation):
    import deep_gemm_sm120 as dg
    from deep_gemm_sm120.testing import calc_diff

    G, M, N, K = 4, 256, 384, 1024
    a = torch.randn(G, M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(G, N, K, device="cuda", dtype=torch.bfloat16)
    for masks in ([0, 256, 17, 129], [256, 0, 0, 1]):
        masked = torch.tensor(masks, dtype=torch.int32, device="cuda")
        d = torch.full((G, M, N), SENTINEL, device="cuda", dtype=torch.bfloat16)
        dg.m_grouped_bf16_gemm_nt_masked(a, b, d, masked, expected_m=64)
        torch.cuda.synchronize()
        for g, mm in enumerate(masks):
            assert bool((d[g, mm:] == SENTINEL).all()), f"rows past masked_m[{g}] were written"
            if mm:
                assert calc_diff(d[g, :mm], a[g, :mm].double() @ b[g].double().T) <= 1e-5


def test_masked_cached_calls_equal_fresh_ones_and_keep_the_checks(sm120_or_emulation):
    """The masked call's fast path (one check per signature) against a fresh check of every call: new addresses with
    the same signature give bitwise the same output, a changed stride or expected_m type is checked again, and a
    call that fails its checks is never cached."""
    import deep_gemm_sm120 as dg
    from deep_gemm_sm120.families.bf16_gemm import grouped

    G, M, N, K = 3, 128, 256, 512
    masked = torch.tensor([128, 7, 0], dtype=torch.int32, device="cuda")

    def run(seed, fresh):
        gen = torch.Generator(device="cuda").manual_seed(seed)
        a = torch.randn(G, M, K, device="cuda", dtype=torch.bfloat16, generator=gen)
        b = torch.randn(G, N, K, device="cuda", dtype=torch.bfloat16, generator=gen)
        d = torch.full((G, M, N), SENTINEL, device="cuda", dtype=torch.bfloat16)
        if fresh:
            grouped._GROUPED.clear()
        dg.m_grouped_bf16_gemm_nt_masked(a, b, d, masked, expected_m=64)
        return d

    for seed in range(3):  # each: a cached call with new addresses, then the same data checked afresh
        cached = run(seed, fresh=False)
        assert torch.equal(cached, run(seed, fresh=True))
    a = torch.randn(G, M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(G, N, K, device="cuda", dtype=torch.bfloat16)
    d = torch.empty(G, M, N, device="cuda", dtype=torch.bfloat16)
    dg.m_grouped_bf16_gemm_nt_masked(a, b, d, masked, expected_m=64)
    with pytest.raises(TypeError):  # the same tensors, a float expected_m: not the cached int signature
        dg.m_grouped_bf16_gemm_nt_masked(a, b, d, masked, expected_m=64.0)
    strided = torch.empty(G, M, 2 * N, device="cuda", dtype=torch.bfloat16)[:, :, :N]  # another stride of d
    dg.m_grouped_bf16_gemm_nt_masked(a, b, strided, masked, expected_m=64)
    torch.cuda.synchronize()
    assert torch.equal(strided[0], d[0])
    before = len(grouped._GROUPED)
    with pytest.raises(TypeError):
        dg.m_grouped_bf16_gemm_nt_masked(a.float(), b, d, masked, expected_m=64)
    assert len(grouped._GROUPED) == before


def test_masked_graph_replay_follows_device_masks(sm120_or_emulation, monkeypatch):
    import deep_gemm_sm120 as dg
    from deep_gemm_sm120.testing import calc_diff

    G, M, N, K = 3, 128, 256, 512
    a = torch.randn(G, M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(G, N, K, device="cuda", dtype=torch.bfloat16)
    masked = torch.tensor([5, 128, 0], dtype=torch.int32, device="cuda")
    d = torch.empty(G, M, N, device="cuda", dtype=torch.bfloat16)
    dg.m_grouped_bf16_gemm_nt_masked(a, b, d, masked, expected_m=128)  # compile outside capture
    torch.cuda.synchronize()
    monkeypatch.setenv("DG_SM120_JIT_STRICT", "1")
    graph, s = torch.cuda.CUDAGraph(), torch.cuda.Stream()
    with torch.cuda.stream(s), torch.cuda.graph(graph, stream=s):
        dg.m_grouped_bf16_gemm_nt_masked(a, b, d, masked, expected_m=128)
    for masks in ([128, 0, 77], [1, 2, 3]):
        masked.copy_(torch.tensor(masks, dtype=torch.int32))
        d.fill_(SENTINEL)
        graph.replay()
        torch.cuda.synchronize()
        for g, mm in enumerate(masks):
            assert bool((d[g, mm:] == SENTINEL).all())
            if mm:
                assert calc_diff(d[g, :mm], a[g, :mm].double() @ b[g].double().T) <= 1e-5


def test_contiguous_in_graph_capture_skips_the_sync(sm120_or_emulation):
    import deep_gemm_sm120 as dg

    a, b, lay, _ = _contiguous_problem([200, 56], 256, 256)
    d = torch.full((a.shape[0], 256), SENTINEL, device="cuda", dtype=torch.bfloat16)
    dg.m_grouped_bf16_gemm_nt_contiguous(a, b, d, lay)
    torch.cuda.synchronize()
    graph, s = torch.cuda.CUDAGraph(), torch.cuda.Stream()
    with torch.cuda.stream(s), torch.cuda.graph(graph, stream=s):
        dg.m_grouped_bf16_gemm_nt_contiguous(a, b, d, lay)  # check_layout=None: no sync while capturing
    d.fill_(SENTINEL)
    graph.replay()
    _check_contiguous(a, b, lay, d)


@pytest.mark.parametrize(
    "ks,m,n",
    [
        ([128, 0, 200, 77, 1], 256, 192),  # K tails inside groups, an empty middle group
        ([4096, 2048, 64], 512, 520),  # long K, N tail
        ([33, 65], 1000, 64),  # small groups; M tail
    ],
)
def test_k_grouped_tn(sm120_or_emulation, ks, m, n):
    import deep_gemm_sm120 as dg
    from deep_gemm_sm120.testing import calc_diff

    total = sum(ks)
    a = torch.randn(total, m, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(total, n, device="cuda", dtype=torch.bfloat16)
    c = torch.randn(len(ks), m, n, device="cuda", dtype=torch.float32)
    refs, off = [], 0
    for kg in ks:
        refs.append(a[off : off + kg].double().T @ b[off : off + kg].double())
        off += kg
    ref = torch.stack(refs)
    d = torch.full_like(c, float("nan"))
    dg.k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks)
    d_acc = c.clone()
    dg.k_grouped_bf16_gemm_tn_contiguous(a, b, d_acc, ks, c=d_acc)  # accumulate onto C in place
    d_again = torch.full_like(c, float("nan"))
    dg.k_grouped_bf16_gemm_tn_contiguous(a, b, d_again, ks)
    torch.cuda.synchronize()
    assert not torch.isnan(d).any() and torch.equal(d, d_again)
    for gi, kg in enumerate(ks):
        if kg == 0:
            assert bool((d[gi] == 0).all()) and torch.equal(d_acc[gi], c[gi])
        else:
            assert calc_diff(d[gi], ref[gi]) <= 1e-5, f"group {gi}"
            assert calc_diff(d_acc[gi], ref[gi] + c[gi].double()) <= 1e-5
