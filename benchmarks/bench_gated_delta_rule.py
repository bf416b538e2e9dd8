#!/usr/bin/env python3
"""chunk_gated_delta_rule (ours, chunk 32 and 64) against flash-linear-attention's (FLA, `fla-core`) forward.

    python benchmarks/bench_gated_delta_rule.py [--quick] [--json out.json]     # needs a GPU (+ fla-core, einops)

Shapes: FlashQLA's B x T in {1 x 32768, 4 x 2048, 1 x 2048} crossed with (H, HV) in {(16, 64), (2, 8), (32, 32)}
(the three pairings FlashQLA reports are 1x32768 (16, 64), 4x2048 (2, 8), 1x2048 (32, 32)). K = V = 128, bf16,
l2-normalized q / k, g = logsigmoid, beta = sigmoid, an fp32 initial state and the final state returned (both
sides). Both sides are timed by CUDA-graph replay (benchmarks/harness.py: bench), so FLA's host work
does not count. Each row also reports the relative L2 distance between our o and FLA's.

A GPU machine without a package index gets FLA as wheels: `pip download fla-core einops --no-deps -d wheels_fla`
here, carry the folder, `python3 -m pip install --no-deps --no-index wheels_fla/*.whl` there (FLA needs Triton,
which CUDA builds of torch bring). --sweep and --max-stages are the tuning runs behind the plan's V slice and
stage cap (docs/gated_delta_rule.md)."""
from __future__ import annotations

import argparse
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import bench, finish, start  # noqa: E402

BT = ((1, 32768), (4, 2048), (1, 2048))
HEADS = ((16, 64), (2, 8), (32, 32))
PAIRED = {((1, 32768), (16, 64)), ((4, 2048), (2, 8)), ((1, 2048), (32, 32))}


def inputs(b: int, t: int, h: int, hv: int):
    q = F.normalize(torch.randn(b, t, h, 128, device="cuda"), dim=-1).bfloat16()
    k = F.normalize(torch.randn(b, t, h, 128, device="cuda"), dim=-1).bfloat16()
    v = torch.randn(b, t, hv, 128, device="cuda").bfloat16()
    g = F.logsigmoid(torch.randn(b, t, hv, device="cuda"))
    beta = torch.randn(b, t, hv, device="cuda").sigmoid().bfloat16()
    init = torch.randn(b, hv, 128, 128, device="cuda") * 0.1
    return q, k, v, g, beta, init


def case(b: int, t: int, h: int, hv: int, iters: int, fla) -> dict:
    import deep_gemm_sm120 as dg

    q, k, v, g, beta, init = inputs(b, t, h, hv)
    row = {"b": b, "t": t, "h": h, "hv": hv, "paired": ((b, t), (h, hv)) in PAIRED}
    with torch.no_grad():
        for chunk in (32, 64):
            row[f"ours_c{chunk}_us"] = bench(lambda: dg.chunk_gated_delta_rule(
                q, k, v, g, beta, initial_state=init, output_final_state=True, chunk_size=chunk), iters) * 1e6
        ours = dg.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=init, output_final_state=True,
                                         chunk_size=32)[0]
        if fla is not None:
            fla_call = lambda: fla(q, k, v, g, beta, initial_state=init, output_final_state=True)  # noqa: E731
            row["fla_us"] = bench(fla_call, iters) * 1e6
            theirs = fla_call()[0]
            row["o_rel_l2_vs_fla"] = ((ours.double() - theirs.double()).norm() / theirs.double().norm()).item()
            for chunk in (32, 64):
                row[f"speedup_c{chunk}"] = row["fla_us"] / row[f"ours_c{chunk}_us"]
    return row


def profile(b: int, t: int, h: int, hv: int, fla) -> None:
    """Kernel-by-kernel CUDA time of one call of each side (after warm-up)."""
    import deep_gemm_sm120 as dg
    from torch.profiler import ProfilerActivity, profile as prof

    q, k, v, g, beta, init = inputs(b, t, h, hv)
    sides = {"ours c32": lambda: dg.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=init,
                                                            output_final_state=True, chunk_size=32)}
    if fla is not None:
        sides["FLA"] = lambda: fla(q, k, v, g, beta, initial_state=init, output_final_state=True)
    for name, fn in sides.items():
        fn(), torch.cuda.synchronize()
        with prof(activities=[ProfilerActivity.CUDA]) as p:
            fn()
            torch.cuda.synchronize()
        rows = [(e.key, e.device_time_total) for e in p.key_averages() if e.device_time_total > 0]
        print(f"   {name}: " + "; ".join(f"{key[:60]} {us:.0f} us" for key, us in sorted(rows, key=lambda r: -r[1])))


