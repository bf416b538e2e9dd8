"""Red-team probes of exact FP32 block scales (issue 40) on a CPU, with the device layer stubbed as in
test_call_cache_cpu.py (the `rig` fixture) and the kernel's float reads replayed as in test_fp32_scales_cpu.py
(`sf + g * group_stride + kb * block_stride + row`).

Tests named test_regression_* failed before their fix (each comment says what went wrong and what is right now);
tests named test_probe_* passed from the start and are kept for coverage."""

from __future__ import annotations

import pytest
import torch
from test_call_cache_cpu import rig  # noqa: F401 - the rig fixture, used by name
from test_fp32_scales_cpu import FP8, _check_reads, _fp8, _scales, kept  # noqa: F401 - kept: a fixture, by name

import deep_gemm_sm120 as dg
from deep_gemm_sm120.core.arith import ceil_div
from deep_gemm_sm120.families.fp8_fp4_gemm_1d1d import api as fp8_api
from deep_gemm_sm120.scale_layout import fp32_direct, fp32_mn_major


def _p(rig):  # noqa: F811 - the imported rig fixture, by name
    """The last call's GEMM launch: parameters and kernel name (a split-K reduce launch may follow it)."""
    (ln,) = [x for x in rig.launches if "fp8_fp4_gemm" in x.kernel]
    rig.launches.clear()
    return dict(ln.args), ln.kernel


# ------------------------------------------------------------------ scale layouts the dense exact kernel reads
# (name, builder(m_or_n, kb, seed) -> sf view of logical shape [rows, kb])
def _warm_equals_cold(rig, call):  # noqa: F811 - the imported rig fixture, passed in
    """call() cold, warm (a hit: no new cache entry) and cold again give one outcome; returns it."""
    from deep_gemm_sm120 import launch

    launch.forget_calls()
    cold = call()
    entries = rig.entries()
    warm = call()
    assert rig.entries() == entries
    launch.forget_calls()
    assert cold == warm == call(), (cold, warm)
    return cold


def _k_major(r, kb, s):
    return _scales(r, kb, seed=s)


def _mn_major_view(r, kb, s):  # vLLM's column-major activation scales, a slice of a wider buffer
    return _scales(kb, r + 5, seed=s)[:, :r].t()


def _row_strided(r, kb, s):  # every other row of a K-major buffer
    return _scales(2 * r, kb, seed=s)[::2]


def _k_sliced(r, kb, s):  # a K-block window of a wider K-major buffer (storage offset)
    return _scales(r, kb + 3, seed=s)[:, 1 : 1 + kb]


def _mn_major_offset(r, kb, s):  # MN-major with a storage offset and a K-strided window
    return _scales(2 * kb + 1, r + 3, seed=s)[1::2, 3:].t()


def _rows_expanded(r, kb, s):  # one scale per K block broadcast over rows (stride 0 along rows)
    return _scales(1, kb, seed=s).expand(r, kb)


def _k_expanded(r, kb, s):  # one scale per row broadcast over K blocks (stride 0 along K)
    return _scales(r, 1, seed=s).expand(r, kb)


_LAYOUTS = [_k_major, _mn_major_view, _row_strided, _k_sliced, _mn_major_offset, _rows_expanded, _k_expanded]


