"""BF16 NT GEMM on a real GPU: fp64 reference, poisoned outputs, tails, C aliasing, determinism, graphs."""

from __future__ import annotations

import pytest
import torch
from gpu_helpers import poison_like, requires_cuda

from deep_gemm_sm120.core.arith import round_up

pytestmark = [pytest.mark.cuda, pytest.mark.emulation, requires_cuda]

SHAPES = [  # (m, n, k): M in {1, 7, 64, 129, 4096}; N and K tails (not multiples of the block sizes)
    (1, 2112, 7168),
    (7, 576, 1536),
    (64, 128, 64),
    (129, 200, 136),
    (4096, 4096, 4096),
    (129, 7168, 520),
    (64, 24, 2048),
    (7, 7, 8),
    (300, 1000, 1000),
    (4096, 2112, 7168),
    (1, 1, 4096),
    (17, 4096, 1024),
    (32, 300, 520),
    (33, 2112, 1024),  # swap-AB boundaries: M <= 16, <= 32, > 32
]


def _run(m, n, k, out_dtype, with_c, alias=False, seed=0):
    import deep_gemm_sm120 as dg
    from deep_gemm_sm120.testing import calc_diff

    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=g)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=g)
    c = torch.randn(m, n, device="cuda", dtype=out_dtype, generator=g) if with_c else None
    ref = a.double() @ b.double().T + (c.double() if with_c else 0)
    if alias:
        d = c
        dg.bf16_gemm_nt(a, b, d, c=d)
    else:
        d = poison_like(torch.empty(m, n, device="cuda", dtype=out_dtype))
        dg.bf16_gemm_nt(a, b, d, c=c)
    torch.cuda.synchronize()
    assert not torch.isnan(d).any(), "unwritten (poisoned) or NaN output elements"
    diff = calc_diff(d, ref)
    assert diff <= 1e-5, f"calc_diff {diff:.3e} for {(m, n, k)} {out_dtype} c={with_c}"
    return a, b, c, d


@pytest.mark.parametrize("m,n,k", SHAPES)
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32])
def test_matches_fp64_reference(sm120_or_emulation, m, n, k, out_dtype):
    _run(m, n, k, out_dtype, with_c=False)


@pytest.mark.parametrize("m,n,k", [(129, 200, 136), (4096, 2112, 512), (1, 576, 7168), (20, 333, 264)])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32])
def test_with_c_and_aliasing(sm120_or_emulation, m, n, k, out_dtype):
    _run(m, n, k, out_dtype, with_c=True)
    _run(m, n, k, out_dtype, with_c=True, alias=True, seed=1)


