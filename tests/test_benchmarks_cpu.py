"""The benchmarks share benchmarks/harness.py and never import tests/: every family's declared benchmark exists,
goes through the harness (start ... finish), and the harness's CPU-side logic (L2 rotation, the JSON identity,
refusing to run without a GPU) behaves. The timings themselves run on the GPU machine (tools/qualify_h200.sh)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks"
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(ROOT / "tools"))
import family_plan
import harness

TEST_MODULES = {p.stem for p in (ROOT / "tests").glob("*.py")}


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, names) of every import statement, at any depth."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.append((node.module, [a.name for a in node.names]))
    return out


@pytest.mark.parametrize("path", sorted(BENCH.glob("*.py")), ids=lambda p: p.name)
def test_no_benchmark_imports_tests_or_another_benchmarks_timer(path):
    for module, names in _imports(path):
        assert module.split(".")[0] not in TEST_MODULES, f"{path.name} imports tests/{module}.py"
        assert "tests" not in module.split("."), f"{path.name} imports {module}"
        if module.startswith("bench_"):
            assert "bench" not in names, f"{path.name} takes its timer from {module}, not harness"
    assert 'sys.path.insert(0, os.path.join(HERE, "..", "tests"))' not in path.read_text(encoding="utf-8")


def test_declared_benchmarks_exist_and_use_the_harness():
    declared = family_plan.plan("benchmarks")
    assert declared
    for name in declared:
        path = BENCH / f"bench_{name}.py"
        assert path.is_file(), f"a family declares benchmark {name!r}; {path.name} is missing"
        text = path.read_text(encoding="utf-8")
        harness_names = {n for m, names in _imports(path) if m == "harness" for n in names}
        assert {"start", "finish", "bench"} <= harness_names, f"{path.name} imports {sorted(harness_names)}"
        assert "json.dump(" not in text and "DG_SM120_EMULATE" not in text.split('"""', 2)[-1], path.name


def test_copies_cover_three_l2_and_stay_bounded():
    l2 = 50 << 20
    assert harness.copies_for(150 << 20, l2) == 1  # one set already spills L2 three times
    assert harness.copies_for(50 << 20, l2) == 3
    assert harness.copies_for(1 << 20, l2) == 16  # bounded by the limit
    assert harness.copies_for(1 << 20, l2, limit=4) == 4
    assert harness.copies_for(0, l2) == 16


def test_rotation_hands_out_every_set_in_turn():
    made = []
    rot = harness.Rotation(lambda i: made.append(i) or f"set{i}", bytes_per_call=20 << 20, l2_bytes=40 << 20)
    assert made == [0, 1, 2, 3, 4, 5] and len(rot) == 6
    assert [rot.next() for _ in range(8)] == [f"set{i}" for i in (0, 1, 2, 3, 4, 5, 0, 1)]


def test_json_carries_the_run_identity(tmp_path):
    out = tmp_path / "r.json"
    proc = subprocess.run(
        [sys.executable, str(BENCH / "bench_fp8_fp4_gemm.py"), "--roofline-only", "--quick", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    assert data["command"].startswith("python ") and "--roofline-only" in data["command"]
    assert (
        data["commit"] is None
        or data["commit"].split("-")[0]
        == subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    )
    assert data["date"].endswith("+00:00") and "device" in data and "emulated" in data
    rows = data["rows"]
    assert len(rows) == 3 * 6 and all(r["roofline_us"] > 0 for r in rows)  # 3 quick shapes x 6 recipes (fp8_fp32 too)
    assert all("emulated_us" not in r for r in rows)  # nothing was timed


def test_kinds_select_rows_and_unknown_ones_are_refused(tmp_path):
    cmd = [sys.executable, str(BENCH / "bench_fp8_fp4_gemm.py"), "--roofline-only", "--quick"]
    out = tmp_path / "r.json"
    proc = subprocess.run([*cmd, "--kinds", "fp8_fp32,mxfp8", "--json", str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(out.read_text())["rows"]
    assert [(r["kind"], r["gran_k"]) for r in rows[:3]] == [("mxfp8", 128), ("fp8_fp32", 128), ("mxfp8", 32)]
    assert len(rows) == 3 * 3
    proc = subprocess.run([*cmd, "--kinds", "fp8,nvfp4"], capture_output=True, text=True)
    assert proc.returncode == 2 and "unknown kinds ['fp8']" in proc.stderr and "'nvfp4'" in proc.stderr


def test_a_gpu_benchmark_without_a_gpu_says_so(tmp_path):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # no GPU visible, on any machine
    proc = subprocess.run(
        [sys.executable, str(BENCH / "bench_einsum.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 2 and "needs a CUDA GPU" in proc.stderr, proc.stderr


def test_sass_compare_counts_only_the_work_instructions():
    import sass_compare

    lines = [
        "@!P0 HMMA.16816.F32.BF16 R4, R8, R12, R4 ;",
        "@UP1 LDSM.16.M88.4 R8, [R2] ;",
        "IADD3 R1, R1, 0x1, RZ ;",
        "SYNCS.ARRIVE.TRANS64.RED.A1T0 RZ, [UR4], RZ ;",
        "MOV R2, R3 ;",
        "NOP ;",
    ]
    assert [sass_compare.opcode(x) for x in lines] == [
        "HMMA.16816.F32.BF16",
        "LDSM.16.M88.4",
        "IADD3",
        "SYNCS.ARRIVE.TRANS64.RED.A1T0",
        "MOV",
        "NOP",
    ]
    counts = sass_compare.work_counts(lines)
    assert set(counts) == {"HMMA.16816.F32.BF16", "LDSM.16.M88.4", "SYNCS.ARRIVE.TRANS64.RED.A1T0"}
    moved = sass_compare.work_counts(lines[:1] + lines[2:])  # an ldmatrix dropped: the counts differ
    assert moved != counts and sass_compare.work_counts(list(reversed(lines))) == counts  # order does not matter


def test_gdr_kernel_table_labels_keep_the_template_arguments():
    """bench_gated_delta_rule.py's kernel table names a kernel without return type, namespaces and parameters, so
    the recurrence's instances (forward, states, transition) stay apart; a leading '(anonymous namespace)' is not
    taken for the parameter list."""
    import bench_gated_delta_rule as b

    fwd = "void sm120::sm120_gated_delta_rule_fwd_kernel<32u, 64u, 1u, 2u, __nv_bfloat16, false, true>(float const*)"
    states = fwd.replace("false, true>", "true, false>")
    assert b._kernel_label(fwd) == "sm120_gated_delta_rule_fwd_kernel<32u, 64u, 1u, 2u, bf16, false, true>"
    assert b._kernel_label(fwd) != b._kernel_label(states)
    assert b._kernel_label("void (anonymous namespace)::k<int, at::native::f>(int)") == "k<int, f>"
    assert b._kernel_label("Memcpy DtoD (Device -> Device)") == "Memcpy DtoD"
    assert b._kernel_label("chunk_bwd_kernel_dqkwg") == "chunk_bwd_kernel_dqkwg"
