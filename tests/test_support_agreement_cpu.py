"""is_supported cannot drift from the API: both call the op's rule. Here every op is called on CPU tensors over a
table of shapes and dtypes; a call the API accepts gets as far as the device check (the last check before
CUDA), and is_supported must say True exactly then."""

from __future__ import annotations

import itertools

import pytest
import torch
from support_helpers import agree as _agree

import deep_gemm_sm120 as dg
from deep_gemm_sm120.core.arith import ceil_div

FP8, U8, BF16, F32, F16 = torch.float8_e4m3fn, torch.uint8, torch.bfloat16, torch.float32, torch.float16


def _z(*shape, dtype=BF16):
    return torch.zeros(*shape, dtype=dtype)


DENSE = list(itertools.product((0, 1, 7, 64), (0, 8, 60), (0, 7, 8, 64)))


@pytest.mark.parametrize("layout", ["nt", "nn", "tn", "tt"])
def test_bf16_dense(layout):
    fn = getattr(dg, f"bf16_gemm_{layout}")
    for (m, n, k), ab, out in itertools.product(DENSE, (BF16, F16), (BF16, F32, F16, torch.int32)):
        a = _z(*((k, m) if layout[0] == "t" else (m, k)), dtype=ab)
        b = _z(*((k, n) if layout[1] == "n" else (n, k)))
        _agree(
            f"bf16_gemm_{layout}",
            (fn, a, b, _z(m, n, dtype=out)),
            m=m,
            n=n,
            k=k,
            a_dtype=ab,
            b_dtype=BF16,
            out_dtype=out,
        )


def test_bf16_m_grouped_contiguous_and_masked():
    for (m, n, k, g), out in itertools.product(
        itertools.product((0, 128, 200, 256), (0, 64), (0, 7, 8, 64), (0, 2)), (BF16, F32)
    ):
        layout = torch.zeros(m, dtype=torch.int32)
        _agree(
            "m_grouped_bf16_gemm_nt_contiguous",
            (dg.m_grouped_bf16_gemm_nt_contiguous, _z(m, k), _z(g, n, k), _z(m, n, dtype=out), layout),
            m=m,
            n=n,
            k=k,
            num_groups=g,
            ab_dtype=BF16,
            out_dtype=out,
        )
    for (g, m, n, k), em in itertools.product(itertools.product((0, 2), (0, 5), (0, 64), (0, 7, 64)), (0, 3, -1, 2.5)):
        _agree(
            "m_grouped_bf16_gemm_nt_masked",
            (
                dg.m_grouped_bf16_gemm_nt_masked,
                _z(g, m, k),
                _z(g, n, k),
                _z(g, m, n),
                torch.zeros(g, dtype=torch.int32),
                em,
            ),
            num_groups=g,
            m=m,
            n=n,
            k=k,
            expected_m=em,
        )


def test_bf16_k_grouped():
    for m, n, ks, out in itertools.product((0, 7, 8, 64), (0, 60, 64), ([], [0, 0], [3, 5], [64, 64]), (F32, BF16)):
        total = sum(ks)
        _agree(
            "k_grouped_bf16_gemm_tn_contiguous",
            (dg.k_grouped_bf16_gemm_tn_contiguous, _z(total, m), _z(total, n), _z(len(ks), m, n, dtype=out), ks),
            m=m,
            n=n,
            k=total,
            num_groups=len(ks),
            out_dtype=out,
        )


def test_the_two_cases_that_drifted():
    """is_supported used to say True for these while the API rejected them."""
    assert not dg.is_supported("m_grouped_bf16_gemm_nt_contiguous", k=7)
    assert not dg.is_supported("k_grouped_bf16_gemm_tn_contiguous", m=7)
    assert "multiple of 16 bytes" in dg.why_unsupported("m_grouped_bf16_gemm_nt_contiguous", k=7)
    _agree(
        "m_grouped_bf16_gemm_nt_contiguous",
        (
            dg.m_grouped_bf16_gemm_nt_contiguous,
            _z(256, 7),
            _z(2, 64, 7),
            _z(256, 64),
            torch.zeros(256, dtype=torch.int32),
        ),
        m=256,
        n=64,
        k=7,
        num_groups=2,
    )
    _agree(
        "k_grouped_bf16_gemm_tn_contiguous",
        (dg.k_grouped_bf16_gemm_tn_contiguous, _z(10, 7), _z(10, 64), _z(2, 7, 64, dtype=F32), [4, 6]),
        m=7,
        n=64,
        k=10,
        num_groups=2,
    )


