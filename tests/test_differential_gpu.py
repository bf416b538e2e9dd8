"""Randomized differential test (seeded, property-based, within a time budget per family): random legal shapes,
layouts, dtypes and options against the float64 references, and random illegal calls that must raise the
documented error type before any kernel is launched (a counter on the launch entry every family uses).

DG_SM120_DIFF_SECONDS (default 40) bounds each family's time and DG_SM120_DIFF_CASES (default 300) its legal
cases; DG_SM120_DIFF_SEED (default 28) picks the sequence. A failure prints its case, so it replays alone."""

from __future__ import annotations

import os
import random
import time

import pytest
import torch
from gpu_helpers import poison_like, requires_cuda

from deep_gemm_sm120.core.arith import round_up

pytestmark = [pytest.mark.cuda, pytest.mark.emulation, requires_cuda]

SECONDS = float(os.environ.get("DG_SM120_DIFF_SECONDS", "40"))
CASES = int(os.environ.get("DG_SM120_DIFF_CASES", "300"))
SEED = int(os.environ.get("DG_SM120_DIFF_SEED", "28"))


class Launches:
    """Counts launches through the entry every family calls (launch.BOUND.launch, bound first)."""

    def __init__(self):
        from deep_gemm_sm120 import launch

        self.bound = launch.bound()
        self.real, self.count = self.bound.launch, 0

        def counting(*args):
            self.count += 1
            return self.real(*args)

        self.bound.launch = counting

    def restore(self):
        self.bound.launch = self.real


@pytest.fixture()
def launches(sm120_or_emulation):
    counter = Launches()
    yield counter
    counter.restore()


def _drive(family: str, legal, illegal, launches: Launches) -> None:
    """Legal cases until the budget or the case count runs out, each followed by an illegal one."""
    rng = random.Random(f"{SEED}-{family}")
    start, done = time.monotonic(), 0
    while done < CASES and time.monotonic() - start < SECONDS:
        case = legal(rng)
        try:
            case()
        except AssertionError as e:
            raise AssertionError(f"{family} seed {SEED} case {done}: {e}") from None
        bad, err = illegal(rng)
        before = launches.count
        with pytest.raises(err):
            bad()
        assert launches.count == before, f"{family} case {done}: an illegal call launched a kernel"
        done += 1
    assert done >= 5, f"{family}: only {done} cases in {SECONDS} s"
    print(f"{family}: {done} legal and {done} illegal cases in {time.monotonic() - start:.0f} s")


def _dim(rng: random.Random, top: int, align: int = 1) -> int:
    """Mostly small and tails, sometimes large; a multiple of align."""
    x = rng.choice([rng.randint(1, 64), rng.randint(1, 300), rng.randint(1, top)])
    return max(align, round_up(x, align))


