"""tf32_hc_prenorm_gemm and einsum without a GPU: typed errors, is_supported agreeing with the API on CPU
tensors, DeepGEMM's split ranges, and the plans (bucketed M, reduce forms, configs)."""

from __future__ import annotations

import itertools

import pytest
import torch
from support_helpers import CPU_REJECT
from support_helpers import agree as _agree

import deep_gemm_sm120 as dg
from deep_gemm_sm120.core.arith import ceil_div
from deep_gemm_sm120.families.bf16_gemm import kernel as bf16_kernel
from deep_gemm_sm120.families.bf16_gemm import plan as bf16_plan
from deep_gemm_sm120.families.bf16_gemm import rules as bf16_rules
from deep_gemm_sm120.families.tf32_hc_prenorm_gemm import kernel as hc_kernel
from deep_gemm_sm120.families.tf32_hc_prenorm_gemm import plan as hc_plan
from deep_gemm_sm120.families.tf32_hc_prenorm_gemm import rules as hc_rules
from deep_gemm_sm120.services.split_k_reduce import WARP_PER_ELEMENT_MIN_SPLITS

BF16, F32, F16 = torch.bfloat16, torch.float32, torch.float16


def test_hc_api_and_is_supported_agree():
    for (m, n, k), splits, (ad, bd) in itertools.product(
        itertools.product((0, 1, 13), (1, 24, 32, 33), (8, 12, 64, 7168)),
        (None, 1, 16),
        ((BF16, F32), (F16, F32), (BF16, BF16)),
    ):
        lead = () if splits is None else (splits,)
        call = (
            dg.tf32_hc_prenorm_gemm,
            torch.zeros(m, k, dtype=ad),
            torch.zeros(n, k, dtype=bd),
            torch.zeros(*lead, m, n),
            torch.zeros(*lead, m),
            splits,
        )
        _agree("tf32_hc_prenorm_gemm", call, m=m, n=n, k=k, a_dtype=ad, b_dtype=bd, num_splits=splits)


@pytest.mark.parametrize(
    "kwargs,error,text",
    [
        ({"a_dtype": "float16"}, TypeError, "torch.bfloat16"),
        ({"b_dtype": "bfloat16"}, TypeError, "torch.float32"),
        ({"d_dtype": "bfloat16"}, TypeError, "torch.float32"),
        ({"n": 33}, ValueError, "[1, 32]"),
        ({"n": 0}, ValueError, "[1, 32]"),
        ({"k": 0}, ValueError, "positive"),
        ({"k": 12, "m": 5}, ValueError, "16 bytes"),
        ({"num_splits": 0}, ValueError, ">= 1"),
        ({"num_splits": True}, TypeError, "int"),
        ({"num_splits": 2.0}, TypeError, "int"),
    ],
)
def test_hc_rule_errors(kwargs, error, text):
    with pytest.raises(error, match=text.replace("[", r"\[").replace("]", r"\]")):
        hc_rules.hc_prenorm_rule(**kwargs)


def test_hc_shape_errors_name_what_was_expected():
    a, b = torch.zeros(4, 64, dtype=BF16), torch.zeros(24, 64)
    with pytest.raises(ValueError, match=r"d must be \[S, M, N\] = \(3, 4, 24\)"):
        dg.tf32_hc_prenorm_gemm(a, b, torch.zeros(4, 24), torch.zeros(3, 4), num_splits=3)
    with pytest.raises(ValueError, match=r"sqr_sum must be \[M\]"):
        dg.tf32_hc_prenorm_gemm(a, b, torch.zeros(4, 24), torch.zeros(4, 1))
    with pytest.raises(ValueError, match="K must agree"):
        dg.tf32_hc_prenorm_gemm(a, torch.zeros(24, 72), torch.zeros(4, 24), torch.zeros(4))
    with pytest.raises(ValueError, match="contiguous"):
        dg.tf32_hc_prenorm_gemm(a, b, torch.zeros(4, 24), torch.zeros(4, 2)[:, 0])


def _split_ranges(k_blocks: int, splits: int) -> list[int]:
    per, extra = divmod(k_blocks, splits)
    return [per + (s < extra) for s in range(splits)]


