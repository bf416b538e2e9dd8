#!/usr/bin/env python3
"""SM120 compile gate: every device-layer header on its own and every kernel instantiation the host can
choose, for sm_120a / sm_120f / sm_121a / sm_90a, under one or more CUDA toolchains.

    python tools/compile_gate.py [--quick | --smoke] [--families F,...] [--nvcc PATH ...] [--targets sm_120a,...]
                                 [--json out.json] [-j N] [--progress | --no-progress] [--list]

The instantiations and their SASS rules come from the kernel-family registry (host/deep_gemm_sm120/families,
loaded by path through tools/host_decls.py: no torch needed). Checks per kernel: ptxas resources (static +
dynamic smem within SM120's per-block limit, core/limits.py; no spill stores/loads, no stack frame) and SASS (the family's required opcodes,
e.g. HMMA.16816.F32.BF16 and UTMALDG; ACQBULK where the family declares PDL; forbidden LDL/STL and
CALL.ABS.NOINC, the emulated-TMA call, plus the family's own). Header checks: each header compiles alone with
no include path (so relative includes and the CUDA toolkit are all it needs) and includes only allowed toolkit
headers. nvcc and nvdisasm are found as the JIT finds them (core/toolchain.py).
Exit: 0 all pass, 1 a check failed, 3 bad arguments or no usable toolchain (the JSON's exit_code says the same).
Stdlib only.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field

import host_decls

from vendorkit.argparsing import UsageParser
from vendorkit.errors import UsageError

ROOT = host_decls.ROOT
# the tree the JIT compiles: $DG_SM120_DEVICE_LAYER when set (a family in progress, a benchmark's edited copy)
DEVICE_LAYER = os.environ.get("DG_SM120_DEVICE_LAYER") or os.path.join(ROOT, "device_layer")
TARGETS = ("sm_120a", "sm_120f", "sm_121a", "sm_90a")
_limits = host_decls.load("core.limits")
_toolchain = host_decls.load("core.toolchain")
_progress = host_decls.load("core.progress")
SMEM_LIMIT = _limits.SMEM_LIMIT
Toolchain = _toolchain.Toolchain
ALLOWED_SYSTEM_INCLUDES = {
    "cuda.h",
    "cuda_bf16.h",
    "cuda_fp16.h",
    "cuda_fp8.h",
    "cuda_fp4.h",
    "cstdint",
    "cstddef",
    "type_traits",
}
# griddepcontrol.wait: a family that declares PDL must wait before touching global memory
PDL_WAIT_OPCODE = "ACQBULK"
EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 3
_SASS_OP = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)")


@dataclass
class Result:
    kind: str  # header | kernel
    name: str
    target: str
    toolchain: str  # version
    verdict: str = "pass"
    regs: int | None = None
    smem: int | None = None
    stack: int | None = None
    spill_stores: int | None = None
    spill_loads: int | None = None
    missing_opcodes: list[str] = field(default_factory=list)
    forbidden_opcodes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0


# ---------------------------------------------------------------- parsing (pure, unit-tested)


def parse_ptxas(log: str) -> dict:
    """Resources of the (single) entry function in a `-Xptxas -v` log."""
    out = {"regs": 0, "smem": 0, "stack": 0, "spill_stores": 0, "spill_loads": 0}
    for m in re.finditer(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", log):
        out["stack"] = max(out["stack"], int(m.group(1)))
        out["spill_stores"] = max(out["spill_stores"], int(m.group(2)))
        out["spill_loads"] = max(out["spill_loads"], int(m.group(3)))
    for m in re.finditer(r"Used (\d+) registers", log):
        out["regs"] = max(out["regs"], int(m.group(1)))
    for m in re.finditer(r"(\d+) bytes smem", log):
        out["smem"] = max(out["smem"], int(m.group(1)))
    return out


def sass_opcodes(sass: str) -> list[str]:
    return _SASS_OP.findall(sass)


def check_opcodes(
    opcodes: list[str], required: tuple[str, ...], forbidden_patterns: tuple[str, ...] = ()
) -> tuple[list[str], list[str]]:
    """(missing required opcode prefixes, forbidden opcodes present)."""
    pats = [re.compile(p) for p in forbidden_patterns]
    missing = [r for r in required if not any(op.startswith(r) for op in opcodes)]
    forbidden = sorted({op for op in opcodes if any(p.match(op) for p in pats)})
    return missing, forbidden


def include_problems(path: str, text: str) -> list[str]:
    """Relative quoted includes that exist, or allowed toolkit headers; nothing else."""
    problems = []
    for m in re.finditer(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', text, re.M):
        kind, inc = m.groups()
        if kind == "<":
            if inc not in ALLOWED_SYSTEM_INCLUDES:
                problems.append(f"includes <{inc}> (allowed: {', '.join(sorted(ALLOWED_SYSTEM_INCLUDES))})")
        elif os.path.isabs(inc) or not os.path.isfile(os.path.join(os.path.dirname(path), inc)):
            problems.append(f'includes "{inc}", which is not a relative path inside device_layer/')
    return problems


# ---------------------------------------------------------------- toolchains (core/toolchain.py, shared with the JIT)


def discover_toolchains(explicit: list[str]) -> list[Toolchain]:
    """Explicit --nvcc paths, else every distinct CUDA version found (system, CUDA wheels, $DG_SM120_NVCC)."""
    return _toolchain.discover(tuple(explicit))


# ---------------------------------------------------------------- running


def compile_source(
    tc: Toolchain, source: str, target: str, workdir: str, include_dir: str | None
) -> tuple[bool, str, str]:
    """(ok, log, cubin path) for one translation unit."""
    src = os.path.join(workdir, "tu.cu")
    with open(src, "w") as fh:
        fh.write(source)
    cubin = os.path.join(workdir, "tu.cubin")
    cmd = _toolchain.compile_command(tc.nvcc, src, cubin, target, include_dir)
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        return False, "nvcc timed out after 600 s", cubin
    return p.returncode == 0, (p.stdout + p.stderr).strip(), cubin


@dataclass(frozen=True)
class KernelJob:
    name: str
    family: str
    source: str
    dynamic_smem: int
    rules: object  # core.registry.GateRules
    pdl: bool


def check_kernel(tc: Toolchain, job: KernelJob, target: str, include_dir: str = DEVICE_LAYER) -> Result:
    r = Result("kernel", job.name, target, tc.version)
    t0 = time.perf_counter()
    rules = job.rules
    with tempfile.TemporaryDirectory(prefix="gate.") as wd:
        ok, log, cubin = compile_source(tc, job.source, target, wd, include_dir)
        if not ok:
            r.verdict = "compile-error"
            r.problems.append(_last_error(log))
            r.seconds = time.perf_counter() - t0
            return r
        res = parse_ptxas(log)
        r.regs, r.stack = res["regs"], res["stack"]
        r.spill_stores, r.spill_loads = res["spill_stores"], res["spill_loads"]
        r.smem = res["smem"] + job.dynamic_smem
        if r.smem > SMEM_LIMIT:
            r.problems.append(f"shared memory {r.smem} B > {SMEM_LIMIT} B")
        spills_ok = rules.spills_allowed(target)
        if (r.spill_stores or r.spill_loads) and not spills_ok:
            r.problems.append(f"spills: {r.spill_stores} B stored, {r.spill_loads} B loaded")
        if r.stack and not spills_ok:
            r.problems.append(f"local memory: {r.stack} B stack frame")
        p = subprocess.run([tc.nvdisasm, "-c", cubin], capture_output=True, text=True) if tc.nvdisasm else None
        if p is None:  # SASS rules cannot be checked: a failure, never a silent pass
            r.problems.append(_toolchain.nvdisasm_hint(tc.version))
        elif p.returncode != 0:
            r.problems.append(f"nvdisasm failed: {_last_error(p.stderr)}")
        else:
            required = rules.required_for(target) + ((PDL_WAIT_OPCODE,) if job.pdl else ())
            r.missing_opcodes, r.forbidden_opcodes = check_opcodes(
                sass_opcodes(p.stdout), required, rules.forbidden_for(target)
            )
            if r.missing_opcodes:
                r.problems.append("missing opcodes: " + ", ".join(r.missing_opcodes))
            if r.forbidden_opcodes:
                r.problems.append("forbidden opcodes: " + ", ".join(r.forbidden_opcodes))
    if r.problems:
        r.verdict = "fail"
    r.seconds = time.perf_counter() - t0
    return r


def check_header(tc: Toolchain, rel: str, target: str) -> Result:
    r = Result("header", rel, target, tc.version)
    t0 = time.perf_counter()
    path = os.path.join(DEVICE_LAYER, rel)
    with open(path, encoding="utf-8") as fh:
        r.problems += include_problems(path, fh.read())
    with tempfile.TemporaryDirectory(prefix="gate.") as wd:
        ok, log, _ = compile_source(tc, f'#include "{path}"\n', target, wd, include_dir=None)
        if not ok:
            r.problems.append(_last_error(log))
    if r.problems:
        r.verdict = "fail" if ok else "compile-error"
    r.seconds = time.perf_counter() - t0
    return r


def _last_error(log: str) -> str:
    lines = [ln for ln in log.splitlines() if "error" in ln.lower()] or log.splitlines() or ["(no output)"]
    return lines[0][-300:]


def headers() -> list[str]:
    out = []
    for dirpath, _, files in os.walk(DEVICE_LAYER):
        for f in files:
            if f.endswith(".cuh"):
                out.append(os.path.relpath(os.path.join(dirpath, f), DEVICE_LAYER).replace(os.sep, "/"))
    return sorted(out)


def kernel_jobs(quick: bool, families: tuple[str, ...] | None = None) -> list[KernelJob]:
    """Every instantiation the host API can launch, from the family registry; with `quick`, the first of each
    family's quick_key (register and smem use depend on tile, kind and layout, rarely on output type or C)."""
    reg = host_decls.registry()
    unknown = sorted(set(families or ()) - set(reg.by_name))
    if unknown:
        raise UsageError(f"unknown families {unknown}; known: {sorted(reg.by_name)}")
    jobs, seen = [], set()
    for fam in reg.families:
        if families and fam.name not in families:
            continue
        for spec in fam.specs():
            key = (fam.name, fam.quick_key(spec))
            if quick and key in seen:
                continue
            seen.add(key)
            jobs.append(KernelJob(spec.name, fam.name, spec.source(), spec.smem_bytes, fam.gate(spec), fam.pdl))
    return jobs


