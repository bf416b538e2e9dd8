#!/usr/bin/env python3
"""Sparse and paged-sparse MQA logits at DeepSeek V4.1-like indexer shapes (H = 64, D = 128, MXFP8 and MXFP4):
this run's time (metadata + logits, and the logits kernel alone; CUDA-graph replay), a torch gather reference in
the same run, and the RTX 5090 roofline estimate.

    python benchmarks/bench_sparse_mqa_logits.py [--quick] [--json out.json]       # needs a GPU

Off SM120 the block-scaled MMAs run through the sm_90 emulation (DG_SM120_EMULATE=1 is set here), so those times
measure the emulation and say nothing about SM120 speed. The roofline is arithmetic, not a measurement, and a
lower bound on time:
    time >= max(FLOPs / peak, bytes / 1792 GB/s),   peak = 838 TFLOP/s (MXFP8) or 1676 TFLOP/s (MXFP4), dense,
FLOPs = 2 * H * D * (scored (row, token) pairs), bytes = q + the distinct KV rows any row selected (+ scales) +
weights + bf16 logits + the slot table, each once (rows that select the same block share it through L2).
torch: the selected rows gathered and dequantized to bf16, one batched matmul, ReLU, weighted head sum, in row
chunks."""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import bench, finish, start

PEAK = {"mxfp8": 838e12, "mxfp4": 1676e12}
BW = 1792e9


def roofline(pairs: int, h: int, d: int, moved: int, fmt: str) -> float:
    return max(2.0 * pairs * h * d / PEAK[fmt], moved / BW)


def torch_sparse(q_deq, kv_deq, w, tokens, chunk=128):
    """q_deq [S, H, D] bf16, kv_deq [N, D] bf16, tokens [S, K] (clamped into range): [S, K] fp32 (unmasked)."""
    out = torch.empty(tokens.shape, device="cuda")
    for r in range(0, tokens.shape[0], chunk):
        keys = kv_deq[tokens[r : r + chunk]]  # [c, K, D]
        s = torch.einsum("chd,ckd->chk", q_deq[r : r + chunk], keys).float().relu_()
        out[r : r + chunk] = torch.einsum("chk,ch->ck", s, w[r : r + chunk].float())
    return out


def prefill_case(s: int, n: int, fmt: str, block: int, num_max: int):
    from deep_gemm_sm120.selftest.workloads.mqa import sparse_case

    # every row sees a long causal window, so each selects num_max blocks
    ke = [n - s + i + 1 for i in range(s)]
    ks = [max(0, e - 4 * num_max * block) // block * block for e in ke]
    return sparse_case(s, n, 64, 128, fmt, block, num_max, ranges=(ks, ke))


def main() -> int:
    run = start(__doc__.splitlines()[0])
    args = run.args
    import deep_gemm_sm120 as dg
    from deep_gemm_sm120.selftest.workloads.mqa import output_mask, run_sparse, run_sparse_paged, sparse_paged_case

    emulated = run.emulated
    iters = 3 if args.quick else 10
    h, d, rows = 64, 128, []
    print(
        f"{'case':58} {'us':>8} {'logits us':>9} {'torch us':>9} {'5090 roofline us':>17}"
        f"{'  (emulated MMAs)' if emulated else ''}"
    )

    def record(case, call, logits_only, ref_call, pairs, moved, fmt):
        ours, kernel = bench(call, iters), bench(logits_only, iters)
        theirs = bench(ref_call, 1, warmup=1, replays=2)
        row = {
            "case": case,
            "us": ours * 1e6,
            "logits_us": kernel * 1e6,
            "torch_us": theirs * 1e6,
            "roofline_5090_us": roofline(pairs, h, d, moved, fmt) * 1e6,
            "emulated": emulated,
        }
        rows.append(row)
        print(
            f"{case:58} {row['us']:8.0f} {row['logits_us']:9.0f} {row['torch_us']:9.0f} "
            f"{row['roofline_5090_us']:17.0f}",
            flush=True,
        )

    prefill = (
        [(4096, 65536, "mxfp8", 16, 128)]
        if args.quick
        else [
            (s, 65536, fmt, block, 2048 // block)
            for s in (1024, 4096)
            for fmt in ("mxfp8", "mxfp4")
            for block in (8, 32)
        ]
    )
    for s, n, fmt, block, num_max in prefill:
        c = prefill_case(s, n, fmt, block, num_max)
        tokens, valid = output_mask(c["idx"], c["ks"], c["ke"], block)
        tok = tokens.clamp(0, n - 1)
        qb, kb = c["q_deq"].to(torch.bfloat16), c["kv_deq"].to(torch.bfloat16)
        rb = d // 2 if fmt == "mxfp4" else d
        distinct = int(torch.unique(tok[valid]).numel())
        moved = s * h * (rb + 4) + distinct * (rb + 4) + s * h * 2 + s * num_max * block * 2 + s * num_max * 8
        meta = dg.get_sparse_mqa_logits_metadata(
            c["ks"], c["ke"], n, c["idx"], c["q"][0].dtype, block, use_unaligned_ks=True
        )
        record(
            f"prefill {fmt} S={s} N={n} B={block} slots={num_max}",
            lambda c=c: run_sparse(c),
            lambda: dg.fp8_fp4_sparse_mqa_logits(c["q"], c["kv"], c["w"], meta, num_max, block),
            lambda: torch_sparse(qb, kb, c["w"], tok),
            int(valid.sum()),
            moved,
            fmt,
        )
    decode = (
        [(64, "mxfp8", 16, 128)]
        if args.quick
        else [(s, fmt, block, 2048 // block) for s in (64, 256) for fmt in ("mxfp8", "mxfp4") for block in (8, 32)]
    )
    for s, fmt, block, num_max in decode:
        c = sparse_paged_case(
            s,
            h,
            d,
            fmt,
            block,
            num_max,
            page_kv=64,
            seed=s,
            lens=[int(x) for x in torch.randint(16384, 65536, (s,), generator=torch.Generator().manual_seed(s))],
        )
        zero = torch.zeros_like(c["lens"])
        tokens, valid = output_mask(c["idx"], zero, c["lens"], block)
        page_kv = c["page_kv"]
        phys = c["table"].gather(1, (tokens // page_kv).clamp(max=c["table"].shape[1] - 1)) * page_kv + tokens % page_kv
        flat = c["pages_deq"].reshape(-1, d).to(torch.bfloat16)
        qb = c["q_deq"].to(torch.bfloat16)
        rb = d // 2 if fmt == "mxfp4" else d
        distinct = int(torch.unique(phys[valid]).numel())
        moved = s * h * (rb + 4) + distinct * (rb + 4) + s * h * 2 + s * num_max * block * 2 + s * num_max * 8
        meta = dg.get_paged_sparse_mqa_logits_metadata(
            c["lens"],
            c["table"],
            torch.arange(s, dtype=torch.int32, device="cuda"),
            page_kv,
            c["idx"],
            c["q"][0].dtype,
            block,
        )
        record(
            f"decode paged {fmt} S={s} ctx 16K-64K B={block} slots={num_max}",
            lambda c=c: run_sparse_paged(c),
            lambda: dg.fp8_fp4_paged_sparse_mqa_logits(c["q"], c["cache"], c["w"], meta, num_max, block),
            lambda: torch_sparse(qb, flat, c["w"], phys),
            int(valid.sum()),
            moved,
            fmt,
        )
    return finish(run, {"rows": rows})


if __name__ == "__main__":
    sys.exit(main())
