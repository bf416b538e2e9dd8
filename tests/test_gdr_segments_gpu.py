"""chunk_gated_delta_rule with each sequence cut into segments that run in parallel (issue 42: context parallelism
inside one GPU; docs/gated_delta_rule.md): the transition pass, the combine and the segmented output pass against
the float64 token recurrence (relative L2 <= 0.01 for o and the final state) and against the unsplit walk, at
segment lengths that do and do not divide the sequences, with empty, one-segment and many-segment sequences in one
varlen pack, every recurrence plan, chunk sizes 16 / 32 / 64; bitwise repeatable; graph replay; the planner's own
choice on a few-head long shape. DG_SM120_GDR_SEGMENT_CHUNKS forces a segment length (0: never split)."""

from __future__ import annotations

import pytest
import torch
from gpu_helpers import requires_cuda
from test_gated_delta_rule_gpu import (  # noqa: F401 - fresh_plans: autouse here too
    _plans,
    check,
    fresh_plans,
    graph_replay_matches_eager,
    make_inputs,
)

import deep_gemm_sm120 as dg
from deep_gemm_sm120.families.gated_delta_rule import api
from deep_gemm_sm120.families.gated_delta_rule.plan import SEGMENT_ENV
from deep_gemm_sm120.selftest.workloads.gdr_reference import relative_l2

pytestmark = [pytest.mark.cuda, requires_cuda, pytest.mark.usefixtures("sm120_or_emulation")]


def segments_taken(monkeypatch) -> list[int]:
    """The segment lengths (chunks) the planner returns from now on (0: unsplit)."""
    seen: list[int] = []
    real = api.choose_segments
    monkeypatch.setattr(api, "choose_segments", lambda *a: seen.append(real(*a)) or seen[-1])
    return seen


def run(args, init, chunk=32, cu_seqlens=None, **kw):
    return dg.chunk_gated_delta_rule(
        *args, initial_state=init, output_final_state=True, cu_seqlens=cu_seqlens, chunk_size=chunk, **kw
    )


@pytest.mark.parametrize(
    "b,t,h,hv,chunk,seg",
    [
        (1, 2048, 2, 8, 32, 4),  # 64 chunks in 16 segments
        (2, 1000, 4, 4, 32, 3),  # 32 chunks (the last partial) in segments of 3: the last segment holds 2
        (1, 777, 2, 2, 16, 8),  # chunk 16
        (1, 1100, 1, 2, 64, 2),  # chunk 64, GVA 2
        (1, 300, 2, 4, 32, 9),  # 10 chunks: one long segment and a one-chunk tail
    ],
)
@pytest.mark.parametrize("with_state", [False, True])
def test_segmented_matches_fp64_and_the_unsplit_walk(monkeypatch, b, t, h, hv, chunk, seg, with_state):
    args, init = make_inputs(b, t, h, hv, seed=t + seg, state_n=b if with_state else None)
    seen = segments_taken(monkeypatch)
    monkeypatch.setenv(SEGMENT_ENV, "0")
    o0, f0, _, _ = check(args, init, chunk=chunk)
    monkeypatch.setenv(SEGMENT_ENV, str(seg))
    o1, f1, _, _ = check(args, init, chunk=chunk)
    assert seen == [0, seg]
    # the split changes only the order of rounding: the two walks agree as closely as each meets float64
    assert relative_l2(o1, o0) <= 0.01 and relative_l2(f1, f0) <= 0.01


@pytest.mark.parametrize(
    "b,t,h,hv,seg,kw",
    [
        (1, 2048, 2, 8, 4, {}),
        (2, 1000, 2, 4, 3, {"dtype": torch.float16}),
        (1, 1500, 1, 2, 5, {"normalized": False}),  # with the in-kernel l2norm
    ],
    ids=["bf16-gva4", "fp16-b2", "l2norm-gva2"],
)
def test_segmented_under_slow_decay(monkeypatch, b, t, h, hv, seg, kw):
    """g = logsigmoid(N(6, 1)), about -0.0025 a token: a segment's state map A is far from zero (about e^-0.3 over
    128 tokens), so a wrong A, a swapped half or a transposed combine shows (in float64 at 1 x 768 (2, 4), 6
    segments: a transposed A gives 8 % / 14 % relative L2 in o / the final state, A = 0 24 % / 42 %, the right one
    1e-15; with FLA's fast decay, logsigmoid(N(0, 1)), A vanishes within a chunk and all three agree). Bound:
    within the 0.01 of the other tests or 1.5 x the unsplit walk's own error against float64, whichever is larger
    (slow decay keeps more state, so more bf16 rounding)."""
    from deep_gemm_sm120.selftest.workloads.gdr_reference import naive_recurrence

    l2 = not kw.get("normalized", True)
    args, init = make_inputs(b, t, h, hv, seed=t + hv, state_n=b, decay_shift=6.0, **kw)
    ro, rf = naive_recurrence(*args, initial_state=init, output_final_state=True, use_qk_l2norm_in_kernel=l2)
    errs = {}
    for knob in ("0", str(seg)):
        monkeypatch.setenv(SEGMENT_ENV, knob)
        o, f = run(args, init, use_qk_l2norm_in_kernel=l2)
        assert torch.isfinite(o).all() and torch.isfinite(f).all()
        errs[knob] = (relative_l2(o, ro), relative_l2(f, rf))
    (uo, uf), (so, sf) = errs["0"], errs[str(seg)]
    assert so <= max(0.01, 1.5 * uo) and sf <= max(0.01, 1.5 * uf), errs


