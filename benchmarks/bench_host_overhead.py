#!/usr/bin/env python3
"""Host overhead of cached calls: CPU time per call once plans, kernels and descriptors are cached (the GPU
work is tiny and the stream is kept from filling). Uses only the public API, so the same script measures any
checkout: put its host/ first on PYTHONPATH.

    PYTHONPATH=host python benchmarks/bench_host_overhead.py [--json out.json] [--label NAME]

On a GPU that is not SM120 the kernels run through the sm_90 path (DG_SM120_EMULATE=1 is set here): the
numbers are host-side costs, not kernel speed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch


def per_call_us(fn, calls: int = 5000, rounds: int = 10) -> tuple[float, float]:
    """(min, median) over rounds of µs per call. On a shared VM the minimum is the steadiest estimate of the
    intrinsic cost; the median shows the noise."""
    for _ in range(100):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls // rounds):
            fn()
        samples.append((time.perf_counter() - t0) / (calls // rounds))
        torch.cuda.synchronize()
    return min(samples) * 1e6, statistics.median(samples) * 1e6


def _cast(fn, x):
    """DeepGEMM's casts take `use_ue8m0`; checkouts before deep_gemm_sm120 0.8.5 took none."""
    try:
        return fn(x, use_ue8m0=True)
    except TypeError:
        return fn(x)


def cases():
    import deep_gemm_sm120 as dg

    bf = dict(device="cuda", dtype=torch.bfloat16)
    a, b, d = torch.randn(64, 128, **bf), torch.randn(128, 128, **bf), torch.empty(64, 128, **bf)
    yield "bf16_gemm_nt 64x128x128", lambda: dg.bf16_gemm_nt(a, b, d)
    a1, w1, d1 = torch.randn(1, 7168, **bf), torch.randn(2112, 7168, **bf), torch.empty(1, 2112, **bf)
    yield "bf16_gemm_nt 1x2112x7168 (split-K + reduce)", lambda: dg.bf16_gemm_nt(a1, w1, d1)
    g = 4
    am, bm, dm = torch.randn(g, 64, 128, **bf), torch.randn(g, 128, 128, **bf), torch.empty(g, 64, 128, **bf)
    masked = torch.full((g,), 64, device="cuda", dtype=torch.int32)
    yield "m_grouped_bf16_gemm_nt_masked 4x64x128x128", lambda: dg.m_grouped_bf16_gemm_nt_masked(am, bm, dm, masked, 64)
    x8, sx = _cast(dg.per_token_cast_to_fp8, torch.randn(64, 256, device="cuda"))
    w8, sw = _cast(dg.per_block_cast_to_fp8, torch.randn(128, 256, device="cuda"))
    sxp = dg.transform_sf_into_required_layout(sx, 64, 256, (1, 128, 128), is_sfa=True)
    swp = dg.transform_sf_into_required_layout(sw, 128, 256, (1, 128, 128))
    d8 = torch.empty(64, 128, **bf)
    yield (
        "fp8_gemm_nt 64x128x256 (packed scales)",
        lambda: dg.fp8_gemm_nt((x8, sxp), (w8, swp), d8, recipe=(1, 128, 128)),
    )
    yield "torch.matmul 64x128x128", lambda: torch.matmul(a, b.T, out=d)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json")
    ap.add_argument("--label", default="")
    a = ap.parse_args()
    if torch.cuda.get_device_capability()[0] != 12:
        os.environ["DG_SM120_EMULATE"] = "1"
    import deep_gemm_sm120 as dg

    rows = {}
    for name, fn in cases():
        best, median = per_call_us(fn)
        rows[name] = {"min_us": best, "median_us": median}
        print(f" > host {a.label or dg.__file__}: {name:<46} min {best:6.2f} median {median:6.2f} us/call")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"label": a.label, "package": dg.__file__, "us_per_call": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
