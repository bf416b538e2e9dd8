"""Which intermediates of the planned kernels may be bf16? Runs the chunk form with chosen roundings and prints
the relative L2 error of o and the final state against the float64 recurrence (CPU; a design aid, not a test).

    python tests/gdr_precision_probe.py [T] [chunk]
"""

from __future__ import annotations

import sys

import torch

from deep_gemm_sm120.selftest.workloads.gdr_reference import l2norm, naive_recurrence, relative_l2


def bf(x):
    return x.to(torch.bfloat16).double()


def chunk_form(q, k, v, g, beta, chunk, round_wu, round_vnew, round_t):
    """Single sequence, one head group; q, k, v already l2-normed / scaled as the kernels would see them."""
    t_total, hv, dk = k.shape
    dv = v.shape[-1]
    scale = dk**-0.5
    state = torch.zeros(hv, dk, dv, dtype=torch.float64)
    o = torch.zeros(t_total, hv, dv, dtype=torch.float64)
    for c0 in range(0, t_total, chunk):
        c1 = min(c0 + chunk, t_total)
        qc, kc, vc = (x[c0:c1].transpose(0, 1) for x in (q, k, v))
        gc, bc = g[c0:c1].T, beta[c0:c1].T
        cum = gc.float().cumsum(-1).double()  # fp32 cumsum, as a warp scan would
        decay = cum[:, :, None] - cum[:, None, :]
        c = c1 - c0
        strict = torch.tril(torch.ones(c, c, dtype=torch.bool), -1)
        causal = torch.tril(torch.ones(c, c, dtype=torch.bool))
        a = (bc[:, :, None] * (kc @ kc.transpose(1, 2)).float().double() * decay.exp()).masked_fill(~strict, 0)
        eye = torch.eye(c, dtype=torch.float64)
        tinv = torch.linalg.solve_triangular(eye + a, eye.expand(hv, c, c), upper=False)
        if round_t:
            tinv = bf(tinv)
        w = tinv @ (kc * (bc * cum.exp())[:, :, None])
        u = tinv @ (vc * bc[:, :, None])
        if round_wu:
            w, u = bf(w), bf(u)
        vnew = u - w @ bf(state) if round_wu else u - w @ state  # the w S product on bf16 MMAs reads S in bf16
        if round_vnew:
            vnew = bf(vnew)
        attn = ((qc @ kc.transpose(1, 2)) * decay.exp()).masked_fill(~causal, 0)
        if round_vnew:
            attn = bf(attn)
        qs = bf(qc * cum.exp()[:, :, None]) if round_vnew else qc * cum.exp()[:, :, None]
        o[c0:c1] = (qs @ (bf(state) if round_vnew else state) * scale + attn @ vnew * scale).transpose(0, 1)
        last = cum[:, -1:]
        kd = kc * (last - cum).exp()[:, :, None]
        state = state * last.exp()[:, :, None] + (bf(kd) if round_vnew else kd).transpose(1, 2) @ vnew
    return o, state


def main() -> int:
    t = int(sys.argv[1]) if len(sys.argv) > 1 else 2048
    chunk = int(sys.argv[2]) if len(sys.argv) > 2 else 32
    g_ = torch.Generator().manual_seed(0)
    hv, dk = 2, 128
    q = l2norm(torch.randn(1, t, hv, dk, generator=g_)).to(torch.bfloat16)
    k = l2norm(torch.randn(1, t, hv, dk, generator=g_)).to(torch.bfloat16)
    v = torch.randn(1, t, hv, dk, generator=g_).to(torch.bfloat16)
    g = torch.nn.functional.logsigmoid(torch.randn(1, t, hv, generator=g_) + 3)  # mostly slow decay
    beta = torch.sigmoid(torch.randn(1, t, hv, generator=g_)).to(torch.bfloat16)
    o_ref, s_ref = naive_recurrence(q, k, v, g, beta, output_final_state=True)
    args = (q[0].double(), k[0].double(), v[0].double(), g[0].double(), beta[0].double(), chunk)
    for wu, vn, tt in ((False, False, False), (True, False, False), (True, True, False), (True, True, True)):
        o, s = chunk_form(*args, wu, vn, tt)
        print(
            f"T={t} chunk={chunk} bf16: w/u={wu!s:5} v'/attn/q/k operands={vn!s:5} T^-1={tt!s:5}  "
            f"rel L2 o {relative_l2(o, o_ref[0]):.2e}  state {relative_l2(s, s_ref[0]):.2e}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
