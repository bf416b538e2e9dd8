"""Exact FP32 block scales (issue 40) on a GPU (SM120, or sm_90 through the emulated unit-scale QMMA.SF): the
fp8_fp32 kernel against fp64 of the dequantized operands (scales never rounded), at DeepSeek V3 and Qwen3.5
shapes, grouped masked / contiguous with empty and partial groups, split-K, C, pre-transformed scales under
a CUDA graph, and the accuracy gain over the UE8M0-ceil recipe on the same data."""

from __future__ import annotations

import pytest
import torch
from gpu_helpers import contiguous_layout, poison_like, requires_cuda
from test_fp8_fp4_gemm_gpu import _check as fp8_check

from deep_gemm_sm120.selftest.workloads.block_scaled import dequant_fp8, einsum_operands, fp8_operands_fp32

pytestmark = [pytest.mark.cuda, pytest.mark.emulation, requires_cuda]
TOL = 1e-3  # the FP8 tests' bound (observed far lower: output rounding)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator(device="cuda").manual_seed(seed)


def _check(d: torch.Tensor, ref: torch.Tensor, what: str, tol: float = TOL) -> float:
    """The FP8 tests' check (NaN-free, calc_diff within tol), with the tolerance last."""
    return fp8_check(d, ref, tol, what)


SHAPES = [
    (1, 2112, 7168),  # DeepSeek V3 decode (split-K)
    (7, 576, 7168),
    (129, 200, 1040),  # tails everywhere
    (256, 4096, 2048),  # Qwen3.5-style projections
    (64, 128, 128),
    (2048, 2048, 2048),
]


@pytest.mark.parametrize("m,n,k", SHAPES)
@pytest.mark.parametrize("flag", [False, True])
def test_fp8_gemm_nt_fp32_scales(sm120_or_emulation, m, n, k, flag):
    import deep_gemm_sm120 as dg
    from deep_gemm_sm120 import quant

    a, b, ref = fp8_operands_fp32(m, n, k, _gen(m + n + k))
    assert not bool(quant.is_ue8m0(a[1]).all())  # the scales are not UE8M0-exact
    d = poison_like(torch.empty(m, n, device="cuda", dtype=torch.bfloat16))
    dg.fp8_gemm_nt(a, b, d, disable_ue8m0_cast=flag)
    _check(d, ref, f"fp32 scales {(m, n, k)} disable_ue8m0_cast={flag}")


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32])
def test_fp32_scales_with_c_and_per_row_weights(sm120_or_emulation, out_dtype):
    import deep_gemm_sm120 as dg

    m, n, k = 200, 384, 896
    a, b, ref = fp8_operands_fp32(m, n, k, _gen(3), b_blocks=False)  # per-channel weight scales
    c = torch.randn(m, n, device="cuda", dtype=out_dtype) * ref.abs().mean().float()
    d = poison_like(torch.empty(m, n, device="cuda", dtype=out_dtype))
    dg.fp8_gemm_nt(a, b, d, c=c, disable_ue8m0_cast=True)
    _check(d, ref + c.double(), f"fp32 scales + c ({out_dtype})")
    dg.fp8_gemm_nt(a, b, c, c=c, disable_ue8m0_cast=True)  # C aliasing D
    _check(c, d.double(), f"fp32 scales, c aliasing d ({out_dtype})", 2e-3)


def test_exact_scales_beat_ue8m0_on_the_same_data(sm120_or_emulation):
    """What issue 40 is for: the same activations and weights quantized with FP32 block scales (exact path)
    and with UE8M0-ceil scales (today's SM120 recipe), each against the unquantized fp64 product."""
    import deep_gemm_sm120 as dg
    from deep_gemm_sm120 import quant
    from deep_gemm_sm120.testing import calc_diff

    m, n, k = 512, 1024, 2048
    g = _gen(7)
    x = torch.randn(m, k, device="cuda", generator=g)
    w = torch.randn(n, k, device="cuda", generator=g) * 0.05
    exact_ref = x.double() @ w.double().T
    errs = {}
    for ue8m0 in (False, True):
        xa, sa = quant._cast_fp8(x, 1, 128, ue8m0)
        wb, sb = quant._cast_fp8(w, 128, 128, ue8m0)
        d = poison_like(torch.empty(m, n, device="cuda", dtype=torch.float32))
        dg.fp8_gemm_nt((xa, sa), (wb, sb), d)
        torch.cuda.synchronize()
        _check(d, dequant_fp8(xa, sa, 1, 128) @ dequant_fp8(wb, sb, 128, 128).T, f"ue8m0={ue8m0}")
        errs["ue8m0" if ue8m0 else "fp32"] = calc_diff(d, exact_ref)
    print(f"calc_diff vs the unquantized product: FP32 scales {errs['fp32']:.3e}, UE8M0-ceil {errs['ue8m0']:.3e}")
    assert errs["fp32"] < errs["ue8m0"], errs


