"""tf32_hc_prenorm_gemm on a real GPU (TF32 and BF16 mma.sync run natively on sm_90a: same instructions as
SM120): fp64 references per split, poisoned outputs, tails, empty splits, strides, determinism, graph replay."""

from __future__ import annotations

import pytest
import torch
from gpu_helpers import poison_like, requires_cuda

from deep_gemm_sm120.core.arith import ceil_div

pytestmark = [pytest.mark.cuda, pytest.mark.emulation, requires_cuda]

BLOCK_K = 64
# the qualification set: M x (N, K) x splits
MS = (1, 13, 137, 4096, 8192)
NKS = ((24, 28672), (24, 7680), (24, 7168))


def split_ranges(k: int, splits: int) -> list[tuple[int, int]]:
    """DeepGEMM's split: ceil(K / 64) blocks dealt out evenly, the first (blocks % splits) one block longer."""
    blocks = ceil_div(k, BLOCK_K)
    per, extra = divmod(blocks, splits)
    out, begin = [], 0
    for s in range(splits):
        count = per + (s < extra)
        out.append((min(begin * BLOCK_K, k), min((begin + count) * BLOCK_K, k)))
        begin += count
    return out


def references(a: torch.Tensor, b: torch.Tensor, splits: int | None):
    """fp64 d and sqr_sum, per split when splits is given."""
    a64, b64 = a.double(), b.double()
    if splits is None:
        return a64 @ b64.T, a64.square().sum(-1)
    ds, ss = [], []
    for lo, hi in split_ranges(a.shape[1], splits):
        ds.append(a64[:, lo:hi] @ b64[:, lo:hi].T)
        ss.append(a64[:, lo:hi].square().sum(-1))
    return torch.stack(ds), torch.stack(ss)


def max_rel(x: torch.Tensor, ref: torch.Tensor) -> float:
    return ((x.double() - ref).abs() / ref.abs().clamp_min(1e-30)).max().item() if ref.numel() else 0.0


def run(m, n, k, splits, seed=0, a=None, b=None):
    import deep_gemm_sm120 as dg
    from deep_gemm_sm120.testing import calc_diff

    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=g) if a is None else a
    b = torch.randn(n, k, device="cuda", dtype=torch.float32, generator=g) if b is None else b
    lead = () if splits is None else (splits,)
    d = poison_like(torch.empty(*lead, m, n, device="cuda"))
    s = poison_like(torch.empty(*lead, m, device="cuda"))
    dg.tf32_hc_prenorm_gemm(a, b, d, s, num_splits=splits)
    torch.cuda.synchronize()
    assert not torch.isnan(d).any() and not torch.isnan(s).any(), "unwritten (poisoned) output elements"
    ref_d, ref_s = references(a, b, splits)
    if splits is not None:  # what the caller does, as in DeepGEMM's test
        assert calc_diff(d.sum(0), ref_d.sum(0)) < 1e-8
    diff = calc_diff(d, ref_d)
    assert diff < 1e-8, f"d: calc_diff {diff:.3e} for m={m} n={n} k={k} splits={splits}"
    # fp32 accumulation of positive terms: a few ulp per row, far inside K * 2^-24
    rel = max_rel(s, ref_s)
    assert rel < 1e-5, f"sqr_sum: max relative error {rel:.3e} for m={m} n={n} k={k} splits={splits}"
    return a, b, d, s


@pytest.mark.parametrize("splits", [None, 16])
@pytest.mark.parametrize("n,k", NKS)
@pytest.mark.parametrize("m", MS)
def test_qualification_shapes(sm120_or_emulation, m, n, k, splits):
    run(m, n, k, splits)


