"""chunk_gated_delta_rule's backward as batched torch operations, on any device (issue 41, its first stage).

The three stages of selftest/workloads/gdr_backward_reference.py (docs/gated_delta_rule.md, "Backward"), with
every chunk of every sequence in one batch instead of one chunk at a time, so that each stage can later be
replaced by its kernel without changing what is computed:

  0. the chunk factors of every chunk at once (cumsum, decays, T = (I + A)^-1, the WY factors, M);
  1. the states h_c at every chunk's start, in one step per chunk position (all sequences together);
  2. the reverse pass: dv'_c and dh_{c+1}, one step per chunk position, last first;
  3. the input gradients of every chunk at once, then each value head's dq / dk summed onto its q / k head and
     passed back through the l2norm.

Work is in fp32 (float64 when the inputs are float64). Stages 1 and 2 keep one [K, V] state a chunk and value head:
2 x NC x HV x 64 KiB at K = V = 128 (NC chunks), freed when the backward returns. When stages 1 and 2 run as kernels
(CUDA) the chunk layout is built on the device from the offsets (device_layout: no host read, so the backward is
graph capturable, varlen included), sized for the most chunks the offsets can make; the torch stages loop over
chunk positions and read the offsets on the host (chunk_layout).
"""

from __future__ import annotations

import collections
import functools
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.autograd.function import once_differentiable

from ...core.arith import ceil_div
from .kernel import STATE_TOKENS


@dataclass(frozen=True)
class ChunkLayout:
    """Where every chunk's tokens are, numbered so that each step of the sequential stages is a slice.

    Sequences are ranked by their chunk count, most first (`order`: the sequence at each rank). Chunks are
    numbered position by position: every rank's first chunk, then every second chunk, ... At position j the
    sequences that still have a chunk are ranks 0 .. counts[j] - 1, so a step reads and writes the first counts[j]
    states and one contiguous range of chunks."""

    token: torch.Tensor  # [NC, C] int64: flat token index b * T + t (0 on padding rows)
    valid: torch.Tensor  # [NC, C] bool: a token of the chunk's sequence
    order: torch.Tensor  # [N] int64: the sequence at each rank
    counts: tuple[int, ...]  # per chunk position: how many sequences have a chunk there (device_layout: none)
    num_seqs: int
    slots: torch.Tensor | None = None  # device_layout's slot table (state_slots builds the host layout's)
    first: torch.Tensor | None = None  # [NC] int32: a chunk's first token (kept fixed-length layouts: chunk_bounds)
    length: torch.Tensor | None = None  # [NC] int32: a chunk's token count (likewise)


def chunk_layout(
    batch: int, tokens: int, cu_seqlens: torch.Tensor | None, chunk: int, device: torch.device
) -> ChunkLayout:
    """The chunks of B sequences of T tokens, or of cu_seqlens' sequences in row 0 (values read on the host).
    Fixed-length layouts are kept (bounded), so a repeated shape copies nothing to the device."""
    if cu_seqlens is None:
        return _fixed_layout(batch, tokens, chunk, device)
    return _layout(batch, tokens, cu_seqlens, chunk, device)


@functools.lru_cache(maxsize=32)
def _fixed_layout(batch: int, tokens: int, chunk: int, device: torch.device) -> ChunkLayout:
    return _layout(batch, tokens, None, chunk, device)


