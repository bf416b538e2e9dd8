"""is_supported cannot drift from the API: both call the op's rule. Here every op is called on CPU tensors over a
table of shapes and dtypes; a call the API accepts gets as far as the device check (the last check before
CUDA), and is_supported must say True exactly then."""
from __future__ import annotations

import itertools

import pytest
import torch

import deep_gemm_sm120 as dg
from support_helpers import CPU_REJECT, accepts as _accepts, agree as _agree

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
        _agree(f"bf16_gemm_{layout}", (fn, a, b, _z(m, n, dtype=out)), m=m, n=n, k=k, a_dtype=ab, b_dtype=BF16,
               out_dtype=out)


def test_bf16_m_grouped_contiguous_and_masked():
    for (m, n, k, g), out in itertools.product(itertools.product((0, 128, 200, 256), (0, 64), (0, 7, 8, 64), (0, 2)),
                                               (BF16, F32)):
        layout = torch.zeros(m, dtype=torch.int32)
        _agree("m_grouped_bf16_gemm_nt_contiguous",
               (dg.m_grouped_bf16_gemm_nt_contiguous, _z(m, k), _z(g, n, k), _z(m, n, dtype=out), layout),
               m=m, n=n, k=k, num_groups=g, ab_dtype=BF16, out_dtype=out)
    for (g, m, n, k), em in itertools.product(itertools.product((0, 2), (0, 5), (0, 64), (0, 7, 64)), (0, 3, -1, 2.5)):
        _agree("m_grouped_bf16_gemm_nt_masked",
               (dg.m_grouped_bf16_gemm_nt_masked, _z(g, m, k), _z(g, n, k), _z(g, m, n),
                torch.zeros(g, dtype=torch.int32), em),
               num_groups=g, m=m, n=n, k=k, expected_m=em)


def test_bf16_k_grouped():
    for m, n, ks, out in itertools.product((0, 7, 8, 64), (0, 60, 64), ([], [0, 0], [3, 5], [64, 64]), (F32, BF16)):
        total = sum(ks)
        _agree("k_grouped_bf16_gemm_tn_contiguous",
               (dg.k_grouped_bf16_gemm_tn_contiguous, _z(total, m), _z(total, n), _z(len(ks), m, n, dtype=out), ks),
               m=m, n=n, k=total, num_groups=len(ks), out_dtype=out)


def test_the_two_cases_that_drifted():
    """is_supported used to say True for these while the API rejected them."""
    assert not dg.is_supported("m_grouped_bf16_gemm_nt_contiguous", k=7)
    assert not dg.is_supported("k_grouped_bf16_gemm_tn_contiguous", m=7)
    assert "multiple of 16 bytes" in dg.why_unsupported("m_grouped_bf16_gemm_nt_contiguous", k=7)
    _agree("m_grouped_bf16_gemm_nt_contiguous",
           (dg.m_grouped_bf16_gemm_nt_contiguous, _z(256, 7), _z(2, 64, 7), _z(256, 64),
            torch.zeros(256, dtype=torch.int32)), m=256, n=64, k=7, num_groups=2)
    _agree("k_grouped_bf16_gemm_tn_contiguous",
           (dg.k_grouped_bf16_gemm_tn_contiguous, _z(10, 7), _z(10, 64), _z(2, 7, 64, dtype=F32), [4, 6]),
           m=7, n=64, k=10, num_groups=2)


def _operand(rows, k, dtype, lead=()):
    """(values, fp32 power-of-two scales): e4m3 [.., rows, k] with 1x128 scales, or packed e2m1 [.., rows, k/2]
    with 1x32 scales; anything else (a dtype outside the contract) gets fp8-shaped tensors."""
    if dtype == U8:
        return _z(*lead, rows, k // 2, dtype=U8), torch.ones(*lead, rows, max(-(-k // 32), 1))
    return _z(*lead, rows, k, dtype=dtype), torch.ones(*lead, rows, max(-(-k // 128), 1))


BLOCK_DTYPES = ((FP8, FP8), (U8, U8), (FP8, U8), (U8, FP8), (BF16, BF16))


def test_block_scaled_dense():
    for m, n, k, (da, db), out in itertools.product((0, 1, 64), (16, 64), (0, 16, 48, 64, 100), BLOCK_DTYPES,
                                                    (BF16, F32, F16)):
        if U8 in (da, db) and k % 2:
            continue
        recipe = (1, 1, 128) if FP8 in (da, db) else None  # short K fits both 1x128 and 1x32 scale shapes
        _agree("fp8_fp4_gemm_nt", (dg.fp8_fp4_gemm_nt, _operand(m, k, da), _operand(n, k, db), _z(m, n, dtype=out),
                                   None, recipe), m=m, n=n, k=k, a_dtype=da, b_dtype=db, out_dtype=out)


def test_block_scaled_grouped():
    for m, k, (da, db), out in itertools.product((128, 200), (0, 48, 64), BLOCK_DTYPES[:3], (BF16, F32)):
        _agree("m_grouped_fp8_fp4_gemm_nt_contiguous",
               (dg.m_grouped_fp8_fp4_gemm_nt_contiguous, _operand(m, k, da), _operand(64, k, db, (2,)),
                _z(m, 64, dtype=out), torch.zeros(m, dtype=torch.int32)),
               m=m, n=64, k=k, num_groups=2, a_dtype=da, b_dtype=db, out_dtype=out)
        _agree("m_grouped_fp8_fp4_gemm_nt_masked",
               (dg.m_grouped_fp8_fp4_gemm_nt_masked, _operand(m, k, da, (2,)), _operand(64, k, db, (2,)),
                _z(2, m, 64, dtype=out), torch.zeros(2, dtype=torch.int32), 16),
               num_groups=2, m=m, n=64, k=k, expected_m=16, a_dtype=da, b_dtype=db, out_dtype=out)


def test_fast_path_accepts_only_what_the_rule_accepts():
    """The hot path's inline checks are a subset of the rule: whatever it lets through, the rule accepts."""
    from deep_gemm_sm120.core.rules import dtype_name
    from deep_gemm_sm120.families.bf16_gemm import FAMILY
    from deep_gemm_sm120.families.bf16_gemm.api import _fast_checks

    rules = {op.name[-2:]: op.rule for op in FAMILY.ops if op.name.startswith("bf16_gemm_")}
    big = _z(130, 140)
    variants = {
        "contiguous": lambda r, c: _z(r, c),
        "padded": lambda r, c: big[:r, :c] if r <= 130 and c <= 140 else _z(r, c),
        "transposed": lambda r, c: _z(c, r).T,
        "offset": lambda r, c: _z(r * c + 1)[1:].view(r, c) if r * c else _z(r, c),
    }
    fast = 0
    for layout, (m, n, k), va, vb in itertools.product(("nt", "nn", "tn", "tt"), DENSE + [(1, 8, 12), (130, 9, 7)],
                                                       variants, variants):
        a_shape = (k, m) if layout[0] == "t" else (m, k)
        b_shape = (k, n) if layout[1] == "n" else (n, k)
        a, b, d = variants[va](*a_shape), variants[vb](*b_shape), _z(m, n)
        got = _fast_checks(layout[0] == "t", layout[1] == "n", a, b, d, None)
        if got is None:
            continue
        fast += 1
        lda = a.stride(0) if a.shape[0] > 1 else None
        ldb = b.stride(0) if b.shape[0] > 1 else None
        rules[layout](m=m, n=n, k=k, a_dtype=dtype_name(a.dtype), b_dtype=dtype_name(b.dtype), out_dtype="bfloat16",
                      lda=lda, ldb=ldb)  # must not raise
    assert fast > 30