def test_masked_fp32_scales(sm120_or_emulation):
    import deep_gemm_sm120 as dg

    g, m, n, k = 4, 128, 320, 1024
    parts = [fp8_operands_fp32(m, n, k, _gen(10 + i)) for i in range(g)]
    a = torch.stack([p[0][0] for p in parts])
    sfa = torch.stack([p[0][1] for p in parts])
    b = torch.stack([p[1][0] for p in parts])
    sfb = torch.stack([p[1][1] for p in parts])
    masked = torch.tensor([0, 1, 77, 128], dtype=torch.int32, device="cuda")
    d = poison_like(torch.empty(g, m, n, device="cuda", dtype=torch.bfloat16))
    keep = d.clone()
    dg.m_grouped_fp8_gemm_nt_masked((a, sfa), (b, sfb), d, masked, 64)
    torch.cuda.synchronize()
    for i, rows in enumerate(masked.tolist()):
        if rows:
            _check(d[i, :rows], parts[i][2][:rows], f"masked group {i} ({rows} rows)")
        assert torch.equal(d[i, rows:].isnan(), keep[i, rows:].isnan()), f"group {i}: rows past masked_m written"


@pytest.mark.parametrize("psum", [False, True])
def test_contiguous_fp32_scales(sm120_or_emulation, psum):
    import deep_gemm_sm120 as dg

    sizes, n, k = [100, 0, 257, 1], 256, 768
    per_row, ends = contiguous_layout(sizes)
    rows = per_row.numel()
    (a, sfa), _, _ = fp8_operands_fp32(rows, 8, k, _gen(20))
    parts = [fp8_operands_fp32(8, n, k, _gen(21 + i)) for i in range(len(sizes))]
    b = torch.stack([p[1][0] for p in parts])
    sfb = torch.stack([p[1][1] for p in parts])
    d = torch.zeros(rows, n, device="cuda", dtype=torch.bfloat16)
    dg.m_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, ends if psum else per_row, use_psum_layout=psum)
    da = dequant_fp8(a, sfa, 1, 128)
    row = 0
    for gi, s in enumerate(sizes):
        if s:
            ref = da[row : row + s] @ dequant_fp8(b[gi], sfb[gi], 128, 128).T
            _check(d[row : row + s], ref, f"contiguous group {gi}")
        row += s + (-s) % 128


def test_pre_transformed_scales_in_a_cuda_graph(sm120_or_emulation):
    """vLLM's hot path: activation scales column-major (TMA-aligned), weights transformed once with
    disable_ue8m0_cast=True; no value is read, so the call captures and replays with fresh inputs."""
    import deep_gemm_sm120 as dg

    m, n, k = 96, 512, 1536
    (a, sfa), (b, sfb), _ = fp8_operands_fp32(m, n, k, _gen(30))
    sfa_mn = dg.transform_sf_into_required_layout(sfa, m, k, (1, 128), is_sfa=True, disable_ue8m0_cast=True)
    sfb_mn = dg.transform_sf_into_required_layout(sfb, n, k, (128, 128), disable_ue8m0_cast=True)
    d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    dg.fp8_gemm_nt((a, sfa_mn), (b, sfb_mn), d, disable_ue8m0_cast=True)  # warm (JIT) outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        dg.fp8_gemm_nt((a, sfa_mn), (b, sfb_mn), d, disable_ue8m0_cast=True)
    (a2, sfa2), _, _ = fp8_operands_fp32(m, n, k, _gen(31))
    a.copy_(a2)
    sfa_mn.copy_(sfa2)
    d.fill_(float("nan"))
    graph.replay()
    _check(d, dequant_fp8(a2, sfa2, 1, 128) @ dequant_fp8(b, sfb, 128, 128).T, "graph replay, fresh inputs")


@pytest.mark.parametrize("bs,h,r,d,with_c", [(33, 4, 1024, 256, False), (7, 2, 640, 200, True)])
def test_fp8_einsum_fp32_scales(sm120_or_emulation, bs, h, r, d, with_c):
    import deep_gemm_sm120 as dg

    g = _gen(40 + bs)
    x = torch.randn(bs, h, r, device="cuda", generator=g)
    y = torch.randn(h, d, r, device="cuda", generator=g)
    (xq, sx), (yq, sy) = einsum_operands(x, y, ue8m0=False)
    c = torch.randn(bs, h, d, device="cuda", dtype=torch.float32, generator=g) if with_c else None
    z = poison_like(torch.empty(bs, h, d, device="cuda", dtype=torch.float32))
    dg.fp8_einsum("bhr,hdr->bhd", (xq, sx), (yq, sy), z, c=c)
    xd = xq.double() * sx.double().repeat_interleave(128, -1)[..., :r]
    yd = yq.double() * sy.double().repeat_interleave(128, -2)[:, :d].repeat_interleave(128, -1)[..., :r]
    ref = torch.einsum("bhr,hdr->bhd", xd, yd) + (c.double() if with_c else 0)
    _check(z, ref, f"fp8_einsum FP32 scales b={bs} h={h} r={r} d={d}", 1e-5)
