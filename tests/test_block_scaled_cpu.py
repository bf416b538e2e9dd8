"""Block-scaled GEMMs on the CPU: scale-factor layout (exact), argument errors, configurations, heuristics."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

import deep_gemm_sm120 as dg
from deep_gemm_sm120 import quant
from deep_gemm_sm120.core.arith import ceil_div
from deep_gemm_sm120.scale_layout import check_packed, pack_scale_bytes, scale_bytes, sf_words


def _pow2(shape, lo=-20, hi=20, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.pow(2.0, torch.randint(lo, hi + 1, shape, generator=g).float())


def test_sf_words():
    assert [sf_words(k, 128) for k in (1, 128, 512, 513, 7168)] == [1, 1, 1, 2, 14]
    assert sf_words(7168, 32) == 56 and sf_words(64, 16) == 1 and sf_words(80, 16) == 2


def test_pack_scale_bytes_is_exact_and_little_endian():
    b = torch.randint(0, 256, (5, 7), dtype=torch.int32).to(torch.uint8)
    w = pack_scale_bytes(b)
    assert w.shape == (5, 2) and w.dtype == torch.int32
    for r in range(5):
        for p in range(2):
            want = 0
            for j in range(4):
                byte = int(b[r, 4 * p + j]) if 4 * p + j < 7 else 0  # padding bytes are 0
                want |= byte << (8 * j)
            assert int(w[r, p]) & 0xFFFFFFFF == want


def test_transform_per_row_and_128x128_blocks():
    m, n, k = 300, 260, 1000
    sfa = _pow2((m, ceil_div(k, 128)))
    sfb = _pow2((ceil_div(n, 128), ceil_div(k, 128)), seed=1)
    pa = dg.transform_sf_into_required_layout(sfa, m, k, (1, 128, 128), is_sfa=True)
    pb = dg.transform_sf_into_required_layout(sfb, n, k, (1, 128, 128))
    assert pa.shape == (m, 2) and pb.shape == (n, 2) and pa.stride() == (1, 300) and pb.stride() == (1, 260)
    bytes_b = (sfb.view(torch.int32) >> 23).repeat_interleave(128, 0)[:n]
    for r in (0, 127, 128, 259):
        for blk in range(8):
            got = (int(pb[r, blk // 4]) >> (8 * (blk % 4))) & 0xFF
            assert got == (int(bytes_b[r, blk]) if blk < 8 else 0)
    # the MN stride is padded to 16 bytes
    p2 = dg.transform_sf_into_required_layout(_pow2((3, 4)), 3, 512, (1, 1, 128), is_sfa=True)
    assert p2.stride() == (1, 4)


def test_transform_empty_mn():
    """Zero rows (an M-grouped contiguous call whose groups are all empty) pack to an empty [0, words] tensor,
    not a reshape error."""
    for recipe, k in (((1, 1, 32), 512), ((1, 128, 128), 1024)):
        cols = ceil_div(k, recipe[2])
        p = dg.transform_sf_into_required_layout(_pow2((0, cols)), 0, k, recipe, is_sfa=True)
        assert p.shape == (0, ceil_div(cols, 4)) and p.dtype == torch.int32
    assert pack_scale_bytes(torch.zeros((0, 5), dtype=torch.uint8)).shape == (0, 2)


def test_transform_grouped_and_inference():
    """pack_sf, the scale packing behind DeepGEMM's transform_sf_into_required_layout, infers gran_k from the
    scales' shape when no recipe is given (DeepGEMM's name always takes one)."""
    from deep_gemm_sm120.scale_layout import pack_sf

    sf = _pow2((3, 64, 16))
    p = pack_sf(sf, 64, 512, num_groups=3)  # 16 columns of 1x32 for K = 512
    assert p.shape == (3, 64, 4) and p.stride(1) == 1
    assert (int(p[1, 5, 0]) & 0xFF) == (int(sf[1, 5, 0].view(torch.int32)) >> 23)
    with pytest.raises(ValueError, match="ambiguous|cannot tell"):
        pack_sf(_pow2((4, 1)), 4, 32)  # 1 column: 1x128, 1x32 and 1x16 all fit
    with pytest.raises(ValueError, match="pass recipe"):
        pack_sf(torch.zeros(4, 1, dtype=torch.int32), 4, 32)
    with pytest.raises(TypeError):  # DeepGEMM's signature: the recipe is required
        dg.transform_sf_into_required_layout(sf, 64, 512, num_groups=3)


def test_scales_are_never_reinterpreted():
    with pytest.raises(ValueError, match="powers of two"):
        dg.transform_sf_into_required_layout(torch.full((4, 1), 0.3), 4, 128, (1, 1, 128), is_sfa=True)
    with pytest.raises(ValueError, match="non-negative"):
        scale_bytes(torch.tensor([-1.0, 2.0]).to(torch.float8_e4m3fn))
    if hasattr(torch, "float8_e8m0fnu"):
        e8 = torch.tensor([255, 127], dtype=torch.uint8).view(torch.float8_e8m0fnu)
        with pytest.raises(ValueError, match="NaN"):
            scale_bytes(e8)
        ok = torch.tensor([1.0, 0.25]).to(torch.float8_e8m0fnu)
        assert scale_bytes(ok).tolist() == [127, 125]
    with pytest.raises(TypeError, match="scale factors must be"):
        scale_bytes(torch.ones(3, dtype=torch.float16))


def test_nvfp4_scales_pack_their_e4m3_bytes():
    x = torch.randn(8, 64)
    _, sf, _ = quant.per_token_cast_to_fp4(x, "nvfp4")
    p = dg.transform_sf_into_required_layout(sf, 8, 64, (1, 1, 16), is_sfa=True)
    raw = sf.view(torch.uint8).to(torch.int64)
    assert int(p[3, 0]) & 0xFFFFFFFF == int(raw[3, 0] | raw[3, 1] << 8 | raw[3, 2] << 16 | raw[3, 3] << 24)


def test_check_packed_rejects_k_major_and_wrong_shapes():
    good = dg.transform_sf_into_required_layout(_pow2((64, 8)), 64, 1024, (1, 1, 128), is_sfa=True)
    assert check_packed("sfa", good, (64, 2)) == (64, 0)
    with pytest.raises(ValueError, match="MN-major"):
        check_packed("sfa", good.contiguous(), (64, 2))
    with pytest.raises(ValueError, match=r"\[MN, words\]"):
        check_packed("sfa", good, (64, 3))


def _fp8(*shape):
    return torch.zeros(*shape).to(torch.float8_e4m3fn)


def test_api_errors_are_typed():
    a, b, d = _fp8(64, 256), _fp8(128, 256), torch.empty(64, 128, dtype=torch.bfloat16)
    sfa, sfb = torch.ones(64, 2), torch.ones(1, 2)
    with pytest.raises(TypeError, match="pair"):
        dg.fp8_gemm_nt("a", (b, sfb), d)
    with pytest.raises(ValueError, match="CUDA device"):  # a bare tensor: unit scales (DeepGEMM's form)
        dg.fp8_gemm_nt(a, (b, sfb), d)
    with pytest.raises(TypeError, match="must be float8_e4m3fn or packed FP4"):
        dg.fp8_gemm_nt((a.to(torch.bfloat16), sfa), (b, sfb), d)
    with pytest.raises(NotImplementedError, match="MXFP4"):  # mixed operands take UE8M0 scales on the FP4 side
        dg.fp8_fp4_gemm_nt(
            (a, sfa), (torch.zeros(128, 128, dtype=torch.uint8), torch.ones(128, 16).to(torch.float8_e4m3fn)), d
        )
    with pytest.raises(ValueError, match="agree on K"):  # packed FP4 holds two K per byte
        dg.fp8_fp4_gemm_nt((a, sfa), (torch.zeros(128, 256, dtype=torch.uint8), torch.ones(128, 16)), d)
    with pytest.raises(ValueError, match="agree on K"):
        dg.fp8_gemm_nt((a, sfa), (_fp8(128, 128), sfb), d)
    with pytest.raises(TypeError, match="d must be"):
        dg.fp8_gemm_nt((a, sfa), (b, sfb), d.half())
    with pytest.raises(ValueError, match=r"d must be \[M, N\]"):
        dg.fp8_gemm_nt((a, sfa), (b, sfb), d[:, :64])
    with pytest.raises(TypeError, match="alpha"):
        dg.fp8_gemm_nt((a, sfa), (b, sfb), d, alpha=torch.ones(()))
    with pytest.raises(ValueError, match="CUDA device"):
        dg.fp8_gemm_nt((a, sfa), (b, sfb), d)
    fp4 = torch.zeros(64, 128, dtype=torch.uint8)
    with pytest.raises(ValueError, match="recipe"):
        dg.fp8_fp4_gemm_nt(
            (fp4, torch.zeros(64, 2, dtype=torch.int32)),
            (fp4, torch.zeros(64, 2, dtype=torch.int32)),
            torch.empty(64, 64, dtype=torch.bfloat16),
        )
    with pytest.raises(TypeError, match="UE8M0 .* UE4M3|both be UE8M0"):
        dg.fp8_fp4_gemm_nt(
            (fp4, torch.ones(64, 8)),
            (fp4, torch.ones(64, 16).to(torch.float8_e4m3fn)),
            torch.empty(64, 64, dtype=torch.bfloat16),
        )
    with pytest.raises(TypeError, match="grouped_layout must be torch.int32"):
        dg.m_grouped_fp8_gemm_nt_contiguous(
            (a, sfa), (_fp8(2, 128, 256), torch.ones(2, 1, 2)), d, torch.zeros(64, dtype=torch.int64)
        )
    with pytest.raises(TypeError, match="bfloat16"):  # outside DeepGEMM's contract for this name
        dg.m_grouped_fp8_gemm_nt_masked(
            (_fp8(2, 64, 256), torch.ones(2, 64, 2)),
            (_fp8(2, 128, 256), torch.ones(2, 1, 2)),
            torch.empty(2, 64, 128),
            torch.zeros(2, dtype=torch.int32),
            64,
        )


def test_block_scaled_specs_and_heuristics():
    from deep_gemm_sm120.core.limits import SMEM_LIMIT
    from deep_gemm_sm120.families.fp8_fp4_gemm_1d1d.kernel import specs as block_scaled_specs
    from deep_gemm_sm120.families.fp8_fp4_gemm_1d1d.plan import dense_plan

    def choose_block_scaled_plan(m, n, k, sms, kind):
        p = dense_plan(m, n, k, sms, kind)
        return p.config, p.splits

    specs = block_scaled_specs()
    # 180 GEMM instantiations (dense + M-grouped; 20 of them exact FP32 scales) and 32 batched ones for fp8_einsum
    # (16 exact FP32 scales), each with per-tile scales also in the replicated encoding (issue 44):
    # 212 + 212 - 36 = 388
    assert len({s.name for s in specs}) == len(specs) == 388
    selectors = [s for s in specs if s.encoding == "selectors"]
    replicated = [s for s in specs if s.encoding == "replicated"]
    assert len(selectors) == 212 and len(replicated) == 176
    assert {replace(s, encoding="selectors") for s in replicated} == {s for s in selectors if s.kind != "fp8_fp32"}
    assert all(s.name.endswith("_rep") for s in replicated) and not any(s.kind == "fp8_fp32" for s in replicated)
    batched = [s for s in selectors if s.gemm_type == "batched"]
    assert len(batched) == 32 and {(s.kind, s.grans) for s in batched} == {
        ("mxfp8", (128, 128)),
        ("fp8_fp32", (128, 128)),
    }
    assert all(s.smem_bytes <= SMEM_LIMIT for s in specs)
    assert {(s.kind, s.grans) for s in specs} == {
        ("mxfp8", (128, 128)),
        ("mxfp8", (32, 32)),
        ("mxfp4", (32, 32)),
        ("nvfp4", (16, 16)),
        ("e4m3_e2m1", (128, 32)),
        ("e4m3_e2m1", (32, 32)),
        ("e2m1_e4m3", (32, 128)),
        ("e2m1_e4m3", (32, 32)),
        ("fp8_fp32", (128, 128)),  # e4m3 with exact FP32 scales per 128 K (issue 40)
    }
    mixed = next(s for s in specs if s.kind == "e4m3_e2m1")
    assert mixed.row_bytes == (128, 64) and mixed.smem_bytes < mixed.config.smem_bytes  # 64-byte packed rows
    with pytest.raises(ValueError, match="1x32"):
        type(mixed)(mixed.config, "e4m3_e2m1", 128, gran_k_b=128)
    # issue 13: mixed kinds run the 128x128 tile four stages deep (96 KiB); every other kind keeps its depth
    from deep_gemm_sm120.families.fp8_fp4_gemm_1d1d.kernel import DENSE_CONFIGS, spec_for

    for kind, grans in (("e4m3_e2m1", (128, 32)), ("e2m1_e4m3", (32, 128)), ("mxfp8", (128, 128))):
        s = spec_for(DENSE_CONFIGS[0], kind, grans, "bf16", False)
        assert (s.config.block_m, s.config.block_n) == (128, 128)
        assert s.config.stages == (4 if kind != "mxfp8" else 3) and s.smem_bytes <= SMEM_LIMIT
        assert s.config.stages == 3 or (s.config.stages + 1) * s.smem_bytes // s.config.stages > SMEM_LIMIT
        assert s in specs  # the planner's spec is one that precompile builds
    assert all(
        s.config.stages == 4
        for s in specs
        if s.kind in ("e4m3_e2m1", "e2m1_e4m3") and (s.config.block_m, s.config.block_n) == (128, 128)
    )
    src = next(s for s in specs if s.kind == "nvfp4").source()
    assert "ScaleKind::kNvFp4, 16, 16" in src
    cfgs = {s.config for s in specs}
    for m, n, k in [(1, 2112, 7168), (4096, 7168, 7168), (64, 64, 64), (257, 300, 1024)]:
        cfg, splits = choose_block_scaled_plan(m, n, k, 170, "mxfp8")
        assert cfg in cfgs and splits >= 1
    assert choose_block_scaled_plan(16, 256, 16384, 170, "mxfp8")[1] > 1  # few tiles, long K: split
    assert choose_block_scaled_plan(4096, 4096, 16384, 170, "mxfp8")[1] == 1


def test_an_unknown_fp4_kind_is_a_bad_value():
    """A kind string outside the two formats is a wrong value (ValueError), not an unsupported feature."""
    with pytest.raises(ValueError, match=r"'mxfp4' or 'nvfp4', got 'fp4x'"):
        quant.per_token_cast_to_fp4(torch.randn(4, 64), "fp4x")