def test_bf16_gemm(launches):
    import deep_gemm_sm120 as dg
    from deep_gemm_sm120.testing import calc_diff

    def legal(rng):
        layout = rng.choice(["nt", "nn", "tn", "tt"])
        m, n, k = _dim(rng, 2048, 8), _dim(rng, 2048, 8), _dim(rng, 4096, 8)
        out = rng.choice([torch.bfloat16, torch.float32])
        with_c = rng.random() < 0.3

        def run():
            g = torch.Generator(device="cuda").manual_seed(rng.randint(0, 2**31))
            a = torch.randn(*((k, m) if layout[0] == "t" else (m, k)), device="cuda", dtype=torch.bfloat16, generator=g)
            b = torch.randn(*((k, n) if layout[1] == "n" else (n, k)), device="cuda", dtype=torch.bfloat16, generator=g)
            ref = (a.double().T if layout[0] == "t" else a.double()) @ (
                b.double() if layout[1] == "n" else b.double().T
            )
            c = torch.randn(m, n, device="cuda", dtype=out, generator=g) if with_c else None
            d = poison_like(torch.empty(m, n, device="cuda", dtype=out))
            getattr(dg, f"bf16_gemm_{layout}")(a, b, d, c=c)
            torch.cuda.synchronize()
            diff = calc_diff(d, ref + (c.double() if with_c else 0))
            assert diff <= 1e-5 and not torch.isnan(d).any(), f"{layout} {(m, n, k)} {out} c={with_c}: {diff:.2e}"

        return run

    def illegal(rng):
        m, n, k = _dim(rng, 512, 8), _dim(rng, 512, 8), _dim(rng, 512, 8)
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        kind = rng.choice(["dtype", "shape", "stride", "device"])
        if kind == "dtype":
            return (lambda: dg.bf16_gemm_nt(a.to(torch.int8), b, d)), TypeError
        if kind == "shape":
            return (lambda: dg.bf16_gemm_nt(a, b, d[:, :-1] if n > 1 else d[:0])), ValueError
        if kind == "stride":  # contiguous rows of K - 1 (not a multiple of 8) elements: not 16-byte aligned for TMA
            a1 = torch.randn(m, k - 1 if k > 1 else 7, device="cuda", dtype=torch.bfloat16)
            b1 = torch.randn(n, a1.shape[1], device="cuda", dtype=torch.bfloat16)
            return (lambda: dg.bf16_gemm_nt(a1, b1, d)), ValueError
        return (lambda: dg.bf16_gemm_nt(a.cpu(), b, d)), ValueError

    _drive("bf16_gemm", legal, illegal, launches)


