"""chunk_gated_delta_rule (ours, chunk 32 and 64) against flash-linear-attention's (FLA, `fla-core`) forward.

    python benchmarks/bench_gated_delta_rule.py [--quick] [--json out.json]     # needs a GPU (+ fla-core, einops)

Grid (issue 29): B x T in {1 x 32768, 1 x 8192, 2 x 4096, 4 x 2048, 1 x 2048, 16 x 512, 64 x 128} crossed with
(H, HV) in {(2, 8), (4, 8), (16, 32), (16, 64), (32, 32)}, plus varlen packs of mixed lengths; every shape with an
fp32 initial state, and the NO_INIT subset also without one. K = V = 128, bf16, l2-normalized q / k,
g = logsigmoid, beta = sigmoid, the final state returned (both sides). --quick: the six shapes of issue 29's
table. Both sides are timed by CUDA-graph replay (benchmarks/harness.py: bench), so FLA's host work does not
count. Each row also reports the relative L2 distance between our o and FLA's.

A GPU machine without a package index gets FLA as wheels: `pip download fla-core einops --no-deps -d wheels_fla`
here, carry the folder, `python3 -m pip install --no-deps --no-index wheels_fla/*.whl` there (FLA needs Triton,
which CUDA builds of torch bring). --sweep times every (V slice, K split) plan at chunk 32 (the tuning behind
choose_plan; docs/gated_delta_rule.md); --max-stages caps the recurrence's TMA stages; --overlap sets the prep
grid that runs beside the recurrence (off: the sequential launch; N: N persistent prep CTAs wherever the plan
overlaps); --overlap-ab also times the sequential launch at chunk 32 in the same process, for comparison;
--overlap-sweep N1,N2,... times chunk 32 with each persistent prep CTA count at the rows whose plan overlaps.
--backward times forward + backward (every gradient) of ours at chunk 32 and of FLA, each by CUDA-graph replay
where its capture succeeds (ours builds its chunk layout on the device, so it captures, varlen included) and
eagerly otherwise (CUDA events around each call; the row says which), and reports each gradient's distance to
FLA's; with --profile it splits one eager call of ours by stage, with --tf32 it times ours again with TF32 matmuls
allowed in the backward's torch stages (and each gradient's distance to the fp32 run's). FLA 0.6.0 refuses its
backward on Hopper under Triton < 3.7.1; there the refusal is lifted to time it and its gradients are not compared
(fla_backward_guard_lifted)."""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import bench, bench_eager, finish, start

BT = ((1, 65536), (1, 32768), (1, 16384), (1, 8192), (2, 4096), (4, 2048), (1, 2048), (16, 512), (64, 128))
# few-head rows (issue 42: (2, 4), (4, 4), (8, 8)) beside the many-head ones
HEADS = ((2, 4), (2, 8), (4, 4), (4, 8), (8, 8), (16, 32), (16, 64), (32, 32))
# varlen packs (B = 1, cu_seqlens): long and short sequences mixed, many decode-sized prefill pieces, and one long
# sequence among many short ones (the long one's chain is the whole time unless it is split), and an equal pack
PACKS = {
    "mixed 6": (4096, 1024, 333, 2048, 57, 512),
    "32 pieces": tuple(100 + (37 * i * i) % 900 for i in range(32)),
    "1 long + 7": (16384,) + (512,) * 7,
    "1 long + 31": (16384,) + (256,) * 31,
    "8 x 2048 packed": (2048,) * 8,  # equal sequences: the planner sizes a pack's segments over the whole pack
}
PACK_HEADS = ((2, 8), (16, 32))
HOST_OFFSETS = [False]  # --host-offsets, for the whole run
L2NORM = [False]  # --l2norm: both sides normalize q and k in the kernel (Qwen3.5 / Qwen3-Next's setting)
QUICK = {
    ((1, 32768), (16, 64)),
    ((1, 8192), (16, 32)),
    ((4, 2048), (2, 8)),
    ((1, 2048), (32, 32)),
    ((1, 32768), (2, 8)),
    ((2, 4096), (4, 8)),
    ((1, 16384), (8, 8)),  # issue 42's two parity rows: this and 1 x 32768 (2, 8)
    ((1, 65536), (2, 4)),
}
NO_INIT = {((1, 32768), (2, 8)), ((4, 2048), (2, 8)), ((64, 128), (16, 32)), ((1, 8192), (16, 64))}


