#!/usr/bin/env python3
"""Qualification kit for the first SM120 owners: one command, one report file to attach to an issue.

    pip install -e . && python tools/qualify_sm120.py [--out sm120_qualification.json] [--quick] [--device N]

Steps, each with its own time limit so the whole run stays under 15 minutes on one GPU:
  1. the self-test (python -m deep_gemm_sm120.selftest): every block-scaled atom in both scale encodings, the
     special scale values, one case per kernel family;
  2. the GPU tests that prove the block-scaled paths (the atoms, the FP8 / FP4 GEMMs, the MQA logits, the
     self-test's own) and every requires_sm120 test, in the encoding the device picks and in the replicated one;
  3. compute-sanitizer memcheck and racecheck on a small slice of the block-scaled GEMM driver (when
     compute-sanitizer is on PATH);
  4. the block-scaled GEMM benchmark (--quick), both encodings timed in one run.
On a GPU that is not SM120 the kit runs the sm_90 emulation (DG_SM120_EMULATE=1, on the qualification H200) and
the report says so in its first line: those numbers are not SM120 results. docs/qualification.md says what each
result would change.
Exit: 0 every step passed, 1 a step failed (the report says which), 2 could not run (no GPU, no package).
Needs the package installed (pip install -e .) and a GPU; stdlib otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXIT_OK, EXIT_FAILED, EXIT_COULD_NOT_RUN = 0, 1, 2
TAIL = 6000  # characters of each step's output kept in the report

GPU_TESTS = [
    "tests/test_block_scaled_atoms_gpu.py",
    "tests/test_selftest_gpu.py",
    "tests/test_fp8_fp4_gemm_gpu.py",
    "tests/test_fp32_scales_gpu.py",
    "tests/test_mqa_logits_gpu.py",
    "tests/test_paged_mqa_logits_gpu.py",
    "tests/test_sparse_mqa_logits_gpu.py",
]
BUDGET = 14 * 60  # seconds for every step together: the kit promises under 15 minutes


def probe(env: dict) -> dict:
    """Facts from a child interpreter (the kit itself never imports torch): GPU, capability, package."""
    code = (
        "import json, torch\n"
        "ok = torch.cuda.is_available()\n"
        "out = {'cuda': ok}\n"
        "if ok:\n"
        "    out['gpu'] = torch.cuda.get_device_name(); out['capability'] = list(torch.cuda.get_device_capability())\n"
        "try:\n"
        "    import deep_gemm_sm120 as dg; out['package'] = dg.__version__\n"
        "except Exception as e:\n"
        "    out['package_error'] = f'{type(e).__name__}: {e}'\n"
        "print(json.dumps(out))\n"
    )
    try:
        p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:  # a hung driver: the kit could not run
        return {"cuda": False, "error": "probing the GPU took over 300 s"}
    if p.returncode == 0:
        try:
            return json.loads(p.stdout.strip().splitlines()[-1])
        except (IndexError, ValueError):
            pass
    return {"cuda": False, "error": (p.stdout + p.stderr)[-2000:]}


def step(name: str, cmd: list[str], env: dict, limit: int, deadline: float, parse=None) -> dict:
    t0 = time.perf_counter()
    limit = int(max(10, min(limit, deadline - t0)))
    try:
        p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=limit)
        rc, out = p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        rc, out = None, f"{_text(e.stdout)}{_text(e.stderr)}\n[stopped after {limit} s]"
    except OSError as e:  # the command could not start: a failed step, said so
        rc, out = None, f"could not start {cmd[0]}: {e}"
    row = {"step": name, "command": " ".join(cmd), "rc": rc, "seconds": round(time.perf_counter() - t0, 1)}
    row["passed"] = rc == 0
    row["output_tail"] = out[-TAIL:]
    if parse is not None:
        row.update(parse(out))
    print(f"  {name}: {'pass' if row['passed'] else 'FAIL'} ({row['seconds']} s)", flush=True)
    return row


def _text(data) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else (data or "")


def pytest_summary(out: str) -> dict:
    lines = [ln for ln in out.splitlines() if ln.strip()]
    last = next((ln for ln in reversed(lines) if " passed" in ln or " failed" in ln or " error" in ln), "")
    return {"summary": last.strip("= "), "failures": [ln for ln in lines if ln.startswith(("FAILED", "ERROR"))][:40]}


def sanitizer_summary(out: str) -> dict:
    lines = out.splitlines()
    return {
        "summary": next((ln for ln in reversed(lines) if "ERROR SUMMARY" in ln or "RACECHECK SUMMARY" in ln), ""),
        "cases": [ln for ln in lines if ln.startswith("sanitize")][:40],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="qualify_sm120.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="sm120_qualification.json", help="the report file (default %(default)s)")
    ap.add_argument("--device", type=int, default=None, help="CUDA device index (CUDA_VISIBLE_DEVICES)")
    ap.add_argument("--quick", action="store_true", help="fewer tests (the atoms, the self-test, one GEMM file)")
    ap.add_argument("--no-bench", action="store_true")
    ap.add_argument("--no-sanitizers", action="store_true")
    args = ap.parse_args(argv)
    # the checkout's package first (a plain checkout with the runtime built in place works like an install)
    host = os.path.join(ROOT, "host")
    env = dict(
        os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=os.pathsep.join(filter(None, [host, os.environ.get("PYTHONPATH")]))
    )
    if args.device is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(args.device)
    t0 = time.perf_counter()
    facts = probe(env)
    if not facts.get("cuda"):
        print("qualify_sm120: could not run: no CUDA GPU was found", file=sys.stderr)
        return EXIT_COULD_NOT_RUN
    if "package" not in facts:
        print(f"qualify_sm120: could not run: {facts.get('package_error')}; run `pip install -e .`", file=sys.stderr)
        return EXIT_COULD_NOT_RUN
    sm120 = facts["capability"][0] == 12
    if not sm120 and tuple(facts["capability"]) != (9, 0):
        cap = ".".join(map(str, facts["capability"]))
        print(
            f"qualify_sm120: could not run: {facts['gpu']} is sm {cap}; the kit needs SM120 (or sm_90 for the emulation)",
            file=sys.stderr,
        )
        return EXIT_COULD_NOT_RUN
    env.pop("DG_SM120_SCALE_ENCODING", None)  # the first steps test what the device picks itself
    if not sm120:
        env["DG_SM120_EMULATE"] = "1"
    label = (
        f"SM120 silicon: {facts['gpu']} (sm {facts['capability'][0]}.{facts['capability'][1]})"
        if sm120
        else f"NOT SM120: {facts['gpu']} runs the sm_90 emulation of the SM120 atoms; no result here is an SM120 result"
    )
    print(f"qualify_sm120: {label}", flush=True)
    work = tempfile.mkdtemp(prefix="sm120-qual-")
    path = os.path.abspath(args.out)
    report = {
        "label": label,
        "sm120": sm120,
        "verdict": "incomplete",  # until the last step ends: a run that is stopped still leaves its steps
        "failed_steps": [],
        "gpu": facts["gpu"],
        "capability": facts["capability"],
        "package_version": facts["package"],
        "commit": _commit(),
        "host": {"python": platform.python_version(), "platform": platform.platform()},
        "selftest": None,
        "steps": [],
        "seconds": 0.0,
    }
    steps = report["steps"]
    try:  # the report exists (and says "incomplete") before the first step: a run stopped in it leaves no stale file
        write_report(path, report)
    except OSError as e:
        shutil.rmtree(work, ignore_errors=True)
        print(f"qualify_sm120: could not run: cannot write the report {path}: {e}", file=sys.stderr)
        return EXIT_COULD_NOT_RUN

    def run(row: dict) -> None:
        steps.append(row)
        report["failed_steps"] = [s["step"] for s in steps if not s["passed"]]
        report["seconds"] = round(time.perf_counter() - t0, 1)
        write_report(path, report)

    try:
        deadline = t0 + BUDGET
        st_json = os.path.join(work, "selftest.json")
        cmd = [sys.executable, "-m", "deep_gemm_sm120.selftest", "--json", st_json]
        row = step("selftest", cmd, env, 240, deadline)
        report["selftest"] = _load_result(st_json, row)
        run(row)
        tests = GPU_TESTS[:3] if args.quick else GPU_TESTS
        pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        run(step("gpu tests", [*pytest, "-m", "cuda", *tests], env, 240, deadline, pytest_summary))
        rep = dict(env, DG_SM120_SCALE_ENCODING="replicated")
        sel = [t for t in tests if "selftest" not in t]
        run(step("gpu tests (replicated)", [*pytest, "-m", "cuda", *sel], rep, 240, deadline, pytest_summary))
        # every test that needs SM120 silicon (skipped, and said so, elsewhere)
        run(
            step(
                "requires_sm120 tests", [*pytest, "-m", "requires_sm120", "tests/"], env, 120, deadline, pytest_summary
            )
        )
        if not args.no_sanitizers and shutil.which("compute-sanitizer"):
            for tool in ("memcheck", "racecheck"):
                cmd = ["compute-sanitizer", "--tool", tool, "--error-exitcode", "9"]
                if tool == "racecheck":
                    cmd += ["--racecheck-report", "all"]
                cmd += [sys.executable, "tests/sanitize_fp8_fp4_gemm.py"]  # the block-scaled slice
                run(step(tool, cmd, env, 150, deadline, sanitizer_summary))
        elif not args.no_sanitizers:
            run({"step": "sanitizers", "passed": True, "skipped": "compute-sanitizer is not on PATH"})
        if not args.no_bench:
            bench_json = os.path.join(work, "bench.json")
            cmd = [sys.executable, "benchmarks/bench_fp8_fp4_gemm.py", "--quick", "--json", bench_json]
            row = step("benchmark", [*cmd, "--encodings", "selectors,replicated"], env, 180, deadline)
            row["result"] = _load_result(bench_json, row)
            run(row)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    failed = report["failed_steps"]
    report["verdict"] = "fail" if failed else "pass"
    report["seconds"] = round(time.perf_counter() - t0, 1)
    write_report(path, report)
    print(f"qualify_sm120: {report['verdict'].upper()} in {report['seconds']} s; report: {path}")
    if failed:
        print(f"  failed: {', '.join(failed)}")
    return EXIT_FAILED if failed else EXIT_OK


def write_report(path: str, report: dict) -> None:
    """Replace the report file whole (a reader never sees half of one): before the first step, after every step
    and at the end. A failed write leaves no temporary file."""
    tmp = f"{path}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(report, fh, indent=1)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _load_result(path: str, row: dict):
    """A step's JSON result (None when it wrote none). One it left unreadable (stopped mid-write) fails the step
    and says why, instead of stopping the kit."""
    if not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError) as e:
        row["passed"] = False
        row["result_error"] = f"{type(e).__name__}: {e}"
        return None


def _commit() -> str:
    try:
        p = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return ""
    return p.stdout.strip() if p.returncode == 0 else ""


if __name__ == "__main__":
    sys.exit(main())