def test_m_grouped_bf16(launches):
    import deep_gemm_sm120 as dg
    from deep_gemm_sm120.testing import calc_diff

    def legal(rng):
        g_, n, k = rng.randint(1, 6), _dim(rng, 1024, 8), _dim(rng, 2048, 8)
        sizes = [rng.choice([0, rng.randint(1, 300)]) for _ in range(g_)]
        masked = rng.random() < 0.4

        def run():
            gen = torch.Generator(device="cuda").manual_seed(rng.randint(0, 2**31))
            b = torch.randn(g_, n, k, device="cuda", dtype=torch.bfloat16, generator=gen)
            if masked:
                m = max(1, max(sizes))
                a = torch.randn(g_, m, k, device="cuda", dtype=torch.bfloat16, generator=gen)
                d = torch.full((g_, m, n), 777.0, device="cuda", dtype=torch.bfloat16)
                dg.m_grouped_bf16_gemm_nt_masked(a, b, d, torch.tensor(sizes, dtype=torch.int32, device="cuda"), 64)
                torch.cuda.synchronize()
                for gi, rows in enumerate(sizes):
                    assert bool((d[gi, rows:] == 777.0).all()), f"masked {sizes}: rows past {rows} written"
                    if rows:
                        assert calc_diff(d[gi, :rows], a[gi, :rows].double() @ b[gi].double().T) <= 1e-5, sizes
                return
            ids = torch.cat(
                [torch.full((round_up(s, 128),), gi, dtype=torch.int32) for gi, s in enumerate(sizes)]
                or [torch.empty(0, dtype=torch.int32)]
            )
            for gi, s in enumerate(sizes):  # padding rows of each group: -1
                lo = sum(round_up(x, 128) for x in sizes[:gi])
                ids[lo + s : lo + round_up(s, 128)] = -1
            if ids.numel() == 0:
                return
            a = torch.randn(ids.numel(), k, device="cuda", dtype=torch.bfloat16, generator=gen)
            d = torch.full((ids.numel(), n), 777.0, device="cuda", dtype=torch.bfloat16)
            lay = ids.cuda()
            dg.m_grouped_bf16_gemm_nt_contiguous(a, b, d, lay)
            torch.cuda.synchronize()
            assert bool((d[lay == -1] == 777.0).all()), f"contiguous {sizes}: padding rows written"
            for gi in range(g_):
                sel = lay == gi
                if bool(sel.any()):
                    assert calc_diff(d[sel], a[sel].double() @ b[gi].double().T) <= 1e-5, f"contiguous {sizes}"

        return run

    def illegal(rng):
        g_, n, k = rng.randint(1, 4), 64, 128
        a = torch.randn(256, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(g_, n, k, device="cuda", dtype=torch.bfloat16)
        d = torch.empty(256, n, device="cuda", dtype=torch.bfloat16)
        lay = torch.zeros(256, dtype=torch.int32, device="cuda")
        kind = rng.choice(["layout dtype", "layout shape", "b shape"])
        if kind == "layout dtype":
            return (lambda: dg.m_grouped_bf16_gemm_nt_contiguous(a, b, d, lay.long())), TypeError
        if kind == "layout shape":
            return (lambda: dg.m_grouped_bf16_gemm_nt_contiguous(a, b, d, lay[:100])), ValueError
        return (lambda: dg.m_grouped_bf16_gemm_nt_contiguous(a, b[:, :, :64], d, lay)), ValueError

    _drive("m_grouped_bf16", legal, illegal, launches)


def test_paged_mqa_logits(launches):
    import test_paged_mqa_logits_gpu as paged

    import deep_gemm_sm120 as dg

    def legal(rng):
        lens = [rng.choice([0, 1, rng.randint(1, 200), rng.randint(1, 3000)]) for _ in range(rng.randint(1, 6))]
        args = (lens, rng.randint(1, 4), rng.choice([16, 32, 64]), rng.choice([64, 128]), rng.choice([32, 64, 128]))
        kw = dict(
            fp4=rng.random() < 0.3,
            two_d=rng.random() < 0.5,
            clean=True,
            seed=rng.randint(0, 999),
            num_sms=rng.randint(1, 40),
        )
        if kw["fp4"]:
            args = (*args[:3], 128, args[4])  # FP4 rows: D = 128
        return lambda: paged.run(*args, **kw)

    def illegal(rng):
        from deep_gemm_sm120.selftest.workloads.mqa import paged_cache

        cache, table, _ = paged_cache([100], 64, 128, False, 1)
        q = torch.zeros(1, 1, 64, 128, device="cuda").to(torch.float8_e4m3fn)
        w = torch.zeros(1, 64, device="cuda")
        lens = torch.tensor([100], dtype=torch.int32, device="cuda")
        meta = dg.get_paged_mqa_logits_metadata(lens, 64, 4)
        kind = rng.choice(["lens dtype", "weights shape", "table entry", "length past the row"])
        if kind == "lens dtype":
            return (lambda: dg.fp8_paged_mqa_logits(q, cache, w, lens.long(), table, meta, 256)), TypeError
        if kind == "weights shape":
            return (lambda: dg.fp8_paged_mqa_logits(q, cache, w[:, :32], lens, table, meta, 256)), ValueError
        if kind == "table entry":
            bad = table.clone()
            bad[0, 0] = -1
            return (lambda: dg.fp8_paged_mqa_logits(q, cache, w, lens, bad, meta, 256)), ValueError
        long = torch.tensor([table.shape[1] * 64 + 1], dtype=torch.int32, device="cuda")
        return (lambda: dg.fp8_paged_mqa_logits(q, cache, w, long, table, meta, 256)), ValueError

    _drive("paged_mqa_logits", legal, illegal, launches)


def test_mqa_logits(launches):
    import test_mqa_logits_gpu as dense

    import deep_gemm_sm120 as dg

    def legal(rng):
        s, sk = rng.randint(1, 300), rng.randint(1, 2000)
        args = (
            s,
            sk,
            rng.choice([16, 32, 64]),
            rng.choice([64, 128]),
            rng.choice(["causal", "window", "full"]),
            rng.choice([torch.float32, torch.bfloat16]),
            rng.choice(["clean", "plain", "compressed"]),
            rng.randint(0, 999),
        )
        return lambda: dense.check(*args)

    def illegal(rng):
        from deep_gemm_sm120.selftest.workloads.mqa import dense_case

        q, kv, kv_sf, w, ks, ke = dense_case(8, 64, 16, 64, "causal", 0)
        kind = rng.choice(["ks dtype", "kv shape", "compressed and clean"])
        if kind == "ks dtype":
            return (lambda: dg.fp8_fp4_mqa_logits((q, None), (kv, kv_sf), w, ks.long(), ke)), TypeError
        if kind == "kv shape":
            return (lambda: dg.fp8_fp4_mqa_logits((q, None), (kv[:, :32], kv_sf), w, ks, ke)), ValueError
        return (
            lambda: dg.fp8_fp4_mqa_logits((q, None), (kv, kv_sf), w, ks, ke, clean_logits=True, max_seqlen_k=64)
        ), ValueError

    _drive("mqa_logits", legal, illegal, launches)


def test_gated_delta_rule(launches):
    import test_gated_delta_rule_gpu as gdr

    import deep_gemm_sm120 as dg

    def legal(rng):
        h = rng.choice([1, 2, 4, 8])
        hv = h * rng.choice([1, 2, 4])
        chunk = rng.choice([16, 32, 64])
        if rng.random() < 0.4:
            lens = [rng.choice([0, 1, rng.randint(1, 200)]) for _ in range(rng.randint(1, 5))]
            cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32, device="cuda")
            t = max(1, int(cu[-1]))
            if int(cu[-1]) == 0:
                cu[-1] = 1
            args = gdr.make_inputs(1, t, h, hv, seed=rng.randint(0, 999), state_n=len(lens))
            return lambda: gdr.check(*args, chunk=chunk, cu_seqlens=cu)
        b, t = rng.randint(1, 3), rng.randint(1, 400)
        args = gdr.make_inputs(b, t, h, hv, seed=rng.randint(0, 999), state_n=b if rng.random() < 0.5 else None)
        return lambda: gdr.check(*args, chunk=chunk)

    def illegal(rng):
        (q, k, v, g, beta), _ = gdr.make_inputs(1, 40, 2, 4, seed=1)
        kind = rng.choice(["k dtype", "v heads", "cu_seqlens"])
        if kind == "k dtype":
            return (lambda: dg.chunk_gated_delta_rule(q, k.float(), v, g, beta)), TypeError
        if kind == "v heads":
            return (lambda: dg.chunk_gated_delta_rule(q, k, v[:, :, :3], g, beta)), ValueError
        cu = torch.tensor([0, 30, 20], dtype=torch.int32, device="cuda")
        return (lambda: dg.chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu)), ValueError

    _drive("gated_delta_rule", legal, illegal, launches)


