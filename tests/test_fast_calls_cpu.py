"""Calls served in C (launch.fast_calls, host/csrc/fast_call.cpp), on a CPU.

The table itself: what a signature reads (and what it refuses to read), which recorded launches it keeps
(every address exactly one of the call's tensors), how a hit replays them (addresses patched, the launcher's
entry / stream / PDL read per hit). Then the entry points that use it, through the call-cache rig of
test_call_cache_cpu.py: a warm call is served in C exactly when its launches can be replayed from its arguments
(an oracle computed from the cold call's launches), and a served call launches what the checked call launched."""

from __future__ import annotations

import struct
import subprocess
import sys
import textwrap
import threading

import pytest
import torch
from test_call_cache_cpu import (  # noqa: F401 - rig: the call-cache fixture, requested by name
    SMS,
    _all_cases,
    _names,
    _normalize,
    rig,
)

import deep_gemm_sm120 as dg
from deep_gemm_sm120 import arch, checks, launch
from deep_gemm_sm120.core.tma import RECORD
from deep_gemm_sm120.families.bf16_gemm import api as bf16_api
from deep_gemm_sm120.families.fp8_fp4_gemm_1d1d import api as fp8_api

C = pytest.importorskip("deep_gemm_sm120._C", reason="the runtime extension is not built")


class Launcher:
    """What FastCalls reads of launch.BOUND per hit, with a recorder for a launch entry."""

    def __init__(self, pdl=True):
        self.launches: list[tuple] = []
        self.streams: list[int] = []
        self.pdl = pdl
        self.launch = self._record
        self.stream = self._stream

    def _record(self, *args):
        self.launches.append(args)

    def _stream(self, index):
        self.streams.append(index)
        return 77 + index


def _buf(*ptrs: int, scalar: int = 5) -> bytes:
    """A parameter buffer: pointers at 0, 8, ... then one uint32 scalar."""
    return struct.pack(f"<{len(ptrs)}QI4x", *ptrs, scalar)


def _maps(*addresses: int) -> bytes:
    return b"".join(RECORD.pack(0, 9, 2, 128, p, 64, 64, 0, 0, 0, 128, 0, 0, 0, 64, 64, 0, 0, 0, 0) for p in addresses)


def _record(params: bytes, tmaps: bytes, pointers: tuple, handle=3, grid=(2, 1, 1), pdl=True, index=0):
    return (handle, *grid, 128, 4096, index, pdl, params, tmaps, pointers)


def _addr(t: torch.Tensor) -> int:
    return t.data_ptr()


# ---------------------------------------------------------------- signatures


def test_schema_and_limit_are_checked():
    with pytest.raises(ValueError, match="one letter per argument"):
        C.FastCalls("TX", Launcher(), 4)
    with pytest.raises(ValueError, match="one letter per argument"):
        C.FastCalls("", Launcher(), 4)
    with pytest.raises(ValueError, match="limit"):
        C.FastCalls("T", Launcher(), 0)
    assert C.FastCalls("TPV", Launcher(), 4).schema == "TPV"


def test_a_signature_is_what_tensor_key_reads():
    table = C.FastCalls("TV", Launcher(), 4)
    a = torch.zeros(4, 8, dtype=torch.bfloat16)
    same = torch.ones(4, 8, dtype=torch.bfloat16)  # new storage, same alignment class (64-byte allocations)
    sig = table(a, 1)
    assert isinstance(sig, bytes) and sig == table(same, 1)
    other = [
        torch.zeros(4, 8, dtype=torch.float16),  # dtype
        torch.zeros(4, 9, dtype=torch.bfloat16),  # shape
        torch.zeros(8, 4, dtype=torch.bfloat16).t(),  # strides
        torch.zeros(40, dtype=torch.bfloat16)[1:33].view(4, 8),  # address alignment class
        torch.nn.Parameter(torch.zeros(4, 8, dtype=torch.bfloat16)),  # class
        torch.zeros(1, 4, 8, dtype=torch.bfloat16),  # rank
    ]
    sigs = {table(t, 1) for t in other} | {sig}
    assert len(sigs) == len(other) + 1
    values = [1, True, 1.0, "1", None, (1,), [1], (1, 2), 2**40, -1.0, 0.0, -0.0]
    sigs = {table(a, v) for v in values}
    assert len(sigs) == len(values), "each value (and its type) keys apart"


def test_what_a_signature_cannot_read_is_none():
    table = C.FastCalls("TV", Launcher(), 4)
    a = torch.zeros(4, 8)
    assert table(object(), 1) is None  # not a tensor
    assert table(a, object()) is None  # not a plain value
    assert table(a, ((1,),)) is None  # nested past one level
    assert table(a, "x" * 65) is None  # a long string
    assert table(a, 2**64) is None  # past int64
    assert table(a, torch.tensor(1.0)) is None  # a tensor where a value goes (its value would be baked in)
    assert table(a) is None and table(a, 1, 2) is None  # the argument count
    assert table(a, v=1) is None  # keywords
    assert table(torch.zeros(4, 8).numpy(), 1) is None  # tensor-like, no stride()
    pair = C.FastCalls("P", Launcher(), 4)
    assert isinstance(pair((a, a)), bytes) and isinstance(pair([a, None]), bytes) and isinstance(pair(a), bytes)
    assert pair((a, 1)) is None
    assert len({pair((a, a)), pair([a, a]), pair(a)}) == 3


