"""Exact FP32 block scales (issue 40) on a CPU: which kernel a call reaches, and that the scales the kernel is
handed are the caller's values at the addresses the kernel reads (device layer stubbed as in
test_call_cache_cpu.py: a fake loader and a launcher that records every parameter).

The kernel (`fp8_fp32`, ScaleKind::kFp8Fp32) reads float `sf + g * group_stride + kb * block_stride + row`;
here that read is replayed on the recorded tensors and compared with the logical scale of (row, kb)."""

from __future__ import annotations

import pytest
import torch
from test_call_cache_cpu import rig  # noqa: F401 - the rig fixture, used by name

import deep_gemm_sm120 as dg
from deep_gemm_sm120.core.arith import ceil_div
from deep_gemm_sm120.families.fp8_fp4_gemm_1d1d import api as fp8_api
from deep_gemm_sm120.scale_layout import fp32_direct, fp32_mn_major

FP8 = torch.float8_e4m3fn


def _fp8(*shape):
    return torch.zeros(*shape, dtype=FP8)


def _scales(*shape, seed=0, pow2=False):
    g = torch.Generator().manual_seed(seed)
    if pow2:
        return torch.pow(2.0, torch.randint(-8, 8, shape, generator=g).float())
    return torch.rand(*shape, generator=g) * 3 + 0.01  # almost never a power of two


@pytest.fixture()
def kept(monkeypatch):
    """Every scale tensor the calls convert, kept alive (so recorded addresses stay theirs)."""
    out: list[torch.Tensor] = []

    def keep(sf, mn, gran_mn):
        t = fp32_mn_major(sf, mn, gran_mn)
        out.append(t)
        return t

    monkeypatch.setattr(fp8_api, "fp32_mn_major", keep)
    return out


def _args(launch) -> dict:
    return dict(launch.args)


