"""Driver for compute-sanitizer (memcheck / racecheck): the gated delta rule's two kernels at every chunk size
and both element types, with partial chunks, grouped value heads, varlen with 1-token and empty sequences,
initial / final state, the in-kernel l2norm, every K-split recurrence plan, the overlapped launch (a persistent
prep grid beside the recurrence, per-chunk flags), the segmented walk (sequences cut into parallel segments) and
the backward's kernels (the states instance, the reverse state pass, the per-chunk gradients).

    compute-sanitizer --tool racecheck python tests/sanitize_gated_delta_rule.py
Exits non-zero on a numerical failure; the sanitizer reports memory errors and races itself.
"""

import sys

import pytest
import torch
from sanitizer_driver import prepare, run_cases

prepare()

import test_gated_delta_rule_gpu as gdr

cu = torch.tensor([0, 1, 1, 40, 73, 73], dtype=torch.int32, device="cuda")
cases = [
    ("b2 t45 h4/8 c32 state", lambda: gdr.check(*gdr.make_inputs(2, 45, 4, 8, state_n=2))),
    ("b1 t70 h2/4 c16 fp16", lambda: gdr.check(*gdr.make_inputs(1, 70, 2, 4, dtype=torch.float16), chunk=16)),
    ("b1 t100 h2/2 c64 state", lambda: gdr.check(*gdr.make_inputs(1, 100, 2, 2, state_n=1), chunk=64)),
    (
        "varlen 1/0/39/33/0 c32 l2norm",
        lambda: gdr.check(*gdr.make_inputs(1, 73, 2, 4, normalized=False, state_n=5), cu_seqlens=cu, l2=True),
    ),
    ("b2 t33 h16/64 c32", lambda: gdr.check(*gdr.make_inputs(2, 33, 16, 64))),
]


def patched(test, *args) -> None:
    """A test that takes pytest's monkeypatch, run here with one (everything it patched is undone after)."""
    with pytest.MonkeyPatch.context() as mp:
        test(mp, *args)


# every K-split recurrence (the exchange through shared memory and its named barriers), varlen with empty sequences
cases += [
    (f"plan c{c} v{v} k{k} varlen", lambda c=c, v=v, k=k: patched(gdr.run_plan, c, v, k))
    for c, v, k in gdr._plans()
    if k > 1
]
# the flags between the two grids: one prep CTA walking every item, and a few
cases += [
    (
        f"overlap c{c} v{p[0]} k{p[1]} {'varlen' if v else 'b2'} prep {n}",
        lambda case=(c, p, v, n): patched(gdr.test_overlapped_prep_matches_the_sequential_launch, *case),
    )
    for c, p, v, n in gdr.OVERLAP_CASES[:3]
]
# the segmented walk (transition pass, combine, output pass) under every chunk-32 plan, one each at 16 and 64, and
# a varlen pack of empty, one-segment and many-segment sequences
import test_gdr_segments_gpu as seg

cases += [
    (
        f"segmented c{c} v{v} k{k} varlen",
        lambda c=c, v=v, k=k: patched(seg.test_every_recurrence_plan_segmented, c, v, k),
    )
    for c, v, k in gdr._plans()
    if c == 32 or (c, v, k) in ((16, 32, 1), (64, 64, 1))
]
cases += [
    ("segmented varlen pack state", lambda: patched(seg.test_varlen_pack_of_empty_short_and_long_sequences, True))
]
# the backward's kernels (issue 41): the states instance of the recurrence (whole and segmented walks) and the
# reverse state pass, each checked against float64 inside its test
cases += [
    (f"states pass segments {sc}", lambda sc=sc: patched(gdr.test_states_pass_matches_the_float64_states, sc))
    for sc in ("0", "4")
]
cases += [("state grads pass", gdr.test_state_grads_pass_matches_float64_autograd)]
cases += [
    (
        f"chunk grads {'varlen' if v else 'b2'}",
        lambda v=v: gdr.test_chunk_grads_kernel_matches_its_model(v, torch.bfloat16, 2, 2),
    )
    for v in (False, True)
]
# four value heads on one q / k head: one CTA sums them all (fold 4, dq / dk read back three times)
cases += [
    ("chunk grads fold4 varlen", lambda: gdr.test_chunk_grads_kernel_matches_its_model(True, torch.bfloat16, 4, 1))
]
cases += [
    (
        f"grad rows parts {p} l2 {l2}",
        lambda p=p, l2=l2: gdr.test_grad_rows_kernel_matches_the_torch_step(torch.bfloat16, p, l2),
    )
    for p, l2 in ((1, True), (4, False), (2, True))
]
import untrusted_indices

sys.exit(run_cases(cases + [c for c in untrusted_indices.CASES if c[0].startswith("gdr")]))
