"""A red-team review's probes of the once-per-signature caches of fp8_einsum, fp8_fp4_(paged_)sparse_mqa_logits and
chunk_gated_delta_rule (issue 43), kept as regressions, on the CPU rig of test_call_cache_cpu.py. Each passes when
the cached (warm) path behaves like the checked (cold) path; the ones marked REAL BREAK failed before their fix
(pair containers the checks refuse reached a cached launch; a call failing on values left an entry; -0.0 reused
0.0's plan; an int scale past float range raised OverflowError)."""

from __future__ import annotations

import struct
from collections import deque

import pytest
import torch
from test_call_cache_cpu import _R, _fp8, _names, _t, rig  # noqa: F401 - the rig fixture, used by name

import deep_gemm_sm120 as dg
from deep_gemm_sm120 import checks, launch
from deep_gemm_sm120.core.arith import ceil_div

# ---------------------------------------------------------------- helpers


def _cold_then_warm(rig, fn, bad, good):  # noqa: F811 - the imported rig fixture
    """bad() / good() -> (args, kwargs). Outcome of `bad` with a cold cache, then with the cache warm from `good`
    (and the number of cache entries the cold `bad` call left)."""
    launch.forget_calls()
    a, k = bad()
    cold, _ = rig.record(fn, a, k, _names(a, k))
    cold_entries = rig.entries()
    launch.forget_calls()
    a, k = good()
    ok, _ = rig.record(fn, a, k, _names(a, k))
    assert ok[0] == "ok", ok
    a, k = bad()
    warm, _ = rig.record(fn, a, k, _names(a, k))
    return cold, warm, cold_entries


def _summary(o):
    return o[:3] if o[0] == "raise" else ("ok", len(o[1]))


# ---------------------------------------------------------------- sparse MQA logits


S, H, D, NB, BLK, N = 5, 32, 128, 2, 16, 300


def _sparse_args(wrap_q=tuple, wrap_kv=tuple):
    q = wrap_q([_fp8(S, H, D), torch.zeros(S, H, dtype=torch.int32)])
    kv = wrap_kv([_fp8(N, D), torch.zeros(N, dtype=torch.int32)])
    return (q, kv, _t(S, H), torch.zeros(S, NB, 2, dtype=torch.int32), NB, BLK), {}


def _paged_args(wrap_q=tuple):
    q = wrap_q([_fp8(S, 1, H, D), torch.zeros(S, 1, H, dtype=torch.int32)])
    cache = _t(3, 2 * BLK, 1, D + 4, dtype=torch.uint8)
    return (q, cache, _t(S, H), torch.zeros(S, NB, 2, dtype=torch.int32), NB, BLK), {}


_CONTAINERS = {
    "deque": deque,
    "iterator": lambda x: iter(x),
    "dict": lambda x: dict.fromkeys(x),  # unpacks to its two keys, the tensors
}


@pytest.mark.parametrize("container", list(_CONTAINERS))
@pytest.mark.parametrize("which", ["q", "kv"])
def test_sparse_pair_container_warm_and_cold(rig, which, container):  # noqa: F811 - the imported rig fixture
    # REAL BREAK: the key is built by unpacking q / kv (`(qv, q_sf), (kvv, kv_sf) = q, kv`), which any 2-item
    # iterable passes, while check_q / check_sparse_call take only a tuple or list. A deque / iterator / dict
    # raised the checks' TypeError cold and launched warm (after a tuple call of the same tensors' signature).
    wrap = _CONTAINERS[container]
    bad = (lambda: _sparse_args(wrap_q=wrap)) if which == "q" else (lambda: _sparse_args(wrap_kv=wrap))
    cold, warm, entries = _cold_then_warm(rig, dg.fp8_fp4_sparse_mqa_logits, bad, _sparse_args)
    assert cold[:2] == ("raise", TypeError), _summary(cold)
    assert warm[:3] == cold[:3], f"cold {_summary(cold)}; warm {_summary(warm)}"