def smoke_work(tc: Toolchain, targets: tuple[str, ...], families: tuple[str, ...] | None) -> list[tuple]:
    """The default test run's slice: every family's first instantiation on every target, and every header once
    (headers dealt round-robin over the targets); one toolchain."""
    firsts, seen = [], set()
    for job in kernel_jobs(True, families):
        if job.family not in seen:
            seen.add(job.family)
            firsts.append(job)
    work = [("kernel", tc, job, t) for job in firsts for t in targets]
    if families is None:
        work += [("header", tc, h, targets[i % len(targets)]) for i, h in enumerate(headers())]
    return work


def run_gate(
    toolchains: list[Toolchain],
    targets: tuple[str, ...],
    quick: bool,
    jobs: int,
    log=print,
    families: tuple[str, ...] | None = None,
    progress: bool | None = None,
    smoke: bool = False,
) -> list[Result]:
    work = []
    kernels = [] if smoke else kernel_jobs(quick, families)
    for tc in [] if smoke else toolchains:
        for t in targets:
            if families is None:
                work += [("header", tc, h, t) for h in headers()]
            work += [("kernel", tc, job, t) for job in kernels]
    if smoke:
        work = smoke_work(toolchains[0], targets, families)
    results: list[Result] = []
    bar = _progress.Progress(len(work), "compile gate", enabled=progress)
    with cf.ThreadPoolExecutor(max_workers=max(1, jobs)) as ex:
        futs = [
            ex.submit(check_header, tc, item, t) if kind == "header" else ex.submit(check_kernel, tc, item, t)
            for kind, tc, item, t in work
        ]
        for f in cf.as_completed(futs):
            r = f.result()
            results.append(r)
            bar.step(f"{r.verdict} {r.name} [{r.target}, {r.toolchain}]")
            if r.verdict != "pass":
                log(f"  {r.verdict:<13} {r.kind} {r.name} [{r.target}, CUDA {r.toolchain}]: {'; '.join(r.problems)}")
    bar.close()
    results.sort(key=lambda r: (r.kind, r.name, r.toolchain, r.target))
    return results


