"""The segmented gated-delta-rule walk's host wiring, on the CPU with the launches captured (the GPU half is
tests/test_gdr_segments_gpu.py): the prep, the transition pass over a doubled grid (no o, the maps as its final
states), the combine (one launch: the maps, the initial state, every segment's first state) and the output pass
(from those first states, o and the final state), with the parameters each kernel's slot arithmetic assumes."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch
from launch_stub import stub_gpu

import deep_gemm_sm120 as dg
from deep_gemm_sm120 import arch, jit, launch
from deep_gemm_sm120.core.arith import ceil_div
from deep_gemm_sm120.families.gated_delta_rule import api
from deep_gemm_sm120.families.gated_delta_rule.plan import SEGMENT_ENV

SMS = 132


@pytest.fixture()
def captured(monkeypatch):
    specs: dict[int, object] = {}
    seen: list[tuple[str, int, dict]] = []

    def fake_get_kernel(spec, target, dev):
        specs[len(specs)] = spec
        return jit.LoadedKernel(len(specs) - 1, spec.threads, spec.smem_bytes, spec.name, True)

    def fake_launch(handle, gx, gy, gz, block, smem, stream, pdl, params, tmaps):
        spec = specs[handle]
        seen.append((spec.name, gx, spec.params.unpack(params)))

    stub_gpu(monkeypatch, fake_get_kernel, fake_launch, SMS, 1)
    monkeypatch.setattr(api, "device_of", lambda **t: 0)
    api._kernels.cache_clear()
    api._segment_kernels.cache_clear()
    launch.forget_calls()
    arch.reset_targets()
    yield seen
    api._kernels.cache_clear()
    api._segment_kernels.cache_clear()
    launch.forget_calls()
    arch.reset_targets()


def _inputs(b, t, h, hv, state_n=None):
    q = torch.zeros(b, t, h, 128, dtype=torch.bfloat16)
    v = torch.zeros(b, t, hv, 128, dtype=torch.bfloat16)
    g, beta = torch.zeros(b, t, hv), torch.zeros(b, t, hv, dtype=torch.bfloat16)
    init = torch.zeros(state_n, hv, 128, 128) if state_n else None
    return (q, q.clone(), v, g, beta), init


@pytest.mark.parametrize("varlen", [False, True])
@pytest.mark.parametrize("with_state", [False, True])
def test_segmented_call_launches_the_three_passes(captured, monkeypatch, varlen, with_state):
    monkeypatch.setenv(SEGMENT_ENV, "3")
    n, hv, c = (3, 4, 32) if varlen else (2, 4, 32)
    t = 700
    b = 1 if varlen else n
    args, init = _inputs(b, t, 2, hv, n if with_state else None)
    cu = torch.tensor([0, 100, 100, 700], dtype=torch.int32) if varlen else None
    o, final = dg.chunk_gated_delta_rule(
        *args, initial_state=init, output_final_state=True, cu_seqlens=cu, chunk_size=c
    )
    names = [name for name, _, _ in captured]
    assert names[0].startswith("gated_delta_rule_prep_c32_") and "persistent" not in names[0]
    # the transition pass is the recurrence's own instance (kTransitions: no q, attn or o), the output pass the plain
    assert names[1] == names[3] + "_tr" and names[3].startswith("gated_delta_rule_fwd_c32_")
    assert names[2] == "gated_delta_rule_combine_c16" and len(names) == 4
    (_, ctas1, p1), (_, ctas2, p2), (_, ctas3, p3) = captured[1:]
    segments = ceil_div(ceil_div(t, c), 3)  # segment slots a sequence
    vslice = int(names[3].split("_v")[1].split("_")[0])
    units = n * segments * hv * (128 // vslice)
    # the transition pass: twice the units, from zero (B) and the identity (A), no o, the maps as final states
    assert ctas1 == 2 * units and "transitions" not in p1 and p1["o"] == 0 and p1["initial_state"] == 0
    assert p1["segments"] == segments and p1["segment_tokens"] == 3 * c
    # the combine: one CTA per (16 columns, pair), the maps, the caller's initial state, every first state
    assert ctas2 == n * hv * 8 and p2["maps"] == p1["final_state"] and p2["segments"] == segments
    assert p2["pairs"] == n * hv and p2["initial_state"] == (init.data_ptr() if with_state else 0)
    # ... and how many of them hold tokens, from the sequences as the passes read them (cu', or T per sequence)
    assert p2["cu_seqlens"] == p1["cu_seqlens"] and p2["seq_len"] == p1["seq_len"] == t
    assert p2["value_heads"] == hv and p2["segment_tokens"] == 3 * c
    # the output pass: from the first states, o and the final state
    assert ctas3 == units and p3["initial_state"] == p2["firsts"]
    assert p3["o"] == o.data_ptr() and p3["final_state"] == final.data_ptr()
    assert p3["segments"] == segments and p3["segment_tokens"] == 3 * c
    assert p1["cu_seqlens"] == p3["cu_seqlens"] and (p1["cu_seqlens"] != 0) == varlen


def test_unsplit_call_keeps_its_two_launches(captured, monkeypatch):
    monkeypatch.setenv(SEGMENT_ENV, "0")
    args, init = _inputs(1, 700, 2, 4, 1)
    dg.chunk_gated_delta_rule(*args, initial_state=init, output_final_state=True, chunk_size=32)
    names = [name for name, _, _ in captured]
    assert len(names) == 2 and "combine" not in "".join(names)
    assert captured[1][2]["segments"] == 0 and not names[1].endswith("_tr")


def test_a_misaligned_initial_state_reaches_the_combine_aligned(captured, monkeypatch):
    """The combine reads the initial state in 16-byte loads: a view 4 bytes into its storage is copied."""
    monkeypatch.setenv(SEGMENT_ENV, "3")
    args, _ = _inputs(1, 700, 2, 4)
    init = torch.zeros(4 * 128 * 128 + 1)[1:].view(1, 4, 128, 128)
    assert init.data_ptr() % 16 == 4
    dg.chunk_gated_delta_rule(*args, initial_state=init, output_final_state=True, chunk_size=32)
    p2 = captured[2][2]
    assert p2["initial_state"] % 16 == 0 and p2["initial_state"] != init.data_ptr()


@pytest.mark.parametrize("varlen", [False, True])
@pytest.mark.parametrize("segments", ["0", "3"])
def test_the_reverse_pass_reads_the_states_pass_prep(captured, monkeypatch, varlen, segments):
    """The backward's two sequential passes run the prep kernel once: the states pass hands its scratch over
    (gdr_states' scratch_out) and the reverse pass reads its factors there (its tensor maps and cu' are the
    states pass's) instead of launching the prep again; a scratch of another size is not used."""
    import struct

    from deep_gemm_sm120.families.gated_delta_rule import backward as bw

    monkeypatch.setenv(SEGMENT_ENV, segments)
    tmaps: list[bytes] = []
    real = launch.BOUND.launch

    def keep_maps(*a):
        tmaps.append(a[-1])
        return real(*a)

    monkeypatch.setattr(launch.BOUND, "launch", keep_maps)
    n, hv, t = (3, 4, 700) if varlen else (2, 4, 700)
    b = 1 if varlen else n
    args, init = _inputs(b, t, 2, hv, n)
    cu = torch.tensor([0, 100, 100, 700], dtype=torch.int32) if varlen else None
    layout = bw.device_layout(b, t, cu, 64, torch.device("cpu"), exact=True)
    slots, count = bw.state_slots(layout), layout.token.shape[0]
    kept: list = []
    api.gdr_states(*args, None, init, cu, True, slots, count, kept)
    assert len(kept) == 1
    before = len(captured)
    do = torch.zeros_like(args[2])
    api.gdr_state_grads(*args, None, do, None, cu, True, slots, count, True, kept[0])
    names = [name for name, _, _ in captured]
    preps = [i for i, name in enumerate(names) if name.startswith("gated_delta_rule_prep")]
    assert len(preps) == 1 and names[before].startswith("gated_delta_rule_bwd_c"), names
    prep_params, bwd_params = captured[preps[0]][2], captured[before][2]
    assert bwd_params["cu_seqlens"] == prep_params["cu_effective"]
    for part in ("tw", "attn", "gates"):  # the reverse pass's tensor maps address the states pass's factors
        assert struct.pack("<Q", prep_params[part]) in tmaps[before], part
    # a scratch of another layout's size: the reverse pass runs its own prep
    api.gdr_state_grads(*args, None, do, None, cu, True, slots, count, True, torch.zeros(8, dtype=torch.uint8))
    assert [name for name, _, _ in captured][-2].startswith("gated_delta_rule_prep")


def _pack_names(captured, lens, hv, cpu: bool) -> list[str]:
    offsets = [0]
    for n in lens:
        offsets.append(offsets[-1] + n)
    args, _ = _inputs(1, offsets[-1], 2, hv)
    cu = torch.tensor(offsets, dtype=torch.int32)
    captured.clear()
    extra = {"cu_seqlens_cpu": cu.clone().to(torch.int64)} if cpu else {}
    dg.chunk_gated_delta_rule(*args, cu_seqlens=cu, chunk_size=32, **extra)
    return [name for name, _, _ in captured]


def test_host_lengths_keep_an_equal_pack_whole_and_still_cut_a_long_sequence(captured):
    """cu_seqlens_cpu (FLA's keyword, a host copy of the offsets): an equal pack that the whole-pack rule would
    segment without cutting anything walks whole (two launches, no combine); a long sequence among short ones is
    still cut (the transition pass, the combine, the output pass)."""
    equal = (2048,) * 8
    assert "gated_delta_rule_combine_c16" in _pack_names(captured, equal, 8, cpu=False)
    names = _pack_names(captured, equal, 8, cpu=True)
    assert len(names) == 2 and "combine" not in "".join(names) and not names[1].endswith("_tr")
    long_pack = (16384,) + (512,) * 7
    for cpu in (False, True):
        names = _pack_names(captured, long_pack, 8, cpu)
        assert len(names) == 4 and names[2] == "gated_delta_rule_combine_c16", cpu


def test_host_lengths_are_checked(captured):
    args, _ = _inputs(1, 100, 2, 4)
    cu = torch.tensor([0, 40, 100], dtype=torch.int32)
    call = lambda host, cu=cu: dg.chunk_gated_delta_rule(*args, cu_seqlens=cu, chunk_size=32, cu_seqlens_cpu=host)
    with pytest.raises(TypeError, match="cu_seqlens_cpu must be a CPU torch.Tensor"):
        call([0, 40, 100])
    with pytest.raises(TypeError, match="cu_seqlens_cpu must be int32 or int64"):
        call(torch.tensor([0.0, 40.0, 100.0]))
    with pytest.raises(ValueError, match="cu_seqlens_cpu must be on the CPU"):
        call(torch.zeros(3, dtype=torch.int32, device="meta"))
    with pytest.raises(ValueError, match="cu_seqlens' shape"):
        call(torch.tensor([0, 100], dtype=torch.int32))
    for bad in ([0, 60, 50], [1, 40, 100], [0, 40, 99]):
        with pytest.raises(ValueError, match="from 0 to T = 100 without decreasing"):
            call(torch.tensor(bad, dtype=torch.int32))
    with pytest.raises(ValueError, match="pass cu_seqlens too"):
        call(torch.tensor([0, 100], dtype=torch.int32), cu=None)
    assert not captured, "nothing launched for a bad host copy"
    o, _ = call(torch.tensor([0, 40, 100], dtype=torch.int32))  # a good one: the call runs
    assert o.shape == (1, 100, 4, 128)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_the_passes_store_states_in_the_inputs_dtype_and_b3_takes_only_those(captured, dtype):
    """The states pass and the reverse pass store h and dh' in the inputs' dtype (B3 reads them as its mma
    operands; fp32 doubled the bytes both write and B3 reads) and dh0 in fp32; B3 refuses states of another dtype
    (TypeError: its kernel would read fp32 words as bf16 pairs) or shape (ValueError) before any launch, and
    launches with the passes' own tensors."""
    from deep_gemm_sm120.families.gated_delta_rule import backward as bw

    args, init = _inputs(2, 200, 2, 4, 2)
    args = tuple(x.to(dtype) if x.dtype == torch.bfloat16 else x for x in args)
    layout = bw.device_layout(2, 200, None, 64, torch.device("cpu"), exact=True)
    slots, count = bw.state_slots(layout), layout.token.shape[0]
    states = api.gdr_states(*args, None, init, None, True, slots, count)
    do = torch.zeros_like(args[2])
    dh_next, dh0 = api.gdr_state_grads(*args, None, do, None, None, True, slots, count, True)
    assert states.dtype == dh_next.dtype == dtype and dh0.dtype == torch.float32
    assert states.shape == dh_next.shape == (count, 4, 128, 128)
    first, length = layout.token[:, 0].to(torch.int32), layout.valid.sum(-1, dtype=torch.int32)
    b3 = lambda s, d: api.gdr_chunk_grads(*args, None, do, True, s, d, first, length, True)
    launched = len(captured)
    with pytest.raises(TypeError, match="states must be in q's dtype"):
        b3(states.float(), dh_next)
    with pytest.raises(TypeError, match="dh_next must be in q's dtype"):
        b3(states, dh_next.float())
    assert count == 8, "two sequences of four 64-token chunks"
    with pytest.raises(ValueError, match=r"states must be \[8, 4, 128, 128\]"):
        b3(states[:-1], dh_next)
    assert len(captured) == launched, "a refused call launched"
    b3(states, dh_next)
    name, _, params = captured[-1]
    assert name.startswith("gated_delta_rule_bwd_chunk")
    assert params["states"] == states.data_ptr() and params["dh_next"] == dh_next.data_ptr()


def test_the_fold_knob_overrides_the_plan_and_is_checked(captured, monkeypatch):
    """DG_SM120_GDR_FOLD (measurement) sets B3's fold where the call leaves it to the plan; unset or 0 plans it,
    one that does not divide the group is refused as an explicit fold is, and a non-number names what was
    expected."""
    from deep_gemm_sm120.families.gated_delta_rule import backward as bw
    from deep_gemm_sm120.families.gated_delta_rule.bwd_chunk import FOLD_ENV

    args, init = _inputs(1, 128, 1, 4, 1)
    layout = bw.device_layout(1, 128, None, 64, torch.device("cpu"), exact=True)
    slots, count = bw.state_slots(layout), layout.token.shape[0]
    states = api.gdr_states(*args, None, init, None, True, slots, count)
    do = torch.zeros_like(args[2])
    dh_next, _ = api.gdr_state_grads(*args, None, do, None, None, True, slots, count, False)
    first, length = layout.token[:, 0].to(torch.int32), layout.valid.sum(-1, dtype=torch.int32)

    def fold_of_launch() -> int:
        api.gdr_chunk_grads(*args, None, do, True, states, dh_next, first, length, True)
        return captured[-1][2]["fold"]

    monkeypatch.delenv(FOLD_ENV, raising=False)
    planned = fold_of_launch()
    assert planned == 1, "two chunks of four value heads on 132 SMs: a CTA per value head fills one wave"
    for setting, want in (("4", 4), ("2", 2), ("0", planned)):
        monkeypatch.setenv(FOLD_ENV, setting)
        assert fold_of_launch() == want, setting
    monkeypatch.setenv(FOLD_ENV, "3")
    with pytest.raises(ValueError, match="fold=3: expected a divisor"):
        fold_of_launch()
    monkeypatch.setenv(FOLD_ENV, "two")
    with pytest.raises(ValueError, match="DG_SM120_GDR_FOLD='two': expected a positive integer"):
        fold_of_launch()


@pytest.mark.parametrize("varlen", [False, True])
def test_the_states_pass_walks_from_the_training_forwards_first_states(captured, monkeypatch, varlen):
    """A training call's segmented forward leaves its segments' first states in the call's Carried; the
    backward's states pass under the same cut walks from them (prep and the states instance only: no transition
    pass, no combine), and every take empties the slot, so a pass without them (a second take, another cut, a
    forward at another chunk size that leaves nothing) forms its own."""
    from deep_gemm_sm120.families.gated_delta_rule import backward as bw

    monkeypatch.setenv(SEGMENT_ENV, "3")
    n, hv, t = 3, 4, 700
    b = 1 if varlen else n
    args, init = _inputs(b, t, 2, hv, n)
    cu = torch.tensor([0, 100, 100, 700], dtype=torch.int32) if varlen else None
    layout = bw.device_layout(b, t, cu, 64, torch.device("cpu"), exact=True)
    slots, count = bw.state_slots(layout), layout.token.shape[0]
    names = lambda since: [name[-3:] for name, _, _ in captured[since:]]
    states_pass = lambda carried: api.gdr_states(*args, None, init, cu, False, slots, count, None, carried)

    carried = bw.Carried()
    run = api._prepare(*args, None, init, True, cu, False, None)[2]
    run(*args, init, cu, None, carried=carried)
    assert names(0)[1:3] == ["_tr", "c16"]
    firsts = captured[2][2]["firsts"]

    before = len(captured)
    states = states_pass(carried)
    assert names(before)[1:] == ["_st"], names(before)
    walk = captured[-1][2]
    assert walk["initial_state"] == firsts and walk["states"] == states.data_ptr()
    assert carried.detach() == (None, None), "the slot is empty once taken"

    before = len(captured)
    states_pass(carried)
    assert names(before)[1:] == ["_tr", "c16", "_st"], names(before)

    # another cut in the slot: not walked from, and dropped
    carried.put((32, 99, 1), torch.zeros(1))
    before = len(captured)
    states_pass(carried)
    assert names(before)[1:] == ["_tr", "c16", "_st"] and carried.detach() == (None, None)

    # a forward at chunk 64: no chunk-32 states pass could take its first states, so it leaves none
    api._prepare(*args, None, init, True, cu, False, 64)[2](*args, init, cu, None, carried=carried)
    assert "_tr" in names(before) and carried.detach() == (None, None)


def test_a_captured_states_pass_forms_its_own_first_states_after_an_eager_forward(captured, monkeypatch):
    """An eager forward, then its backward captured in a CUDA graph of its own: the captured states pass must not
    address the eager forward's first states (a tensor outside the graph's pool, freed after the capture: every
    replay would read whatever lies there then); it forms its own. (A red-team finding.)"""
    from deep_gemm_sm120.families.gated_delta_rule import backward as bw

    monkeypatch.setenv(SEGMENT_ENV, "3")
    args, init = _inputs(2, 700, 2, 4, 2)
    layout = bw.device_layout(2, 700, None, 64, torch.device("cpu"), exact=True)
    slots, count = bw.state_slots(layout), layout.token.shape[0]
    carried = bw.Carried()
    api._prepare(*args, None, init, True, None, False, None)[2](*args, init, None, None, carried=carried)  # eager
    monkeypatch.setattr(bw, "_capturing", lambda x: True)  # the backward's capture
    before = len(captured)
    api.gdr_states(*args, None, init, None, False, slots, count, None, carried)
    assert [name[-3:] for name, _, _ in captured[before + 1 :]] == ["_tr", "c16", "_st"]


def test_a_failed_states_pass_leaves_the_retry_forming_its_own(captured, monkeypatch):
    """The first states are taken out before the walk is launched: a launch that raises leaves an empty slot, and
    the retry (a second backward, a caller that catches) forms its own first states instead of failing on a
    half-emptied one. (A red-team finding.)"""
    import deep_gemm_sm120.launch as launch_mod
    from deep_gemm_sm120.families.gated_delta_rule import backward as bw

    monkeypatch.setenv(SEGMENT_ENV, "3")
    args, init = _inputs(2, 700, 2, 4, 2)
    layout = bw.device_layout(2, 700, None, 64, torch.device("cpu"), exact=True)
    slots, count = bw.state_slots(layout), layout.token.shape[0]
    carried = bw.Carried()
    api._prepare(*args, None, init, True, None, False, None)[2](*args, init, None, None, carried=carried)
    real, failed = launch_mod.BOUND.launch, []

    def flaky(handle, *a):
        if not failed and len(captured) >= 5:  # the states pass's walk, after its prep
            failed.append(True)
            raise RuntimeError("launch failed")
        return real(handle, *a)

    monkeypatch.setattr(launch_mod.BOUND, "launch", flaky)
    with pytest.raises(RuntimeError, match="launch failed"):
        api.gdr_states(*args, None, init, None, False, slots, count, None, carried)
    before = len(captured)
    api.gdr_states(*args, None, init, None, False, slots, count, None, carried)
    assert [name[-3:] for name, _, _ in captured[before + 1 :]] == ["_tr", "c16", "_st"]


def _spy_firsts(monkeypatch) -> list:
    """Weak references to every fp32 [segments, 8 pairs, 128, 128] tensor the calls allocate (first states)."""
    made: list = []
    real = api.fresh_empty

    def spy(shape, dtype, dev):
        x = real(shape, dtype, dev)
        if dtype == torch.float32 and len(shape) == 4 and shape[1] == 8:
            made.append(weakref.ref(x))
        return x

    monkeypatch.setattr(api, "fresh_empty", spy)
    return made


def _training_call(monkeypatch, chunk, wrap=None, then=None):
    """A training call through api._run with the GPU wiring (the kernels' passes in the Function's meta): CPU
    inputs that claim is_cuda for the call and for then(outputs), if given (its backwards)."""
    monkeypatch.setenv(SEGMENT_ENV, "3")
    args, init = _inputs(2, 700, 2, 4, 2)
    run = api._prepare(*args, None, init, True, None, False, chunk)[2]
    xs = [x.clone().requires_grad_() for x in args]
    with monkeypatch.context() as mp:
        mp.setattr(torch.Tensor, "is_cuda", property(lambda self: True), raising=False)
        call = lambda *t: api._run(run, *t, None, init, None, False)
        out = wrap(call, *xs) if wrap else call(*xs)
        if then is not None:
            then(out)
        return out


def test_first_states_live_as_the_saved_inputs_do(captured, monkeypatch):
    """The first states are one of the Function's saved tensors: activation checkpointing (non-reentrant) frees
    them with the inputs between forward and backward, and a forward at a chunk size no states pass takes keeps
    none; a plain training forward keeps them with its graph. (Red-team findings: they were held by a closure.)"""
    from torch.utils.checkpoint import checkpoint

    made = _spy_firsts(monkeypatch)
    kept = _training_call(monkeypatch, None)
    gc.collect()
    assert len(made) == 1 and made[0]() is not None, "a training forward keeps its first states for its backward"
    del kept
    gc.collect()
    assert made[0]() is None, "freed with the graph"
    for chunk, wrap in ((None, lambda call, *xs: checkpoint(call, *xs, use_reentrant=False)), (64, None)):
        made.clear()
        out = _training_call(monkeypatch, chunk, wrap)
        gc.collect()
        assert made and all(r() is None for r in made), f"chunk {chunk}: first states kept"
        del out


def test_every_backward_of_a_retained_graph_walks_from_the_saved_first_states(captured, monkeypatch):
    """Through the autograd Function (api._run with the GPU wiring): the forward's first states travel as a saved
    tensor and are handed back before each backward, so both backwards of a retained graph run the states pass
    as prep + the states instance from them, then the reverse pass, B3 and the rows pass."""

    def twice(out) -> None:
        o, fs = out
        firsts = next(p["firsts"] for name, _, p in captured if name.startswith("gated_delta_rule_combine"))
        for _ in range(2):
            before = len(captured)
            torch.autograd.backward([o, fs], [torch.zeros_like(o), torch.zeros_like(fs)], retain_graph=True)
            names = [name for name, _, _ in captured[before:]]
            assert len(names) == 5 and names[0].startswith("gated_delta_rule_prep") and names[1].endswith("_st")
            assert names[2].startswith("gated_delta_rule_bwd_c32") and names[3].startswith("gated_delta_rule_bwd_chunk")
            assert names[4].startswith("gated_delta_rule_grad_rows"), names
            assert captured[before + 1][2]["initial_state"] == firsts

    _training_call(monkeypatch, None, then=twice)