def sweep(b: int, t: int, h: int, hv: int, iters: int) -> None:
    """Ours at chunk 32 with each V slice forced (the plan's choose_vslice replaced for the call)."""
    import deep_gemm_sm120 as dg
    from deep_gemm_sm120.families.gated_delta_rule import api

    q, k, v, g, beta, init = inputs(b, t, h, hv)
    chosen, out = api.choose_vslice, []
    try:
        for vs in (16, 32, 64, 128):
            api.choose_vslice = lambda *_a, vs=vs: vs
            out.append(f"v{vs} {bench(lambda: dg.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=init, output_final_state=True, chunk_size=32), iters) * 1e6:.0f} us")
    finally:
        api.choose_vslice = chosen
    print("   sweep c32: " + ", ".join(out))


def geomean(xs) -> float:
    xs = list(xs)
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def main() -> int:
    def flags(ap: argparse.ArgumentParser) -> None:  # --quick: the three FlashQLA pairings only, fewer replays
        ap.add_argument("--profile", action="store_true", help="per-kernel CUDA times (torch.profiler) of each side")
        ap.add_argument("--sweep", action="store_true", help="ours at chunk 32 with every V slice (tuning the plan)")
        ap.add_argument("--max-stages", type=int, help="cap of the recurrence's TMA stages (tuning; default the family's)")

    run = start(__doc__.splitlines()[0], flags)  # off SM120 only the build changes: bf16 mma.sync is native on sm_90a
    args = run.args
    try:
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule as fla
    except ImportError as e:
        print(f"fla-core not importable ({e}); timing ours only")
        fla = None
    if args.max_stages:
        fam = __import__("deep_gemm_sm120.families.gated_delta_rule", fromlist=["MAX_STAGES"])
        fam.MAX_STAGES = args.max_stages
    iters = 3 if args.quick else 10
    print(f"FLA {'present' if fla else 'absent'}")
    print(f"{'B':>2} {'T':>6} {'H':>3} {'HV':>3} {'ours c32 us':>12} {'ours c64 us':>12} {'FLA us':>9} "
          f"{'x c32':>6} {'x c64':>6} {'relL2 vs FLA':>12}")
    rows = []
    for (b, t) in BT:
        for (h, hv) in HEADS:
            if args.quick and ((b, t), (h, hv)) not in PAIRED:
                continue
            r = case(b, t, h, hv, iters, fla)
            rows.append(r)
            if args.profile:
                profile(b, t, h, hv, fla)
            if args.sweep:
                sweep(b, t, h, hv, iters)
            print(f"{b:2} {t:6} {h:3} {hv:3} {r['ours_c32_us']:12.1f} {r['ours_c64_us']:12.1f} "
                  f"{r.get('fla_us', float('nan')):9.1f} {r.get('speedup_c32', float('nan')):5.2f}x "
                  f"{r.get('speedup_c64', float('nan')):5.2f}x {r.get('o_rel_l2_vs_fla', float('nan')):12.2e}",
                  flush=True)
    summary = {}
    if fla is not None:
        for chunk in (32, 64):
            summary[f"geomean_c{chunk}"] = geomean(r[f"speedup_c{chunk}"] for r in rows)
            summary[f"geomean_c{chunk}_paired"] = geomean(r[f"speedup_c{chunk}"] for r in rows if r["paired"])
        summary["geomean_best"] = geomean(max(r["speedup_c32"], r["speedup_c64"]) for r in rows)
        print("geomean speedup over FLA: " + ", ".join(f"{k} {v:.2f}x" for k, v in summary.items()))
    return finish(run, {"fla": fla is not None, "rows": rows, "summary": summary})


if __name__ == "__main__":
    sys.exit(main())
