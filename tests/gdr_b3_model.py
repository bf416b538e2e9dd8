"""What the B3 kernel (impls/sm120_gated_delta_rule_bwd_chunk.cuh, api.gdr_chunk_grads) computes, in torch: the
per-chunk gradients of backward.py's stages 0 and 3 for given states and state gradients, per value head and
token-major, before the GVA sum and the l2norm's backward. The CPU tests run the kernel path's wiring with it in
the kernel's place; the GPU tests hold the kernel to it on the same states."""

from __future__ import annotations

import functools

import torch

from deep_gemm_sm120.families.gated_delta_rule import backward as bw


def chunk_grads_model(q, k, v, g, beta, do, states, dh_next, first, length, covered, scale, l2, chunk=64, fold=1):
    """(dq, dk, dv, dg, dbeta) as api.gdr_chunk_grads returns them at that fold: fp32 (float64 for float64
    inputs), dv in v's dtype; dq, dk [B T, H x group / fold, 128] (each summed over `fold` value heads of its q / k
    head, in value-head order), dv [B T, HV, 128], dg and dbeta [B T, HV]."""
    work = torch.float64 if v.dtype == torch.float64 else torch.float32
    bsz, tokens, heads = q.shape[:3]
    hv = v.shape[2]
    group = hv // heads
    dev = q.device
    rows = torch.arange(chunk, device=dev)
    valid = rows[None, :] < length.to(dev).long()[:, None]
    token = torch.where(valid, first.to(dev).long()[:, None] + rows[None, :], 0)
    layout = bw.ChunkLayout(token=token, valid=valid, order=torch.zeros(0, dtype=torch.long), counts=(), num_seqs=0)
    qf, kf = q.to(work), k.to(work)
    qn, kn = (bw._l2norm(qf), bw._l2norm(kf)) if l2 else (qf, kf)
    qc = bw._gather(qn, layout, work).repeat_interleave(group, dim=1)
    kc = bw._gather(kn, layout, work).repeat_interleave(group, dim=1)
    vc, doc = bw._gather(v, layout, work), bw._gather(do, layout, work)
    gc, bc = bw._gather(g, layout, work), bw._gather(beta, layout, work)
    f = bw._factors(qc, kc, vc, gc, bc)
    states, dh_next = states.to(work), dh_next.to(work)  # the passes store them in the inputs' dtype
    vnew = f["u"] - f["w"] @ states
    dvnew = scale * f["m"].transpose(-1, -2) @ doc + f["kd"] @ dh_next
    before_last = (rows < length.to(dev).long()[:, None] - 1)[:, None]
    grads = bw._chunk_grads(qc, kc, vc, bc, f, states, vnew, doc, dh_next, dvnew, scale, before_last)
    out = []
    for x in grads:
        y = bw._scatter(x, layout, bsz, tokens)
        out.append(y.reshape(bsz * tokens, *y.shape[2:]))
    out[2] = out[2].to(v.dtype)  # the kernel rounds dv to v's dtype once, from fp32
    for i in (0, 1):  # the kernel's parts: fold value heads summed in order
        parts = out[i].view(bsz * tokens, heads, group // fold, fold, -1).unbind(3)
        out[i] = functools.reduce(torch.add, parts).reshape(bsz * tokens, heads * (group // fold), -1)
    return tuple(out)