def table(results: list[Result]) -> str:
    rows = [f"{'kernel':<44} {'target':<8} {'cuda':<9} {'regs':>4} {'smem':>7} {'spill':>6} {'stack':>5}  verdict"]
    for r in results:
        if r.kind != "kernel":
            continue
        spill = (r.spill_stores or 0) + (r.spill_loads or 0)
        rows.append(
            f"{r.name:<44} {r.target:<8} {r.toolchain:<9} {r.regs if r.regs is not None else '-':>4} "
            f"{r.smem if r.smem is not None else '-':>7} {spill:>6} {r.stack if r.stack is not None else '-':>5}  "
            f"{r.verdict}"
        )
    hdr = [r for r in results if r.kind == "header"]
    bad = [r for r in hdr if r.verdict != "pass"]
    rows.append(f"headers: {len(hdr) - len(bad)}/{len(hdr)} header x target x toolchain compiles pass")
    return "\n".join(rows)


def _parser() -> argparse.ArgumentParser:
    ap = UsageParser(
        prog="compile_gate.py",
        description=(
            "SM120 compile gate: every device-layer header on its own and every kernel instantiation the host can "
            "choose, for sm_120a / sm_120f / sm_121a / sm_90a, under one or more CUDA toolchains (ptxas resources, "
            "no spills or local memory, the SASS opcodes each family requires and forbids)."
        ),
        epilog="Exit: 0 all pass, 1 a check failed, 3 bad arguments or no usable toolchain (the JSON's exit_code "
        "says the same).",
    )
    ap.add_argument("--nvcc", action="append", default=[], help="toolchain nvcc (repeatable); default: discover")
    ap.add_argument("--targets", default=",".join(TARGETS), help="comma-separated targets (default: %(default)s)")
    ap.add_argument("--quick", action="store_true", help="one instantiation per tile configuration (headers still all)")
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="each family's first instantiation on every target and "
        "each header once, first toolchain only (the default "
        "test run)",
    )
    ap.add_argument("--families", help="comma-separated family names (default: all; headers are then skipped)")
    ap.add_argument(
        "--list", action="store_true", help="print the kernel instantiations and exit (no toolchain needed)"
    )
    ap.add_argument("--json", help="write results here (its exit_code is the process's)")
    ap.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="a progress line on stderr (default: when stderr is a terminal)",
    )
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 2, help="parallel nvcc processes")
    return ap