def test_internal_plan_depends_on_m_through_its_bucket_and_never_leaves_a_split_empty():
    for m, n, k, sms in itertools.product(range(1, 600, 7), (1, 24, 32), (8, 640, 7168, 28672), (132, 170, 188)):
        p = hc_plan.plan(hc_plan.m_bucket(m), n, k, sms, None)
        assert p == hc_plan.plan(hc_plan.m_bucket(hc_plan.m_bucket(m)), n, k, sms, None)
        assert p.spec in hc_kernel.specs() and p.spec.n_pad >= n and p.m_blocks == ceil_div(m, hc_kernel.BLOCK_M)
        blocks = ceil_div(k, hc_kernel.BLOCK_K)
        assert 1 <= p.splits <= hc_plan.MAX_INTERNAL_SPLITS and min(_split_ranges(blocks, p.splits)) >= 1
        assert (p.reduce_d is None) == (p.splits == 1) == (p.reduce_s is None)
        if p.reduce_d is not None and p.splits < WARP_PER_ELEMENT_MIN_SPLITS:
            assert not p.reduce_d.warp_per_element and not p.reduce_s.warp_per_element
    # DeepGEMM's splits are honoured exactly, even past the number of K blocks (the rest are zeros)
    assert hc_plan.plan(64, 24, 128, 132, 5).splits == 5 and hc_plan.plan(64, 24, 128, 132, 5).reduce_d is None


def test_hc_specs_fit_shared_memory_and_pad_n():
    assert [s.n_pad for s in hc_kernel.specs()] == [8, 16, 24, 32]
    assert all(s.smem_bytes <= 101376 and s.stages >= 4 for s in hc_kernel.specs())


# ---------------------------------------------------------------- einsum


def test_einsum_unsupported_expression_lists_the_supported_ones():
    z = torch.zeros(2, 2, 8, dtype=BF16)
    with pytest.raises(NotImplementedError, match=r"bhd,hdr->bhr.*bhr,hdr->bhd.*bmk,bnk->mn"):
        dg.einsum("bhd,bhr->hdr", z, z, z)
    with pytest.raises(TypeError, match="expr must be a str"):
        dg.einsum(3, z, z, z)
    assert "not supported" in dg.why_unsupported("einsum", expr="ij,jk->ik")


@pytest.mark.parametrize("expr", ["bhr,hdr->bhd", "bhd,hdr->bhr"])
def test_einsum_per_head_api_and_is_supported_agree(expr):
    for (bs, h, r, d), (ad, od) in itertools.product(
        itertools.product((0, 4), (2,), (8, 12, 64), (8, 12, 72)), ((BF16, BF16), (F16, BF16), (BF16, F32))
    ):
        x = torch.zeros(bs, h, r if expr == "bhr,hdr->bhd" else d, dtype=ad)
        y = torch.zeros(h, d, r, dtype=BF16)
        z = torch.zeros(bs, h, d if expr == "bhr,hdr->bhd" else r, dtype=od)
        _agree(
            "einsum", (dg.einsum, expr, x, y, z), expr=expr, b=bs, h=h, r=r, d=d, a_dtype=ad, b_dtype=BF16, out_dtype=od
        )


def test_einsum_batch_reduction_api_and_is_supported_agree():
    for (bs, m, n, k), od, with_c in itertools.product(
        itertools.product((0, 3), (0, 5), (7,), (8, 12, 64)), (F32, BF16, F16), (False, True)
    ):
        d = torch.zeros(m, n, dtype=od)
        _agree(
            "einsum",
            (
                dg.einsum,
                "bmk,bnk->mn",
                torch.zeros(bs, m, k, dtype=BF16),
                torch.zeros(bs, n, k, dtype=BF16),
                d,
                d if with_c else None,
            ),
            expr="bmk,bnk->mn",
            b=bs,
            m=m,
            n=n,
            k=k,
            out_dtype=od,
            c_dtype=od if with_c else None,
        )


