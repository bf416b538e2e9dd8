"""The chunk-wise (WY) gated-delta-rule formulation the kernels will implement equals the token-by-token
definition, in float64 on the CPU: every stage of the planned kernels is checked before any kernel exists."""

from __future__ import annotations

import pytest
import torch

from deep_gemm_sm120.selftest.workloads.gdr_reference import (
    chunked,
    chunked_lookahead,
    l2norm,
    naive_recurrence,
    relative_l2,
)


def _inputs(b, t, h, hv, dk, dv, seed=0, initial=False, n_seq=None):
    g_ = torch.Generator().manual_seed(seed)
    q = torch.randn(b, t, h, dk, generator=g_)
    k = torch.randn(b, t, h, dk, generator=g_)
    v = torch.randn(b, t, hv, dv, generator=g_)
    g = torch.nn.functional.logsigmoid(torch.randn(b, t, hv, generator=g_))  # log decay <= 0
    beta = torch.sigmoid(torch.randn(b, t, hv, generator=g_))
    s0 = torch.randn(n_seq or b, hv, dk, dv, generator=g_) if initial else None
    return q, k, v, g, beta, s0


@pytest.mark.parametrize("t,chunk", [(1, 32), (31, 32), (32, 32), (33, 32), (100, 32), (100, 64), (65, 16)])
@pytest.mark.parametrize("h,hv", [(2, 2), (2, 4)])
@pytest.mark.parametrize("initial,l2", [(False, True), (True, False)])
def test_chunked_equals_recurrence(t, chunk, h, hv, initial, l2):
    q, k, v, g, beta, s0 = _inputs(2, t, h, hv, 16, 8, seed=t + chunk, initial=initial)
    kw = dict(initial_state=s0, output_final_state=True, use_qk_l2norm_in_kernel=l2)
    o_ref, s_ref = naive_recurrence(q, k, v, g, beta, **kw)
    o, s = chunked(q, k, v, g, beta, chunk_size=chunk, **kw)
    assert relative_l2(o, o_ref) < 1e-10 and relative_l2(s, s_ref) < 1e-10


def test_varlen_with_empty_and_one_token_sequences():
    cu = torch.tensor([0, 1, 1, 40, 41, 105], dtype=torch.int32)  # lengths 1, 0, 39, 1, 64
    q, k, v, g, beta, s0 = _inputs(1, 105, 2, 4, 16, 8, seed=3, initial=True, n_seq=5)
    kw = dict(initial_state=s0, output_final_state=True, cu_seqlens=cu)
    o_ref, s_ref = naive_recurrence(q, k, v, g, beta, **kw)
    for chunk in (32, 64):
        o, s = chunked(q, k, v, g, beta, chunk_size=chunk, **kw)
        assert relative_l2(o, o_ref) < 1e-10 and relative_l2(s, s_ref) < 1e-10
    # an empty sequence hands its initial state through unchanged
    assert torch.equal(s_ref[1], s0[1].double())


def test_sequences_are_independent_and_the_scale_default():
    q, k, v, g, beta, _ = _inputs(2, 20, 2, 2, 16, 8, seed=5)
    o, _ = naive_recurrence(q, k, v, g, beta)
    o1, _ = naive_recurrence(q[1:], k[1:], v[1:], g[1:], beta[1:])
    assert torch.equal(o[1:], o1)
    o2, _ = naive_recurrence(q, k, v, g, beta, scale=16**-0.5)
    assert torch.equal(o, o2)


def test_grouped_value_heads_share_their_qk_head():
    q, k, v, g, beta, _ = _inputs(1, 10, 2, 4, 16, 8, seed=7)
    o, _ = naive_recurrence(q, k, v, g, beta)
    # value heads 0, 1 use qk head 0; 2, 3 use qk head 1
    o_h1, _ = naive_recurrence(q[:, :, 1:], k[:, :, 1:], v[:, :, 2:], g[:, :, 2:], beta[:, :, 2:])
    assert torch.allclose(o[:, :, 2:], o_h1, rtol=0, atol=1e-12)


@pytest.mark.parametrize("t,chunk", [(1, 32), (33, 32), (100, 32), (200, 64), (65, 16)])
def test_lookahead_chunk_form_equals_recurrence(t, chunk):
    """K_c S_c from the previous chunk (state, its k, v' and decay) is the same algebra: exact in float64, varlen
    sequences restarting the lookahead."""
    q, k, v, g, beta, s0 = _inputs(2, t, 2, 4, 16, 8, seed=t, initial=True)
    kw = dict(initial_state=s0, output_final_state=True)
    o_ref, s_ref = naive_recurrence(q, k, v, g, beta, **kw)
    o, s = chunked_lookahead(q, k, v, g, beta, chunk_size=chunk, **kw)
    assert relative_l2(o, o_ref) < 1e-10 and relative_l2(s, s_ref) < 1e-10
    cu = torch.tensor([0, 1, 1, 40, 105], dtype=torch.int32)
    q, k, v, g, beta, s0 = _inputs(1, 105, 2, 4, 16, 8, seed=5, initial=True, n_seq=4)
    kw = dict(initial_state=s0, output_final_state=True, cu_seqlens=cu)
    o_ref, s_ref = naive_recurrence(q, k, v, g, beta, **kw)
    o, s = chunked_lookahead(q, k, v, g, beta, chunk_size=chunk, **kw)
    assert relative_l2(o, o_ref) < 1e-10 and relative_l2(s, s_ref) < 1e-10


def test_lookahead_in_bf16_operands_stays_within_the_bound():
    """With the operands a bf16 kernel would round (S, the C x C cross products, v'), the lookahead form stays
    within the kernels' 0.01 bound over 64 chunks and within 2x of the direct form with S rounded alike (measured
    1.5e-4 against 1.0e-4 for o, 6.1e-5 against 4.5e-5 for the final state): the extra rounding of the C x C cross
    products does not accumulate along the sequence."""
    bf = lambda x: x.to(torch.bfloat16).double()
    g_ = torch.Generator().manual_seed(29)
    t = 2048
    q = l2norm(torch.randn(1, t, 2, 128, generator=g_)).to(torch.bfloat16).double()
    k = l2norm(torch.randn(1, t, 2, 128, generator=g_)).to(torch.bfloat16).double()
    v = torch.randn(1, t, 4, 128, generator=g_).to(torch.bfloat16).double()
    g = torch.nn.functional.logsigmoid(torch.randn(1, t, 4, generator=g_) + 3).double()  # slow decay: long memory
    beta = torch.sigmoid(torch.randn(1, t, 4, generator=g_)).double()
    o_ref, s_ref = naive_recurrence(q, k, v, g, beta, output_final_state=True)
    kw = dict(output_final_state=True, chunk_size=32, rounding=bf)
    o_la, s_la = chunked_lookahead(q, k, v, g, beta, **kw)
    o_d, s_d = chunked_lookahead(q, k, v, g, beta, lookahead=False, **kw)
    e_la, e_d = relative_l2(o_la, o_ref), relative_l2(o_d, o_ref)
    f_la, f_d = relative_l2(s_la, s_ref), relative_l2(s_d, s_ref)
    assert max(e_la, f_la) < 0.01, (e_la, f_la)
    assert e_la <= 2 * e_d and f_la <= 2 * f_d, ((e_la, e_d), (f_la, f_d))
