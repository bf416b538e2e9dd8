#!/usr/bin/env python3
"""Where a BF16 GEMM's time goes (issue 13): the shipped kernel timed next to variants of itself that leave one
part of the work out. The variants are edits of a temporary copy of device_layer/ (DG_SM120_DEVICE_LAYER points
the JIT at it); their results are wrong by construction, only their times mean something.

    python benchmarks/gemm_bounds.py [--variants base,nomma,noldm,noepi,nofence] [--configs 128x256x32s4,...]

  nomma    the MMAs replaced by one FADD per fragment pair: operand TMA + ldmatrix + epilogue alone
  noldm    fragments loaded once per tile: operand TMA + MMAs + epilogue, no shared-memory reads
  noepi    no global stores (a never-true guard keeps the accumulators live): everything but the epilogue
  nofence  no fence.proxy.async before a stage is handed back (unsafe: SM120_FACTS records failures without it)

Each variant runs in a subprocess of its own (one device-layer tree per process). Inputs stay resident in L2
(no rotation), like `bench_bf16_gemm.py --sweep`. Needs a GPU; on a non-SM120 GPU the sm_90 path runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
KERNEL = os.path.join("impls", "sm120_bf16_gemm.cuh")
PIPELINE = os.path.join("common", "sm120_pipeline.cuh")  # the stage release every kernel shares
MMA = "mma_bf16_16816(acc[i][j], af[buf][i], bfr[buf][j]);"
LOAD = "frags.load(ml.tile_a(s), ml.tile_b(s), kk, af[buf], bfr[buf]);"
FRAGS = "        uint32_t bfr[2][kNI][2];\n"
TILE = "        while (sched.next(tile)) {\n"
STORE = "                store_accumulators<kMI, kNI, kType, kWithC && !kCInAcc>("
RELEASE = "    __syncwarp();\n    if (lane == 0) mbarrier_arrive(empty);"
EDITS = {  # variant -> [(file under device_layer/, anchor, replacement)]; every anchor occurs exactly once there
    "base": [],
    "nomma": [(KERNEL, MMA, "acc[i][j][0] += __uint_as_float(af[buf][i][0] ^ bfr[buf][j][0]);")],
    # the main loop asks for every step's fragments; this copy fetches only a tile's first two (both buffers)
    "noldm": [
        (KERNEL, FRAGS, FRAGS + "        uint32_t ldm_left = 0;\n"),
        (KERNEL, TILE, TILE + "            ldm_left = 2;\n"),
        (KERNEL, LOAD, "if (ldm_left != 0) { --ldm_left; " + LOAD + " }"),
    ],
    "noepi": [(KERNEL, STORE, "                if (acc[0][0][0] == 1234.5f) " + STORE.lstrip())],
    "nofence": [(PIPELINE, "    fence_proxy_async_smem();\n" + RELEASE, RELEASE)],
}


def edited_tree(variant: str, dst: str) -> str:
    """A copy of device_layer/ with `variant`'s edits applied (to the BF16 kernel, or for nofence to the shared
    stage release, which only the BF16 kernel runs in that process)."""
    tree = os.path.join(dst, "device_layer")
    shutil.copytree(os.path.join(ROOT, "device_layer"), tree)
    for rel, anchor, repl in EDITS[variant]:
        path = os.path.join(tree, rel)
        with open(path, encoding="utf-8") as fh:
            src = fh.read()
        if src.count(anchor) != 1:
            raise SystemExit(f"{variant}: anchor not found once in {rel} (the source changed?): {anchor!r}")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(src.replace(anchor, repl))
    return tree


def parse_config(text: str) -> tuple[int, ...]:
    """'128x256x32s4' (warps 2x4 unless given as '...s4w4x2') -> (bm, bn, bk, stages, wm, wn)."""
    body, _, warps = text.partition("w")
    tile, _, stages = body.partition("s")
    bm, bn, bk = (int(x) for x in tile.split("x"))
    wm, wn = (int(x) for x in warps.split("x")) if warps else ((2, 4) if bm <= bn else (4, 2))
    return bm, bn, bk, int(stages), wm, wn


def time_configs(configs: list[str], iters: int) -> list[dict]:
    """In this process (device layer from the environment): each config on each shape."""
    import torch

    sys.path.insert(0, HERE)
    sys.path.insert(0, os.path.join(ROOT, "host"))
    if torch.cuda.get_device_capability()[0] != 12:
        os.environ.setdefault("DG_SM120_EMULATE", "1")
    from bench_bf16_gemm import ISSUE13_SHAPES, config_launcher
    from harness import bench

    from deep_gemm_sm120.families.bf16_gemm.kernel import Bf16GemmConfig

    rows = []
    for m, n, k in ISSUE13_SHAPES:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        for text in configs:
            bm, bn, bk, st, wm, wn = parse_config(text)
            run, _ = config_launcher(Bf16GemmConfig(bm, bn, st, wm, wn, block_k=bk), a, b, d)
            t = bench(run, iters)
            rows.append({"m": m, "n": n, "k": k, "config": text, "us": t * 1e6, "tflops": 2 * m * n * k / t / 1e12})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--variants", default="base,nomma,noldm,noepi,nofence")
    ap.add_argument("--configs", default="128x256x32s4", help="comma-separated, e.g. 128x256x32s4,128x256x32s3")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--json", help="write all figures here")
    ap.add_argument("--child", help=argparse.SUPPRESS)  # internal: time in this process, print JSON
    a = ap.parse_args()
    configs = a.configs.split(",")
    if a.child:
        print(json.dumps(time_configs(configs, a.iters)))
        return 0
    variants = a.variants.split(",")
    unknown = [v for v in variants if v not in EDITS]
    if unknown:
        ap.error(f"unknown variants {unknown}; choose from {sorted(EDITS)}")
    results: dict[str, list[dict]] = {}
    for v in variants:
        with tempfile.TemporaryDirectory() as tmp:
            env = dict(os.environ, DG_SM120_DEVICE_LAYER=edited_tree(v, tmp))
            out = subprocess.run(
                [sys.executable, __file__, "--child", v, "--configs", a.configs, "--iters", str(a.iters)],
                env=env,
                capture_output=True,
                text=True,
            )
            if out.returncode != 0:
                print(out.stdout + out.stderr)
                return 1
            results[v] = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"{'shape':>18} {'config':>14} " + " ".join(f"{v:>16}" for v in variants))
    for i, base in enumerate(results[variants[0]]):
        cells = []
        for v in variants:
            r = results[v][i]
            cells.append(f"{r['us']:8.1f} us {r['us'] / base['us']:4.2f}")
        print(f"{base['m']}x{base['n']}x{base['k']:>5} {base['config']:>14} " + " ".join(f"{c:>16}" for c in cells))
    print(f"(each cell: time, and its ratio to the {variants[0]} column)")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(results, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