def test_einsum_contract_errors():
    x, y = torch.zeros(4, 2, 64, dtype=BF16), torch.zeros(2, 8, 64, dtype=BF16)
    with pytest.raises(ValueError, match="takes no c"):
        dg.einsum("bhr,hdr->bhd", x, y, torch.zeros(4, 2, 8, dtype=BF16), c=torch.zeros(4, 2, 8, dtype=BF16))
    with pytest.raises(ValueError, match="disagree"):
        dg.einsum("bhr,hdr->bhd", x, torch.zeros(3, 8, 64, dtype=BF16), torch.zeros(4, 2, 8, dtype=BF16))
    with pytest.raises(ValueError, match=r"d must be \(4, 2, 8\)"):
        dg.einsum("bhr,hdr->bhd", x, y, torch.zeros(4, 2, 9, dtype=BF16))
    with pytest.raises(ValueError, match="multiples of 16 bytes"):
        dg.einsum("bhr,hdr->bhd", torch.zeros(4, 3, 70, dtype=BF16)[:, :2, :64], y, torch.zeros(4, 2, 8, dtype=BF16))
    with pytest.raises(ValueError, match="bf16 d is written fresh"):
        d = torch.zeros(8, 8, dtype=BF16)
        dg.einsum("bmk,bnk->mn", torch.zeros(2, 8, 64, dtype=BF16), torch.zeros(2, 8, 64, dtype=BF16), d, c=d)


def test_einsum_plans():
    for groups, m, n in itertools.product((1, 8, 128), (1, 32, 4096), (72, 128, 1024)):
        assert bf16_plan.batched_config(groups, m, n, 132) in bf16_kernel.BATCHED_CONFIGS
    p = bf16_plan.batch_reduce_plan(128, 384, 4096 * 128, 132)
    assert p.splits > 1 and p.config in bf16_kernel.BATCH_REDUCE_CONFIGS
    specs = set(bf16_kernel.specs())
    for expr in bf16_rules.EINSUM_EXPRS:
        for shape in ({"b": 4, "h": 128, "r": 512, "d": 128}, {"b": 129, "m": 128, "n": 384, "k": 128}):
            for s in bf16_plan.einsum_specs(expr, 132, **shape):
                assert s in specs or s.family == "split_k_reduce"


# ---------------------------------------------------------------- fp8_einsum


def test_fp8_einsum_contract():
    from deep_gemm_sm120.families.fp8_fp4_gemm_1d1d import kernel as bs_kernel
    from deep_gemm_sm120.families.fp8_fp4_gemm_1d1d import plan as bs_plan

    e4 = torch.float8_e4m3fn
    x, sx = torch.zeros(4, 2, 256, dtype=e4), torch.ones(4, 2, 2)
    y, sy = torch.zeros(2, 64, 256, dtype=e4), torch.ones(2, 1, 2)
    z = torch.zeros(4, 2, 64, dtype=BF16)
    with pytest.raises(NotImplementedError, match=r"\['bhr,hdr->bhd'\]"):
        dg.fp8_einsum("bhd,hdr->bhr", (x, sx), (y, sy), z)
    with pytest.raises(NotImplementedError, match=r"\(1, 128, 128\)"):
        dg.fp8_einsum("bhr,hdr->bhd", (x, sx), (y, sy), z, recipe=(1, 1, 128))
    with pytest.raises(TypeError, match="float8_e4m3fn"):
        dg.fp8_einsum("bhr,hdr->bhd", (x.to(BF16), sx), (y, sy), z)
    with pytest.raises(TypeError, match="pair"):
        dg.fp8_einsum("bhr,hdr->bhd", x, (y, sy), z)
    with pytest.raises(ValueError, match="agree on h and r"):
        dg.fp8_einsum("bhr,hdr->bhd", (x, sx), (torch.zeros(3, 64, 256, dtype=e4), sy), z)
    with pytest.raises(ValueError, match=r"a's scales"):
        dg.fp8_einsum("bhr,hdr->bhd", (x, sx[:, :1]), (y, sy), z)
    with pytest.raises(ValueError, match=CPU_REJECT):
        dg.fp8_einsum("bhr,hdr->bhd", (x, sx), (y, sy), z)
    assert dg.is_supported("fp8_einsum", expr="bhr,hdr->bhd", b=4, h=8, r=4096, d=1024)
    assert "16 bytes" in dg.why_unsupported("fp8_einsum", expr="bhr,hdr->bhd", r=72)
    specs = set(bs_kernel.specs())
    assert all(s in specs for s in bs_plan.fp8_einsum_specs("bhr,hdr->bhd", 132, b=4096, h=8, r=4096, d=1024))
