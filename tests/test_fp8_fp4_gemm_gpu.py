"""Block-scaled FP8 / FP4 GEMMs on a GPU (SM120, or sm_90 through the atoms' emulation): fp64 references from
the dequantized inputs, adversarial scales, tails, split-K, C, packed scales, grouped layouts, graphs."""

from __future__ import annotations

import pytest
import torch
from gpu_helpers import contiguous_layout, poison_like, requires_cuda

from deep_gemm_sm120.selftest.workloads.block_scaled import SIDES, fp4_operands, fp8_operands, quantize_side

pytestmark = [pytest.mark.cuda, pytest.mark.emulation, requires_cuda]
TOL = {"mxfp8": 1e-3, "mxfp4": 2e-2, "nvfp4": 2e-2, "e4m3_e2m1": 1e-2, "e2m1_e4m3": 1e-2}  # observed: far lower


def _gen(seed: int) -> torch.Generator:
    return torch.Generator(device="cuda").manual_seed(seed)


def _check(d: torch.Tensor, ref: torch.Tensor, tol: float, what: str) -> float:
    from deep_gemm_sm120.testing import calc_diff

    torch.cuda.synchronize()
    assert not torch.isnan(d).any(), f"{what}: unwritten (poisoned) or NaN outputs"
    diff = calc_diff(d, ref)
    assert diff <= tol, f"{what}: calc_diff {diff:.3e} > {tol}"
    return diff


FP8_SHAPES = [
    (1, 2112, 7168),
    (129, 200, 1040),
    (64, 128, 128),
    (256, 576, 1536),
    (7, 4096, 512),
    (300, 1000, 2064),
    (2048, 2048, 2048),
    (16, 256, 7168),
]  # the last one splits K


@pytest.mark.parametrize("m,n,k", FP8_SHAPES)
@pytest.mark.parametrize("recipe", ["deepseek", "mxfp8"])
def test_fp8_gemm_nt(sm120_or_emulation, m, n, k, recipe):
    import deep_gemm_sm120 as dg

    gran = 128 if recipe == "deepseek" else 32
    a, b, ref = fp8_operands(m, n, k, _gen(m + n + k), gran, b_blocks=recipe == "deepseek")
    d = poison_like(torch.empty(m, n, device="cuda", dtype=torch.bfloat16))
    dg.fp8_gemm_nt(a, b, d)
    _check(d, ref, TOL["mxfp8"], f"fp8 {recipe} {(m, n, k)}")


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32])
def test_fp8_with_c_and_alias(sm120_or_emulation, out_dtype):
    import deep_gemm_sm120 as dg

    m, n, k = 200, 384, 896
    a, b, ref = fp8_operands(m, n, k, _gen(3))
    c = torch.randn(m, n, device="cuda", dtype=out_dtype) * ref.abs().mean().float()
    d = poison_like(torch.empty(m, n, device="cuda", dtype=out_dtype))
    dg.fp8_gemm_nt(a, b, d, c=c)
    _check(d, ref + c.double(), 1e-4 if out_dtype == torch.float32 else TOL["mxfp8"], "fp8 + c")
    c0 = c.clone()
    dg.fp8_gemm_nt(a, b, c, c=c)  # d aliases c
    _check(c, ref + c0.double(), 1e-4 if out_dtype == torch.float32 else TOL["mxfp8"], "fp8 c aliasing d")


