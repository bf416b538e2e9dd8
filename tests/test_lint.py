"""The habits of a maintained codebase, run by the README's test command: ruff (lint and format, configured in
pyproject.toml), mypy on core/ and vendorkit/, every remaining `noqa` with its reason, one integer-rounding
helper, and the ignore rules a newcomer's checkout needs. (clang-format on device_layer/:
tests/test_device_format.py.)"""

from __future__ import annotations

import re
import subprocess
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY_DIRS = ("host", "tools", "tests", "benchmarks")
NOQA = re.compile(r"#\s*noqa\b(.*)$")
JUSTIFIED = re.compile(r":\s*[A-Z]+[0-9]+(?:\s*,\s*[A-Z]+[0-9]+)*\s+-\s+\S")


def _run(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *cmd], cwd=ROOT, capture_output=True, text=True, timeout=600)


def _python_files() -> list[Path]:
    """Every Python file ruff checks: the configured exclusions (the vendored verifier) are left out."""
    config = (ROOT / "pyproject.toml").read_text()  # tomllib is 3.11+; the line is one list of strings
    line = re.search(r"^extend-exclude = \[(.*)\]$", config, re.M)
    excluded = {ROOT / p for p in re.findall(r'"([^"]+)"', line.group(1))}
    files = [p for d in PY_DIRS for p in (ROOT / d).rglob("*.py") if "build" not in p.parts] + [ROOT / "setup.py"]
    return sorted(p for p in files if p not in excluded)


def test_ruff_lint():
    p = _run("ruff", "check", "--no-cache", ".")
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]


def test_ruff_format():
    p = _run("ruff", "format", "--no-cache", "--check", ".")
    assert p.returncode == 0, "run `ruff format .`:\n" + p.stdout[-4000:] + p.stderr[-2000:]


def test_mypy_on_core_and_vendorkit(tmp_path):
    p = _run("mypy", "--cache-dir", str(tmp_path / "mypy_cache"))
    assert p.returncode == 0, p.stdout[-6000:] + p.stderr[-2000:]


def test_every_noqa_says_why():
    """`# noqa: CODE[, CODE] - reason`: a bare noqa silences everything, and an unexplained one cannot be
    reviewed."""
    bare = []
    for path in _python_files():
        with open(path, "rb") as fh:
            comments = [t for t in tokenize.tokenize(fh.readline) if t.type == tokenize.COMMENT]
        for tok in comments:  # comments only: a string that talks about noqa is not one
            m = NOQA.search(tok.string)
            if m and not JUSTIFIED.match(m.group(1)):
                bare.append(f"{path.relative_to(ROOT)}:{tok.start[0]}: {tok.string}")
    assert not bare, "noqa without codes and a reason:\n" + "\n".join(bare)


def test_the_noqa_rule_sees_a_bare_one():
    assert not JUSTIFIED.match(NOQA.search("x = 1  # noqa").group(1))
    assert not JUSTIFIED.match(NOQA.search("x = 1  # noqa: E731").group(1))
    assert JUSTIFIED.match(NOQA.search("x = 1  # noqa: E402, F401 - DeepGEMM names").group(1))


def test_one_ceil_div():
    """Integer rounding is core/arith.py's ceil_div / round_up; DeepGEMM's utils names are the same objects."""
    from deep_gemm_sm120.core import arith
    from deep_gemm_sm120.core.gemm import ceil_div as gemm_ceil_div
    from deep_gemm_sm120.utils import ceil_div

    assert ceil_div is arith.ceil_div and gemm_ceil_div is arith.ceil_div
    idiom = re.compile(r"-\(-[^()]*//")
    again = [
        f"{p.relative_to(ROOT)}:{n}"
        for p in _python_files()
        if p.name != "arith.py"
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if idiom.search(line)
    ]
    assert not again, f"ceil division written out again (use core.arith): {again}"
    assert [arith.ceil_div(a, 4) for a in (0, 1, 4, 5, 2**70 + 1)] == [0, 1, 1, 2, 2**68 + 1]
    assert arith.round_up(5, 4) == 8 and arith.round_up(8, 4) == 8


def test_a_newcomers_checkout_ignores_its_venv_and_caches():
    for name in (".venv/bin/python", "venv/lib/x.py", ".mypy_cache/x", ".ruff_cache/x", "build/x", "host/x.so"):
        p = subprocess.run(["git", "check-ignore", "-q", "--no-index", name], cwd=ROOT)
        assert p.returncode == 0, f"{name} is not ignored"
