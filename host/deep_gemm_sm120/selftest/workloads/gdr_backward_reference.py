"""The gated delta rule's backward in the chunk (WY) form, by hand, in float64 (issue 41's reference).

The kernels of issue 41 will compute the gradients the way this module does, so each stage can be checked against
torch.autograd through gdr_reference.naive_recurrence on the CPU before any kernel exists:

  1. recompute: every chunk's incoming state h_c from the initial state (the forward's chunk recurrence; a
     training forward may instead save them: [N, chunks, HV, K, V] fp32);
  2. the reverse state pass, the only sequential stage (one chunk after another, as the forward):
         dv'_c = s M_c^T do_c + Kd_c dh_{c+1}
         dh_c  = s Qg_c^T do_c + e^{G_last} dh_{c+1} - W_c^T dv'_c        (dh_{C} = d final_state; dh_0 -> d h0)
  3. per chunk, independent of the others: dq, dk, dv, dg, dbeta from h_c, dh_{c+1} and dv'_c.

Notation per chunk (per value head): G = cumsum(g) inside the chunk, Gamma = e^G, D_ij = e^(G_i - G_j),
A = strictly_lower(diag(beta) K K^T * D), T = (I + A)^-1, W = T diag(beta Gamma) K, U = T diag(beta) V,
v' = U - W h, M = (Q K^T * D) lower incl. diagonal, Qg = diag(Gamma) Q, Kd = diag(e^(G_last - G)) K and
    o = s (Qg h + M v'),    h_next = e^(G_last) h + Kd^T v'.
q / k heads shared by HV / H value heads get the sum of their value heads' gradients; with use_qk_l2norm the
gradient goes through q / sqrt(|q|^2 + eps) (gdr_reference.l2norm) as well.
"""

from __future__ import annotations

import torch

from .gdr_reference import _sequences, chunk_factors, l2norm


def _chunk_forward(q, k, v, g, beta, h):
    """One chunk of one sequence, every value head at once (h [HV, K, V]): the factors the backward reuses (with
    v' = u - w h), and the outgoing state."""
    f = chunk_factors(q, k, v, g, beta)
    f["vnew"] = f["u"] - f["w"] @ h
    h_next = h * f["cum"][:, -1].exp()[:, None, None] + f["kd"].transpose(1, 2) @ f["vnew"]
    return f, h_next


def _decay_grad(dd: torch.Tensor, decay: torch.Tensor) -> torch.Tensor:
    """d cum from d D where D_ij = e^(cum_i - cum_j): row sums minus column sums of dD * D."""
    x = dd * decay
    return x.sum(-1) - x.sum(-2)


def _chunk_backward(q, k, v, g, beta, h, scale, saved, do, dh_next, dvnew):
    """Stage 3 for one chunk: (dq, dk, dv, dg, dbeta) given the incoming state h, the gradient of the outgoing
    state dh_next and dv' from stage 2."""
    cum, gamma, decay, tail = saved["cum"], saved["gamma"], saved["decay"], saved["tail"]
    t, kb, vb, vnew, qk = saved["t"], saved["kb"], saved["vb"], saved["vnew"], saved["qk"]
    causal, strict, kk = saved["causal"], saved["strict"], saved["kk"]
    last = cum[:, -1]
    dcum = torch.zeros_like(cum)
    # o = s (Qg h + M v')
    dm = scale * do @ vnew.transpose(1, 2)
    dqk = (dm * decay).masked_fill(~causal, 0)
    dq = dqk @ k
    dk = dqk.transpose(1, 2) @ q
    dcum += _decay_grad((dm * qk).masked_fill(~causal, 0), decay)
    dqg = scale * do @ h.transpose(1, 2)  # [HV, C, K]
    dq = dq + dqg * gamma[:, :, None]
    dcum += gamma * (dqg * q).sum(-1)
    # h_next = e^(G_last) h + Kd^T v'
    dkd = vnew @ dh_next.transpose(1, 2)  # [HV, C, K]
    dk = dk + dkd * tail[:, :, None]
    dtail = (dkd * k).sum(-1) * tail  # d(G_last - G_i)
    dcum = dcum - dtail
    dlast = dtail.sum(-1) + last.exp() * (dh_next * h).sum((-1, -2))
    # v' = U - W h  (dv' given): U = T Vb, W = T Kb
    du, dw = dvnew, -dvnew @ h.transpose(1, 2)
    dt = du @ vb.transpose(1, 2) + dw @ kb.transpose(1, 2)
    dvb = t.transpose(1, 2) @ du
    dkb = t.transpose(1, 2) @ dw
    dv = dvb * beta[:, :, None]
    dbeta = (dvb * v).sum(-1)
    dkb_k = (dkb * k).sum(-1)
    dk = dk + dkb * (beta * gamma)[:, :, None]
    dbeta = dbeta + dkb_k * gamma
    dcum = dcum + dkb_k * beta * gamma
    # T = (I + A)^-1: dA = -T^T dT T^T, on A's strictly lower support; A = strict(diag(beta) K K^T * D)
    da = (-t.transpose(1, 2) @ dt @ t.transpose(1, 2)).masked_fill(~strict, 0)
    p = kk * decay
    dbeta = dbeta + (da * p).sum(-1)
    dp = da * beta[:, :, None]
    dkk = dp * decay
    dk = dk + (dkk + dkk.transpose(1, 2)) @ k
    dcum += _decay_grad(dp * kk, decay)
    dcum[:, -1] += dlast
    dg = dcum.flip(-1).cumsum(-1).flip(-1)  # cum = cumsum(g): each g_t feeds every cum_i with i >= t
    return dq, dk, dv, dg, dbeta