def _write_json(path: str | None, doc: dict) -> None:
    if path:
        with open(path, "w") as fh:
            json.dump(doc, fh, indent=1)


def main(argv: list[str] | None = None) -> int:
    json_path = None
    try:
        a = _parser().parse_args(argv)
        json_path = a.json
        targets = tuple(t for t in a.targets.split(",") if t)
        bad = [t for t in targets if not re.fullmatch(r"sm_\d+[af]?", t)]
        if bad:
            raise UsageError(f"bad target(s) {', '.join(bad)}")
        if a.jobs < 1:
            raise UsageError(f"--jobs must be >= 1, got {a.jobs}")
        families = tuple(f for f in a.families.split(",") if f) if a.families else None
        if a.quick and a.smoke:
            raise UsageError("--quick and --smoke exclude each other")
        kernels = kernel_jobs(a.quick, families)  # unknown families are a usage error before any compile
        if a.list:
            if a.smoke:
                kernels = list(
                    {w[2].name: w[2] for w in smoke_work(None, targets, families) if w[0] == "kernel"}.values()
                )
            for job in kernels:
                print(f"{job.family:<20} {job.name}  smem {job.dynamic_smem} B")
            return EXIT_OK
        tcs = discover_toolchains(a.nvcc)
        if not tcs:
            raise UsageError(
                "no CUDA toolchain found: install CUDA >= 13.0 or the nvidia-cuda-nvcc wheels, or pass --nvcc PATH"
            )
        old = [t for t in tcs if t.major_minor < _toolchain.MIN_VERSION]
        if old:
            raise UsageError(
                f"CUDA {old[0].version} at {old[0].nvcc} is older than 13.0, which the device layer "
                f"requires (drop it or pass --nvcc)"
            )
        blind = [t for t in tcs if t.nvdisasm is None]
        if blind:
            raise UsageError(f"CUDA {blind[0].version} ({blind[0].nvcc}): {_toolchain.nvdisasm_hint(blind[0].version)}")
    except UsageError as e:
        print(f"compile_gate: error: {e}", file=sys.stderr)
        _write_json(json_path, {"schema_version": 2, "exit_code": EXIT_USAGE, "errors": [str(e)], "results": []})
        return EXIT_USAGE
    if a.smoke:
        tcs = tcs[:1]
    print("toolchains: " + ", ".join(f"CUDA {t.version} ({t.nvcc}; nvdisasm {t.nvdisasm})" for t in tcs))
    t0 = time.perf_counter()
    results = run_gate(tcs, targets, a.quick, a.jobs, families=families, progress=a.progress, smoke=a.smoke)
    print(table(results))
    failed = [r for r in results if r.verdict != "pass"]
    by_tc = {t.version: sum(1 for r in failed if r.toolchain == t.version) for t in tcs}
    for v, n in by_tc.items():
        if n:
            print(f"note: toolchain CUDA {v} has {n} failing check(s)")
    print(f"compile gate: {len(results) - len(failed)}/{len(results)} checks pass in {time.perf_counter() - t0:.0f} s")
    code = EXIT_FAIL if failed else EXIT_OK
    _write_json(
        a.json,
        {
            "schema_version": 2,
            "exit_code": code,
            "toolchains": [asdict(t) for t in tcs],
            "results": [asdict(r) for r in results],
        },
    )
    return code


if __name__ == "__main__":
    sys.exit(main())
