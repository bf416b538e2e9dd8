"""Every tool speaks one exit-code contract: a usage error exits 3 (never argparse's 2, which the drift tools
document as "could not check"), and a JSON report's exit_code is always the process's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ("check_vendor.py", "watch_downstreams.py", "compile_gate.py", "support_matrix.py")


def _run(tool: str, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "tools" / tool), *args], capture_output=True, text=True, cwd=cwd, timeout=120
    )


@pytest.mark.parametrize("tool", TOOLS)
def test_usage_errors_exit_3(tool):
    p = _run(tool, "--no-such-flag")
    assert p.returncode == 3, (p.returncode, p.stderr)
    assert "no-such-flag" in p.stderr and "Traceback" not in p.stderr


@pytest.mark.parametrize("tool", TOOLS)
def test_help_exits_0(tool):
    p = _run(tool, "--help")
    assert p.returncode == 0 and "usage" in p.stdout.lower()


def test_check_vendor_json_exit_code_is_the_process_exit_code(tmp_path):
    p = _run("check_vendor.py", "--tag", "v9.9.9", "--format", "json")
    assert p.returncode == 3 and json.loads(p.stdout)["exit_code"] == 3
    missing = tmp_path / "nowhere"
    p = _run("check_vendor.py", "--fork", str(missing), "--format", "json")
    assert p.returncode in (2, 3) and json.loads(p.stdout)["exit_code"] == p.returncode


def test_compile_gate_json_exit_code_on_usage_error(tmp_path):
    out = tmp_path / "gate.json"
    p = _run("compile_gate.py", "--targets", "bogus", "--json", str(out))
    assert p.returncode == 3 and json.loads(out.read_text())["exit_code"] == 3
    p = _run("compile_gate.py", "--families", "nope", "--json", str(out))
    assert p.returncode == 3 and "unknown families" in p.stderr and json.loads(out.read_text())["exit_code"] == 3


def test_watcher_json_exit_code_on_bad_configuration(tmp_path):
    cfg = tmp_path / "downstreams.yaml"
    cfg.write_text("downstreams: [{name: x}]\n")
    out = tmp_path / "report.json"
    p = _run("watch_downstreams.py", "--config", str(cfg), "--json", str(out))
    assert p.returncode == 3, p.stderr
    assert json.loads(out.read_text())["exit_code"] == 3
