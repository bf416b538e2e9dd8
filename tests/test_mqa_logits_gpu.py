"""Dense FP8 MQA logits on a real GPU (block-scaled MMA emulated on sm_90a): fp64 reference of the dequantized
inputs, exact -inf masks, every element written (poisoned buffers), compressed rows, determinism, graph replay."""

from __future__ import annotations

import pytest
import torch
from gpu_helpers import requires_cuda

from deep_gemm_sm120.selftest.workloads.mqa import dense_case

pytestmark = [pytest.mark.cuda, pytest.mark.emulation, requires_cuda]


def reference(q, kv, kv_sf, w, ks, ke):
    """fp64: sum_h w * relu(q . kv * sf), -inf outside [ks, ke)."""
    score = torch.einsum("shd,kd->shk", q.double(), kv.double()) * kv_sf.double()[None, None, :]
    logits = (score.relu() * w.double()[:, :, None]).sum(1)
    j = torch.arange(kv.shape[0], device="cuda")
    inside = (j[None, :] >= ks[:, None]) & (j[None, :] < ke[:, None])
    return logits.masked_fill(~inside, float("-inf")), inside


def check(s, sk, h, d, pattern, logits_dtype=torch.float32, mode="clean", seed=0):
    import deep_gemm_sm120 as dg
    from deep_gemm_sm120.testing import calc_diff

    q, kv, kv_sf, w, ks, ke = dense_case(s, sk, h, d, pattern, seed)
    ref, inside = reference(q, kv, kv_sf, w, ks, ke)
    max_k = int((ke - ks).max()) if mode == "compressed" else 0
    max_k = max(max_k, 1) if mode == "compressed" else 0
    torch.cuda.empty_cache()
    out = dg.fp8_fp4_mqa_logits(
        (q, None), (kv, kv_sf), w, ks, ke, clean_logits=mode == "clean", max_seqlen_k=max_k, logits_dtype=logits_dtype
    )
    torch.cuda.synchronize()
    tol = 1e-6 if logits_dtype == torch.float32 else 3e-5
    if mode == "compressed":
        assert out.shape == (s, max_k) and out.stride(0) * out.element_size() % 1024 == 0
        full = torch.full((s, sk), float("-inf"), device="cuda", dtype=torch.float64)
        for i in range(s):
            n = int(ke[i] - ks[i])
            full[i, int(ks[i]) : int(ke[i])] = out[i, :n].double()
        got = full
    else:
        assert out.shape == (s, sk) and out.stride(0) * out.element_size() % 1024 == 0
        got = out.double()
    if mode == "clean":
        assert torch.equal(torch.isinf(got) & (got < 0), ~inside), "-inf mask differs from the reference"
    else:
        got = got.masked_fill(~inside, float("-inf"))
    assert not torch.isnan(got).any()
    diff = calc_diff(got.masked_fill(~inside, 0), ref.masked_fill(~inside, 0))
    assert diff < tol, f"s={s} sk={sk} h={h} d={d} {pattern} {logits_dtype} {mode}: calc_diff {diff:.3e}"
    return out


@pytest.mark.parametrize("h,d", [(16, 128), (32, 128), (64, 128), (64, 64), (16, 64)])
@pytest.mark.parametrize("pattern", ["causal", "window", "full"])
def test_matches_dequantized_reference(sm120_or_emulation, h, d, pattern):
    check(300, 1000, h, d, pattern)


@pytest.mark.parametrize("mode", ["clean", "plain", "compressed"])
@pytest.mark.parametrize("logits_dtype", [torch.float32, torch.bfloat16])
def test_modes_and_dtypes(sm120_or_emulation, mode, logits_dtype):
    check(129, 777, 32, 128, "window", logits_dtype, mode)


def test_prefill_shape(sm120_or_emulation):
    check(2048, 8192, 64, 128, "causal")


def test_clean_writes_every_element_and_is_deterministic(sm120_or_emulation):
    import deep_gemm_sm120 as dg

    q, kv, kv_sf, w, ks, ke = dense_case(77, 513, 64, 128, "window")
    outs = [dg.fp8_mqa_logits(q, (kv, kv_sf), w, ks, ke) for _ in range(5)]
    for o in outs[1:]:
        assert torch.equal(o, outs[0])
    assert not torch.isnan(outs[0]).any()