def inputs(b: int, t: int, h: int, hv: int, lens: tuple[int, ...] | None = None, init: bool = True):
    if lens is not None:
        b, t = 1, sum(lens)
    q = F.normalize(torch.randn(b, t, h, 128, device="cuda"), dim=-1).bfloat16()
    k = F.normalize(torch.randn(b, t, h, 128, device="cuda"), dim=-1).bfloat16()
    v = torch.randn(b, t, hv, 128, device="cuda").bfloat16()
    g = F.logsigmoid(torch.randn(b, t, hv, device="cuda"))
    beta = torch.randn(b, t, hv, device="cuda").sigmoid().bfloat16()
    n = b if lens is None else len(lens)
    state = torch.randn(n, hv, 128, 128, device="cuda") * 0.1 if init else None
    cu = None
    if lens is not None:
        cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
    return q, k, v, g, beta, state, cu


@contextlib.contextmanager
def overlap_forced(rule):
    """api.choose_overlap replaced for the block: rule(the plan's prep CTA count) -> the count used."""
    from deep_gemm_sm120.families.gated_delta_rule import api

    planned = api.choose_overlap
    api.choose_overlap = lambda *a: rule(planned(*a))
    try:
        yield
    finally:
        api.choose_overlap = planned


@contextlib.contextmanager
def segments_set(value: str):
    """DG_SM120_GDR_SEGMENT_CHUNKS for the block (a new value plans anew: it is part of the call's key)."""
    from deep_gemm_sm120.families.gated_delta_rule.plan import SEGMENT_ENV

    saved = os.environ.get(SEGMENT_ENV)
    os.environ[SEGMENT_ENV] = value
    try:
        yield
    finally:
        if saved is None:
            del os.environ[SEGMENT_ENV]
        else:
            os.environ[SEGMENT_ENV] = saved


def case(
    b: int, t: int, h: int, hv: int, iters: int, fla, lens=None, init: bool = True, ab: bool = False, split_ab=False
) -> dict:
    import deep_gemm_sm120 as dg

    q, k, v, g, beta, state, cu = inputs(b, t, h, hv, lens, init)
    extra = {} if cu is None else {"cu_seqlens": cu}
    if cu is not None and HOST_OFFSETS[0]:  # --host-offsets: the planner sees the pack's lengths
        extra["cu_seqlens_cpu"] = cu.cpu()
    row = {"b": b, "t": t, "h": h, "hv": hv, "pack": lens, "init": init, "host_offsets": HOST_OFFSETS[0]}

    def ours(chunk):
        return dg.chunk_gated_delta_rule(
            q, k, v, g, beta, initial_state=state, output_final_state=True, chunk_size=chunk, **extra
        )

    with torch.no_grad():
        for chunk in (32, 64):
            row[f"ours_c{chunk}_us"] = bench(lambda: ours(chunk), iters) * 1e6
        if ab:  # the sequential launch (prep grid first), same inputs
            with overlap_forced(lambda _planned: 0):
                row["ours_c32_sequential_us"] = bench(lambda: ours(32), iters) * 1e6
        if split_ab:  # whole sequences, same inputs
            with segments_set("0"):
                row["ours_c32_unsplit_us"] = bench(lambda: ours(32), iters) * 1e6
        if fla is not None:
            fla_extra = {} if cu is None else {"cu_seqlens": cu.long()}
            fla_call = lambda: fla(q, k, v, g, beta, initial_state=state, output_final_state=True, **fla_extra)
            row["fla_us"] = bench(fla_call, iters) * 1e6
            theirs = fla_call()[0].double()
            ours_o = ours(32)[0].double()
            row["o_rel_l2_vs_fla"] = ((ours_o - theirs).norm() / theirs.norm()).item()
            for chunk in (32, 64):
                row[f"speedup_c{chunk}"] = row["fla_us"] / row[f"ours_c{chunk}_us"]
    return row


def fla_backward_guard_lifted() -> bool:
    """FLA 0.6.0 refuses its gated backward on Hopper under Triton 3.4.0 - 3.7.0 (its issue 640: a transpose of a
    wgmma result is mis-lowered in chunk_bwd_dqkwg, so dg and dbeta come out wrong). To time FLA there the refusal
    is lifted: the kernels are the ones FLA runs (its fix adds one 8 KB scratch round trip a CTA), but the
    gradients are not trusted, so rows do not compare gradients with them. True when lifted (the JSON says so);
    tests/test_gated_delta_rule_gpu.py compares gradients with FLA on mma.sync instead."""
    try:
        from fla.ops.common import chunk_o
    except ImportError:
        return False
    if getattr(chunk_o, "IS_NVIDIA_HOPPER", False) and getattr(chunk_o, "TRITON_ABOVE_3_4_0", False):
        if not getattr(chunk_o, "TRITON_ABOVE_3_7_1", True):
            chunk_o.TRITON_ABOVE_3_7_1 = True
            return True
    return False


