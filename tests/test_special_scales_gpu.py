"""Special scale encodings in packed scales callers pass (issue 44; docs/block_scaled.md "Special scale values"),
in both paths: with DG_SM120_CHECK_SCALES on they are a ValueError naming the tensor, word and byte before
anything launches; with it off the kernel gives the defined result:
  UE8M0 0x00   a scale of 2^-127 (not zero; the block's products become ~0 but stay finite)
  UE8M0 0xFF   NaN: every output of that row (A) / column (B) is NaN, every other output is exact
  UE4M3 0x7F   NaN, likewise
  UE4M3 sign   rejected by the check; without it the sm_90 emulation ignores the bit (silicon's reading is what
               the self-test reports, ue4m3_sign)
Each in the encoding the device uses and in the replicated one."""

from __future__ import annotations

import pytest
import torch
from gpu_helpers import requires_cuda

from deep_gemm_sm120.selftest.workloads.block_scaled import fp8_operands, quantize_side

pytestmark = [pytest.mark.cuda, pytest.mark.emulation, requires_cuda]


@pytest.fixture(params=["", "replicated"], ids=["device-encoding", "replicated"])
def encoding(request, monkeypatch):
    """The encoding the device uses, then the conservative one; cached calls forgotten both ways."""
    from deep_gemm_sm120 import scale_encoding

    if request.param:
        monkeypatch.setenv("DG_SM120_SCALE_ENCODING", request.param)
    scale_encoding.reset()
    yield request.param
    monkeypatch.delenv("DG_SM120_SCALE_ENCODING", raising=False)
    scale_encoding.reset()


@pytest.fixture()
def checks_off():
    import deep_gemm_sm120 as dg

    saved = dg.get_scale_checks()
    dg.set_scale_checks(False)
    yield dg
    dg.set_scale_checks(saved)