def test_bitwise_deterministic(sm120_or_emulation):
    import deep_gemm_sm120 as dg

    a = torch.randn(1000, 4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(3000, 4096, device="cuda", dtype=torch.bfloat16)
    d1 = poison_like(torch.empty(1000, 3000, device="cuda", dtype=torch.float32))
    d2 = poison_like(d1)
    dg.bf16_gemm_nt(a, b, d1)
    dg.bf16_gemm_nt(a, b, d2)
    torch.cuda.synchronize()
    assert torch.equal(d1, d2)


def test_strided_rows_and_k_zero(sm120_or_emulation):
    import deep_gemm_sm120 as dg
    from deep_gemm_sm120.testing import calc_diff

    big_a = torch.randn(256, 1024, device="cuda", dtype=torch.bfloat16)
    a = big_a[:, :512]  # row stride 1024 elements, not contiguous
    b = torch.randn(384, 512, device="cuda", dtype=torch.bfloat16)
    d = poison_like(torch.empty(256, 384, device="cuda", dtype=torch.float32))
    dg.bf16_gemm_nt(a, b, d)
    torch.cuda.synchronize()
    assert calc_diff(d, a.double() @ b.double().T) <= 1e-5
    a0 = torch.empty(5, 0, device="cuda", dtype=torch.bfloat16)
    b0 = torch.empty(6, 0, device="cuda", dtype=torch.bfloat16)
    c = torch.randn(5, 6, device="cuda")
    d = poison_like(c)
    dg.bf16_gemm_nt(a0, b0, d, c=c)
    assert torch.equal(d, c)


@pytest.mark.parametrize("m,n,k", [(129, 200, 136), (300, 1000, 1000), (4096, 2112, 512), (64, 24, 2048)])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("with_c", [False, True])
def test_store_paths_agree_bitwise(sm120_or_emulation, m, n, k, out_dtype, with_c):
    """bf16 D leaves in 16-byte quad-transposed stores when rows are 16-byte aligned; otherwise D (and C) move
    in pairs (even row strides) or element by element (odd): the same accumulators, so every row stride must
    give the same bits."""
    import deep_gemm_sm120 as dg
    from deep_gemm_sm120.testing import calc_diff

    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    c_dense = torch.randn(m, n, device="cuda", dtype=out_dtype) if with_c else None
    ld = round_up(n, 8) + 8
    outs = []
    for stride in (ld, ld + 2, ld + 1):  # 16-byte, 4-byte, 2-byte aligned bf16 rows (fp32: 16, 8, 4 bytes)
        d = poison_like(torch.empty(m, stride, device="cuda", dtype=out_dtype))[:, :n]
        c = None
        if with_c:
            c = torch.empty(m, stride, device="cuda", dtype=out_dtype)[:, :n]
            c.copy_(c_dense)
        dg.bf16_gemm_nt(a, b, d, c=c)
        outs.append(d)
    torch.cuda.synchronize()
    for d in outs:
        assert not torch.isnan(d).any()
        assert torch.equal(d, outs[0])
    ref = a.double() @ b.double().T + (c_dense.double() if with_c else 0)
    assert calc_diff(outs[0], ref) <= 1e-5


def test_cuda_graph_capture_and_replay(sm120_or_emulation, monkeypatch):
    import deep_gemm_sm120 as dg
    from deep_gemm_sm120.testing import calc_diff

    m, n, k = 64, 2112, 7168
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    dg.bf16_gemm_nt(a, b, d)  # compile + load outside capture
    torch.cuda.synchronize()
    monkeypatch.setenv("DG_SM120_JIT_STRICT", "1")  # a cache miss during capture must raise, not compile
    graph = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s), torch.cuda.graph(graph, stream=s):
        dg.bf16_gemm_nt(a, b, d)
    for seed in range(3):
        torch.manual_seed(seed)
        a.copy_(torch.randn_like(a))
        b.copy_(torch.randn_like(b))
        d.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert not torch.isnan(d).any()
        assert calc_diff(d, a.double() @ b.double().T) <= 1e-5


def test_unsupported_arch_raises_without_emulation(monkeypatch):
    import deep_gemm_sm120 as dg

    if torch.cuda.get_device_capability()[0] == 12:
        pytest.skip("this device is SM120: the kernels are supported natively")
    monkeypatch.delenv("DG_SM120_EMULATE", raising=False)
    a = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
    d = torch.empty(64, 64, device="cuda", dtype=torch.bfloat16)
    cap = torch.cuda.get_device_capability()
    with pytest.raises(NotImplementedError, match=f"sm_{cap[0]}{cap[1]}"):
        dg.bf16_gemm_nt(a, a, d)


def test_runtime_reports_no_local_memory(sm120_or_emulation):
    import deep_gemm_sm120 as dg
    from deep_gemm_sm120 import jit, runtime
    from deep_gemm_sm120.arch import target_for_device
    from deep_gemm_sm120.families.bf16_gemm.kernel import specs as bf16_specs

    spec = bf16_specs()[0]
    dev = torch.cuda.current_device()
    k = jit.get_kernel(spec, target_for_device(dev), dev)
    assert runtime.kernel_attribute(k.handle, "local_bytes") == 0
    assert runtime.kernel_attribute(k.handle, "max_threads") >= spec.config.threads
    del dg


def _operands(layout, m, n, k, g):
    a = torch.randn(*((k, m) if layout[0] == "t" else (m, k)), device="cuda", dtype=torch.bfloat16, generator=g)
    b = torch.randn(*((k, n) if layout[1] == "n" else (n, k)), device="cuda", dtype=torch.bfloat16, generator=g)
    a_ref = a.double().T if layout[0] == "t" else a.double()
    b_ref = b.double() if layout[1] == "n" else b.double().T
    return a, b, a_ref @ b_ref


