"""The chunk-form backward of the gated delta rule (selftest/workloads/gdr_backward_reference.py, issue 41's
reference for its kernels) against torch.autograd through the token-by-token float64 recurrence: every input's
gradient, with and without an initial state and a final-state gradient, fixed length and varlen, GVA, l2norm,
chunk sizes that do and do not divide the sequences."""

from __future__ import annotations

import pytest
import torch

from deep_gemm_sm120.selftest.workloads.gdr_backward_reference import chunked_backward
from deep_gemm_sm120.selftest.workloads.gdr_reference import naive_recurrence


def _inputs(b, t, h, hv, d, seed, n=None):
    gen = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64)
    q, k = r(b, t, h, d) * 0.5, r(b, t, h, d) * 0.5
    v = r(b, t, hv, d)
    g = -torch.rand(b, t, hv, generator=gen, dtype=torch.float64) * 0.3
    beta = torch.rand(b, t, hv, generator=gen, dtype=torch.float64)
    h0 = r(n if n is not None else b, hv, d, d) * 0.1
    return q, k, v, g, beta, h0


CASES = [
    # b, t, h, hv, d, chunk, varlen, init, final, l2
    (2, 19, 1, 1, 8, 8, False, False, False, False),
    (1, 37, 2, 4, 8, 16, False, True, True, False),
    (2, 33, 2, 2, 16, 32, False, True, False, True),
    (1, 50, 1, 2, 8, 8, True, True, True, True),
    (1, 64, 2, 2, 8, 16, True, False, True, False),
]


@pytest.mark.parametrize("b,t,h,hv,d,chunk,varlen,init,final,l2", CASES)
def test_chunked_backward_equals_autograd(b, t, h, hv, d, chunk, varlen, init, final, l2):
    cu = torch.tensor([0, 7, 7, 30, t]) if varlen else None
    n = 4 if varlen else b
    q, k, v, g, beta, h0 = _inputs(b, t, h, hv, d, seed=t + hv, n=n)
    leaves = [x.clone().requires_grad_() for x in (q, k, v, g, beta, h0)]
    o, fs = naive_recurrence(
        *leaves[:5], scale=0.3, initial_state=leaves[5] if init else None, output_final_state=True,
        cu_seqlens=cu, use_qk_l2norm_in_kernel=l2,
    )  # fmt: skip
    gen = torch.Generator().manual_seed(7)
    do = torch.randn(o.shape, generator=gen, dtype=torch.float64)
    dfs = torch.randn(fs.shape, generator=gen, dtype=torch.float64) if final else None
    loss = (o * do).sum() + ((fs * dfs).sum() if final else 0)
    loss.backward()
    got = chunked_backward(
        q, k, v, g, beta, do, dfs, scale=0.3, initial_state=h0 if init else None, cu_seqlens=cu,
        use_qk_l2norm_in_kernel=l2, chunk_size=chunk,
    )  # fmt: skip
    names = ("dq", "dk", "dv", "dg", "dbeta", "dh0")
    for name, mine, leaf in zip(names, got, leaves):
        if name == "dh0" and not init:
            assert mine is None
            continue
        ref = leaf.grad
        err = float((mine - ref).norm() / ref.norm().clamp_min(1e-300))
        assert err < 1e-9, f"{name}: relative L2 {err:.2e}"


def test_a_missing_term_is_seen(monkeypatch):
    """The comparison can fail: without the decay factors' contribution to dg (D_ij = e^(G_i - G_j) in A and M),
    dg is off by far more than the bound while the other gradients stay right."""
    from deep_gemm_sm120.selftest.workloads import gdr_backward_reference as ref

    q, k, v, g, beta, h0 = _inputs(1, 24, 1, 1, 8, seed=3)
    leaf = g.clone().requires_grad_()
    o, _ = naive_recurrence(q, k, v, leaf, beta, initial_state=h0)
    do = torch.ones_like(o)
    (o * do).sum().backward()
    err = lambda dg: float((dg - leaf.grad).norm() / leaf.grad.norm())
    assert err(chunked_backward(q, k, v, g, beta, do, initial_state=h0, chunk_size=8)[3]) < 1e-9
    monkeypatch.setattr(ref, "_decay_grad", lambda dd, decay: torch.zeros_like(decay[..., 0]))
    assert err(chunked_backward(q, k, v, g, beta, do, initial_state=h0, chunk_size=8)[3]) > 1e-3