def test_fp8_packed_scales_bitwise_and_deterministic(sm120_or_emulation):
    import deep_gemm_sm120 as dg

    m, n, k = 257, 640, 1536
    (a, sfa), (b, sfb), ref = fp8_operands(m, n, k, _gen(5))
    d1 = poison_like(torch.empty(m, n, device="cuda", dtype=torch.float32))
    dg.fp8_gemm_nt((a, sfa), (b, sfb), d1)
    recipe = (1, 128, 128)
    pa = dg.transform_sf_into_required_layout(sfa, m, k, recipe, is_sfa=True)
    pb = dg.transform_sf_into_required_layout(sfb, n, k, recipe)
    assert pa.dtype == torch.int32 and pa.stride(0) == 1
    d2 = poison_like(d1)
    dg.fp8_gemm_nt((a, pa), (b, pb), d2, recipe=recipe)
    d3 = poison_like(d1)
    dg.fp8_gemm_nt((a, pa), (b, pb), d3, recipe=recipe)
    torch.cuda.synchronize()
    assert torch.equal(d1, d2) and torch.equal(d2, d3), "packed / unpacked scales or repeated runs differ"
    _check(d1, ref, 1e-5, "fp8 fp32 out")


@pytest.mark.parametrize("kind", ["mxfp4", "nvfp4"])
@pytest.mark.parametrize(
    "m,n,k", [(1, 2112, 7168), (129, 200, 1056), (256, 512, 4096), (300, 1000, 640), (16, 256, 8192)]
)
def test_fp4_gemm_nt(sm120_or_emulation, kind, m, n, k):
    import deep_gemm_sm120 as dg

    a, b, alpha, ref = fp4_operands(m, n, k, _gen(m * 7 + k), kind)
    d = poison_like(torch.empty(m, n, device="cuda", dtype=torch.bfloat16))
    dg.fp8_fp4_gemm_nt(a, b, d, alpha=alpha)
    _check(d, ref, TOL[kind], f"{kind} {(m, n, k)}")


def test_fp4_e2m1fn_x2_dtype_and_packed_scales(sm120_or_emulation):
    import deep_gemm_sm120 as dg

    if not hasattr(torch, "float4_e2m1fn_x2"):
        pytest.skip("torch without float4_e2m1fn_x2")
    m, n, k = 128, 256, 512
    (a, sfa), (b, sfb), alpha, ref = fp4_operands(m, n, k, _gen(11), "nvfp4")
    pa = dg.transform_sf_into_required_layout(sfa, m, k, (1, 1, 16), is_sfa=True)
    pb = dg.transform_sf_into_required_layout(sfb, n, k, (1, 1, 16))
    d = poison_like(torch.empty(m, n, device="cuda", dtype=torch.float32))
    dg.fp8_fp4_gemm_nt(
        (a.view(torch.float4_e2m1fn_x2), pa), (b.view(torch.float4_e2m1fn_x2), pb), d, recipe=(1, 1, 16), alpha=alpha
    )
    _check(d, ref, 1e-5, "nvfp4 packed scales")


@pytest.mark.parametrize("kind", ["e4m3_e2m1", "e2m1_e4m3"])
@pytest.mark.parametrize("fp8_gran", [128, 32])
@pytest.mark.parametrize("m,n,k", [(1, 2112, 7168), (129, 200, 1056), (256, 512, 4096), (16, 256, 8192)])
def test_mixed_fp8_fp4_gemm_nt(sm120_or_emulation, kind, fp8_gran, m, n, k):
    """e4m3 x MXFP4 (FP8 activations, FP4 weights) and the reverse; the e4m3 side 1x128 or 1x32, for B also
    as 128x128 blocks."""
    import deep_gemm_sm120 as dg

    gen = _gen(m + n + k + fp8_gran)
    fa, fb = SIDES[kind]
    a, sfa, deq_a = quantize_side(fa, m, k, gen, fp8_gran if fa == "e4m3" else 32)
    b, sfb, deq_b = quantize_side(
        fb, n, k, gen, fp8_gran if fb == "e4m3" else 32, block_rows=128 if fb == "e4m3" and fp8_gran == 128 else 1
    )
    d = poison_like(torch.empty(m, n, device="cuda", dtype=torch.bfloat16))
    dg.fp8_fp4_gemm_nt((a, sfa), (b, sfb), d)
    _check(d, deq_a @ deq_b.T, TOL[kind], f"{kind} 1x{fp8_gran} {(m, n, k)}")


