"""One small case per kernel family against a float64 reference, for the self-test.

Block-scaled cases run once per scale encoding (scale_encoding.forced), the others once. Each is judged with two
bounds: its rounding bound (the family's test tolerance, in DeepGEMM's calc_diff or the GDR's relative L2) and
an O(1) bound beyond which the error means a wrong mapping (a scale or operand read from the wrong place), not
rounding. Between the two the verdict is `imprecise`. A case that raises is `error`, with the message.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..core import encoding as enc
from ..testing import calc_diff

WRONG = 0.05  # calc_diff / relative L2 past this: an O(1) error (a wrong scale or element), never rounding


@dataclass(frozen=True)
class FamilyCase:
    name: str
    family: str
    kind: str | None  # the atom kind whose encoding the kernel takes; None: no per-tile scales
    tol: float  # the rounding bound
    metric: str  # calc_diff | relative_l2
    run: Callable[[int], tuple[float, bool]]  # seed -> (error, every output written and finite where expected)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator(device="cuda").manual_seed(seed)


def _poisoned(*shape, dtype=torch.bfloat16) -> torch.Tensor:
    return torch.full(shape, float("nan"), device="cuda", dtype=dtype)


def _gemm(d: torch.Tensor, ref: torch.Tensor) -> tuple[float, bool]:
    torch.cuda.synchronize()
    return calc_diff(d, ref), not bool(torch.isnan(d).any())


def bf16_gemm(seed: int):
    import deep_gemm_sm120 as dg

    g = _gen(seed)
    a = torch.randn(129, 512, device="cuda", generator=g).bfloat16()
    b = torch.randn(200, 512, device="cuda", generator=g).bfloat16()
    d = _poisoned(129, 200)
    dg.bf16_gemm_nt(a, b, d)
    return _gemm(d, a.double() @ b.double().T)


def fp8_gemm(gran: int):
    def run(seed: int):
        import deep_gemm_sm120 as dg

        from .workloads.block_scaled import fp8_operands

        a, b, ref = fp8_operands(129, 256, 512, _gen(seed), gran, b_blocks=gran == 128)
        d = _poisoned(129, 256)
        dg.fp8_gemm_nt(a, b, d)
        return _gemm(d, ref)

    return run


def fp8_fp32_gemm(seed: int):
    import deep_gemm_sm120 as dg

    from .workloads.block_scaled import fp8_operands_fp32

    a, b, ref = fp8_operands_fp32(129, 256, 512, _gen(seed))
    d = _poisoned(129, 256)
    dg.fp8_gemm_nt(a, b, d, disable_ue8m0_cast=True)
    return _gemm(d, ref)


def fp4_gemm(kind: str):
    def run(seed: int):
        import deep_gemm_sm120 as dg

        from .workloads.block_scaled import fp4_operands

        a, b, alpha, ref = fp4_operands(129, 256, 512, _gen(seed), kind)
        d = _poisoned(129, 256)
        dg.fp8_fp4_gemm_nt(a, b, d, alpha=alpha)
        return _gemm(d, ref)

    return run


def mixed_gemm(kind: str):
    def run(seed: int):
        import deep_gemm_sm120 as dg

        from .workloads.block_scaled import SIDES, quantize_side

        g = _gen(seed)
        fa, fb = SIDES[kind]
        a, sfa, deq_a = quantize_side(fa, 129, 512, g, 128 if fa == "e4m3" else 32)
        b, sfb, deq_b = quantize_side(fb, 256, 512, g, 128 if fb == "e4m3" else 32, 128 if fb == "e4m3" else 1)
        d = _poisoned(129, 256)
        dg.fp8_fp4_gemm_nt((a, sfa), (b, sfb), d)
        return _gemm(d, deq_a @ deq_b.T)

    return run


def hc_prenorm(seed: int):
    import deep_gemm_sm120 as dg

    g = _gen(seed)
    a = torch.randn(137, 1024, device="cuda", generator=g).bfloat16()
    b = torch.randn(24, 1024, device="cuda", generator=g)
    d = _poisoned(137, 24, dtype=torch.float32)
    s = _poisoned(137, dtype=torch.float32)
    dg.tf32_hc_prenorm_gemm(a, b, d, s)
    torch.cuda.synchronize()
    a64 = a.double()
    err = max(calc_diff(d, a64 @ b.double().T), calc_diff(s, a64.square().sum(-1)))
    return err, not bool(torch.isnan(d).any() or torch.isnan(s).any())


def _masked(got: torch.Tensor, ref: torch.Tensor, inside: torch.Tensor) -> tuple[float, bool]:
    """calc_diff inside the valid region; written: -inf exactly outside it, no NaN anywhere."""
    got = got.double()
    mask_ok = torch.equal(torch.isinf(got) & (got < 0), ~inside) and not bool(torch.isnan(got).any())
    return calc_diff(got.masked_fill(~inside, 0), ref.masked_fill(~inside, 0)), mask_ok


def dense_mqa(fp4: bool):
    def run(seed: int):
        import deep_gemm_sm120 as dg

        from ..quant import dequantize_fp4, pack_ue8m0_to_int, per_token_cast_to_fp4
        from .workloads.mqa import dense_case

        s, sk, h = 64, 300, 32
        q8, kv8, kv_sf, w, ks, ke = dense_case(s, sk, h, 128, "window", seed)
        if fp4:
            g = _gen(seed + 1)
            qp, qsf, _ = per_token_cast_to_fp4(torch.randn(s * h, 128, device="cuda", generator=g), "mxfp4")
            kvp, kvsf, _ = per_token_cast_to_fp4(torch.randn(sk, 128, device="cuda", generator=g), "mxfp4")
            q_deq, kv_deq = dequantize_fp4(qp, qsf).double().view(s, h, 128), dequantize_fp4(kvp, kvsf).double()
            q_in, kv_in = (
                (qp.view(s, h, 64), pack_ue8m0_to_int(qsf).view(s, h)),
                (kvp, pack_ue8m0_to_int(kvsf).view(sk)),
            )
        else:
            q_deq, kv_deq = q8.double(), kv8.double() * kv_sf.double()[:, None]
            q_in, kv_in = (q8, None), (kv8, kv_sf)
        out = dg.fp8_fp4_mqa_logits(q_in, kv_in, w, ks, ke, clean_logits=True)
        torch.cuda.synchronize()
        score = torch.einsum("shd,kd->shk", q_deq, kv_deq).relu()
        ref = (score * w.double()[:, :, None]).sum(1)
        j = torch.arange(sk, device="cuda")
        inside = (j[None, :] >= ks[:, None]) & (j[None, :] < ke[:, None])
        return _masked(out, ref, inside)

    return run


def paged_mqa(fp4: bool):
    def run(seed: int):
        import deep_gemm_sm120 as dg

        from ..quant import dequantize_fp4, pack_ue8m0_to_int, per_token_cast_to_fp4
        from .workloads.mqa import paged_cache

        lens, h, d, block_kv = [200, 1, 97], 32, 128, 64
        cache, table, deq = paged_cache(lens, block_kv, d, fp4, seed)
        g = _gen(seed + 7)
        qf = torch.randn(len(lens) * h, d, device="cuda", generator=g)
        if fp4:
            qp, qsf, _ = per_token_cast_to_fp4(qf, "mxfp4")
            q_in = (qp.view(len(lens), 1, h, d // 2), pack_ue8m0_to_int(qsf).view(len(lens), 1, h))
            q_deq = dequantize_fp4(qp, qsf).double().view(len(lens), h, d)
        else:
            q8 = qf.to(torch.float8_e4m3fn)
            q_in, q_deq = (q8.view(len(lens), 1, h, d), None), q8.double().view(len(lens), h, d)
        w = torch.randn(len(lens), h, device="cuda", generator=g)
        ctx = torch.tensor(lens, dtype=torch.int32, device="cuda")
        max_len = int(table.shape[1] * block_kv)
        meta = dg.get_paged_mqa_logits_metadata(ctx, block_kv, dg.get_num_sms())
        out = dg.fp8_fp4_paged_mqa_logits(q_in, cache, w, ctx, table, meta, max_len, clean_logits=True)
        torch.cuda.synchronize()
        ref = torch.full((len(lens), max_len), float("-inf"), dtype=torch.float64, device="cuda")
        for b, n in enumerate(lens):
            kv = deq[table[b, : (n + block_kv - 1) // block_kv].long()].reshape(-1, d)[:n]
            ref[b, :n] = (torch.einsum("hd,kd->hk", q_deq[b], kv).relu() * w[b].double()[:, None]).sum(0)
        return _masked(out, ref, ~torch.isinf(ref))

    return run


def sparse_mqa(fmt: str):
    def run(seed: int):
        from .workloads.mqa import run_sparse, sparse_case
        from .workloads.sparse_reference import sparse_mqa_logits

        c = sparse_case(37, 611, 32, 128, fmt, 16, num_max=9, seed=seed)
        ref, valid = sparse_mqa_logits(c["q_deq"], c["kv_deq"], c["w"].float(), c["ks"], c["ke"], c["idx"], 16)
        out = run_sparse(c)
        torch.cuda.synchronize()
        return _masked(out, ref, valid.to(out.device))

    return run


def gated_delta_rule(seed: int):
    import torch.nn.functional as F

    import deep_gemm_sm120 as dg

    from .workloads.gdr_reference import l2norm, naive_recurrence, relative_l2

    g = _gen(seed)
    r = lambda *s: torch.randn(*s, device="cuda", generator=g)
    q, k, v = l2norm(r(1, 96, 2, 128)).bfloat16(), l2norm(r(1, 96, 2, 128)).bfloat16(), r(1, 96, 4, 128).bfloat16()
    gate, beta = F.logsigmoid(r(1, 96, 4)), r(1, 96, 4).sigmoid().bfloat16()
    init = r(1, 4, 128, 128) * 0.1
    o, final = dg.chunk_gated_delta_rule(q, k, v, gate, beta, initial_state=init, output_final_state=True)
    torch.cuda.synchronize()
    ro, rf = naive_recurrence(q, k, v, gate, beta, initial_state=init, output_final_state=True)
    err = max(relative_l2(o, ro), relative_l2(final, rf))
    return err, bool(torch.isfinite(o).all() and torch.isfinite(final).all())


def gated_delta_rule_backward(seed: int):
    """Forward + backward through the public call, which on CUDA runs the backward's four kernels (the states
    pass, the reverse state pass, B3's per-chunk gradients, dq / dk's last step): every gradient (q, k, v, g, beta, initial state)
    against the float64 chunk-form backward, the worst relative L2. Varlen with an empty sequence and partial
    64-token blocks, GVA, the in-kernel l2norm, the final state's gradient flowing in."""
    import torch.nn.functional as F

    import deep_gemm_sm120 as dg

    from .workloads.gdr_backward_reference import chunked_backward
    from .workloads.gdr_reference import relative_l2

    g = _gen(seed)
    r = lambda *s: torch.randn(*s, device="cuda", generator=g)
    t, n = 150, 4
    cu = torch.tensor([0, 40, 40, 101, t], dtype=torch.int32, device="cuda")
    q, k, v = r(1, t, 2, 128).bfloat16(), r(1, t, 2, 128).bfloat16(), r(1, t, 4, 128).bfloat16()
    gate, beta = F.logsigmoid(r(1, t, 4)), r(1, t, 4).sigmoid().bfloat16()
    init, do, dfs = r(n, 4, 128, 128) * 0.1, r(1, t, 4, 128).bfloat16(), r(n, 4, 128, 128)
    leaves = [x.clone().requires_grad_() for x in (q, k, v, gate, beta, init)]
    o, final = dg.chunk_gated_delta_rule(
        *leaves[:5], initial_state=leaves[5], output_final_state=True, cu_seqlens=cu, use_qk_l2norm_in_kernel=True
    )
    torch.autograd.backward((o, final), (do, dfs))
    torch.cuda.synchronize()
    ref = chunked_backward(
        q, k, v, gate, beta, do, dfs, initial_state=init, cu_seqlens=cu, use_qk_l2norm_in_kernel=True
    )
    grads = [x.grad for x in leaves]
    if any(x is None for x in grads):
        return float("nan"), False
    return max(relative_l2(x, y) for x, y in zip(grads, ref)), all(bool(torch.isfinite(x).all()) for x in grads)