@pytest.mark.parametrize("container", list(_CONTAINERS))
def test_paged_sparse_q_container_warm_and_cold(rig, container):  # noqa: F811 - the imported rig fixture
    # REAL BREAK: the same hole in the paged entry point (`qv, q_sf = q`).
    wrap = _CONTAINERS[container]
    cold, warm, _ = _cold_then_warm(
        rig, dg.fp8_fp4_paged_sparse_mqa_logits, lambda: _paged_args(wrap_q=wrap), _paged_args
    )
    assert cold[:2] == ("raise", TypeError), _summary(cold)
    assert warm[:3] == cold[:3], f"cold {_summary(cold)}; warm {_summary(warm)}"


def test_sparse_bad_scale_words_leave_no_entry(rig, monkeypatch):  # noqa: F811 - the imported rig fixture
    # CONTRACT: with the opt-in scale check on, a q-scale word UE8M0 cannot hold (0xFF = NaN) raises ValueError
    # warm and cold alike, but the cold call adds its signature's entry (put before check_given_scales).
    checks.set_scale_checks(True)
    try:

        def bad():
            a, k = _sparse_args()
            a[0][1].fill_(-1)  # 0xFFFFFFFF: four NaN exponents
            return a, k

        cold, warm, entries = _cold_then_warm(rig, dg.fp8_fp4_sparse_mqa_logits, bad, _sparse_args)
    finally:
        checks._SCALE_CHECKS.value = None
    assert cold[:2] == ("raise", ValueError) and warm[:3] == cold[:3], (_summary(cold), _summary(warm))
    assert entries == 0, "a failing call was cached"


def test_sparse_bool_and_float_python_values(rig):  # noqa: F811 - the imported rig fixture
    # True == 1, 2.0 == 2 as dict keys: typed in the key (expected to pass).
    for nb, blk in ((True, BLK), (NB, 16.0), (2.0, BLK)):

        def bad(nb=nb, blk=blk):
            a, k = _sparse_args()
            return (*a[:4], nb, blk), k

        def good(nb=nb):
            a, k = _sparse_args()
            if nb is True:
                a = (*a[:3], torch.zeros(S, 1, 2, dtype=torch.int32), 1, BLK)
            return a, k

        cold, warm, entries = _cold_then_warm(rig, dg.fp8_fp4_sparse_mqa_logits, bad, good)
        assert warm[:3] == cold[:3] and cold[0] == "raise" and entries == 0, (nb, blk, _summary(cold))


# ---------------------------------------------------------------- fp8_einsum

BS, HE, DD, RR = 7, 2, 48, 256
KB = ceil_div(RR, 128)


def _einsum_args(sfx=None, sfy=None, packed=(False, False)):
    sfx = torch.ones(BS, HE, KB) if sfx is None else sfx
    sfy = torch.ones(HE, ceil_div(DD, 128), KB) if sfy is None else sfy
    if packed[0]:
        sfx = dg.transform_sf_into_required_layout(sfx.transpose(0, 1), BS, RR, _R, num_groups=HE, is_sfa=True)
    if packed[1]:
        sfy = dg.transform_sf_into_required_layout(sfy, DD, RR, _R, num_groups=HE)
    return ("bhr,hdr->bhd", (_fp8(BS, HE, RR), sfx), (_fp8(HE, DD, RR), sfy), _t(BS, HE, DD)), {}


def test_einsum_non_power_of_two_after_power_of_two(rig):  # noqa: F811 - the imported rig fixture
    # FP32 scales that are not powers of two on both sides: the exact kernel, warm as cold (expected to pass).
    def bad():
        return _einsum_args(sfx=torch.full((BS, HE, KB), 0.3), sfy=torch.full((HE, 1, KB), 0.7))

    cold, warm, entries = _cold_then_warm(rig, dg.fp8_einsum, bad, _einsum_args)
    assert cold[0] == "ok" and warm == cold
    assert {ln.kernel for ln in cold[1]} != {
        ln.kernel for ln in _cold_then_warm(rig, dg.fp8_einsum, _einsum_args, _einsum_args)[0][1]
    }