@pytest.mark.parametrize("mnk", [(70, 200, 384), (33, 48, 208), (1, 16, 128), (5, 300, 1008), (129, 136, 16)])
@pytest.mark.parametrize("layout", _LAYOUTS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("flag", [False, True])
def test_probe_dense_scale_views_are_read_right(rig, kept, mnk, layout, flag):  # noqa: F811 - the imported rig fixture, by name
    """PASSING PROBE: transposed / sliced / offset / broadcast FP32 scales, M and N not multiples of 4, K not a
    multiple of 128, one K block: every (row, kb) the kernel reads is the caller's scale."""
    m, n, k = mnk
    kb = ceil_div(k, 128)
    sfa, sfb = layout(m, kb, 1), layout(n, kb, 2)
    a, b, d = _fp8(m, k), _fp8(n, k), torch.zeros(m, n, dtype=torch.bfloat16)
    # a broadcast of a non-power-of-two with flag=False: values are still non-powers of two -> exact
    recipe = (1, 1, 128) if k <= 32 else None  # K <= 32: 1x32 and 1x128 shapes coincide (UE8M0 path asks)
    dg.fp8_gemm_nt((a, sfa), (b, sfb), d, recipe=recipe, disable_ue8m0_cast=flag)
    p, kernel = _p(rig)
    assert "fp8_fp32_g128" in kernel
    pool = [*kept, sfa, sfb]
    _check_reads(pool, p["sfa"], p["sfa_pack_stride"], 0, sfa)
    _check_reads(pool, p["sfb"], p["sfb_pack_stride"], 0, sfb)


@pytest.mark.parametrize("n,k", [(300, 208), (128, 144), (129, 128), (16, 16), (256, 1024)])
def test_probe_dense_128x128_weight_blocks(rig, kept, n, k):  # noqa: F811 - the imported rig fixture, by name
    """PASSING PROBE: 128x128 weight blocks with a partial last block along N and along K, plus a transposed
    (MN-major) block tensor; each row reads its block's scale."""
    m = 40
    kb = ceil_div(k, 128)
    a, d = _fp8(m, k), torch.zeros(m, n, dtype=torch.float32)
    for blocks in (_scales(ceil_div(n, 128), kb, seed=3), _scales(kb, ceil_div(n, 128), seed=3).t()):
        kept.clear()
        dg.fp8_gemm_nt((a, _scales(m, kb)), (_fp8(n, k), blocks), d, recipe=(1, 128, 128))
        p, kernel = _p(rig)
        assert "fp8_fp32_g128" in kernel
        want = blocks.repeat_interleave(128, 0)[:n] if blocks.shape[0] != n else blocks
        _check_reads([*kept, blocks], p["sfb"], p["sfb_pack_stride"], 0, want)


# ------------------------------------------------------------------ grouped scale layouts
def _g_k_major(g, r, kb, s):
    return _scales(g, r, kb, seed=s)


def _g_mn_major(g, r, kb, s):  # [G, kb, rows] buffer seen as [G, rows, kb]: in place
    return _scales(g, kb, r + 3, seed=s)[:, :, :r].transpose(1, 2)


def _g_group_sliced(g, r, kb, s):  # every other group of an MN-major buffer (group stride doubled)
    return _scales(2 * g, kb, r, seed=s)[::2].transpose(1, 2)


def _g_interleaved(g, r, kb, s):  # [kb][G][rows] storage: stride 1 along rows, groups inside K blocks
    return _scales(kb, g, r, seed=s).permute(1, 2, 0)


def _g_groups_expanded(g, r, kb, s):  # one set of scales broadcast over groups (group stride 0)
    return _scales(1, kb, r, seed=s).transpose(1, 2).expand(g, r, kb)


def _g_transform(g, r, kb, s):  # transform_sf_into_required_layout(..., disable_ue8m0_cast=True)
    return dg.transform_sf_into_required_layout(
        _scales(g, r, kb, seed=s), r, 128 * kb, (1, 1, 128), num_groups=g, disable_ue8m0_cast=True
    )


_G_LAYOUTS = [_g_k_major, _g_mn_major, _g_group_sliced, _g_interleaved, _g_groups_expanded, _g_transform]


@pytest.mark.parametrize("gmnk", [(3, 64, 128, 256), (2, 33, 200, 384), (4, 1, 16, 128), (1, 70, 136, 640)])
@pytest.mark.parametrize("layout", _G_LAYOUTS, ids=lambda f: f.__name__)
def test_probe_masked_scale_views_are_read_right(rig, kept, gmnk, layout):  # noqa: F811 - the imported rig fixture, by name
    """PASSING PROBE: masked FP32 scales of every layout above (group strides: doubled, 0, interleaved with
    K blocks), one K block, M and N not multiples of 4; read per (group, row, kb)."""
    g, m, n, k = gmnk
    kb = ceil_div(k, 128)
    sfa, sfb = layout(g, m, kb, 1), layout(g, n, kb, 2)
    a, b, d = _fp8(g, m, k), _fp8(g, n, k), torch.zeros(g, m, n, dtype=torch.bfloat16)
    masked_m = torch.full((g,), m, dtype=torch.int32)
    dg.m_grouped_fp8_gemm_nt_masked((a, sfa), (b, sfb), d, masked_m, m)
    p, kernel = _p(rig)
    assert "fp8_fp32_g128" in kernel and kernel.endswith("m_masked")
    pool = [*kept, sfa, sfb]
    _check_reads(pool, p["sfa"], p["sfa_pack_stride"], p["sfa_group_stride"], sfa)
    _check_reads(pool, p["sfb"], p["sfb_pack_stride"], p["sfb_group_stride"], sfb)


@pytest.mark.parametrize("layout", _G_LAYOUTS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("blocks", [False, True])
def test_probe_contiguous_scale_views_are_read_right(rig, kept, layout, blocks):  # noqa: F811 - the imported rig fixture, by name
    """PASSING PROBE: contiguous layout, sfb per row in every grouped layout or as 128x128 blocks with a
    partial last block (N = 200, K = 320); sfa per row as an MN-major view."""
    g, n, k, rows = 3, 200, 320, 384
    kb = ceil_div(k, 128)
    sfa = _mn_major_view(rows, kb, 5)
    sfb = _scales(g, ceil_div(n, 128), kb, seed=6) if blocks else layout(g, n, kb, 6)
    layout_t = torch.tensor([0] * 128 + [2] * 128 + [1] * 100 + [-1] * 28, dtype=torch.int32)
    a, b, d = _fp8(rows, k), _fp8(g, n, k), torch.zeros(rows, n, dtype=torch.bfloat16)
    dg.m_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, layout_t)
    p, kernel = _p(rig)
    assert "fp8_fp32_g128" in kernel and kernel.endswith("m_contiguous")
    pool = [*kept, sfa, sfb]
    _check_reads(pool, p["sfa"], p["sfa_pack_stride"], 0, sfa)
    want = sfb.repeat_interleave(128, 1)[:, :n] if blocks else sfb
    _check_reads(pool, p["sfb"], p["sfb_pack_stride"], p["sfb_group_stride"], want)


# ------------------------------------------------------------------ routing and errors
def _dense_1x32(m=64, n=128, k=256, seed=0):
    a, b, d = _fp8(m, k), _fp8(n, k), torch.zeros(m, n, dtype=torch.bfloat16)
    return a, _scales(m, k // 32, seed=seed), b, _scales(n, k // 32, seed=seed + 1), d


def test_regression_1x32_recipe_non_power_of_two_gets_not_implemented(rig):  # noqa: F811 - the imported rig fixture, by name
    # Was: MXFP8 (recipe 1x32) float32 scales that are not powers of two, no flag, retry the exact kernel and
    # raise NotImplementedError "the recipe asks for 32"; now: _exact_capable is false for gran_k != 128, so
    # the call raises _inexact's ValueError ("not powers of two ... ceil_to_ue8m0") (fix: api._exact_capable).
    a, sfa, b, sfb, d = _dense_1x32()
    out, _ = rig.record(dg.fp8_gemm_nt, ((a, sfa), (b, sfb), d), {"recipe": (1, 1, 32)}, {})
    assert out[:2] == ("raise", ValueError) and "powers of two" in out[2], out


def test_regression_1x32_non_power_of_two_error_names_the_shape_not_the_values(rig):  # noqa: F811 - the imported rig fixture, by name
    # Was: 1x32 float32 scales that are not powers of two (no flag, no recipe) fail inside the exact retry with
    # "sfa with 8 columns fits no granularity" (the scales' shape is legal for the call made); now: the
    # powers-of-two ValueError of the UE8M0 path (fix: api._exact_capable should require 1x128 scale shapes).
    a, sfa, b, sfb, d = _dense_1x32()
    out, _ = rig.record(dg.fp8_gemm_nt, ((a, sfa), (b, sfb), d), {}, {})
    assert out[:2] == ("raise", ValueError) and "powers of two" in out[2], out


@pytest.mark.parametrize("entry", ["masked", "contiguous"])
def test_regression_grouped_1x32_recipe_non_power_of_two(rig, entry):  # noqa: F811 - the imported rig fixture, by name
    # Was: as the dense case, M-grouped MXFP8 (1x32) non-power-of-two float32 scales end in the exact retry's
    # NotImplementedError; now: _inexact's ValueError naming powers of two (fix: api._exact_capable).
    g, m, n, k = 2, 256, 128, 256
    sfb = _scales(g, n, k // 32, seed=1)
    if entry == "masked":
        args = (
            (_fp8(g, m, k), _scales(g, m, k // 32)),
            (_fp8(g, n, k), sfb),
            torch.zeros(g, m, n, dtype=torch.bfloat16),
            torch.full((g,), m, dtype=torch.int32),
            m,
        )
        fn = dg.m_grouped_fp8_gemm_nt_masked
    else:
        layout = torch.tensor([0] * 128 + [1] * 128, dtype=torch.int32)
        args = (
            (_fp8(m, k), _scales(m, k // 32)),
            (_fp8(g, n, k), sfb),
            torch.zeros(m, n, dtype=torch.bfloat16),
            layout,
        )
        fn = dg.m_grouped_fp8_gemm_nt_contiguous
    out, _ = rig.record(fn, args, {"recipe": (1, 1, 32)}, {})
    assert out[:2] == ("raise", ValueError) and "powers of two" in out[2], out


@pytest.mark.parametrize("entry", ["masked", "contiguous"])
def test_regression_single_group_scale_stride_overflows_the_parameter(rig, entry):  # noqa: F811 - the imported rig fixture, by name
    # Was: a [1, N, kb] float32 sfb whose (unused) group stride is >= 2**32 is taken in place and its group
    # stride packed into a uint32: struct.error escapes; now: one group's stride is never read (report 0, as
    # for one K block), so the call launches (fix: scale_layout.fp32_direct, and check_packed alike).
    n, k = 128, 256
    base = _scales(2, n, seed=2).t()  # [n, kb] MN-major
    sfb = base.as_strided((1, n, 2), (2**33, 1, n))
    if entry == "masked":
        args = (
            (_fp8(1, 64, k), _scales(1, 64, 2)),
            (_fp8(1, n, k), sfb),
            torch.zeros(1, 64, n, dtype=torch.bfloat16),
            torch.full((1,), 64, dtype=torch.int32),
            64,
        )
        fn = dg.m_grouped_fp8_gemm_nt_masked
    else:
        args = (
            (_fp8(128, k), _scales(128, 2)),
            (_fp8(1, n, k), sfb),
            torch.zeros(128, n, dtype=torch.bfloat16),
            torch.zeros(128, dtype=torch.int32),
        )
        fn = dg.m_grouped_fp8_gemm_nt_contiguous
    out, _ = rig.record(fn, args, {"disable_ue8m0_cast": True}, {})
    assert out[0] == "ok", out


def test_probe_exact_path_error_types(rig):  # noqa: F811 - the imported rig fixture, by name
    """PASSING PROBE: exact-path errors keep the contract's types (dtype TypeError, shape ValueError)."""
    m, n, k = 64, 128, 256
    a, b, d = _fp8(m, k), _fp8(n, k), torch.zeros(m, n, dtype=torch.bfloat16)
    good_a, good_b = _scales(m, 2), _scales(n, 2)
    cases = [
        ((a, good_a.double()), (b, good_b), TypeError),
        ((a, good_a.half()), (b, good_b), TypeError),
        ((a, good_a.bfloat16()), (b, good_b), TypeError),
        ((a, good_a), (b, good_b.to(torch.int64)), TypeError),
        ((a, good_a[:, :1]), (b, good_b), ValueError),  # too few K blocks
        ((a, good_a[:-1]), (b, good_b), ValueError),  # too few rows
        ((a, good_a), (b, _scales(2, 2)), ValueError),  # 2 blocks for N = 128 (1 expected)
        ((a, good_a.reshape(-1)), (b, good_b), ValueError),
        ((a, good_a.unsqueeze(0)), (b, good_b), ValueError),
        ((a.to(torch.float8_e5m2), good_a), (b, good_b), TypeError),
    ]
    for x, y, want in cases:
        for flag in (False, True):
            out, _ = rig.record(dg.fp8_gemm_nt, (x, y, d), {"disable_ue8m0_cast": flag}, {})
            assert out[:2] == ("raise", want), (flag, out)


def _fresh(t: torch.Tensor) -> torch.Tensor:
    """A new tensor with t's shape, strides, dtype and values (another address, the same signature)."""
    span = 1 + sum((s - 1) * st for s, st in zip(t.shape, t.stride())) if t.numel() else 0
    base = torch.empty(span + 16, dtype=t.dtype)
    out = base.as_strided(tuple(t.shape), tuple(t.stride()), (t.storage_offset() % 4))
    out.copy_(t)
    return out


@pytest.mark.parametrize(
    "variant",
    ["exact_direct", "exact_convert", "non_pow2_fallback", "1x32_recipe", "1x32_shape", "mixed_dtypes", "fp4_nonpow2"],
)
def test_probe_warm_and_cold_agree(rig, variant):  # noqa: F811 - the imported rig fixture, by name
    """PASSING PROBE: each call twice cold (caches forgotten) and warm on fresh tensors of one signature:
    the same outcome (kernel, parameters modulo addresses, or error type and message), and a failing exact
    signature is not cached."""

    m, n, k = 70, 200, 384
    kw = {}
    if variant == "exact_direct":
        sfa, sfb, kw = fp32_mn_major(_scales(m, 3), m, 1), _scales(3, n).t(), {"disable_ue8m0_cast": True}
    elif variant == "exact_convert":
        sfa, sfb, kw = _scales(m, 3), _scales(2, 3), {"disable_ue8m0_cast": True}
    elif variant == "non_pow2_fallback":
        sfa, sfb = _scales(m, 3), _scales(2, 3)
    elif variant == "1x32_recipe":
        k = 256
        sfa, sfb, kw = _scales(m, 8), _scales(n, 8), {"recipe": (1, 1, 32)}
    elif variant == "1x32_shape":
        k = 256
        sfa, sfb = _scales(m, 8), _scales(n, 8)
    elif variant == "mixed_dtypes":
        sfa, sfb = _scales(m, 3), _scales(2, 3, pow2=True).to(torch.float8_e8m0fnu)
    else:
        k = 256
        sfa, sfb = _scales(m, 8), _scales(n, 8)
    if variant == "fp4_nonpow2":
        a, b = torch.zeros(m, k // 2, dtype=torch.uint8), torch.zeros(n, k // 2, dtype=torch.uint8)
    else:
        a, b = _fp8(m, k), _fp8(n, k)
    d = torch.zeros(m, n, dtype=torch.bfloat16)

    def call():
        x, y = (a, _fresh(sfa)), (b, _fresh(sfb))
        names = {"sfa": x[1], "sfb": y[1], "d": d}
        return rig.record(dg.fp8_gemm_nt, (x, y, d), kw, names)[0]

    cold = _warm_equals_cold(rig, call)
    if cold[0] == "raise":
        # the exact signature of a failing call is not cached (the UE8M0 one may be: its values fail per call)
        assert not any(key[-1] is True for key in fp8_api._DENSE), list(fp8_api._DENSE)


def test_probe_power_of_two_never_rounds_and_non_power_never_ue8m0(rig, kept):  # noqa: F811 - the imported rig fixture, by name
    """PASSING PROBE: the UE8M0 kernel is reached only when every float32 scale is a power of two (0, -2,
    subnormal 2**-127, inf, nan, 1 + 2**-23 all go exact); powers of two take UE8M0 without the flag."""
    m, n, k = 16, 16, 128
    a, b, d = _fp8(m, k), _fp8(n, k), torch.zeros(m, n, dtype=torch.bfloat16)
    for v in (0.0, -2.0, 2.0**-127, float("inf"), float("nan"), 1.0 + 2.0**-23, 3.0, 2.0**-149):
        sfa = torch.ones(m, 1)
        sfa[7, 0] = v
        dg.fp8_gemm_nt((a, sfa), (b, torch.ones(n, 1)), d)
        assert "fp8_fp32_g128" in _p(rig)[1], v
    dg.fp8_gemm_nt((a, torch.full((m, 1), 2.0**-126)), (b, torch.full((n, 1), 2.0**127)), d)
    assert "mxfp8_g128" in _p(rig)[1]


def test_probe_empty_problems_with_fp32_scales(rig):  # noqa: F811 - the imported rig fixture, by name
    """PASSING PROBE: M / N / K / G = 0 with non-power-of-two FP32 scales launch nothing and raise nothing."""
    fn = dg.fp8_gemm_nt
    for m, n, k in ((0, 16, 128), (16, 0, 128), (16, 16, 0)):
        d = torch.zeros(m, n, dtype=torch.float32)
        c = torch.ones(m, n, dtype=torch.float32)
        for flag in (False, True):
            out, _ = rig.record(
                fn,
                ((_fp8(m, k), _scales(m, ceil_div(k, 128))), (_fp8(n, k), _scales(n, ceil_div(k, 128))), d),
                {"c": c, "disable_ue8m0_cast": flag},
                {},
            )
            assert out == ("ok", []), (m, n, k, flag, out)
    for g, m in ((0, 64), (2, 0)):
        out, _ = rig.record(
            dg.m_grouped_fp8_gemm_nt_masked,
            (
                (_fp8(g, m, 128), _scales(g, m, 1)),
                (_fp8(g, 16, 128), _scales(g, 16, 1)),
                torch.zeros(g, m, 16, dtype=torch.bfloat16),
                torch.zeros(g, dtype=torch.int32),
                8,
            ),
            {"disable_ue8m0_cast": True},
            {},
        )
        assert out == ("ok", []), (g, m, out)


@pytest.mark.parametrize(
    "recipe,mn,is_sfa,groups",
    [
        ((1, 128, 128), 70, True, None),
        ((1, 128, 128), 300, False, None),
        ((128, 128), 200, False, 3),
        ((1, 128), 33, True, 2),
        ((1, 1, 128), 5, False, None),
    ],
)
def test_probe_transform_disable_cast_is_read_in_place(rig, kept, recipe, mn, is_sfa, groups):  # noqa: F811 - the imported rig fixture, by name
    """PASSING PROBE: transform_sf_into_required_layout(..., disable_ue8m0_cast=True) output is used as it is
    (no conversion per call) and read right, dense and masked."""
    k = 384
    full = recipe if len(recipe) == 3 else (recipe[0], recipe[0], recipe[1])
    gran = full[0] if is_sfa else full[1]
    lead = () if groups is None else (groups,)
    raw = _scales(*lead, ceil_div(mn, gran), 3, seed=9)
    t = dg.transform_sf_into_required_layout(raw, mn, k, recipe, groups, is_sfa, disable_ue8m0_cast=True)
    want = raw.repeat_interleave(gran, -2)[..., :mn, :]
    assert t.dtype == torch.float32 and torch.equal(t, want)
    assert fp32_direct(t, (*lead, mn, 3)) is not None
    other_rows = 48
    if groups is None:
        other = _scales(other_rows, 3, seed=10)
        x, y = (
            ((_fp8(mn, k), t), (_fp8(other_rows, k), other))
            if is_sfa
            else ((_fp8(other_rows, k), other), (_fp8(mn, k), t))
        )
        d = torch.zeros(x[0].shape[0], y[0].shape[0], dtype=torch.bfloat16)
        dg.fp8_gemm_nt(x, y, d, disable_ue8m0_cast=True)
    else:
        other = _scales(groups, other_rows, 3, seed=10)
        x, y = (
            ((_fp8(groups, mn, k), t), (_fp8(groups, other_rows, k), other))
            if is_sfa
            else ((_fp8(groups, other_rows, k), other), (_fp8(groups, mn, k), t))
        )
        rows = x[0].shape[1]
        d = torch.zeros(groups, rows, y[0].shape[1], dtype=torch.bfloat16)
        dg.m_grouped_fp8_gemm_nt_masked(x, y, d, torch.full((groups,), rows, dtype=torch.int32), rows)
    p, kernel = _p(rig)
    assert "fp8_fp32_g128" in kernel
    side = "sfa" if is_sfa else "sfb"
    assert p[side] == t.data_ptr()
    _check_reads([t], p[side], p[f"{side}_pack_stride"], p[f"{side}_group_stride"], want)


def test_probe_transform_disable_cast_keeps_non_fp32_formats():
    """PASSING PROBE: with disable_ue8m0_cast=True, float8_e8m0fnu scales are still packed to int32 and
    non-power-of-two float32 1x128 values are returned unchanged (no rounding)."""
    e8 = _scales(4, 2, pow2=True).to(torch.float8_e8m0fnu)
    assert dg.transform_sf_into_required_layout(e8, 4, 256, (1, 1, 128), disable_ue8m0_cast=True).dtype == torch.int32
    raw = _scales(4, 2)
    t = dg.transform_sf_into_required_layout(raw, 4, 256, (1, 1, 128), disable_ue8m0_cast=True)
    assert torch.equal(t, raw)
    with pytest.raises(ValueError):
        dg.transform_sf_into_required_layout(raw, 4, 256, (1, 1, 128))


@pytest.mark.parametrize("recipe", [(1, 128, 0), (1, 128, -128)])
def test_regression_nonpositive_recipe_gran_k_is_not_implemented(rig, recipe):  # noqa: F811 - the imported rig fixture, by name
    # Was: a recipe whose gran_k is 0 or negative (an invalid value, not an unsupported feature) raises
    # NotImplementedError "the recipe asks for 0" on the exact path (pre-existing: the UE8M0 path does the same);
    # now: ValueError for a non-positive granularity (fix: api._check_recipe / _operand_gran).
    m, n, k = 64, 128, 256
    a, b, d = _fp8(m, k), _fp8(n, k), torch.zeros(m, n, dtype=torch.bfloat16)
    out, _ = rig.record(
        dg.fp8_gemm_nt, ((a, _scales(m, 2)), (b, _scales(n, 2)), d), {"recipe": recipe, "disable_ue8m0_cast": True}, {}
    )
    assert out[:2] == ("raise", ValueError), out


@pytest.mark.parametrize("entry", ["masked", "contiguous", "contiguous_psum"])
@pytest.mark.parametrize("variant", ["flag_convert", "flag_direct", "fallback", "1x32_recipe"])
def test_probe_grouped_warm_and_cold_agree(rig, entry, variant):  # noqa: F811 - the imported rig fixture, by name
    """PASSING PROBE (except where 1x32_recipe meets the break above: there it checks agreement only): M-grouped
    calls cold, warm on fresh tensors of the same signature, and cold again give the same outcome."""

    g, n, k = 3, 200, 384
    kb = ceil_div(k, 128)
    kw: dict = {}
    if variant == "1x32_recipe":
        kb, kw = k // 32, {"recipe": (1, 1, 32)}
    elif variant != "fallback":
        kw = {"disable_ue8m0_cast": True}
    direct = variant == "flag_direct"
    if entry == "masked":
        m = 70
        sfa = _scales(g, kb, m).transpose(1, 2) if direct else _scales(g, m, kb)
        a, d = _fp8(g, m, k), torch.zeros(g, m, n, dtype=torch.bfloat16)
        extra, fn = (torch.tensor([70, 0, 13], dtype=torch.int32), m), dg.m_grouped_fp8_gemm_nt_masked
    else:
        m = 384
        sfa = _scales(kb, m).t() if direct else _scales(m, kb)
        a, d = _fp8(m, k), torch.zeros(m, n, dtype=torch.bfloat16)
        if entry == "contiguous_psum":
            extra, kw = (torch.tensor([128, 128, 356], dtype=torch.int32),), {**kw, "use_psum_layout": True}
        else:
            extra = (torch.tensor([0] * 128 + [2] * 128 + [1] * 100 + [-1] * 28, dtype=torch.int32),)
        fn = dg.m_grouped_fp8_gemm_nt_contiguous
    sfb = _scales(g, kb, n).transpose(1, 2) if direct else _scales(g, n if variant == "1x32_recipe" else 2, kb)
    b = _fp8(g, n, k)

    def call():
        x, y = (a, _fresh(sfa)), (b, _fresh(sfb))
        return rig.record(fn, (x, y, d, *extra), kw, {"sfa": x[1], "sfb": y[1], "d": d})[0]

    cold = _warm_equals_cold(rig, call)
    if variant != "1x32_recipe":
        assert cold[0] == "ok" and "fp8_fp32_g128" in cold[1][0].kernel, cold


@pytest.mark.parametrize("mnk", [(1, 2112, 7168), (64, 7168, 2048), (300, 200, 384), (4096, 4096, 7168)])
@pytest.mark.parametrize("out,with_c", [(torch.bfloat16, False), (torch.float32, True)])
def test_probe_precompile_plans_name_the_launched_exact_kernels(rig, mnk, out, with_c):  # noqa: F811 - the imported rig fixture, by name
    """PASSING PROBE: precompile's dense_specs(kind='fp8_fp32') names the kernels an exact call launches
    (split-K shapes included)."""
    from test_call_cache_cpu import SMS

    from deep_gemm_sm120.families.fp8_fp4_gemm_1d1d.plan import dense_specs

    m, n, k = mnk
    kb = ceil_div(k, 128)
    d = torch.zeros(m, n, dtype=out)
    kw = {"c": torch.zeros(m, n, dtype=out)} if with_c else {}
    dg.fp8_gemm_nt((_fp8(m, k), _scales(m, kb)), (_fp8(n, k), _scales(ceil_div(n, 128), kb)), d, **kw)
    launched = [ln.kernel for ln in rig.launches]
    specs = dense_specs(m, n, k, SMS, kind="fp8_fp32", out_dtype=out, with_c=with_c)
    assert [s.name for s in specs] == launched, (launched, [s.name for s in specs])
