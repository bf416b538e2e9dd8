#!/usr/bin/env python3
"""tf32_hc_prenorm_gemm against torch, with the GPU's copy bandwidth measured in the same run.

    python benchmarks/bench_hc_prenorm.py [--quick] [--ctas-per-sm N] [--json out.json]     # needs a GPU

Bytes are what the call must move once: a (bf16), b (fp32), d and sqr_sum (fp32, per split). The share is
GB/s over the device-to-device copy bandwidth (read + write bytes of a 1 GiB copy) measured here. torch is
DeepGEMM's reference expression with TF32 allowed: a.float() @ b.T, then a.float().square().sum(-1).
All times are medians of CUDA-graph replays (benchmarks/harness.py: bench)."""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import bench, finish, start

MS = (1, 13, 137, 4096, 8192)
NKS = ((24, 28672), (24, 7680), (24, 7168))


def copy_bandwidth(iters: int) -> float:
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    t = bench(lambda: dst.copy_(src), iters)
    return 2 * src.numel() / t


def case(m: int, n: int, k: int, splits, iters: int) -> dict:
    import deep_gemm_sm120 as dg

    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda")
    lead = () if splits is None else (splits,)
    d, s = torch.empty(*lead, m, n, device="cuda"), torch.empty(*lead, m, device="cuda")
    ours = bench(lambda: dg.tf32_hc_prenorm_gemm(a, b, d, s, num_splits=splits), iters)

    def ref():
        af = a.float()
        return af @ b.T, af.square().sum(-1)

    theirs = bench(ref, iters)
    moved = a.numel() * 2 + b.numel() * 4 + d.numel() * 4 + s.numel() * 4
    return {
        "m": m,
        "n": n,
        "k": k,
        "splits": splits or 0,
        "us": ours * 1e6,
        "torch_us": theirs * 1e6,
        "gbps": moved / ours / 1e9,
        "speedup_vs_torch": theirs / ours,
    }


def main() -> int:
    run = start(
        __doc__.splitlines()[0],
        lambda ap: ap.add_argument(
            "--ctas-per-sm", type=int, help="internal K-split target (tuning; default: the plan's)"
        ),
    )
    args = run.args  # off SM120 only the build changes: TF32/BF16 mma.sync are native on sm_90a
    torch.backends.cuda.matmul.allow_tf32 = True
    fam = __import__("deep_gemm_sm120.families.tf32_hc_prenorm_gemm.plan", fromlist=["plan"])
    if args.ctas_per_sm:
        fam.CTAS_PER_SM = args.ctas_per_sm
        fam.plan.cache_clear()
    iters = 5 if args.quick else 20
    copy_bw = copy_bandwidth(iters)
    print(f"copy bandwidth {copy_bw / 1e9:.0f} GB/s (read + write)")
    rows = []
    print(f"{'m':>5} {'n':>3} {'k':>6} {'S':>3} {'us':>8} {'GB/s':>7} {'share':>6} {'torch us':>9} {'vs torch':>8}")
    for m in MS if not args.quick else (13, 4096):
        for n, k in NKS if not args.quick else NKS[:1]:
            for splits in (None, 16):
                r = case(m, n, k, splits, iters)
                r["copy_share"] = r["gbps"] * 1e9 / copy_bw
                rows.append(r)
                print(
                    f"{m:5} {n:3} {k:6} {r['splits']:3} {r['us']:8.1f} {r['gbps']:7.0f} {r['copy_share']:6.2f} "
                    f"{r['torch_us']:9.1f} {r['speedup_vs_torch']:7.2f}x",
                    flush=True,
                )
    return finish(run, {"copy_gbps": copy_bw / 1e9, "ctas_per_sm": fam.CTAS_PER_SM, "rows": rows})


if __name__ == "__main__":
    sys.exit(main())
