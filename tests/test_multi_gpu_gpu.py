"""Every family off device 0 (issue 30): tensors on cuda:1 while the current device is cuda:0 and the other way
round, a CUDA graph captured and replayed on cuda:1, two threads driving two GPUs at once, and two processes on two
GPUs sharing one JIT cache directory from cold. The device tests need two GPUs (the `nvidia-h200-x2` kind) and
skip with that reason on one; the shared-cache test runs on one GPU too (both processes on cuda:0).

"Tensors on X, current device Y": the families' own GPU tests run unchanged with X current (inputs, references),
while every public entry point of deep_gemm_sm120 they call is wrapped to run with Y current."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
from gpu_helpers import requires_cuda

pytestmark = [pytest.mark.cuda, pytest.mark.emulation, requires_cuda]
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture()
def two_gpus(sm120_or_emulation):
    if torch.cuda.device_count() < 2:
        pytest.skip(f"needs two GPUs (the nvidia-h200-x2 kind); this machine has {torch.cuda.device_count()}")


def _current_device_is(monkeypatch, index: int) -> None:
    """Every public callable of deep_gemm_sm120 runs with cuda:index current, whatever its caller's device."""
    import deep_gemm_sm120 as dg

    for name in dir(dg):
        fn = getattr(dg, name)
        if name.startswith("_") or not callable(fn) or isinstance(fn, type) or getattr(fn, "__module__", "") is None:
            continue
        if not getattr(fn, "__module__", "").startswith("deep_gemm_sm120"):
            continue

        def wrapped(*args, _fn=fn, **kwargs):
            with torch.cuda.device(index):
                return _fn(*args, **kwargs)

        monkeypatch.setattr(dg, name, wrapped)


def _families():
    """(label, thunk): one representative call per family, checked against its reference by the family's tests."""
    import test_bf16_gemm_gpu as bf16
    import test_fp8_fp4_gemm_gpu as fp8
    import test_gated_delta_rule_gpu as gdr
    import test_mqa_logits_gpu as dense
    import test_paged_mqa_logits_gpu as paged
    import test_sparse_mqa_logits_gpu as sparse
    import test_tf32_hc_prenorm_gemm_gpu as hc

    return [
        ("bf16_gemm", lambda: bf16._run(200, 576, 1536, torch.bfloat16, True)),
        ("bf16 split-K", lambda: bf16._run(16, 256, 7168, torch.float32, False)),
        ("m-grouped contiguous", _grouped),
        ("fp8_fp4_gemm", lambda: fp8.test_fp8_gemm_nt(None, 129, 200, 1040, "deepseek")),
        ("fp4_gemm", lambda: fp8.test_fp4_gemm_nt(None, "mxfp4", 64, 256, 512)),
        ("mqa_logits", lambda: dense.check(77, 513, 64, 128, "window")),
        ("paged_mqa_logits", lambda: paged.run([300, 0, 1, 129], 2, 64, 128, 64)),
        ("sparse_mqa_logits", lambda: sparse.test_contiguous_matches_reference(None, "mxfp8", 128, 32, 16)),
        ("gated_delta_rule", lambda: gdr.check(*gdr.make_inputs(2, 45, 4, 8, state_n=2))),
        ("tf32_hc_prenorm_gemm", lambda: hc.run(64, 24, 4096, 16)),
    ]


def _grouped():
    from test_bf16_grouped_gpu import SENTINEL, _check_contiguous, _contiguous_problem

    import deep_gemm_sm120 as dg

    a, b, lay, _ = _contiguous_problem([100, 0, 256], 512, 1024)
    d = torch.full((a.shape[0], b.shape[1]), SENTINEL, device=a.device, dtype=torch.bfloat16)
    dg.m_grouped_bf16_gemm_nt_contiguous(a, b, d, lay)
    _check_contiguous(a, b, lay, d)


@pytest.mark.parametrize("tensors,current", [(1, 0), (0, 1)])
def test_every_family_with_another_current_device(two_gpus, monkeypatch, tensors, current):
    _current_device_is(monkeypatch, current)
    for label, run in _families():
        with torch.cuda.device(tensors):
            try:
                run()
                torch.cuda.synchronize()
            except Exception as e:
                raise AssertionError(f"{label} with tensors on cuda:{tensors}, cuda:{current} current: {e}") from e


