"""The GEMM names through the `deep_gemm` entry point on a GPU, called the way serving stacks call them
(DeepGEMM's casts, argument orders and keywords), against fp64 references."""

from __future__ import annotations

import pytest
import torch
from gpu_helpers import contiguous_layout, poison_like, requires_cuda

pytestmark = [pytest.mark.cuda, pytest.mark.emulation, requires_cuda]


@pytest.fixture()
def deep_gemm(sm120_or_emulation):
    import sys

    import deep_gemm_sm120.compat as compat

    sys.modules.pop("deep_gemm", None)
    finder = compat.install(force=True)  # ours, even if the machine has a real DeepGEMM
    import deep_gemm

    assert deep_gemm is compat
    yield deep_gemm
    sys.modules.pop("deep_gemm", None)
    sys.meta_path.remove(finder)


def _dequant(q: torch.Tensor, sf: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    s = sf.double().repeat_interleave(rows, 0).repeat_interleave(cols, 1)[: q.shape[0], : q.shape[1]]
    return q.double() * s


def test_fp8_gemm_nt_as_vllm_calls_it(deep_gemm):
    m, n, k = 200, 512, 1024
    x, w = torch.randn(m, k, device="cuda"), torch.randn(n, k, device="cuda")
    xq, xs = deep_gemm.per_token_cast_to_fp8(x, use_ue8m0=True)
    wq, ws = deep_gemm.per_block_cast_to_fp8(w, use_ue8m0=True)
    ref = _dequant(xq, xs, 1, 128) @ _dequant(wq, ws, 128, 128).T
    for kw in (
        {},
        {"recipe": (1, 128, 128)},
        {"disable_ue8m0_cast": True, "compiled_dims": "nk"},
        {"recipe_a": (1, 128), "recipe_b": (128, 128), "alpha": None},
    ):
        d = poison_like(torch.empty(m, n, device="cuda", dtype=torch.bfloat16))
        deep_gemm.fp8_gemm_nt((xq, xs), (wq, ws), d, None, **kw)
        torch.cuda.synchronize()
        assert deep_gemm.calc_diff(d, ref) < 1e-5, kw
    odd = xs * 1.5  # not powers of two: never rounded; the exact FP32-scale kernel, with or without the flag
    ref_odd = _dequant(xq, odd, 1, 128) @ _dequant(wq, ws, 128, 128).T
    for flag in (True, False):
        d = poison_like(torch.empty(m, n, device="cuda", dtype=torch.bfloat16))
        deep_gemm.fp8_gemm_nt((xq, odd), (wq, ws), d, disable_ue8m0_cast=flag)
        torch.cuda.synchronize()
        assert deep_gemm.calc_diff(d, ref_odd) < 1e-5, flag


def test_bf16_names(deep_gemm):
    a = torch.randn(64, 256, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(96, 256, device="cuda", dtype=torch.bfloat16)
    d = poison_like(torch.empty(64, 96, device="cuda", dtype=torch.float32))
    deep_gemm.bf16_gemm_nt(a, b, d, None, "nk")
    ref = a.double() @ b.double().T
    assert deep_gemm.calc_diff(d, ref) < 1e-6
    dc = torch.empty_like(d)
    deep_gemm.cublaslt_gemm_nt(a, b, dc)
    assert deep_gemm.calc_diff(dc, ref) < 1e-6


def test_m_grouped_psum_zero_padding_and_masked(deep_gemm):
    g, n, k = 3, 128, 256
    sizes = [100, 0, 150]
    _, ends = contiguous_layout(sizes)
    m = 128 * 3
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(g, n, k, device="cuda", dtype=torch.bfloat16)
    d = poison_like(torch.empty(m, n, device="cuda", dtype=torch.bfloat16))
    deep_gemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, ends, "nk", True)  # use_psum_layout, ensure_zero_padding
    torch.cuda.synchronize()
    rows = [(0, 100, 0), (128, 278, 2)]
    for lo, hi, grp in rows:
        ref = a[lo:hi].double() @ b[grp].double().T
        assert deep_gemm.calc_diff(d[lo:hi], ref) < 1e-5
    pad = torch.ones(m, dtype=torch.bool, device="cuda")
    for lo, hi, _ in rows:
        pad[lo:hi] = False
    assert d[pad].eq(0).all(), "ensure_zero_padding: padding rows are zero"
    am = torch.randn(g, 64, k, device="cuda", dtype=torch.bfloat16)
    dm = poison_like(torch.empty(g, 64, n, device="cuda", dtype=torch.bfloat16))
    masked = torch.tensor([64, 10, 0], dtype=torch.int32, device="cuda")
    deep_gemm.bf16_m_grouped_gemm_nt_masked(am, b, dm, masked, 32, "nk")
    torch.cuda.synchronize()
    assert deep_gemm.calc_diff(dm[1, :10], am[1, :10].double() @ b[1].double().T) < 1e-5


def test_k_grouped_in_deepgemm_argument_order(deep_gemm):
    ks, m, n = [128, 0, 256], 64, 96
    a = torch.randn(sum(ks), m, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(sum(ks), n, device="cuda", dtype=torch.bfloat16)
    c = torch.randn(len(ks), m, n, device="cuda")
    d = poison_like(c)
    deep_gemm.k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks, torch.tensor(ks, dtype=torch.int32, device="cuda"), c)
    torch.cuda.synchronize()
    off = 0
    for g, kg in enumerate(ks):
        ref = c[g].double() + a[off : off + kg].double().T @ b[off : off + kg].double()
        assert deep_gemm.calc_diff(d[g], ref) < 1e-6
        off += kg


def test_paged_sparse_indexer_as_a_serving_stack_calls_it(deep_gemm):
    """DSv4.1's decode indexer through `deep_gemm`: MXFP4 q [rows, 1, H, 64] int8, a [pages, page, 1, 68] cache,
    8-token blocks, per-row block tables built from request tables and request ids."""
    from test_sparse_mqa_logits_gpu import assert_matches

    from deep_gemm_sm120.selftest.workloads.mqa import sparse_paged_case
    from deep_gemm_sm120.selftest.workloads.sparse_reference import paged_sparse_mqa_logits

    c = sparse_paged_case(12, 64, 128, "mxfp4", 8, num_max=16, page_kv=64, seed=3)
    q = (c["q"][0].view(torch.int8), c["q"][1])
    requests = torch.arange(12, dtype=torch.int32, device="cuda")
    meta = deep_gemm.get_paged_sparse_mqa_logits_metadata(c["lens"], c["table"], requests, 64, c["idx"], q[0].dtype, 8)
    out = deep_gemm.fp8_fp4_paged_sparse_mqa_logits(q, c["cache"], c["w"], meta, 16, 8)
    torch.cuda.synchronize()
    ref, valid = paged_sparse_mqa_logits(c["q_deq"], c["pages_deq"], c["w"].float(), c["lens"], c["table"], c["idx"], 8)
    assert_matches(out, ref, valid, "deep_gemm paged sparse")


def test_epilogue_alpha_and_fp8_output_refusal(deep_gemm):
    m, n, k = 64, 256, 512
    x, w = torch.randn(m, k, device="cuda"), torch.randn(n, k, device="cuda")
    (xq, xs), (wq, ws) = (
        deep_gemm.per_token_cast_to_fp8(x, use_ue8m0=True),
        deep_gemm.per_block_cast_to_fp8(w, use_ue8m0=True),
    )
    ref = _dequant(xq, xs, 1, 128) @ _dequant(wq, ws, 128, 128).T
    d = poison_like(torch.empty(m, n, device="cuda", dtype=torch.bfloat16))
    deep_gemm.fp8_gemm_nt((xq, xs), (wq, ws), d, epilogue=deep_gemm.epilogue.Alpha(0.5))
    torch.cuda.synchronize()
    assert deep_gemm.calc_diff(d, 0.5 * ref) < 1e-5
    with pytest.raises(NotImplementedError, match="FP8Quantization"):
        deep_gemm.fp8_gemm_nt((xq, xs), (wq, ws), d, epilogue=deep_gemm.epilogue.FP8Quantization(xs))


def test_nvfp4_through_the_ue4m3_layout_helper(deep_gemm):
    """sgl-deep-gemm's NVFP4 weight path: per_token_cast_to_nvfp4 -> transform_ue4m3_sf_into_required_layout ->
    fp8_fp4_gemm_nt with recipe (1, 1, 16), against the dequantized fp64 product."""
    m, n, k = 96, 128, 256
    x, w = torch.randn(m, k, device="cuda"), torch.randn(n, k, device="cuda")
    (xq, xs), (wq, ws) = deep_gemm.per_token_cast_to_nvfp4(x), deep_gemm.per_token_cast_to_nvfp4(w)
    sfa = deep_gemm.transform_ue4m3_sf_into_required_layout(xs, m)
    sfb = deep_gemm.transform_ue4m3_sf_into_required_layout(ws, n)
    assert sfa.dtype == torch.int32 and sfa.stride(0) == 1
    ref = (
        deep_gemm.cast_back_from_fp4(xq, xs, gran_k=16).double()
        @ deep_gemm.cast_back_from_fp4(wq, ws, gran_k=16).double().T
    )
    d = poison_like(torch.empty(m, n, device="cuda", dtype=torch.bfloat16))
    deep_gemm.fp8_fp4_gemm_nt((xq, sfa), (wq, sfb), d, recipe=(1, 1, 16))
    torch.cuda.synchronize()
    assert deep_gemm.calc_diff(d, ref) < 1e-5


_COMPILE_ONLY = """
import sys, torch
import deep_gemm_sm120.compat as dg
from deep_gemm_sm120 import jit
a = torch.randn(96, 384, device='cuda', dtype=torch.bfloat16)
b = torch.randn(160, 384, device='cuda', dtype=torch.bfloat16)
d = torch.full((96, 160), float('nan'), device='cuda')
assert dg.get_compile_mode() == 0
dg.set_compile_mode(1)
dg.bf16_gemm_nt(a, b, d)
torch.cuda.synchronize()
built, untouched = len(jit._loaded), bool(d.isnan().all())
dg.set_compile_mode(0)
compiles = jit.stats['compiles'] + jit.stats['disk_hits']
dg.bf16_gemm_nt(a, b, d)
torch.cuda.synchronize()
err = dg.calc_diff(d, a.double() @ b.double().T)
print(built, untouched, jit.stats['compiles'] + jit.stats['disk_hits'] - compiles, err < 1e-6)
"""


def test_compile_mode_one_builds_without_launching(tmp_path, sm120_or_emulation):
    """SGLang's warm-up: under set_compile_mode(1) the kernel is compiled and loaded but not run (d keeps its NaNs);
    back in mode 0 the same call needs no new compile and computes the product. A fresh process and JIT cache."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    host = str(Path(__file__).resolve().parents[1] / "host")  # importable without an install, as in conftest
    env = {
        **os.environ,
        "DG_SM120_JIT_CACHE_DIR": str(tmp_path),
        "PYTHONPATH": os.pathsep.join(p for p in (host, os.environ.get("PYTHONPATH")) if p),
    }
    p = subprocess.run([sys.executable, "-c", _COMPILE_ONLY], capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stderr
    built, untouched, new_builds, close = p.stdout.split()
    assert int(built) >= 1 and untouched == "True" and new_builds == "0" and close == "True", p.stdout
