"""chunk_gated_delta_rule's backward (families/gated_delta_rule/backward.py: batched torch stages) on the CPU,
against torch.autograd through the float64 token recurrence: every input's gradient, fixed length and varlen
with empty sequences, GVA, l2norm, initial state and final-state gradient, chunk sizes that do not divide the
sequences; the autograd Function's wiring; offsets that were never checked; float32 work; the device-built
layout the kernel stages use (no host read) against the host one."""

from __future__ import annotations

import pytest
import torch
from test_gdr_backward_reference_cpu import _inputs  # the reference backward's inputs (float64)

from deep_gemm_sm120.core.arith import ceil_div
from deep_gemm_sm120.families.gated_delta_rule import backward as bw
from deep_gemm_sm120.families.gated_delta_rule.backward import (
    Differentiable,
    chunk_gated_delta_rule_backward,
    chunk_layout,
    device_layout,
    state_slots,
)
from deep_gemm_sm120.families.gated_delta_rule.contract import chunk_gated_delta_rule_bwd
from deep_gemm_sm120.selftest.workloads.gdr_reference import naive_recurrence

NAMES = ("dq", "dk", "dv", "dg", "dbeta", "dh0")


def _autograd(q, k, v, g, beta, h0, do, dfs, scale, cu, l2, init):
    """Every input's gradient by autograd through naive_recurrence (float64)."""
    leaves = [x.double().clone().requires_grad_() for x in (q, k, v, g, beta, h0)]
    o, fs = naive_recurrence(
        *leaves[:5], scale=scale, initial_state=leaves[5] if init else None, output_final_state=True,
        cu_seqlens=cu, use_qk_l2norm_in_kernel=l2,
    )  # fmt: skip
    loss = (o * do.double()).sum() if do is not None else 0
    if dfs is not None:
        loss = loss + (fs * dfs.double()).sum()
    loss.backward()
    return [leaf.grad if leaf.grad is not None else torch.zeros_like(leaf) for leaf in leaves]


def _err(mine: torch.Tensor, ref: torch.Tensor) -> float:
    return float((mine.double() - ref).norm() / ref.norm().clamp_min(1e-300))


CASES = [
    # b, t, h, hv, d, chunk, varlen, init, final, l2, with do
    (2, 19, 1, 1, 8, 8, False, False, False, False, True),
    (1, 37, 2, 4, 8, 16, False, True, True, False, True),
    (2, 33, 2, 2, 16, 32, False, True, False, True, True),
    (1, 50, 1, 2, 8, 8, True, True, True, True, True),
    (1, 64, 2, 2, 8, 16, True, False, True, False, True),
    (1, 45, 1, 3, 8, 64, True, True, True, False, False),  # only the final state is used
    (3, 70, 2, 4, 8, 16, False, True, True, True, True),
]


@pytest.mark.parametrize("b,t,h,hv,d,chunk,varlen,init,final,l2,use_o", CASES)
def test_backward_equals_autograd(b, t, h, hv, d, chunk, varlen, init, final, l2, use_o):
    cu = torch.tensor([0, 7, 7, 30, t]) if varlen else None
    n = 4 if varlen else b
    q, k, v, g, beta, h0 = _inputs(b, t, h, hv, d, seed=t + hv, n=n)
    gen = torch.Generator().manual_seed(7)
    do = torch.randn(b, t, hv, d, generator=gen, dtype=torch.float64) if use_o else None
    dfs = torch.randn(n, hv, d, d, generator=gen, dtype=torch.float64) if final else None
    refs = _autograd(q, k, v, g, beta, h0, do, dfs, 0.3, cu, l2, init)
    got = chunk_gated_delta_rule_backward(q, k, v, g, beta, do, dfs, 0.3, h0 if init else None, cu, l2, chunk)
    for name, mine, ref in zip(NAMES, got, refs):
        if name == "dh0" and not init:
            assert mine is None
            continue
        assert mine.shape == ref.shape and mine.dtype == torch.float64
        assert _err(mine, ref) < 1e-10, f"{name}: relative L2 {_err(mine, ref):.2e}"


def test_float32_work_stays_close():
    """bf16 / fp16 / fp32 inputs work in fp32: at chunk 64 with K = V = 128 the gradients stay within 1e-4 of the
    float64 ones (fp32 rounding through the T inverse and the state passes, nothing coarser)."""
    q, k, v, g, beta, h0 = _inputs(1, 150, 2, 4, 128, seed=4, n=1)
    q, k = q / q.norm(dim=-1, keepdim=True), k / k.norm(dim=-1, keepdim=True)
    gen = torch.Generator().manual_seed(1)
    do = torch.randn(1, 150, 4, 128, generator=gen, dtype=torch.float64)
    dfs = torch.randn(1, 4, 128, 128, generator=gen, dtype=torch.float64)
    ref = chunk_gated_delta_rule_backward(q, k, v, g, beta, do, dfs, 0.088, h0, None, False, 64)
    f32 = [x.float() for x in (q, k, v, g, beta, do, dfs, h0)]
    got = chunk_gated_delta_rule_backward(*f32[:7], 0.088, f32[7], None, False, 64)
    for name, mine, r in zip(NAMES, got, ref):
        assert mine.dtype == torch.float32
        assert _err(mine, r) < 1e-4, f"{name}: {_err(mine, r):.2e}"