def test_devices_mixed_in_one_call_raise_naming_the_tensors(two_gpus):
    import deep_gemm_sm120 as dg

    a = torch.randn(64, 128, device="cuda:0", dtype=torch.bfloat16)
    b = torch.randn(64, 128, device="cuda:1", dtype=torch.bfloat16)
    d = torch.empty(64, 64, device="cuda:0", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"a=cuda:0, b=cuda:1"):
        dg.bf16_gemm_nt(a, b, d)


def test_graph_capture_and_replay_on_the_second_device(two_gpus):
    import deep_gemm_sm120 as dg
    from deep_gemm_sm120.testing import calc_diff

    dev = torch.device("cuda:1")
    a = torch.randn(256, 1024, device=dev, dtype=torch.bfloat16)
    b = torch.randn(512, 1024, device=dev, dtype=torch.bfloat16)
    d = torch.empty(256, 512, device=dev, dtype=torch.bfloat16)
    with torch.cuda.device(dev):
        dg.bf16_gemm_nt(a, b, d)  # compile and load outside capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            dg.bf16_gemm_nt(a, b, d)
        for seed in (1, 2):
            a.copy_(torch.randn(a.shape, generator=torch.Generator().manual_seed(seed)))
            d.fill_(float("nan"))
            graph.replay()
            torch.cuda.synchronize()
            assert calc_diff(d, a.double() @ b.double().T) < 1e-5


def test_two_threads_drive_two_gpus_at_once(two_gpus):
    import deep_gemm_sm120 as dg
    from deep_gemm_sm120.testing import calc_diff

    errors: list[str] = []

    def worker(index: int):
        try:
            torch.cuda.set_device(index)
            g = torch.Generator(device=f"cuda:{index}").manual_seed(index)
            a = torch.randn(128 + 64 * index, 512, device=f"cuda:{index}", dtype=torch.bfloat16, generator=g)
            b = torch.randn(384, 512, device=f"cuda:{index}", dtype=torch.bfloat16, generator=g)
            ref = a.double() @ b.double().T
            for i in range(300):
                d = torch.empty(a.shape[0], 384, device=f"cuda:{index}", dtype=torch.float32)
                dg.bf16_gemm_nt(a, b, d)
                if i % 50 == 0:
                    torch.cuda.synchronize(index)
                    assert calc_diff(d, ref) < 1e-5, f"cuda:{index} call {i}"
        except Exception as e:
            errors.append(f"cuda:{index}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=worker, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert errors == []


_COLD = """
import sys, torch
import deep_gemm_sm120 as dg
from deep_gemm_sm120.testing import calc_diff
index = int(sys.argv[1])
torch.cuda.set_device(index)
a = torch.randn(200, 1024, device='cuda', dtype=torch.bfloat16)
b = torch.randn(300, 1024, device='cuda', dtype=torch.bfloat16)
d = torch.empty(200, 300, device='cuda', dtype=torch.bfloat16)
dg.bf16_gemm_nt(a, b, d)
torch.cuda.synchronize()
print(calc_diff(d, a.double() @ b.double().T) < 1e-5)
"""


def test_two_processes_share_one_cold_jit_cache(tmp_path, sm120_or_emulation):
    """Both build the same kernels into one empty cache directory at the same time (one GPU each when there are
    two, else both on cuda:0): both compute the right product and the cache ends with each entry once."""
    devices = (0, 1) if torch.cuda.device_count() >= 2 else (0, 0)
    env = {
        **os.environ,
        "DG_SM120_JIT_CACHE_DIR": str(tmp_path),
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT / "host"), os.environ.get("PYTHONPATH")) if p),
    }
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _COLD, str(i)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        for i in devices
    ]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0 and out.strip() == "True", err[-2000:]
    from deep_gemm_sm120.jit import cache as jc

    keys = [d.name for d in tmp_path.glob("??/*") if d.is_dir()]
    assert keys, "nothing was published to the shared cache"
    cache = jc.KernelCache(str(tmp_path))
    assert all(cache.lookup(k) is not None for k in keys), "a published entry does not verify"
    assert not any(p.is_file() for p in (tmp_path / "tmp").rglob("*")), "a builder left a partial entry"