def backward_case(
    b: int,
    t: int,
    h: int,
    hv: int,
    iters: int,
    fla,
    lens=None,
    init: bool = True,
    fla_trusted=True,
    tf32=False,
    torch_stages_ab=False,
) -> dict:
    """Forward + backward (every input's gradient, the final state's included) of ours at chunk 32 and of FLA on
    the same inputs, each by graph replay where it captures (eager otherwise); the relative L2 distance of each
    gradient to FLA's (when FLA's gradients are trusted here). tf32: ours again with TF32 matmuls allowed (the
    backward's fp32 torch stages), its time and each gradient's distance to the fp32 run's. torch_stages_ab: ours
    again with stages 0 and 3 as torch operations instead of the B3 kernel (DG_SM120_GDR_CHUNK_GRADS=0), its time
    and each gradient's distance to the kernel path's."""
    import deep_gemm_sm120 as dg

    q, k, v, g, beta, state, cu = inputs(b, t, h, hv, lens, init)
    leaves = [x.requires_grad_() for x in (q, k, v, g, beta) + ((state,) if state is not None else ())]
    do = torch.randn_like(v)
    n = len(lens) if lens is not None else b
    dfs = torch.randn(n, hv, 128, 128, device="cuda") * 0.1
    row = {"b": b, "t": t, "h": h, "hv": hv, "pack": lens, "init": init, "l2norm": L2NORM[0]}

    def step(fn):
        def run():
            for x in leaves:
                x.grad = None
            o, fs = fn()
            torch.autograd.backward((o, fs), (do, dfs))
            return [x.grad for x in leaves]

        return run

    ours = step(
        lambda: dg.chunk_gated_delta_rule(
            q, k, v, g, beta, initial_state=state, output_final_state=True, chunk_size=32, cu_seqlens=cu,
            use_qk_l2norm_in_kernel=L2NORM[0],
        )
    )  # fmt: skip
    row["ours_fwd_bwd_us"], row["ours_timing"] = _replay_or_eager(ours, iters)
    if fla is not None:
        theirs = step(
            lambda: fla(
                q, k, v, g, beta, initial_state=state, output_final_state=True,
                cu_seqlens=None if cu is None else cu.long(), use_qk_l2norm_in_kernel=L2NORM[0],
            )
        )  # fmt: skip
        row["fla_fwd_bwd_us"], row["fla_timing"] = _replay_or_eager(theirs, iters)
        row["speedup"] = row["fla_fwd_bwd_us"] / row["ours_fwd_bwd_us"]
        if fla_trusted:
            row["grad_rel_l2_vs_fla"] = _grad_distances(ours(), theirs())
    if torch_stages_ab:
        from deep_gemm_sm120.families.gated_delta_rule.backward import CHUNK_GRADS_ENV

        kernel = [x.clone() for x in ours()]
        saved = os.environ.get(CHUNK_GRADS_ENV)
        os.environ[CHUNK_GRADS_ENV] = "0"
        try:
            row["ours_torch_stages_us"], _ = _replay_or_eager(ours, iters)
            row["torch_stages_grad_rel_l2_vs_b3"] = _grad_distances(ours(), kernel)
        finally:
            if saved is None:
                del os.environ[CHUNK_GRADS_ENV]
            else:
                os.environ[CHUNK_GRADS_ENV] = saved
    if tf32:
        fp32 = [x.clone() for x in ours()]
        saved = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = True
        try:
            row["ours_tf32_us"], _ = _replay_or_eager(ours, iters)
            row["tf32_grad_rel_l2_vs_fp32"] = _grad_distances(ours(), fp32)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = saved
    return row


def _grad_distances(mine, ref) -> dict:
    return {
        name: ((a.double() - r.double()).norm() / r.double().norm().clamp_min(1e-30)).item()
        for name, a, r in zip(("dq", "dk", "dv", "dg", "dbeta", "dh0"), mine, ref)
    }


