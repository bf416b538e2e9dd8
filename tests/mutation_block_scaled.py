"""Mutation check of the block-scaled kernels, their two scale encodings and the sm_90 emulation.

Each mutant changes one spot of a *copy* of device_layer/ (DG_SM120_DEVICE_LAYER points the JIT and the tests at
it; the checkout is never edited) and states its expected outcome:
  - the GPU tests that must fail with it (killed), under the environment given (e.g. the replicated encoding);
  - what it does to the sm_120a cubin of a kernel that uses the mutated code: `changes` for kernel code, `equal`
    for code only the emulation runs (silicon never executes it, so only the emulated tests can see it), while
    the sm_90a cubin must change (the mutant is live where the tests run).
The unmutated copy must pass every selected test first (a kill means nothing otherwise). Prints one line per
mutant, expected against observed, and exits 1 when any differs.

    python tests/mutation_block_scaled.py               # everything (needs a GPU for the tests)
    python tests/mutation_block_scaled.py --cubins      # only apply each mutant and compare cubins (CPU, nvcc)
    python tests/mutation_block_scaled.py --applies     # only check that every mutant applies (what CI runs)
    python tests/mutation_block_scaled.py --only a,b
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "host"))

GEMM = "device_layer/impls/sm120_fp8_fp4_gemm_1d1d.cuh"
LANES = "device_layer/mma/sm120_scale_selectors.cuh"
EMU = "device_layer/mma/sm120_emulation.cuh"
ATOMS = "device_layer/mma/sm120_block_scaled.cuh"
FP8_TEST = "tests/test_fp8_fp4_gemm_gpu.py::test_fp8_gemm_nt[deepseek-129-200-1040]"
MXFP8_TEST = "tests/test_fp8_fp4_gemm_gpu.py::test_fp8_gemm_nt[mxfp8-129-200-1040]"
FP4_TEST = "tests/test_fp8_fp4_gemm_gpu.py::test_fp4_gemm_nt[129-200-1056-mxfp4]"
MIXED_TEST = "tests/test_fp8_fp4_gemm_gpu.py::test_mixed_fp8_fp4_gemm_nt[129-200-1056-128-e4m3_e2m1]"
ATOM_TEST = "tests/test_block_scaled_atoms_gpu.py::test_every_case_reads_its_scales_where_the_kernels_put_them"
REP = {"DG_SM120_SCALE_ENCODING": "replicated"}
SEL = {"DG_SM120_SCALE_ENCODING": "selectors"}


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str  # relative to the repository
    old: str  # must occur exactly once
    new: str
    tests: tuple[tuple[str, dict], ...]  # (pytest node, extra environment): each must fail
    sm120a: str  # "changes" | "equal"
    spec: str  # the kernel whose cubins are compared (a name from the registry)
    why: str = ""
    extra: dict = field(default_factory=dict)


MUTANTS = (
    Mutant("a_thread_id", LANES, "return kSel ? 2 * w + sfa_thread_id_of_lane(lane) : w;",
           "return kSel ? 2 * w + (1 - sfa_thread_id_of_lane(lane)) : w;", ((FP8_TEST, SEL),), "changes",
           "fp8_fp4_gemm_1d1d_mxfp8_g128_128x128_s3_w2x4_bf16", "A scale words loaded for the other m16 tile"),
    Mutant("b_thread_id", LANES, "return kSel ? j % 4 : 0;", "return kSel ? (j + 1) % 4 : 0;",
           ((FP8_TEST, SEL), (ATOM_TEST + "[mxfp8]", {})), "changes",
           "fp8_fp4_gemm_1d1d_mxfp8_g128_128x128_s3_w2x4_bf16", "thread-id-b rotated"),
    Mutant("coarse_shift", GEMM, "return kCoarse ? 8 * (kb % 4) : 0;", "return kCoarse ? 8 * ((kb + 1) % 4) : 0;",
           ((FP8_TEST, SEL), (FP8_TEST, REP)), "changes", "fp8_fp4_gemm_1d1d_mxfp8_g128_128x128_s3_w2x4_bf16",
           "1x128 scale byte of the wrong K block"),
    Mutant("mx4_step_byte", GEMM, "(kKind == ScaleKind::kMxFp4 ? 2 * (step % 2) : 0)",
           "(kKind == ScaleKind::kMxFp4 ? 0 : 0)", ((FP4_TEST, SEL), (FP4_TEST, REP)), "changes",
           "fp8_fp4_gemm_1d1d_mxfp4_g32_128x128_s3_w2x4_bf16", "MXFP4 byte-id stuck at 0"),
    Mutant("mixed_a_permutation", GEMM, "swizzle_offset<128>(row, kk * 2 + q8 / 2) + 8 * (q8 % 2))",
           "swizzle_offset<128>(row, kk * 2 + q8 / 2))", ((MIXED_TEST, SEL),), "changes",
           "fp8_fp4_gemm_1d1d_e4m3_e2m1_g128x32_128x128_s4_w2x4_bf16", "e4m3 side of a mixed MMA unpermuted"),
    Mutant("mixed_widening", ATOMS, "    return t << 2;", "    return t << 3;", ((MIXED_TEST, SEL),), "changes",
           "fp8_fp4_gemm_1d1d_e4m3_e2m1_g128x32_128x128_s4_w2x4_bf16", "e2m1 container shifted by one bit"),
    Mutant("rep_byte", LANES, "else return __byte_perm(word, 0u, byte * 0x1111u);",
           "else return __byte_perm(word, 0u, 0x0000u);", ((MXFP8_TEST, REP), (ATOM_TEST + "[mxfp8]", {})),
           "changes", "fp8_fp4_gemm_1d1d_mxfp8_g32_128x128_s3_w2x4_bf16_rep",
           "replicated 1X: always the lowest byte"),
    Mutant("rep_word", ATOMS, "replicate_scale_bytes<kVec>(sa[kI], kByteA)",
           "replicate_scale_bytes<kVec>(sa[0], kByteA)", ((FP8_TEST, REP),),
           "changes", "fp8_fp4_gemm_1d1d_mxfp8_g128_128x128_s3_w2x4_bf16_rep",
           "replicated: every m16 tile takes the first tile's scale word"),
    Mutant("emu_sfa_lane", LANES, "return 4 * (r % 8) + 2 * thread_id_a + r / 8;",
           "return 4 * (r % 8) + 2 * thread_id_a + 1 - r / 8;", ((ATOM_TEST + "[mxfp8]", {}),), "equal",
           "scale_probe_mxfp8", "emulation: A row read from the other lane of the pair"),
    Mutant("nvfp4_chunk", EMU, "const bool mine = q / 2 == p;", "const bool mine = q % 2 == p;",
           ((ATOM_TEST + "[nvfp4]", {}),), "equal", "scale_probe_nvfp4", "emulation: NVFP4 16-K chunks split by q % 2"),
    Mutant("emu_exponents", EMU, "ldexpf(t[e], static_cast<int>(x + y) - 254)",
           "t[e] * (exp2f(static_cast<float>(x) - 127.0f) * exp2f(static_cast<float>(y) - 127.0f))",
           ((ATOM_TEST + "[mxfp8]", {}),), "equal", "scale_probe_mxfp8",
           "emulation: scales multiplied in fp32 (overflows where silicon adds exponents)"),
)  # fmt: skip


def spec_named(name: str):
    from deep_gemm_sm120.core.registry import registry

    return next(s for s in registry().specs() if s.name == name)


def cubin(spec, target: str, layer: str, work: str) -> bytes:
    from deep_gemm_sm120.core import toolchain

    src, out = os.path.join(work, "k.cu"), os.path.join(work, "k.cubin")
    with open(src, "w") as fh:
        fh.write(spec.source())
    cmd = toolchain.compile_command(toolchain.find_toolchain().nvcc, src, out, target, layer)
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"nvcc failed for {spec.name} {target}:\n{p.stderr[-3000:]}")
    with open(out, "rb") as fh:
        return fh.read()


def apply(m: Mutant, layer: str) -> None:
    path = os.path.join(layer, os.path.relpath(m.path, "device_layer"))
    with open(path) as fh:
        text = fh.read()
    if text.count(m.old) != 1:
        raise SystemExit(
            f"MUTANT {m.name}: expected one occurrence of {m.old!r} in {m.path}, found {text.count(m.old)}"
        )
    with open(path, "w") as fh:
        fh.write(text.replace(m.old, m.new))


PASSED, FAILED, OTHER = "pass", "killed", "error"  # pytest exit 0; 1 (a test failed); anything else


def run_tests(nodes: list[tuple[str, dict]], layer: str, cache: str) -> list[str]:
    """How each (node, env) ends with the device layer at `layer`: pass, killed (a test failed: pytest exit 1),
    or error (collection or internal errors, no test run, a timeout): an error is never counted as a kill."""
    out = []
    for node, extra in nodes:
        env = dict(os.environ, DG_SM120_DEVICE_LAYER=layer, DG_SM120_JIT_CACHE_DIR=cache, PYTHONUNBUFFERED="1")
        env.update(extra)
        try:
            p = subprocess.run(
                [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-m", "cuda", node],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
            )
        except subprocess.TimeoutExpired:
            out.append(f"{OTHER} (timeout)")
            continue
        rc = p.returncode
        out.append(PASSED if rc == 0 else FAILED if rc == 1 else f"{OTHER} (pytest exit {rc})")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="", help="comma-separated mutant names")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--applies", action="store_true", help="only check that every mutant applies once")
    mode.add_argument("--cubins", action="store_true", help="apply and compare cubins; no GPU tests")
    args = ap.parse_args(argv)
    chosen = [m for m in MUTANTS if not args.only or m.name in args.only.split(",")]
    if not chosen:
        raise SystemExit(f"no mutant named {args.only}; known: {', '.join(m.name for m in MUTANTS)}")
    work = tempfile.mkdtemp(prefix="dg-mutants-")
    pristine, layer, cache = (
        os.path.join(work, "pristine"),
        os.path.join(work, "device_layer"),
        os.path.join(work, "cache"),
    )
    shutil.copytree(os.path.join(ROOT, "device_layer"), pristine)
    failures = 0
    try:
        if not (args.applies or args.cubins):
            nodes = list(dict.fromkeys((n, tuple(sorted(e.items()))) for m in chosen for n, e in m.tests))
            base = run_tests([(n, dict(e)) for n, e in nodes], pristine, cache)
            for (n, e), how in zip(nodes, base):
                print(f"baseline {n} {dict(e) or ''}: {how}")
            if any(how != PASSED for how in base):
                print("the unmutated device layer fails a selected test: no mutant can be judged")
                return 1
        for m in chosen:
            shutil.rmtree(layer, ignore_errors=True)
            shutil.copytree(pristine, layer)
            apply(m, layer)
            if args.applies:
                print(f"MUTANT {m.name}: applies")
                continue
            spec = spec_named(m.spec)
            same = {t: cubin(spec, t, pristine, work) == cubin(spec, t, layer, work) for t in ("sm_120a", "sm_90a")}
            observed_cubin = "equal" if same["sm_120a"] else "changes"
            live = not same["sm_90a"]
            line = f"MUTANT {m.name:<20} sm_120a cubin: expected {m.sm120a}, got {observed_cubin}; sm_90a live: {live}"
            ok = observed_cubin == m.sm120a and live
            if not args.cubins:
                ends = run_tests(list(m.tests), layer, cache)
                line += "; tests: " + ", ".join(
                    f"{n.split('::')[-1]}{' ' + str(e) if e else ''} {'SURVIVED' if how == PASSED else how}"
                    for (n, e), how in zip(m.tests, ends)
                )
                ok = ok and all(how == FAILED for how in ends)
            print(f"{line}  [{'as expected' if ok else 'UNEXPECTED'}] ({m.why})")
            failures += not ok
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{len(chosen) - failures}/{len(chosen)} mutants as expected")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
