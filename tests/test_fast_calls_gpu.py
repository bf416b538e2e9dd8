"""Calls served in C on a GPU (launch.fast_calls): a warm call goes through the runtime's own launch (the table's
hit count grows) and writes bitwise what the checked call writes; a served call captured in a CUDA graph replays
with the captured addresses; two streams served alternately each get their own stream."""

from __future__ import annotations

import pytest
import torch
from gpu_helpers import requires_cuda

pytestmark = [pytest.mark.cuda, pytest.mark.emulation, requires_cuda]


def _hits() -> int:
    from deep_gemm_sm120 import launch

    return sum(f.hits for f in launch._FASTS)


def _fp8_operands(m: int, n: int, k: int):
    import deep_gemm_sm120 as dg

    x, sx = dg.per_token_cast_to_fp8(torch.randn(m, k, device="cuda"), use_ue8m0=True)
    w, sw = dg.per_block_cast_to_fp8(torch.randn(n, k, device="cuda"), use_ue8m0=True)
    sx = dg.transform_sf_into_required_layout(sx, m, k, (1, 128, 128), is_sfa=True)
    sw = dg.transform_sf_into_required_layout(sw, n, k, (1, 128, 128))
    return (x, sx), (w, sw)


def test_served_calls_write_what_checked_calls_write(sm120_or_emulation):
    import deep_gemm_sm120 as dg
    from deep_gemm_sm120 import _C, launch

    assert launch.bound().launch is _C.launch
    m, n, k = 96, 256, 512
    launch.forget_calls()
    for trial in range(3):
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        d_warm = torch.full((m, n), -7.0, device="cuda", dtype=torch.bfloat16)
        before = _hits()
        dg.bf16_gemm_nt(a, b, d_warm)
        assert _hits() == before + (trial > 0), "served from the second call of the signature"
        launch.forget_calls()
        d_cold = torch.full_like(d_warm, -7.0)
        dg.bf16_gemm_nt(a, b, d_cold)  # checked, and it records the signature again
        torch.cuda.synchronize()
        assert torch.equal(d_warm, d_cold)
    ref = a.float() @ b.float().T
    assert (d_cold.float() - ref).norm() / ref.norm() < 1e-2
    launch.forget_calls()
    for trial in range(3):
        xa, wb = _fp8_operands(m, n, k)
        d_warm = torch.full((m, n), -7.0, device="cuda", dtype=torch.bfloat16)
        before = _hits()
        dg.fp8_gemm_nt(xa, wb, d_warm)
        assert _hits() == before + (trial > 0)
        launch.forget_calls()
        d_cold = torch.full_like(d_warm, -7.0)
        dg.fp8_gemm_nt(xa, wb, d_cold)
        torch.cuda.synchronize()
        assert torch.equal(d_warm, d_cold)


def test_a_served_call_in_a_cuda_graph(sm120_or_emulation):
    import deep_gemm_sm120 as dg

    m, n, k = 64, 128, 256
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    d = torch.zeros(m, n, device="cuda", dtype=torch.bfloat16)
    dg.bf16_gemm_nt(a, b, d)  # checked: records the signature
    torch.cuda.synchronize()
    before = _hits()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        dg.bf16_gemm_nt(a, b, d)
    assert _hits() == before + 1, "the captured call was served"
    for _ in range(2):
        a.copy_(torch.randn_like(a))
        d.zero_()
        graph.replay()
        torch.cuda.synchronize()
        expect = torch.empty_like(d)
        dg.bf16_gemm_nt(a, b, expect)
        torch.cuda.synchronize()
        assert torch.equal(d, expect)