@pytest.mark.parametrize("layout", ["nn", "tn", "tt", "nt"])
@pytest.mark.parametrize(
    "m,n,k", [(1, 2112, 7168), (24, 576, 1536), (136, 200, 520), (4096, 4096, 1024), (640, 1032, 72)]
)
def test_layouts_match_fp64_reference(sm120_or_emulation, layout, m, n, k):
    import deep_gemm_sm120 as dg
    from deep_gemm_sm120.testing import calc_diff

    if layout[0] == "t" and m % 8:
        m = m + (-m) % 8  # A [K, M] rows must be 16-byte multiples
    g = torch.Generator(device="cuda").manual_seed(m * 7 + n)
    a, b, ref = _operands(layout, m, n, k, g)
    fn = getattr(dg, f"bf16_gemm_{layout}")
    for out_dtype in (torch.bfloat16, torch.float32):
        d = poison_like(torch.empty(m, n, device="cuda", dtype=out_dtype))
        fn(a, b, d)
        c = torch.randn(m, n, device="cuda", dtype=out_dtype, generator=g)
        d2 = c.clone()
        fn(a, b, d2, c=d2)  # C aliasing D
        torch.cuda.synchronize()
        assert not torch.isnan(d).any()
        assert calc_diff(d, ref) <= 1e-5, (layout, m, n, k, out_dtype)
        assert calc_diff(d2, ref + c.double()) <= 1e-5
        d3 = poison_like(d)
        fn(a, b, d3)
        torch.cuda.synchronize()
        assert torch.equal(d, d3)


@pytest.mark.parametrize("m,n,k", [(1, 2112, 7168), (64, 2112, 7168), (20, 576, 16384), (48, 130, 4104)])
def test_split_k_is_exact_and_deterministic(sm120_or_emulation, m, n, k):
    import deep_gemm_sm120 as dg
    from deep_gemm_sm120.families.bf16_gemm.plan import dense_plan, m_bucket
    from deep_gemm_sm120.testing import calc_diff

    assert dense_plan(m_bucket(m), n, k, torch.cuda.get_device_properties(0).multi_processor_count).splits > 1
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    ref = a.double() @ b.double().T
    for out in (torch.bfloat16, torch.float32):
        c = torch.randn(m, n, device="cuda", dtype=out)
        d1, d2 = poison_like(c), poison_like(c)
        dg.bf16_gemm_nt(a, b, d1, c=c)
        dg.bf16_gemm_nt(a, b, d2, c=c)
        torch.cuda.synchronize()
        assert not torch.isnan(d1).any() and torch.equal(d1, d2)
        assert calc_diff(d1, ref + c.double()) <= 1e-5


@pytest.mark.parametrize("m,n", [(1, 2112), (64, 2048), (300, 1024)])  # swap-AB + split-K, split-K, plain
def test_pdl_chain_matches_serialized_launches(sm120_or_emulation, m, n):
    """Dependent back-to-back calls (each reads the previous output, split-K ones add a reduce): with PDL the
    next kernel starts early and must wait in griddepcontrol. Bitwise equal to PDL off, eager and in a graph."""
    import deep_gemm_sm120 as dg
    from deep_gemm_sm120.testing import calc_diff

    k, depth = n, 6
    ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k**0.5 for _ in range(depth)]
    x0 = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)

    def chain(outs):
        for i in range(depth):
            dg.bf16_gemm_nt(x0 if i == 0 else outs[i - 1], ws[i], outs[i])

    results = {}
    for enabled in (False, True):
        dg.set_pdl(enabled)
        try:
            outs = [poison_like(torch.empty(m, n, device="cuda", dtype=torch.bfloat16)) for _ in range(depth)]
            chain(outs)
            torch.cuda.synchronize()
            results[enabled] = outs[-1].clone()
            graph_outs = [poison_like(o) for o in outs]
            chain(graph_outs)  # warm
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                chain(graph_outs)
            for o in graph_outs:
                o.fill_(float("nan"))
            g.replay()
            torch.cuda.synchronize()
            assert torch.equal(graph_outs[-1], results[enabled])
        finally:
            dg.set_pdl(True)
    assert torch.equal(results[True], results[False])
    ref = x0.double()
    for w in ws:
        ref = (ref @ w.double().T).bfloat16().double()
    assert calc_diff(results[True], ref) < 1e-4


def test_loader_rejects_a_parameter_list_that_is_not_the_kernels(sm120_or_emulation):
    """cuFuncGetParamInfo at load time: a cubin loaded with another family's parameter list is refused."""
    from deep_gemm_sm120 import jit, runtime
    from deep_gemm_sm120.arch import target_for_device
    from deep_gemm_sm120.families.bf16_gemm.kernel import PARAMS as BF16_PARAMS
    from deep_gemm_sm120.services.split_k_reduce import SplitKReduceSpec

    dev = torch.cuda.current_device()
    cubin, _ = jit.cubin_for(SplitKReduceSpec("bf16", False), target_for_device(dev))
    with pytest.raises(RuntimeError, match="parameter"):
        runtime.load_kernel(cubin, 0, dev, BF16_PARAMS)
    assert runtime.load_kernel(cubin, 0, dev, SplitKReduceSpec.FAMILY.params) >= 0