def test_einsum_packed_one_side_non_power_of_two_other_leaves_no_entry(rig):  # noqa: F811 - the imported rig fixture
    # CONTRACT: packed sfx with float32 sfy that is not a power of two raises the "exact kernel" ValueError warm and
    # cold alike, but the cold call adds its signature's entry (put before the per-call conversion raises).
    def bad():
        return _einsum_args(sfy=torch.full((HE, 1, KB), 0.7), packed=(True, False))

    def good():
        return _einsum_args(packed=(True, False))

    cold, warm, entries = _cold_then_warm(rig, dg.fp8_einsum, bad, good)
    assert cold[:2] == ("raise", ValueError) and warm[:3] == cold[:3], (_summary(cold), _summary(warm))
    assert entries == 0, "a failing call was cached"


def test_einsum_pair_shapes(rig):  # noqa: F811 - the imported rig fixture
    # a 2-row tensor where a pair is expected, a 3-tuple, a namedtuple-like subclass (expected to pass)
    class P(tuple):
        pass

    def mk(f):
        def build():
            a, k = _einsum_args()
            return (a[0], f(a[1]), *a[2:]), k

        return build

    for f in (lambda p: torch.stack([p[1], p[1]]), lambda p: (*p, p[1]), lambda p: P(p), lambda p: iter(p)):
        cold, warm, entries = _cold_then_warm(rig, dg.fp8_einsum, mk(f), _einsum_args)
        assert warm[:3] == cold[:3] if cold[0] == "raise" else warm == cold, (_summary(cold), _summary(warm))
        if cold[0] == "raise":
            assert cold[1] in (TypeError, ValueError) and entries == 0, _summary(cold)


def test_einsum_bad_scale_values_per_call(rig):  # noqa: F811 - the imported rig fixture
    # zero / negative / inf unpacked scales after a good call: value checks run per call (expected to pass)
    for v in (0.0, -1.0, float("inf"), float("nan")):

        def bad(v=v):
            return _einsum_args(sfx=torch.full((BS, HE, KB), v))

        cold, warm, entries = _cold_then_warm(rig, dg.fp8_einsum, bad, _einsum_args)
        assert (warm[:3] == cold[:3]) if cold[0] == "raise" else warm == cold, (v, _summary(cold), _summary(warm))


# ---------------------------------------------------------------- chunk_gated_delta_rule


def _gdr_args(scale=None, cu=None, requires_grad=False, t=40):
    q = _t(1, t, 2, 128)
    kw = {"scale": scale}
    if cu is not None:
        kw["cu_seqlens"] = torch.tensor(cu, dtype=torch.int32)
    if requires_grad:
        q.requires_grad_(True)
    return (q, _t(1, t, 2, 128), _t(1, t, 2, 128), _t(1, t, 2, dtype=torch.float32), _t(1, t, 2)), kw


def _bits(outcome):
    """The launches with every float parameter as its bit pattern (-0.0 == 0.0 as Python floats)."""
    assert outcome[0] == "ok", outcome

    def b(v):
        return ("f", struct.pack("<d", v)) if isinstance(v, float) else v

    return [(ln.kernel, tuple((k, b(v)) for k, v in ln.args)) for ln in outcome[1]]


def test_gdr_negative_zero_scale(rig):  # noqa: F811 - the imported rig fixture
    # REAL BREAK (minor): scale=-0.0 and scale=0.0 are equal, same-typed keys, so a call with -0.0 after one with
    # 0.0 launches the cached plan's p.scale = 0.0 where a checked call launches -0.0 (float bits differ; the
    # kernel's q * scale products then differ in the sign of zero).
    cold, warm, _ = _cold_then_warm(rig, dg.chunk_gated_delta_rule, lambda: _gdr_args(-0.0), lambda: _gdr_args(0.0))
    assert _bits(warm) == _bits(cold)