def test_block_scaled_gemm(launches):
    from test_fp8_fp4_gemm_gpu import TOL, _check

    import deep_gemm_sm120 as dg
    from deep_gemm_sm120.selftest.workloads.block_scaled import fp4_operands, fp8_operands

    def legal(rng):
        kind = rng.choice(["deepseek", "mxfp8", "mxfp4", "nvfp4"])
        m, n, k = _dim(rng, 1024), _dim(rng, 2048, 8), _dim(rng, 4096, 64)
        out = rng.choice([torch.bfloat16, torch.float32])
        seed = rng.randint(0, 2**31)

        def run():
            gen = torch.Generator(device="cuda").manual_seed(seed)
            d = poison_like(torch.empty(m, n, device="cuda", dtype=out))
            if kind in ("deepseek", "mxfp8"):
                a, b, ref = fp8_operands(m, n, k, gen, 128 if kind == "deepseek" else 32, b_blocks=kind == "deepseek")
                dg.fp8_fp4_gemm_nt(a, b, d)
                _check(d, ref, TOL["mxfp8"], f"{kind} {(m, n, k)} {out}")
            else:
                a, b, alpha, ref = fp4_operands(m, n, k, gen, kind)
                dg.fp8_fp4_gemm_nt(a, b, d, alpha=alpha)
                _check(d, ref, TOL[kind], f"{kind} {(m, n, k)} {out}")

        return run

    def illegal(rng):
        gen = torch.Generator(device="cuda").manual_seed(rng.randint(0, 999))
        (a, sfa), (b, sfb), _ = fp8_operands(64, 128, 256, gen, 128)
        d = torch.empty(64, 128, device="cuda", dtype=torch.bfloat16)
        kind = rng.choice(["operand dtype", "scale shape", "not a power of two", "d shape"])
        if kind == "operand dtype":
            return (lambda: dg.fp8_fp4_gemm_nt((a.to(torch.bfloat16), sfa), (b, sfb), d)), TypeError
        if kind == "scale shape":
            return (lambda: dg.fp8_fp4_gemm_nt((a, sfa[:, :1]), (b, sfb), d)), ValueError
        if kind == "not a power of two":
            # next to packed UE8M0 scales (with float32 on both sides they take the exact kernel)
            packed = dg.transform_sf_into_required_layout(sfb, 128, 256, (1, 128, 128))
            return (lambda: dg.fp8_fp4_gemm_nt((a, sfa * 1.5), (b, packed), d, recipe=(1, 128, 128))), ValueError
        return (lambda: dg.fp8_fp4_gemm_nt((a, sfa), (b, sfb), d[:, :64])), ValueError

    _drive("block_scaled_gemm", legal, illegal, launches)