def _operand(rows, k, dtype, lead=()):
    """(values, fp32 power-of-two scales): e4m3 [.., rows, k] with 1x128 scales, or packed e2m1 [.., rows, k/2]
    with 1x32 scales; anything else (a dtype outside the contract) gets fp8-shaped tensors."""
    if dtype == U8:
        return _z(*lead, rows, k // 2, dtype=U8), torch.ones(*lead, rows, max(ceil_div(k, 32), 1))
    return _z(*lead, rows, k, dtype=dtype), torch.ones(*lead, rows, max(ceil_div(k, 128), 1))


BLOCK_DTYPES = ((FP8, FP8), (U8, U8), (FP8, U8), (U8, FP8), (BF16, BF16))


def test_block_scaled_dense():
    for m, n, k, (da, db), out in itertools.product(
        (0, 1, 64), (16, 64), (0, 16, 48, 64, 100), BLOCK_DTYPES, (BF16, F32, F16)
    ):
        if U8 in (da, db) and k % 2:
            continue
        recipe = (1, 1, 128) if FP8 in (da, db) else None  # short K fits both 1x128 and 1x32 scale shapes
        _agree(
            "fp8_fp4_gemm_nt",
            (dg.fp8_fp4_gemm_nt, _operand(m, k, da), _operand(n, k, db), _z(m, n, dtype=out), None, recipe),
            m=m,
            n=n,
            k=k,
            a_dtype=da,
            b_dtype=db,
            out_dtype=out,
        )


def test_block_scaled_grouped():
    for m, k, (da, db), out in itertools.product((128, 200), (0, 48, 64), BLOCK_DTYPES[:3], (BF16, F32)):
        _agree(
            "m_grouped_fp8_fp4_gemm_nt_contiguous",
            (
                dg.m_grouped_fp8_fp4_gemm_nt_contiguous,
                _operand(m, k, da),
                _operand(64, k, db, (2,)),
                _z(m, 64, dtype=out),
                torch.zeros(m, dtype=torch.int32),
            ),
            m=m,
            n=64,
            k=k,
            num_groups=2,
            a_dtype=da,
            b_dtype=db,
            out_dtype=out,
        )
        _agree(
            "m_grouped_fp8_fp4_gemm_nt_masked",
            (
                dg.m_grouped_fp8_fp4_gemm_nt_masked,
                _operand(m, k, da, (2,)),
                _operand(64, k, db, (2,)),
                _z(2, m, 64, dtype=out),
                torch.zeros(2, dtype=torch.int32),
                16,
            ),
            num_groups=2,
            m=m,
            n=64,
            k=k,
            expected_m=16,
            a_dtype=da,
            b_dtype=db,
            out_dtype=out,
        )


def test_the_checks_of_a_call_depend_only_on_its_signature(monkeypatch):
    """A call is checked once per signature (launch.tensor_key) and the result reused: so whatever the checks
    decide must be a function of the signature. Tensors of many layouts are grouped by signature; inside a group
    every call must end alike (the same error, or the same plan)."""
    from deep_gemm_sm120 import arch, jit
    from deep_gemm_sm120.families.bf16_gemm import api
    from deep_gemm_sm120.launch import tensor_key

    monkeypatch.setattr(arch, "device_capability", lambda i: (12, 0))
    monkeypatch.setattr(api, "device_of", lambda **t: 0)
    monkeypatch.setattr(api, "num_sms_for", lambda i: 132)
    monkeypatch.setattr(jit, "get_kernel", lambda spec, target, dev: spec.name)
    monkeypatch.setattr(api, "SplitK", lambda *a: "reduce")
    arch.reset_targets()
    big = _z(130, 140)
    store = _z(4 * 130 * 140 + 8)
    variants = {
        "contiguous": lambda r, c: _z(r, c),
        "padded": lambda r, c: big[:r, :c] if r <= 130 and c <= 140 else _z(r, c),
        "transposed": lambda r, c: _z(c, r).T,
        "offset": lambda r, c: store[1 : r * c + 1].view(r, c) if r * c else _z(r, c),
        "offset8": lambda r, c: store[8 : r * c + 8].view(r, c) if r * c else _z(r, c),
        "fp32": lambda r, c: _z(r, c, dtype=torch.float32),
    }
    outcomes: dict = {}
    for layout, (m, n, k), va, vb, vd in itertools.product(
        ("nt", "nn", "tn", "tt"),
        DENSE + [(1, 8, 12), (130, 9, 7)],
        variants,
        variants,
        ("contiguous", "padded", "offset"),
    ):
        a_shape = (k, m) if layout[0] == "t" else (m, k)
        b_shape = (k, n) if layout[1] == "n" else (n, k)
        a, b, d = variants[va](*a_shape), variants[vb](*b_shape), variants[vd](m, n)
        key = (layout, tensor_key(a), tensor_key(b), tensor_key(d))
        try:
            got = repr(api._prepare(layout, a, b, d, None))
        except (TypeError, ValueError, NotImplementedError) as e:
            got = f"{type(e).__name__}: {e}"
        outcomes.setdefault(key, set()).add(got)
    arch.reset_targets()
    assert all(len(v) == 1 for v in outcomes.values()), [v for v in outcomes.values() if len(v) > 1][:3]
    assert sum(1 for v in outcomes.values() if not next(iter(v)).startswith(("TypeError", "ValueError"))) > 30
