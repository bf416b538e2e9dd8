#!/usr/bin/env python3
"""BF16 GEMM benchmark (DeepGEMM-style lines) plus JIT and host-overhead figures. Each GEMM line reports its
share of the bf16 mma.sync ceiling measured in the same run (benchmarks/mma_ceiling.py), ours and cuBLAS's
(torch.matmul).

Kernel times come from CUDA-graph replays (median over replays of `iters` captured calls, inputs
rotated so repeated calls do not run from L2); host overhead per call is measured on the CPU side.

    python benchmarks/bench_bf16_gemm.py [--quick] [--json out.json] [--sections cases,pdl,...] [--sweep]

On a non-SM120 GPU the SM120 kernel runs through the sm_90 path (DG_SM120_EMULATE=1 is set here):
numbers then describe that GPU, never SM120 silicon.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import Rotation, bench, finish, start

# DeepSeek-V3 / Qwen3 projection shapes (N, K) and the square references.
PROJECTIONS = [
    ("dsv3 q_a+kv_a", 2112, 7168),
    ("dsv3 q_b", 24576, 1536),
    ("dsv3 o_proj", 7168, 16384),
    ("dsv3 dense up", 36864, 7168),
    ("dsv3 dense down", 7168, 18432),
    ("qwen3 qkv", 9216, 4096),
    ("qwen3 o_proj", 4096, 8192),
    ("issue 13 reference", 7168, 2304),
]
DECODE_M = (1, 64, 128)
PREFILL_M = (4096,)
SQUARES = (4096, 8192)


def gemm_case(m: int, n: int, k: int, iters: int) -> dict:
    import deep_gemm_sm120 as dg

    inputs = Rotation(
        lambda _: (
            torch.randn(m, k, device="cuda", dtype=torch.bfloat16),
            torch.randn(n, k, device="cuda", dtype=torch.bfloat16),
        ),
        (m * k + n * k) * 2,
    )
    d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)

    def ours():
        a, b = inputs.next()
        dg.bf16_gemm_nt(a, b, d)

    def ref():
        a, b = inputs.next()
        torch.matmul(a, b.T, out=d)

    t = bench(ours, iters)
    t_ref = bench(ref, iters)
    flops = 2 * m * n * k
    bytes_ = (m * k + n * k + m * n) * 2
    return {
        "m": m,
        "n": n,
        "k": k,
        "us": t * 1e6,
        "tflops": flops / t / 1e12,
        "gbps": bytes_ / t / 1e9,
        "torch_us": t_ref * 1e6,
        "speedup_vs_torch": t_ref / t,
    }


SWEEP = [  # candidate tile configurations (block_m, block_n, block_k, stages, warps_m, warps_n, raster group_n)
    (128, 128, 64, 3, 2, 4, 16),
    (128, 256, 32, 4, 2, 4, 16),
    (256, 128, 32, 4, 4, 2, 16),
    (128, 128, 32, 6, 2, 4, 16),
    (128, 256, 64, 2, 2, 4, 16),
    (128, 192, 32, 4, 2, 4, 16),
    (128, 256, 32, 4, 2, 4, 4),
    (128, 256, 32, 4, 2, 4, 64),
]


ISSUE13_SHAPES = ((4096, 4096, 4096), (8192, 8192, 8192), (4096, 7168, 2304), (4096, 24576, 1536))


def config_launcher(cfg, a: torch.Tensor, b: torch.Tensor, d: torch.Tensor):
    """(a zero-argument launch of one explicit tile configuration on NT bf16 operands, its kernel): bypasses the
    planner, for sweeps. Raises RuntimeError when the configuration does not build."""
    from deep_gemm_sm120 import jit
    from deep_gemm_sm120.arch import target_for_device
    from deep_gemm_sm120.core.arith import ceil_div  # after start(): it imports the package
    from deep_gemm_sm120.core.tma import DTYPE, tma_2d
    from deep_gemm_sm120.families.bf16_gemm.kernel import PARAMS, Bf16GemmSpec
    from deep_gemm_sm120.launch import launch

    (m, k), n = a.shape, b.shape[0]
    kern = jit.get_kernel(Bf16GemmSpec(cfg, "bf16", False, False), target_for_device(0), 0)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    grid = min(sms, ceil_div(m, cfg.block_m) * ceil_div(n, cfg.block_n))
    off_a, off_b, bf16, bk = PARAMS.offsets["tmap_a"], PARAMS.offsets["tmap_b"], DTYPE["bfloat16"], cfg.block_k
    tmaps = tma_2d(off_a, bf16, a.data_ptr(), k, m, k * 2, bk, cfg.block_m, bk * 2) + tma_2d(
        off_b, bf16, b.data_ptr(), k, n, k * 2, bk, cfg.block_n, bk * 2
    )
    params = PARAMS.pack(
        d=d.data_ptr(),
        c=0,
        layout=0,
        aux=0,
        m=m,
        n=n,
        k=k,
        ldd=n,
        ldc=0,
        num_groups=1,
        psum_layout=0,
        num_splits=1,
        split_stride=0,
    )

    def run() -> None:
        launch(kern, grid, params, tmaps, 0)

    return run, kern


def sweep(iters: int) -> list[dict]:
    from deep_gemm_sm120 import runtime
    from deep_gemm_sm120.families.bf16_gemm.kernel import Bf16GemmConfig

    rows = []
    for m, n, k in ISSUE13_SHAPES:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        ref = a.float() @ b.float().T
        for bm, bn, bk, st, wm, wn, gn in SWEEP:
            cfg = Bf16GemmConfig(bm, bn, st, wm, wn, group_n=gn, block_k=bk)
            try:
                run, kern = config_launcher(cfg, a, b, d)
            except RuntimeError as e:
                print(f" > sweep {cfg.name}: does not build ({str(e).splitlines()[-1][:120]})")
                continue
            t = bench(run, iters)
            err = float((d.float() - ref).abs().max() / ref.abs().max())
            tflops = 2 * m * n * k / t / 1e12
            rows.append(
                {
                    "m": m,
                    "n": n,
                    "k": k,
                    "config": cfg.name,
                    "group_n": cfg.group_n,
                    "us": t * 1e6,
                    "tflops": tflops,
                    "max_rel_err": err,
                    "regs": runtime.kernel_attribute(kern.handle, "num_regs"),
                }
            )
            print(
                f" > sweep {m}x{n}x{k} {cfg.name:>24} g{cfg.group_n:<3}: {t * 1e6:9.1f} us | {tflops:6.1f} TFLOPS"
                f" | max rel err {err:.1e}"
            )
    return rows


def power_cases(peak_tflops: float, seconds: float) -> dict:
    """Issue-13 shapes run sustained next to the ceiling probe, with the SM clock, board power and clock-event
    reasons sampled meanwhile (gpu_clocks.py). `share_at_probe_clock` rescales a GEMM's share of the ceiling by
    probe clock / GEMM clock: what the instruction stream achieves once a power-capped clock is taken out.
    Sustained rates include the launch gaps of 10-call batches and run from L2 where the inputs fit; the graph
    timings of the `cases` section remain the reference figures."""
    import gpu_clocks
    from mma_ceiling import probe

    import deep_gemm_sm120 as dg

    run_probe, probe_flops = probe(512, steps=16384)
    p = gpu_clocks.sustained(run_probe, seconds)
    p["tflops"] = p["calls_per_s"] * probe_flops / 1e12
    print(
        f" > power: ceiling probe sustained {p['tflops']:.1f} TFLOP/s at {p['clock_mhz']:.0f} MHz, "
        f"{p['power_w']:.0f} of {p['power_limit_w']:.0f} W, clock-event reasons {p['reasons']}"
    )
    rows = []
    for m, n, k in ISSUE13_SHAPES:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        for name, fn in (
            ("ours", lambda a=a, b=b, d=d: dg.bf16_gemm_nt(a, b, d)),
            ("cublas", lambda a=a, b=b, d=d: torch.matmul(a, b.T, out=d)),
        ):
            r = gpu_clocks.sustained(fn, seconds)
            r.update(m=m, n=n, k=k, kernel=name, tflops=r["calls_per_s"] * 2 * m * n * k / 1e12)
            r["share_of_ceiling"] = r["tflops"] / peak_tflops
            r["share_at_probe_clock"] = r["share_of_ceiling"] * p["clock_mhz"] / r["clock_mhz"]
            rows.append(r)
            print(
                f" > power {name:>6} {m}x{n}x{k}: {r['tflops']:6.1f} TFLOP/s ({r['share_of_ceiling']:.2f} of ceiling, "
                f"{r['share_at_probe_clock']:.2f} at the probe's clock) at {r['clock_mhz']:.0f} MHz, "
                f"{r['power_w']:.0f} W, reasons {r['reasons']}"
            )
        del a, b, d
    return {"probe": p, "gemms": rows}


MOE = [  # (experts, rows per expert, N, K): DeepSeek-V3 expert up/gate (N=4096 of 2x2048) and down projections
    (8, 512, 4096, 7168),
    (32, 256, 4096, 7168),
    (32, 256, 7168, 2048),
    (64, 128, 7168, 2048),
]


def grouped_cases(iters: int) -> list[dict]:
    import deep_gemm_sm120 as dg

    rows = []
    for groups, per, n, k in MOE:
        m = groups * per
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(groups, n, k, device="cuda", dtype=torch.bfloat16)
        d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        layout = torch.arange(groups, device="cuda", dtype=torch.int32).repeat_interleave(per)
        t = bench(lambda: dg.m_grouped_bf16_gemm_nt_contiguous(a, b, d, layout, check_layout=False), iters)

        def loop():
            for g in range(groups):
                torch.matmul(a[g * per : (g + 1) * per], b[g].T, out=d[g * per : (g + 1) * per])

        t_ref = bench(loop, iters)
        am = a.view(groups, per, k)
        dm = d.view(groups, per, n)
        masked = torch.full((groups,), per // 2, device="cuda", dtype=torch.int32)
        t_m = bench(lambda: dg.m_grouped_bf16_gemm_nt_masked(am, b, dm, masked, per // 2), iters)
        flops = 2 * m * n * k
        r = {
            "groups": groups,
            "rows_per_group": per,
            "n": n,
            "k": k,
            "contiguous_us": t * 1e6,
            "contiguous_tflops": flops / t / 1e12,
            "torch_loop_us": t_ref * 1e6,
            "speedup_vs_loop": t_ref / t,
            "masked_half_us": t_m * 1e6,
            "masked_half_tflops": flops / 2 / t_m / 1e12,
        }
        rows.append(r)
        print(
            f" > Grouped (G={groups:3d}, m/g={per:4d}, n={n:5d}, k={k:5d}): contiguous {r['contiguous_us']:8.1f} us | "
            f"{r['contiguous_tflops']:6.1f} TFLOPS | {r['speedup_vs_loop']:.2f}x torch loop | masked (half rows) "
            f"{r['masked_half_us']:8.1f} us | {r['masked_half_tflops']:6.1f} TFLOPS"
        )
    return rows


def k_grouped_cases(iters: int) -> list[dict]:
    """Weight-gradient shapes: dW_g = X_g^T dY_g for experts with K_g tokens (M = 7168 hidden, N = 2048)."""
    import deep_gemm_sm120 as dg

    rows = []
    for groups, per, m, n in ((8, 1024, 7168, 2048), (32, 256, 7168, 2048), (16, 512, 2048, 7168)):
        ks = [per + (37 * i) % 64 - 32 for i in range(groups)]  # uneven, not multiples of the K block
        total = sum(ks)
        a = torch.randn(total, m, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(total, n, device="cuda", dtype=torch.bfloat16)
        d = torch.zeros(groups, m, n, device="cuda", dtype=torch.float32)
        t = bench(lambda: dg.k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks, c=d), iters)
        # where the time goes: without C (no read of d), and as one group of the same total K (no descriptor
        # rebasing, one long main loop per tile)
        t_no_c = bench(lambda: dg.k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks), iters)
        t_one = bench(lambda: dg.k_grouped_bf16_gemm_tn_contiguous(a, b, d[:1], [total], c=d[:1]), iters)
        t_rw = bench(lambda: d.add_(0.0), iters)  # the memory floor: one read and one write of every d element
        offs = [sum(ks[:i]) for i in range(groups)]

        def loop():
            for gi in range(groups):
                d[gi].add_(torch.mm(a[offs[gi] : offs[gi] + ks[gi]].T, b[offs[gi] : offs[gi] + ks[gi]]))

        t_ref = bench(loop, iters)
        flops = 2 * total * m * n
        r = {
            "groups": groups,
            "mean_k": total / groups,
            "m": m,
            "n": n,
            "us": t * 1e6,
            "tflops": flops / t / 1e12,
            "torch_loop_us": t_ref * 1e6,
            "speedup_vs_loop": t_ref / t,
            "no_c_us": t_no_c * 1e6,
            "one_group_us": t_one * 1e6,
            "d_read_write_us": t_rw * 1e6,
        }
        rows.append(r)
        print(
            f" > K-grouped (G={groups:3d}, mean K={total / groups:6.0f}, m={m:5d}, n={n:5d}): {r['us']:8.1f} us | "
            f"{r['tflops']:6.1f} TFLOPS | {r['speedup_vs_loop']:.2f}x torch mm+add loop | without C "
            f"{r['no_c_us']:8.1f} us | one group of K={total} {r['one_group_us']:8.1f} us | "
            f"read+write of d {r['d_read_write_us']:8.1f} us"
        )
    return rows


def _clear_plans() -> None:
    from deep_gemm_sm120.families.bf16_gemm import api
    from deep_gemm_sm120.families.bf16_gemm.plan import dense_plan

    api._CALLS.entries.clear()  # calls validated and planned per signature
    dense_plan.cache_clear()


def split_k_cases(iters: int) -> list[dict]:
    """Split-K against the same kernels with splitting disabled, on decode shapes (M <= 64, K >= 7168)."""
    import deep_gemm_sm120 as dg
    from deep_gemm_sm120.core import splitk
    from deep_gemm_sm120.families.bf16_gemm.plan import dense_plan, m_bucket

    rows = []
    for m, n, k in (
        (1, 2112, 7168),
        (16, 2112, 7168),
        (64, 2112, 7168),
        (64, 576, 7168),
        (32, 7168, 16384),
        (64, 4096, 7168),
    ):
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        splits = dense_plan(m_bucket(m), n, k, sms).splits
        times = {}
        for enabled in (True, False):
            splitk.enabled = enabled
            _clear_plans()
            times[enabled] = bench(lambda: dg.bf16_gemm_nt(a, b, d), iters)
        splitk.enabled = True
        _clear_plans()
        r = {
            "m": m,
            "n": n,
            "k": k,
            "splits": splits,
            "split_us": times[True] * 1e6,
            "no_split_us": times[False] * 1e6,
            "speedup": times[False] / times[True],
        }
        rows.append(r)
        print(
            f" > Split-K (m={m:4d}, n={n:5d}, k={k:5d}): {splits:2d} splits {r['split_us']:7.1f} us | "
            f"no split {r['no_split_us']:7.1f} us | {r['speedup']:.2f}x"
        )
    return rows


def pdl_cases(iters: int) -> list[dict]:
    """Programmatic dependent launch on back-to-back calls: a decode-style chain of dependent GEMMs (each reads
    the previous one's output; split-K ones add a reduce kernel), timed with PDL on and off, as graph replays
    and as plain stream launches."""
    import deep_gemm_sm120 as dg

    rows = []
    for m, n, k, depth in ((1, 2112, 2112, 8), (64, 2048, 2048, 8), (16, 7168, 7168, 4), (256, 4096, 4096, 8)):
        w = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k**0.5 for _ in range(depth)]
        xs = [torch.randn(m, k, device="cuda", dtype=torch.bfloat16)] + [
            torch.empty(m, n, device="cuda", dtype=torch.bfloat16) for _ in range(depth)
        ]

        def chain():
            for i in range(depth):
                dg.bf16_gemm_nt(xs[i], w[i], xs[i + 1])  # n == k: each output feeds the next call

        r = {"m": m, "n": n, "k": k, "depth": depth}
        for enabled in (True, False):
            dg.set_pdl(enabled)
            chain()
            torch.cuda.synchronize()
            r[f"graph_us_pdl_{'on' if enabled else 'off'}"] = bench(chain, iters) * 1e6
            t0 = time.perf_counter()
            for _ in range(iters):
                chain()
            torch.cuda.synchronize()
            r[f"stream_us_pdl_{'on' if enabled else 'off'}"] = (time.perf_counter() - t0) / iters * 1e6
        dg.set_pdl(True)
        rows.append(r)
        print(
            f" > PDL chain of {depth} (m={m:4d}, n={n:5d}, k={k:5d}): graph {r['graph_us_pdl_on']:8.1f} us on / "
            f"{r['graph_us_pdl_off']:8.1f} us off ({r['graph_us_pdl_off'] / r['graph_us_pdl_on']:.3f}x) | stream "
            f"{r['stream_us_pdl_on']:8.1f} / {r['stream_us_pdl_off']:8.1f} us"
        )
    return rows


def jit_figures() -> dict:
    from deep_gemm_sm120 import jit, runtime
    from deep_gemm_sm120.arch import target_for_device
    from deep_gemm_sm120.families.bf16_gemm.kernel import specs as bf16_specs

    target = target_for_device(0)
    spec = bf16_specs()[0]
    with tempfile.TemporaryDirectory() as tmp:
        cache = jit.cache.KernelCache(tmp)
        t0 = time.perf_counter()
        jit.cubin_for(spec, target, cache)
        cold = time.perf_counter() - t0
        t0 = time.perf_counter()
        cubin, _ = jit.cubin_for(spec, target, cache)
        runtime.load_kernel(cubin, spec.smem_bytes, 0, spec.params)
        warm = time.perf_counter() - t0
    return {"target": target, "cold_compile_s": cold, "warm_disk_load_s": warm}


def host_overhead(calls: int = 2000) -> dict:
    import deep_gemm_sm120 as dg

    a = torch.randn(64, 128, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(128, 128, device="cuda", dtype=torch.bfloat16)
    d = torch.empty(64, 128, device="cuda", dtype=torch.bfloat16)
    out = {}
    for name, fn in (
        ("deep_gemm_sm120", lambda: dg.bf16_gemm_nt(a, b, d)),
        ("torch.matmul", lambda: torch.matmul(a, b.T, out=d)),
    ):
        for _ in range(50):
            fn()
        torch.cuda.synchronize()
        samples = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(calls // 5):
                fn()
            samples.append((time.perf_counter() - t0) / (calls // 5))
            torch.cuda.synchronize()
        out[name] = statistics.median(samples) * 1e6
    return {"cached_call_us": out["deep_gemm_sm120"], "torch_matmul_call_us": out["torch.matmul"]}


def main() -> int:
    def flags(ap: argparse.ArgumentParser) -> None:
        ap.add_argument("--sweep", action="store_true", help="also time candidate tile configurations")
        ap.add_argument(
            "--sections",
            default="cases,grouped,split_k,k_grouped,pdl,host,power",
            help="comma-separated subset of cases,grouped,split_k,k_grouped,pdl,host,power",
        )

    run = start(__doc__.splitlines()[0], flags)
    a = run.args
    sections = set(a.sections.split(","))
    from mma_ceiling import ceiling

    peak = ceiling(verbose=True) / 1e12
    print(f" > bf16 mma.sync ceiling of this GPU (benchmarks/mma_ceiling.py, this run): {peak:.1f} TFLOP/s")
    results = {"mma_ceiling_tflops": peak, "jit": jit_figures()}
    j = results["jit"]
    print(
        f" > JIT ({j['target']}): cold compile {j['cold_compile_s']:.2f} s, warm disk-cache load "
        f"{j['warm_disk_load_s'] * 1e3:.1f} ms"
    )
    if a.sweep:
        results["sweep"] = sweep(iters=10)
    if "cases" in sections:
        cases = []
        shapes = [(s, s, s) for s in SQUARES]
        for _, n, k in PROJECTIONS[:3] if a.quick else PROJECTIONS:
            for m in DECODE_M + PREFILL_M:
                shapes.append((m, n, k))
        if a.quick:
            shapes.append((4096, 7168, 2304))
        for m, n, k in shapes:
            r = gemm_case(m, n, k, iters=10 if a.quick else 30)
            r["share_of_ceiling"] = r["tflops"] / peak
            r["torch_share_of_ceiling"] = r["tflops"] / r["speedup_vs_torch"] / peak  # cuBLAS may use wgmma
            cases.append(r)
            print(
                f" > Perf (m={m:6d}, n={n:6d}, k={k:6d}, layout=NT, out=bf16): {r['us']:9.1f} us | "
                f"{r['tflops']:6.1f} TFLOPS ({r['share_of_ceiling']:.2f} of ceiling; cuBLAS "
                f"{r['torch_share_of_ceiling']:.2f}) | {r['gbps']:7.1f} GB/s | {r['speedup_vs_torch']:.2f}x torch"
            )
        results["cases"] = cases
    if "grouped" in sections:
        results["grouped"] = grouped_cases(10 if a.quick else 20)
    if "split_k" in sections:
        results["split_k"] = split_k_cases(10 if a.quick else 30)
    if "k_grouped" in sections:
        results["k_grouped"] = k_grouped_cases(5 if a.quick else 10)
    if "pdl" in sections:
        results["pdl"] = pdl_cases(10 if a.quick else 30)
    if "power" in sections:
        import gpu_clocks

        if gpu_clocks.available():
            results["power"] = power_cases(peak, 1.0 if a.quick else 2.0)
        else:
            print(" > power: nvidia-smi not found, no clock / power readings")
    if "host" in sections:
        results["host"] = host_overhead()
        h = results["host"]
        print(
            f" > Host overhead per cached call: {h['cached_call_us']:.1f} us "
            f"(torch.matmul: {h['torch_matmul_call_us']:.1f} us)"
        )
    return finish(run, results)


if __name__ == "__main__":
    sys.exit(main())