def _layout(batch: int, tokens: int, cu_seqlens: torch.Tensor | None, chunk: int, device: torch.device) -> ChunkLayout:
    if cu_seqlens is None:
        bounds = [(b * tokens, (b + 1) * tokens) for b in range(batch)]
    else:
        # the forward's reading (layout/sm120_gated_delta_rule_layout.cuh): each offset clamped to [0, T], then
        # their running maximum, so unchecked offsets (index checks off) give the forward's sequences, never a
        # read outside row 0
        cu, high = [], 0
        for x in cu_seqlens.tolist():
            high = max(high, min(max(int(x), 0), tokens))
            cu.append(high)
        bounds = list(zip(cu[:-1], cu[1:]))
    nchunks = [-(-(e - s) // chunk) for s, e in bounds]
    order = sorted(range(len(bounds)), key=lambda n: -nchunks[n])  # stable: ties keep sequence order
    counts = [sum(1 for c in nchunks if c > j) for j in range(max(nchunks, default=0))]
    starts, ends = [], []
    for j, count in enumerate(counts):
        for n in order[:count]:
            s, e = bounds[n]
            starts.append(s + j * chunk), ends.append(e)
    token = torch.tensor(starts, dtype=torch.int64)[:, None] + torch.arange(chunk, dtype=torch.int64)
    valid = token < torch.tensor(ends, dtype=torch.int64)[:, None]
    return ChunkLayout(
        token=torch.where(valid, token, 0).to(device),
        valid=valid.to(device),
        order=torch.tensor(order, dtype=torch.int64).to(device),
        counts=tuple(counts),
        num_seqs=len(bounds),
    )


# Fixed-length device layouts by (B, T, C, device): they follow from the shapes alone, and building one is about
# twenty small device operations (some 150 us of host time a backward, before any kernel). Least recently used
# first out past the bound. Each entry: the layout and the stream it was made on (a hit on another stream is
# recorded on it, so the allocator keeps the memory until that stream is done with it).
# A CUDA graph keeps the addresses it captured for its life, so a capture never takes an entry that may be
# evicted (a review found a captured hit read after eviction): it pins the kept entry (moved out of the LRU,
# never freed; up to _PINNED_MAX_BYTES in all) or, with none kept or the pins' budget spent, builds its own in
# the graph, where those twenty operations then run at every replay (the likely part of the ~70 us a 4 x 2048
# (2, 8) replay spent outside its kernels in run 166). Nothing
# is built on the host during a capture (its copy to the device could not be captured).
_FIXED_DEVICE: collections.OrderedDict[tuple[int, int, int, torch.device], tuple[ChunkLayout, int | None]] = (
    collections.OrderedDict()
)
_FIXED_DEVICE_MAX = 32
_FIXED_DEVICE_LOCK = threading.Lock()  # backwards on several threads: the lookup, reorder and eviction are one step
_PINNED: dict[tuple[int, int, int, torch.device], ChunkLayout] = {}
_PINNED_MAX_BYTES = 64 << 20  # one budget for every GPU; pins live as long as the process
_pinned_bytes = 0  # (under the lock)


def _layout_bytes(layout: ChunkLayout) -> int:
    """The device memory a layout holds: each tensor rounded up to the caching allocator's 512-byte blocks."""
    parts = (layout.token, layout.valid, layout.order, layout.slots, layout.first, layout.length)
    return sum(ceil_div(t.numel() * t.element_size(), 512) * 512 for t in parts if t is not None)


def device_layout(
    batch: int,
    tokens: int,
    cu_seqlens: torch.Tensor | None,
    chunk: int,
    device: torch.device,
    exact: bool = False,
    host_chunks: int | None = None,
) -> ChunkLayout:
    """The chunk layout the kernels read (see _device_layout). Fixed lengths (cu_seqlens None) come from a bounded
    cache: built once per (B, T, C, device) on the host, copied to the device (the copy completes before this
    returns) with each chunk's first token and length (chunk_bounds), and kept read-only. While a CUDA graph is
    captured a kept layout is pinned (never freed: the graph keeps its addresses; eager calls take it from then on
    too) and returned; with none kept, or the pins' budget spent, the layout is built on the device, in the
    graph's pool, and nothing is kept."""
    if cu_seqlens is not None:
        return _device_layout(batch, tokens, cu_seqlens, chunk, device, exact, host_chunks)
    capturing = _capturing(device)
    if device.type == "cuda" and device.index is None:  # one key per GPU: "cuda" is the current one
        device = torch.device("cuda", torch.cuda.current_device())
    key = (batch, tokens, chunk, device)
    global _pinned_bytes
    with _FIXED_DEVICE_LOCK:
        pinned = _PINNED.get(key)
        entry = _FIXED_DEVICE.get(key) if pinned is None else None
        if entry is not None and capturing:
            size = _layout_bytes(entry[0])
            if _pinned_bytes + size <= _PINNED_MAX_BYTES:
                pinned = _PINNED[key] = _FIXED_DEVICE.pop(key)[0]
                _pinned_bytes += size
        elif entry is not None:
            _FIXED_DEVICE.move_to_end(key)
    if pinned is not None:  # never freed: no stream needs recording
        return pinned
    if capturing:
        return _device_layout(batch, tokens, None, chunk, device, exact, host_chunks)
    stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else None
    if entry is not None:
        layout, made_on = entry
        if stream != made_on:  # the allocator frees it only once this stream's work on it is done
            current = torch.cuda.current_stream(device)
            for t in (layout.token, layout.valid, layout.order, layout.slots, layout.first, layout.length):
                if t is not None:
                    t.record_stream(current)
        return layout
    host = _device_layout(batch, tokens, None, chunk, torch.device("cpu"), exact)
    first, length = _bounds(host)
    kept = ChunkLayout(
        token=host.token.to(device),
        valid=host.valid.to(device),
        order=host.order.to(device),
        counts=(),
        num_seqs=host.num_seqs,
        slots=None if host.slots is None else host.slots.to(device),
        first=first.to(device),
        length=length.to(device),
    )
    with _FIXED_DEVICE_LOCK:
        if key in _PINNED:  # another thread's build of the shape, pinned since by a capture: that one
            return _PINNED[key]
        _FIXED_DEVICE.pop(key, None)  # (another thread's build of the same shape: this one replaces it)
        while len(_FIXED_DEVICE) >= _FIXED_DEVICE_MAX:
            _FIXED_DEVICE.popitem(last=False)
        _FIXED_DEVICE[key] = (kept, stream)
    return kept


def _bounds(layout: ChunkLayout) -> tuple[torch.Tensor, torch.Tensor]:
    """(first token, token count) of every chunk, int32: a real chunk's first row is a token of its sequence."""
    return layout.token[:, 0].to(torch.int32), layout.valid.sum(-1, dtype=torch.int32)


def chunk_bounds(layout: ChunkLayout) -> tuple[torch.Tensor, torch.Tensor]:
    """B3's chunk table: the layout's kept (first, length), else computed now."""
    if layout.first is not None and layout.length is not None:
        return layout.first, layout.length
    return _bounds(layout)


# A varlen layout keeps the padded bound instead of reading the real chunk count (a sync: the host waits for the
# device, so an eager training step cannot queue ahead of it) when the host copy of the offsets says the bound pads
# at most a quarter more (and eight chunks): padding chunks cost memory for their states and a CTA that returns.
# The bound is never short, so a wrong host copy costs speed, never a gradient.
def _pads_little(bound: int, host_chunks: int) -> bool:
    return bound <= host_chunks + max(8, host_chunks // 4)


def _device_layout(
    batch: int,
    tokens: int,
    cu_seqlens: torch.Tensor | None,
    chunk: int,
    device: torch.device,
    exact: bool = False,
    host_chunks: int | None = None,
) -> ChunkLayout:
    """chunk_layout's numbering built on the device. exact=False reads nothing on the host (every step a device
    operation whose size follows from the shapes, so it can be captured in a CUDA graph): its chunk count is the
    most the offsets can make, floor((T + N (C - 1)) / C). exact=True reads one number, the real chunk count (a
    sync), and sizes the layout to it: the padded bound can be many times the real count (short sequences, or
    empty ones padding N), and every stage's memory and work scale with it. Either way the real chunks are
    numbered alike and come first; chunks past them are padding: every row invalid and no slot points at them,
    and since a chunk's gradients stay within its own rows, what they hold never reaches a gradient. B sequences
    of T tokens are exactly B ceil(T / C) chunks, read nothing and pad nothing. counts is empty: only the kernel
    stages use this layout (the torch stages loop over chunk positions, which needs the counts on the host).
    Offsets are read as the forward's kernels read them: clamped to [0, T], then their running maximum."""
    positions = ceil_div(tokens, chunk)  # the most chunks one sequence can have
    if cu_seqlens is None:
        n = batch
        cu = torch.arange(n + 1, dtype=torch.int64, device=device) * tokens
        total = n * positions
    else:
        n = cu_seqlens.numel() - 1
        cu = cu_seqlens.to(device=device, dtype=torch.int64).clamp(0, tokens).cummax(0).values
        total = min((tokens + n * (chunk - 1)) // chunk, n * positions)
    nchunks = (cu[1:] - cu[:-1] + chunk - 1).div(chunk, rounding_mode="floor")
    if exact and cu_seqlens is not None and (host_chunks is None or not _pads_little(total, host_chunks)):
        total = int(nchunks.sum())  # the one host read
    order = torch.sort(-nchunks, stable=True).indices  # most chunks first; ties keep sequence order
    rank = torch.empty_like(order)
    rank[order] = torch.arange(n, device=device)
    # per position j: counts[j] sequences have more than j chunks; first[j] chunks come before position j
    j = torch.arange(positions, device=device)
    counts = n - torch.searchsorted(torch.sort(nchunks).values, j, right=True)
    first = counts.cumsum(0) - counts
    # chunk x: position pos (the last whose first chunk is at most x), rank r there; real while r < counts[pos]
    x = torch.arange(total, device=device)
    pos = (torch.searchsorted(first, x, right=True) - 1).clamp(min=0)
    r = x - first[pos]
    seq = order[r.clamp(max=n - 1)]
    token = (cu[seq] + pos * chunk)[:, None] + torch.arange(chunk, device=device)
    valid = (r < counts[pos])[:, None] & (token < cu[seq + 1][:, None])
    return ChunkLayout(
        token=torch.where(valid, token, 0),
        valid=valid,
        order=order,
        counts=(),
        num_seqs=n,
        slots=torch.cat([rank, first]).to(torch.int32),
    )


def _capturing(x: torch.Tensor | torch.device) -> bool:
    """Whether x's device (or x, a device) is capturing a CUDA graph now (no host read may happen)."""
    device = x if isinstance(x, torch.device) else x.device
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


def state_slots(layout: ChunkLayout) -> torch.Tensor:
    """The states pass's slot table (int32, on the layout's device): each sequence's rank, then each chunk
    position's first chunk, so that slot(n, j) = rank(n) + first(j) is the layout's chunk number."""
    if layout.slots is not None:
        return layout.slots
    n = layout.order.numel()
    rank = torch.empty_like(layout.order)
    rank[layout.order] = torch.arange(n, device=layout.order.device)
    firsts = [0]
    for count in layout.counts[:-1]:
        firsts.append(firsts[-1] + count)
    first = torch.tensor(firsts if layout.counts else [], dtype=torch.int64).to(layout.order.device)
    return torch.cat([rank, first]).to(torch.int32)


def _l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + eps)


def _l2norm_backward(x: torch.Tensor, dy: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """dx of y = x / n, n = sqrt(|x|^2 + eps), along the last dimension: dx = dy / n - x (x . dy) / n^3, in dy's
    dtype. Four passes over the [..., D] tensors (x's norm, its dot with dy, dy / n, the fused multiply-add) and
    one more where x has another dtype; the per-row factors are [..., 1]. At 1 x 8192 tokens and 16 heads a pass
    moves some 128 MB, so the nine of the textbook form (x x, its sum, x / n, y dy, its sum, y (.), dy - (.),
    / n) were most of this backward's cost with the in-kernel l2norm on."""
    xw = x if x.dtype == dy.dtype else x.to(dy.dtype)
    n = torch.linalg.vector_norm(xw, dim=-1, keepdim=True).square_().add_(eps).sqrt_()
    c = torch.linalg.vecdot(xw, dy, dim=-1).unsqueeze(-1).div_(n * n * n)
    return (dy / n).addcmul_(xw, c, value=-1.0)


def _gather(x: torch.Tensor, layout: ChunkLayout, dtype: torch.dtype) -> torch.Tensor:
    """[B, T, heads, ...] -> [NC, heads, C, ...] in dtype, rows past a chunk's sequence zero."""
    nc, c = layout.token.shape
    flat = x.reshape(x.shape[0] * x.shape[1], *x.shape[2:])
    rows = flat.index_select(0, layout.token.reshape(-1)).to(dtype).view(nc, c, *x.shape[2:])
    mask = layout.valid.view(nc, c, *([1] * (x.dim() - 2)))
    return torch.where(mask, rows, torch.zeros((), dtype=dtype, device=rows.device)).movedim(1, 2)


def _scatter(y: torch.Tensor, layout: ChunkLayout, batch: int, tokens: int) -> torch.Tensor:
    """[NC, heads, C, ...] -> [B, T, heads, ...]: the valid rows where they came from (every token is in exactly
    one chunk, so nothing adds; tokens in no sequence stay 0). Invalid rows go to one extra row that is dropped:
    no mask selection, whose size would be read on the host (a sync, not capturable)."""
    rows = y.movedim(2, 1)
    rows = rows.reshape(-1, *rows.shape[2:])
    out = torch.zeros(batch * tokens + 1, *rows.shape[1:], dtype=y.dtype, device=y.device)
    where = torch.where(layout.valid, layout.token, batch * tokens).reshape(-1)
    out.index_put_((where,), rows)  # valid targets are distinct: which invalid row lands last does not matter
    return out[:-1].view(batch, tokens, *rows.shape[1:])


def _factors(q, k, v, g, beta) -> dict:
    """Stage 0 for every chunk at once (q, k [NC, HV, C, K], v [NC, HV, C, V], g, beta [NC, HV, C]), as
    gdr_reference.chunk_factors forms them. Padding rows hold zeros (g = 0 keeps the cumsum flat past the end)."""
    c = g.shape[-1]
    dev, dt = g.device, g.dtype
    cum = g.cumsum(-1)
    causal = torch.tril(torch.ones(c, c, dtype=torch.bool, device=dev))
    strict = torch.tril(causal, -1)
    # e^(G_i - G_j) on and below the diagonal, 0 above (where it could overflow and is never used)
    diff = cum[..., :, None] - cum[..., None, :]
    decay = torch.where(causal, diff, torch.full((), float("-inf"), dtype=dt, device=dev)).exp()
    gamma = cum.exp()
    kk = k @ k.transpose(-1, -2)
    a = torch.where(strict, beta[..., :, None] * kk * decay, torch.zeros((), dtype=dt, device=dev))
    eye = torch.eye(c, dtype=dt, device=dev).expand_as(a)
    t = torch.linalg.solve_triangular(eye + a, eye, upper=False, unitriangular=True)
    kb, vb = k * (beta * gamma)[..., None], v * beta[..., None]
    qk = q @ k.transpose(-1, -2)
    last = cum[..., -1]  # padding rows keep the cumsum flat: the last valid token's G
    tail = (last[..., None] - cum).exp()
    return dict(
        cum=cum, gamma=gamma, decay=decay, causal=causal, strict=strict, kk=kk, t=t, kb=kb, vb=vb, w=t @ kb,
        u=t @ vb, qk=qk, m=torch.where(causal, qk * decay, torch.zeros((), dtype=dt, device=dev)), tail=tail,
        kd=k * tail[..., None], last=last,
    )  # fmt: skip


def _decay_grad(dd: torch.Tensor, decay: torch.Tensor) -> torch.Tensor:
    """d cum from d D where D_ij = e^(cum_i - cum_j): row sums minus column sums of dD * D."""
    x = dd * decay
    return x.sum(-1) - x.sum(-2)


def _states(f: dict, counts: tuple[int, ...], h0: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Stage 1: (h at every chunk's start [NC, HV, K, V], v' [NC, HV, C, V]) from the first states, by rank."""
    h = h0.clone()
    states = torch.empty(f["w"].shape[0], *h0.shape[1:], dtype=h0.dtype, device=h0.device)
    vnew = torch.empty_like(f["u"])
    kd_t, decay = f["kd"].transpose(-1, -2), f["last"].exp()[..., None, None]
    at = 0
    for m in counts:
        rows, hm = slice(at, at + m), h[:m]
        states[rows] = hm
        torch.sub(f["u"][rows], f["w"][rows] @ hm, out=vnew[rows])
        hm.mul_(decay[rows]).add_(kd_t[rows] @ vnew[rows])
        at += m
    return states, vnew


def _reverse(
    f: dict, q: torch.Tensor, do: torch.Tensor, counts: tuple[int, ...], dfinal: torch.Tensor, scale: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Stage 2: (dh_{c+1} at every chunk [NC, HV, K, V], dv' [NC, HV, C, V], dh0 by rank [N, HV, K, V])."""
    dh = dfinal.clone()
    dh_next = torch.empty(f["w"].shape[0], *dfinal.shape[1:], dtype=dfinal.dtype, device=dfinal.device)
    dvnew = torch.empty_like(f["u"])
    m_t, w_t = f["m"].transpose(-1, -2), f["w"].transpose(-1, -2)
    qg_t = (q * f["gamma"][..., None]).transpose(-1, -2)
    decay = f["last"].exp()[..., None, None]
    at = f["w"].shape[0]
    for m in reversed(counts):
        at -= m
        rows, dhm = slice(at, at + m), dh[:m]
        dh_next[rows] = dhm
        dvn = dvnew[rows]
        torch.matmul(m_t[rows], do[rows], out=dvn)
        dvn.mul_(scale).add_(f["kd"][rows] @ dhm)
        dhm.mul_(decay[rows]).add_(qg_t[rows] @ do[rows], alpha=scale).sub_(w_t[rows] @ dvn)
    return dh_next, dvnew, dh


def _chunk_grads(q, k, v, beta, f, h, vnew, do, dh_next, dvnew, scale, before_last) -> tuple[torch.Tensor, ...]:
    """Stage 3 for every chunk at once: (dq, dk, dv, dg, dbeta) in the chunk layout (gdr_backward_reference's
    _chunk_backward, term for term, less two that are exactly zero: D's diagonal, always 1, and the last row's
    e^(G_last - G), always 1. Formed anyway, their parts cancel only up to rounding, and next to a gradient that
    shrinks like e^g that rounding is all of dg). before_last [NC, 1, C]: rows before the chunk's last token."""
    cum, gamma, decay, tail = f["cum"], f["gamma"], f["decay"], f["tail"]
    t, kb, vb, qk = f["t"], f["kb"], f["vb"], f["qk"]
    causal, strict, kk = f["causal"], f["strict"], f["kk"]
    zero = torch.zeros((), dtype=cum.dtype, device=cum.device)
    tt = t.transpose(-1, -2)
    # o = s (Qg h + M v')
    dm = scale * do @ vnew.transpose(-1, -2)
    dqk = torch.where(causal, dm * decay, zero)
    dq = dqk @ k
    dk = dqk.transpose(-1, -2) @ q
    dcum = _decay_grad(torch.where(strict, dm * qk, zero), decay)
    dqg = scale * do @ h.transpose(-1, -2)
    dq = dq + dqg * gamma[..., None]
    dcum = dcum + gamma * (dqg * q).sum(-1)
    # h_next = e^(G_last) h + Kd^T v'
    dkd = vnew @ dh_next.transpose(-1, -2)
    dk = dk + dkd * tail[..., None]
    dtail = torch.where(before_last, (dkd * k).sum(-1) * tail, zero)
    dcum = dcum - dtail
    dlast = dtail.sum(-1) + f["last"].exp() * (dh_next * h).sum((-1, -2))
    # v' = U - W h: U = T Vb, W = T Kb
    dw = -dvnew @ h.transpose(-1, -2)
    dt = dvnew @ vb.transpose(-1, -2) + dw @ kb.transpose(-1, -2)
    dvb = tt @ dvnew
    dkb = tt @ dw
    dv = dvb * beta[..., None]
    dbeta = (dvb * v).sum(-1)
    dkb_k = (dkb * k).sum(-1)
    dk = dk + dkb * (beta * gamma)[..., None]
    dbeta = dbeta + dkb_k * gamma
    dcum = dcum + dkb_k * beta * gamma
    # T = (I + A)^-1: dA = -T^T dT T^T on A's strictly lower support; A = strict(diag(beta) K K^T * D)
    da = torch.where(strict, -(tt @ dt @ tt), zero)
    dbeta = dbeta + (da * kk * decay).sum(-1)
    dp = da * beta[..., None]
    dkk = dp * decay
    dk = dk + (dkk + dkk.transpose(-1, -2)) @ k
    dcum = dcum + _decay_grad(dp * kk, decay)
    dcum[..., -1] += dlast  # padding rows keep G flat: the last row's cum is the last valid token's
    dg = dcum.flip(-1).cumsum(-1).flip(-1)  # cum = cumsum(g): each g_t feeds every cum_i with i >= t
    return dq, dk, dv, dg, dbeta


CHUNK_GRADS_ENV = "DG_SM120_GDR_CHUNK_GRADS"


def chunk_grads_enabled() -> bool:
    """Whether CUDA backwards run stages 0 and 3 as the B3 kernel (api.gdr_chunk_grads): yes unless
    DG_SM120_GDR_CHUNK_GRADS=0, which keeps the batched torch stages (for measurement and comparison)."""
    return os.environ.get(CHUNK_GRADS_ENV, "1") != "0"


GRAD_ROWS_ENV = "DG_SM120_GDR_GRAD_ROWS"


def grad_rows_enabled() -> bool:
    """Whether CUDA backwards take dq and dk's last step by its kernel (api.gdr_grad_rows, one pass per gradient)
    rather than in torch (_finish_rows, four passes with the l2norm): yes unless DG_SM120_GDR_GRAD_ROWS=0, which
    keeps the torch step (for measurement and comparison)."""
    return os.environ.get(GRAD_ROWS_ENV, "1") != "0"


def chunk_gated_delta_rule_backward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    do: torch.Tensor | None,
    dfinal: torch.Tensor | None,
    scale: float,
    initial_state: torch.Tensor | None,
    cu_seqlens: torch.Tensor | None,
    use_qk_l2norm_in_kernel: bool,
    chunk_size: int = 64,
    states_pass: Callable[[torch.Tensor, int], torch.Tensor] | None = None,
    state_grads_pass: Callable[..., tuple[torch.Tensor, torch.Tensor | None]] | None = None,
    chunk_grads_pass: Callable[..., tuple[torch.Tensor, ...]] | None = None,
    grad_rows_pass: Callable[..., tuple[torch.Tensor, torch.Tensor]] | None = None,
    host_chunks: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Gradients of chunk_gated_delta_rule's (o, final_state) given do [B, T, HV, V] and dfinal [N, HV, K, V]
    (either None: that output unused). Returns (dq, dk, dv, dg, dbeta, dh0) in the inputs' dtypes (dh0 None
    without an initial state). The arguments are the forward's, already checked by it. states_pass(slots, count):
    stage 1 by the forward's kernels (api.gdr_states: the state entering every 64th token, in the inputs' dtype,
    at the layout's chunk numbering); None: stage 1 in torch. state_grads_pass(do, dfinal, slots, count, want_dh0): stage 2 by
    the kernels (api.gdr_state_grads: dh' leaving every 64 tokens at the same slots, and dh0); None: in torch.
    With both passes the layout is device_layout's: while a CUDA graph is captured no host read of cu_seqlens
    happens anywhere in the backward. chunk_grads_pass(do, states, dh_next, first, length, covered) (with both
    passes): stages 0 and 3 by the B3 kernel (api.gdr_chunk_grads), reading the inputs where they are: no gather,
    no scatter, no factor in memory. grad_rows_pass(dq_parts, dk_parts) (with B3): dq and dk's last step by its
    kernel (api.gdr_grad_rows); None: in torch (_finish_rows). host_chunks: the kernels' chunk count from a host
    copy of the offsets (the forward's cu_seqlens_cpu), which lets a varlen layout skip reading it (_pads_little)."""
    work = torch.float64 if v.dtype == torch.float64 else torch.float32
    bsz, tokens, heads, kdim = q.shape
    if cu_seqlens is not None and bsz != 1:
        raise ValueError(f"with cu_seqlens the batch must be 1 (sequences packed in row 0), got B = {bsz}")
    hv, vdim = v.shape[2], v.shape[3]
    group = hv // heads
    if states_pass is not None and state_grads_pass is not None:
        # both sequential stages by kernels: the layout built on the device, padded to the offsets' bound while a
        # CUDA graph is captured (no host read), sized to the real chunks otherwise (one read)
        layout = device_layout(
            bsz, tokens, cu_seqlens, chunk_size, v.device, exact=not _capturing(v), host_chunks=host_chunks
        )
    else:
        layout = chunk_layout(bsz, tokens, cu_seqlens, chunk_size, v.device)
    n = layout.num_seqs
    if chunk_grads_pass is not None and states_pass is not None and state_grads_pass is not None:
        if chunk_size != STATE_TOKENS:
            raise ValueError(f"the kernels work in chunks of {STATE_TOKENS} tokens, not {chunk_size}")
        return _kernel_backward(
            q, k, v, g, beta, do, dfinal, initial_state, use_qk_l2norm_in_kernel, layout, cu_seqlens is None,
            states_pass, state_grads_pass, chunk_grads_pass, grad_rows_pass,
        )  # fmt: skip
    qf, kf = q.to(work), k.to(work)
    qn, kn = (_l2norm(qf), _l2norm(kf)) if use_qk_l2norm_in_kernel else (qf, kf)
    # [NC, H, C, K] -> [NC, HV, C, K]: value head hv reads q / k head hv // group
    qc = _gather(qn, layout, work).repeat_interleave(group, dim=1)
    kc = _gather(kn, layout, work).repeat_interleave(group, dim=1)
    vc = _gather(v, layout, work)
    gc, bc = _gather(g, layout, work), _gather(beta, layout, work)
    doc = (
        _gather(do, layout, work)
        if do is not None
        else torch.zeros(vc.shape[:-1] + (vdim,), dtype=work, device=v.device)
    )
    state_shape = (n, hv, kdim, vdim)
    # the states by rank (layout.order); dh0 goes back to sequence order at the end
    zero_states = lambda: torch.zeros(state_shape, dtype=work, device=v.device)
    h0 = initial_state.to(work).index_select(0, layout.order) if initial_state is not None else zero_states()
    dfs = dfinal.to(work).index_select(0, layout.order) if dfinal is not None else zero_states()
    if qc.shape[0] == 0:  # no token in any sequence: the states pass through unchanged
        zeros = lambda x: torch.zeros_like(x)
        dh0 = None if initial_state is None else torch.empty_like(dfs).index_copy_(0, layout.order, dfs)
        return zeros(q), zeros(k), zeros(v), zeros(g), zeros(beta), None if dh0 is None else dh0.to(initial_state.dtype)
    f = _factors(qc, kc, vc, gc, bc)
    slots = state_slots(layout) if states_pass is not None or state_grads_pass is not None else None
    if states_pass is not None:
        if chunk_size != STATE_TOKENS:
            raise ValueError(f"the kernels' states come every {STATE_TOKENS} tokens, not every {chunk_size}")
        states = states_pass(slots, qc.shape[0]).to(work)  # the kernels store them in the inputs' dtype
        vnew = f["u"] - f["w"] @ states
    else:
        states, vnew = _states(f, layout.counts, h0)
    if state_grads_pass is not None:
        if chunk_size != STATE_TOKENS:
            raise ValueError(f"the kernels' state gradients come every {STATE_TOKENS} tokens, not every {chunk_size}")
        do_in = do if do is not None else torch.zeros_like(v)
        dh_next, dh0_k = state_grads_pass(do_in.to(v.dtype), dfinal, slots, qc.shape[0], initial_state is not None)
        dh_next = dh_next.to(work)
        dvnew = scale * f["m"].transpose(-1, -2) @ doc + f["kd"] @ dh_next
        dh0 = dh0_k if dh0_k is not None else dfs  # (unused without an initial state)
    else:
        dh_next, dvnew, dh_ranked = _reverse(f, qc, doc, layout.counts, dfs, scale)
        dh0 = torch.empty_like(dh_ranked).index_copy_(0, layout.order, dh_ranked)
    before_last = (torch.arange(chunk_size, device=v.device) < layout.valid.sum(-1, keepdim=True) - 1)[:, None]
    dq, dk, dv, dg, dbeta = _chunk_grads(qc, kc, vc, bc, f, states, vnew, doc, dh_next, dvnew, scale, before_last)
    del states, dh_next, f
    # value heads -> their q / k head, then through the l2norm
    dq = dq.view(dq.shape[0], heads, group, *dq.shape[2:]).sum(2)
    dk = dk.view(dk.shape[0], heads, group, *dk.shape[2:]).sum(2)
    dq, dk = _scatter(dq, layout, bsz, tokens), _scatter(dk, layout, bsz, tokens)
    if use_qk_l2norm_in_kernel:
        dq, dk = _l2norm_backward(qf, dq), _l2norm_backward(kf, dk)
    dv, dg, dbeta = (_scatter(x, layout, bsz, tokens) for x in (dv, dg, dbeta))
    return (
        dq.to(q.dtype),
        dk.to(k.dtype),
        dv.to(v.dtype),
        dg.to(g.dtype),
        dbeta.to(beta.dtype),
        dh0.to(initial_state.dtype) if initial_state is not None else None,
    )


def _finish_rows(
    q: torch.Tensor, k: torch.Tensor, dq: torch.Tensor, dk: torch.Tensor, l2: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """dq and dk's last step in torch (what impls/sm120_gated_delta_rule_grad_rows.cuh does): B3's fp32 parts
    [B T, H x parts, K] added in part order, the l2norm's backward (x = q, k as the forward got them), then q's
    and k's dtypes; returns [B, T, H, K] each."""
    bsz, tokens, heads, kdim = q.shape
    parts = dq.shape[1] // heads
    dq, dk = (x.view(bsz, tokens, heads, parts, kdim) for x in (dq, dk))
    dq, dk = (x.sum(3) if parts > 1 else x.squeeze(3) for x in (dq, dk))
    if l2:
        dq, dk = _l2norm_backward(q, dq), _l2norm_backward(k, dk)
    return dq.to(q.dtype), dk.to(k.dtype)


def _kernel_backward(
    q,
    k,
    v,
    g,
    beta,
    do,
    dfinal,
    initial_state,
    l2,
    layout,
    covered,
    states_pass,
    state_grads_pass,
    chunk_grads_pass,
    grad_rows_pass=None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Every stage by a kernel: the states, the reverse pass, then B3 for every chunk of the layout (dq and dk
    summed over parts of each q / k head's value heads), then dq and dk's last step (the parts added in a fixed
    order, the l2norm's backward, the cast: grad_rows_pass, or _finish_rows in torch). covered: every token is
    in some sequence (fixed lengths; with offsets, tokens past the last one are in none and get zeros)."""  # fmt: skip
    bsz, tokens, heads, kdim = q.shape
    count = layout.token.shape[0]
    slots = state_slots(layout)
    states = states_pass(slots, count)
    do_in = do if do is not None else torch.zeros_like(v)
    dh_next, dh0 = state_grads_pass(do_in.to(v.dtype), dfinal, slots, count, initial_state is not None)
    first, length = chunk_bounds(layout)
    dq, dk, dv, dg, dbeta = chunk_grads_pass(do_in.to(v.dtype), states, dh_next, first, length, covered)
    del states, dh_next
    dq, dk = grad_rows_pass(dq, dk) if grad_rows_pass is not None else _finish_rows(q, k, dq, dk, l2)
    shape = v.shape[:3]
    return (
        dq,
        dk,
        dv.view(v.shape).to(v.dtype),
        dg.view(shape).to(g.dtype),
        dbeta.view(shape).to(beta.dtype),
        dh0.to(initial_state.dtype) if initial_state is not None and dh0 is not None else None,
    )


class Carried:
    """What a training call's segmented forward leaves for its backward's states pass: the segments' first states
    (the combine's output, fp32 [segments, pairs, 128, 128]) with the cut they belong to (chunk, segments,
    segment length) and whether a CUDA graph was being captured. The forward's run puts them here; Differentiable
    moves the tensor into its saved tensors (so activation checkpointing and saved-tensor hooks treat it as they
    treat the inputs) and back before each backward; the states pass takes it only under its own cut and capture
    state (an eager forward's tensor must not be addressed by a captured backward), and every take empties the
    slot."""

    def __init__(self) -> None:
        self._slot: tuple | None = None  # (cut, capturing, firsts)

    def put(self, cut: tuple, firsts: torch.Tensor) -> None:
        self._slot = (cut, _capturing(firsts), firsts)

    def take(self, cut: tuple, device: torch.device) -> torch.Tensor | None:
        """The first states if they belong to this cut and capture state, else None; the slot is empty after."""
        slot, self._slot = self._slot, None
        if slot is None or slot[0] != cut or slot[1] != _capturing(device):
            return None
        return slot[2]

    def detach(self) -> tuple[torch.Tensor | None, tuple | None]:
        """(the tensor, what else the slot held) for the Function to keep; the slot is empty after."""
        slot, self._slot = self._slot, None
        return (None, None) if slot is None else (slot[2], slot[:2])

    def restore(self, firsts: torch.Tensor | None, info: tuple | None) -> None:
        self._slot = None if firsts is None or info is None else (*info, firsts)


class Differentiable(torch.autograd.Function):
    """chunk_gated_delta_rule with its backward: forward(ctx, meta, run, q, k, v, g, beta, initial_state,
    cu_seqlens) calls run(q, k, v, g, beta, initial_state, cu_seqlens) (the forward's kernels: fresh outputs, so
    they may be modified in place as without grad), returns o (and final_state when run gives one) and keeps the
    inputs; meta is (scale, use_qk_l2norm_in_kernel, states, state_grads, chunk_grads, grad_rows, host_chunks,
    carried):
    states(q, k, v, g, beta,
    initial_state, cu_seqlens, slots, count) gives stage 1 from the forward's kernels (api.gdr_states),
    state_grads(q, k, v, g, beta, cu_seqlens, do, dfinal, slots, count, want_dh0) stage 2 from the reverse pass
    kernel (api.gdr_state_grads) and chunk_grads(q, k, v, g, beta, do, states, dh_next, first, length, covered)
    stages 0 and 3 from B3 (api.gdr_chunk_grads), grad_rows(q, k, dq_parts, dk_parts) dq and dk's last step
    (api.gdr_grad_rows); None computes that stage in torch. host_chunks: the 64-token chunk count of a host copy
    of the offsets (cu_seqlens_cpu), or None. carried: the call's Carried (or None), which run fills and the
    states pass reads; its tensor is kept with the inputs between the two.
    The backward recomputes everything else from the inputs. Not differentiable twice."""

    @staticmethod
    def forward(ctx, meta, run, q, k, v, g, beta, initial_state, cu_seqlens):  # type: ignore[override]
        o, final = run(q, k, v, g, beta, initial_state, cu_seqlens)
        ctx.meta = meta
        ctx.has_final = final is not None
        ctx.set_materialize_grads(False)
        firsts, ctx.carried_info = meta[7].detach() if meta[7] is not None else (None, None)
        ctx.save_for_backward(q, k, v, g, beta, initial_state, cu_seqlens, firsts)
        return (o, final) if final is not None else o

    @staticmethod
    @once_differentiable
    def backward(ctx, *grads):  # type: ignore[override]
        q, k, v, g, beta, initial_state, cu_seqlens, firsts = ctx.saved_tensors
        scale, l2, states, state_grads, chunk_grads, grad_rows, host_chunks, carried = ctx.meta
        do, dfinal = grads[0], grads[1] if ctx.has_final else None
        if do is None and dfinal is None:
            return (None,) * 9
        if carried is not None:  # for this backward's states pass (each backward of a retained graph gets them)
            carried.restore(firsts, ctx.carried_info)
        states_pass = None
        if states is not None:
            states_pass = functools.partial(states, q, k, v, g, beta, initial_state, cu_seqlens)
        grads_pass = None
        if state_grads is not None:
            grads_pass = functools.partial(state_grads, q, k, v, g, beta, cu_seqlens)
        chunk_pass = None
        if chunk_grads is not None:
            chunk_pass = functools.partial(chunk_grads, q, k, v, g, beta)
        rows_pass = None
        if grad_rows is not None:
            rows_pass = functools.partial(grad_rows, q, k)
        try:
            dq, dk, dv, dg, dbeta, dh0 = chunk_gated_delta_rule_backward(
                q, k, v, g, beta, do, dfinal, scale, initial_state, cu_seqlens, l2, STATE_TOKENS, states_pass,
                grads_pass, chunk_pass, rows_pass, host_chunks,
            )  # fmt: skip
        finally:
            if carried is not None:
                carried.restore(None, None)  # not taken (torch stages, no token): not kept past the backward
        need = ctx.needs_input_grad
        picked = [x if need[i + 2] else None for i, x in enumerate((dq, dk, dv, dg, dbeta, dh0))]
        return (None, None, *picked, None)