def test_served_calls_follow_the_current_stream(sm120_or_emulation, monkeypatch):
    """Each hit asks the launcher's stream getter for the current stream: a served call inside
    torch.cuda.stream(side) launches on `side`, and writes what the checked call writes."""
    import deep_gemm_sm120 as dg
    from deep_gemm_sm120 import launch

    m, n, k = 128, 256, 1024
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    d1 = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    dg.bf16_gemm_nt(a, b, d1)  # records
    real = launch.bound().stream
    asked = []
    monkeypatch.setattr(launch.BOUND, "stream", lambda i: asked.append(real(i)) or asked[-1])
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    d2 = torch.empty_like(d1)
    before = _hits()
    with torch.cuda.stream(side):
        dg.bf16_gemm_nt(a, b, d2)
    assert _hits() == before + 1 and asked == [side.cuda_stream]
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    assert torch.equal(d1, d2)


def test_served_calls_with_their_own_allocations(sm120_or_emulation):
    """A split-K GEMM (its workspace allocated per served call), the HC pre-norm with K splits, the gated delta
    rule's forward and the dense, sparse and paged sparse MQA logits (their outputs allocated and returned by the
    served call) write bitwise what the checked calls write, with new inputs on every trial."""
    import deep_gemm_sm120 as dg
    from deep_gemm_sm120 import checks, launch

    def twice(make, call) -> None:
        launch.forget_calls()
        for trial in range(3):
            args = make()
            before = _hits()
            warm = call(*args)
            assert _hits() == before + (trial > 0), "served from the second call of the signature"
            launch.forget_calls()
            cold = call(*args)  # checked, and recorded again
            torch.cuda.synchronize()
            for x, y in zip(warm, cold):
                assert x.shape == y.shape and x.stride() == y.stride() and torch.equal(x, y)

    def splitk():
        a = torch.randn(1, 7168, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(2112, 7168, device="cuda", dtype=torch.bfloat16)
        return a, b

    def run_splitk(a, b):
        d = torch.full((1, 2112), -7.0, device="cuda", dtype=torch.bfloat16)
        dg.bf16_gemm_nt(a, b, d)
        return (d,)

    twice(splitk, run_splitk)

    def hc():
        return torch.randn(64, 8192, device="cuda", dtype=torch.bfloat16), torch.randn(24, 8192, device="cuda")

    def run_hc(a, b):
        d, sq = torch.full((64, 24), -7.0, device="cuda"), torch.full((64,), -7.0, device="cuda")
        dg.tf32_hc_prenorm_gemm(a, b, d, sq)
        return d, sq

    twice(hc, run_hc)

    s, h, d, sk = 64, 32, 128, 512

    def mqa():
        q = torch.randn(s, h, d, device="cuda").to(torch.float8_e4m3fn)
        kv = torch.randn(sk, d, device="cuda").to(torch.float8_e4m3fn)
        kv_sf, w = torch.rand(sk, device="cuda") + 0.5, torch.randn(s, h, device="cuda")
        ks = torch.randint(0, sk // 2, (s,), device="cuda", dtype=torch.int32)
        ke = (ks + torch.randint(1, sk // 2, (s,), device="cuda", dtype=torch.int32)).clamp_(max=sk)
        return q, kv, kv_sf, w, ks, ke

    def gdr():
        b, t, h, hv = 2, 300, 2, 4
        q = torch.randn(b, t, h, 128, device="cuda", dtype=torch.bfloat16)
        k = torch.nn.functional.normalize(torch.randn(b, t, h, 128, device="cuda"), dim=-1).to(torch.bfloat16)
        v = torch.randn(b, t, hv, 128, device="cuda", dtype=torch.bfloat16)
        g = torch.nn.functional.logsigmoid(torch.randn(b, t, hv, device="cuda"))
        beta = torch.rand(b, t, hv, device="cuda", dtype=torch.bfloat16)
        return q, k, v, g, beta, torch.randn(b, hv, 128, 128, device="cuda")

    with torch.no_grad():
        twice(gdr, lambda *x: dg.chunk_gated_delta_rule(*x[:5], initial_state=x[5], output_final_state=True))

    # the sparse MQA logits (no index value is read per call), contiguous and paged: the paged form's scale words
    # sit at a fixed offset inside kv_cache, replayed as the new cache's address plus that offset
    block, num_max, page_kv, pages = 16, 8, 64, 64
    ske = torch.arange(sk - s + 1, sk + 1, dtype=torch.int32, device="cuda")
    sks = (ske - num_max * block).clamp_min(0) // block * block
    idx = torch.stack([torch.arange(int(e) // block - num_max, int(e) // block) for e in ske.tolist()])
    idx = idx.clamp_min(0).int().cuda()
    unit = 0x7F7F7F7F  # UE8M0 scale 1.0 in every byte
    smeta = dg.get_sparse_mqa_logits_metadata(sks, ske, sk, idx, torch.float8_e4m3fn, block)
    ptable = torch.randperm(pages, device="cuda").int()[:64].view(8, 8).repeat(s // 8, 1)
    plens = torch.full((s,), 8 * page_kv, dtype=torch.int32, device="cuda")
    req = torch.arange(s, dtype=torch.int32, device="cuda")
    pidx = torch.arange(num_max, dtype=torch.int32, device="cuda").repeat(s, 1)
    pmeta = dg.get_paged_sparse_mqa_logits_metadata(plens, ptable, req, page_kv, pidx, torch.float8_e4m3fn, block)

    def sparse():
        q = torch.randn(s, h, d, device="cuda").to(torch.float8_e4m3fn)
        qs = torch.full((s, h), unit, device="cuda", dtype=torch.int32)
        kv = torch.randn(sk, d, device="cuda").to(torch.float8_e4m3fn)
        w = torch.randn(s, h, device="cuda").to(torch.bfloat16)
        # a page: its page_kv value rows, then their scale words (all 1.0)
        cache = torch.full((pages, page_kv, 1, d + 4), 0x7F, dtype=torch.uint8, device="cuda")
        values = torch.randn(pages, page_kv * d, device="cuda").to(torch.float8_e4m3fn).view(torch.uint8)
        cache.view(pages, -1)[:, : page_kv * d] = values
        return q, qs, kv, w, cache

    sk_scales = torch.full((sk,), unit, device="cuda", dtype=torch.int32)
    twice(sparse, lambda q, qs, kv, w, cache: (
        dg.fp8_fp4_sparse_mqa_logits((q, qs), (kv, sk_scales), w, smeta, num_max, block),
    ))  # fmt: skip
    twice(sparse, lambda q, qs, kv, w, cache: (
        dg.fp8_fp4_paged_sparse_mqa_logits((q.unsqueeze(1), qs.unsqueeze(1)), cache, w, pmeta, num_max, block),
    ))  # fmt: skip

    saved = checks._INDEX_CHECKS.value
    checks._INDEX_CHECKS.value = False  # the ranges are not read per call: the call is served
    try:
        twice(mqa, lambda q, kv, kv_sf, w, ks, ke: (dg.fp8_mqa_logits(q, (kv, kv_sf), w, ks, ke),))

        def tables():  # the slot tables' inputs, new each trial (index checks off: ks / ke not read)
            i = torch.randint(-2, sk // block, (s, num_max), device="cuda", dtype=torch.int32)
            perm = torch.randperm(pages, device="cuda").int()[:64].view(8, 8).repeat(s // 8, 1)
            return i, perm

        twice(tables, lambda i, perm: (dg.get_sparse_mqa_logits_metadata(sks, ske, sk, i, torch.float8_e4m3fn, block),))
        twice(tables, lambda i, perm: (
            dg.get_paged_sparse_mqa_logits_metadata(plens, perm, req, page_kv, i, torch.float8_e4m3fn, block),
        ))  # fmt: skip
        twice(lambda: (torch.randint(1, 600, (8,), device="cuda", dtype=torch.int32),), lambda lens: (
            dg.get_paged_mqa_logits_metadata(lens, 64, 132),
        ))  # fmt: skip
    finally:
        checks._INDEX_CHECKS.value = saved