@pytest.mark.parametrize(
    "m,n,k,splits",
    [
        (1, 1, 8, None),
        (7, 7, 72, None),
        (65, 8, 136, 3),
        (129, 32, 1000, None),
        (200, 17, 4104, 7),
        (64, 25, 640, 10),  # exactly one block per split
        (33, 24, 128, 5),  # splits 2..4 have no K blocks: zeros
        (4096, 32, 2048, None),
        (4100, 16, 1024, None),
        (130, 24, 28672, 1),
    ],
)
def test_tails_and_splits(sm120_or_emulation, m, n, k, splits):
    _, _, d, s = run(m, n, k, splits)
    if splits is not None:
        for idx, (lo, hi) in enumerate(split_ranges(k, splits)):
            if lo == hi:
                assert not d[idx].any() and not s[idx].any(), f"split {idx} has no K blocks: must be zeros"


def test_strided_operands_and_outputs(sm120_or_emulation):
    import deep_gemm_sm120 as dg
    from deep_gemm_sm120.testing import calc_diff

    m, n, k = 300, 24, 2048
    a = torch.randn(m, k + 64, device="cuda", dtype=torch.bfloat16)[:, :k]
    b = torch.randn(n, k + 32, device="cuda")[:, :k]
    d = poison_like(torch.empty(4, m, 32, device="cuda"))[:, :, :n]  # padded rows and splits
    s = poison_like(torch.empty(4, m, device="cuda"))
    dg.tf32_hc_prenorm_gemm(a, b, d, s, num_splits=4)
    ref_d, ref_s = references(a, b, 4)
    assert calc_diff(d, ref_d) < 1e-8 and max_rel(s, ref_s) < 1e-5
    d2 = poison_like(torch.empty(m, 40, device="cuda"))[:, :n]
    s2 = poison_like(torch.empty(m, device="cuda"))
    dg.tf32_hc_prenorm_gemm(a, b, d2, s2)
    ref_d, ref_s = references(a, b, None)
    assert calc_diff(d2, ref_d) < 1e-8 and max_rel(s2, ref_s) < 1e-5


def test_bitwise_deterministic(sm120_or_emulation):
    import deep_gemm_sm120 as dg

    for m, splits in ((13, None), (4096, None), (137, 16)):  # internal split + reduce, and DeepGEMM's splits
        a = torch.randn(m, 7168, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(24, 7168, device="cuda")
        lead = () if splits is None else (splits,)
        outs = []
        for _ in range(3):
            d, s = torch.empty(*lead, m, 24, device="cuda"), torch.empty(*lead, m, device="cuda")
            dg.tf32_hc_prenorm_gemm(a, b, d, s, num_splits=splits)
            outs.append((d, s))
        for d, s in outs[1:]:
            assert torch.equal(d, outs[0][0]) and torch.equal(s, outs[0][1])


def test_graph_replay_with_new_inputs(sm120_or_emulation):
    import deep_gemm_sm120 as dg
    from deep_gemm_sm120.testing import calc_diff

    m, n, k = 137, 24, 7680
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda")
    d, s = torch.empty(m, n, device="cuda"), torch.empty(m, device="cuda")
    dg.tf32_hc_prenorm_gemm(a, b, d, s)  # JIT and plan outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        dg.tf32_hc_prenorm_gemm(a, b, d, s)
    for seed in (1, 2):
        g = torch.Generator(device="cuda").manual_seed(seed)
        a.copy_(torch.randn(m, k, device="cuda", generator=g))
        b.copy_(torch.randn(n, k, device="cuda", generator=g))
        d.fill_(float("nan"))
        s.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        ref_d, ref_s = references(a, b, None)
        assert calc_diff(d, ref_d) < 1e-8 and max_rel(s, ref_s) < 1e-5


def test_empty_m_is_a_no_op(sm120_or_emulation):
    import deep_gemm_sm120 as dg

    a = torch.empty(0, 256, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(24, 256, device="cuda")
    d, s = torch.empty(0, 24, device="cuda"), torch.empty(0, device="cuda")
    dg.tf32_hc_prenorm_gemm(a, b, d, s)
