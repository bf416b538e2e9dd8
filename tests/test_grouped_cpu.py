"""M-grouped GEMM host checks on the CPU: layout contract, typed errors, header/host constant agreement."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import deep_gemm_sm120 as dg
from deep_gemm_sm120.checks import check_contiguous_layout

ROOT = Path(__file__).resolve().parents[1]
A = 128


def rows(*groups: tuple[int, int]) -> torch.Tensor:
    """Per-row layout from (group id, count) runs, each group padded with -1 to the alignment."""
    out = []
    for g, count in groups:
        out += [g] * count + [-1] * ((-count) % A)
    return torch.tensor(out, dtype=torch.int32)


def test_alignment_matches_the_header():
    text = (ROOT / "device_layer/layout/sm120_grouped_layout.cuh").read_text()
    value = int(re.search(r"kMKAlignmentForContiguousLayout = (\d+);", text).group(1))
    assert dg.get_mk_alignment_for_contiguous_layout() == value == 128


def test_valid_per_row_layouts():
    check_contiguous_layout(rows((0, 100), (1, 128), (3, 1)), 384, 4, psum=False)  # group 2 empty
    check_contiguous_layout(torch.full((256,), -1, dtype=torch.int32), 256, 2, psum=False)  # all padding


@pytest.mark.parametrize(
    "layout, match",
    [
        (torch.cat([torch.zeros(64), torch.ones(64)]).int(), "mix groups"),  # boundary inside a block
        (torch.cat([-torch.ones(10), torch.zeros(118)]).int(), "start with padding"),
        (torch.full((128,), 5, dtype=torch.int32), r"outside \[-1, 4\)"),  # wrong group count
        (torch.full((128,), -2, dtype=torch.int32), r"outside \[-1, 4\)"),
    ],
)
def test_invalid_per_row_layouts(layout, match):
    with pytest.raises(ValueError, match=match):
        check_contiguous_layout(layout, layout.numel(), 4, psum=False)


def test_psum_layouts():
    check_contiguous_layout(torch.tensor([100, 100, 300, 390], dtype=torch.int32), 512, 4, psum=True)  # empty group 1
    for bad, m in (([100, 120], 512), ([100, 50], 512), ([128, 600], 512)):
        with pytest.raises(ValueError, match="psum"):
            check_contiguous_layout(torch.tensor(bad, dtype=torch.int32), m, 2, psum=True)


def _t(*shape, dtype=torch.bfloat16):
    return torch.zeros(*shape, dtype=dtype)


@pytest.mark.parametrize(
    "args, kwargs, exc, match",
    [
        (
            (_t(256, 64), _t(2, 32, 64), _t(256, 32), _t(256, dtype=torch.int64)),
            {},
            TypeError,
            "grouped_layout must be torch.int32",
        ),
        ((_t(256, 64), _t(2, 32, 48), _t(256, 32), _t(256, dtype=torch.int32)), {}, ValueError, "K must agree"),
        (
            (_t(200, 64), _t(2, 32, 64), _t(200, 32), _t(200, dtype=torch.int32)),
            {},
            ValueError,
            "multiple of get_mk_alignment",
        ),
        (
            (_t(256, 64), _t(2, 32, 64), _t(256, 32), _t(255, dtype=torch.int32)),
            {},
            ValueError,
            r"grouped_layout must be \[M\]",
        ),
        (
            (_t(256, 64), _t(2, 32, 64), _t(256, 32), _t(3, dtype=torch.int32)),
            {"use_psum_layout": True},
            ValueError,
            r"\[G\]",
        ),
        (
            (_t(256, 64), _t(2, 32, 64), _t(256, 32, dtype=torch.float32), _t(256, dtype=torch.int32)),
            {},
            TypeError,
            "d must be torch.bfloat16",
        ),
        ((_t(256, 64), _t(32, 64), _t(256, 32), _t(256, dtype=torch.int32)), {}, ValueError, r"b \[G, N, K\]"),
        ((_t(256, 64), _t(2, 32, 64), _t(256, 32), _t(256, dtype=torch.int32)), {}, ValueError, "CUDA device"),
    ],
)
def test_contiguous_api_errors(args, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        dg.m_grouped_bf16_gemm_nt_contiguous(*args, **kwargs)


@pytest.mark.parametrize(
    "args, exc, match",
    [
        (
            (_t(2, 64, 32), _t(2, 48, 32), _t(2, 64, 48), _t(2, dtype=torch.int64), 16),
            TypeError,
            "masked_m must be torch.int32",
        ),
        ((_t(2, 64, 32), _t(3, 48, 32), _t(2, 64, 48), _t(2, dtype=torch.int32), 16), ValueError, "G and K must agree"),
        (
            (_t(2, 64, 32), _t(2, 48, 32), _t(2, 64, 40), _t(2, dtype=torch.int32), 16),
            ValueError,
            r"d must be \[G, M, N\]",
        ),
        (
            (_t(2, 64, 32), _t(2, 48, 32), _t(2, 64, 48), _t(3, dtype=torch.int32), 16),
            ValueError,
            r"masked_m must be \[G\]",
        ),
        ((_t(2, 64, 32), _t(2, 48, 32), _t(2, 64, 48), _t(2, dtype=torch.int32), 1.5), TypeError, "expected_m"),
        ((_t(2, 64, 32), _t(2, 48, 32), _t(2, 64, 48), _t(2, dtype=torch.int32), 16), ValueError, "CUDA device"),
    ],
)
def test_masked_api_errors(args, exc, match):
    with pytest.raises(exc, match=match):
        dg.m_grouped_bf16_gemm_nt_masked(*args)


def test_is_supported_grouped():
    assert dg.is_supported("m_grouped_bf16_gemm_nt_contiguous", capability=(12, 0))
    assert not dg.is_supported("m_grouped_bf16_gemm_nt_masked", out_dtype=torch.float32)


@pytest.mark.parametrize(
    "args, kwargs, exc, match",
    [
        ((_t(10, 64), _t(10, 32), _t(2, 64, 32, dtype=torch.float32), [4, 7]), {}, ValueError, "K extents must agree"),
        ((_t(10, 64), _t(9, 32), _t(2, 64, 32, dtype=torch.float32), [4, 6]), {}, ValueError, "K extents must agree"),
        ((_t(10, 64), _t(10, 32), _t(2, 64, 32), [4, 6]), {}, TypeError, "d must be torch.float32"),
        (
            (_t(10, 64), _t(10, 32), _t(3, 64, 32, dtype=torch.float32), [4, 6]),
            {},
            ValueError,
            r"d must be \[G, M, N\]",
        ),
        ((_t(10, 64), _t(10, 32), _t(2, 64, 32, dtype=torch.float32), [4, -6]), {}, ValueError, "non-negative"),
        ((_t(10, 64), _t(10, 32), _t(2, 64, 32, dtype=torch.float32), ["x", 6]), {}, TypeError, "sequence of ints"),
        (
            (_t(10, 64), _t(10, 32), _t(2, 64, 32, dtype=torch.float32), [4, 6]),
            {"c": _t(2, 64, 32)},
            TypeError,
            "c must have d's dtype torch.float32",
        ),
        ((_t(10, 64), _t(10, 32), _t(2, 64, 32, dtype=torch.float32), [4, 6]), {}, ValueError, "CUDA device"),
    ],
)
def test_k_grouped_api_errors(args, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        dg.k_grouped_bf16_gemm_tn_contiguous(*args, **kwargs)


def test_is_supported_k_grouped():
    assert dg.is_supported("k_grouped_bf16_gemm_tn_contiguous", out_dtype=torch.float32, capability=(12, 0))
    assert not dg.is_supported("k_grouped_bf16_gemm_tn_contiguous", out_dtype=torch.bfloat16)


def test_grouped_operands_must_be_stacked_densely():
    from deep_gemm_sm120.checks import rows_view as _grouped_rows_view

    dense = torch.zeros(2, 32, 64, dtype=torch.bfloat16)
    assert _grouped_rows_view("b", dense).shape == (64, 64)
    padded_groups = torch.zeros(2, 40, 64, dtype=torch.bfloat16)[:, :32]  # a gap between groups
    with pytest.raises(ValueError, match=r"b groups must be stacked densely \(stride\(0\) == 32 \* stride\(1\)\)"):
        _grouped_rows_view("b", padded_groups)
    with pytest.raises(ValueError, match="contiguous last dimension"):
        _grouped_rows_view("b", torch.zeros(2, 64, 32, dtype=torch.bfloat16).transpose(1, 2))