def test_mixed_packed_scales_and_fp32_out_with_c(sm120_or_emulation):
    import deep_gemm_sm120 as dg

    m, n, k = 200, 384, 1024
    gen = _gen(7)
    a, sfa, deq_a = quantize_side("e4m3", m, k, gen, 128)
    b, sfb, deq_b = quantize_side("mxfp4", n, k, gen)
    pa = dg.transform_sf_into_required_layout(sfa, m, k, (1, 1, 128), is_sfa=True)
    pb = dg.transform_sf_into_required_layout(sfb, n, k, (1, 1, 32))
    c = torch.randn(m, n, device="cuda", dtype=torch.float32)
    d = poison_like(c)
    dg.fp8_fp4_gemm_nt((a, pa), (b, pb), d, c=c, recipe=(1, 1, 128))
    _check(d, deq_a @ deq_b.T + c.double(), 1e-5, "e4m3 x mxfp4, packed scales, fp32 + c")


@pytest.mark.parametrize("kind", ["mxfp8", "mxfp4", "nvfp4", "e4m3_e2m1"])
def test_m_grouped_contiguous(sm120_or_emulation, kind):
    import deep_gemm_sm120 as dg

    sizes, n, k = [100, 0, 256, 7], 320, 1024
    lay, psum = contiguous_layout(sizes)
    m, groups = lay.numel(), len(sizes)
    gen = _gen(21)
    fa, fb = SIDES[kind]
    a, sfa, deq_a = quantize_side(fa, m, k, gen)
    parts = [quantize_side(fb, n, k, gen, block_rows=128 if fb == "e4m3" else 1) for _ in range(groups)]
    b, sfb = torch.stack([p[0] for p in parts]), torch.stack([p[1] for p in parts])
    deq_b = [p[2] for p in parts]
    alpha = 1.0
    for layout, psum_flag in ((lay, False), (psum, True)):
        d = torch.full((m, n), 777.0, device="cuda", dtype=torch.bfloat16)
        dg.m_grouped_fp8_fp4_gemm_nt_contiguous(
            (a, sfa), (b, sfb), d, layout, use_psum_layout=psum_flag, ensure_zero_padding=False, alpha=alpha
        )
        torch.cuda.synchronize()
        lay_cpu = lay.cpu()
        assert bool((d[(lay_cpu == -1).cuda()] == 777.0).all()), "padding rows were written"
        for gi in range(groups):
            sel = (lay_cpu == gi).cuda()
            if bool(sel.any()):
                _check(d[sel], deq_a[sel] @ deq_b[gi].T, TOL[kind], f"{kind} group {gi} psum={psum_flag}")