def test_a_missing_term_is_seen(monkeypatch):
    """The comparison can fail: without the decay factors' share of dg, dg is far off while dv stays right."""
    q, k, v, g, beta, h0 = _inputs(1, 24, 1, 1, 8, seed=3)
    do = torch.ones(1, 24, 1, 8, dtype=torch.float64)
    refs = _autograd(q, k, v, g, beta, h0, do, None, 0.5, None, False, True)
    run = lambda: chunk_gated_delta_rule_backward(q, k, v, g, beta, do, None, 0.5, h0, None, False, 8)
    assert _err(run()[3], refs[3]) < 1e-10
    monkeypatch.setattr(bw, "_decay_grad", lambda dd, decay: torch.zeros_like(decay[..., 0]))
    got = run()
    assert _err(got[3], refs[3]) > 1e-3 and _err(got[2], refs[2]) < 1e-10


def test_unchecked_offsets_read_as_the_forward_reads_them():
    """Offsets past T, below 0 or decreasing (index checks off) are clamped to [0, T] and made non-decreasing, as
    the forward's kernels read them: the gradients are those of the sequences the forward walked, tokens in no
    sequence get 0, and nothing is read outside row 0."""
    t = 40
    q, k, v, g, beta, h0 = _inputs(1, t, 1, 2, 8, seed=5, n=4)
    do = torch.randn(1, t, 2, 8, dtype=torch.float64)
    bad = torch.tensor([-3, 12, 9, 33, 99])  # read as 0, 12, 12, 33, 40
    fixed = torch.tensor([0, 12, 12, 33, 40])
    got = chunk_gated_delta_rule_backward(q, k, v, g, beta, do, None, 0.4, h0, bad, False, 16)
    ref = chunk_gated_delta_rule_backward(q, k, v, g, beta, do, None, 0.4, h0, fixed, False, 16)
    for mine, r in zip(got, ref):
        assert torch.equal(mine, r)
    below = torch.tensor([0, 12, 20])  # ends below T: tokens 20..39 are in no sequence
    got = chunk_gated_delta_rule_backward(q, k, v, g, beta, do, None, 0.4, h0[:2], below, False, 16)
    for x in got[:5]:
        assert torch.count_nonzero(x[:, 20:]) == 0 and torch.count_nonzero(x[:, :20]) > 0
    assert chunk_layout(1, t, bad, 16, torch.device("cpu")).num_seqs == 4


def test_no_tokens_pass_the_state_gradient_through():
    q, k, v, g, beta, h0 = _inputs(2, 0, 1, 2, 8, seed=6)
    dfs = torch.randn(2, 2, 8, 8, dtype=torch.float64)
    got = chunk_gated_delta_rule_backward(q, k, v, g, beta, None, dfs, 0.4, h0, None, False, 16)
    assert all(x.shape == y.shape for x, y in zip(got[:5], (q, k, v, g, beta)))
    assert torch.equal(got[5], dfs)


def test_layout_makes_every_step_a_slice():
    """Sequences ranked by chunk count, chunks numbered position by position: step j is the first counts[j] ranks
    and the next counts[j] chunks, and every token of every sequence is in exactly one chunk."""
    cu = torch.tensor([0, 5, 5, 70, 71])
    lay = chunk_layout(1, 71, cu, 16, torch.device("cpu"))
    # sequences of 5, 0, 65, 1 tokens: 1, 0, 5, 1 chunks
    assert lay.order.tolist() == [2, 0, 3, 1] and lay.counts == (3, 1, 1, 1, 1) and lay.num_seqs == 4
    assert lay.token.shape == (7, 16)
    assert lay.token[0, 0] == 5 and lay.token[1, 0] == 0 and lay.token[2, 0] == 70 and lay.token[3, 0] == 21
    covered = lay.token[lay.valid]
    assert sorted(covered.tolist()) == list(range(71))
    assert lay.valid.sum(1).tolist() == [16, 5, 1, 16, 16, 16, 1]


def _function_case(requires):
    q, k, v, g, beta, h0 = _inputs(1, 30, 2, 4, 8, seed=8, n=2)
    cu = torch.tensor([0, 11, 30])
    leaves = [x.clone().requires_grad_(need) for x, need in zip((q, k, v, g, beta, h0), requires)]

    def run(q, k, v, g, beta, h0, cu, final=True):  # the forward's kernels, as the reference gives their outputs
        return naive_recurrence(q, k, v, g, beta, 0.3, h0, final, cu, True)

    return leaves, cu, run


def test_function_attaches_the_backward_to_the_outputs():
    """Differentiable.apply (what chunk_gated_delta_rule does when an input requires grad): the same gradients as
    autograd through the reference, only for the inputs that asked."""
    leaves, cu, run = _function_case((True, False, True, True, False, True))
    out_o, out_fs = Differentiable.apply((0.3, True, None, None, None, None, None, None), run, *leaves, cu)
    with torch.no_grad():
        o, fs = run(*leaves, cu)
    assert out_o.requires_grad and torch.equal(out_o, o) and torch.equal(out_fs, fs)
    gen = torch.Generator().manual_seed(2)
    do, dfs = torch.randn(o.shape, generator=gen, dtype=torch.float64), torch.randn(fs.shape, generator=gen).double()
    ((out_o * do).sum() + (out_fs * dfs).sum()).backward()
    refs = _autograd(*[x.detach() for x in leaves], do, dfs, 0.3, cu, True, True)
    for name, leaf, ref in zip(NAMES, leaves, refs):
        if leaf.requires_grad:
            assert _err(leaf.grad, ref) < 1e-10, name
        else:
            assert leaf.grad is None, name


