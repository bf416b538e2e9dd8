"""The gated delta rule forward split into segments that run in parallel (issue 42's context parallelism inside
one GPU), in float64: the algebra its kernels will follow, checked against the token-by-token recurrence.

Each chunk maps its incoming state affinely (per value head, gdr_reference's chunk form):
    h_next = e^(G_last) h + Kd^T (U - W h) = A_c h + B_c,    A_c = e^(G_last) I - Kd^T W  [K, K],  B_c = Kd^T U  [K, V]
so a run of chunks (a segment) maps its first state h to A_seg h + B_seg with A_seg = A_n ... A_1 and B_seg the
same walk from a zero state. The forward becomes three passes:
  1. per segment, in parallel: (A_seg, B_seg) from the chunks' W, U, Kd and G_last (the prep kernel's factors);
  2. the combine, sequential but one step per segment: h_0 = initial state, h_{j+1} = A_j h_j + B_j;
  3. per segment, in parallel: the ordinary chunk walk from h_j, writing o (the last segment's state is the
     final state).
Pass 1 costs a K x K x C and a K x K x K product per chunk (the second dominates at K = C * 4), pass 3 the
forward's own work: with S segments a sequence's chain shrinks from `chunks` steps to chunks / S + S steps.
"""

from __future__ import annotations

import torch

from .gdr_reference import _over_sequences, chunk_factors


def segment_bounds(start: int, end: int, chunk_size: int, segments: int) -> list[tuple[int, int]]:
    """[start, end) cut into at most `segments` runs of whole chunks, as even as the chunk count allows."""
    chunks = max(1, -(-(end - start) // chunk_size))
    segments = max(1, min(segments, chunks))
    cuts = [start + min(end - start, (chunks * i // segments) * chunk_size) for i in range(segments + 1)]
    return [(a, b) for a, b in zip(cuts, cuts[1:]) if b > a] or [(start, end)]


def combine(
    maps: list[tuple[torch.Tensor, torch.Tensor]], state: torch.Tensor
) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Pass 2: each segment's first state from the initial one and the segments' maps; and the final state."""
    firsts = []
    for a_seg, b_seg in maps:
        firsts.append(state)
        state = a_seg @ state + b_seg
    return firsts, state


def segmented(
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
    segments=4,
):
    """chunk_gated_delta_rule's forward in the three passes of the module doc (each sequence cut into `segments`
    chunk-aligned runs). Returns (o, final) in float64, equal to naive_recurrence up to rounding."""

    def walk(state, b, s, e, q, k, v, g, beta, scale, o):
        hv, dk = v.shape[2], q.shape[3]
        dev = v.device
        per = lambda x, c0, c1: x[b, c0:c1].transpose(0, 1)
        runs = segment_bounds(s, e, chunk_size, segments)
        eye = torch.eye(dk, dtype=torch.float64, device=dev).expand(hv, dk, dk)
        # 1. each segment's affine map, independently of the others
        maps = []
        for r0, r1 in runs:
            a_seg, b_seg = eye.clone(), torch.zeros_like(state)
            for c0 in range(r0, r1, chunk_size):
                c1 = min(c0 + chunk_size, r1)
                f = chunk_factors(*(per(x, c0, c1) for x in (q, k, v, g, beta)))
                a_c = f["cum"][:, -1].exp()[:, None, None] * eye - f["kd"].transpose(1, 2) @ f["w"]
                a_seg, b_seg = a_c @ a_seg, a_c @ b_seg + f["kd"].transpose(1, 2) @ f["u"]
            maps.append((a_seg, b_seg))
        # 2. the combine: each segment's true first state
        firsts, state = combine(maps, state)
        # 3. each segment's chunk walk from its first state, writing o
        for (r0, r1), h in zip(runs, firsts):
            for c0 in range(r0, r1, chunk_size):
                c1 = min(c0 + chunk_size, r1)
                qc = per(q, c0, c1)
                f = chunk_factors(qc, *(per(x, c0, c1) for x in (k, v, g, beta)))
                vnew = f["u"] - f["w"] @ h
                o[b, c0:c1] = ((qc * f["gamma"][:, :, None]) @ h * scale + f["m"] @ vnew * scale).transpose(0, 1)
                h = h * f["cum"][:, -1].exp()[:, None, None] + f["kd"].transpose(1, 2) @ vnew
        return state

    return _over_sequences(
        q, k, v, g, beta, scale, initial_state, output_final_state, cu_seqlens, use_qk_l2norm_in_kernel, walk
    )
