#!/usr/bin/env python3
"""MQA logits at DeepSeek V3.2 serving shapes: this run's time, a torch reference in the same run, and the
RTX 5090 roofline estimate.

    python benchmarks/bench_mqa_logits.py [--quick] [--json out.json]       # needs a GPU

Off SM120 the block-scaled MMAs run through the sm_90 emulation (DG_SM120_EMULATE=1 is set here), so those
times measure the emulation and say nothing about SM120 speed. The roofline is arithmetic, not a measurement:
    time >= max(FLOPs / 838 TFLOP/s (block-scaled FP8, RTX 5090 dense), bytes / 1792 GB/s),
FLOPs = 2 * H * D * (scored (query, key) pairs), bytes = q + kv (+ scales) + weights + logits written once.
torch: q and kv dequantized to bf16, one batched matmul, ReLU, weighted head sum (chunked to bound memory)."""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import bench, finish, start

PEAK, BW = 838e12, 1792e9


def roofline(pairs: int, h: int, d: int, moved: int) -> float:
    return max(2.0 * pairs * h * d / PEAK, moved / BW)


def torch_dense(q, kv, sf, w, chunk=4096):
    out = torch.empty(q.shape[0], kv.shape[0], device="cuda")
    qb, kb = q.to(torch.bfloat16), kv.to(torch.bfloat16)
    for k0 in range(0, kv.shape[0], chunk):
        s = torch.einsum("shd,kd->shk", qb, kb[k0 : k0 + chunk]).float().relu_()
        out[:, k0 : k0 + chunk] = torch.einsum("shk,sh->sk", s * sf[k0 : k0 + chunk], w)
    return out


def main() -> int:
    run = start(__doc__.splitlines()[0])
    args = run.args
    import deep_gemm_sm120 as dg
    from deep_gemm_sm120.selftest.workloads.mqa import dense_case, paged_cache

    emulated = run.emulated
    iters = 3 if args.quick else 10
    rows = []
    h, d = 64, 128
    print(f"{'case':44} {'us':>9} {'torch us':>9} {'5090 roofline us':>17}{'  (emulated MMAs)' if emulated else ''}")
    for s, sk in ((2048, 8192),) if args.quick else ((2048, 8192), (2048, 32768), (4096, 8192), (4096, 32768)):
        q, kv, sf, w, ks, ke = dense_case(s, sk, h, d, "causal")
        ours = bench(lambda: dg.fp8_mqa_logits(q, (kv, sf), w, ks, ke), iters)
        theirs = bench(lambda: torch_dense(q, kv, sf, w), max(1, iters // 3))
        pairs = int((ke - ks).clamp_min(0).sum())
        moved = q.numel() + kv.numel() + sf.numel() * 4 + w.numel() * 4 + s * sk * 4
        row = {
            "case": f"prefill S={s} SK={sk} H={h} D={d}",
            "us": ours * 1e6,
            "torch_us": theirs * 1e6,
            "roofline_5090_us": roofline(pairs, h, d, moved) * 1e6,
            "emulated": emulated,
        }
        rows.append(row)
        print(f"{row['case']:44} {row['us']:9.0f} {row['torch_us']:9.0f} {row['roofline_5090_us']:17.0f}", flush=True)
    decode = (
        [(64, 1, 8192)] if args.quick else [(b, n, ctx) for b in (64, 256) for n in (1, 2) for ctx in (8192, 32768)]
    )
    for bsz, next_n, ctx in decode:
        g = torch.Generator().manual_seed(bsz + ctx)
        lens = torch.randint(int(0.7 * ctx), int(1.3 * ctx), (bsz,), generator=g).tolist()
        cache, table, _ = paged_cache(lens, 64, d, False, 1)
        lens_t = torch.tensor(lens, dtype=torch.int32, device="cuda")
        q8 = torch.randn(bsz, next_n, h, d, device="cuda").to(torch.float8_e4m3fn)
        w = torch.randn(bsz * next_n, h, device="cuda")
        max_len = table.shape[1] * 64
        sms = torch.cuda.get_device_properties(0).multi_processor_count

        def call():
            meta = dg.get_paged_mqa_logits_metadata(lens_t, 64, sms)
            return dg.fp8_paged_mqa_logits(q8, cache, w, lens_t, table, meta, max_len)

        ours = bench(call, iters)

        def ref():  # torch: gather each batch's blocks, dequantize, score (one batch at a time)
            vals = cache[..., :d].reshape(cache.shape[0], 64, d)
            for b in range(0, bsz, 16):
                blocks = table[b : b + 16].long()
                kv = vals[blocks].reshape(blocks.shape[0], -1, d).view(torch.float8_e4m3fn).to(torch.bfloat16)
                s_ = torch.einsum("bnhd,bkd->bnhk", q8[b : b + 16].to(torch.bfloat16), kv).float().relu_()
                (s_ * w[b * next_n : (b + 16) * next_n].view(-1, next_n, h)[..., None]).sum(2)

        theirs = bench(ref, 1)
        pairs = sum(lens) * next_n
        moved = sum(lens) * (d + 4) + q8.numel() + w.numel() * 4 + bsz * next_n * max_len * 4
        row = {
            "case": f"decode B={bsz} next_n={next_n} ctx~{ctx} block_kv=64",
            "us": ours * 1e6,
            "torch_us": theirs * 1e6,
            "roofline_5090_us": roofline(pairs, h, d, moved) * 1e6,
            "emulated": emulated,
        }
        rows.append(row)
        print(f"{row['case']:44} {row['us']:9.0f} {row['torch_us']:9.0f} {row['roofline_5090_us']:17.0f}", flush=True)
    return finish(run, {"rows": rows})


if __name__ == "__main__":
    sys.exit(main())