def test_function_without_a_final_state_and_unused_outputs():
    leaves, cu, run = _function_case((True,) * 6)
    out = Differentiable.apply(
        (0.3, True, None, None, None, None, None, None), lambda *a: run(*a, final=False), *leaves, cu
    )
    assert isinstance(out, torch.Tensor)
    (out.sum() * 0).backward()  # a zero upstream gradient: zero gradients, not an error
    assert all(torch.count_nonzero(x.grad) == 0 for x in leaves)


def test_outputs_may_be_modified_in_place():
    """The outputs are the forward's own tensors, not views of anything: in-place use works as under no_grad, and
    the gradients are those of the loss as written."""
    leaves, cu, run = _function_case((True,) * 6)
    o, fs = Differentiable.apply((0.3, True, None, None, None, None, None, None), run, *leaves, cu)
    o.mul_(2)
    fs.add_(1)
    (o.sum() + fs.sum()).backward()
    refs = _autograd(
        *[x.detach() for x in leaves],
        torch.full(o.shape, 2.0).double(),
        torch.ones(fs.shape).double(),
        0.3,
        cu,
        True,
        True,
    )
    for name, leaf, ref in zip(NAMES, leaves, refs):
        assert _err(leaf.grad, ref) < 1e-10, name


def test_first_order_with_create_graph_and_a_clear_second_order_error():
    leaves, cu, run = _function_case((True,) * 6)
    o, _ = Differentiable.apply((0.3, True, None, None, None, None, None, None), run, *leaves, cu)
    grads = torch.autograd.grad(o.pow(2).sum(), leaves, create_graph=True)
    assert all(x is not None and torch.isfinite(x).all() for x in grads)
    with pytest.raises(RuntimeError, match="once_differentiable|twice"):
        grads[0].sum().backward()


def test_strongly_negative_decays_keep_dg():
    """g of -20 a token (e^g underflows fp32 within a chunk): dg stays at fp32 rounding of the float64 result (the
    terms that are exactly zero are not formed; formed, their rounding was all of dg), and at -100 float64 still
    matches autograd through the recurrence."""
    q, k, v, _, beta, h0 = _inputs(1, 150, 2, 4, 16, seed=9)
    gen = torch.Generator().manual_seed(4)
    do = torch.randn(1, 150, 4, 16, generator=gen, dtype=torch.float64)
    dfs = torch.randn(1, 4, 16, 16, generator=gen, dtype=torch.float64)
    for value in (-5.0, -20.0):
        g = torch.full((1, 150, 4), value, dtype=torch.float64)
        ref = chunk_gated_delta_rule_backward(q, k, v, g, beta, do, dfs, 0.25, h0, None, True, 64)
        f32 = [x.float() for x in (q, k, v, g, beta, do, dfs)]
        got = chunk_gated_delta_rule_backward(*f32, 0.25, h0.float(), None, True, 64)
        for name, mine, r in zip(NAMES, got, ref):
            assert _err(mine, r) < 1e-5, f"g = {value}, {name}: {_err(mine, r):.2e}"
    g = torch.full((1, 40, 4), -100.0, dtype=torch.float64)
    refs = _autograd(q[:, :40], k[:, :40], v[:, :40], g, beta[:, :40], h0, do[:, :40], dfs, 0.25, None, True, True)
    got = chunk_gated_delta_rule_backward(
        q[:, :40], k[:, :40], v[:, :40], g, beta[:, :40], do[:, :40], dfs, 0.25, h0, None, True, 16
    )
    assert _err(got[3], refs[3]) < 1e-8


def test_varlen_needs_one_row():
    q, k, v, g, beta, h0 = _inputs(2, 10, 1, 1, 8, seed=1)
    with pytest.raises(ValueError, match="batch must be 1"):
        chunk_gated_delta_rule_backward(q, k, v, g, beta, None, None, 0.3, None, torch.tensor([0, 10]), False, 8)


def test_direct_backward_entry_point_names_the_way():
    with pytest.raises(NotImplementedError, match="backpropagate through its outputs"):
        chunk_gated_delta_rule_bwd()


def _reference_states_pass(q, k, v, g, beta, h0, cu, l2):
    """What api.gdr_states asks of the kernels, from the float64 recurrence: the state entering every 64th token
    of each sequence at slot slots[n] + slots[N + j]."""

    def states(slots: torch.Tensor, count: int) -> torch.Tensor:
        bounds = [(int(a), int(b)) for a, b in zip(cu[:-1], cu[1:])]
        n = len(bounds)
        out = torch.full((count, v.shape[2], v.shape[3], v.shape[3]), float("nan"), dtype=torch.float64)
        for seq, (s, e) in enumerate(bounds):
            for j, t0 in enumerate(range(s, e, 64)):
                prefix = torch.tensor([0, t0 - s])
                h = h0[seq : seq + 1] if h0 is not None else None
                _, state = naive_recurrence(
                    *(x[:, s:t0] for x in (q, k, v, g, beta)), 0.3, h, True, prefix, l2
                )  # fmt: skip
                out[int(slots[seq]) + int(slots[n + j])] = state[0]
        return out

    return states


