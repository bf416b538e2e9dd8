"""The B3 kernel's algorithm (impls/sm120_gated_delta_rule_bwd_chunk.cuh), step for step in float64 torch on one
chunk and value head: its rewrites (dt = dvn Z^T, one accumulator for dk's terms through kd and kb, the row sums
from Y = Kn h and Yd = Kn dh', the forward substitution for T, the fixed-order reductions, G_last's term on the last
row, the reverse cumsum) against the torch stages' formulas (tests/gdr_b3_model.py), partial chunks included. The
GPU test holds the kernel to the same model; this one holds the algebra the kernel implements."""

from __future__ import annotations

import pytest
import torch
from gdr_b3_model import chunk_grads_model

C, K = 64, 128


def _kernel_algebra(qn, kn, v, do, g, beta, h, dh, length, scale):
    """One (chunk, value head) as the kernel computes it; rows past `length` hold zeros (q, k, v, do, g, beta)."""
    i = torch.arange(C)
    cum = g.cumsum(0)
    gamma, tail, bg = cum.exp(), (cum[-1] - cum).exp(), beta * cum.exp()
    causal = i[None, :] <= i[:, None]
    strict = i[None, :] < i[:, None]
    d = torch.where(causal, (cum[:, None] - cum[None, :]).exp(), torch.zeros((), dtype=cum.dtype))
    ar = torch.where(strict, (kn @ kn.T) * d, torch.zeros((), dtype=d.dtype))
    m = torch.where(causal, (qn @ kn.T) * d, torch.zeros((), dtype=d.dtype))
    t = torch.zeros(C, C, dtype=d.dtype)
    for col in range(C):  # forward substitution, column by column (the kernel's eight threads a column)
        t[col, col] = 1.0
        for row in range(col + 1, C):
            t[row, col] = -beta[row] * (ar[row, col:row] @ t[col:row, col])
    dm = torch.zeros(C, C, dtype=d.dtype)
    dt = torch.zeros(C, C, dtype=d.dtype)
    dqg = torch.zeros(C, K, dtype=d.dtype)
    dkp = torch.zeros(C, K, dtype=d.dtype)
    r_bv, r_tail, r_kb = (torch.zeros(C, dtype=d.dtype) for _ in range(3))
    dv = torch.zeros(C, K, dtype=d.dtype)
    for vs in range(0, K, 16):  # phase 1: 16-column slices of V
        hs, dhs, vsl, dos = h[:, vs : vs + 16], dh[:, vs : vs + 16], v[:, vs : vs + 16], do[:, vs : vs + 16]
        y, yd = kn @ hs, kn @ dhs
        z = beta[:, None] * vsl - bg[:, None] * y
        dvn = scale * (m.T @ dos) + tail[:, None] * yd
        vn = t @ z
        dvb = t.T @ dvn
        r_bv += (dvb * vsl).sum(1)
        r_tail += (vn * yd).sum(1)
        r_kb += (dvb * y).sum(1)
        dv[:, vs : vs + 16] = beta[:, None] * dvb
        dm += dos @ vn.T
        dt += dvn @ z.T
        dqg += dos @ hs.T
        dkp += (tail[:, None] * vn) @ dhs.T + (-bg[:, None] * dvb) @ hs.T
    before_last = i < length - 1
    acc_beta = r_bv.clone()
    acc_tail = torch.where(before_last, tail * r_tail, torch.zeros((), dtype=d.dtype))
    acc_beta += -gamma * r_kb
    acc_cum = -bg * r_kb
    x = torch.where(strict, scale * dm * m, torch.zeros((), dtype=d.dtype))
    acc_cum += x.sum(1) - x.sum(0)
    dqk = torch.where(causal, scale * dm * d, torch.zeros((), dtype=d.dtype))
    acc_cum += gamma * (scale * dqg * qn).sum(1)
    dq = scale * gamma[:, None] * dqg + dqk @ kn
    dk = dkp + dqk.T @ qn
    da = torch.where(strict, -(t.T @ dt @ t.T), torch.zeros((), dtype=d.dtype))
    acc_beta += (da * ar).sum(1)
    xp = beta[:, None] * da * ar
    acc_cum += xp.sum(1) - xp.sum(0)
    dkk = beta[:, None] * da * d
    dk = dk + (dkk + dkk.T) @ kn
    dcum = acc_cum - acc_tail
    dcum[-1] += acc_tail.sum() + cum[-1].exp() * (h * dh).sum()
    dg = dcum.flip(0).cumsum(0).flip(0)
    return dq, dk, dv, dg, acc_beta


@pytest.mark.parametrize("length", [64, 41, 1])
def test_the_kernels_algebra_equals_the_torch_stages(length):
    torch.manual_seed(length)
    scale = 0.3
    rows = torch.arange(C) < length
    z = lambda x: torch.where(rows.view(-1, *([1] * (x.dim() - 1))), x, torch.zeros((), dtype=x.dtype))
    q = z(torch.nn.functional.normalize(torch.randn(C, K, dtype=torch.float64), dim=-1))
    k = z(torch.nn.functional.normalize(torch.randn(C, K, dtype=torch.float64), dim=-1))
    v, do = z(torch.randn(C, K, dtype=torch.float64)), z(torch.randn(C, K, dtype=torch.float64))
    g = z(torch.nn.functional.logsigmoid(torch.randn(C, dtype=torch.float64)))
    beta = z(torch.rand(C, dtype=torch.float64))
    h, dh = torch.randn(K, K, dtype=torch.float64) * 0.1, torch.randn(K, K, dtype=torch.float64) * 0.1
    got = _kernel_algebra(q, k, v, do, g, beta, h, dh, length, scale)
    # the model on the same chunk: B = 1, T = 64 tokens, one q / k head and value head, the chunk's first `length`
    first, count = torch.tensor([0], dtype=torch.int32), torch.tensor([length], dtype=torch.int32)
    want = chunk_grads_model(
        q[None, :, None], k[None, :, None].double(), v[None, :, None], g[None, :, None],
        beta[None, :, None], do[None, :, None], h[None, None], dh[None, None], first, count, False, scale, False,
    )  # fmt: skip
    for name, mine, ref in zip(("dq", "dk", "dv", "dg", "dbeta"), got, want):
        ref = ref.reshape(C, -1).squeeze(-1)[:length]
        assert torch.allclose(mine[:length], ref, rtol=1e-9, atol=1e-11), (
            f"{name}: {(mine[:length] - ref).abs().max():.3e}"
        )
