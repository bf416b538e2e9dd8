"""The family contract: a new family is one package, and everything else follows from its declaration.

The worked example of docs/adding_a_family.md, its code blocks copied as a newcomer copies them (the package into
a scratch family directory joined through DG_SM120_FAMILY_PATH, the header into a copy of device_layer/ named by
DG_SM120_DEVICE_LAYER), is followed to every place a family reaches, with no other file edited: the package's API
and exports, is_supported / why_unsupported, precompile(families=...), the compile gate's case list and a real
build, the support matrix, the DeepGEMM compat surface and its generated table, the qualification plan, and (on
a GPU) a call.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

DOC = ROOT / "docs" / "adding_a_family.md"
LABEL = re.compile(
    r"^\*\*\d+\. (?:`(?P<py>[\w.]+\.py)`[^*]*|[^*`]*)\*\*(?: \(`(?P<cuh>device_layer/[\w./]+\.cuh)`\))?", re.M
)
FENCE = re.compile(r"^```(\w+)\n(.*?)^```$", re.M | re.S)


def worked_example(text: str | None = None) -> dict[str, str]:
    """The files of docs/adding_a_family.md's worked example, as a newcomer copies them: each numbered step
    naming a file (`kernel.py`, ..., `device_layer/impls/sm120_toy_scale.cuh`) -> the code block under it."""
    text = DOC.read_text() if text is None else text
    labels = list(LABEL.finditer(text))
    out = {}
    labels = [m for m in labels if m.group("py") or m.group("cuh")]
    for m, nxt in zip(labels, labels[1:] + [None]):
        block = FENCE.search(text, m.end(), nxt.start() if nxt else len(text))
        if block is not None:
            out[m.group("py") or m.group("cuh")] = block.group(2)
    return out


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    """The worked example, written where a newcomer writes it: the package under a family directory (joined
    through DG_SM120_FAMILY_PATH) and the header in a copy of device_layer/ (DG_SM120_DEVICE_LAYER)."""
    d = tmp_path_factory.mktemp("scratch")
    files = worked_example()
    assert set(files) == {"device_layer/impls/sm120_toy_scale.cuh", "kernel.py", "rules.py", "__init__.py", "api.py"}, (
        sorted(files)
    )
    shutil.copytree(ROOT / "device_layer", d / "device_layer")
    (d / "families" / "toy_scale").mkdir(parents=True)
    for name, text in files.items():
        (d / name if name.startswith("device_layer/") else d / "families" / "toy_scale" / name).write_text(text)
    return d


def _run(scratch: Path, code: list[str], tmp: Path) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "DG_SM120_FAMILY_PATH": str(scratch / "families"),
        "DG_SM120_DEVICE_LAYER": str(scratch / "device_layer"),
        "DG_SM120_JIT_CACHE_DIR": str(tmp / "jit"),
        "PYTHONPATH": os.pathsep.join([str(ROOT / "host"), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(code, capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)


def test_the_worked_example_follows_the_codebases_habits(scratch):
    """What a newcomer copies passes the linters the repository holds itself to (pyproject.toml's ruff rules)."""
    pkg = str(scratch / "families" / "toy_scale")
    for cmd in (["check", "--no-cache"], ["format", "--no-cache", "--check"]):
        p = subprocess.run(
            [sys.executable, "-m", "ruff", *cmd, "--config", str(ROOT / "pyproject.toml"), pkg],
            capture_output=True,
            text=True,
        )
        assert p.returncode == 0, p.stdout + p.stderr


def test_the_package_reaches_the_api_support_and_compat(scratch, tmp_path):
    code = textwrap.dedent("""
        import json, torch, deep_gemm_sm120 as dg
        from deep_gemm_sm120 import compat
        from deep_gemm_sm120.compat import surface
        out = {"op": callable(dg.toy_scale), "in_all": "toy_scale" in dg.__all__,
               "supported": dg.is_supported("toy_scale", n=64, in_dtype=torch.float32),
               "why": dg.why_unsupported("toy_scale", n=6), "why_dtype": dg.why_unsupported("toy_scale",
                                                                                         in_dtype=torch.int32),
               "compat": compat.toy_scale is dg.toy_scale,
               "surface": [e.status for e in surface.ENTRIES if e.name == "toy_scale"],
               "table": "`toy_scale` | supported" in surface.render()}
        try:
            dg.toy_scale(torch.zeros(8), torch.zeros(8))
        except ValueError as e:
            out["cpu_call"] = str(e)
        print(json.dumps(out))
    """)
    p = _run(scratch, [sys.executable, "-c", code], tmp_path)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["op"] and out["in_all"] and out["supported"] is True
    assert out["why"].startswith("ValueError: n must be a multiple of 4")
    assert out["why_dtype"].startswith("TypeError: toy_scale takes float32")
    assert out["compat"] and out["surface"] == ["supported"] and out["table"]
    assert "must be on a CUDA device" in out["cpu_call"]


def test_the_tools_derive_the_family(scratch, tmp_path):
    p = _run(scratch, [sys.executable, "tools/compile_gate.py", "--list", "--families", "toy_scale"], tmp_path)
    assert p.returncode == 0 and "toy_scale_t128" in p.stdout and "toy_scale_t256" in p.stdout, p.stderr
    p = _run(scratch, [sys.executable, "tools/support_matrix.py"], tmp_path)
    assert p.returncode == 0 and "| `toy_scale` | family |" in p.stdout and "in fp32 [n]" in p.stdout
    for what in ("sanitizers", "benchmarks"):
        p = _run(scratch, [sys.executable, "tools/family_plan.py", what], tmp_path)
        assert p.returncode == 0 and "toy_scale" in p.stdout.split()
    # and without the path, nothing of it remains: no file of this repository was edited
    env_free = subprocess.run(
        [sys.executable, "tools/family_plan.py", "families"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if k != "DG_SM120_FAMILY_PATH"},
    )
    assert "toy_scale" not in env_free.stdout


def test_precompile_and_the_gate_build_it(scratch, tmp_path):
    """The kernel itself, through the JIT and the compile gate (needs nvcc: the test command installs the CUDA
    compiler wheels)."""
    code = (
        "import deep_gemm_sm120 as dg; "
        "print(dg.precompile(families=['toy_scale'], targets=['sm_120a'], progress=False))"
    )
    p = _run(scratch, [sys.executable, "-c", code], tmp_path)
    assert p.returncode == 0 and p.stdout.strip().splitlines()[-1] == "2", p.stderr
    p = _run(
        scratch,
        [
            sys.executable,
            "tools/compile_gate.py",
            "--families",
            "toy_scale",
            "--targets",
            "sm_120a,sm_90a",
            "--json",
            str(tmp_path / "gate.json"),
            "--nvcc",
            json.loads(
                _run(
                    scratch,
                    [
                        sys.executable,
                        "-c",
                        "import json,sys; sys.path.insert(0,'tools');"
                        "import compile_gate as g; print(json.dumps(g.discover_toolchains([])"
                        "[0].nvcc))",
                    ],
                    tmp_path,
                ).stdout
            ),
        ],
        tmp_path,
    )
    doc = json.loads((tmp_path / "gate.json").read_text())
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert {(r["name"], r["target"]) for r in doc["results"]} == {
        (f"toy_scale_t{t}", tgt) for t in (128, 256) for tgt in ("sm_120a", "sm_90a")
    }


@pytest.mark.cuda
@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA GPU")
def test_the_worked_example_runs(scratch, tmp_path):
    """The doc's api.py launches its kernel: out = alpha * x (sm_90 through the emulation switch elsewhere)."""
    code = textwrap.dedent("""
        import torch, deep_gemm_sm120 as dg
        x = torch.arange(1000, dtype=torch.float32, device="cuda")
        out = torch.full_like(x, float("nan"))
        dg.toy_scale(x, out, alpha=2.5)
        torch.cuda.synchronize()
        assert torch.equal(out, 2.5 * x), (out - 2.5 * x).abs().max()
        print("ok")
    """)
    env_emulate = {} if __import__("torch").cuda.get_device_capability()[0] == 12 else {"DG_SM120_EMULATE": "1"}
    os.environ.update(env_emulate)
    try:
        p = _run(scratch, [sys.executable, "-c", code], tmp_path)
    finally:
        for k in env_emulate:
            os.environ.pop(k)
    assert p.returncode == 0 and p.stdout.strip().endswith("ok"), p.stdout + p.stderr
