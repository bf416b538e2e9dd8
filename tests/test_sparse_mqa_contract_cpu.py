"""The sparse MQA-logits argument contract (host/deep_gemm_sm120/families/sparse_mqa_logits/contract.py) on CPU tensors: typed
errors naming what was expected, and the supported geometry (heads 16/32/64, D 64/128 with FP4 128, blocks
8/16/32) as NotImplementedError."""

from __future__ import annotations

import pytest
import torch

from deep_gemm_sm120.families.sparse_mqa_logits.contract import (
    check_indices,
    check_paged_sparse_call,
    check_sparse_call,
    fmt_of,
)

E4M3, I8, I32, BF16 = torch.float8_e4m3fn, torch.int8, torch.int32, torch.bfloat16


def _q(s=5, h=32, d=128, fp4=False, paged=False):
    lead = (s, 1, h) if paged else (s, h)
    return (torch.zeros(*lead, d // 2 if fp4 else d, dtype=I8 if fp4 else E4M3), torch.zeros(*lead, dtype=I32))


def _kv(n=100, d=128, fp4=False):
    return torch.zeros(n, d // 2 if fp4 else d, dtype=I8 if fp4 else E4M3), torch.zeros(n, dtype=I32)


@pytest.mark.parametrize("fp4", [False, True])
def test_valid_calls(fp4):
    p = check_sparse_call(_q(fp4=fp4), _kv(fp4=fp4), torch.zeros(5, 32, dtype=BF16), 64, 16)
    assert (p.fmt, p.rows, p.heads, p.head_dim, p.num_max_sparse_blocks, p.paged) == (
        "mxfp4" if fp4 else "mxfp8",
        5,
        32,
        128,
        64,
        False,
    )
    cache = torch.zeros(7, 64, 1, (64 if fp4 else 128) + 4, dtype=torch.uint8)
    p = check_paged_sparse_call(_q(fp4=fp4, paged=True), cache, torch.zeros(5, 32, dtype=BF16), 8, 32)
    assert p.paged and p.sparse_block_kv == 32
    assert check_indices(torch.zeros(5, 9, dtype=I32), rows=5) == 9


@pytest.mark.parametrize(
    "call,error,text",
    [
        (lambda: check_sparse_call(_q(), _kv(), torch.zeros(5, 32), 64, 16), TypeError, "bfloat16"),
        (
            lambda: check_sparse_call(_q(), _kv(fp4=True), torch.zeros(5, 32, dtype=BF16), 64, 16),
            TypeError,
            "MXFP8 like q",
        ),
        (
            lambda: check_sparse_call(_q(h=24), _kv(), torch.zeros(5, 24, dtype=BF16), 64, 16),
            NotImplementedError,
            r"supported: \(16, 32, 64\)",
        ),
        (
            lambda: check_sparse_call(_q(d=64, fp4=True), _kv(d=64, fp4=True), torch.zeros(5, 32, dtype=BF16), 64, 16),
            NotImplementedError,
            "MXFP4",
        ),
        (
            lambda: check_sparse_call(_q(), _kv(), torch.zeros(5, 32, dtype=BF16), 64, 4),
            NotImplementedError,
            r"supported: \(8, 16, 32\)",
        ),
        (lambda: check_sparse_call(_q(), _kv(), torch.zeros(5, 32, dtype=BF16), 0, 16), ValueError, ">= 1"),
        (lambda: check_sparse_call(_q(), _kv(), torch.zeros(5, 32, dtype=BF16), 64.0, 16), TypeError, "int"),
        (
            lambda: check_sparse_call(
                _q(), (_kv()[0], torch.zeros(99, dtype=I32)), torch.zeros(5, 32, dtype=BF16), 64, 16
            ),
            ValueError,
            r"kv scales must be \[N\]",
        ),
        (lambda: check_sparse_call(_q(), _kv(), torch.zeros(32, 5, dtype=BF16).T, 64, 16), ValueError, "unit column"),
        (
            lambda: check_paged_sparse_call(
                _q(), torch.zeros(7, 64, 1, 132, dtype=torch.uint8), torch.zeros(5, 32, dtype=BF16), 8, 16
            ),
            ValueError,
            "next_n = 1",
        ),
        (
            lambda: check_paged_sparse_call(
                _q(paged=True), torch.zeros(7, 40, 1, 132, dtype=torch.uint8), torch.zeros(5, 32, dtype=BF16), 8, 16
            ),
            ValueError,
            "multiple of sparse_block_kv",
        ),
        (
            lambda: check_paged_sparse_call(
                _q(paged=True), torch.zeros(7, 64, 1, 128, dtype=torch.uint8), torch.zeros(5, 32, dtype=BF16), 8, 16
            ),
            ValueError,
            r"\[num_pages, page_kv, 1, 132\]",
        ),
        (lambda: check_indices(torch.zeros(5, 9, dtype=torch.int64)), TypeError, "int32"),
        (lambda: check_indices(torch.zeros(5, 0, dtype=I32)), ValueError, "num_max_sparse_blocks >= 1"),
        (lambda: fmt_of(torch.float16), TypeError, "float8_e4m3fn"),
    ],
)
def test_typed_errors(call, error, text):
    with pytest.raises(error, match=text):
        call()


def test_metadata_entry_points_on_cpu_tensors():
    from deep_gemm_sm120.families.sparse_mqa_logits.metadata import (
        get_paged_sparse_mqa_logits_metadata,
        get_sparse_mqa_logits_metadata,
    )

    ks, ke = torch.tensor([0, 8], dtype=I32), torch.tensor([20, 8], dtype=I32)
    idx = torch.tensor([[0, 1, 2], [1, 1, 1]], dtype=I32)
    meta = get_sparse_mqa_logits_metadata(ks, ke, 20, idx, E4M3, 8)
    assert meta.dtype == I32 and meta.shape == (2, 3, 2)
    assert meta[0].tolist() == [[0, 8], [8, 8], [16, 4]] and meta[1, :, 1].tolist() == [0, 0, 0]
    with pytest.raises(ValueError, match="multiples of sparse_block_kv"):
        get_sparse_mqa_logits_metadata(ks + 1, ke + 1, 21, idx, E4M3, 8)
    assert get_sparse_mqa_logits_metadata(ks + 1, ke + 1, 21, idx, I8, 8, use_unaligned_ks=True)[0, 0].tolist() == [
        1,
        8,
    ]
    with pytest.raises(ValueError, match="ke <= num_kv_tokens = 19"):
        get_sparse_mqa_logits_metadata(ks, ke, 19, idx, E4M3, 8)
    with pytest.raises(NotImplementedError, match=r"\(8, 16, 32\)"):
        get_sparse_mqa_logits_metadata(ks, ke, 20, idx, E4M3, 12)
    with pytest.raises(TypeError, match="qk_dtype"):
        get_sparse_mqa_logits_metadata(ks, ke, 20, idx, torch.float32, 8)
    with pytest.raises(ValueError, match=r"cu_seq_len_k_end must be \[S\]"):
        get_sparse_mqa_logits_metadata(ks, ke[:1], 20, idx, E4M3, 8)
    table = torch.tensor([[5, 6], [7, 8]], dtype=I32)
    meta = get_paged_sparse_mqa_logits_metadata(
        torch.tensor([20, 0], dtype=I32), table, torch.tensor([0, 1], dtype=I32), 16, idx, I8, 8
    )
    assert meta[0].tolist() == [[80, 8], [88, 8], [96, 4]] and meta[1, :, 1].tolist() == [0, 0, 0]
    with pytest.raises(ValueError, match="multiple of sparse_block_kv"):
        get_paged_sparse_mqa_logits_metadata(
            torch.tensor([20, 0], dtype=I32), table, torch.tensor([0, 1], dtype=I32), 12, idx, I8, 8
        )


def test_sparse_api_and_is_supported_agree():
    """The entry points on CPU tensors get as far as the device check exactly when is_supported says yes."""
    import itertools

    from support_helpers import agree

    import deep_gemm_sm120 as dg

    for h, d, qd, block, wd in itertools.product(
        (16, 64, 24), (64, 128, 96), (E4M3, I8, torch.bfloat16), (8, 32, 12), (BF16, torch.float32)
    ):
        fp4 = qd == I8
        cols = d // 2 if fp4 else d
        q = (torch.zeros(3, h, cols, dtype=qd), torch.zeros(3, h, dtype=I32))
        kv = (torch.zeros(50, cols, dtype=qd), torch.zeros(50, dtype=I32))
        meta = torch.zeros(3, 4, 2, dtype=I32)
        w = torch.zeros(3, h, dtype=wd)
        query = dict(
            heads=h,
            head_dim=d,
            q_dtype=qd,
            kv_dtype=qd,
            q_sf_dtype=I32,
            kv_sf_dtype=I32,
            weights_dtype=wd,
            num_max_sparse_blocks=4,
            sparse_block_kv=block,
        )
        agree("fp8_fp4_sparse_mqa_logits", (dg.fp8_fp4_sparse_mqa_logits, q, kv, w, meta, 4, block), **query)
        cache = torch.zeros(5, 64, 1, cols + 4, dtype=torch.uint8)
        pq = (q[0].unsqueeze(1), q[1].unsqueeze(1))
        agree(
            "fp8_fp4_paged_sparse_mqa_logits",
            (dg.fp8_fp4_paged_sparse_mqa_logits, pq, cache, w, meta, 4, block),
            **{**query, "kv_dtype": None, "kv_cache_dtype": torch.uint8, "page_kv": 64},
        )