def test_gdr_bad_cu_seqlens_after_good(rig):  # noqa: F811 - the imported rig fixture
    # expected to pass: cu_seqlens' values are checked per call, and the failing cold call caches nothing
    for cu in ([0, 10, 5, 40], [1, 10, 20, 40], [0, 10, 20, 39]):
        cold, warm, entries = _cold_then_warm(
            rig, dg.chunk_gated_delta_rule, lambda cu=cu: _gdr_args(cu=cu), lambda: _gdr_args(cu=[0, 10, 20, 40])
        )
        assert cold[:2] == ("raise", ValueError) and warm[:3] == cold[:3] and entries == 0, cu


def test_gdr_scale_types(rig):  # noqa: F811 - the imported rig fixture
    # expected to pass: 1 / True / numpy float / huge int after a float call
    np = pytest.importorskip("numpy")
    for s in (1, True, np.float64(0.5), np.float32(0.5), 10**400):
        cold, warm, entries = _cold_then_warm(
            rig, dg.chunk_gated_delta_rule, lambda s=s: _gdr_args(scale=s), lambda: _gdr_args(scale=0.5)
        )
        same = warm[:3] == cold[:3] if cold[0] == "raise" else _bits(warm) == _bits(cold)
        assert same, (s, _summary(cold), _summary(warm))


def test_gdr_huge_int_scale_error_type(rig):  # noqa: F811 - the imported rig fixture
    # WRONG ERROR TYPE (pre-existing in check_arguments, not the cache): float(10**400) raises OverflowError,
    # outside TypeError / ValueError / NotImplementedError.
    a, k = _gdr_args(scale=10**400)
    outcome, _ = rig.record(dg.chunk_gated_delta_rule, a, k, {})
    assert outcome[0] == "raise" and outcome[1] in (TypeError, ValueError), _summary(outcome)


def test_gdr_pdl_switch(rig):  # noqa: F811 - the imported rig fixture
    # expected to pass: the PDL switch is in the key
    launch.forget_calls()
    a, k = _gdr_args()
    launch.set_pdl(False)
    cold, _ = rig.record(dg.chunk_gated_delta_rule, a, k, _names(a, k))
    launch.set_pdl(True)
    rig.record(dg.chunk_gated_delta_rule, a, k, _names(a, k))
    launch.set_pdl(False)
    warm, preps = rig.record(dg.chunk_gated_delta_rule, a, k, _names(a, k))
    assert warm == cold


def test_gdr_requires_grad(rig):  # noqa: F811 - the imported rig fixture
    # expected to pass: the autograd wrapper is per call, so a signature cached without grad still gets the
    # backward (of the inputs it is given), and one cached with grad gives none to a call under no_grad
    from deep_gemm_sm120.families.gated_delta_rule.backward import chunk_gated_delta_rule_backward

    launch.forget_calls()
    a, k = _gdr_args()
    rig.record(dg.chunk_gated_delta_rule, a, k, _names(a, k))
    a, k = _gdr_args(requires_grad=True)
    with torch.no_grad():
        a[3].copy_(-a[3].float().abs())  # log decays are <= 0: finite gradients
    o, _ = dg.chunk_gated_delta_rule(*a, **k)
    assert o.requires_grad
    o.float().sum().backward()
    plain = [x.detach() for x in a]
    want = chunk_gated_delta_rule_backward(*plain, torch.ones_like(o), None, 128**-0.5, None, None, False)[0]
    assert torch.isfinite(want).all() and torch.equal(a[0].grad, want)
    with torch.no_grad():
        o, _ = dg.chunk_gated_delta_rule(*a, **k)
    assert not o.requires_grad


