"""fp8_einsum('bhr,hdr->bhd') on a real GPU: emulated block-scaled MMAs on sm_90a, exact against an fp64
reference of the dequantized operands; DeepGEMM's shapes and threshold against the unquantized product; tails,
fp32 output with c, padded weights, determinism, graph replay."""

from __future__ import annotations

import pytest
import torch
from gpu_helpers import poison_like, requires_cuda

from deep_gemm_sm120.selftest.workloads.block_scaled import einsum_operands

pytestmark = [pytest.mark.cuda, pytest.mark.emulation, requires_cuda]


def dequantized(xq, sx, yq, sy):
    r = xq.shape[-1]
    xd = xq.double() * sx.double().repeat_interleave(128, -1)[..., :r]
    yd = yq.double() * sy.double().repeat_interleave(128, -2)[:, : yq.shape[1]].repeat_interleave(128, -1)[..., :r]
    return xd, yd


def run(bs, h, r, d, out_dtype=torch.bfloat16, with_c=False, seed=0, pad=0):
    import deep_gemm_sm120 as dg
    from deep_gemm_sm120.testing import calc_diff

    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(bs, h, r, device="cuda", dtype=torch.bfloat16, generator=g)
    y = torch.randn(h, d, r, device="cuda", dtype=torch.bfloat16, generator=g)
    (xq, sx), (yq, sy) = einsum_operands(x, y)
    if pad:  # weights inside a wider buffer: strided rows
        buf = torch.zeros(h, d, r + pad, device="cuda", dtype=torch.float8_e4m3fn)
        buf[:, :, :r] = yq
        yq = buf[:, :, :r]
    c = torch.randn(bs, h, d, device="cuda", dtype=out_dtype, generator=g) if with_c else None
    z = poison_like(torch.empty(bs, h, d, device="cuda", dtype=out_dtype))
    dg.fp8_einsum("bhr,hdr->bhd", (xq, sx), (yq, sy), z, c=c)
    torch.cuda.synchronize()
    assert not torch.isnan(z).any(), "unwritten (poisoned) output elements"
    xd, yd = dequantized(xq, sx, yq, sy)
    ref = torch.einsum("bhr,hdr->bhd", xd, yd) + (c.double() if with_c else 0)
    exact = calc_diff(z, ref)
    assert exact < 1e-5, f"b={bs} h={h} r={r} d={d}: calc_diff {exact:.3e} against the dequantized operands"
    if not with_c:  # DeepGEMM's test: against the unquantized product
        loose = calc_diff(z, torch.einsum("bhr,hdr->bhd", x.double(), y.double()))
        assert loose < 1e-3, f"calc_diff {loose:.3e} against the unquantized product"
    return (xq, sx), (yq, sy), z


@pytest.mark.parametrize("bs", [4, 32, 4096])
@pytest.mark.parametrize("h,r,d", [(8, 4096, 1024), (128, 512, 128)])
def test_deepgemm_shapes(sm120_or_emulation, h, r, d, bs):
    run(bs, h, r, d)


@pytest.mark.parametrize(
    "bs,h,r,d,out_dtype,with_c,pad",
    [
        (1, 3, 128, 72, torch.bfloat16, False, 0),  # N tail, one K block
        (129, 5, 400, 200, torch.bfloat16, False, 16),  # K tail (400 = 3 x 128 + 16), N tail, padded weights
        (33, 2, 256, 128, torch.float32, True, 0),  # fp32 d with c
        (7, 4, 1024, 256, torch.float32, False, 128),
    ],
)
def test_tails_fp32_and_c(sm120_or_emulation, bs, h, r, d, out_dtype, with_c, pad):
    run(bs, h, r, d, out_dtype, with_c, pad=pad)


def test_deterministic_and_graph_replay(sm120_or_emulation):
    import deep_gemm_sm120 as dg

    a, b, z = run(32, 8, 1024, 512)
    z2 = torch.empty_like(z)
    dg.fp8_einsum("bhr,hdr->bhd", a, b, z2)
    assert torch.equal(z, z2)
    # graph replay needs packed scales (the float32 path checks powers of two with a device sync)
    (xq, sx), (yq, sy) = a, b
    r, h = xq.shape[-1], xq.shape[1]
    sxp = dg.transform_sf_into_required_layout(
        sx.transpose(0, 1), xq.shape[0], r, (1, 128, 128), num_groups=h, is_sfa=True
    )
    syp = dg.transform_sf_into_required_layout(sy, yq.shape[1], r, (1, 128, 128), num_groups=h)
    out = torch.empty_like(z)
    dg.fp8_einsum("bhr,hdr->bhd", (xq, sxp), (yq, syp), out)
    assert torch.equal(out, z)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        dg.fp8_einsum("bhr,hdr->bhd", (xq, sxp), (yq, syp), out)
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, z)
