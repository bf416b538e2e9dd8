#!/usr/bin/env python3
"""Block-scaled FP8 / FP4 GEMMs: emulated timings, and an RTX 5090 roofline estimate per shape.

    python benchmarks/bench_fp8_fp4_gemm.py [--quick] [--json out.json]        # needs a GPU
    python benchmarks/bench_fp8_fp4_gemm.py --encodings selectors,replicated   # both scale encodings, same run
    python benchmarks/bench_fp8_fp4_gemm.py --roofline-only                    # CPU only

On a non-SM120 GPU the kernels run through the sm_90 emulation of the block-scaled MMAs (DG_SM120_EMULATE=1
is set here): those times measure the emulation on that GPU, say nothing about SM120 speed, and are
reported only to show the full kernels run. The roofline is arithmetic, not a measurement:
  time >= max(FLOPs / peak, bytes / 1792 GB/s), peaks MXFP8 838 and FP4 1676 TFLOP/s (RTX 5090, dense).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import bench, finish, start

# mixed e4m3 x e2m1 runs kind::mxf8f6f4 (QMMA.SF), i.e. at the FP8 rate
# fp8_fp32 (exact FP32 scales, issue 40) runs the same unit-scale QMMA.SF: its roofline is MXFP8's, with 4-byte
# scales; the promotion's FP32 work per K block is not in the roofline (see docs/fp32_scales.md)
RTX5090 = {
    "mxfp8": 838e12,
    "fp8_fp32": 838e12,
    "mxfp4": 1676e12,
    "nvfp4": 1676e12,
    "e4m3_e2m1": 838e12,
    "bandwidth": 1792e9,
}
BYTES_PER_ELEM = {
    "mxfp8": (1.0, 1.0),
    "fp8_fp32": (1.0, 1.0),
    "mxfp4": (0.5, 0.5),
    "nvfp4": (0.5, 0.5),
    "e4m3_e2m1": (1.0, 0.5),
}
SHAPES = [  # (label, M, N, K): DeepSeek-V3 projections at decode and prefill sizes, and a square
    ("dsv3 q_a+kv_a decode", 64, 2112, 7168),
    ("dsv3 q_a+kv_a prefill", 4096, 2112, 7168),
    ("dsv3 dense up prefill", 4096, 36864, 7168),
    ("dsv3 o_proj decode", 64, 7168, 16384),
    ("square", 4096, 4096, 4096),
]


def roofline(kind: str, m: int, n: int, k: int, gran: int) -> dict:
    from deep_gemm_sm120.core.arith import ceil_div  # after start(): it imports the package

    ea, eb = BYTES_PER_ELEM[kind]
    scale_bytes = (m + n) * ceil_div(k, gran) * (4 if kind == "fp8_fp32" else 1)
    traffic = (m * ea + n * eb) * k + scale_bytes + m * n * 2  # operands + scales + bf16 D, each once
    flops = 2.0 * m * n * k
    t = max(flops / RTX5090[kind], traffic / RTX5090["bandwidth"])
    return {
        "bound": "compute" if flops / RTX5090[kind] >= traffic / RTX5090["bandwidth"] else "memory",
        "roofline_us": t * 1e6,
        "roofline_tflops": flops / t / 1e12,
    }


KINDS = [("mxfp8", 128), ("fp8_fp32", 128), ("mxfp8", 32), ("mxfp4", 32), ("nvfp4", 16), ("e4m3_e2m1", 128)]


def kind_list(text: str) -> tuple[str, ...]:
    """--kinds: comma-separated names out of KINDS (argparse exits 2 naming the known ones otherwise)."""
    known = sorted({kind for kind, _ in KINDS})
    wanted = tuple(k for k in text.split(",") if k)
    unknown = sorted(set(wanted) - set(known))
    if unknown or not wanted:
        raise argparse.ArgumentTypeError(f"unknown kinds {unknown or [text]}; known: {known}")
    return wanted


def main() -> int:
    run = start(
        __doc__.splitlines()[0],
        lambda ap: (
            ap.add_argument("--roofline-only", action="store_true"),
            ap.add_argument(
                "--encodings",
                default="",
                help="comma-separated scale encodings to time each row in (selectors, replicated; default: the "
                "one DG_SM120_SCALE_ENCODING / the device's self-test picks)",
            ),
            ap.add_argument(
                "--kinds",
                type=kind_list,
                default=(),
                help="comma-separated scale kinds to run (mxfp8, fp8_fp32, mxfp4, nvfp4, e4m3_e2m1; default: all)",
            ),
        ),
        need_gpu=lambda args: not args.roofline_only,
    )
    args = run.args
    kinds = [(kind, gran) for kind, gran in KINDS if not args.kinds or kind in args.kinds]
    rows = []
    gpu = not args.roofline_only
    if gpu:
        import deep_gemm_sm120 as dg
        from deep_gemm_sm120.selftest.workloads.block_scaled import (
            fp4_operands,
            fp8_operands,
            fp8_operands_fp32,
            quantize_side,
        )
        from deep_gemm_sm120.testing import calc_diff

        gen = torch.Generator(device="cuda").manual_seed(0)
    encodings = [e for e in args.encodings.split(",") if e] if gpu else []
    if gpu:
        from deep_gemm_sm120 import scale_encoding
    for label, m, n, k in SHAPES[:2] + SHAPES[-1:] if args.quick else SHAPES:
        for kind, gran in kinds:
            row = {
                "shape": label,
                "m": m,
                "n": n,
                "k": k,
                "kind": kind,
                "gran_k": gran,
                **roofline(kind, m, n, k, gran),
            }
            if gpu:
                recipe = (1, 128 if gran == 128 else 1, gran)
                recipe_b = recipe
                exact = kind == "fp8_fp32"  # the same shapes with FP32 scales (amax / 448): the exact kernel
                if exact:
                    a, b, ref = fp8_operands_fp32(m, n, k, gen)
                    alpha = 1.0
                elif kind == "mxfp8":
                    a, b, ref = fp8_operands(m, n, k, gen, gran, b_blocks=gran == 128)
                    alpha = 1.0
                elif kind == "e4m3_e2m1":  # FP8 activations (1x128) x MXFP4 weights (1x32)
                    qa, sa, da = quantize_side("e4m3", m, k, gen, gran)
                    qb, sb, db = quantize_side("mxfp4", n, k, gen)
                    a, b, ref, alpha, recipe, recipe_b = (qa, sa), (qb, sb), da @ db.T, 1.0, (1, 1, gran), (1, 1, 32)
                else:
                    a, b, alpha, ref = fp4_operands(m, n, k, gen, kind)
                tf = dg.transform_sf_into_required_layout
                pa = (a[0], tf(a[1], m, k, recipe, is_sfa=True, disable_ue8m0_cast=exact))
                pb = (b[0], tf(b[1], n, k, recipe_b, disable_ue8m0_cast=exact))
                d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
                fn = lambda: dg.fp8_fp4_gemm_nt(pa, pb, d, recipe=recipe, alpha=alpha, disable_ue8m0_cast=exact)
                # exact FP32 scales run unit scales at selector 0: one encoding only
                for enc_name in [None] if exact or not encodings else encodings:
                    with scale_encoding.forced(enc_name) if enc_name else contextlib.nullcontext():
                        fn()
                        torch.cuda.synchronize()
                        diff = calc_diff(d, ref)
                        t = bench(fn, iters=3 if args.quick else 10)
                    key = f"_{enc_name}" if enc_name else ""
                    row[f"calc_diff{key}"] = diff
                    row[f"emulated_us{key}"] = t * 1e6
                    row[f"emulated_tflops{key}"] = 2.0 * m * n * k / t / 1e12
                if encodings and not exact and len(encodings) == 2:
                    row["replicated_over_selectors"] = row["emulated_us_replicated"] / row["emulated_us_selectors"]
                first = "" if exact or not encodings else f"_{encodings[0]}"
                row.setdefault("calc_diff", row[f"calc_diff{first}"])
                row.setdefault("emulated_us", row[f"emulated_us{first}"])
                row.setdefault("emulated_tflops", row[f"emulated_tflops{first}"])
            rows.append(row)
            emu = (
                (
                    f"  emulated {row['emulated_us']:9.1f} us {row['emulated_tflops']:7.1f} TFLOP/s "
                    f"diff {row['calc_diff']:.1e}"
                )
                if gpu
                else ""
            )
            if "replicated_over_selectors" in row:
                emu += f"  replicated {row['emulated_us_replicated']:9.1f} us ({row['replicated_over_selectors']:.3f}x)"
            print(
                f"{label:<24} {kind:<9} 1x{gran:<4} M={m:<5} N={n:<6} K={k:<6} RTX 5090 roofline "
                f"{row['roofline_us']:8.1f} us {row['roofline_tflops']:7.1f} TFLOP/s ({row['bound']}){emu}"
            )
    return finish(run, {"rows": rows, "rtx5090": RTX5090})


if __name__ == "__main__":
    sys.exit(main())