def test_kernel_states_slots_land_where_the_layout_expects():
    """The states pass's slot table (state_slots): states written at slot rank(n) + first(j) by a stand-in for the
    kernels (the float64 recurrence) give autograd's gradients, every slot written once (NaN fill otherwise)."""
    t = 300
    cu = torch.tensor([0, 70, 70, 200, 201, 300])
    q, k, v, g, beta, h0 = _inputs(1, t, 1, 2, 8, seed=12, n=5)
    gen = torch.Generator().manual_seed(3)
    do = torch.randn(1, t, 2, 8, generator=gen, dtype=torch.float64)
    dfs = torch.randn(5, 2, 8, 8, generator=gen, dtype=torch.float64)
    refs = _autograd(q, k, v, g, beta, h0, do, dfs, 0.3, cu, True, True)
    states_pass = _reference_states_pass(q, k, v, g, beta, h0, cu, True)
    got = chunk_gated_delta_rule_backward(q, k, v, g, beta, do, dfs, 0.3, h0, cu, True, 64, states_pass)
    for name, mine, ref in zip(NAMES, got, refs):
        assert _err(mine, ref) < 1e-10, f"{name}: {_err(mine, ref):.2e}"
    with pytest.raises(ValueError, match="every 64 tokens"):
        chunk_gated_delta_rule_backward(q, k, v, g, beta, do, dfs, 0.3, h0, cu, True, 32, states_pass)


