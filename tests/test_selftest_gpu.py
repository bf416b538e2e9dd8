"""The self-test and the automatic scale-encoding choice on a GPU (issue 44).

`auto` proves the selector encoding before the first block-scaled kernel of a device, keeps the verdict on disk
for later processes, refuses to probe inside CUDA-graph capture, and falls back to the replicated encoding (one
warning naming the report) when the selector one fails. The failure is made without other silicon: under
DG_SM120_EMULATE_SELECTORS=ignored the emulated MMA reads every non-zero selector as 0."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import pytest
import torch
from gpu_helpers import requires_cuda

from deep_gemm_sm120.selftest.workloads.block_scaled import fp8_operands

pytestmark = [pytest.mark.cuda, pytest.mark.emulation, requires_cuda]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture()
def fresh_auto(monkeypatch, tmp_path):
    """auto policy, a verdict directory of this test's own (the JIT cache's cubins stay shared), no verdict in
    memory."""
    from deep_gemm_sm120 import scale_encoding
    from deep_gemm_sm120.core import envvars

    shared = envvars.cache_dir()
    monkeypatch.delenv("DG_SM120_SCALE_ENCODING", raising=False)
    monkeypatch.setattr(
        scale_encoding, "verdict_path", lambda facts: str(tmp_path / f"atoms-{scale_encoding.verdict_key(facts)}.json")
    )
    scale_encoding.reset()
    yield tmp_path
    scale_encoding.reset()
    assert envvars.cache_dir() == shared


def _gemm():
    import deep_gemm_sm120 as dg
    from deep_gemm_sm120.testing import calc_diff

    gen = torch.Generator(device="cuda").manual_seed(5)
    a, b, ref = fp8_operands(200, 384, 1024, gen)
    d = torch.full((200, 384), float("nan"), device="cuda", dtype=torch.bfloat16)
    dg.fp8_gemm_nt(a, b, d)
    torch.cuda.synchronize()
    return calc_diff(d, ref), (a, b, d)


def _loaded_names() -> set[str]:
    from deep_gemm_sm120 import jit

    return {k.name for k in jit._loaded.values()}


def test_auto_proves_selectors_once_and_later_processes_read_the_verdict(sm120_or_emulation, fresh_auto):
    from deep_gemm_sm120 import scale_encoding
    from deep_gemm_sm120.core import encoding as enc

    if sm120_or_emulation[0] != 12 and enc.emulated_reading() != "documented":
        pytest.skip("the documented selector reading only")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback warning on hardware that reads selectors as documented
        diff, _ = _gemm()
    assert diff < 1e-3
    files = list(fresh_auto.glob("atoms-*.json"))
    assert len(files) == 1
    data = json.loads(files[0].read_text())
    assert all(set(v) == {"selectors", "replicated"} for v in data["passing"].values()), data["passing"]
    assert data["facts"]["device_layer"] and data["facts"]["target"]
    # another process finds the verdict on disk: it must not probe again (run_atoms raising proves it)
    code = (
        "import os, sys, torch, warnings; sys.path.insert(0, 'host'); import deep_gemm_sm120 as dg\n"
        "from deep_gemm_sm120 import scale_encoding; from deep_gemm_sm120.selftest import atoms\n"
        f"scale_encoding.verdict_path = lambda facts: {str(fresh_auto)!r} + '/atoms-' + scale_encoding.verdict_key(facts) + '.json'\n"
        "atoms.run_atoms = lambda *a, **k: (_ for _ in ()).throw(AssertionError('probed again'))\n"
        "sys.path.insert(0, 'tests'); from test_selftest_gpu import _gemm\n"
        "assert _gemm()[0] < 1e-3; print('ok')\n"
    )
    env = dict(os.environ, DG_SM120_EMULATE="1" if sm120_or_emulation[0] != 12 else "0")
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0 and p.stdout.strip().endswith("ok"), p.stdout[-2000:] + p.stderr[-4000:]
    assert scale_encoding.policy() == "auto"


def test_capture_without_a_verdict_is_a_clear_error_and_works_after_one(sm120_or_emulation, fresh_auto, monkeypatch):
    import deep_gemm_sm120 as dg
    from deep_gemm_sm120.selftest import atoms

    gen = torch.Generator(device="cuda").manual_seed(1)
    a, b, _ = fp8_operands(64, 256, 512, gen)
    d = torch.empty(64, 256, device="cuda", dtype=torch.bfloat16)
    recipe = (1, 128, 128)
    sfa = dg.transform_sf_into_required_layout(a[1], 64, 512, recipe, is_sfa=True)
    sfb = dg.transform_sf_into_required_layout(b[1], 256, 512, recipe)
    torch.cuda.synchronize()
    with pytest.raises(RuntimeError, match="cannot run inside CUDA-graph capture.*python -m deep_gemm_sm120.selftest"):
        with torch.cuda.graph(torch.cuda.CUDAGraph()):
            dg.fp8_gemm_nt((a[0], sfa), (b[0], sfb), d, recipe=recipe)
    torch.cuda.synchronize()
    dg.selftest(families=False)  # what the error says to run: it records the verdict
    monkeypatch.setattr(atoms, "run_atoms", lambda *a, **k: pytest.fail("probed again after the self-test"))
    dg.fp8_gemm_nt((a[0], sfa), (b[0], sfb), d, recipe=recipe)  # loads the kernel outside the capture
    expected = d.clone()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        dg.fp8_gemm_nt((a[0], sfa), (b[0], sfb), d, recipe=recipe)
    d.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(d, expected)


def test_selector_failure_falls_back_to_replicated_with_one_warning(sm120_or_emulation, fresh_auto, monkeypatch):
    if sm120_or_emulation[0] == 12:
        pytest.skip("the emulated selector reading exists on the sm_90 emulation only")
    from deep_gemm_sm120 import jit

    monkeypatch.setenv("DG_SM120_EMULATE_SELECTORS", "ignored")
    with pytest.warns(RuntimeWarning, match=r"mxfp8 block-scaled MMA failed the selector-encoding self-test.*atoms-"):
        diff, _ = _gemm()
    assert diff < 1e-3, "the replicated encoding computes the right result under the other reading"
    assert any(n.startswith("fp8_fp4_gemm_1d1d_mxfp8") and n.endswith("_rep") for n in _loaded_names())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per device and kind
        _gemm()
    report = json.loads(next(fresh_auto.glob("atoms-*.json")).read_text())
    assert all(v == ["replicated"] for v in report["passing"].values()), report["passing"]
    assert report["facts"]["emulated_selectors"] == "ignored"
    wrong = [c for c in report["cases"] if c["verdict"] == "wrong"]
    assert wrong and all(c["matches"] == "selectors-as-zero" and c["encoding"] == "selectors" for c in wrong)
    # forced selectors under that reading: the wrong result the fallback avoids (the safety net is needed)
    from deep_gemm_sm120 import scale_encoding

    with scale_encoding.forced("selectors"):
        bad, _ = _gemm()
    assert bad > 0.05, f"the selector encoding should be O(1) wrong under the ignored reading, calc_diff {bad}"
    assert jit  # the loaded kernels above came through jit.get_kernel


def test_selftest_cli_reports(sm120_or_emulation, tmp_path):
    """Exit 0 and a passing report on hardware that reads selectors as documented; under the ignored reading
    (emulation), exit 1, every atom kind on the replicated encoding, its family cases right and the selector
    ones O(1) wrong: the report tells the two apart."""
    from deep_gemm_sm120.core import encoding as enc

    ignored = sm120_or_emulation[0] != 12 and enc.emulated_reading() == "ignored"
    out = tmp_path / "report.json"
    env = dict(os.environ, DG_SM120_EMULATE="1" if sm120_or_emulation[0] != 12 else "0", PYTHONPATH="host")
    p = subprocess.run(
        [sys.executable, "-m", "deep_gemm_sm120.selftest", "--json", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert p.returncode == (1 if ignored else 0), p.stdout[-4000:] + p.stderr[-4000:]
    report = json.loads(out.read_text())
    env_info = report["environment"]
    for key in ("gpu", "compute_capability", "driver", "nvcc", "package_version", "device_layer_sha256"):
        assert env_info[key], key
    fams = {r["family"] for r in report["families"]}
    assert {"bf16_gemm", "fp8_fp4_gemm_1d1d", "mqa_logits", "paged_mqa_logits", "sparse_mqa_logits"} <= fams
    assert {"tf32_hc_prenorm_gemm", "gated_delta_rule"} <= fams
    assert {r["encoding"] for r in report["families"] if r["kind"]} == {"selectors", "replicated"}
    assert all(r["seconds"] >= 0 for r in report["families"]) and report["seconds"] > 0
    if ignored:
        assert report["verdict"] == "fail" and "self-test: FAIL" in p.stdout
        assert all(row["chosen"] == "replicated" for row in report["atoms"].values())
        assert all(r["verdict"] == "ok" for r in report["families"] if r["encoding"] != "selectors")
        assert all(r["verdict"] == "wrong" for r in report["families"] if r["encoding"] == "selectors")
    else:
        assert report["verdict"] == "pass" and "self-test: PASS" in p.stdout
        assert all(row["chosen"] == "selectors" for row in report["atoms"].values())
    if sm120_or_emulation[0] != 12:
        assert "not an SM120 result" in " ".join(report["notes"]) and "EMULATED" in p.stdout
