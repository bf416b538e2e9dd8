#!/usr/bin/env python3
"""What the gated-delta-rule backward's storage and operand precision cost, before a kernel commits to them
(issue 41's B3 plan, docs/gated_delta_rule.md): the batched torch backward (families/gated_delta_rule/backward.py)
in fp32, then with the rounding a kernel plan would add, each against the same backward in float64.

    python benchmarks/gdr_backward_precision.py [--t 1024] [--heads 2/4] [--seeds 3] [--decay-shift 0]
        [--device cpu|cuda] [--json F]

Variants (each adds its rounding to the fp32 backward):
  fp32            the torch stages as they are (the reference of the variants' cost)
  states bf16     the chunk states h and their gradients dh stored in bf16 (B1 / B2 storing half the bytes),
                  read as the kernel path reads them (v' and dv' recomputed from the stored values)
  operands bf16   stage 3's state products with bf16 operands, fp32 accumulation (the B3 kernel's mma.sync):
                  h, dh, do, v' and dv' rounded before they meet
  both            the two together
  products bf16   every matrix product of the backward's torch stages on bf16 operands, fp32 accumulation: the
                  factors' (K K^T, Q K^T, T Kb, T Vb), v' and dv', and every product of stage 3, the C x C algebra
                  with T and its gradient included (a B3 kernel doing all of its products on mma.sync); T itself
                  is formed in fp32
  kernel plan     products bf16 with the states stored in bf16
Inputs: FLA's recipe at K = V = 128 (bf16 q / k l2-normalized in the kernel, g = logsigmoid, beta = sigmoid), an
initial state and the final state's gradient. Reported: the relative L2 distance of every gradient to float64's,
the issue's bound being 0.02 at bf16. Runs on the CPU (minutes at T = 1024) or a GPU.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "host"))

from deep_gemm_sm120.families.gated_delta_rule import backward as bw

NAMES = ("dq", "dk", "dv", "dg", "dbeta", "dh0")
VARIANTS = ("fp32", "states bf16", "operands bf16", "both", "products bf16", "kernel plan")


def _bf16(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.bfloat16).to(x.dtype)


@contextlib.contextmanager
def bf16_operands():
    """Stage 3 with its state products' operands rounded to bf16 (h, v', do, dh, dv'), fp32 accumulation."""
    saved = bw._chunk_grads

    def grads(q, k, v, beta, f, h, vnew, do, dh_next, dvnew, scale, before_last):
        return saved(q, k, v, beta, f, _bf16(h), _bf16(vnew), _bf16(do), _bf16(dh_next), _bf16(dvnew), scale,
                     before_last)  # fmt: skip

    bw._chunk_grads = grads  # type: ignore[assignment]
    try:
        yield
    finally:
        bw._chunk_grads = saved


@contextlib.contextmanager
def bf16_products():
    """Every `a @ b` of the backward on bf16-rounded operands (fp32 accumulation and result). Batched triangular
    solves (T = (I + A)^-1) stay fp32, as a kernel's SIMT substitution would."""
    saved = torch.Tensor.__matmul__
    torch.Tensor.__matmul__ = lambda a, b: saved(_bf16(a), _bf16(b))  # type: ignore[method-assign]
    try:
        yield
    finally:
        torch.Tensor.__matmul__ = saved  # type: ignore[method-assign]


def stored_states(args) -> tuple:
    """The fp32 backward's chunk states and state gradients, as its torch stages 1 and 2 form them."""
    got, saved = {}, (bw._states, bw._reverse)
    bw._states = lambda *a: got.setdefault("states", saved[0](*a))  # type: ignore[assignment]
    bw._reverse = lambda *a: got.setdefault("reverse", saved[1](*a))  # type: ignore[assignment]
    try:
        bw.chunk_gated_delta_rule_backward(*args)
    finally:
        bw._states, bw._reverse = saved
    return got["states"][0], got["reverse"][0], got["reverse"][2]


def inputs(t: int, h: int, hv: int, seed: int, device: str, shift: float):
    gen = torch.Generator(device=device).manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=gen, device=device)
    q, k, v = r(1, t, h, 128).bfloat16(), r(1, t, h, 128).bfloat16(), r(1, t, hv, 128).bfloat16()
    g, beta = F.logsigmoid(r(1, t, hv) + shift), r(1, t, hv).sigmoid().bfloat16()
    h0, do, dfs = r(1, hv, 128, 128) * 0.1, r(1, t, hv, 128).bfloat16(), r(1, hv, 128, 128) * 0.1
    return q, k, v, g, beta, h0, do, dfs


def run(t: int, h: int, hv: int, seed: int, device: str, shift: float = 0.0) -> dict:
    q, k, v, g, beta, h0, do, dfs = inputs(t, h, hv, seed, device, shift)
    wide = [x.double() for x in (q, k, v, g, beta, h0, do, dfs)]
    ref = bw.chunk_gated_delta_rule_backward(*wide[:5], wide[6], wide[7], 128**-0.5, wide[5], None, True)
    # fp32 work on the bf16 inputs' exact values (the float64 reference sees the same values)
    args = (*(x.float() for x in (q, k, v, g, beta)), do.float(), dfs, 128**-0.5, h0, None, True)
    states, dh_next, dh0 = stored_states(args)
    # h and dh stored in bf16, as the kernel path reads them: v' and dv' recomputed from the stored values
    # (one sequence of fixed length: the kernels' slots are the torch stages' chunk order, dh0 needs no reorder)
    passes = (lambda slots, count: _bf16(states), lambda do_, dfinal, slots, count, want: (_bf16(dh_next), dh0))
    out = {}
    for name in VARIANTS:
        stored = passes if name in ("states bf16", "both", "kernel plan") else ()
        rounding = contextlib.nullcontext()
        if name in ("operands bf16", "both"):
            rounding = bf16_operands()
        elif name in ("products bf16", "kernel plan"):
            rounding = bf16_products()
        with rounding:
            got = bw.chunk_gated_delta_rule_backward(*args, 64, *stored)
        out[name] = {n: float((a.double() - b).norm() / b.norm().clamp_min(1e-300)) for n, a, b in zip(NAMES, got, ref)}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--t", type=int, default=1024)
    ap.add_argument("--heads", default="2/4", help="H/HV")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--decay-shift", type=float, default=0.0, help="g = logsigmoid(N(shift, 1)): 6 decays slowly")
    ap.add_argument("--json")
    args = ap.parse_args()
    h, hv = map(int, args.heads.split("/"))
    worst = {name: dict.fromkeys(NAMES, 0.0) for name in VARIANTS}
    for seed in range(args.seeds):
        for name, errs in run(args.t, h, hv, seed, args.device, args.decay_shift).items():
            for n, e in errs.items():
                worst[name][n] = max(worst[name][n], e)
    print(
        f"T = {args.t}, H / HV = {h} / {hv}, decay shift {args.decay_shift}, {args.seeds} seeds, {args.device}: worst relative L2 to float64"
    )
    print(f"{'variant':>14} " + " ".join(f"{n:>9}" for n in NAMES))
    for name in VARIANTS:
        print(f"{name:>14} " + " ".join(f"{worst[name][n]:9.2e}" for n in NAMES))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(
                {"t": args.t, "h": h, "hv": hv, "decay_shift": args.decay_shift, "seeds": args.seeds, "worst": worst},
                fh,
                indent=1,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
