"""MQA logits without a GPU: typed errors naming the supported set, is_supported agreeing with the API on CPU
tensors, DeepGEMM's padded logits stride, specs within shared memory, and plans that name shipped kernels."""

from __future__ import annotations

import itertools

import pytest
import torch
from support_helpers import CPU_REJECT
from support_helpers import agree as _agree

import deep_gemm_sm120 as dg
from deep_gemm_sm120.families.mqa_logits import kernel as dense
from deep_gemm_sm120.families.paged_mqa_logits import kernel as paged
from deep_gemm_sm120.families.paged_mqa_logits import schedule as meta

E4, U8, I32, F32, BF16 = torch.float8_e4m3fn, torch.uint8, torch.int32, torch.float32, torch.bfloat16


def test_dense_api_and_is_supported_agree():
    for (h, d), (qd, kd), ld, (clean, mk) in itertools.product(
        ((16, 128), (64, 64), (8, 128), (32, 32), (64, 96)),
        ((E4, E4), (BF16, E4), (E4, U8)),
        (F32, BF16, torch.half),
        ((True, 0), (False, 0), (False, 64), (True, 64)),
    ):
        s, sk = 3, 10
        call = (
            lambda *a, ld=ld, clean=clean: dg.fp8_fp4_mqa_logits(*a, clean_logits=clean, logits_dtype=ld),
            (torch.zeros(s, h, d, dtype=qd), None),
            (torch.zeros(sk, d, dtype=kd), torch.zeros(sk)),
            torch.zeros(s, h),
            torch.zeros(s, dtype=I32),
            torch.zeros(s, dtype=I32),
            mk,
        )
        _agree(
            "fp8_fp4_mqa_logits",
            call,
            heads=h,
            head_dim=d,
            q_dtype=qd,
            kv_dtype=kd,
            kv_sf_dtype=F32,
            weights_dtype=F32,
            logits_dtype=ld,
            clean_logits=clean,
            max_seqlen_k=mk,
        )


def test_fp4_dense_geometry():
    q = (torch.zeros(2, 64, 32, dtype=U8), torch.zeros(2, 64, dtype=I32))  # D = 64: not for FP4
    kv = (torch.zeros(10, 32, dtype=U8), torch.zeros(10, dtype=I32))
    with pytest.raises(NotImplementedError, match=r"\(128,\)"):
        dg.fp8_fp4_mqa_logits(q, kv, torch.zeros(2, 64), torch.zeros(2, dtype=I32), torch.zeros(2, dtype=I32))
    q = (torch.zeros(2, 64, 64, dtype=U8), torch.zeros(2, 64, dtype=F32))
    with pytest.raises(TypeError, match="q scales"):
        dg.fp8_fp4_mqa_logits(
            q,
            (torch.zeros(10, 64, dtype=U8), torch.zeros(10, dtype=I32)),
            torch.zeros(2, 64),
            torch.zeros(2, dtype=I32),
            torch.zeros(2, dtype=I32),
        )


def test_dense_errors_name_what_was_expected():
    q, kv, w = torch.zeros(4, 64, 128, dtype=E4), (torch.zeros(9, 128, dtype=E4), torch.zeros(9)), torch.zeros(4, 64)
    ks = torch.zeros(4, dtype=I32)
    with pytest.raises(NotImplementedError, match=r"\(16, 32, 64\)"):
        dg.fp8_mqa_logits(torch.zeros(4, 8, 128, dtype=E4), kv, torch.zeros(4, 8), ks, ks)
    with pytest.raises(ValueError, match="clean_logits=False"):
        dg.fp8_mqa_logits(q, kv, w, ks, ks, True, 16)
    with pytest.raises(ValueError, match=r"kv scales must be \[SK\]"):
        dg.fp8_mqa_logits(q, (kv[0], torch.zeros(8)), w, ks, ks)
    with pytest.raises(TypeError, match="int32"):
        dg.fp8_mqa_logits(q, kv, w, ks.long(), ks)
    with pytest.raises(NotImplementedError, match="bfloat16"):
        dg.fp8_mqa_logits(q, kv, w.to(BF16), ks, ks)


def test_logits_row_stride_is_deepgemms():
    for sk, mk, elem in itertools.product((1, 100, 8192, 65536), (0, 1, 300), (4, 2)):
        stride = dense.logits_row_stride(sk, mk, elem)
        assert stride * elem % 1024 == 0
        assert stride >= (sk + dense.BLOCK_KV if mk == 0 else mk)


def test_specs_fit_and_plans_name_shipped_kernels():
    for fam in (dense, paged):
        assert all(s.smem_bytes <= 101376 for s in fam.specs())
    shipped = set(dense.specs()) | set(paged.specs()) | set(meta.SCHEDULE.specs())
    for h, d, t, clean, mk, fp4 in itertools.product(
        (16, 32, 64), (64, 128), (F32, BF16), (True, False), (0, 8), (False, True)
    ):
        if fp4 and d != 128 or clean and mk:
            continue
        assert (
            set(
                dense.plan_specs(132, heads=h, head_dim=d, logits_dtype=t, clean_logits=clean, max_seqlen_k=mk, fp4=fp4)
            )
            <= shipped
        )
        for bkv in (32, 64, 128):
            assert (
                set(
                    paged.plan_specs(
                        132, heads=h, head_dim=d, block_kv=bkv, logits_dtype=t, clean_logits=clean, fp4=fp4
                    )
                )
                <= shipped
            )