def test_tf32_hc_prenorm_gemm(launches):
    import test_tf32_hc_prenorm_gemm_gpu as hc

    import deep_gemm_sm120 as dg

    def legal(rng):
        m, n, k = _dim(rng, 5000), rng.choice([16, 24, 32]), _dim(rng, 8192, 128)
        splits = rng.choice([None, 1, rng.randint(2, 16)])
        seed = rng.randint(0, 999)
        return lambda: hc.run(m, n, k, splits, seed=seed)

    def illegal(rng):
        a = torch.randn(16, 256, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(24, 256, device="cuda", dtype=torch.float32)
        d, s = torch.empty(16, 24, device="cuda"), torch.empty(16, device="cuda")
        kind = rng.choice(["b dtype", "d shape", "splits"])
        if kind == "b dtype":
            return (lambda: dg.tf32_hc_prenorm_gemm(a, b.to(torch.int32), d, s)), TypeError
        if kind == "d shape":
            return (lambda: dg.tf32_hc_prenorm_gemm(a, b, d[:, :16], s)), ValueError
        return (lambda: dg.tf32_hc_prenorm_gemm(a, b, d, s, num_splits=4)), ValueError  # d lacks the splits dim

    _drive("tf32_hc_prenorm_gemm", legal, illegal, launches)


def test_sparse_mqa_logits(launches):
    from test_sparse_mqa_logits_gpu import assert_matches, reference_contiguous

    import deep_gemm_sm120 as dg
    from deep_gemm_sm120.selftest.workloads.mqa import run_sparse, sparse_case

    def legal(rng):
        fmt, d = rng.choice([("mxfp8", 128), ("mxfp8", 64), ("mxfp4", 128)])
        rows = rng.randint(1, 200)  # sparse_case's ranges need a KV of a few hundred tokens beyond the rows
        args = (
            rows,
            rng.randint(max(600, 2 * rows), 4100),
            rng.choice([16, 32, 64]),
            d,
            fmt,
            rng.choice([8, 16, 32]),
            rng.randint(1, 64),
        )
        seed = rng.randint(0, 999)

        def run():
            c = sparse_case(*args, seed=seed)
            ref, valid = reference_contiguous(c)
            out = run_sparse(c)
            torch.cuda.synchronize()
            assert_matches(out, ref, valid, f"sparse {args}")

        return run

    def illegal(rng):
        c = sparse_case(8, 300, 16, 128, "mxfp8", 16, 4, seed=1)
        qk = c["q"][0].dtype
        kind = rng.choice(["ks dtype", "indices shape"])
        if kind == "ks dtype":
            return (
                lambda: dg.get_sparse_mqa_logits_metadata(c["ks"].long(), c["ke"], c["n"], c["idx"], qk, 16)
            ), TypeError
        return (lambda: dg.get_sparse_mqa_logits_metadata(c["ks"], c["ke"], c["n"], c["idx"][:4], qk, 16)), ValueError

    _drive("sparse_mqa_logits", legal, illegal, launches)
