#!/usr/bin/env python3
"""BF16 einsum against torch.einsum (cuBLAS), same inputs, CUDA-graph replay medians.

    python benchmarks/bench_einsum.py [--quick] [--json out.json]      # needs a GPU

Shapes: the issue's per-head products (h, r, d) in {(128, 512, 128), (8, 4096, 1024)} for b in {4, 32, 4096},
and DeepGEMM's bmk,bnk->mn cases; fp8_einsum at (8, 4096, 1024) against torch's BF16 einsum (DeepGEMM's
comparison; emulated block-scaled MMAs off SM120). TFLOP/s count 2 * product of the dimensions; GB/s each
operand once."""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import bench, finish, start


def main() -> int:
    run = start(__doc__.splitlines()[0])  # off SM120: the sm_90a build, where BF16 mma.sync runs natively
    args = run.args
    import deep_gemm_sm120 as dg
    from deep_gemm_sm120.selftest.workloads.block_scaled import einsum_operands

    iters = 5 if args.quick else 20
    rows = []
    print(f"{'expr':14} {'shape':>24} {'us':>8} {'TFLOP/s':>8} {'GB/s':>6} {'torch us':>9} {'vs torch':>8}")
    cases = [
        (e, b, h, r, d)
        for e in ("bhr,hdr->bhd", "bhd,hdr->bhr")
        for (h, r, d) in ((128, 512, 128), (8, 4096, 1024))
        for b in ((4, 32, 4096) if not args.quick else (32,))
    ]
    cases += [
        ("bmk,bnk->mn", s, m, n, k)
        for s in ((129, 4096, 8192) if not args.quick else (4096,))
        for (m, n, k) in ((128, 384, 128), (256, 256, 256), (384, 128, 384))
    ]
    for expr, *dims in cases:
        if expr == "bmk,bnk->mn":
            s, m, n, k = dims
            a = torch.randn(s, m, k, device="cuda", dtype=torch.bfloat16)
            b = torch.randn(s, n, k, device="cuda", dtype=torch.bfloat16)
            out = torch.zeros(m, n, device="cuda")
            ours = bench(lambda: dg.einsum(expr, a, b, out, c=out), iters)
            theirs = bench(lambda: out.add_(torch.einsum(expr, a, b).float()), iters)
            flops, moved, label = 2 * s * m * n * k, (a.numel() + b.numel()) * 2 + out.numel() * 8, f"s{s} {m}x{n}x{k}"
        else:
            bs, h, r, d = dims
            x = torch.randn(bs, h, r if expr == "bhr,hdr->bhd" else d, device="cuda", dtype=torch.bfloat16)
            y = torch.randn(h, d, r, device="cuda", dtype=torch.bfloat16)
            z = torch.empty(bs, h, d if expr == "bhr,hdr->bhd" else r, device="cuda", dtype=torch.bfloat16)
            ours = bench(lambda: dg.einsum(expr, x, y, z), iters)
            theirs = bench(lambda: torch.einsum(expr, x, y), iters)
            flops, moved, label = 2 * bs * h * r * d, (x.numel() + y.numel() + z.numel()) * 2, f"b{bs} h{h} r{r} d{d}"
        row = {
            "expr": expr,
            "shape": label,
            "us": ours * 1e6,
            "torch_us": theirs * 1e6,
            "tflops": flops / ours / 1e12,
            "gbps": moved / ours / 1e9,
            "speedup_vs_torch": theirs / ours,
        }
        rows.append(row)
        print(
            f"{expr:14} {label:>24} {row['us']:8.1f} {row['tflops']:8.1f} {row['gbps']:6.0f} {row['torch_us']:9.1f} "
            f"{row['speedup_vs_torch']:7.2f}x",
            flush=True,
        )
    # fp8_einsum: block-scaled MMAs. On a non-SM120 GPU they run through the sm_90 emulation, so these times
    # measure the emulation on that GPU and say nothing about SM120 speed (the compile gate checks QMMA.SF).
    emulated = run.emulated
    for bs in (4, 32, 4096) if not args.quick else (32,):
        h, r, d = 8, 4096, 1024
        x = torch.randn(bs, h, r, device="cuda", dtype=torch.bfloat16)
        y = torch.randn(h, d, r, device="cuda", dtype=torch.bfloat16)
        (xq, sx), (yq, sy) = einsum_operands(x, y)
        sxp = dg.transform_sf_into_required_layout(sx.transpose(0, 1), bs, r, (1, 128, 128), num_groups=h, is_sfa=True)
        syp = dg.transform_sf_into_required_layout(sy, d, r, (1, 128, 128), num_groups=h)
        z = torch.empty(bs, h, d, device="cuda", dtype=torch.bfloat16)
        ours = bench(lambda: dg.fp8_einsum("bhr,hdr->bhd", (xq, sxp), (yq, syp), z), iters)
        theirs = bench(lambda: torch.einsum("bhr,hdr->bhd", x, y), iters)
        label = f"b{bs} h{h} r{r} d{d}"
        row = {
            "expr": "fp8 bhr,hdr->bhd",
            "shape": label,
            "us": ours * 1e6,
            "torch_us": theirs * 1e6,
            "tflops": 2 * bs * h * r * d / ours / 1e12,
            "gbps": (xq.numel() + yq.numel() + z.numel() * 2) / ours / 1e9,
            "speedup_vs_torch": theirs / ours,
            "emulated": emulated,
        }
        rows.append(row)
        print(
            f"{'fp8 bhr,hdr->bhd':14} {label:>24} {row['us']:8.1f} {row['tflops']:8.1f} {row['gbps']:6.0f} "
            f"{row['torch_us']:9.1f} {row['speedup_vs_torch']:7.2f}x{'  (emulated MMAs)' if emulated else ''}",
            flush=True,
        )
    return finish(run, {"rows": rows})


if __name__ == "__main__":
    sys.exit(main())