def test_graph_replay_with_new_inputs(sm120_or_emulation):
    import deep_gemm_sm120 as dg
    from deep_gemm_sm120.testing import calc_diff

    q, kv, kv_sf, w, ks, ke = dense_case(64, 600, 32, 128, "window")
    dg.fp8_mqa_logits(q, (kv, kv_sf), w, ks, ke)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = dg.fp8_mqa_logits(q, (kv, kv_sf), w, ks, ke)
    q2, kv2, sf2, w2, ks2, ke2 = dense_case(64, 600, 32, 128, "causal", seed=3)
    for dst, src in ((q, q2), (kv, kv2), (kv_sf, sf2), (w, w2), (ks, ks2), (ke, ke2)):
        dst.copy_(src)
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    ref, inside = reference(q, kv, kv_sf, w, ks, ke)
    assert torch.equal(torch.isinf(out) & (out < 0), ~inside)
    assert calc_diff(out.double().masked_fill(~inside, 0), ref.masked_fill(~inside, 0)) < 1e-6


def test_out_of_range_ks_ke_raise(sm120_or_emulation):
    import deep_gemm_sm120 as dg

    q, kv, kv_sf, w, ks, ke = dense_case(8, 100, 64, 128, "full")
    ke[3] = 101
    with pytest.raises(ValueError, match="query 3"):
        dg.fp8_mqa_logits(q, (kv, kv_sf), w, ks, ke)


# ---------------------------------------------------------------- FP4: packed e2m1 with UE8M0 1x32 scales


def make_fp4_inputs(s, sk, h, pattern="causal", seed=0):
    """DeepGEMM's FP4 form: q [S, H, 64] and kv [SK, 64] packed e2m1, one int32 of four UE8M0 bytes per row."""
    from deep_gemm_sm120.quant import dequantize_fp4, pack_ue8m0_to_int, per_token_cast_to_fp4

    q8, kv8, _, w, ks, ke = dense_case(s, sk, h, 128, pattern, seed)
    g = torch.Generator(device="cuda").manual_seed(seed + 1)
    qf = torch.randn(s * h, 128, device="cuda", generator=g)
    kvf = torch.randn(sk, 128, device="cuda", generator=g) * torch.rand(sk, 1, device="cuda", generator=g) * 4
    qp, qsf, _ = per_token_cast_to_fp4(qf, "mxfp4")
    kp, ksf, _ = per_token_cast_to_fp4(kvf, "mxfp4")
    q_deq = dequantize_fp4(qp, qsf).view(s, h, 128)
    kv_deq = dequantize_fp4(kp, ksf)
    q_in = (qp.view(s, h, 64), pack_ue8m0_to_int(qsf).view(s, h))
    kv_in = (kp, pack_ue8m0_to_int(ksf).view(sk))
    return q_in, kv_in, q_deq, kv_deq, w, ks, ke


@pytest.mark.parametrize("h", [16, 32, 64])
@pytest.mark.parametrize("mode", ["clean", "compressed"])
def test_fp4_matches_dequantized_reference(sm120_or_emulation, h, mode):
    import deep_gemm_sm120 as dg
    from deep_gemm_sm120.testing import calc_diff

    s, sk = 133, 901
    q_in, kv_in, q_deq, kv_deq, w, ks, ke = make_fp4_inputs(s, sk, h, "window")
    ref, inside = reference(q_deq, kv_deq, torch.ones(sk, device="cuda"), w, ks, ke)
    max_k = max(int((ke - ks).max()), 1) if mode == "compressed" else 0
    out = dg.fp8_fp4_mqa_logits(q_in, kv_in, w, ks, ke, clean_logits=mode == "clean", max_seqlen_k=max_k)
    torch.cuda.synchronize()
    if mode == "compressed":
        got = torch.full((s, sk), float("-inf"), device="cuda", dtype=torch.float64)
        for i in range(s):
            got[i, int(ks[i]) : int(ke[i])] = out[i, : int(ke[i] - ks[i])].double()
    else:
        got = out.double()
        assert torch.equal(torch.isinf(got) & (got < 0), ~inside)
    diff = calc_diff(got.masked_fill(~inside, 0), ref.masked_fill(~inside, 0))
    assert diff < 1e-5, f"FP4 h={h} {mode}: calc_diff {diff:.3e}"