CASES = (
    FamilyCase("bf16_gemm_nt", "bf16_gemm", None, 1e-5, "calc_diff", bf16_gemm),
    FamilyCase("fp8_gemm_nt 1x128 (DeepSeek)", "fp8_fp4_gemm_1d1d", "mxfp8", 1e-3, "calc_diff", fp8_gemm(128)),
    FamilyCase("fp8_gemm_nt MXFP8 1x32", "fp8_fp4_gemm_1d1d", "mxfp8", 1e-3, "calc_diff", fp8_gemm(32)),
    FamilyCase("fp8_gemm_nt exact FP32 scales", "fp8_fp4_gemm_1d1d", None, 1e-3, "calc_diff", fp8_fp32_gemm),
    FamilyCase("fp8_fp4_gemm_nt MXFP4", "fp8_fp4_gemm_1d1d", "mxfp4", 2e-2, "calc_diff", fp4_gemm("mxfp4")),
    FamilyCase("fp8_fp4_gemm_nt NVFP4", "fp8_fp4_gemm_1d1d", "nvfp4", 2e-2, "calc_diff", fp4_gemm("nvfp4")),
    FamilyCase(
        "fp8_fp4_gemm_nt e4m3 x MXFP4", "fp8_fp4_gemm_1d1d", "e4m3_e2m1", 1e-2, "calc_diff", mixed_gemm("e4m3_e2m1")
    ),
    FamilyCase(
        "fp8_fp4_gemm_nt MXFP4 x e4m3", "fp8_fp4_gemm_1d1d", "e2m1_e4m3", 1e-2, "calc_diff", mixed_gemm("e2m1_e4m3")
    ),
    FamilyCase("tf32_hc_prenorm_gemm", "tf32_hc_prenorm_gemm", None, 1e-8, "calc_diff", hc_prenorm),
    FamilyCase("fp8_mqa_logits", "mqa_logits", None, 1e-6, "calc_diff", dense_mqa(False)),
    FamilyCase("fp8_fp4_mqa_logits FP4", "mqa_logits", "mxfp4", 1e-5, "calc_diff", dense_mqa(True)),
    FamilyCase("fp8_paged_mqa_logits", "paged_mqa_logits", None, 1e-6, "calc_diff", paged_mqa(False)),
    FamilyCase("fp8_fp4_paged_mqa_logits FP4", "paged_mqa_logits", "mxfp4", 1e-5, "calc_diff", paged_mqa(True)),
    FamilyCase("fp8_fp4_sparse_mqa_logits MXFP8", "sparse_mqa_logits", "mxfp8", 3e-5, "calc_diff", sparse_mqa("mxfp8")),
    FamilyCase("fp8_fp4_sparse_mqa_logits MXFP4", "sparse_mqa_logits", "mxfp4", 3e-5, "calc_diff", sparse_mqa("mxfp4")),
    FamilyCase("chunk_gated_delta_rule", "gated_delta_rule", None, 1e-2, "relative_l2", gated_delta_rule),
    FamilyCase(
        "chunk_gated_delta_rule backward",
        "gated_delta_rule_bwd_chunk",
        None,
        2e-2,
        "relative_l2",
        gated_delta_rule_backward,
    ),
)


def verdict(err: float, written: bool, tol: float) -> str:
    if not written or not err == err:  # an unwritten or NaN output is never rounding
        return "wrong"
    return "ok" if err <= tol else ("imprecise" if err <= WRONG else "wrong")


def run_families(encodings=enc.ENCODINGS, seed: int = 0, only=None) -> list[dict]:
    """Every case (block-scaled ones once per encoding in `encodings`), on the current device."""
    from .. import scale_encoding

    out = []
    for case in CASES:
        if only is not None and case.family not in only:
            continue
        for e in encodings if case.kind else (None,):
            row = {"case": case.name, "family": case.family, "kind": case.kind, "encoding": e, "bound": case.tol}
            row["metric"] = case.metric
            t0 = time.perf_counter()
            try:
                if e is None:
                    err, written = case.run(seed)
                else:
                    with scale_encoding.forced(e):
                        err, written = case.run(seed)
                row.update(error=err, written=written, verdict=verdict(err, written, case.tol))
            except Exception as ex:  # one case's failure is a verdict, not the end of the report
                row.update(verdict="error", message=f"{type(ex).__name__}: {ex}"[:2000])
            row["seconds"] = round(time.perf_counter() - t0, 3)
            out.append(row)
    return out