def _poke(words: torch.Tensor, row: int, block: int, value: int) -> torch.Tensor:
    """Packed MN-major words [MN, K blocks / 4]: byte `block % 4` of word (row, block // 4) set to value."""
    out = words.clone()
    w = int(out[row, block // 4]) & 0xFFFFFFFF
    w = (w & ~(0xFF << (8 * (block % 4)))) | (value << (8 * (block % 4)))
    out[row, block // 4] = w - (1 << 32) if w >= 1 << 31 else w
    return out


def test_ue8m0_zero_and_nan_in_a_row(sm120_or_emulation, checks_off, encoding):
    dg = checks_off
    m, n, k, recipe = 64, 128, 512, (1, 1, 32)
    gen = torch.Generator(device="cuda").manual_seed(11)
    (a, sfa), (b, sfb), _ = fp8_operands(m, n, k, gen, 32, b_blocks=False)
    pa = dg.transform_sf_into_required_layout(sfa, m, k, recipe, is_sfa=True)
    pb = dg.transform_sf_into_required_layout(sfb, n, k, recipe)
    for value, row, block in ((0x00, 5, 3), (0xFF, 9, 6)):
        bad = _poke(pa, row, block, value)
        s = sfa.double().clone()
        s[row, block] = 2.0**-127 if value == 0 else float("nan")
        ref = (a.double() * s.repeat_interleave(32, 1)) @ (b.double() * sfb.double().repeat_interleave(32, 1)).T
        d = torch.full((m, n), 7.0, device="cuda", dtype=torch.float32)
        dg.fp8_gemm_nt((a, bad), (b, pb), d, recipe=recipe)
        torch.cuda.synchronize()
        others = torch.arange(m, device="cuda") != row
        if value == 0xFF:
            assert torch.isnan(d[row]).all() and not torch.isnan(d[others]).any()
        else:
            assert torch.isfinite(d).all()
        from deep_gemm_sm120.testing import calc_diff

        assert calc_diff(d[others], ref[others]) < 1e-3
        if value == 0:
            assert calc_diff(d[row], ref[row]) < 1e-3, "2^-127, not zero, for that K block"
        dg.set_scale_checks(True)
        try:
            if value == 0xFF:
                with pytest.raises(
                    ValueError,
                    match=rf"sfa \(packed int32, UE8M0\) holds NaN \(0xFF\): byte {block % 4} of word \({row}, {block // 4}\)",
                ):
                    dg.fp8_gemm_nt((a, bad), (b, pb), d, recipe=recipe)
            else:
                dg.fp8_gemm_nt((a, bad), (b, pb), d, recipe=recipe)  # 0x00 is a scale (2^-127), not an error
        finally:
            dg.set_scale_checks(False)


def test_ue4m3_nan_and_sign_in_nvfp4(sm120_or_emulation, checks_off, encoding):
    dg = checks_off
    from deep_gemm_sm120.testing import calc_diff

    m, n, k = 64, 128, 256
    gen = torch.Generator(device="cuda").manual_seed(12)
    a, sfa, _ = quantize_side("nvfp4", m, k, gen)
    b, sfb, _ = quantize_side("nvfp4", n, k, gen)
    recipe = (1, 1, 16)
    pa = dg.transform_sf_into_required_layout(sfa, m, k, recipe, is_sfa=True)
    pb = dg.transform_sf_into_required_layout(sfb, n, k, recipe)
    clean = torch.empty(m, n, device="cuda", dtype=torch.float32)
    dg.fp8_fp4_gemm_nt((a, pa), (b, pb), clean, recipe=recipe)
    row, block = 7, 5
    code = int(sfa[row, block].view(torch.uint8))
    for value, what in ((0x7F, "NaN"), (code | 0x80, "a negative scale")):
        bad = _poke(pa, row, block, value)
        d = torch.empty(m, n, device="cuda", dtype=torch.float32)
        dg.fp8_fp4_gemm_nt((a, bad), (b, pb), d, recipe=recipe)
        torch.cuda.synchronize()
        others = torch.arange(m, device="cuda") != row
        assert torch.equal(d[others], clean[others])
        if value == 0x7F:
            assert torch.isnan(d[row]).all()
        elif sm120_or_emulation[0] != 12:  # the emulation's definition; silicon's is the self-test's report
            assert torch.equal(d[row], clean[row])
        dg.set_scale_checks(True)
        try:
            with pytest.raises(ValueError, match=rf"sfa \(packed int32, UE4M3\) holds {what}"):
                dg.fp8_fp4_gemm_nt((a, bad), (b, pb), d, recipe=recipe)
        finally:
            dg.set_scale_checks(False)
    assert calc_diff(clean, clean) == 0.0


def test_mqa_and_sparse_check_the_packed_words_they_are_given(sm120_or_emulation, checks_off, encoding):
    dg = checks_off
    from deep_gemm_sm120.quant import pack_ue8m0_to_int, per_token_cast_to_fp4
    from deep_gemm_sm120.selftest.workloads.mqa import dense_case, paged_cache, run_sparse, sparse_case

    s, sk, h = 16, 200, 32
    _, _, _, w, ks, ke = dense_case(s, sk, h, 128, "full")
    g = torch.Generator(device="cuda").manual_seed(3)
    qp, qsf, _ = per_token_cast_to_fp4(torch.randn(s * h, 128, device="cuda", generator=g), "mxfp4")
    kvp, kvsf, _ = per_token_cast_to_fp4(torch.randn(sk, 128, device="cuda", generator=g), "mxfp4")
    q_sf, kv_sf = pack_ue8m0_to_int(qsf).view(s, h), pack_ue8m0_to_int(kvsf).view(sk)
    kv_bad = kv_sf.clone()
    kv_bad[17] = kv_bad[17] | (0xFF << 16)
    args = ((qp.view(s, h, 64), q_sf), (kvp, kv_bad), w, ks, ke)
    dg.fp8_fp4_mqa_logits(*args)  # off: taken as given
    dg.set_scale_checks(True)
    try:
        with pytest.raises(
            ValueError, match=r"kv scales \(packed int32, UE8M0\) holds NaN \(0xFF\): byte 2 of word \(17,\)"
        ):
            dg.fp8_fp4_mqa_logits(*args)
        # paged FP4: the scale words inside the cache, of the blocks the requests read
        cache, table, _ = paged_cache([100, 30], 64, 128, True, 0)
        words = cache.view(cache.shape[0], -1)[:, 64 * 64 :].view(torch.int32)
        qf = torch.randn(2 * h, 128, device="cuda", generator=g)
        pq, pqsf, _ = per_token_cast_to_fp4(qf, "mxfp4")
        ctx = torch.tensor([100, 30], dtype=torch.int32, device="cuda")
        meta = dg.get_paged_mqa_logits_metadata(ctx, 64, dg.get_num_sms())
        q_in = (pq.view(2, 1, h, 64), pack_ue8m0_to_int(pqsf).view(2, 1, h))
        weights = torch.randn(2, h, device="cuda")
        call = lambda: dg.fp8_fp4_paged_mqa_logits(q_in, cache, weights, ctx, table, meta, 64 * table.shape[1])
        used = {int(table[0, 0]), int(table[0, 1]), int(table[1, 0])}
        stale = next(b for b in range(cache.shape[0]) if b not in used)
        words[stale, 3] = 0xFF  # a pool block no request reads: not an error
        call()
        blk = int(table[0, 1])
        words[blk, 3] = 0xFF
        msg = rf"kv_cache scales \(packed int32, UE8M0\) holds NaN \(0xFF\): byte 0 of word \({blk}, 3\)"
        with pytest.raises(ValueError, match=msg):
            call()
        c = sparse_case(9, 300, 32, 128, "mxfp8", 16, num_max=4)
        c["q"] = (c["q"][0], c["q"][1].clone())
        c["q"][1][2, 5] = c["q"][1][2, 5] | 0xFF
        with pytest.raises(
            ValueError, match=r"q scales \(packed int32, UE8M0\) holds NaN \(0xFF\): byte 0 of word \(2, 5\)"
        ):
            run_sparse(c)
    finally:
        dg.set_scale_checks(False)