def test_classes_and_dtypes_are_bounded():
    """Each class a signature names is kept alive (its address stays its own); past the bound a new one is not
    read, so endless tensor subclasses cost checked calls, not memory. A fresh process: the bound is global."""
    code = textwrap.dedent(
        """
        import torch
        from deep_gemm_sm120 import _C, launch
        table = _C.FastCalls("T", launch.BOUND, 4)
        assert isinstance(table(torch.zeros(2)), bytes)
        got = [table(type(f"T{i}", (torch.Tensor,), {})(torch.zeros(2))) for i in range(1100)]
        read = sum(isinstance(s, bytes) for s in got)
        assert 1000 <= read <= 1024 and got[-1] is None, read
        assert isinstance(table(torch.zeros(2)), bytes)  # torch.Tensor (and float32) were seen before the bound
        print("ok")
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


# ---------------------------------------------------------------- records and replay


def test_a_hit_replays_the_record_with_the_new_addresses():
    lau = Launcher()
    table = C.FastCalls("TTTV", lau, 4)
    a, b, d = torch.zeros(64), torch.zeros(64), torch.zeros(16)
    params = _buf(_addr(d), 0, scalar=9)  # d, then a null pointer (an absent c)
    assert table.add((a, b, d, 3), [_record(params, _maps(_addr(a), _addr(b)), (0, 8), index=1)])
    assert len(table) == 1 and table.hits == 0
    a2, b2, d2 = torch.zeros(64), torch.zeros(64), torch.zeros(16)
    assert table(a2, b2, d2, 3) is True and table.hits == 1
    (got,) = lau.launches
    handle, gx, gy, gz, block, smem, stream, pdl, p2, m2 = got
    assert (handle, gx, gy, gz, block, smem, stream, pdl) == (3, 2, 1, 1, 128, 4096, 78, True)
    assert p2 == _buf(_addr(d2), 0, scalar=9)
    assert m2 == _maps(_addr(a2), _addr(b2))
    assert lau.streams == [1]
    assert isinstance(table(a2, b2, d2, 4), bytes), "another value is another signature"
    lau.pdl = False
    assert table(a2, b2, d2, 3) is True and lau.launches[-1][7] is False, "PDL: the kernel's and the switch"


def test_records_that_cannot_be_replayed_are_refused():
    table = C.FastCalls("TTT", Launcher(), 4)
    a, b, d = torch.zeros(64), torch.zeros(64), torch.zeros(16)
    ws = torch.zeros(8)
    good = _record(_buf(_addr(d)), _maps(_addr(a), _addr(b)), (0,))
    refused = {
        "workspace pointer": _record(_buf(_addr(ws)), _maps(_addr(a), _addr(b)), (0,)),
        "offset pointer": _record(_buf(_addr(d) + 16), _maps(_addr(a), _addr(b)), (0,)),
        "workspace map": _record(_buf(_addr(d)), _maps(_addr(a), _addr(ws)), (0,)),
        "null map": _record(_buf(_addr(d)), _maps(_addr(a), 0), (0,)),
        "pointer slot outside": _record(_buf(_addr(d)), _maps(_addr(a), _addr(b)), (16,)),
        "pointer slot wrapping 32 bits": _record(_buf(_addr(d)), _maps(_addr(a), _addr(b)), (0xFFFFFFF8,)),
        "unaligned slot": _record(_buf(_addr(d)), _maps(_addr(a), _addr(b)), (4,)),
        "short maps": good[:9] + (_maps(_addr(a))[:100],) + good[10:],
        "not a tuple": list(good),
        "short": good[:10],
        "unknown kernel pointers": None,
    }
    for what, rec in refused.items():
        assert table.add((a, b, d), [rec]) is False, what
        assert table.add((a, b, d), [good, rec]) is False, what
    assert table.add((a, b, d), []) is False, "nothing launched"
    assert len(table) == 0
    assert table.add((a, b, d), [good]) is True
    # a tensor without an address (empty) could not be told from a null pointer
    empty = torch.zeros(0)
    assert empty.data_ptr() == 0
    assert table.add((a, b, empty), [_record(_buf(0), _maps(_addr(a), _addr(b)), (0,))]) is False
    assert table.add((a, object(), d), [good]) is False, "an argument the schema cannot read"


def test_arguments_sharing_an_address_key_the_sharing_and_are_served():
    """c aliasing d (in-place accumulation): the signature keys which arguments share an address, so a record whose
    address is two arguments' is kept, patched from the first, and served only to calls that share it the same
    way; a call with the same shapes apart is another signature. With extents, the alias's own extent does not
    count as another argument's (its address is keyed, not derived), while an address inside an allocation
    that is also an argument's still refuses the recording."""
    lau = Launcher()
    table = C.FastCalls("TTT", lau, 8)
    a, d = torch.zeros(64), torch.zeros(16)
    shared = table(a, d, d)
    assert isinstance(shared, bytes) and shared != table(a, d, torch.zeros(16)), "sharing is part of the key"
    rec = _record(_buf(_addr(d), _addr(d)), _maps(_addr(a)), (0, 8))
    spans = [(_addr(a), 256), (_addr(d), 64), (_addr(d), 64)]
    assert table.add((a, d, d), [rec], [], None, spans) is True
    a2, d2 = torch.zeros(64), torch.zeros(16)
    assert table(a2, d2, d2) is True
    assert lau.launches[-1][8] == _buf(_addr(d2), _addr(d2)) and lau.launches[-1][9] == _maps(_addr(a2))
    assert isinstance(table(a2, d2, torch.zeros(16)), bytes), "apart: not this entry"


def test_an_address_inside_one_argument_is_that_argument_plus_its_offset():
    """With the arguments' extents (recording passes them), an address inside exactly one argument, which no
    other argument overlaps, replays as that argument's new address plus the offset; without extents, with
    overlapping arguments, or past an extent, it is refused; extents that do not line up with the signature's
    tensors are ignored."""
    lau = Launcher()
    table = C.FastCalls("TT", lau, 8)
    a, d = torch.zeros(64), torch.zeros(16)
    rec = _record(_buf(_addr(d)), _maps(_addr(a) + 128, _addr(a)), (0,))  # a map 128 bytes into a
    extents = [(_addr(a), 256), (_addr(d), 64)]
    assert table.add((a, d), [rec]) is False, "no extents: exact addresses only"
    assert table.add((a, d), [rec], [], None, [(_addr(d), 64), (_addr(a), 256)]) is False, "extents out of order"
    assert table.add((a, d), [rec], [], None, [(_addr(a), 256)]) is False, "extents of one tensor of two"
    past = _record(_buf(_addr(d)), _maps(_addr(a) + 256, _addr(a)), (0,))
    assert table.add((a, d), [past], [], None, extents) is False, "one past a's extent"
    base = torch.zeros(128)
    x, y = base[:64], base[32:96]  # overlapping arguments: the address could come from either
    overlap = _record(_buf(_addr(y)), _maps(_addr(x) + 64, _addr(x)), (0,))
    assert table.add((x, y), [overlap], [], None, [(_addr(x), 256), (_addr(y), 256)]) is False
    assert table.add((a, d), [rec], [], None, extents) is True
    a2, d2 = torch.zeros(64), torch.zeros(16)
    assert table(a2, d2) is True
    assert lau.launches[-1][9] == _maps(_addr(a2) + 128, _addr(a2))


def test_an_argument_address_inside_another_argument_is_refused():
    """An address that is one argument's own but lies inside another's extent could have been derived from the
    other (red-team: kv + 128, with a second argument, a view of kv's storage, starting there): with extents
    known, refused, since a later call's arguments may sit apart."""
    table = C.FastCalls("TT", Launcher(), 8)
    pool = torch.zeros(64)
    kv, w = pool, pool[32:48]  # w starts at kv + 128, inside kv's extent
    rec = _record(_buf(), _maps(_addr(kv), _addr(kv) + 128), ())
    spans = [(_addr(kv), launch._extent(kv)), (_addr(w), launch._extent(w))]
    assert table.add((kv, w), [rec], [], None, spans) is False
    apart = torch.zeros(16)
    assert table.add((kv, apart), [_record(_buf(), _maps(_addr(kv), _addr(apart)), ())], [], None, [
        (_addr(kv), launch._extent(kv)), (_addr(apart), launch._extent(apart))
    ]) is True  # fmt: skip


def test_paged_sparse_weights_on_the_scale_words_are_not_served_apart(rig):  # noqa: F811 - the imported rig fixture
    """End to end (red-team): the first call's weights are a view of kv_cache's pool starting exactly at its scale
    words (legal for the checked path); a later call of that signature with separate tensors must launch what its
    own checked call launches (the scale words at kv_cache + offset, not the weights' address)."""
    s, h, d, blk, nb, pages = 5, 16, 64, 16, 2, 2
    page_kv, row = 2 * blk, d + 4

    def q():
        return (torch.zeros(s, 1, h, d, dtype=torch.float8_e4m3fn), torch.zeros(s, 1, h, dtype=torch.int32))

    def aliased():
        pool = torch.zeros(pages * page_kv * row + 4096, dtype=torch.uint8)
        cache = pool[: pages * page_kv * row].view(pages, page_kv, 1, row)
        w = pool[page_kv * d : page_kv * d + s * h * 2].view(torch.bfloat16).view(s, h)
        return (q(), cache, w, torch.zeros(s, nb, 2, dtype=torch.int32), nb, blk)

    def apart():
        return (q(), torch.zeros(pages, page_kv, 1, row, dtype=torch.uint8), torch.zeros(s, h, dtype=torch.bfloat16),
                torch.zeros(s, nb, 2, dtype=torch.int32), nb, blk)  # fmt: skip

    def call(args):
        rig.launches.clear()
        dg.fp8_fp4_paged_sparse_mqa_logits(*args)
        return _normalize(rig.launches, _names(args, {}))

    launch.forget_calls()
    separate = apart()
    checked = call(separate)
    launch.forget_calls()
    call(aliased())  # checked; its recording is refused
    before = _hits()
    assert call(separate) == checked and _hits() == before


def test_a_table_in_a_reference_cycle_is_collected():
    """A factory that refers to its own table makes a cycle (table -> entry -> factory -> table): the collector
    frees it (ASan review: FastCalls took no part in garbage collection, so such a table lived forever)."""
    import gc
    import weakref

    class Marker:
        pass

    table = C.FastCalls("T", Launcher(), 4, True)
    marker = Marker()
    gone = weakref.ref(marker)
    ws = torch.zeros(4)

    def factory(table=table, marker=marker):
        return torch.zeros(4)

    a = torch.zeros(64)
    assert table.add((a,), [_record(_buf(_addr(ws)), b"", (0,))], [(_addr(ws), 16, factory)], ("one", 0))
    assert isinstance(table(torch.zeros(64)), torch.Tensor)
    del table, factory, marker
    gc.collect()
    assert gone() is None


def test_an_unbound_launcher_or_a_failing_launch_is_not_a_hit():
    lau = Launcher()
    table = C.FastCalls("T", lau, 4)
    a = torch.zeros(64)
    assert table.add((a,), [_record(_buf(), _maps(_addr(a)), ())])
    lau.launch = None  # launch.BOUND before its first bind: the checked path binds it
    assert isinstance(table(a), bytes) and table.hits == 0
    lau.launch = lambda *args: (_ for _ in ()).throw(ValueError("refused by the launch entry"))
    with pytest.raises(ValueError, match="refused by the launch entry"):
        table(a)
    lau.launch, lau.pdl = lau._record, None
    assert isinstance(table(a), bytes), "the PDL switch not read yet"


def test_an_entry_outlives_a_clear_from_inside_its_launch():
    """A launch entry that calls back into Python and clears the table (forget_calls) while a two-launch entry
    is replayed: both launches still run, from the entry the hit holds."""
    lau = Launcher()
    table = C.FastCalls("T", lau, 4)
    seen = []

    def clearing(*args):
        seen.append(args)
        table.clear()

    a = torch.zeros(64)
    rec = _record(_buf(), _maps(_addr(a)), ())
    assert table.add((a,), [rec, rec[:1] + (5,) + rec[2:]])
    lau.launch = clearing
    assert table(a) is True
    assert [s[1] for s in seen] == [2, 5] and len(table) == 0


def test_a_full_table_starts_again():
    table = C.FastCalls("TV", Launcher(), 3)
    a = torch.zeros(64)
    for i in range(3):
        assert table.add((a, i), [_record(_buf(), _maps(_addr(a)), ())])
    assert len(table) == 3
    assert table.add((a, 3), [_record(_buf(), _maps(_addr(a)), ())])
    assert len(table) == 1 and table(a, 3) is True and isinstance(table(a, 0), bytes)


# ---------------------------------------------------------------- the entry points


_SERVED = {
    "bf16_gemm_nt",
    "bf16_gemm_nn",
    "bf16_gemm_tn",
    "bf16_gemm_tt",
    "m_grouped_bf16_gemm_nt_masked",
    "fp8_fp4_gemm_nt",
    "m_grouped_fp8_fp4_gemm_nt_masked",
    "m_grouped_bf16_gemm_nt_contiguous",
    "m_grouped_fp8_fp4_gemm_nt_contiguous",
    "einsum",
    "fp8_einsum",
    "tf32_hc_prenorm_gemm",
    "fp8_fp4_sparse_mqa_logits",
    "fp8_fp4_paged_sparse_mqa_logits",
    "chunk_gated_delta_rule",
}
_CONTIGUOUS = {"m_grouped_bf16_gemm_nt_contiguous", "m_grouped_fp8_fp4_gemm_nt_contiguous"}


def _hits() -> int:
    return sum(f.hits for f in launch._FASTS)


def _replayable(launches, names) -> bool:
    """The oracle: every address a launch passes is one named tensor's (an argument's, or one the call allocated
    through launch.empty / zeros: _allocations names those). Arguments may share an address (c aliasing d): the
    signature keys the sharing."""
    for ln in launches:
        for _, v in ln.args + tuple(kv for m in ln.maps for kv in m if kv[0] == "address"):
            if isinstance(v, str) and v.startswith("@ws"):
                return False
    return bool(launches)


class _Allocations:
    """Names every tensor a call allocates through launch.empty / zeros (served or checked) in the call's names,
    in order: alloc0, alloc1, ..., so a workspace is compared by its place among the call's allocations."""

    def __init__(self, monkeypatch):
        self.names: dict | None = None
        register = launch._allocated

        def name(t):
            if self.names is not None:
                self.names[f"alloc{sum(k.startswith('alloc') for k in self.names)}"] = t
            return t

        def allocated(t, make, shape, dtype, device):  # the factory a served call runs names its tensor too
            return register(name(t), lambda *a, **k: name(make(*a, **k)), shape, dtype, device)

        monkeypatch.setattr(launch, "_allocated", allocated)

    def record(self, the_rig, fn, args, kwargs, names):
        self.names = names
        try:
            return the_rig.record(fn, args, kwargs, names)
        finally:
            self.names = None


@pytest.mark.parametrize("seed", [0, 1])
def test_warm_calls_are_served_exactly_when_replayable(rig, seed, monkeypatch):  # noqa: F811 - the imported rig fixture
    served = 0
    allocs = _Allocations(monkeypatch)
    for label, fn, build in _all_cases(seed):
        launch.forget_calls()
        args1, kw1, names1 = build()
        cold, _ = allocs.record(rig, fn, args1, kw1, names1)
        assert cold[0] == "ok", (label, cold)
        args2, kw2, names2 = build()
        before = _hits()
        warm, preps = allocs.record(rig, fn, args2, kw2, names2)
        hit = _hits() - before
        assert preps == 0 and warm == cold, label
        expect = fn.__name__ in _SERVED and _replayable(cold[1], names1)
        if fn.__name__ in _CONTIGUOUS:  # the rig checks index values: a contiguous layout is read per call
            expect = False
        if fn.__name__ == "chunk_gated_delta_rule" and "varlenTrue" in label:  # cu_seqlens' values are read
            expect = False
        assert hit == int(expect), (label, hit, expect)
        served += hit
    assert served >= 15


@pytest.mark.parametrize("fp8", [False, True])
def test_in_place_accumulation_is_served(rig, fp8):  # noqa: F811 - the imported rig fixture
    """d = c + a @ b.T with c aliasing d (fp32, in place: the weight-gradient and MoE accumulation spelling):
    served from the second call of its signature, launching what the checked call launches with the new
    tensors; c apart from d is another signature, checked on its first call."""
    m, n, k = 64, 128, 256

    def build():
        if fp8:
            x, w = torch.zeros(m, k, dtype=torch.float8_e4m3fn), torch.zeros(n, k, dtype=torch.float8_e4m3fn)
            sfa = dg.transform_sf_into_required_layout(torch.ones(m, k // 128), m, k, (1, 128, 128), is_sfa=True)
            sfb = dg.transform_sf_into_required_layout(torch.ones(n // 128, k // 128), n, k, (1, 128, 128))
            return (x, sfa), (w, sfb), torch.zeros(m, n)
        return torch.zeros(m, k, dtype=torch.bfloat16), torch.zeros(n, k, dtype=torch.bfloat16), torch.zeros(m, n)

    def call(a, b, d, c):
        rig.launches.clear()
        (dg.fp8_gemm_nt if fp8 else dg.bf16_gemm_nt)(a, b, d, c=c)
        return _normalize(rig.launches, _names((a, b, d), {}))

    saved = checks._SCALE_CHECKS.value
    try:
        dg.set_scale_checks(False)
        launch.forget_calls()
        a, b, d = build()
        checked = call(a, b, d, d)
        before = _hits()
        a2, b2, d2 = build()
        assert call(a2, b2, d2, d2) == checked and _hits() == before + 1
        assert call(*build()[:2], d2, torch.zeros(m, n)) != checked and _hits() == before + 1, "c apart: checked"
    finally:
        checks._SCALE_CHECKS.value = saved


def test_calls_outside_the_fast_spelling_stay_checked(rig):  # noqa: F811 - the imported rig fixture
    """alpha / epilogue on a BF16 GEMM, recipe_a / recipe_b, scale checks on: never served (the checked path
    runs, and with scale checks on it reads the scales on every call)."""
    m, n, k = 64, 128, 256
    a, b, d = torch.zeros(m, k, dtype=torch.bfloat16), torch.zeros(n, k, dtype=torch.bfloat16), torch.zeros(m, n)
    d = d.to(torch.bfloat16)
    for _ in range(2):
        dg.bf16_gemm_nt(a, b, d, alpha=1)
    before = _hits()
    dg.bf16_gemm_nt(a, b, d)
    dg.bf16_gemm_nt(a, b, d)
    assert _hits() == before + 1, "the plain spelling is served from its second call"
    x = torch.zeros(m, k, dtype=torch.float8_e4m3fn)
    w = torch.zeros(n, k, dtype=torch.float8_e4m3fn)
    sfa = dg.transform_sf_into_required_layout(torch.ones(m, k // 128), m, k, (1, 128, 128), is_sfa=True)
    sfb = dg.transform_sf_into_required_layout(torch.ones(n // 128, k // 128), n, k, (1, 128, 128))
    saved = checks._SCALE_CHECKS.value
    checks_run = []
    real = fp8_api._check_given_packed
    try:
        fp8_api._check_given_packed = lambda *args: checks_run.append(args) or real(*args)
        dg.set_scale_checks(True)
        before = _hits()
        for _ in range(3):
            dg.fp8_gemm_nt((x, sfa), (w, sfb), d)
        assert _hits() == before and len(checks_run) == 3
        dg.set_scale_checks(False)
        for _ in range(3):
            dg.fp8_gemm_nt((x, sfa), (w, sfb), d)
        assert _hits() == before + 2 and len(checks_run) == 3
        for _ in range(2):
            dg.fp8_gemm_nt((x, sfa), (w, sfb), d, recipe_a=(1, 128), recipe_b=(128, 128))
        assert _hits() == before + 2
    finally:
        fp8_api._check_given_packed = real
        checks._SCALE_CHECKS.value = saved


@pytest.mark.parametrize("fp8", [False, True])
def test_contiguous_calls_are_served_where_no_layout_value_is_read(rig, fp8):  # noqa: F811 - the imported rig fixture
    """check_layout=False, or None with index checks off: served. Index checks on (None), check_layout=True, or
    a psum layout with zero padding (torch operations on the layout's values): checked every call."""
    g, m, n, k = 2, 256, 128, 256

    def call(layout, **kw):
        if fp8:
            r = (1, 128, 128)
            sfa = dg.transform_sf_into_required_layout(torch.ones(m, k // 128), m, k, r, is_sfa=True)
            sfb = dg.transform_sf_into_required_layout(torch.ones(g, n // 128, k // 128), n, k, r, num_groups=g)
            x, w = torch.zeros(m, k, dtype=torch.float8_e4m3fn), torch.zeros(g, n, k, dtype=torch.float8_e4m3fn)
            dg.m_grouped_fp8_gemm_nt_contiguous(
                (x, sfa), (w, sfb), torch.zeros(m, n, dtype=torch.bfloat16), layout, **kw
            )
        else:
            a, b = torch.zeros(m, k, dtype=torch.bfloat16), torch.zeros(g, n, k, dtype=torch.bfloat16)
            dg.m_grouped_bf16_gemm_nt_contiguous(a, b, torch.zeros(m, n, dtype=torch.bfloat16), layout, **kw)

    rows = torch.zeros(m, dtype=torch.int32)
    ends = torch.tensor([128, 256], dtype=torch.int32)
    checked = []
    real = checks.check_contiguous_layout
    saved = checks._INDEX_CHECKS.value
    try:
        checks.check_contiguous_layout = lambda *a: checked.append(1) or real(*a)
        for kw, layout, served in (
            ({"check_layout": False}, rows, True),
            ({}, rows, False),  # index checks on (the rig's setting)
            ({"check_layout": True}, rows, False),
            ({"check_layout": False, "use_psum_layout": True}, ends, False),  # zero padding: torch on values
            ({"check_layout": False, "use_psum_layout": True, "ensure_zero_padding": False}, ends, True),
        ):
            launch.forget_calls()
            call(layout, **kw)
            before, n_checked = _hits(), len(checked)
            call(layout.clone(), **kw)
            assert _hits() - before == int(served), kw
            assert len(checked) - n_checked == int(kw.get("check_layout", True) is not False), kw
        dg.set_index_checks(False)
        launch.forget_calls()
        call(rows)
        before = _hits()
        call(rows.clone())
        assert _hits() == before + 1, "index checks off: nothing reads the layout"
        dg.set_index_checks(True)
        before = _hits()
        call(rows.clone())
        assert _hits() == before and len(checked) > 0, "index checks back on: checked again"
    finally:
        checks.check_contiguous_layout = real
        checks._INDEX_CHECKS.value = saved


@pytest.mark.parametrize("fp8", [False, True])
def test_a_bad_layout_after_a_served_call_leaves_no_entry(rig, fp8):  # noqa: F811 - the imported rig fixture
    """A served signature (check_layout=False), then the same tensors with check_layout=True and a layout naming
    no group: the ValueError, and no new cache entry (the checked call keys apart from the served one; its entry
    is stored only once the layout's values passed). H200 run 133 found BF16 storing it first."""
    g, m, n, k = 2, 256, 128, 256
    d = torch.zeros(m, n, dtype=torch.bfloat16)
    if fp8:
        r = (1, 128, 128)
        sfa = dg.transform_sf_into_required_layout(torch.ones(m, k // 128), m, k, r, is_sfa=True)
        sfb = dg.transform_sf_into_required_layout(torch.ones(g, n // 128, k // 128), n, k, r, num_groups=g)
        x, w = torch.zeros(m, k, dtype=torch.float8_e4m3fn), torch.zeros(g, n, k, dtype=torch.float8_e4m3fn)
        call = lambda layout, **kw: dg.m_grouped_fp8_gemm_nt_contiguous((x, sfa), (w, sfb), d, layout, **kw)
    else:
        a, b = torch.zeros(m, k, dtype=torch.bfloat16), torch.zeros(g, n, k, dtype=torch.bfloat16)
        call = lambda layout, **kw: dg.m_grouped_bf16_gemm_nt_contiguous(a, b, d, layout, **kw)
    rows = torch.zeros(m, dtype=torch.int32)
    call(rows, check_layout=False)
    call(rows.clone(), check_layout=False)
    entries = rig.entries()
    bad = rows.clone()
    bad[0] = g + 5
    with pytest.raises(ValueError, match="group"):
        call(bad, check_layout=True)
    assert rig.entries() == entries, "a call that failed its layout check was cached"
    call(rows.clone(), check_layout=True)  # the same signature, legal: checked, then stored
    assert rig.entries() == entries + 1


def _served_with_own_output(the_rig, allocs, fn, build, kwargs, index_checked: bool = True) -> None:
    """Index and scale checks off: the second call of a signature is served and returns an output it allocated
    (the checked call's shape, strides and dtype, a new buffer), launched with that buffer's address; index checks
    on: checked (the indices are read per call)."""

    def call(args, names):
        the_rig.launches.clear()
        allocs.names = names
        try:
            out = fn(*args, **kwargs)
        finally:
            allocs.names = None
        return out, _normalize(the_rig.launches, names)

    saved = checks._INDEX_CHECKS.value
    checks._INDEX_CHECKS.value = False
    try:
        args1, names1 = build()
        cold, cold_launches = call(args1, names1)
        args2, names2 = build()
        before = _hits()
        warm, warm_launches = call(args2, names2)
        assert _hits() == before + 1
        assert warm_launches == cold_launches and len(cold_launches) == 1
        assert any(v == "@alloc0" for _, v in cold_launches[0].args), "the output buffer is the allocation"
        assert (warm.shape, warm.stride(), warm.dtype, warm.storage_offset()) == (
            cold.shape, cold.stride(), cold.dtype, cold.storage_offset()
        )  # fmt: skip
        assert (warm._base if warm._base is not None else warm) is names2["alloc0"]
        assert warm.data_ptr() != cold.data_ptr()
        if not index_checked:
            return
        checks._INDEX_CHECKS.value = True
        before = _hits()
        call(*build())
        assert _hits() == before, "index checks on: the indices are read, the call is checked"
    finally:
        checks._INDEX_CHECKS.value = saved


@pytest.mark.parametrize("logits_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("max_seqlen_k", [0, 256])
def test_mqa_logits_served_with_logits_of_its_own(rig, monkeypatch, logits_dtype, max_seqlen_k):  # noqa: F811 - the imported rig fixture
    s, h, d, sk = 64, 32, 128, 512

    def build():
        q = torch.zeros(s, h, d, dtype=torch.float8_e4m3fn)
        kv, kv_sf = torch.zeros(sk, d, dtype=torch.float8_e4m3fn), torch.ones(sk)
        w, ks = torch.ones(s, h), torch.zeros(s, dtype=torch.int32)
        ke = torch.full((s,), max_seqlen_k or sk, dtype=torch.int32)
        args = ((q, None), (kv, kv_sf), w, ks, ke, max_seqlen_k)
        return args, _names(args, {})

    allocs = _Allocations(monkeypatch)
    _served_with_own_output(rig, allocs, dg.fp8_fp4_mqa_logits, build, {"logits_dtype": logits_dtype})


@pytest.mark.parametrize("bare_q", [False, True])
@pytest.mark.parametrize("clean_logits", [False, True])
def test_paged_mqa_logits_served_with_logits_of_its_own(rig, monkeypatch, bare_q, clean_logits):  # noqa: F811 - the imported rig fixture
    h, d, batch, block_kv, ctx = 32, 128, 8, 64, 512
    blocks = batch * ctx // block_kv

    def build():
        cache = torch.zeros(blocks, block_kv, 1, d + 4, dtype=torch.uint8)
        table = torch.arange(blocks, dtype=torch.int32).view(batch, -1)
        lens = torch.full((batch,), ctx, dtype=torch.int32)
        q = torch.zeros(batch, 1, h, d, dtype=torch.float8_e4m3fn)
        meta = torch.zeros(SMS + 1, 2, dtype=torch.int32)
        args = (q if bare_q else (q, None), cache, torch.ones(batch, h), lens, table, meta, ctx)
        return args, _names(args, {})

    allocs = _Allocations(monkeypatch)
    _served_with_own_output(rig, allocs, dg.fp8_fp4_paged_mqa_logits, build, {"clean_logits": clean_logits})


def test_gated_delta_rule_served_unless_autograd_or_offsets_want_it(rig, monkeypatch):  # noqa: F811 - the imported rig fixture
    """A served forward returns (o, final_state) of its own (and None without a final state); inputs that require
    grad take the autograd Function (an o with a grad_fn), never the table; varlen is served only where
    cu_seqlens' values are not read (index checks off) and only for int32 offsets (int64 ones are clamped into a
    temporary every call); the PDL switch is part of the signature (the plan's overlap follows it)."""
    allocs = _Allocations(monkeypatch)
    b, t, h, hv = 1, 200, 2, 4

    def build(final=True, varlen=False, offsets=torch.int32):
        kw = {"output_final_state": final, "initial_state": torch.zeros(3 if varlen else b, hv, 128, 128)}
        if varlen:
            kw["cu_seqlens"] = torch.tensor([0, 50, 120, t], dtype=offsets)
        args = (torch.zeros(b, t, h, 128, dtype=torch.bfloat16), torch.zeros(b, t, h, 128, dtype=torch.bfloat16),
                torch.zeros(b, t, hv, 128, dtype=torch.bfloat16), torch.zeros(b, t, hv),
                torch.zeros(b, t, hv, dtype=torch.bfloat16))  # fmt: skip
        return args, kw

    def call(args, kw):
        rig.launches.clear()
        names = _names(args, kw)
        allocs.names = names
        try:
            out = dg.chunk_gated_delta_rule(*args, **kw)
        finally:
            allocs.names = None
        return out, _normalize(rig.launches, names), names

    for final in (True, False):
        launch.forget_calls()
        (o1, f1), cold, _ = call(*build(final))
        before = _hits()
        (o2, f2), warm, names2 = call(*build(final))
        assert _hits() == before + 1 and warm == cold and len(cold) >= 2
        assert o2.shape == o1.shape and o2.dtype == o1.dtype and o2 is names2["alloc0"]
        assert (f2 is None) == (not final) and (f1 is None) == (not final)
        if final:
            assert f2 is names2["alloc1"] and f2.shape == (b, hv, 128, 128)
    # autograd: the served signature (the last one), inputs requiring grad: the Function runs (checked), o carries
    # a grad_fn
    args, kw = build(final=False)
    args[2].requires_grad_(True)
    before = _hits()
    o, _ = dg.chunk_gated_delta_rule(*args, **kw)
    assert _hits() == before and o.grad_fn is not None
    with torch.no_grad():  # no graph wanted: served
        dg.chunk_gated_delta_rule(*args, **kw)
    assert _hits() == before + 1
    # varlen: index checks on (the rig's) read the offsets: checked; off: served, int32 only
    for checks_on, offsets, served in (
        (True, torch.int32, False),
        (False, torch.int32, True),
        (False, torch.int64, False),
    ):
        saved = checks._INDEX_CHECKS.value
        checks._INDEX_CHECKS.value = checks_on
        try:
            launch.forget_calls()
            call(*build(varlen=True, offsets=offsets))
            before = _hits()
            call(*build(varlen=True, offsets=offsets))
            assert _hits() - before == int(served), (checks_on, offsets)
        finally:
            checks._INDEX_CHECKS.value = saved
    # the PDL switch: a new signature, planned anew
    launch.forget_calls()
    call(*build())
    monkeypatch.setattr(launch.BOUND, "pdl", False)
    before = _hits()
    call(*build())
    assert _hits() == before, "PDL off is another signature"


def test_served_under_inference_mode(rig):  # noqa: F811 - the imported rig fixture
    """Serving engines run under torch.inference_mode, whose tensors keep no version counter: a first call records
    (it raised reading one, red-team review of the allocations change), a second is served, for a GEMM table and
    for one that returns its allocations (the gated delta rule's forward)."""
    with torch.inference_mode():
        launch.forget_calls()
        a, b = torch.zeros(64, 128, dtype=torch.bfloat16), torch.zeros(128, 128, dtype=torch.bfloat16)
        dg.bf16_gemm_nt(a, b, torch.zeros(64, 128, dtype=torch.bfloat16))
        before = _hits()
        dg.bf16_gemm_nt(a.clone(), b.clone(), torch.zeros(64, 128, dtype=torch.bfloat16))
        assert _hits() == before + 1

        def gdr():
            x = lambda *shape, dt=torch.bfloat16: torch.zeros(*shape, dtype=dt)
            return dg.chunk_gated_delta_rule(
                x(1, 64, 2, 128), x(1, 64, 2, 128), x(1, 64, 2, 128), x(1, 64, 2, dt=torch.float32), x(1, 64, 2),
                output_final_state=True,
            )  # fmt: skip

        o1, f1 = gdr()
        before = _hits()
        o2, f2 = gdr()
        assert _hits() == before + 1 and o2.shape == o1.shape and f2.shape == f1.shape
        assert o2.is_inference() and o2.data_ptr() != o1.data_ptr()


def test_the_paged_schedule_is_served_with_a_schedule_of_its_own(rig, monkeypatch):  # noqa: F811 - the imported rig fixture
    from deep_gemm_sm120.families.paged_mqa_logits import metadata

    monkeypatch.setattr(metadata, "device_of", lambda **t: 0)

    def build():
        args = (torch.full((8, 2), 512, dtype=torch.int32), 64, SMS)
        return args, _names(args, {})

    allocs = _Allocations(monkeypatch)
    launch.forget_calls()
    _served_with_own_output(rig, allocs, dg.get_paged_mqa_logits_metadata, build, {}, index_checked=False)


class _OnDevice(torch.Tensor):
    """A CPU tensor that says it is on CUDA: the slot-table helpers take their kernel path (the rig's launch)."""

    @property
    def is_cuda(self):
        return True


@pytest.mark.parametrize("paged", [False, True])
def test_the_sparse_slot_tables_are_served_with_a_table_of_their_own(rig, monkeypatch, paged):  # noqa: F811 - the imported rig fixture
    """get_sparse_mqa_logits_metadata (index checks off: ks / ke are not read) and the paged form (nothing read):
    the second call of a signature is served, its table allocated per call and returned."""
    from deep_gemm_sm120.families.sparse_mqa_logits import metadata

    monkeypatch.setattr(metadata, "device_of", lambda **t: 0)
    s, slots, block = 16, 4, 16

    def dev(t):
        return t.as_subclass(_OnDevice)

    def build():
        idx = dev(torch.zeros(s, slots, dtype=torch.int32))
        if paged:
            args = (dev(torch.full((s,), 256, dtype=torch.int32)), dev(torch.zeros(s, 8, dtype=torch.int32)),
                    dev(torch.zeros(s, dtype=torch.int32)), 64, idx, torch.float8_e4m3fn, block)  # fmt: skip
        else:
            ke = dev(torch.full((s,), 256, dtype=torch.int32))
            args = (dev(torch.zeros(s, dtype=torch.int32)), ke, 512, idx, torch.float8_e4m3fn, block)
        return args, _names(args, {})

    fn = dg.get_paged_sparse_mqa_logits_metadata if paged else dg.get_sparse_mqa_logits_metadata
    allocs = _Allocations(monkeypatch)
    launch.forget_calls()
    _served_with_own_output(rig, allocs, fn, build, {}, index_checked=not paged)


def test_what_forgets_calls_forgets_served_ones(rig, monkeypatch):  # noqa: F811 - the imported rig fixture
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # set_num_sms asks
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    a, b = torch.zeros(64, 128, dtype=torch.bfloat16), torch.zeros(128, 128, dtype=torch.bfloat16)
    d = torch.zeros(64, 128, dtype=torch.bfloat16)
    for forget in (launch.forget_calls, arch.reset_targets, lambda: dg.set_num_sms(7)):
        dg.bf16_gemm_nt(a, b, d)
        assert sum(len(f) for f in launch._FASTS) >= 1
        forget()
        assert sum(len(f) for f in launch._FASTS) == 0
        before = rig.prepares
        dg.bf16_gemm_nt(a, b, d)
        assert rig.prepares == before + 1


def test_compile_mode_reaches_served_calls(rig):  # noqa: F811 - the imported rig fixture
    a, b = torch.zeros(64, 128, dtype=torch.bfloat16), torch.zeros(128, 128, dtype=torch.bfloat16)
    d = torch.zeros(64, 128, dtype=torch.bfloat16)
    dg.bf16_gemm_nt(a, b, d)
    stub = launch.BOUND.launch
    try:
        launch.set_compile_mode(1)
        before, launched = _hits(), len(rig.launches)
        dg.bf16_gemm_nt(a, b, d)
        assert _hits() == before + 1 and len(rig.launches) == launched, "served, and nothing launched"
    finally:
        launch.BOUND.compile_mode = 0
        launch.BOUND.launch, launch.BOUND.stream = stub, lambda i: 1234


def test_a_hit_with_the_runtime_launch_entry_launches_in_cpp():
    """With `_C.launch` as the launcher's entry, a hit calls the runtime's launch directly (no boxing): on a
    machine without a driver that launch raises the runtime's own error, which reaches the caller."""
    lau = Launcher()
    lau.launch = C.launch
    table = C.FastCalls("T", lau, 4)
    a = torch.zeros(64)
    assert table.add((a,), [_record(_buf(), _maps(_addr(a)), (), handle=12345)])
    if C.driver_available():  # a driver: the handle is checked first
        with pytest.raises(ValueError, match="unknown kernel handle 12345"):
            table(a)
    else:
        with pytest.raises(RuntimeError, match="libcuda"):
            table(a)
    assert table.hits == 0


# ---------------------------------------------------------------- regressions: a red-team review's breaks
# (each failed or crashed before its fix)


def _warm_and_cold(rig, call, names) -> tuple:  # noqa: F811 - the rig fixture's object, passed in
    rig.launches.clear()
    call()
    warm = _normalize(rig.launches, names)
    launch.forget_calls()
    rig.launches.clear()
    call()
    return warm, _normalize(rig.launches, names)


def _pinned_switch(monkeypatch, names: dict):
    """Patch bf16's _operand_maps (inside a checked call, before its launch) to wait on per-thread events."""
    real = bf16_api._operand_maps

    def maps(*args):
        hook = names.get(threading.current_thread().name)
        if hook:
            hook()
        return real(*args)

    monkeypatch.setattr(bf16_api, "_operand_maps", maps)
    return real


def test_two_threads_first_calls_record_apart(rig, monkeypatch):  # noqa: F811 - the imported rig fixture
    """Thread A's checked nt call and thread B's checked nn call of the same tensors interleave inside their
    recordings: each table keeps its own call's launch (one shared recording slot gave B's table A's nt kernel)."""
    m, k = 64, 128
    a, b, d = (torch.zeros(m, k, dtype=torch.bfloat16), torch.zeros(k, k, dtype=torch.bfloat16),
               torch.zeros(m, k, dtype=torch.bfloat16))  # fmt: skip
    a_in, b_in, a_done = threading.Event(), threading.Event(), threading.Event()
    real = _pinned_switch(
        monkeypatch, {"A": lambda: (a_in.set(), b_in.wait(5)), "B": lambda: (b_in.set(), a_done.wait(5))}
    )

    def run_a():
        dg.bf16_gemm_nt(a, b, d)
        a_done.set()

    ta = threading.Thread(target=run_a, name="A")
    tb = threading.Thread(target=lambda: (a_in.wait(5), dg.bf16_gemm_nn(a, b, d)), name="B")
    ta.start(), tb.start(), ta.join(), tb.join()
    monkeypatch.setattr(bf16_api, "_operand_maps", real)
    assert launch._REC.rec is None
    served = []
    for fn in (dg.bf16_gemm_nn, dg.bf16_gemm_nt):  # both recorded: each is served from its own table
        before = _hits()
        fn(torch.zeros_like(a), torch.zeros_like(b), torch.zeros_like(d))
        served.append(_hits() - before)
    assert served == [1, 1]
    for fn in (dg.bf16_gemm_nn, dg.bf16_gemm_nt):
        a2, b2, d2 = torch.zeros_like(a), torch.zeros_like(b), torch.zeros_like(d)
        fn(a2, b2, d2)  # recorded again after the previous loop's forget
        warm, cold = _warm_and_cold(rig, lambda fn=fn: fn(a2, b2, d2), {"a": a2, "b": b2, "d": d2})
        assert warm == cold and warm[0].kernel.endswith("_nn") == (fn is dg.bf16_gemm_nn)


def test_many_threads_first_calls(rig):  # noqa: F811 - the imported rig fixture
    """Eight threads making first calls of many signatures at a tiny switch interval: every table entry then
    replays what a checked call of its signature launches."""
    saved = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    errors = []

    def worker(tid):
        try:
            for i in range(150):
                k = 8 * (1 + (tid * 1000 + i) % 300)
                dg.bf16_gemm_nt(*(torch.zeros(*s, dtype=torch.bfloat16) for s in ((64, k), (128, k), (64, 128))))
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(saved)
    assert not errors
    for k in (8, 16, 800, 2400):
        a, b, d = (torch.zeros(*s, dtype=torch.bfloat16) for s in ((64, k), (128, k), (64, 128)))
        warm, cold = _warm_and_cold(rig, lambda: dg.bf16_gemm_nt(a, b, d), {"a": a, "b": b, "d": d})
        assert warm == cold, k


def test_forget_calls_during_a_first_call(rig, monkeypatch):  # noqa: F811 - the imported rig fixture
    """set_num_sms from another thread while a first call records: the recording made for the old SM count is
    not kept (it was added after the forget, and served the old grid)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    a, b, d = (torch.zeros(*s, dtype=torch.bfloat16) for s in ((2048, 256), (2048, 256), (2048, 2048)))
    in_run, go = threading.Event(), threading.Event()
    real = _pinned_switch(monkeypatch, {"A": lambda: (in_run.set(), go.wait(5))})
    th = threading.Thread(target=lambda: dg.bf16_gemm_nt(a, b, d), name="A")
    th.start()
    assert in_run.wait(5)
    dg.set_num_sms(7)
    go.set()
    th.join()
    monkeypatch.setattr(bf16_api, "_operand_maps", real)
    a2, b2, d2 = torch.zeros_like(a), torch.zeros_like(b), torch.zeros_like(d)
    warm, cold = _warm_and_cold(rig, lambda: dg.bf16_gemm_nt(a2, b2, d2), {"a": a2, "b": b2, "d": d2})
    assert warm == cold and cold[0].grid[0] <= 7


def test_a_list_pair_whose_item_empties_it():
    """An object in a list pair whose dtype read empties the list (dropping the only reference to itself): the
    signature reads a copy, the call gets the checked path's TypeError (it crashed the process before)."""
    pair: list = []

    class Emptying:
        @property
        def dtype(self):
            pair.clear()
            return torch.float8_e4m3fn

        shape, is_cuda = torch.Size([64, 128]), True

        def stride(self):
            return (128, 1)

        def get_device(self):
            return 0

        def data_ptr(self):
            return 1 << 40

    pair.extend([Emptying(), torch.zeros(64, 1, dtype=torch.int32)])
    w = (torch.zeros(128, 128, dtype=torch.float8_e4m3fn), torch.zeros(128, 1, dtype=torch.int32))
    with pytest.raises(TypeError):
        dg.fp8_fp4_gemm_nt(pair, w, torch.zeros(64, 128, dtype=torch.bfloat16))


def test_a_launcher_that_clears_the_table_when_read():
    """Reading the launcher's attributes may run Python that clears the table: the hit still launches its entry
    (an iterator into the table was used after the clear before)."""
    table = C.FastCalls("T", None, 4)  # placeholder launcher, replaced below
    rec = Launcher()

    class Clearing:
        pdl = True
        stream = staticmethod(rec._stream)

        @property
        def launch(self):
            table.clear()
            return rec._record

    table = C.FastCalls("T", Clearing(), 4)
    a = torch.zeros(64)
    assert table.add((a,), [_record(_buf(), _maps(_addr(a)), ())])
    assert table(a) is True and len(rec.launches) == 1 and len(table) == 0


def test_a_python_stream_getter_that_makes_a_served_call():
    """A stream getter written in Python that makes a served call of its own on the same thread: the outer launch
    still carries its own parameters (the getter ran after the buffers were filled before)."""
    lau = Launcher()
    inner = C.FastCalls("T", lau, 4)
    outer = C.FastCalls("T", lau, 4)
    x, y = torch.zeros(64), torch.zeros(64)
    assert inner.add((x,), [_record(_buf(_addr(x), scalar=1), _maps(_addr(x)), (0,), handle=1)])
    assert outer.add((y,), [_record(_buf(_addr(y), scalar=2), _maps(_addr(y)), (0,), handle=2)])
    depth = []

    def stream(index):
        if not depth:
            depth.append(1)
            assert inner(x) is True
        return 5

    lau.stream = stream
    assert outer(y) is True
    (first, second) = lau.launches
    assert first[0] == 1 and first[8] == _buf(_addr(x), scalar=1)
    assert second[0] == 2 and second[8] == _buf(_addr(y), scalar=2) and second[9] == _maps(_addr(y))