def _read(tensors: list[torch.Tensor], ptr: int, offset: int) -> float:
    """The float the kernel reads at element `offset` from address `ptr` (one of `tensors`' storages)."""
    for t in tensors:
        base = t.untyped_storage().data_ptr()
        size = t.untyped_storage().nbytes()
        if base <= ptr < base + size:
            flat = torch.tensor([], dtype=torch.float32).set_(t.untyped_storage())
            return float(flat[(ptr - base) // 4 + offset])
    raise AssertionError(f"address {ptr:#x} is none of the recorded scale tensors")


def _check_reads(tensors, ptr, block_stride, group_stride, want: torch.Tensor) -> None:
    """want: [G?, rows, K blocks] logical per-row scales; every (g, row, kb) read as the kernel does."""
    w = want if want.dim() == 3 else want.unsqueeze(0)
    for g in range(w.shape[0]):
        for r in range(w.shape[1]):
            for kb in range(w.shape[2]):
                got = _read(tensors, ptr, g * group_stride + kb * block_stride + r)
                assert got == float(w[g, r, kb]), (g, r, kb, got, float(w[g, r, kb]))


def test_layout_helpers():
    sf = _scales(5, 3)
    t = fp32_mn_major(sf, 5, 1)
    assert t.shape == (5, 3) and t.stride() == (1, 8) and torch.equal(t, sf)  # 5 rows padded to 8 floats
    assert fp32_direct(t, (5, 3)) == (8, 0)
    assert fp32_direct(sf, (5, 3)) is None  # K-major: converted per call
    assert fp32_direct(sf.half(), (5, 3)) is None
    blocks = _scales(2, 3, seed=1)  # 128-row blocks of a 200-row weight
    e = fp32_mn_major(blocks, 200, 128)
    assert e.shape == (200, 3) and torch.equal(e, blocks.repeat_interleave(128, 0)[:200])
    grouped = fp32_mn_major(_scales(3, 6, 2), 6, 1)
    assert fp32_direct(grouped, (3, 6, 2)) == (8, 16)
    assert fp32_direct(torch.zeros(0, 2), (0, 2)) is not None  # no rows: nothing read, any layout


def test_transform_keeps_fp32_when_asked():
    sf = _scales(4, 2)
    t = dg.transform_sf_into_required_layout(sf, 4, 256, (1, 128), is_sfa=True, disable_ue8m0_cast=True)
    assert t.dtype == torch.float32 and torch.equal(t, sf) and t.stride(0) == 1
    w = _scales(2, 2, seed=3)
    tw = dg.transform_sf_into_required_layout(w, 256, 256, (128, 128), disable_ue8m0_cast=True)
    assert torch.equal(tw, w.repeat_interleave(128, 0))
    # FP32 scales per 32 K have no exact kernel: they pack as UE8M0 words, powers of two required, flag or not
    packed = dg.transform_sf_into_required_layout(_scales(4, 8, pow2=True), 4, 256, (1, 1, 32), disable_ue8m0_cast=True)
    assert packed.dtype == torch.int32
    with pytest.raises(ValueError, match="powers of two"):
        dg.transform_sf_into_required_layout(_scales(4, 8), 4, 256, (1, 1, 32), disable_ue8m0_cast=True)


@pytest.mark.parametrize("flag", [False, True])
def test_dense_fp32_scales_reach_the_exact_kernel(rig, kept, flag):  # noqa: F811 - the imported rig fixture, by name
    m, n, k = 70, 200, 384  # N spans two 128-row weight blocks, the second partial
    a, b, d = _fp8(m, k), _fp8(n, k), torch.zeros(m, n, dtype=torch.bfloat16)
    sfa, sfb = _scales(m, 3), _scales(2, 3, seed=1)  # DeepSeek's recipe: 1x128 and 128x128, not powers of two
    outcome, _ = rig.record(dg.fp8_gemm_nt, ((a, sfa), (b, sfb), d), {"disable_ue8m0_cast": flag}, {"d": d})
    assert outcome[0] == "ok", outcome
    (ln,) = outcome[1]
    assert "fp8_fp32_g128" in ln.kernel
    p = _args(rig.launches[0])
    _check_reads(kept, p["sfa"], p["sfa_pack_stride"], 0, sfa)
    _check_reads(kept, p["sfb"], p["sfb_pack_stride"], 0, sfb.repeat_interleave(128, 0)[:n])


def test_power_of_two_scales_keep_the_ue8m0_kernel_unless_told(rig, kept):  # noqa: F811 - the imported rig fixture, by name
    m, n, k = 64, 128, 256
    a, b, d = _fp8(m, k), _fp8(n, k), torch.zeros(m, n, dtype=torch.bfloat16)
    sfa, sfb = _scales(m, 2, pow2=True), _scales(1, 2, seed=1, pow2=True)
    ok, _ = rig.record(dg.fp8_gemm_nt, ((a, sfa), (b, sfb), d), {}, {"d": d})
    assert ok[0] == "ok" and "mxfp8_g128" in ok[1][0].kernel
    told, _ = rig.record(dg.fp8_gemm_nt, ((a, sfa), (b, sfb), d), {"disable_ue8m0_cast": True}, {"d": d})
    assert told[0] == "ok" and "fp8_fp32_g128" in told[1][0].kernel  # no value is read on that path


def test_mn_major_scales_are_used_in_place(rig, kept):  # noqa: F811 - the imported rig fixture, by name
    """vLLM's activation scales (column-major, TMA-aligned) and pre-transformed weights: no copy."""
    m, n, k = 33, 256, 512
    a, b, d = _fp8(m, k), _fp8(n, k), torch.zeros(m, n, dtype=torch.float32)
    sfa = fp32_mn_major(_scales(m, 4), m, 1)
    sfb = dg.transform_sf_into_required_layout(_scales(2, 4, seed=1), n, k, (128, 128), disable_ue8m0_cast=True)
    names = {"sfa": sfa, "sfb": sfb, "d": d}
    outcome, _ = rig.record(dg.fp8_gemm_nt, ((a, sfa), (b, sfb), d), {"disable_ue8m0_cast": True}, names)
    assert outcome[0] == "ok" and not kept, outcome
    p = dict(outcome[1][0].args)
    assert p["sfa"] == "@sfa" and p["sfb"] == "@sfb"
    assert p["sfa_pack_stride"] == sfa.stride(1) and p["sfb_pack_stride"] == sfb.stride(1)


def test_grouped_fp32_scales(rig, kept):  # noqa: F811 - the imported rig fixture, by name
    g, m, n, k = 3, 64, 128, 256
    masked_m = torch.tensor([64, 0, 17], dtype=torch.int32)
    a, b, d = _fp8(g, m, k), _fp8(g, n, k), torch.zeros(g, m, n, dtype=torch.bfloat16)
    sfa, sfb = _scales(g, m, 2), _scales(g, 1, 2, seed=1)
    out, _ = rig.record(dg.m_grouped_fp8_gemm_nt_masked, ((a, sfa), (b, sfb), d, masked_m, 64), {}, {"d": d})
    assert out[0] == "ok" and "fp8_fp32_g128" in out[1][0].kernel and out[1][0].kernel.endswith("m_masked")
    p = _args(rig.launches[0])
    _check_reads(kept, p["sfa"], p["sfa_pack_stride"], p["sfa_group_stride"], sfa)
    _check_reads(kept, p["sfb"], p["sfb_pack_stride"], p["sfb_group_stride"], sfb.repeat_interleave(128, 1)[:, :n])

    rows = 256
    layout = torch.tensor([0] * 128 + [2] * 100 + [-1] * 28, dtype=torch.int32)
    a2, d2 = _fp8(rows, k), torch.zeros(rows, n, dtype=torch.bfloat16)
    sfa2 = _scales(rows, 2, seed=4)
    out, _ = rig.record(
        dg.m_grouped_fp8_gemm_nt_contiguous, ((a2, sfa2), (b, sfb), d2, layout), {"disable_ue8m0_cast": True}, {}
    )
    assert out[0] == "ok" and "fp8_fp32_g128" in out[1][0].kernel and out[1][0].kernel.endswith("m_contiguous")
    p = _args(rig.launches[0])
    _check_reads(kept, p["sfa"], p["sfa_pack_stride"], 0, sfa2)


def test_what_the_exact_path_cannot_take(rig):  # noqa: F811 - the imported rig fixture, by name
    m, n, k = 64, 128, 256
    a, b, d = _fp8(m, k), _fp8(n, k), torch.zeros(m, n, dtype=torch.bfloat16)
    sfb_packed = dg.transform_sf_into_required_layout(torch.ones(1, 2), n, k, (1, 128, 128))
    # a non-power-of-two float32 sfa next to packed UE8M0 sfb: no FP32 scales for B, so no exact kernel
    out, _ = rig.record(dg.fp8_gemm_nt, ((a, _scales(m, 2)), (b, sfb_packed), d), {"recipe": (1, 128, 128)}, {})
    assert out[:2] == ("raise", ValueError) and "powers of two" in out[2], out
    # FP32 scales cover 128 K on the exact path: 1x32 (MXFP8) float32 scales with the flag have no kernel
    out, _ = rig.record(
        dg.fp8_gemm_nt, ((a, _scales(m, ceil_div(k, 32))), (b, _scales(n, ceil_div(k, 32))), d),
        {"disable_ue8m0_cast": True}, {},
    )  # fmt: skip
    assert out[0] == "raise" and out[1] in (ValueError, NotImplementedError) and "128" in out[2], out


def test_the_exact_flag_is_part_of_the_signature(rig):  # noqa: F811 - the imported rig fixture, by name
    """A cached UE8M0 call and the same tensors with disable_ue8m0_cast=True are two entries, two kernels."""
    m, n, k = 64, 128, 256
    a, b, d = _fp8(m, k), _fp8(n, k), torch.zeros(m, n, dtype=torch.bfloat16)
    sfa, sfb = _scales(m, 2, pow2=True), _scales(1, 2, seed=1, pow2=True)
    first, _ = rig.record(dg.fp8_gemm_nt, ((a, sfa), (b, sfb), d), {}, {})
    before = rig.entries()
    second, prepares = rig.record(dg.fp8_gemm_nt, ((a, sfa), (b, sfb), d), {"disable_ue8m0_cast": True}, {})
    assert prepares == 1 and rig.entries() == before + 1
    assert first[1][0].kernel != second[1][0].kernel


def test_precompile_plans_know_the_exact_kernel():
    from deep_gemm_sm120.families.fp8_fp4_gemm_1d1d.plan import dense_specs, fp8_einsum_specs, grouped_specs

    dense = dense_specs(64, 2112, 7168, 132, kind="fp8_fp32")
    assert "fp8_fp32_g128" in dense[0].name
    (masked,) = grouped_specs("m_masked")(132, expected_m=64, kind="fp8_fp32")
    assert "fp8_fp32_g128" in masked.name and masked.name.endswith("m_masked")
    (ein,) = fp8_einsum_specs("bhr,hdr->bhd", 132, b=4, h=8, r=512, d=128, kind="fp8_fp32")
    assert "fp8_fp32_g128" in ein.name and ein.name.endswith("batched")
    with pytest.raises(ValueError, match="fp8_fp32"):
        fp8_einsum_specs("bhr,hdr->bhd", 132, kind="mxfp4")


def test_is_supported_knows_the_exact_kernel(rig):  # noqa: F811 - the imported rig fixture, by name
    """is_supported answers for the scales too (sf_dtype, gran_k, disable_ue8m0_cast), as the API decides."""
    cap = {"capability": (12, 0)}
    dense = dict(m=64, n=128, k=256, ab_dtype=FP8, **cap)
    exact = dict(sf_dtype=torch.float32, disable_ue8m0_cast=True)
    assert dg.is_supported("fp8_gemm_nt", **dense, gran_k=128, **exact)
    assert dg.is_supported("fp8_gemm_nt", **dense, gran_k=32, **exact)  # UE8M0 MXFP8 1x32 (powers of two)
    for bad, kind in ((dict(gran_k=64, **exact), "NotImplementedError"), (dict(sf_dtype=torch.float16), "TypeError"),
                      (dict(gran_k=0), "ValueError"), (dict(disable_ue8m0_cast=1), "TypeError"),
                      (dict(sf_dtype=FP8), "TypeError")):  # fmt: skip
        assert dg.why_unsupported("fp8_gemm_nt", **dense, **bad).startswith(kind), bad
    fp4 = dict(m=64, n=128, k=256, ab_dtype=torch.uint8, **cap)
    assert dg.is_supported("fp4_gemm_nt", **fp4, gran_k=16, sf_dtype=FP8)  # NVFP4
    assert dg.why_unsupported("fp4_gemm_nt", **fp4, gran_k=128).startswith("NotImplementedError")
    for op, shape in (
        ("m_grouped_fp8_gemm_nt_masked", dict(num_groups=2, m=64, n=128, k=256)),
        ("m_grouped_fp8_gemm_nt_contiguous", dict(num_groups=2, m=256, n=128, k=256)),
    ):
        assert dg.is_supported(op, **shape, ab_dtype=FP8, gran_k=128, **exact, **cap)
        assert not dg.is_supported(op, **shape, ab_dtype=FP8, gran_k=64, **exact, **cap)
    # the API agrees: 1x32 FP32 scales with the flag take the UE8M0 kernel (powers of two), and e4m3 operands
    # with UE4M3 scales are a TypeError (they used to be read as UE8M0 exponents)
    a, b, d = _fp8(64, 256), _fp8(128, 256), torch.zeros(64, 128, dtype=torch.bfloat16)
    sf32 = (_scales(64, 8, pow2=True), _scales(128, 8, seed=1, pow2=True))
    out, _ = rig.record(dg.fp8_gemm_nt, ((a, sf32[0]), (b, sf32[1]), d),
                        {"recipe": (1, 1, 32), "disable_ue8m0_cast": True}, {})  # fmt: skip
    assert out[0] == "ok" and "mxfp8_g32" in out[1][0].kernel, out
    ue4m3 = torch.ones(64, 2).to(FP8)
    out, _ = rig.record(dg.fp8_gemm_nt, ((a, ue4m3), (b, _scales(1, 2, pow2=True)), d), {}, {})
    assert out[:2] == ("raise", TypeError) and "UE4M3" in out[2], out


def test_fp8_einsum_routes_fp32_scales_to_the_exact_kernel(rig, monkeypatch):  # noqa: F811 - the imported rig fixture
    """fp8_einsum has no disable_ue8m0_cast: float32 scales are read; non-powers of two on both sides take the
    batched exact kernel (its scales float32 in the kernel's layout), powers of two keep the UE8M0 one, and a
    non-power of two next to packed UE8M0 words is a ValueError that names the exact path."""
    from deep_gemm_sm120.families.fp8_fp4_gemm_1d1d import einsum as fp8_einsum_mod

    monkeypatch.setattr(fp8_einsum_mod, "device_of", lambda **t: 0)
    bs, h, r, dd = 5, 3, 384, 200
    x, y, z = _fp8(bs, h, r), _fp8(h, dd, r), torch.zeros(bs, h, dd)
    sx, sy = _scales(bs, h, 3), _scales(h, 2, 3, seed=1)
    out, _ = rig.record(dg.fp8_einsum, ("bhr,hdr->bhd", (x, sx), (y, sy), z), {}, {"z": z})
    assert out[0] == "ok" and len(out[1]) == 1 and "fp8_fp32_g128" in out[1][0].kernel, out
    assert "batched" in out[1][0].kernel
    sx2, sy2 = _scales(bs, h, 3, pow2=True), _scales(h, 2, 3, seed=1, pow2=True)
    out, _ = rig.record(dg.fp8_einsum, ("bhr,hdr->bhd", (x, sx2), (y, sy2), z), {}, {"z": z})
    assert out[0] == "ok" and "mxfp8_g128" in out[1][0].kernel, out
    sy_packed = dg.transform_sf_into_required_layout(sy2, dd, r, (1, 128, 128), num_groups=h)
    out, _ = rig.record(dg.fp8_einsum, ("bhr,hdr->bhd", (x, sx), (y, sy_packed), z), {}, {})
    assert out[:2] == ("raise", ValueError) and "powers of two" in out[2] and "exact" in out[2], out