def _l2norm_backward(x: torch.Tensor, dy: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """dx of y = x / sqrt(|x|^2 + eps) along the last dimension."""
    n = torch.sqrt((x * x).sum(-1, keepdim=True) + eps)
    y = x / n
    return (dy - y * (y * dy).sum(-1, keepdim=True)) / n


def chunked_backward(
    q,
    k,
    v,
    g,
    beta,
    do,
    dfinal=None,
    scale=None,
    initial_state=None,
    cu_seqlens=None,
    use_qk_l2norm_in_kernel=False,
    chunk_size=32,
):
    """Gradients of chunk_gated_delta_rule's (o, final_state) for upstream do [B, T, HV, V] and dfinal [N, HV, K, V]
    (None: final_state unused). Returns float64 (dq, dk, dv, dg, dbeta, dh0) in the inputs' shapes (dh0 None
    without an initial state), computed in the three stages of the module doc."""
    q0, k0 = q.double(), k.double()
    qn, kn = (l2norm(q0), l2norm(k0)) if use_qk_l2norm_in_kernel else (q0, k0)
    v, g, beta, do = v.double(), g.double(), beta.double(), do.double()
    bsz, t_total, heads, dk_dim = q.shape
    hv, dv_dim = v.shape[2], v.shape[3]
    group = hv // heads
    qe, ke = qn.repeat_interleave(group, dim=2), kn.repeat_interleave(group, dim=2)
    scale = dk_dim**-0.5 if scale is None else scale
    dev = v.device
    dq = torch.zeros(bsz, t_total, hv, dk_dim, dtype=torch.float64, device=dev)
    dk = torch.zeros_like(dq)
    dv = torch.zeros_like(v)
    dg = torch.zeros_like(g)
    dbeta = torch.zeros_like(beta)
    seqs = _sequences(t_total, bsz, cu_seqlens)
    dh0 = torch.zeros(len(seqs), hv, dk_dim, dv_dim, dtype=torch.float64, device=dev)
    for n, (b, s, e) in enumerate(seqs):
        per = lambda x, c0, c1: x[b, c0:c1].transpose(0, 1)
        bounds = [(c0, min(c0 + chunk_size, e)) for c0 in range(s, e, chunk_size)]
        # 1. recompute the chunk states (and what each chunk's backward reuses)
        h = (
            initial_state[n].double().clone()
            if initial_state is not None
            else torch.zeros(hv, dk_dim, dv_dim, dtype=torch.float64, device=dev)
        )
        states, saved = [], []
        for c0, c1 in bounds:
            states.append(h)
            sv, h = _chunk_forward(
                per(qe, c0, c1), per(ke, c0, c1), per(v, c0, c1), per(g, c0, c1), per(beta, c0, c1), h
            )
            saved.append(sv)
        # 2. the reverse state pass: dv' and dh per chunk, last chunk first
        dh = (
            dfinal[n].double().clone()
            if dfinal is not None
            else torch.zeros(hv, dk_dim, dv_dim, dtype=torch.float64, device=dev)
        )
        dh_next, dvnew = [None] * len(bounds), [None] * len(bounds)
        for i in reversed(range(len(bounds))):
            c0, c1 = bounds[i]
            sv, doc = saved[i], per(do, c0, c1)
            dh_next[i] = dh
            dvnew[i] = scale * sv["m"].transpose(1, 2) @ doc + sv["kd"] @ dh
            qg = per(qe, c0, c1) * sv["gamma"][:, :, None]
            dh = (
                scale * qg.transpose(1, 2) @ doc
                + sv["cum"][:, -1].exp()[:, None, None] * dh
                - sv["w"].transpose(1, 2) @ dvnew[i]
            )
        dh0[n] = dh
        # 3. per chunk: the input gradients
        for i, (c0, c1) in enumerate(bounds):
            grads = _chunk_backward(
                per(qe, c0, c1), per(ke, c0, c1), per(v, c0, c1), per(g, c0, c1), per(beta, c0, c1), states[i],
                scale, saved[i], per(do, c0, c1), dh_next[i], dvnew[i],
            )  # fmt: skip
            for out, grad in zip((dq, dk, dv, dg, dbeta), grads):
                out[b, c0:c1] = grad.transpose(0, 1)
    # value heads -> their shared q / k head, then through the l2norm
    dq = dq.view(bsz, t_total, heads, group, dk_dim).sum(3)
    dk = dk.view(bsz, t_total, heads, group, dk_dim).sum(3)
    if use_qk_l2norm_in_kernel:
        dq, dk = _l2norm_backward(q0, dq), _l2norm_backward(k0, dk)
    return dq, dk, dv, dg, dbeta, (dh0 if initial_state is not None else None)
