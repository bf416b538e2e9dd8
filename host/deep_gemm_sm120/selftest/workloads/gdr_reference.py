"""Gated delta rule references (issue 14), in float64 on any device.

naive_recurrence: the token-by-token definition (FLA's chunk_gated_delta_rule forward semantics):
    S_t = exp(g_t) S_{t-1} + beta_t k_t (v_t - exp(g_t) S_{t-1}^T k_t)^T,    o_t = scale * S_t^T q_t
per value head; q / k heads are shared by HV / H consecutive value heads (repeat_interleave), S is [K, V].

chunked: the same result computed the way the kernels will, chunk by chunk, so its stages can be checked one
against the other on the CPU before any kernel exists:
    1. G = cumsum of g inside the chunk;
    2. A = strictly_lower(diag(beta) K K^T * exp(G_i - G_j)), T = (I + A)^-1 (forward substitution here; the kernel
       inverts 16x16 diagonal blocks and combines them);
    3. WY: w = T (beta * exp(G) * K), u = T (beta * V);
    4. per chunk with incoming state S: v' = u - w S, o = scale (exp(G) * Q) S + scale (Q K^T * exp(G_i - G_j),
       lower incl. diagonal) v', S <- exp(G_last) S + (exp(G_last - G) * K)^T v'.

chunked_lookahead: the same chunk form with each chunk's K S built from the previous chunk's quantities,
    K_c S_c = e^{G_last,c-1} (K_c S_{c-1}) + (K_c (e^{G_last - G} * K)_{c-1}^T) v'_{c-1},
the order a recurrence needs to keep the state update (and O) off the chunk-to-chunk dependent chain: only
v'_{c-1} -> K_c S_c -> v'_c is sequential (two C x C products a chunk) while S, K_c S_{c-1} and O run beside it.
`rounding` models the operands such a kernel would hold in bf16 (issue 29's next lever, docs/gated_delta_rule.md).
"""

from __future__ import annotations

import torch


def l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + eps)


def _sequences(t_total: int, batch: int, cu_seqlens: torch.Tensor | None) -> list[tuple[int, int, int]]:
    """(batch index, start, end) of every sequence: one per batch row, or the varlen segments of row 0."""
    if cu_seqlens is None:
        return [(b, 0, t_total) for b in range(batch)]
    cu = cu_seqlens.tolist()
    return [(0, cu[i], cu[i + 1]) for i in range(len(cu) - 1)]


def _prepare(q, k, v, g, beta, scale, use_qk_l2norm):
    q, k, v, g, beta = (x.double() for x in (q, k, v, g, beta))
    if use_qk_l2norm:
        q, k = l2norm(q), l2norm(k)
    group = v.shape[2] // q.shape[2]
    q, k = q.repeat_interleave(group, dim=2), k.repeat_interleave(group, dim=2)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    return q, k, v, g, beta, scale


def _over_sequences(q, k, v, g, beta, scale, initial_state, output_final_state, cu_seqlens, use_qk_l2norm, walk):
    """What both references share: float64 inputs, o and the final states, and each sequence's state from
    initial_state (or zero). walk(state, b, s, e, q, k, v, g, beta, scale, o) runs one sequence, returns its state."""
    q, k, v, g, beta, scale = _prepare(q, k, v, g, beta, scale, use_qk_l2norm)
    bsz, t_total, hv, dk = k.shape
    dv = v.shape[-1]
    o = torch.zeros(bsz, t_total, hv, dv, dtype=torch.float64, device=v.device)
    seqs = _sequences(t_total, bsz, cu_seqlens)
    final = torch.zeros(len(seqs), hv, dk, dv, dtype=torch.float64, device=v.device)
    for n, (b, s, e) in enumerate(seqs):
        state = (
            initial_state[n].double().clone()
            if initial_state is not None
            else torch.zeros(hv, dk, dv, dtype=torch.float64, device=v.device)
        )
        final[n] = walk(state, b, s, e, q, k, v, g, beta, scale, o)
    return o, (final if output_final_state else None)


def chunk_factors(q, k, v, g, beta) -> dict:
    """One chunk's factors (every value head at once: q, k [HV, C, K], v [HV, C, V], g, beta [HV, C]) as `chunked`
    forms them: cum (G), gamma (e^G), decay (e^(G_i - G_j)), the strict / causal masks, kk (K K^T), t ((I + A)^-1),
    kb / vb (the beta-scaled rows), w, u (the WY factors), qk (Q K^T), m (the causal decayed Q K^T), tail
    (e^(G_last - G)) and kd (tail * K). The chunk-form references of the backward and of the segment split use them."""
    hv, c = g.shape
    dev = g.device
    cum = g.cumsum(-1)
    gamma = cum.exp()
    decay = (cum[:, :, None] - cum[:, None, :]).exp()
    strict = torch.tril(torch.ones(c, c, dtype=torch.bool, device=dev), -1)
    causal = torch.tril(torch.ones(c, c, dtype=torch.bool, device=dev))
    kk = k @ k.transpose(1, 2)
    a = (beta[:, :, None] * kk * decay).masked_fill(~strict, 0)
    eye = torch.eye(c, dtype=torch.float64, device=dev)
    t = torch.linalg.solve_triangular(eye + a, eye.expand(hv, c, c), upper=False)
    kb, vb = k * (beta * gamma)[:, :, None], v * beta[:, :, None]
    qk = q @ k.transpose(1, 2)
    tail = (cum[:, -1:] - cum).exp()
    return dict(
        cum=cum, gamma=gamma, decay=decay, strict=strict, causal=causal, kk=kk, t=t, kb=kb, vb=vb, w=t @ kb,
        u=t @ vb, qk=qk, m=(qk * decay).masked_fill(~causal, 0), tail=tail, kd=k * tail[:, :, None],
    )  # fmt: skip


