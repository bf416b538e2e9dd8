"""tools/qualify_sm120.py without a GPU: exit 2 with a message; with the GPU facts and steps faked, one report
file whose first line says whether it ran on SM120 silicon, every step's verdict, the 15-minute budget shared by
the steps, exit 1 when a step failed (issue 44's qualification kit)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))

import qualify_sm120 as kit


def test_without_a_gpu_it_cannot_run():
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    p = subprocess.run([sys.executable, "tools/qualify_sm120.py"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert p.returncode == 2 and "could not run: no CUDA GPU was found" in p.stderr and "Traceback" not in p.stderr


@pytest.mark.parametrize("capability,failing", [((12, 0), None), ((9, 0), "racecheck")])
def test_the_report(monkeypatch, tmp_path, capability, failing):
    monkeypatch.setattr(
        kit, "probe", lambda env: {"cuda": True, "gpu": "GPU X", "capability": list(capability), "package": "0.8.7"}
    )
    monkeypatch.setattr(kit.shutil, "which", lambda name: "/usr/bin/" + name)
    calls = []

    def fake_step(name, cmd, env, limit, deadline, parse=None):
        calls.append((name, cmd, env.get("DG_SM120_EMULATE"), env.get("DG_SM120_SCALE_ENCODING"), limit))
        assert limit <= kit.BUDGET
        return {"step": name, "passed": name != failing, "rc": 0 if name != failing else 9}

    monkeypatch.setattr(kit, "step", fake_step)
    out = tmp_path / "q.json"
    rc = kit.main(["--out", str(out)])
    report = json.loads(out.read_text())
    names = [c[0] for c in calls]
    assert names == [
        "selftest",
        "gpu tests",
        "gpu tests (replicated)",
        "requires_sm120 tests",
        "memcheck",
        "racecheck",
        "benchmark",
    ]
    assert [c[3] for c in calls].count("replicated") == 1
    if capability[0] == 12:
        assert rc == 0 and report["verdict"] == "pass" and report["label"].startswith("SM120 silicon")
        assert all(c[2] is None for c in calls)
    else:
        assert rc == 1 and report["failed_steps"] == ["racecheck"] and report["label"].startswith("NOT SM120")
        assert all(c[2] == "1" for c in calls)  # the emulation, labelled as such
    assert report["gpu"] == "GPU X" and report["package_version"] == "0.8.7"


def test_a_step_never_outlives_the_budget(monkeypatch):
    import time

    seen = {}

    def fake_run(cmd, cwd, env, capture_output, text, timeout):
        seen["timeout"] = timeout
        raise subprocess.TimeoutExpired(cmd, timeout, output=b"partial \xff", stderr=None)

    monkeypatch.setattr(kit.subprocess, "run", fake_run)
    row = kit.step("x", ["true"], {}, 240, time.perf_counter() + 50)
    assert 10 <= seen["timeout"] <= 50 and not row["passed"] and row["rc"] is None
    assert "partial" in row["output_tail"] and "[stopped after" in row["output_tail"]


def test_another_gpu_cannot_run_and_the_device_choice_is_tested(monkeypatch, tmp_path, capsys):
    """A GPU that is neither SM120 nor the sm_90 of the emulation: exit 2, nothing run. On one it runs, the
    first steps run with the encoding the device picks (a caller's DG_SM120_SCALE_ENCODING is dropped)."""
    monkeypatch.setattr(
        kit, "probe", lambda env: {"cuda": True, "gpu": "A100", "capability": [8, 0], "package": "0.8.7"}
    )
    monkeypatch.setattr(kit, "step", lambda *a, **k: pytest.fail("a step ran"))
    assert kit.main(["--out", str(tmp_path / "q.json")]) == 2
    assert "is sm 8.0; the kit needs SM120" in capsys.readouterr().err and not (tmp_path / "q.json").exists()
    monkeypatch.setenv("DG_SM120_SCALE_ENCODING", "selectors")
    monkeypatch.setattr(
        kit, "probe", lambda env: {"cuda": True, "gpu": "RTX 5090", "capability": [12, 0], "package": "0.8.7"}
    )
    seen = []

    def fake_step(name, cmd, env, limit, deadline, parse=None):
        seen.append((name, env.get("DG_SM120_SCALE_ENCODING")))
        return {"step": name, "passed": True}

    monkeypatch.setattr(kit, "step", fake_step)
    assert kit.main(["--out", str(tmp_path / "q.json"), "--no-bench", "--no-sanitizers"]) == 0
    assert dict(seen) == {
        "selftest": None,
        "gpu tests": None,
        "gpu tests (replicated)": "replicated",
        "requires_sm120 tests": None,
    }


def test_a_stopped_run_leaves_the_steps_it_finished(monkeypatch, tmp_path):
    """The report is rewritten after every step: a kit killed in its fourth step (a machine's time limit, a hung
    driver) still leaves the first three, marked incomplete, and never a half-written file."""
    monkeypatch.setattr(
        kit, "probe", lambda env: {"cuda": True, "gpu": "RTX 5090", "capability": [12, 0], "package": "0.8.7"}
    )
    out = tmp_path / "q.json"
    seen = []

    def fake_step(name, cmd, env, limit, deadline, parse=None):
        if out.exists():
            seen.append((name, json.loads(out.read_text())))
        if name == "requires_sm120 tests":
            raise KeyboardInterrupt  # the run is stopped here
        return {"step": name, "passed": name != "gpu tests"}

    monkeypatch.setattr(kit, "step", fake_step)
    with pytest.raises(KeyboardInterrupt):
        kit.main(["--out", str(out)])
    report = json.loads(out.read_text())
    assert report["verdict"] == "incomplete" and report["failed_steps"] == ["gpu tests"]
    assert [s["step"] for s in report["steps"]] == ["selftest", "gpu tests", "gpu tests (replicated)"]
    # written before the first step (an empty, incomplete report: no stale file survives) and after each step
    assert [len(r["steps"]) for _, r in seen] == [0, 1, 2, 3]
    assert all(r["verdict"] == "incomplete" for _, r in seen)
    assert not list(tmp_path.glob("*.tmp"))