@pytest.mark.parametrize("with_state", [False, True])
def test_varlen_pack_of_empty_short_and_long_sequences(monkeypatch, with_state):
    """Segments of 4 chunks (128 tokens): empty sequences (first, middle, last) hand their initial state through,
    one-segment sequences skip the transition pass, long ones cross many segments (one ends mid-chunk)."""
    lens = [0, 1, 700, 64, 0, 333, 128, 0]
    cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32, device="cuda")
    args, init = make_inputs(1, int(cu[-1]), 2, 4, seed=17, state_n=len(lens) if with_state else None)
    monkeypatch.setenv(SEGMENT_ENV, "4")
    seen = segments_taken(monkeypatch)
    o, final, _, _ = check(args, init, cu_seqlens=cu)
    assert seen == [4]
    for i, n in enumerate(lens):
        if n == 0:
            assert torch.equal(final[i], init[i] if with_state else torch.zeros_like(final[i]))


@pytest.mark.parametrize("chunk,vslice,ksplit", _plans(), ids=[f"c{c}-v{v}-k{k}" for c, v, k in _plans()])
def test_every_recurrence_plan_segmented(monkeypatch, chunk, vslice, ksplit):
    """Each instantiation in both segmented passes (the transition pass doubles the grid: its second half runs
    without v), varlen with empty and one-token sequences; bitwise repeatable."""
    monkeypatch.setattr(api, "choose_plan", lambda *_a: (vslice, ksplit))
    monkeypatch.setenv(SEGMENT_ENV, "2")
    cu = torch.tensor([0, 1, 1, 170, 403, 403, 500], dtype=torch.int32, device="cuda")
    args, init = make_inputs(1, 500, 2, 4, seed=vslice + ksplit, state_n=6)
    o, final, _, _ = check(args, init, chunk=chunk, cu_seqlens=cu)
    o2, final2 = run(args, init, chunk=chunk, cu_seqlens=cu)
    assert torch.equal(o, o2) and torch.equal(final, final2)


def test_planner_splits_a_few_head_long_sequence(monkeypatch):
    """No knob: 1 x 8192 with 2 / 8 heads is 8 (sequence, head) pairs on a GPU of dozens of SMs: split."""
    monkeypatch.delenv(SEGMENT_ENV, raising=False)
    seen = segments_taken(monkeypatch)
    args, init = make_inputs(1, 8192, 2, 8, seed=23, state_n=1)
    check(args, init)
    assert len(seen) == 1 and seen[0] > 0, seen
    # and a many-head batch fills the GPU already: whole sequences
    args, init = make_inputs(4, 256, 16, 64, seed=24, state_n=4)
    check(args, init)
    assert seen[1] == 0, seen


def test_segmented_is_bitwise_repeatable_and_ignores_the_callers_tf32(monkeypatch):
    """The combine is our own FP32 kernel: the caller's TF32 choice (either torch API) neither changes the result
    nor is touched (an earlier combine through torch's matmul had to switch it, and raised for callers of the new
    API)."""
    monkeypatch.setenv(SEGMENT_ENV, "5")
    args, init = make_inputs(1, 3000, 2, 8, seed=29, state_n=1)
    o1, f1 = run(args, init)
    matmul = torch.backends.cuda.matmul
    name, on = ("fp32_precision", "tf32") if hasattr(matmul, "fp32_precision") else ("allow_tf32", True)
    saved = getattr(matmul, name)
    try:
        setattr(matmul, name, on)  # the caller's choice for its own matmuls
        o2, f2 = run(args, init)
        assert getattr(matmul, name) == on
    finally:
        setattr(matmul, name, saved)
    assert torch.equal(o1, o2) and torch.equal(f1, f2)


def test_segmented_graph_replay_with_new_inputs(monkeypatch):
    monkeypatch.setenv(SEGMENT_ENV, "3")
    cu = torch.tensor([0, 5, 475, 475, 700], dtype=torch.int32, device="cuda")
    graph_replay_matches_eager((1, 700, 2, 4), cu, seeds=(31, 32, 33))


def test_segmented_without_final_state(monkeypatch):
    monkeypatch.setenv(SEGMENT_ENV, "2")
    args, init = make_inputs(2, 400, 2, 4, seed=37, state_n=2)
    o, final = dg.chunk_gated_delta_rule(*args, initial_state=init, chunk_size=32)
    assert final is None
    o_ref, _, _, _ = check(args, init)
    assert torch.equal(o, o_ref)


def test_bad_knob_is_a_value_error(monkeypatch):
    args, init = make_inputs(1, 64, 2, 4, seed=41, state_n=1)
    monkeypatch.setenv(SEGMENT_ENV, "many")
    with pytest.raises(ValueError, match=SEGMENT_ENV):
        run(args, init)