@contextlib.contextmanager
def stage_clock(totals: dict):
    """The backward's stages (backward.py) and the kernel passes (api.gdr_states, api.gdr_state_grads) wrapped for
    the block: each call synchronizes before and after and adds its wall time (us) to totals[stage]. Eager and
    synchronized, so the parts are a breakdown of one call, not its graph-replay time."""
    from deep_gemm_sm120.families.gated_delta_rule import api
    from deep_gemm_sm120.families.gated_delta_rule import backward as bw

    stages = [
        (bw, "chunk_gated_delta_rule_backward", "backward"),
        (bw, "_factors", "0 factors"),
        (api, "gdr_states", "1 states (kernels)"),
        (api, "gdr_state_grads", "2 state grads (kernels)"),
        (api, "gdr_chunk_grads", "0 + 3 by B3 (kernel)"),
        (bw, "_chunk_grads", "3 input grads"),
        (bw, "_gather", "gather"),
        (bw, "_scatter", "scatter"),
        (bw, "_l2norm_backward", "l2norm backward"),
    ]
    saved = [(mod, name, getattr(mod, name)) for mod, name, _ in stages]

    def timed(fn, label):
        def wrapper(*a, **kw):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = fn(*a, **kw)
            torch.cuda.synchronize()
            totals[label] = totals.get(label, 0.0) + (time.perf_counter() - t0) * 1e6
            return out

        return wrapper

    for (mod, name, label), (_, _, fn) in zip(stages, saved):
        setattr(mod, name, timed(fn, label))
    try:
        yield totals
    finally:
        for mod, name, fn in saved:
            setattr(mod, name, fn)


def backward_profile(b: int, t: int, h: int, hv: int, lens=None, init: bool = True) -> dict:
    """One eager forward + backward of ours, the backward split by stage_clock (us; after a warm-up call)."""
    import deep_gemm_sm120 as dg

    q, k, v, g, beta, state, cu = inputs(b, t, h, hv, lens, init)
    leaves = [x.requires_grad_() for x in (q, k, v, g, beta) + ((state,) if state is not None else ())]
    do, n = torch.randn_like(v), len(lens) if lens is not None else b
    dfs = torch.randn(n, hv, 128, 128, device="cuda") * 0.1
    fwd = lambda: dg.chunk_gated_delta_rule(
        q, k, v, g, beta, initial_state=state, output_final_state=True, chunk_size=32, cu_seqlens=cu
    )
    torch.autograd.backward(fwd(), (do, dfs))  # warm-up: kernels built
    totals: dict = {}
    with stage_clock(totals):
        for x in leaves:
            x.grad = None
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        outs = fwd()
        torch.cuda.synchronize()
        totals["forward"] = (time.perf_counter() - t0) * 1e6
        torch.autograd.backward(outs, (do, dfs))
    named = sum(v for k, v in totals.items() if k not in ("forward", "backward"))
    totals["backward rest"] = totals["backward"] - named  # v', dv' (two batched matmuls), casts, the layout
    print("   stages (us): " + "; ".join(f"{k} {v:.0f}" for k, v in totals.items()), flush=True)
    return totals


def _sides(ours: str, fla, q, k, v, g, beta, state, cu) -> dict:
    """{label: call} of ours (chunk 32) and, where fla-core imports, FLA's, on the same inputs (the profilers')."""
    import deep_gemm_sm120 as dg

    sides = {
        ours: lambda: dg.chunk_gated_delta_rule(
            q, k, v, g, beta, initial_state=state, output_final_state=True, chunk_size=32, cu_seqlens=cu,
            use_qk_l2norm_in_kernel=L2NORM[0],
        )
    }  # fmt: skip
    if fla is not None:
        sides["FLA"] = lambda: fla(
            q, k, v, g, beta, initial_state=state, output_final_state=True, cu_seqlens=None if cu is None else cu.long(),
            use_qk_l2norm_in_kernel=L2NORM[0],
        )  # fmt: skip
    return sides


