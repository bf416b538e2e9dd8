#!/usr/bin/env python3
"""Compare the SASS two device-layer trees produce for the same kernels (same host code): for a refactor that
should not change what kernels do, the counts of the instructions that do the work (MMAs, ldmatrix, TMA,
barriers, shuffles, global / shared loads and stores, fences) must match; register assignment and integer
bookkeeping may move.

    python benchmarks/sass_compare.py OLD_DEVICE_LAYER [NEW_DEVICE_LAYER] [--targets sm_90a,sm_120a]

OLD is e.g. a `git worktree` of an earlier commit's device_layer/. Compiles each family's first instantiation and
the BF16 plans of a few decode and prefill shapes with the first nvcc found (CPU only, no GPU). Exit 1 when a
work-instruction count differs, 0 otherwise.

    python benchmarks/sass_compare.py --fp32-scales [--targets sm_120a]

instead sets the exact FP32-scale kernel (fp8_fp32) beside the UE8M0 one (mxfp8, 1x128) of the same tile in this
tree: block-scaled MMAs per K block (the main loop's static count: one stage is one 128-K block) and what the
promotion adds (FP32 FFMA / FMUL, scale loads). Exit 1 when the MMA counts differ.

    python benchmarks/sass_compare.py --encodings [--targets sm_120a]

sets each block-scaled kernel's replicated scale encoding beside its selector one (every GEMM scale kind on every
dense tile, the FP4 MQA tiles, the sparse MXFP8 / MXFP4 tiles): the same block-scaled MMAs must remain, and it
reports what the replicated form adds (PRMT byte replication, scale loads, registers, instructions). Exit 1 when
the MMA counts differ.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "host"))

# opcode prefixes of the instructions that do a kernel's work; the rest is addressing and bookkeeping
WORK = (
    "HMMA",
    "QMMA",
    "OMMA",
    "IMMA",
    "LDSM",
    "STSM",
    "UTMALDG",
    "UTMASTG",
    "UTMACMDFLUSH",
    "SYNCS",
    "BAR",
    "SHFL",
    "LDG",
    "STG",
    "LDS",
    "STS",
    "ATOM",
    "RED",
    "FENCE",
    "MEMBAR",
    "F2FP",
    "FFMA",
    "FMNMX",
)
_ADDR = re.compile(r"/\*[0-9a-f]{4,}\*/")


def sass(spec, target: str, tree: str, nvdisasm: str, meta: dict | None = None) -> list[str]:
    from deep_gemm_sm120 import jit
    from deep_gemm_sm120.jit import cache as jit_cache
    from deep_gemm_sm120.jit import device_layer

    os.environ[device_layer.ENV] = tree
    device_layer.device_layer_dir.cache_clear()
    device_layer.tree_digest.cache_clear()
    assert device_layer.device_layer_dir() == tree
    with tempfile.TemporaryDirectory() as tmp:
        cubin, info = jit.cubin_for(spec, target, jit_cache.KernelCache(tmp))
        if meta is not None:
            meta.update(info)
        path = os.path.join(tmp, "k.cubin")
        with open(path, "wb") as fh:
            fh.write(cubin)
        text = subprocess.run([nvdisasm, "-c", path], capture_output=True, text=True, check=True).stdout
    return [_ADDR.sub("", line).strip() for line in text.splitlines() if _ADDR.search(line)]


def opcode(line: str) -> str:
    body = re.sub(r"^@!?U?P\w+\s+", "", line)
    return body.split()[0].rstrip(";") if body.split() else ""


def work_counts(lines: list[str]) -> collections.Counter:
    return collections.Counter(op for op in map(opcode, lines) if op.split(".")[0] in WORK)


def kernels() -> list[tuple[str, object]]:
    from deep_gemm_sm120.core.registry import registry
    from deep_gemm_sm120.families.bf16_gemm.kernel import Bf16GemmSpec
    from deep_gemm_sm120.families.bf16_gemm.plan import dense_plan, m_bucket

    out = []
    for m, n, k in ((1, 2112, 7168), (64, 2112, 7168), (128, 2112, 7168), (4096, 4096, 4096)):
        p = dense_plan(m_bucket(m), n, k, 132)
        out.append(
            (
                f"bf16 {m}x{n}x{k}",
                Bf16GemmSpec(p.config, "fp32" if p.splits > 1 else "bf16", False, p.swap_ab, "normal", "nt"),
            )
        )
    out += [(f.name, f.specs()[0]) for f in registry().families if f.name != "bf16_gemm" and f.specs()]
    return out


def fp32_scales(targets: list[str], nvdisasm: str) -> int:
    from deep_gemm_sm120.families.fp8_fp4_gemm_1d1d.kernel import DENSE_CONFIGS, GROUPED_CONFIGS, spec_for

    tree = os.path.join(ROOT, "device_layer")
    cases = [(cfg, "normal") for cfg in DENSE_CONFIGS] + [(GROUPED_CONFIGS[0], "m_masked")]
    worst = 0
    for cfg, gemm_type in cases:
        for target in targets:
            pair = [spec_for(cfg, kind, (128, 128), "bf16", False, gemm_type) for kind in ("mxfp8", "fp8_fp32")]
            (n_u, u, _), (n_e, e, _) = (opcode_counts(x, target, tree, nvdisasm) for x in pair)
            mma = "QMMA" if "QMMA" in u else "HMMA"
            same = u[mma] == e[mma]
            worst = max(worst, 0 if same else 1)
            print(
                f"{cfg.name:18} {gemm_type:8} {target:8} {mma} per K block {u[mma]:4} (UE8M0) {e[mma]:4} (FP32 scales)"
                f"{'' if same else ' DIFFER'}; promotion adds FFMA {e['FFMA'] - u['FFMA']:+4} FMUL "
                f"{e['FMUL'] - u['FMUL']:+4} LDG {e['LDG'] - u['LDG']:+3}; instructions {n_u} -> {n_e}",
                flush=True,
            )
    return worst


def opcode_counts(spec, target: str, tree: str, nvdisasm: str) -> tuple[int, collections.Counter, int]:
    """(instructions, opcode counts by base name, registers ptxas reported) of one kernel."""
    meta: dict = {}
    lines = sass(spec, target, tree, nvdisasm, meta)
    return len(lines), collections.Counter(opcode(x).split(".")[0] for x in lines), _registers(meta)


def _registers(meta: dict) -> int:
    m = re.search(r"Used (\d+) registers", meta.get("ptxas_log", ""))
    return int(m.group(1)) if m else -1


def encodings(targets: list[str], nvdisasm: str) -> int:
    from dataclasses import replace

    from deep_gemm_sm120.core.registry import registry
    from deep_gemm_sm120.families.fp8_fp4_gemm_1d1d.kernel import DENSE_CONFIGS, kind_grans, spec_for

    tree = os.path.join(ROOT, "device_layer")
    cases = [
        spec_for(cfg, kind, (ga, gb or ga), "bf16", False)
        for kind, ga, gb in kind_grans()
        if kind != "fp8_fp32"
        for cfg in DENSE_CONFIGS
    ]
    reg = registry()
    for fam in ("mqa_logits", "paged_mqa_logits", "sparse_mqa_logits"):
        seen = set()
        for s in reg.by_name[fam].specs():
            key = (s.heads, s.head_dim, getattr(s, "fp4", False))
            if s.encoding == "selectors" and s.uses_selectors and key not in seen and s.heads == 64:
                seen.add(key)
                cases.append(s)
    worst = 0
    for spec in cases:
        for target in targets:
            (n_s, s_ops, r_s), (n_r, r_ops, r_r) = (
                opcode_counts(replace(spec, encoding=e), target, tree, nvdisasm) for e in ("selectors", "replicated")
            )
            mma = next((m for m in ("QMMA", "OMMA", "HMMA") if s_ops[m]), "HMMA")
            same = s_ops[mma] == r_ops[mma]
            worst = max(worst, 0 if same else 1)
            print(
                f"{spec.name:62} {target:8} {mma} {s_ops[mma]:4} / {r_ops[mma]:4}{'' if same else ' DIFFER'}; "
                f"replicated adds PRMT {r_ops['PRMT'] - s_ops['PRMT']:+4} LDG {r_ops['LDG'] - s_ops['LDG']:+3}; "
                f"registers {r_s} -> {r_r}; instructions {n_s} -> {n_r}",
                flush=True,
            )
    return worst


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old", nargs="?")
    ap.add_argument("new", nargs="?", default=os.path.join(ROOT, "device_layer"))
    ap.add_argument("--targets", default="sm_90a,sm_120a")
    ap.add_argument("--fp32-scales", action="store_true", help="the exact FP32-scale kernel beside the UE8M0 one")
    ap.add_argument("--encodings", action="store_true", help="each block-scaled kernel's two scale encodings")
    a = ap.parse_args(argv)
    from deep_gemm_sm120.core import toolchain

    tc = toolchain.find_toolchain()
    nvdisasm = tc.nvdisasm or toolchain.find_nvdisasm(tc.nvcc)
    if nvdisasm is None:
        ap.exit(2, "sass_compare.py: no nvdisasm (pip install nvidia-cuda-nvdisasm)\n")
    if a.fp32_scales:
        return fp32_scales(a.targets.split(","), nvdisasm)
    if a.encodings:
        return encodings(a.targets.split(","), nvdisasm)
    if a.old is None:
        ap.error("OLD_DEVICE_LAYER is required (or --fp32-scales / --encodings)")
    old, new = os.path.abspath(a.old), os.path.abspath(a.new)
    worst = 0
    for name, spec in kernels():
        header = getattr(type(spec), "FAMILY", None) and type(spec).FAMILY.header
        if header and not os.path.isabs(header) and not os.path.isfile(os.path.join(old, header)):
            print(f"{name:28} new in {new} (no {header} in {old})", flush=True)
            continue
        for target in a.targets.split(","):
            before, after = sass(spec, target, old, nvdisasm), sass(spec, target, new, nvdisasm)
            wb, wa = work_counts(before), work_counts(after)
            moved = {op: (wb[op], wa[op]) for op in sorted(set(wb) | set(wa)) if wb[op] != wa[op]}
            same = "identical" if before == after else f"{sum(x != y for x, y in zip(before, after))} lines differ"
            verdict = "work instructions equal" if not moved else f"WORK DIFFERS {moved}"
            print(f"{name:28} {target:8} {len(before):5} -> {len(after):5} instructions, {same}; {verdict}", flush=True)
            worst = max(worst, 1 if moved else 0)
    return worst


if __name__ == "__main__":
    sys.exit(main())
