#!/usr/bin/env python3
"""SM120 compile gate: every device-layer header on its own and every kernel instantiation the host can
choose, for sm_120a / sm_120f / sm_121a / sm_90a, under one or more CUDA toolchains.

    python tools/compile_gate.py [--quick] [--nvcc PATH ...] [--targets sm_120a,...] [--json out.json] [-j N]

Checks per kernel: ptxas resources (static + dynamic smem <= 101376 B, no spill stores/loads, no stack
frame) and SASS (required opcodes such as HMMA.16816.F32.BF16 and UTMALDG; forbidden LDL/STL and
CALL.ABS.NOINC, the emulated-TMA call). Header checks: each header compiles alone with no include path
(so relative includes and the CUDA toolkit are all it needs) and includes only allowed toolkit headers.
Exit: 0 all pass, 1 a check failed, 3 no usable toolchain / bad arguments. Stdlib only.
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEVICE_LAYER = os.path.join(ROOT, "device_layer")
TARGETS = ("sm_120a", "sm_120f", "sm_121a", "sm_90a")
SMEM_LIMIT = 101376
ALLOWED_SYSTEM_INCLUDES = {"cuda.h", "cuda_bf16.h", "cuda_fp8.h", "cuda_fp4.h", "cstdint", "cstddef",
                           "type_traits"}
FORBIDDEN_OPCODES = (re.compile(r"^LDL(\.|$)"), re.compile(r"^STL(\.|$)"), re.compile(r"^CALL\.ABS\.NOINC"))
# Opcodes each kernel family (":kind" for block-scaled kernels) must contain, per target class.
REQUIRED_OPCODES = {
    "bf16_gemm_nt": {"sm120": ("HMMA.16816.F32.BF16", "UTMALDG"), "sm90": ("HMMA.16816.F32.BF16", "UTMALDG")},
    # SM120: the full-rate block-scaled MMAs. sm_90a: the emulation (unscaled e4m3 MMAs, lowered to f16 HMMA).
    "fp8_fp4_gemm_1d1d:mxfp8": {"sm120": ("QMMA.SF.16832.F32.E4M3.E4M3.E8", "UTMALDG"),
                                "sm90": ("HMMA.16816.F32", "UTMALDG")},
    "fp8_fp4_gemm_1d1d:mxfp4": {"sm120": ("OMMA.SF.16864.F32.E2M1.E2M1.E8", "UTMALDG"),
                                "sm90": ("HMMA.16816.F32", "UTMALDG")},
    "fp8_fp4_gemm_1d1d:nvfp4": {"sm120": ("OMMA.SF.16864.F32.E2M1.E2M1.UE4M3.4X", "UTMALDG"),
                                "sm90": ("HMMA.16816.F32", "UTMALDG")},
    "fp8_fp4_gemm_1d1d:e4m3_e2m1": {"sm120": ("QMMA.SF.16832.F32.E4M3.E2M1.E8", "UTMALDG"),
                                    "sm90": ("HMMA.16816.F32", "UTMALDG")},
    "fp8_fp4_gemm_1d1d:e2m1_e4m3": {"sm120": ("QMMA.SF.16832.F32.E2M1.E4M3.E8", "UTMALDG"),
                                    "sm90": ("HMMA.16816.F32", "UTMALDG")},
}
# Unscaled FP8/FP4 MMAs accumulate at half rate on GeForce SM120: block-scaled kernels must never contain them.
_UNSCALED_LOW_PRECISION_MMA = re.compile(r"^(QMMA\.16832|OMMA\.16864)")
_BLOCK_SCALED_KINDS = ("mxfp8", "mxfp4", "nvfp4", "e4m3_e2m1", "e2m1_e4m3")
EXTRA_FORBIDDEN = {f"fp8_fp4_gemm_1d1d:{k}": {"sm120": (_UNSCALED_LOW_PRECISION_MMA,)} for k in _BLOCK_SCALED_KINDS}
# Families whose sm_90a build is the qualification emulation (up to four e4m3 MMAs per FP4 atom): its
# spills are reported, not failed. The SM120 builds of the same kernels must stay spill-free.
EMULATION_SPILLS_ALLOWED = {"sm90": {f"fp8_fp4_gemm_1d1d:{k}" for k in _BLOCK_SCALED_KINDS}}
_SASS_OP = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)")


@dataclass(frozen=True)
class Toolchain:
    nvcc: str
    version: str
    nvdisasm: str | None


@dataclass
class Result:
    kind: str          # header | kernel
    name: str
    target: str
    toolchain: str     # version
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


def check_opcodes(opcodes: list[str], required: tuple[str, ...],
                  forbidden_patterns: tuple[re.Pattern, ...] = FORBIDDEN_OPCODES) -> tuple[list[str], list[str]]:
    """(missing required opcode prefixes, forbidden opcodes present)."""
    missing = [r for r in required if not any(op.startswith(r) for op in opcodes)]
    forbidden = sorted({op for op in opcodes if any(p.match(op) for p in forbidden_patterns)})
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


# ---------------------------------------------------------------- toolchains

def _version(nvcc: str) -> str | None:
    try:
        p = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"release \d+\.\d+, V(\d+\.\d+\.\d+)", p.stdout)
    return m.group(1) if m else None


def _nvdisasm_near(nvcc: str) -> str | None:
    cands = [os.path.join(os.path.dirname(nvcc), "nvdisasm"), shutil.which("nvdisasm") or ""]
    for p in sys.path:
        cands.append(os.path.join(p, "nvidia", "cu13", "bin", "nvdisasm"))
    return next((c for c in cands if c and os.path.isfile(c) and os.access(c, os.X_OK)), None)


def discover_toolchains(explicit: list[str]) -> list[Toolchain]:
    """Explicit --nvcc paths, else the system toolkit plus any CUDA-wheel toolchain on sys.path."""
    cands = list(explicit)
    if not cands:
        cands += [shutil.which("nvcc") or "", "/usr/local/cuda/bin/nvcc"]
        cands += [os.path.join(p, "nvidia", "cu13", "bin", "nvcc") for p in sys.path]
    seen, out = set(), []
    for c in cands:
        if not c or not os.path.isfile(c):
            continue
        real = os.path.realpath(c)
        v = _version(real)
        if v is None or real in seen or any(t.version == v for t in out):
            continue
        seen.add(real)
        out.append(Toolchain(real, v, _nvdisasm_near(real)))
    return out


# ---------------------------------------------------------------- running

def _gencode(target: str) -> list[str]:
    arch = target[3:]
    return ["-gencode", f"arch=compute_{arch},code=sm_{arch}"]


def compile_source(tc: Toolchain, source: str, target: str, workdir: str, include_dir: str | None) -> tuple[bool, str, str]:
    """(ok, log, cubin path) for one translation unit."""
    src = os.path.join(workdir, "tu.cu")
    with open(src, "w") as fh:
        fh.write(source)
    cubin = os.path.join(workdir, "tu.cubin")
    cmd = [tc.nvcc, "-cubin", "-std=c++17", "-O3", "--expt-relaxed-constexpr", "-Xptxas", "-v", *_gencode(target),
           "-o", cubin, src]
    if include_dir:
        cmd.insert(1, f"-I{include_dir}")
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        return False, "nvcc timed out after 600 s", cubin
    return p.returncode == 0, (p.stdout + p.stderr).strip(), cubin


def check_kernel(tc: Toolchain, name: str, family: str, source: str, target: str, dynamic_smem: int,
                 include_dir: str = DEVICE_LAYER) -> Result:
    r = Result("kernel", name, target, tc.version)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gate.") as wd:
        ok, log, cubin = compile_source(tc, source, target, wd, include_dir)
        if not ok:
            r.verdict = "compile-error"
            r.problems.append(_last_error(log))
            r.seconds = time.perf_counter() - t0
            return r
        res = parse_ptxas(log)
        r.regs, r.stack = res["regs"], res["stack"]
        r.spill_stores, r.spill_loads = res["spill_stores"], res["spill_loads"]
        r.smem = res["smem"] + dynamic_smem
        if r.smem > SMEM_LIMIT:
            r.problems.append(f"shared memory {r.smem} B > {SMEM_LIMIT} B")
        cls = "sm120" if target.startswith("sm_12") else "sm90"
        emulation_spills = family in EMULATION_SPILLS_ALLOWED.get(cls, set())
        if (r.spill_stores or r.spill_loads) and not emulation_spills:
            r.problems.append(f"spills: {r.spill_stores} B stored, {r.spill_loads} B loaded")
        if r.stack and not emulation_spills:
            r.problems.append(f"local memory: {r.stack} B stack frame")
        if tc.nvdisasm is None:
            r.problems.append("nvdisasm not found: SASS not checked")
        else:
            p = subprocess.run([tc.nvdisasm, "-c", cubin], capture_output=True, text=True)
            if p.returncode != 0:
                r.problems.append(f"nvdisasm failed: {_last_error(p.stderr)}")
            else:
                required = REQUIRED_OPCODES.get(family, {}).get(cls, ())
                forbidden = EXTRA_FORBIDDEN.get(family, {}).get(cls, ())
                if not emulation_spills:
                    forbidden = FORBIDDEN_OPCODES + forbidden
                else:  # emulation build: local memory is allowed, the emulated-TMA call is not
                    forbidden = FORBIDDEN_OPCODES[2:] + forbidden
                r.missing_opcodes, r.forbidden_opcodes = check_opcodes(sass_opcodes(p.stdout), required, forbidden)
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


def load_configs():
    """host/deep_gemm_sm120/configs.py, loaded by path: the same list the host heuristics choose from."""
    path = os.path.join(ROOT, "host", "deep_gemm_sm120", "configs.py")
    spec = importlib.util.spec_from_file_location("_dg_sm120_configs", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(mod)
    return mod


def kernel_jobs(quick: bool) -> list[tuple[str, str, str, int]]:
    """(name, family, source, dynamic smem) for every host-reachable instantiation; with `quick`, one per
    (family, tile, kind, layout, swap): register and smem use depend on those, rarely on output type or C."""
    cfgmod = load_configs()
    specs = cfgmod.all_specs()
    if quick:  # first instantiation of each (family, tile, kind, layout, swap)
        seen, picked = set(), []
        for s in specs:
            key = (s.family, getattr(s, "config", None), getattr(s, "gemm_type", None), getattr(s, "layout", None),
                   getattr(s, "swap_ab", None), getattr(s, "kind", None))
            if key not in seen:
                seen.add(key)
                picked.append(s)
        specs = picked
    return [(s.name, s.family + (f":{s.kind}" if hasattr(s, "kind") else ""), s.source(), s.smem_bytes)
            for s in specs]


def run_gate(toolchains: list[Toolchain], targets: tuple[str, ...], quick: bool, jobs: int,
             log=print) -> list[Result]:
    work = []
    for tc in toolchains:
        for t in targets:
            for h in headers():
                work.append(("header", tc, h, t))
            for name, family, src, smem in kernel_jobs(quick):
                work.append(("kernel", tc, (name, family, src, smem), t))
    results: list[Result] = []
    with cf.ThreadPoolExecutor(max_workers=max(1, jobs)) as ex:
        futs = []
        for kind, tc, item, t in work:
            if kind == "header":
                futs.append(ex.submit(check_header, tc, item, t))
            else:
                futs.append(ex.submit(check_kernel, tc, item[0], item[1], item[2], t, item[3]))
        for f in cf.as_completed(futs):
            r = f.result()
            results.append(r)
            if r.verdict != "pass":
                log(f"  {r.verdict:<13} {r.kind} {r.name} [{r.target}, CUDA {r.toolchain}]: {'; '.join(r.problems)}")
    results.sort(key=lambda r: (r.kind, r.name, r.toolchain, r.target))
    return results


def table(results: list[Result]) -> str:
    rows = [f"{'kernel':<44} {'target':<8} {'cuda':<9} {'regs':>4} {'smem':>7} {'spill':>6} {'stack':>5}  verdict"]
    for r in results:
        if r.kind != "kernel":
            continue
        spill = (r.spill_stores or 0) + (r.spill_loads or 0)
        rows.append(f"{r.name:<44} {r.target:<8} {r.toolchain:<9} {r.regs if r.regs is not None else '-':>4} "
                    f"{r.smem if r.smem is not None else '-':>7} {spill:>6} {r.stack if r.stack is not None else '-':>5}  "
                    f"{r.verdict}")
    hdr = [r for r in results if r.kind == "header"]
    bad = [r for r in hdr if r.verdict != "pass"]
    rows.append(f"headers: {len(hdr) - len(bad)}/{len(hdr)} header x target x toolchain compiles pass")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nvcc", action="append", default=[], help="toolchain nvcc (repeatable); default: discover")
    ap.add_argument("--targets", default=",".join(TARGETS))
    ap.add_argument("--quick", action="store_true", help="one instantiation per tile configuration (headers still all)")
    ap.add_argument("--json", help="write results here")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 2)
    a = ap.parse_args(argv)
    targets = tuple(t for t in a.targets.split(",") if t)
    bad = [t for t in targets if not re.match(r"^sm_\d+[af]?$", t)]
    if bad:
        print(f"compile_gate: bad target(s) {', '.join(bad)}", file=sys.stderr)
        return 3
    tcs = discover_toolchains(a.nvcc)
    if not tcs:
        print("compile_gate: no CUDA toolchain found (install CUDA >= 13.0 or the nvidia-cuda-nvcc wheel)",
              file=sys.stderr)
        return 3
    print("toolchains: " + ", ".join(f"CUDA {t.version} ({t.nvcc}; nvdisasm {t.nvdisasm or 'missing'})" for t in tcs))
    t0 = time.perf_counter()
    results = run_gate(tcs, targets, a.quick, a.jobs)
    print(table(results))
    failed = [r for r in results if r.verdict != "pass"]
    by_tc = {t.version: sum(1 for r in failed if r.toolchain == t.version) for t in tcs}
    for v, n in by_tc.items():
        if n:
            print(f"note: toolchain CUDA {v} has {n} failing check(s)")
    print(f"compile gate: {len(results) - len(failed)}/{len(results)} checks pass in {time.perf_counter() - t0:.0f} s")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"schema_version": 1, "toolchains": [asdict(t) for t in tcs],
                       "results": [asdict(r) for r in results]}, fh, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
