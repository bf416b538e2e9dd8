"""The opt-in check of packed int32 scales (issue 44, "scales checked where they enter"): DG_SM120_CHECK_SCALES=1
or set_scale_checks(True) reads the packed scales a block-scaled GEMM takes as given and rejects the encodings no
scale may hold (UE8M0 0xFF = NaN; UE4M3 NaN and a set sign bit) with a ValueError naming the word and byte,
before anything launches. Off by default (a device sync per call). Device layer stubbed (test_call_cache_cpu)."""

from __future__ import annotations

import pytest
import torch
from test_call_cache_cpu import _fp8, _packed, _t, rig  # noqa: F401 - rig: a fixture, used by name

import deep_gemm_sm120 as dg
from deep_gemm_sm120 import checks
from deep_gemm_sm120.scale_layout import check_packed_values

R = (1, 128, 128)


@pytest.fixture()
def scale_checks_on(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    saved = checks._SCALE_CHECKS.value
    dg.set_scale_checks(True)
    yield
    checks._SCALE_CHECKS.value = saved


def _poke(sf: torch.Tensor, index: tuple, byte: int, value: int) -> torch.Tensor:
    out = sf.clone()  # keeps sf's (MN-major) strides
    word = int(out[index]) & ~(0xFF << (8 * byte))
    word |= value << (8 * byte)
    out[index] = word - (1 << 32) if word >= 1 << 31 else word
    return out


def test_packed_values():
    sf = _packed(70, 1024, R, is_sfa=True)  # [70, 2] MN-major words of 1.0 scales (0x7F), padding bytes 0
    check_packed_values("sfa", sf, "ue8m0")
    bad = _poke(sf, (69, 1), 3, 0xFF)
    with pytest.raises(ValueError, match=r"sfa \(packed int32, UE8M0\) holds NaN \(0xFF\): byte 3 of word \(69, 1\)"):
        check_packed_values("sfa", bad, "ue8m0")
    check_packed_values("sfb", _poke(sf, (0, 0), 1, 0xFE), "ue8m0")  # 2^127: a legal UE8M0 scale
    e4 = torch.full((64, 4), 0.5).to(torch.float8_e4m3fn)
    nv = dg.transform_sf_into_required_layout(e4, 64, 64, (1, 1, 16), is_sfa=True)
    check_packed_values("sfa", nv, "ue4m3")
    with pytest.raises(ValueError, match="a negative scale"):
        check_packed_values("sfa", _poke(nv, (5, 0), 2, 0x80 | 0x30), "ue4m3")
    with pytest.raises(ValueError, match="holds NaN"):
        check_packed_values("sfa", _poke(nv, (5, 0), 0, 0x7F), "ue4m3")
    check_packed_values("sfa", torch.zeros(0, 2, dtype=torch.int32), "ue8m0")


def test_the_switch(monkeypatch):
    saved = checks._SCALE_CHECKS.value
    try:
        for env, want in ((None, False), ("1", True), ("on", True), ("0", False), ("", False)):
            checks._SCALE_CHECKS.value = None
            if env is None:
                monkeypatch.delenv("DG_SM120_CHECK_SCALES", raising=False)
            else:
                monkeypatch.setenv("DG_SM120_CHECK_SCALES", env)
            assert dg.get_scale_checks() is want, env
        with pytest.raises(TypeError, match="set_scale_checks takes a bool"):
            dg.set_scale_checks(1)
    finally:
        checks._SCALE_CHECKS.value = saved


def test_dense_call_checks_given_packed_scales(rig, scale_checks_on):  # noqa: F811 - the imported rig fixture
    m, n, k = 64, 128, 256
    a, b, d = _fp8(m, k), _fp8(n, k), _t(m, n)
    sfa, sfb = _packed(m, k, R, is_sfa=True), _packed(n, k, R)
    ok, _ = rig.record(dg.fp8_gemm_nt, ((a, sfa), (b, sfb), d), {"recipe": R}, {})
    assert ok[0] == "ok"
    bad = _poke(sfb, (17, 0), 1, 0xFF)
    for _ in range(2):  # warm (the signature is cached) and again: checked on every call, nothing launched
        out, _ = rig.record(dg.fp8_gemm_nt, ((a, sfa), (b, bad), d), {"recipe": R}, {})
        assert out[:2] == ("raise", ValueError) and "sfb (packed int32, UE8M0) holds NaN" in out[2], out
        assert not rig.launches
    dg.set_scale_checks(False)  # off: the kernel gets the bytes as they are
    out, _ = rig.record(dg.fp8_gemm_nt, ((a, sfa), (b, bad), d), {"recipe": R}, {})
    assert out[0] == "ok"


def test_grouped_and_nvfp4_calls(rig, scale_checks_on):  # noqa: F811 - the imported rig fixture
    g, m, n, k = 2, 64, 128, 128
    rec = (1, 1, 16)
    e4 = torch.full((g, m, k // 16), 0.5).to(torch.float8_e4m3fn)
    sfa = dg.transform_sf_into_required_layout(e4, m, k, rec, num_groups=g, is_sfa=True)
    sfb = dg.transform_sf_into_required_layout(e4[:, :1].expand(g, n, k // 16), n, k, rec, num_groups=g)
    a = (_t(g, m, k // 2, dtype=torch.uint8), sfa)
    args = lambda sb: (a, (_t(g, n, k // 2, dtype=torch.uint8), sb), _t(g, m, n), torch.zeros(g, dtype=torch.int32), 64)
    ok, _ = rig.record(dg.m_grouped_fp8_fp4_gemm_nt_masked, args(sfb), {"recipe": rec}, {})
    assert ok[0] == "ok", ok
    out, _ = rig.record(dg.m_grouped_fp8_fp4_gemm_nt_masked, args(_poke(sfb, (1, 3, 0), 0, 0xB0)), {"recipe": rec}, {})
    assert out[:2] == ("raise", ValueError) and "UE4M3) holds a negative scale" in out[2], out


def test_unpacked_scales_are_not_read_again(rig, scale_checks_on, monkeypatch):  # noqa: F811 - the rig fixture
    """Unpacked scales are checked when packed (and the exact path's float32 ones are values, not encodings)."""
    seen = []
    monkeypatch.setattr("deep_gemm_sm120.scale_layout.check_packed_values", lambda *a: seen.append(a[0]))
    m, n, k = 64, 128, 256
    a, b, d = _fp8(m, k), _fp8(n, k), _t(m, n)
    out, _ = rig.record(dg.fp8_gemm_nt, ((a, torch.ones(m, 2)), (b, torch.ones(1, 2)), d), {}, {})
    assert out[0] == "ok" and seen == []
    out, _ = rig.record(
        dg.fp8_gemm_nt, ((a, torch.ones(m, 2)), (b, torch.ones(1, 2)), d), {"disable_ue8m0_cast": True}, {}
    )
    assert out[0] == "ok" and seen == []
    out, _ = rig.record(
        dg.fp8_gemm_nt, ((a, torch.ones(m, 2)), (b, _packed(n, k, R)), d), {"recipe": R}, {}
    )  # fmt: skip
    assert out[0] == "ok" and seen == ["sfb"]