def backward_kernels(b: int, t: int, h: int, hv: int, fla, lens=None, init: bool = True) -> dict:
    """Kernel by kernel, the CUDA time of one forward + backward of each side (torch.profiler, after a warm-up
    call): {side: {kernel: us}}, printed largest first. Unlike stage_clock's split this is GPU time only, so a
    side's kernels add up to about its graph-replay time."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as prof

    q, k, v, g, beta, state, cu = inputs(b, t, h, hv, lens, init)
    for x in (q, k, v, g, beta) + ((state,) if state is not None else ()):
        x.requires_grad_()
    do, n = torch.randn_like(v), len(lens) if lens is not None else b
    dfs = torch.randn(n, hv, 128, 128, device="cuda") * 0.1
    sides = _sides("ours", fla, q, k, v, g, beta, state, cu)
    leaves = [x for x in (q, k, v, g, beta, state) if x is not None]
    out = {}
    for name, fn in sides.items():
        torch.autograd.backward(fn(), (do, dfs))
        for x in leaves:  # as a training step after zero_grad(set_to_none=True): no accumulation into .grad
            x.grad = None
        torch.cuda.synchronize()
        with prof(activities=[ProfilerActivity.CUDA]) as p:
            torch.autograd.backward(fn(), (do, dfs))
            torch.cuda.synchronize()
        for x in leaves:
            x.grad = None
        rows = sorted(
            ((_kernel_label(e.key), e.device_time_total) for e in p.key_averages() if e.device_time_total > 0),
            key=lambda r: -r[1],
        )
        out[name] = dict(rows)
        total = sum(us for _, us in rows)
        print(f"   {name} kernels, {total:.0f} us in all: " + "; ".join(f"{key} {us:.0f}" for key, us in rows[:14]))
    return out


def chunk_grads_times(b: int, t: int, h: int, hv: int, iters: int, lens=None, init: bool = True) -> dict:
    """B3 alone (api.gdr_chunk_grads) by CUDA-graph replay on the states and state gradients the two passes store:
    {"planned": the fold bwd_chunk.choose_fold picks, fold: us for every divisor of the GVA group}."""
    from deep_gemm_sm120.device import num_sms_for
    from deep_gemm_sm120.families.gated_delta_rule import api
    from deep_gemm_sm120.families.gated_delta_rule import backward as bw
    from deep_gemm_sm120.families.gated_delta_rule.bwd_chunk import choose_fold

    q, k, v, g, beta, state, cu = inputs(b, t, h, hv, lens, init)
    n = len(lens) if lens is not None else b
    do, dfs = torch.randn_like(v), torch.randn(n, hv, 128, 128, device="cuda") * 0.1
    layout = bw.device_layout(q.shape[0], q.shape[1], cu, 64, q.device, exact=True)
    slots, count = bw.state_slots(layout), layout.token.shape[0]
    args = (q, k, v, g, beta, None)
    states = api.gdr_states(*args, state, cu, False, slots, count)
    dh_next, _ = api.gdr_state_grads(*args, do, dfs, cu, False, slots, count, False)
    first, length = layout.token[:, 0].to(torch.int32), layout.valid.sum(-1, dtype=torch.int32)
    group = hv // h
    out = {"planned": choose_fold(count, h, group, num_sms_for(q.device.index or 0))}
    for fold in (f for f in range(1, group + 1) if group % f == 0):
        call = lambda fold=fold: api.gdr_chunk_grads(
            *args[:5], None, do, False, states, dh_next, first, length, cu is None, fold
        )
        out[fold], _ = _replay_or_eager(call, iters)
    return out


def _kernel_label(key: str) -> str:
    """A profiler kernel name without its return type, namespaces and parameter list, so that instances of one
    template (the recurrence's forward, states and transition walks) keep their distinguishing arguments."""
    name = key.removeprefix("void ").replace("(anonymous namespace)::", "")
    depth = 0
    for i, ch in enumerate(name):  # the parameter list: the first '(' outside the template arguments
        depth += (ch == "<") - (ch == ">")
        if ch == "(" and depth == 0:
            name = name[:i]
            break
    for prefix in ("sm120::", "at::native::"):
        name = name.replace(prefix, "")
    return name.replace("__nv_bfloat16", "bf16").strip()[:110]


def _replay_or_eager(fn, iters: int) -> tuple[float, str]:
    """(us per call, how it was timed): CUDA-graph replay (harness.bench), or eager CUDA events when the capture
    fails (a host read inside the call); the failure is named in the second field."""
    try:
        return bench(fn, iters) * 1e6, "graph"
    except RuntimeError as e:
        torch.cuda.synchronize()
        return bench_eager(fn, iters) * 1e6, f"eager (capture failed: {str(e).splitlines()[0][:80]})"


def grid(quick: bool):
    """(label, b, t, h, hv, lens, init) of every row."""
    for b, t in BT:
        for h, hv in HEADS:
            if quick and ((b, t), (h, hv)) not in QUICK:
                continue
            yield f"{b} x {t}", b, t, h, hv, None, True
            if not quick and ((b, t), (h, hv)) in NO_INIT:
                yield f"{b} x {t}", b, t, h, hv, None, False
    if not quick:
        for name, lens in PACKS.items():
            for h, hv in PACK_HEADS:
                yield name, 1, sum(lens), h, hv, lens, True


def profile(b: int, t: int, h: int, hv: int, fla, lens=None, init: bool = True) -> None:
    """Kernel-by-kernel CUDA time of one call of each side (after warm-up)."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as prof

    q, k, v, g, beta, state, cu = inputs(b, t, h, hv, lens, init)
    sides = _sides("ours c32", fla, q, k, v, g, beta, state, cu)
    for name, fn in sides.items():
        fn(), torch.cuda.synchronize()
        with prof(activities=[ProfilerActivity.CUDA]) as p:
            fn()
            torch.cuda.synchronize()
        rows = [(e.key, e.device_time_total) for e in p.key_averages() if e.device_time_total > 0]
        print(f"   {name}: " + "; ".join(f"{key[:60]} {us:.0f} us" for key, us in sorted(rows, key=lambda r: -r[1])))


def sweep(b: int, t: int, h: int, hv: int, iters: int, lens=None, init: bool = True, chunks=(32, 64)) -> dict:
    """Ours at chunk 32 and 64 with each (V slice, K split) plan forced (api.choose_plan replaced for the call)."""
    import deep_gemm_sm120 as dg
    from deep_gemm_sm120.families.gated_delta_rule import api
    from deep_gemm_sm120.families.gated_delta_rule.kernel import plans

    q, k, v, g, beta, state, cu = inputs(b, t, h, hv, lens, init)
    chosen, out = api.choose_plan, {}
    try:
        for chunk in chunks:
            for plan in plans(chunk):
                api.choose_plan = lambda *_a, plan=plan: plan
                out[f"c{chunk} v{plan[0]} k{plan[1]}"] = (
                    bench(
                        lambda: dg.chunk_gated_delta_rule(
                            q,
                            k,
                            v,
                            g,
                            beta,
                            initial_state=state,
                            output_final_state=True,
                            chunk_size=chunk,
                            cu_seqlens=cu,
                        ),
                        iters,
                    )
                    * 1e6
                )
    finally:
        api.choose_plan = chosen
    print("   sweep: " + ", ".join(f"{key} {us:.0f}" for key, us in out.items()), flush=True)
    return out


def overlap_sweep(b: int, t: int, h: int, hv: int, iters: int, lens, init: bool, counts: list[int]) -> dict:
    """Ours at chunk 32 with each persistent prep CTA count forced, where the plan overlaps (else nothing)."""
    import deep_gemm_sm120 as dg

    q, k, v, g, beta, state, cu = inputs(b, t, h, hv, lens, init)
    out, planned = {}, []
    for count in counts:
        with overlap_forced(lambda p, count=count: planned.append(p) or (count if p else 0)):
            out[count] = (
                bench(
                    lambda: dg.chunk_gated_delta_rule(
                        q, k, v, g, beta, initial_state=state, output_final_state=True, chunk_size=32, cu_seqlens=cu
                    ),
                    iters,
                )
                * 1e6
            )
        if not any(planned):  # the plan does not overlap here: every count is the same launch
            return {}
    print("   prep CTAs: " + ", ".join(f"{n} {us:.0f}" for n, us in out.items()), flush=True)
    return out


def geomean(xs) -> float:
    xs = list(xs)
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def backward_main(
    run,
    rows_of,
    wanted: set,
    iters: int,
    fla,
    stages: bool = False,
    tf32: bool = False,
    torch_ab: bool = False,
    chunk_grads: bool = False,
) -> int:
    """--backward: forward + backward per row, ours against FLA (--profile: ours split by stage; --tf32: ours with
    TF32 matmuls too; --chunk-grads: B3 alone at every fold)."""
    lifted = fla is not None and fla_backward_guard_lifted()
    if lifted:
        print("FLA's Hopper / Triton < 3.7.1 refusal lifted to time it; its gradients are not compared")
    print(
        f"{'shape':>10} {'H':>3} {'HV':>3} {'init':>4} {'ours fwd+bwd us':>16} {'FLA us':>9} {'x':>6}  worst grad relL2"
    )
    rows = []
    for label, b, t, h, hv, lens, init in rows_of:
        if wanted and f"{label}:{h}/{hv}" not in wanted:
            continue
        r = backward_case(
            b, t, h, hv, iters, fla, lens, init, fla_trusted=not lifted, tf32=tf32, torch_stages_ab=torch_ab
        )
        r["label"] = label
        rows.append(r)
        compared = r.get("grad_rel_l2_vs_fla")
        worst = max(compared.items(), key=lambda kv: kv[1]) if compared else ("-", float("nan"))
        print(
            f"{label:>10} {h:3} {hv:3} {'yes' if init else 'no':>4} {r['ours_fwd_bwd_us']:16.1f} "
            f"{r.get('fla_fwd_bwd_us', float('nan')):9.1f} {r.get('speedup', float('nan')):5.2f}x  "
            f"{worst[0]} {worst[1]:.2e}  [{r['ours_timing']}"
            + (f" / {r['fla_timing']}]" if "fla_timing" in r else "]"),
            flush=True,
        )
        if torch_ab:
            worst_ab = max(r["torch_stages_grad_rel_l2_vs_b3"].items(), key=lambda kv: kv[1])
            print(
                f"   torch stages 0 / 3: {r['ours_torch_stages_us']:.1f} us, worst grad relL2 vs B3 {worst_ab[0]} {worst_ab[1]:.2e}"
            )
        if tf32:
            worst32 = max(r["tf32_grad_rel_l2_vs_fp32"].items(), key=lambda kv: kv[1])
            print(f"   tf32: {r['ours_tf32_us']:.1f} us, worst grad relL2 vs fp32 {worst32[0]} {worst32[1]:.2e}")
        if chunk_grads:
            r["chunk_grads_us"] = times = chunk_grads_times(b, t, h, hv, iters, lens, init)
            print(
                f"   B3 alone (planned fold {times['planned']}): "
                + ", ".join(f"fold {f} {us:.1f} us" for f, us in times.items() if f != "planned")
            )
        if stages:
            r["stages_us"] = backward_profile(b, t, h, hv, lens, init)
            r["kernels_us"] = backward_kernels(b, t, h, hv, fla, lens, init)
    summary = {}
    if fla is not None and rows:
        xs = [r["speedup"] for r in rows]
        summary = {"geomean": geomean(xs), "min": min(xs), "below_1": sum(x < 1.0 for x in xs)}
        print("fwd+bwd over FLA: " + ", ".join(f"{k} {v:.3g}" for k, v in summary.items()))
    return finish(
        run, {"fla": fla is not None, "fla_guard_lifted": lifted, "backward": True, "rows": rows, "summary": summary}
    )


def main() -> int:
    def flags(ap: argparse.ArgumentParser) -> None:  # --quick: the six shapes of issue 29's table, fewer replays
        ap.add_argument(
            "--profile",
            action="store_true",
            help="per-kernel CUDA times (torch.profiler) of each side; with --backward also ours split by stage",
        )
        ap.add_argument("--sweep", action="store_true", help="ours with every (V slice, K split) plan (tuning)")
        ap.add_argument(
            "--max-stages", type=int, help="cap of the recurrence's TMA stages (tuning; default the family's)"
        )
        ap.add_argument("--sweep-chunks", default="32,64", help="chunk sizes the sweep covers (default 32,64)")
        ap.add_argument(
            "--overlap",
            default="auto",
            help="prep beside the recurrence: auto (the plan's), off, or a "
            "persistent prep CTA count wherever the plan overlaps (tuning)",
        )
        ap.add_argument("--overlap-ab", action="store_true", help="also time the sequential launch at chunk 32")
        ap.add_argument(
            "--segments",
            default="",
            help="chunks per segment for every call (DG_SM120_GDR_SEGMENT_CHUNKS; 0: never split; default: planned)",
        )
        ap.add_argument(
            "--split-ab", action="store_true", help="also time chunk 32 unsplit (whole sequences) in the same run"
        )
        ap.add_argument("--no-fla", action="store_true", help="time ours only, even where fla-core imports")
        ap.add_argument(
            "--host-offsets",
            action="store_true",
            help="varlen rows: ours also gets cu_seqlens_cpu (the offsets on the host: the planner sees the lengths)",
        )
        ap.add_argument("--rows", default="", help="only these rows, e.g. '1 x 32768:2/8,1 long + 7:2/8'")
        ap.add_argument(
            "--backward", action="store_true", help="forward + backward of ours (chunk 32) and FLA, eager timing"
        )
        ap.add_argument("--tf32", action="store_true", help="with --backward: ours again with TF32 matmuls allowed")
        ap.add_argument(
            "--torch-stages-ab",
            action="store_true",
            help="with --backward: ours again with stages 0 and 3 as torch operations (no B3 kernel)",
        )
        ap.add_argument(
            "--l2norm",
            action="store_true",
            help="with --backward: both sides with use_qk_l2norm_in_kernel=True (the l2norm's backward timed too)",
        )
        ap.add_argument(
            "--chunk-grads",
            action="store_true",
            help="with --backward: B3 (the per-chunk gradients) alone, by graph replay, at every GVA fold",
        )
        ap.add_argument(
            "--overlap-sweep",
            default="",
            help="persistent prep CTA counts to time at chunk 32 where the plan overlaps (tuning)",
        )

    run = start(__doc__.splitlines()[0], flags)  # off SM120 only the build changes: bf16 mma.sync is native on sm_90a
    args = run.args
    try:
        if args.no_fla:
            raise ImportError("--no-fla")
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule as fla
    except ImportError as e:
        print(f"fla-core not importable ({e}); timing ours only")
        fla = None
    if args.overlap != "auto":  # for the whole run
        forced = 0 if args.overlap == "off" else int(args.overlap)
        overlap_forced(lambda planned: forced if planned else 0).__enter__()
    HOST_OFFSETS[0] = args.host_offsets
    L2NORM[0] = args.l2norm
    if args.max_stages:
        fam = __import__("deep_gemm_sm120.families.gated_delta_rule.kernel", fromlist=["MAX_STAGES"])
        fam.MAX_STAGES = args.max_stages
    iters = 3 if args.quick else 10
    print(f"FLA {'present' if fla else 'absent'}")
    print(
        f"{'shape':>10} {'H':>3} {'HV':>3} {'init':>4} {'ours c32 us':>12} {'ours c64 us':>12} {'FLA us':>9} "
        f"{'x c32':>6} {'x c64':>6} {'relL2 vs FLA':>12}"
    )
    whole_run = contextlib.ExitStack()  # held until main returns: a dropped context manager would undo the knob
    if args.segments:
        whole_run.enter_context(segments_set(args.segments))
    wanted = {w.strip() for w in args.rows.split(",") if w.strip()}
    rows = []
    if args.backward:
        return backward_main(
            run,
            grid(args.quick and not wanted),
            wanted,
            iters,
            fla,
            args.profile,
            args.tf32,
            args.torch_stages_ab,
            args.chunk_grads,
        )
    for label, b, t, h, hv, lens, init in grid(args.quick and not wanted):
        if wanted and f"{label}:{h}/{hv}" not in wanted:
            continue
        r = case(b, t, h, hv, iters, fla, lens, init, args.overlap_ab, args.split_ab)
        r["label"] = label
        rows.append(r)
        print(
            f"{label:>10} {h:3} {hv:3} {'yes' if init else 'no':>4} {r['ours_c32_us']:12.1f} "
            f"{r['ours_c64_us']:12.1f} {r.get('fla_us', float('nan')):9.1f} "
            f"{r.get('speedup_c32', float('nan')):5.2f}x {r.get('speedup_c64', float('nan')):5.2f}x "
            f"{r.get('o_rel_l2_vs_fla', float('nan')):12.2e}"
            + (f"   sequential c32 {r['ours_c32_sequential_us']:.1f}" if args.overlap_ab else "")
            + (f"   unsplit c32 {r['ours_c32_unsplit_us']:.1f}" if args.split_ab else ""),
            flush=True,
        )
        if args.profile:
            profile(b, t, h, hv, fla, lens, init)
        if args.overlap_sweep:
            r["overlap_sweep_us"] = overlap_sweep(
                b, t, h, hv, iters, lens, init, [int(x) for x in args.overlap_sweep.split(",")]
            )
        if args.sweep:
            r["sweep_us"] = sweep(b, t, h, hv, iters, lens, init, tuple(int(c) for c in args.sweep_chunks.split(",")))
    summary = {}
    if fla is not None:
        for chunk in (32, 64):
            xs = [r[f"speedup_c{chunk}"] for r in rows]
            summary[f"geomean_c{chunk}"] = geomean(xs)
            summary[f"min_c{chunk}"] = min(xs)
            summary[f"below_1_c{chunk}"] = sum(x < 1.0 for x in xs)
        summary["max_rel_l2_vs_fla"] = max(r["o_rel_l2_vs_fla"] for r in rows)
        print("over FLA: " + ", ".join(f"{k} {v:.3g}" for k, v in summary.items()))
    return finish(run, {"fla": fla is not None, "rows": rows, "summary": summary})


if __name__ == "__main__":
    sys.exit(main())