def _paged_call(b=2, n=1, h=64, d=128, bkv=64, qd=E4, row=None, ctx=None, table=None, smeta=None, w=None, indices=None):
    row = d + 4 if row is None else row
    return (
        dg.fp8_fp4_paged_mqa_logits,
        (torch.zeros(b, n, h, d, dtype=qd), None),
        torch.zeros(5, bkv, 1, row, dtype=U8),
        torch.zeros(b * n, h) if w is None else w,
        torch.zeros(b, dtype=I32) if ctx is None else ctx,
        torch.zeros(b, 4, dtype=I32) if table is None else table,
        torch.zeros(9, 2, dtype=I32) if smeta is None else smeta,
        256,
        indices,
    )


def test_paged_api_and_is_supported_agree():
    for h, d, bkv, n, qd in itertools.product((16, 64, 8), (64, 128, 32), (32, 64, 128, 16), (1, 6), (E4, BF16)):
        _agree(
            "fp8_fp4_paged_mqa_logits",
            _paged_call(2, n, h, d, bkv, qd),
            batch=2,
            next_n=n,
            heads=h,
            head_dim=d,
            block_kv=bkv,
            q_dtype=qd,
            kv_cache_dtype=U8,
            weights_dtype=F32,
            logits_dtype=F32,
        )


def test_paged_errors():
    with pytest.raises(NotImplementedError, match="indices"):
        _accepts_raise(_paged_call(indices=torch.zeros(2, dtype=I32)))
    with pytest.raises(ValueError, match=r"kv_cache must be \[num_blocks, block_kv, 1, 132\]"):
        _accepts_raise(_paged_call(row=130))
    with pytest.raises(ValueError, match="context_lens must be"):
        _accepts_raise(_paged_call(ctx=torch.zeros(3, dtype=I32)))
    with pytest.raises(ValueError, match="schedule_meta"):
        _accepts_raise(_paged_call(smeta=torch.zeros(9, 3, dtype=I32)))
    with pytest.raises(TypeError, match="block_table"):
        _accepts_raise(_paged_call(table=torch.zeros(2, 4)))


def _accepts_raise(call):
    call[0](*call[1:])


def test_metadata_errors():
    with pytest.raises(NotImplementedError, match=r"\(32, 64, 128\)"):
        dg.get_paged_mqa_logits_metadata(torch.zeros(3, dtype=I32), 16, 8)
    with pytest.raises(TypeError, match="int32"):
        dg.get_paged_mqa_logits_metadata(torch.zeros(3), 64, 8)
    with pytest.raises(ValueError, match="num_sms"):
        dg.get_paged_mqa_logits_metadata(torch.zeros(3, dtype=I32), 64, 0)
    with pytest.raises(ValueError, match=CPU_REJECT):
        dg.get_paged_mqa_logits_metadata(torch.zeros(3, 2, dtype=I32), 64, 8)
    assert meta.chunk_keys(32) == 64 and meta.chunk_keys(128) == 128


def test_range_check_covers_compressed_rows(monkeypatch):
    """The host range check (run before every launch outside graph capture) refuses a compressed row longer than
    max_seqlen_k: its scores would not fit the row."""
    from deep_gemm_sm120.families.mqa_logits import api

    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    ks, ke = torch.tensor([0, 5], dtype=I32), torch.tensor([10, 40], dtype=I32)
    api._check_ranges(ks, ke, 64, 0)
    api._check_ranges(ks, ke, 64, 35)
    with pytest.raises(ValueError, match=r"query 1: .*max_seqlen_k = 34"):
        api._check_ranges(ks, ke, 64, 34)
    with pytest.raises(ValueError, match=r"query 0: need 0 <= .* <= 9, got \[0, 10\)"):
        api._check_ranges(ks, ke, 9, 0)


def test_paged_host_checks(monkeypatch):
    from deep_gemm_sm120.families.paged_mqa_logits import api

    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    table = torch.tensor([[0, 1], [2, 0]], dtype=I32)
    api._check_block_table(table, 3, torch.tensor([128, 5], dtype=I32), 64)
    with pytest.raises(ValueError, match=r"block_table\[1, 0\] = 2 is not a block"):
        api._check_block_table(table, 2, torch.tensor([128, 5], dtype=I32), 64)
    with pytest.raises(ValueError, match=r"129 tokens exceeds .*\(2 blocks x 64 = 128 tokens\)"):
        api._check_block_table(table, 3, torch.tensor([[1, 129], [0, 5]], dtype=I32), 64)