def naive_recurrence(
    q,
    k,
    v,
    g,
    beta,
    scale=None,
    initial_state=None,
    output_final_state=False,
    cu_seqlens=None,
    use_qk_l2norm_in_kernel=False,
):
    """q, k [B, T, H, K]; v [B, T, HV, V]; g, beta [B, T, HV]; initial_state [N, HV, K, V]. Returns (o, final)."""

    def walk(state, b, s, e, q, k, v, g, beta, scale, o):
        for t in range(s, e):
            state = state * g[b, t].exp()[:, None, None]
            kt = k[b, t]  # [HV, K]
            delta = (v[b, t] - torch.einsum("hkv,hk->hv", state, kt)) * beta[b, t][:, None]
            state = state + kt[:, :, None] * delta[:, None, :]
            o[b, t] = torch.einsum("hkv,hk->hv", state, q[b, t]) * scale
        return state

    return _over_sequences(
        q, k, v, g, beta, scale, initial_state, output_final_state, cu_seqlens, use_qk_l2norm_in_kernel, walk
    )


def chunked(
    q,
    k,
    v,
    g,
    beta,
    scale=None,
    initial_state=None,
    output_final_state=False,
    cu_seqlens=None,
    use_qk_l2norm_in_kernel=False,
    chunk_size=32,
):
    """The chunk-wise (WY) formulation of naive_recurrence, chunks restarting at every sequence start."""

    def walk(state, b, s, e, q, k, v, g, beta, scale, o):
        for c0 in range(s, e, chunk_size):
            c1 = min(c0 + chunk_size, e)
            qc = q[b, c0:c1].transpose(0, 1)
            # 1.-3. cumsum, (I + A)^-1, the WY factors
            f = chunk_factors(qc, *(x[b, c0:c1].transpose(0, 1) for x in (k, v, g, beta)))
            vnew = f["u"] - f["w"] @ state  # 4. inter-chunk
            o[b, c0:c1] = ((qc * f["gamma"][:, :, None]) @ state * scale + f["m"] @ vnew * scale).transpose(0, 1)
            state = state * f["cum"][:, -1].exp()[:, None, None] + f["kd"].transpose(1, 2) @ vnew
        return state

    return _over_sequences(
        q, k, v, g, beta, scale, initial_state, output_final_state, cu_seqlens, use_qk_l2norm_in_kernel, walk
    )


def chunked_lookahead(
    q,
    k,
    v,
    g,
    beta,
    scale=None,
    initial_state=None,
    output_final_state=False,
    cu_seqlens=None,
    use_qk_l2norm_in_kernel=False,
    chunk_size=32,
    rounding=None,
    lookahead=True,
):
    """chunked, with K_c S_c from the previous chunk (module docstring). rounding(x) is applied to the operands a
    bf16 kernel would round: S in K_c S_{c-1}, the C x C cross products and v'_{c-1} (None: exact).
    lookahead=False forms K_c r(S_c) directly (today's kernels), for comparing the two under one rounding."""
    r = rounding or (lambda x: x)

    def walk(state, b, s, e, q, k, v, g, beta, scale, o):
        hv, dev = v.shape[2], v.device
        prev = None  # (S_{c-1}, (e^{G_last - G} * K)_{c-1}, v'_{c-1}, e^{G_last, c-1}) within this sequence
        for c0 in range(s, e, chunk_size):
            c1 = min(c0 + chunk_size, e)
            qc, kc, vc = q[b, c0:c1].transpose(0, 1), k[b, c0:c1].transpose(0, 1), v[b, c0:c1].transpose(0, 1)
            gc, bc = g[b, c0:c1].transpose(0, 1), beta[b, c0:c1].transpose(0, 1)
            cum = gc.cumsum(-1)
            decay = cum[:, :, None] - cum[:, None, :]
            c = c1 - c0
            strict = torch.tril(torch.ones(c, c, dtype=torch.bool, device=dev), -1)
            causal = torch.tril(torch.ones(c, c, dtype=torch.bool, device=dev))
            a = (bc[:, :, None] * (kc @ kc.transpose(1, 2)) * decay.exp()).masked_fill(~strict, 0)
            eye = torch.eye(c, dtype=torch.float64, device=dev)
            tinv = torch.linalg.solve_triangular(eye + a, eye.expand(hv, c, c), upper=False)
            u = tinv @ (vc * bc[:, :, None])
            if prev is None or not lookahead:
                ks = kc @ r(state)
            else:
                s_prev, kd_prev, vp_prev, gamma = prev
                ks = gamma[:, :, None] * (kc @ r(s_prev)) + r(kc @ kd_prev.transpose(1, 2)) @ r(vp_prev)
            vnew = u - tinv @ ((bc * cum.exp())[:, :, None] * ks)  # = u - w S
            attn = ((qc @ kc.transpose(1, 2)) * decay.exp()).masked_fill(~causal, 0)
            o[b, c0:c1] = ((qc * cum.exp()[:, :, None]) @ state * scale + attn @ vnew * scale).transpose(0, 1)
            last = cum[:, -1:]
            kd = kc * (last - cum).exp()[:, :, None]
            prev = (state, kd, vnew, last.exp())
            state = state * last.exp()[:, :, None] + kd.transpose(1, 2) @ vnew
        return state

    return _over_sequences(
        q, k, v, g, beta, scale, initial_state, output_final_state, cu_seqlens, use_qk_l2norm_in_kernel, walk
    )


def relative_l2(x: torch.Tensor, ref: torch.Tensor) -> float:
    return ((x.double() - ref.double()).norm() / ref.double().norm().clamp_min(1e-300)).item()
