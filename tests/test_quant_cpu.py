"""Scale-factor utilities: exact against straightforward references (CPU)."""

from __future__ import annotations

import math

import pytest
import torch

from deep_gemm_sm120 import quant


def test_ceil_to_ue8m0_exact():
    x = torch.tensor([1.0, 0.75, 2.0, 2.0000002, 3.0, 2.0**-100, 1.5e30, 0.5, 0.49999997], dtype=torch.float32)
    want = [1.0, 1.0, 2.0, 4.0, 4.0, 2.0**-100, 2.0**101, 0.5, 0.5]
    assert quant.ceil_to_ue8m0(x).tolist() == want
    # just above a large power of two: log2-based rounding would round *down* here
    big = torch.tensor([1024.0 * (1 + 2**-23)])
    assert quant.ceil_to_ue8m0(big).item() == 2048.0
    r = torch.rand(10000) * 1e3 + 1e-6
    c = quant.ceil_to_ue8m0(r)
    assert bool((c >= r).all()) and bool((c / 2 < r).all()) and bool(quant.is_ue8m0(c).all())
    for bad in ([0.0], [-1.0], [float("inf")], [float("nan")]):
        with pytest.raises(ValueError, match="positive, finite"):
            quant.ceil_to_ue8m0(torch.tensor(bad))
    with pytest.raises(TypeError, match="floating-point"):
        quant.ceil_to_ue8m0(torch.tensor([1, 2]))


def test_require_ue8m0_rejects_raw_fp32_scales():
    quant.require_ue8m0("sf", torch.tensor([1.0, 0.25, 2.0**20]))
    with pytest.raises(ValueError, match="not powers of two.*ceil_to_ue8m0"):
        quant.require_ue8m0("sf", torch.tensor([1.0, 0.3]))


def test_pack_ue8m0_to_int_byte_order():
    sf = torch.tensor([[1.0, 2.0, 0.5, 2.0**10, 4.0]])  # exponent bytes 127, 128, 126, 137, 129 (+ pad 127 x3)
    packed = quant.pack_ue8m0_to_int(sf)
    assert packed.dtype == torch.int32 and packed.shape == (1, 2)
    w0, w1 = (int(v) & 0xFFFFFFFF for v in packed[0])
    assert [(w0 >> s) & 0xFF for s in (0, 8, 16, 24)] == [127, 128, 126, 137]
    assert [(w1 >> s) & 0xFF for s in (0, 8, 16, 24)] == [129, 127, 127, 127]


@pytest.mark.parametrize("fn, rows", [(quant.per_token_cast_to_fp8, 1), (quant.per_block_cast_to_fp8, 128)])
@pytest.mark.parametrize("use_ue8m0", [True, False])
def test_fp8_casts_round_trip(fn, rows, use_ue8m0):
    torch.manual_seed(0)
    x = torch.randn(300, 520) * torch.logspace(-3, 3, 300).unsqueeze(1)  # wide per-row dynamic range
    q, s = fn(x, use_ue8m0=use_ue8m0)
    assert q.dtype == torch.float8_e4m3fn and q.shape == x.shape
    assert s.shape == (math.ceil(300 / rows), math.ceil(520 / 128))
    if use_ue8m0:
        assert bool(quant.is_ue8m0(s).all())
    deq = q.float() * s.repeat_interleave(rows, 0).repeat_interleave(128, 1)[:300, :520]
    amax = x.abs().view(300, -1)  # per-element bound: e4m3 keeps 3 mantissa bits of each block's range
    block_amax = quant._block_amax(x, rows, 128).repeat_interleave(rows, 0).repeat_interleave(128, 1)[:300, :520]
    assert bool(((deq - x).abs() <= block_amax * 2**-4 + 1e-12).all())
    assert float(q.float().abs().max()) <= quant.FP8_E4M3_MAX
    del amax