def test_einsum_packed_nan_words_leave_no_entry(rig):  # noqa: F811 - the imported rig fixture
    # CONTRACT: as the sparse case: the opt-in check of packed words runs in the cached run(), after the put.
    checks.set_scale_checks(True)
    try:

        def bad():
            a, k = _einsum_args(packed=(True, True))
            a[1][1].fill_(-1)  # 0xFF bytes: UE8M0 NaN
            return a, k

        cold, warm, entries = _cold_then_warm(rig, dg.fp8_einsum, bad, lambda: _einsum_args(packed=(True, True)))
    finally:
        checks._SCALE_CHECKS.value = None
    assert cold[:2] == ("raise", ValueError) and warm[:3] == cold[:3], (_summary(cold), _summary(warm))
    assert entries == 0, "a failing call was cached"


# ---------------------------------------------------------------- zero-size shapes: outputs warm == cold


def _twice(fn, build):
    """Outputs of a cold call, then of a warm call on fresh tensors (both from build())."""
    launch.forget_calls()
    out = []
    for _ in range(2):
        a, k = build()
        r = fn(*a, **k)
        out.append((r, a, k))
    return out


def test_zero_size_einsum_sparse_gdr(rig):  # noqa: F811 - the imported rig fixture
    # expected to pass
    def einsum_r0():
        d = torch.full((BS, HE, DD), 7.0)
        return ("bhr,hdr->bhd", (_fp8(BS, HE, 0), torch.ones(BS, HE, 0)), (_fp8(HE, DD, 0), torch.ones(HE, 1, 0)),
                d), {"c": torch.full((BS, HE, DD), 3.0)}  # fmt: skip

    (_, a1, _), (_, a2, _) = _twice(dg.fp8_einsum, einsum_r0)
    assert torch.equal(a1[3], a2[3]) and bool((a2[3] == 3).all())

    def sparse_n0():
        a, k = _sparse_args()
        return (a[0], (_fp8(0, D), torch.zeros(0, dtype=torch.int32)), *a[2:]), k

    (o1, _, _), (o2, _, _) = _twice(dg.fp8_fp4_sparse_mqa_logits, sparse_n0)
    assert torch.equal(o1, o2) and o1.shape == (S, NB * BLK)

    def gdr_t0():
        a, k = _gdr_args(t=0)
        return a, {**k, "initial_state": torch.full((1, 2, 128, 128), 5.0), "output_final_state": True}

    ((o1, f1), _, _), ((o2, f2), _, _) = _twice(dg.chunk_gated_delta_rule, gdr_t0)
    assert o1.shape == o2.shape and torch.equal(f1, f2) and bool((f2 == 5).all())


def test_misc_values_alike(rig):  # noqa: F811 - the imported rig fixture
    # expected to pass: recipe None / list, GDR NaN scale, sparse list pairs
    def einsum_recipe(r):
        def build():
            a, k = _einsum_args()
            return a, {"recipe": r}

        return build

    for r in (None, [1, 128, 128], (1, 128, 128, 1)):
        cold, warm, entries = _cold_then_warm(rig, dg.fp8_einsum, einsum_recipe(r), _einsum_args)
        assert (warm[:3] == cold[:3]) if cold[0] == "raise" else warm == cold, (r, _summary(cold), _summary(warm))
    nan = float("nan")
    cold, warm, _ = _cold_then_warm(rig, dg.chunk_gated_delta_rule, lambda: _gdr_args(nan), lambda: _gdr_args(nan))
    assert (warm[:3] == cold[:3]) if cold[0] == "raise" else _bits(warm) == _bits(cold)
    cold, warm, _ = _cold_then_warm(rig, dg.fp8_fp4_sparse_mqa_logits, lambda: _sparse_args(list, list), _sparse_args)
    assert cold[0] == "ok" and warm == cold
