"""One error rule for every entry point (core/rules.py; README and docs/support_matrix.md say the same):
TypeError for a type or a dtype outside the function's (DeepGEMM's) contract, ValueError for shapes, strides,
alignment, devices and values, NotImplementedError for what DeepGEMM allows and we do not, or a non-SM120 GPU."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import deep_gemm_sm120 as dg

ROOT = Path(__file__).resolve().parents[1]
BF16, F32, FP8, U8 = torch.bfloat16, torch.float32, torch.float8_e4m3fn, torch.uint8


def _z(*shape, dtype=BF16):
    return torch.zeros(*shape, dtype=dtype)


def _ones_sf(*shape):
    return torch.ones(*shape)


CASES = [
    # --- TypeError: types and dtypes outside the contract
    ("fp16 a", TypeError, lambda: dg.bf16_gemm_nt(_z(4, 8, dtype=torch.float16), _z(4, 8), _z(4, 4))),
    ("int32 d", TypeError, lambda: dg.bf16_gemm_nt(_z(4, 8), _z(4, 8), _z(4, 4, dtype=torch.int32))),
    ("fp16 d (tn)", TypeError, lambda: dg.bf16_gemm_tn(_z(8, 4), _z(8, 4), _z(4, 4, dtype=torch.float16))),
    (
        "fp32 d, M-grouped",
        TypeError,
        lambda: dg.m_grouped_bf16_gemm_nt_contiguous(
            _z(128, 8), _z(1, 8, 8), _z(128, 8, dtype=F32), _z(128, dtype=torch.int32)
        ),
    ),
    (
        "bf16 d, K-grouped",
        TypeError,
        lambda: dg.k_grouped_bf16_gemm_tn_contiguous(_z(8, 8), _z(8, 8), _z(1, 8, 8), [8]),
    ),
    (
        "ks_cpu a string",  # iterable: "64" must not become [6, 4]
        TypeError,
        lambda: dg.k_grouped_bf16_gemm_tn_contiguous(_z(64, 8), _z(64, 8), _z(1, 8, 8, dtype=F32), "64"),
    ),
    ("scale factors a list", TypeError, lambda: dg.get_mn_major_tma_aligned_tensor([1.0])),
    (
        "int64 masked_m",
        TypeError,
        lambda: dg.m_grouped_bf16_gemm_nt_masked(_z(1, 8, 8), _z(1, 8, 8), _z(1, 8, 8), _z(1, dtype=torch.int64), 8),
    ),
    (
        "expected_m float",
        TypeError,
        lambda: dg.m_grouped_bf16_gemm_nt_masked(_z(1, 8, 8), _z(1, 8, 8), _z(1, 8, 8), _z(1, dtype=torch.int32), 2.5),
    ),
    ("not a tensor", TypeError, lambda: dg.bf16_gemm_nt([[1.0]], _z(4, 8), _z(4, 4))),
    (
        "einsum's cuBLAS path, d not a tensor",
        TypeError,
        lambda: dg.einsum("bmk,bnk->mn", _z(1, 4, 8), _z(1, 4, 8), None, use_cublaslt=True),
    ),
    (
        "bf16 operands to fp8",
        TypeError,
        lambda: dg.fp8_gemm_nt((_z(4, 128), _ones_sf(4, 1)), (_z(4, 128), _ones_sf(1, 1)), _z(4, 4)),
    ),
    (
        "fp16 d to fp8",
        TypeError,
        lambda: dg.fp8_gemm_nt(
            (_z(4, 128, dtype=FP8), _ones_sf(4, 1)),
            (_z(4, 128, dtype=FP8), _ones_sf(1, 1)),
            _z(4, 4, dtype=torch.float16),
        ),
    ),
    (
        "fp32 d, fp8 masked",
        TypeError,
        lambda: dg.m_grouped_fp8_gemm_nt_masked(
            (_z(1, 4, 128, dtype=FP8), _ones_sf(1, 4, 1)),
            (_z(1, 4, 128, dtype=FP8), _ones_sf(1, 1, 1)),
            _z(1, 4, 4, dtype=F32),
            _z(1, dtype=torch.int32),
            4,
        ),
    ),
    (
        "scales of no known format",
        TypeError,
        lambda: dg.fp8_gemm_nt(
            (_z(4, 128, dtype=FP8), _z(4, 1, dtype=torch.float16)), (_z(4, 128, dtype=FP8), _ones_sf(1, 1)), _z(4, 4)
        ),
    ),
    # --- ValueError: shapes, strides, alignment, devices, values
    ("K mismatch", ValueError, lambda: dg.bf16_gemm_nt(_z(4, 8), _z(4, 16), _z(4, 4))),
    ("K rows off 16 bytes", ValueError, lambda: dg.bf16_gemm_nt(_z(4, 12), _z(4, 12), _z(4, 4))),
    ("transposed operand", ValueError, lambda: dg.bf16_gemm_nt(_z(64, 64).T[:, :8], _z(4, 8), _z(64, 4))),
    ("CPU tensors", ValueError, lambda: dg.bf16_gemm_nt(_z(4, 8), _z(4, 8), _z(4, 4))),
    (
        "0-d bare operand (unit scales)",
        ValueError,
        lambda: dg.fp8_fp4_gemm_nt(torch.zeros((), dtype=FP8), (_z(4, 128, dtype=FP8), _ones_sf(4, 1)), _z(4, 4)),
    ),
    (
        "unaligned contiguous M",
        ValueError,
        lambda: dg.m_grouped_bf16_gemm_nt_contiguous(_z(100, 8), _z(1, 8, 8), _z(100, 8), _z(100, dtype=torch.int32)),
    ),
    (
        "negative ks",
        ValueError,
        lambda: dg.k_grouped_bf16_gemm_tn_contiguous(_z(8, 8), _z(8, 8), _z(2, 8, 8, dtype=F32), [9, -1]),
    ),
    (
        "FP4 K not a multiple of 32",
        ValueError,
        lambda: dg.fp8_fp4_gemm_nt(
            (_z(4, 24, dtype=U8), _ones_sf(4, 2)), (_z(4, 24, dtype=U8), _ones_sf(4, 2)), _z(4, 4)
        ),
    ),
    (
        "non power-of-two fp32 scales",
        ValueError,
        lambda: dg.transform_sf_into_required_layout(torch.full((4, 1), 3.0), 4, 128, (1, 1, 128)),
    ),
    # --- NotImplementedError: allowed by DeepGEMM's contract, not supported here
    (
        "NVFP4 scales on a mixed operand",
        NotImplementedError,
        lambda: dg.fp8_fp4_gemm_nt(
            (_z(4, 128, dtype=FP8), _ones_sf(4, 1)), (_z(4, 64, dtype=U8), _ones_sf(4, 8).to(FP8)), _z(4, 4)
        ),
    ),
    (
        "different a/b granularities",
        NotImplementedError,
        lambda: dg.fp8_gemm_nt(
            (_z(4, 256, dtype=FP8), _ones_sf(4, 8)), (_z(4, 256, dtype=FP8), _ones_sf(4, 2)), _z(4, 4)
        ),
    ),
]


@pytest.mark.parametrize("what, exc, call", CASES, ids=[c[0] for c in CASES])
def test_error_type_rule(what, exc, call):
    with pytest.raises(Exception) as info:
        call()
    assert type(info.value) is exc, f"{what}: raised {type(info.value).__name__}: {info.value}"
    assert str(info.value), "every error names what was expected"


def test_non_sm120_architecture_is_not_implemented(monkeypatch):
    from deep_gemm_sm120.arch import target_for_capability

    monkeypatch.delenv("DG_SM120_EMULATE", raising=False)
    for cap in ((8, 0), (9, 0), (10, 0)):
        with pytest.raises(NotImplementedError, match=f"sm_{cap[0]}{cap[1]}"):
            target_for_capability(cap, False)
        assert dg.why_unsupported("bf16_gemm_nt", capability=cap).startswith("NotImplementedError")


def test_is_supported_explains_unknown_ops_and_keywords():
    assert "unknown op 'bf16_gemm'" in dg.why_unsupported("bf16_gemm")
    assert "did you mean" in dg.why_unsupported("bf16_gemm_tx")
    reason = dg.why_unsupported("bf16_gemm_nt", m=1, bogus=2)
    assert "unknown keyword(s) bogus" in reason and "out_dtype" in reason
    assert dg.why_unsupported("bf16_gemm_nt", m=1, n=8, k=8, out_dtype="fp32") is None
    assert "TypeError" in dg.why_unsupported("bf16_gemm_nt", out_dtype=torch.int32)
    from deep_gemm_sm120.core.registry import registry

    assert set(dg.supported_ops()) == set(registry().ops) and set(registry().ops) <= set(dg.OPS)


def test_docs_state_the_same_rule():
    readme = (ROOT / "README.md").read_text()
    matrix = (ROOT / "docs" / "support_matrix.md").read_text()
    for text in (readme, matrix):
        assert "NotImplementedError" in text and "DeepGEMM" in text
    assert "unsupported dtypes raise `NotImplementedError`" not in matrix
    assert "Bad arguments raise `TypeError`/`ValueError`" not in readme