def _reference_state_grads_pass(q, k, v, g, beta, h0, cu, l2, scale):
    """What api.gdr_state_grads asks of the kernels, by autograd through the float64 recurrence: the gradient of
    the state leaving every 64 tokens of each sequence (entering position min(64 (j + 1), len)) at slot
    slots[n] + slots[N + j], and the initial states' gradient."""

    def grads(do, dfinal, slots, count, want_dh0):
        bounds = [(int(a), int(b)) for a, b in zip(cu[:-1], cu[1:])]
        n = len(bounds)
        out = torch.full((count, v.shape[2], v.shape[3], v.shape[3]), float("nan"), dtype=torch.float64)
        dh0 = torch.zeros(n, v.shape[2], v.shape[3], v.shape[3], dtype=torch.float64)
        for seq, (s, e) in enumerate(bounds):
            for j, p in enumerate([*range(s, e, 64), e]):
                whole = torch.tensor([0, p - s])
                with torch.no_grad():
                    _, at = naive_recurrence(
                        *(x[:, s:p] for x in (q, k, v, g, beta)), scale, h0[seq : seq + 1], True, whole, l2
                    )  # fmt: skip
                at = at.clone().requires_grad_()
                rest = torch.tensor([0, e - p])
                o, fs = naive_recurrence(*(x[:, p:e] for x in (q, k, v, g, beta)), scale, at, True, rest, l2)
                loss = (o * do[:, p:e].double()).sum() + (fs * dfinal[seq : seq + 1]).sum()
                (grad,) = torch.autograd.grad(loss, at)
                if j == 0:
                    dh0[seq] = grad[0]
                if p > s:  # the stretch ending at p: its index is (p - s - 1) // 64
                    out[int(slots[seq]) + int(slots[n + (p - s - 1) // 64])] = grad[0]
        return out, dh0 if want_dh0 else None

    return grads


def test_kernel_state_grads_slots_land_where_the_layout_expects():
    """Both stages by stand-ins for the kernels (float64 autograd, the kernels' slot numbering): autograd's
    gradients for every input; an unwritten slot would be NaN."""
    t = 300
    cu = torch.tensor([0, 70, 70, 200, 201, 300])
    q, k, v, g, beta, h0 = _inputs(1, t, 1, 2, 8, seed=13, n=5)
    gen = torch.Generator().manual_seed(5)
    do = torch.randn(1, t, 2, 8, generator=gen, dtype=torch.float64)
    dfs = torch.randn(5, 2, 8, 8, generator=gen, dtype=torch.float64)
    refs = _autograd(q, k, v, g, beta, h0, do, dfs, 0.3, cu, True, True)
    states_pass = _reference_states_pass(q, k, v, g, beta, h0, cu, True)
    grads_pass = _reference_state_grads_pass(q, k, v, g, beta, h0, cu, True, 0.3)
    got = chunk_gated_delta_rule_backward(q, k, v, g, beta, do, dfs, 0.3, h0, cu, True, 64, states_pass, grads_pass)
    for name, mine, ref in zip(NAMES, got, refs):
        assert _err(mine, ref) < 1e-10, f"{name}: {_err(mine, ref):.2e}"


def _random_offsets(rng, t: int) -> torch.Tensor:
    """Offsets of 0-7 sequences: sorted and starting at 0, or anything (below 0, past T, decreasing)."""
    n = rng.randint(0, 7)
    if rng.random() < 0.5:
        cu = sorted(rng.randint(0, t) for _ in range(n + 1))
        cu[0] = 0
    else:
        cu = [rng.randint(-50, t + 50) for _ in range(n + 1)]
    return torch.tensor(cu, dtype=rng.choice([torch.int32, torch.int64]))


def test_device_layout_numbers_chunks_as_the_host_layout():
    """device_layout (built without reading the offsets on the host) against chunk_layout on 2000 random calls,
    checked and unchecked offsets, fixed length too: the same chunks at the same numbers, only invalid padding
    chunks after them (none for fixed lengths), and the same slot of every (sequence, position)."""
    import random

    rng = random.Random(7)
    cpu = torch.device("cpu")
    for _ in range(2000):
        c, t = rng.choice([16, 32, 64]), rng.randint(0, 300)
        if rng.random() < 0.3:
            b, cu = rng.randint(0, 4), None
        else:
            b, cu = 1, _random_offsets(rng, t)
        host, dev = chunk_layout(b, t, cu, c, cpu), device_layout(b, t, cu, c, cpu)
        nc, n = host.token.shape[0], host.num_seqs
        assert dev.num_seqs == n and torch.equal(dev.order, host.order), (b, t, cu, c)
        assert torch.equal(dev.token[:nc], host.token) and torch.equal(dev.valid[:nc], host.valid), (b, t, cu, c)
        assert not dev.valid[nc:].any() and not dev.token[nc:].any()
        assert dev.token.shape[0] == (nc if cu is None else min((t + n * (c - 1)) // c, n * ceil_div(t, c)))
        slots, positions = state_slots(host), len(host.counts)
        assert torch.equal(dev.slots[: n + positions], slots[: n + positions])
        exact = device_layout(b, t, cu, c, cpu, exact=True)  # sized to the real chunks: the same, unpadded
        assert torch.equal(exact.token, host.token) and torch.equal(exact.valid, host.valid)
        assert torch.equal(exact.slots, dev.slots) and torch.equal(exact.order, dev.order)


def test_fixed_length_device_layouts_are_kept(monkeypatch):
    """device_layout keeps fixed-length layouts (they follow from the shapes; building one costs about twenty
    device operations a backward): a repeated (B, T, C, device) returns the kept layout, equal to a fresh build,
    with B3's chunk table (chunk_bounds) already made; least recently used first out past the bound. While a CUDA
    graph is captured a kept layout is pinned (out of the LRU, never evicted: a review found a graph that had
    captured a kept layout reading it after its eviction) and a new shape is built fresh without being kept."""
    import collections

    cpu = torch.device("cpu")
    monkeypatch.setattr(bw, "_FIXED_DEVICE", collections.OrderedDict())
    for b, t in ((1, 64), (3, 100), (2, 1), (4, 2048)):
        kept = bw.device_layout(b, t, None, 64, cpu)
        assert bw.device_layout(b, t, None, 64, cpu, exact=True) is kept
        fresh = bw._device_layout(b, t, None, 64, cpu)
        for name in ("token", "valid", "order", "slots"):
            assert torch.equal(getattr(kept, name), getattr(fresh, name)), name
        first, length = bw.chunk_bounds(kept)
        assert first is kept.first and length is kept.length
        assert first.dtype == length.dtype == torch.int32
        assert torch.equal(first, fresh.token[:, 0].int()) and torch.equal(length, fresh.valid.sum(-1).int())
        assert int(length.sum()) == b * t
    assert len(bw._FIXED_DEVICE) == 4
    oldest = bw.device_layout(1, 64, None, 64, cpu)  # used again: the newest now
    for t in range(1000, 1000 + bw._FIXED_DEVICE_MAX - 1):
        bw.device_layout(1, t, None, 64, cpu)
    assert len(bw._FIXED_DEVICE) == bw._FIXED_DEVICE_MAX
    assert bw.device_layout(1, 64, None, 64, cpu) is oldest, "the recently used entry was evicted"
    assert (3, 100, 64, cpu) not in bw._FIXED_DEVICE, "the least recently used entry stayed"
    monkeypatch.setattr(bw, "_PINNED", {})
    monkeypatch.setattr(bw, "_pinned_bytes", 0)
    monkeypatch.setattr(bw, "_capturing", lambda x: True)
    fresh = bw.device_layout(5, 777, None, 64, cpu)  # a shape not kept: built in the graph, nothing kept
    assert fresh.first is None and (5, 777, 64, cpu) not in bw._FIXED_DEVICE and not bw._PINNED
    assert torch.equal(bw.chunk_bounds(fresh)[1], bw._device_layout(5, 777, None, 64, cpu).valid.sum(-1).int())
    assert bw.device_layout(1, 64, None, 64, cpu) is oldest, "a capture takes the kept layout"
    assert bw._PINNED == {(1, 64, 64, cpu): oldest} and (1, 64, 64, cpu) not in bw._FIXED_DEVICE
    monkeypatch.setattr(bw, "_capturing", lambda x: False)
    for t in range(2000, 2000 + 2 * bw._FIXED_DEVICE_MAX):  # the LRU turns over: a pinned layout stays
        bw.device_layout(1, t, None, 64, cpu)
    assert bw.device_layout(1, 64, None, 64, cpu) is oldest and (1, 64, 64, cpu) not in bw._FIXED_DEVICE
    # past the pins' budget a capture builds its own again, and the kept entry stays in the LRU
    monkeypatch.setattr(bw, "_PINNED_MAX_BYTES", bw._layout_bytes(oldest))
    kept = bw.device_layout(2, 1000, None, 64, cpu)
    monkeypatch.setattr(bw, "_capturing", lambda x: True)
    built = bw.device_layout(2, 1000, None, 64, cpu)
    assert built is not kept and built.first is None and (2, 1000, 64, cpu) in bw._FIXED_DEVICE
    assert len(bw._PINNED) == 1
    # the budget counts the allocator's 512-byte blocks: the (1, 64) layout's six small tensors hold six blocks
    assert bw._pinned_bytes == bw._layout_bytes(oldest) == 6 * 512


def test_a_build_raced_by_a_pin_returns_the_pinned_layout(monkeypatch):
    """A backward that misses a shape and builds it, while another thread keeps the same shape and a capture pins
    it, returns the pinned layout instead of putting its own build into the cache beside it (where it would be a
    slot never returned). (A review's finding.)"""
    import collections

    cpu = torch.device("cpu")
    monkeypatch.setattr(bw, "_FIXED_DEVICE", collections.OrderedDict())
    monkeypatch.setattr(bw, "_PINNED", {})
    monkeypatch.setattr(bw, "_pinned_bytes", 0)
    real, meanwhile = bw._device_layout, []

    def interleaved(*a, **k):
        out = real(*a, **k)
        if not meanwhile:
            meanwhile.append(True)
            bw.device_layout(2, 300, None, 64, cpu)  # another thread: built and kept
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(bw, "_capturing", lambda x: True)
                meanwhile.append(bw.device_layout(2, 300, None, 64, cpu))  # a capture pins it
        return out

    monkeypatch.setattr(bw, "_device_layout", interleaved)
    got = bw.device_layout(2, 300, None, 64, cpu)
    assert got is meanwhile[1] is bw._PINNED[(2, 300, 64, cpu)]
    assert (2, 300, 64, cpu) not in bw._FIXED_DEVICE


def test_kept_layouts_under_threads(monkeypatch):
    """Backwards on several threads sharing the kept layouts (a small bound, so entries are evicted while others
    read them): every call gets the layout of its own shape, the bound holds, nothing raises."""
    import collections
    import threading

    cpu = torch.device("cpu")
    monkeypatch.setattr(bw, "_FIXED_DEVICE", collections.OrderedDict())
    monkeypatch.setattr(bw, "_FIXED_DEVICE_MAX", 3)
    errors, wrong = [], []

    def work(seed: int) -> None:
        try:
            for i in range(60):
                t = 1 + (seed * 7 + i) % 9 * 40
                got = bw.device_layout(2, t, None, 64, cpu)
                if int(got.length.sum()) != 2 * t:
                    wrong.append(t)
        except Exception as e:
            errors.append(e)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors and not wrong
    assert len(bw._FIXED_DEVICE) <= 3


def test_host_chunk_count_spares_the_varlen_sync(monkeypatch):
    """With the host copy's chunk count (cu_seqlens_cpu), a varlen layout keeps the padded bound, reading nothing
    on the host, where the bound pads at most a quarter more (and eight chunks); where it pads more, it reads the
    real count as before. A wrong host count (fewer chunks than the offsets make) can only pick the bound, which is
    never short: the gradients stay autograd's."""
    cpu = torch.device("cpu")
    reads = []

    def layout(cu, host):
        reads.clear()
        tokens = int(cu[-1])
        original = torch.Tensor.__int__

        def counted(self):
            reads.append(1)
            return original(self)

        monkeypatch.setattr(torch.Tensor, "__int__", counted)
        try:
            return bw.device_layout(1, tokens, cu, 64, cpu, exact=True, host_chunks=host)
        finally:
            monkeypatch.setattr(torch.Tensor, "__int__", original)

    packed = torch.tensor([0, 1000, 2100, 4096])  # 16 + 18 + 32 = 66 chunks; the bound (4096 + 3 x 63) / 64 = 66
    got = layout(packed, 66)
    assert not reads and got.token.shape[0] == 66
    got = layout(packed, None)
    assert reads and got.token.shape[0] == 66  # no host count: the read, as before
    short = torch.tensor([0] + [10 * i for i in range(1, 65)])  # 64 sequences of 10 tokens: 64 chunks, bound 73
    assert layout(short, 64).token.shape[0] == 73 and not reads  # 9 more: within eight or a quarter
    empty = torch.tensor([0] * 60 + [640])  # one sequence of 640 tokens and 59 empty ones: 10 chunks, bound 69
    assert layout(empty, 10).token.shape[0] == 10 and reads  # the bound would pad 59: the read
    assert layout(empty, 1).token.shape[0] == 10 and reads  # a wrong (short) host count: still the read
    assert bw._pads_little(66, 66) and bw._pads_little(40, 32) and not bw._pads_little(41, 32)
    assert bw._pads_little(8, 0) and not bw._pads_little(9, 0)
    # a wrong host count that picks the bound: the padded layout, which covers every real chunk
    q, k, v, g, beta, h0 = _inputs(1, 300, 1, 2, 8, seed=3, n=3)
    cu = torch.tensor([0, 100, 230, 300])
    gen = torch.Generator().manual_seed(2)
    do = torch.randn(1, 300, 2, 8, generator=gen, dtype=torch.float64)
    dfs = torch.randn(3, 2, 8, 8, generator=gen, dtype=torch.float64)
    refs = _autograd(q, k, v, g, beta, h0, do, dfs, 0.3, cu, True, True)
    states_pass = _reference_states_pass(q, k, v, g, beta, h0, cu, True)
    grads_pass = _reference_state_grads_pass(q, k, v, g, beta, h0, cu, True, 0.3)
    counted = []

    def counting(slots, count, *rest):
        counted.append(count)
        return states_pass(slots, count)

    args = (q, k, v, g, beta, do, dfs, 0.3, h0, cu, True, 64, counting, grads_pass, None, None)
    got = chunk_gated_delta_rule_backward(*args, 0)  # says no chunks at all: the bound (7) is within eight
    assert counted[-1] == (300 + 3 * 63) // 64
    for name, mine, ref in zip(NAMES, got, refs):
        assert _err(mine, ref) < 1e-10, f"{name}: {_err(mine, ref):.2e}"


@pytest.mark.parametrize("capturing", [True, False])
def test_kernel_stages_on_a_padded_layout(monkeypatch, capturing):
    """Both stages by the float64 stand-ins on a pack whose offsets leave most chunks as padding (tokens in no
    sequence, an empty sequence, unchecked offsets). While capturing the layout is device_layout's padded one:
    every unwritten slot holds NaN, and the gradients are still autograd's (the padding never reaches one);
    otherwise it is sized to the real chunks."""
    monkeypatch.setattr(bw, "_capturing", lambda x: capturing)
    t = 300
    for cu in (torch.tensor([0, 10, 10, 75]), torch.tensor([40, 20, 140, 999])):
        n = cu.numel() - 1
        seen = cu.clamp(0, t).cummax(0).values  # the sequences the kernels walk
        q, k, v, g, beta, h0 = _inputs(1, t, 1, 2, 8, seed=14, n=n)
        gen = torch.Generator().manual_seed(6)
        do = torch.randn(1, t, 2, 8, generator=gen, dtype=torch.float64)
        dfs = torch.randn(n, 2, 8, 8, generator=gen, dtype=torch.float64)
        refs = _autograd(q, k, v, g, beta, h0, do, dfs, 0.3, seen, True, True)
        states_pass = _reference_states_pass(q, k, v, g, beta, h0, seen, True)
        grads_pass = _reference_state_grads_pass(q, k, v, g, beta, h0, seen, True, 0.3)
        counted = []

        def counting(slots, count, *rest):
            counted.append(count)
            return states_pass(slots, count)

        got = chunk_gated_delta_rule_backward(q, k, v, g, beta, do, dfs, 0.3, h0, cu, True, 64, counting, grads_pass)
        real = int(((seen[1:] - seen[:-1] + 63) // 64).sum())
        assert counted[0] > real if capturing else counted[0] == real  # padding only while capturing
        for name, mine, ref in zip(NAMES, got, refs):
            assert torch.isfinite(mine).all(), name
            assert _err(mine, ref) < 1e-10, f"{name}: {_err(mine, ref):.2e}"


def test_precision_study_rounds_what_the_kernel_path_reads():
    """benchmarks/gdr_backward_precision.py: bf16-stored states reach every gradient they feed (v' and dv' are
    recomputed from them, as on the kernel path; a review found the study rounding only h and dh while v' and dv'
    stayed fp32, which showed dv and dbeta untouched), and every variant stays within the issue's 0.02."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import gdr_backward_precision as study

    got = study.run(128, 1, 2, 0, "cpu")
    assert max(got["fp32"].values()) < 1e-5
    for name in ("dq", "dk", "dv", "dg", "dbeta"):
        assert got["states bf16"][name] > 1e-5, f"{name}: the stored states' rounding does not reach it"
    assert max(e for errs in got.values() for e in errs.values()) < 0.02


@pytest.mark.parametrize("fold", [1, 2])
@pytest.mark.parametrize("varlen", [False, True])
@pytest.mark.parametrize("l2", [False, True])
def test_the_kernel_path_wiring_with_b3_modelled(varlen, l2, fold):
    """The backward's all-kernel path (stages 1 and 2 given, stages 0 and 3 by B3: backward._kernel_backward) with
    the torch stages in the passes' places and gdr_b3_model's torch model in B3's: the same gradients as the
    torch backward, so the chunk table (first token, length), the GVA sum of B3's parts (fold 1: one a value head;
    fold 2: the whole group, nothing left to sum), the l2norm's backward, the casts and the zeroed tokens of no sequence are the kernel path's as they are the torch path's
    (the GPU tests hold the kernel itself to the model)."""
    from gdr_b3_model import chunk_grads_model

    torch.manual_seed(3)
    b, t, h, hv, scale = (1, 150, 2, 4, 0.3) if varlen else (2, 77, 2, 4, 0.3)
    cu = torch.tensor([0, 40, 40, 101, 140]) if varlen else None  # tokens 140-149 in no sequence
    n = 4 if varlen else b
    q, k = torch.randn(b, t, h, 128), torch.randn(b, t, h, 128)
    if not l2:
        q, k = torch.nn.functional.normalize(q, dim=-1), torch.nn.functional.normalize(k, dim=-1)
    v, do = torch.randn(b, t, hv, 128), torch.randn(b, t, hv, 128)
    g, beta = torch.nn.functional.logsigmoid(torch.randn(b, t, hv)), torch.rand(b, t, hv)
    h0, dfs = torch.randn(n, hv, 128, 128) * 0.1, torch.randn(n, hv, 128, 128) * 0.1
    args = (q, k, v, g, beta, do, dfs, scale, h0, cu, l2, 64)
    want = chunk_gated_delta_rule_backward(*args)

    host = chunk_layout(b, t, cu, 64, q.device)
    qf, kf = (bw._l2norm(q), bw._l2norm(k)) if l2 else (q, k)
    qc = bw._gather(qf, host, torch.float32).repeat_interleave(hv // h, dim=1)
    kc = bw._gather(kf, host, torch.float32).repeat_interleave(hv // h, dim=1)
    f = bw._factors(qc, kc, bw._gather(v, host, torch.float32), bw._gather(g, host, torch.float32),
                    bw._gather(beta, host, torch.float32))  # fmt: skip
    states, _ = bw._states(f, host.counts, h0.index_select(0, host.order))
    dh_next, _, dh_ranked = bw._reverse(f, qc, bw._gather(do, host, torch.float32), host.counts,
                                        dfs.index_select(0, host.order), scale)  # fmt: skip
    dh0 = torch.empty_like(dh_ranked).index_copy_(0, host.order, dh_ranked)
    seen = {}

    def states_pass(slots, count):
        seen["count"] = count
        return states

    def grads_pass(do_, dfinal, slots, count, want_dh0):
        return dh_next, dh0 if want_dh0 else None

    def chunk_pass(do_, st, dh, first, length, covered):
        seen["covered"] = covered
        return chunk_grads_model(q, k, v, g, beta, do_, st, dh, first, length, covered, scale, l2, fold=fold)

    def rows_pass(dq_parts, dk_parts):  # dq and dk's last step: what api.gdr_grad_rows is held to
        seen["parts"] = dq_parts.shape[1] // q.shape[2]
        return bw._finish_rows(q, k, dq_parts, dk_parts, l2)

    got = chunk_gated_delta_rule_backward(*args, states_pass, grads_pass, chunk_pass)
    assert seen["covered"] is (not varlen) and seen["count"] == states.shape[0]
    with_rows = chunk_gated_delta_rule_backward(*args, states_pass, grads_pass, chunk_pass, rows_pass)
    assert seen["parts"] == v.shape[2] // q.shape[2] // fold
    for name, mine, ref, other in zip(NAMES, got, want, with_rows):
        assert mine.dtype == ref.dtype and mine.shape == ref.shape, name
        assert torch.allclose(mine, ref, rtol=1e-4, atol=1e-5), f"{name}: {(mine - ref).abs().max():.3e}"
        assert torch.equal(other, mine), f"{name}: the rows pass is not wired as the torch step"
    if varlen:
        assert not got[2][0, 140:].any() and not got[3][0, 140:].any(), "tokens in no sequence get no gradient"


def test_grad_rows_kernel_is_on_unless_switched_off(monkeypatch):
    """dq and dk's last step by its kernel unless DG_SM120_GDR_GRAD_ROWS=0 (qualified in run 161)."""
    monkeypatch.delenv(bw.GRAD_ROWS_ENV, raising=False)
    assert bw.grad_rows_enabled()
    monkeypatch.setenv(bw.GRAD_ROWS_ENV, "1")
    assert bw.grad_rows_enabled()
    monkeypatch.setenv(bw.GRAD_ROWS_ENV, "0")
    assert not bw.grad_rows_enabled()


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_l2norm_backward_is_autograds(dtype):
    """backward._l2norm_backward (four passes over the rows: norm, dot, scale, fused multiply-add) against autograd
    through y = x / sqrt(|x|^2 + eps) in float64: x in the inputs' dtype (bf16 as the kernel path gets q / k), dy
    in fp32 or float64 as B3 and the torch stages give it; rows of every scale, a zero row (eps keeps it finite) and
    a batch of heads. The result has dy's dtype and leaves dy unchanged."""
    gen = torch.Generator().manual_seed(3)
    x = (
        torch.randn(3, 5, 4, 128, generator=gen, dtype=torch.float64)
        * torch.logspace(-3, 2, 4, dtype=torch.float64)[:, None]
    )
    x[0, 0, 0] = 0.0
    dy = torch.randn(x.shape, generator=gen, dtype=torch.float64)
    xs = x.to(dtype)
    dy_t = dy.to(torch.float64 if dtype == torch.float64 else torch.float32)
    before = dy_t.clone()
    ref_x = xs.to(torch.float64).clone().requires_grad_()  # (a copy: float64 x must not require grad itself)
    (ref_x / torch.sqrt((ref_x * ref_x).sum(-1, keepdim=True) + 1e-6)).backward(dy_t.to(torch.float64))
    got = bw._l2norm_backward(xs, dy_t)
    assert got.dtype == dy_t.dtype and torch.equal(dy_t, before)
    err = float((got.double() - ref_x.grad).norm() / ref_x.grad.norm())
    assert err < (1e-13 if dtype == torch.float64 else 1e-6), err
    assert torch.isfinite(got).all()


def test_host_offsets_reach_the_backward():
    """The host chunk count from cu_seqlens_cpu travels with the call into the Function's meta (api._run, what
    chunk_gated_delta_rule does under autograd: ceil(length / 64) summed), None without the host copy, and the
    gradients are the same either way."""
    from deep_gemm_sm120.families.gated_delta_rule import api

    leaves, cu, run = _function_case((True, True, True, True, True, True))
    seen = []
    apply = api.Differentiable.apply

    def recording(meta, *rest):
        seen.append(meta[6])
        return apply(meta, *rest)

    lengths = (cu[1:] - cu[:-1]).tolist()
    grads = []
    for host in (None, lengths):
        xs = [x.detach().clone().requires_grad_() for x in leaves]
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(api.Differentiable, "apply", recording)
            o, fs = api._run(lambda *a, **_: run(*a[:7]), *xs[:5], 0.3, xs[5], cu, True, host)
        (o.sum() + fs.sum()).backward()
        grads.append([x.grad for x in xs])
    assert seen == [None, sum(ceil_div(n, 64) for n in lengths)] and seen[1] > 0
    for a, b in zip(*grads):
        assert torch.equal(a, b)