@pytest.mark.parametrize("kind", ["mxfp8", "mxfp4", "e4m3_e2m1"])
def test_m_grouped_masked_and_graph_replay(sm120_or_emulation, kind):
    import deep_gemm_sm120 as dg

    groups, m, n, k = 3, 96, 256, 768
    gen = _gen(31)
    fa, fb = SIDES[kind]
    a_list, sfa_list, b_list, sfb_list, deq_a, deq_b = [], [], [], [], [], []
    for _ in range(groups):
        a, sfa, da = quantize_side(fa, m, k, gen)
        b, sfb, db = quantize_side(fb, n, k, gen, block_rows=128 if fb == "e4m3" else 1)
        a_list.append(a), sfa_list.append(sfa), b_list.append(b), sfb_list.append(sfb)
        deq_a.append(da), deq_b.append(db)
    a, sfa, b, sfb = (torch.stack(x) for x in (a_list, sfa_list, b_list, sfb_list))
    recipe = {"mxfp8": (1, 128, 128), "mxfp4": (1, 1, 32), "e4m3_e2m1": (1, 1, 128)}[kind]
    pa = dg.transform_sf_into_required_layout(
        sfa, m, k, recipe if fa == "e4m3" else (1, 1, 32), num_groups=groups, is_sfa=True
    )
    pb = dg.transform_sf_into_required_layout(sfb, n, k, recipe if fb == "e4m3" else (1, 1, 32), num_groups=groups)
    masked = torch.tensor([5, 0, 96], dtype=torch.int32, device="cuda")
    d = torch.full((groups, m, n), 777.0, device="cuda", dtype=torch.bfloat16)
    dg.m_grouped_fp8_fp4_gemm_nt_masked((a, pa), (b, pb), d, masked, expected_m=48, recipe=recipe)
    torch.cuda.synchronize()

    def verify(out):
        for gi, rows in enumerate(masked.tolist()):
            assert bool((out[gi, rows:] == 777.0).all()), f"rows past masked_m[{gi}] were written"
            if rows:
                _check(out[gi, :rows], deq_a[gi][:rows] @ deq_b[gi].T, TOL[kind], f"{kind} masked group {gi}")

    verify(d)
    # graph capture with packed scales: no host sync, no allocation inside
    d2 = torch.full_like(d, 777.0)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(s), torch.cuda.graph(graph, stream=s):
        dg.m_grouped_fp8_fp4_gemm_nt_masked((a, pa), (b, pb), d2, masked, expected_m=48, recipe=recipe)
    torch.cuda.current_stream().wait_stream(s)
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(d2, d), "graph replay differs from the eager call"


def test_fp32_scales_that_are_not_powers_of_two(sm120_or_emulation):
    """They are never rounded: with float32 scales on both sides the exact FP32-scale kernel takes them
    (tests/test_fp32_scales_gpu.py has the rest); next to packed UE8M0 scales they are a ValueError."""
    import deep_gemm_sm120 as dg
    from deep_gemm_sm120.selftest.workloads.block_scaled import dequant_fp8

    (a, sfa), (b, sfb), _ = fp8_operands(64, 128, 256, _gen(41))
    d = poison_like(torch.empty(64, 128, device="cuda", dtype=torch.bfloat16))
    dg.fp8_gemm_nt((a, sfa * 1.5), (b, sfb), d)
    _check(d, dequant_fp8(a, sfa * 1.5, 1, 128) @ dequant_fp8(b, sfb, 128, 128).T, 1e-3, "exact kernel")
    packed = dg.transform_sf_into_required_layout(sfb, 128, 256, (1, 128, 128))
    with pytest.raises(ValueError, match="powers of two"):
        dg.fp8_gemm_nt((a, sfa * 1.5), (b, packed), d, recipe=(1, 128, 128))


def test_unpacked_scales_during_capture_raise_a_typed_error(sm120_or_emulation):
    """Unpacked scales are checked on the host, which capture forbids: a ValueError that says what to do, raised
    before any CUDA call (the capture is not left invalid), and packed scales capture fine."""
    import deep_gemm_sm120 as dg

    a, b, ref = fp8_operands(64, 256, 512, _gen(3), 128)
    d = poison_like(torch.empty(64, 256, device="cuda", dtype=torch.bfloat16))
    dg.fp8_gemm_nt(a, b, d)  # compile and warm outside the capture
    torch.cuda.synchronize()
    with pytest.raises(ValueError, match="transform_sf_into_required_layout"):
        with torch.cuda.graph(torch.cuda.CUDAGraph()):
            dg.fp8_gemm_nt(a, b, d)
    recipe = (1, 128, 128)
    sfa = dg.transform_sf_into_required_layout(a[1], 64, 512, recipe, is_sfa=True)
    sfb = dg.transform_sf_into_required_layout(b[1], 256, 512, recipe)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        dg.fp8_gemm_nt((a[0], sfa), (b[0], sfb), d, recipe=recipe)
    d.fill_(float("nan"))
    graph.replay()
    _check(d, ref, TOL["mxfp8"], "captured with packed scales")