def test_e2m1_codes_exhaustive_and_ties():
    values = torch.tensor(quant.E2M1_VALUES + tuple(-v for v in quant.E2M1_VALUES[1:]))
    assert torch.equal(quant.e2m1_decode(quant.e2m1_codes(values)), values)
    # ties go to the even code: 0.25 -> 0 (code 0), 0.75 -> 1.0 (code 2), 1.25 -> 1.0, 1.75 -> 2.0, 2.5 -> 2.0,
    # 3.5 -> 4.0, 5.0 -> 4.0; above 6 saturates
    ties = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 7.5, -0.75])
    assert quant.e2m1_decode(quant.e2m1_codes(ties)).tolist() == [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 6.0, -1.0]
    r = (torch.rand(5000) - 0.5) * 14
    dec = quant.e2m1_decode(quant.e2m1_codes(r))
    grid = torch.tensor(quant.E2M1_VALUES)
    nearest = (r.abs().clamp(max=6).unsqueeze(1) - grid).abs().min(dim=1).values
    assert torch.allclose((dec.abs() - r.abs().clamp(max=6)).abs(), nearest)


def test_e2m1_packing_nibble_order():
    codes = torch.tensor([[1, 2, 15, 8]], dtype=torch.uint8)
    packed = quant.pack_e2m1(codes)
    assert packed.tolist() == [[0x21, 0x8F]]
    assert torch.equal(quant.unpack_e2m1(packed), codes)
    with pytest.raises(ValueError, match="even"):
        quant.pack_e2m1(torch.zeros(1, 3, dtype=torch.uint8))


@pytest.mark.parametrize("kind, block", [("mxfp4", 32), ("nvfp4", 16)])
def test_fp4_casts(kind, block):
    torch.manual_seed(1)
    x = torch.randn(64, 256) * torch.logspace(-2, 2, 64).unsqueeze(1)
    packed, s, g = quant.per_token_cast_to_fp4(x, kind)
    assert packed.dtype == torch.uint8 and packed.shape == (64, 128) and s.shape == (64, 256 // block)
    if kind == "mxfp4":
        assert bool(quant.is_ue8m0(s).all()) and float(g) == 1.0
    else:
        assert s.dtype == torch.float8_e4m3fn and g.dim() == 0
        assert float(s.float().min()) >= 2.0**-6  # every block scale in e4m3's normal range
    deq = quant.dequantize_fp4(packed, s, g, kind)
    block_amax = quant._block_amax(x, 1, block).repeat_interleave(block, 1)
    # e2m1's coarsest step is 2 (between 4 and 6): half of it is 1/6 of the block's range; an e4m3 block scale
    # rounded down by up to 1/16 adds saturation of at most 6/16 = 1/16 of the range (MX rounds up: none)
    assert bool(((deq - x).abs() <= block_amax * (1.0 / 6 + 1.0 / 16) + 1e-6).all())
    with pytest.raises(ValueError, match="multiple of"):
        quant.per_token_cast_to_fp4(torch.randn(4, block + 2), kind)
    with pytest.raises(ValueError, match="'mxfp4' or 'nvfp4', got 'fp6'"):  # not an FP4 kind: a bad value
        quant.per_token_cast_to_fp4(x, "fp6")


def test_mn_major_tma_aligned_layouts():
    sf = torch.rand(3, 100, 7) + 0.1
    t = quant.get_mn_major_tma_aligned_tensor(sf)
    assert torch.equal(t, sf) and t.stride(-2) == 1 and t.stride(-1) == 100 + (-100) % 4
    p = quant.get_mn_major_tma_aligned_packed_ue8m0_tensor(quant.ceil_to_ue8m0(sf[0]))
    assert p.dtype == torch.int32 and p.shape == (100, 2) and p.stride(0) == 1 and p.stride(1) % 4 == 0
    assert torch.equal(p, quant.pack_ue8m0_to_int(quant.ceil_to_ue8m0(sf[0])))
