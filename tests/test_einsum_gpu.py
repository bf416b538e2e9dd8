"""BF16 einsum (bmk,bnk->mn; bhr,hdr->bhd; bhd,hdr->bhr) on a real GPU against fp64 references: the issue's
shapes, tails, strided (padded) operands, accumulation, determinism and graph replay with new shapes' data."""

from __future__ import annotations

import pytest
import torch
from gpu_helpers import poison_like, requires_cuda

pytestmark = [pytest.mark.cuda, pytest.mark.emulation, requires_cuda]

HRD = ((128, 512, 128), (8, 4096, 1024))  # (h, r, d) of DeepSeek V4's attention projections
BS = (4, 32, 4096)


def _padded(*shape, pad: int = 128, g=None) -> torch.Tensor:
    """A view of a buffer whose last dimension is `pad` longer: strided rows, as DeepGEMM's tests use."""
    full = torch.randn(*shape[:-1], shape[-1] + pad, device="cuda", dtype=torch.bfloat16, generator=g)
    return full[..., : shape[-1]]


def check_per_head(expr: str, bs: int, h: int, r: int, d: int, seed: int = 0, pad: int = 128):
    import deep_gemm_sm120 as dg
    from deep_gemm_sm120.testing import calc_diff

    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(bs, h, r if expr == "bhr,hdr->bhd" else d, device="cuda", dtype=torch.bfloat16, generator=g)
    y = _padded(h, d, r, pad=pad, g=g)
    out = poison_like(torch.empty(bs, h, d if expr == "bhr,hdr->bhd" else r, device="cuda", dtype=torch.bfloat16))
    dg.einsum(expr, x, y, out)
    ref = torch.einsum(expr, x.double(), y.double())
    torch.cuda.synchronize()
    assert not torch.isnan(out).any(), "unwritten (poisoned) output elements"
    diff = calc_diff(out, ref)
    assert diff < 1e-5, f"{expr} b={bs} h={h} r={r} d={d}: calc_diff {diff:.3e}"
    return x, y, out


@pytest.mark.parametrize("bs", BS)
@pytest.mark.parametrize("h,r,d", HRD)
@pytest.mark.parametrize("expr", ["bhr,hdr->bhd", "bhd,hdr->bhr"])
def test_per_head_products(sm120_or_emulation, expr, h, r, d, bs):
    check_per_head(expr, bs, h, r, d)


@pytest.mark.parametrize(
    "expr,bs,h,r,d",
    [
        ("bhr,hdr->bhd", 1, 3, 72, 100),  # odd N: pair stores stay aligned per head
        ("bhr,hdr->bhd", 129, 5, 136, 33),
        ("bhd,hdr->bhr", 1, 3, 64, 72),
        ("bhd,hdr->bhr", 129, 5, 200, 136),  # N tail inside a 64-wide MN-major box
        ("bhd,hdr->bhr", 7, 2, 8, 8),
    ],
)
def test_per_head_tails(sm120_or_emulation, expr, bs, h, r, d):
    check_per_head(expr, bs, h, r, d, pad=8)


def check_bmk(bs, m, n, k, dtype, accumulate, seed=0):
    import deep_gemm_sm120 as dg
    from deep_gemm_sm120.testing import calc_diff

    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(bs, m, k, device="cuda", dtype=torch.bfloat16, generator=g)
    b = torch.randn(bs, n, k, device="cuda", dtype=torch.bfloat16, generator=g)
    if accumulate:
        d = torch.randn(m, n, device="cuda", dtype=dtype, generator=g)
        ref = d.double() + torch.einsum("bmk,bnk->mn", a.double(), b.double())
        dg.einsum("bmk,bnk->mn", a, b, d, c=d)
    else:
        d = poison_like(torch.empty(m, n, device="cuda", dtype=dtype))
        ref = torch.einsum("bmk,bnk->mn", a.double(), b.double())
        dg.einsum("bmk,bnk->mn", a, b, d)
    torch.cuda.synchronize()
    assert not torch.isnan(d).any()
    diff = calc_diff(d, ref)
    assert diff < 1e-5, f"bmk,bnk->mn b={bs} m={m} n={n} k={k} {dtype} acc={accumulate}: calc_diff {diff:.3e}"
    return d


@pytest.mark.parametrize("bs", [4, 129, 4096])
@pytest.mark.parametrize("m,n,k", [(128, 384, 128), (256, 256, 256), (384, 128, 384)])
@pytest.mark.parametrize("dtype,accumulate", [(torch.float32, True), (torch.float32, False), (torch.bfloat16, False)])
def test_batch_reduction(sm120_or_emulation, bs, m, n, k, dtype, accumulate):
    check_bmk(bs, m, n, k, dtype, accumulate)


@pytest.mark.parametrize("bs,m,n,k", [(1, 1, 1, 8), (3, 24, 7, 72), (33, 130, 200, 136), (2, 4096, 24, 64)])
def test_batch_reduction_tails(sm120_or_emulation, bs, m, n, k):
    check_bmk(bs, m, n, k, torch.float32, True)
    check_bmk(bs, m, n, k, torch.bfloat16, False, seed=1)


def test_bitwise_deterministic(sm120_or_emulation):
    import deep_gemm_sm120 as dg

    a = torch.randn(4096, 128, 256, device="cuda", dtype=torch.bfloat16)[:8]
    b = torch.randn(8, 256, 256, device="cuda", dtype=torch.bfloat16)
    outs = []
    for _ in range(3):
        d = torch.zeros(128, 256, device="cuda")
        dg.einsum("bmk,bnk->mn", a, b, d, c=d)
        outs.append(d)
    x = torch.randn(32, 8, 4096, device="cuda", dtype=torch.bfloat16)
    y = torch.randn(8, 1024, 4096, device="cuda", dtype=torch.bfloat16)
    heads = [torch.empty(32, 8, 1024, device="cuda", dtype=torch.bfloat16) for _ in range(3)]
    for z in heads:
        dg.einsum("bhr,hdr->bhd", x, y, z)
    assert all(torch.equal(o, outs[0]) for o in outs) and all(torch.equal(z, heads[0]) for z in heads)


def test_graph_replay_with_new_inputs(sm120_or_emulation):
    import deep_gemm_sm120 as dg
    from deep_gemm_sm120.testing import calc_diff

    x = torch.randn(32, 128, 512, device="cuda", dtype=torch.bfloat16)
    y = torch.randn(128, 128, 512, device="cuda", dtype=torch.bfloat16)
    z = torch.empty(32, 128, 128, device="cuda", dtype=torch.bfloat16)
    a = torch.randn(129, 128, 128, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(129, 384, 128, device="cuda", dtype=torch.bfloat16)
    d = torch.empty(128, 384, device="cuda", dtype=torch.bfloat16)
    dg.einsum("bhr,hdr->bhd", x, y, z)
    dg.einsum("bmk,bnk->mn", a, b, d)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        dg.einsum("bhr,hdr->bhd", x, y, z)
        dg.einsum("bmk,bnk->mn", a, b, d)
    for _ in range(2):
        for t in (x, y, a, b):
            t.copy_(torch.randn_like(t))
        z.fill_(float("nan"))
        d.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert calc_diff(z, torch.einsum("bhr,hdr->bhd", x.double(), y.double())) < 1e-5
        assert calc_diff(d, torch.einsum("bmk,bnk->mn", a.double(), b.double())) < 1e-5
