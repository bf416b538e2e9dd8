"""MQA-logits workloads shared by the GPU tests, sanitizer drivers and benchmarks: dense FP8 prefill rows, a
shuffled paged FP8 / MXFP4 KV cache, and sparse (contiguous and paged) cases with their index lists. Sparse index
semantics (valid slots, the token grid, the output mask) are defined here once and used by the float64 reference
in host/deep_gemm_sm120/selftest/workloads/sparse_reference.py (docs/sparse_mqa_logits.md)."""

from __future__ import annotations

import torch

from deep_gemm_sm120.core.arith import ceil_div


def _device() -> torch.device:
    """The current CUDA device (tests and benchmarks run one device at a time)."""
    return torch.device("cuda", torch.cuda.current_device())


def dense_case(s, sk, h, d, pattern="causal", seed=0):
    """(q e4m3 [S, H, D], kv e4m3 [SK, D], kv scales fp32 [SK], weights fp32 [S, H], ks, ke int32 [S]) with a
    per-row amax scale on kv; pattern causal (query i sees [0, SK - S + i + 1)), window (mid-tile starts and
    ends, every 7th row empty) or full."""
    g = torch.Generator(device=_device()).manual_seed(seed)
    q = torch.randn(s, h, d, device=_device(), generator=g).to(torch.float8_e4m3fn)
    kv_f = torch.randn(sk, d, device=_device(), generator=g)
    amax = kv_f.abs().amax(-1).clamp_min(1e-4)
    kv_sf = amax / 448.0
    kv = (kv_f / kv_sf[:, None]).to(torch.float8_e4m3fn)
    w = torch.randn(s, h, device=_device(), generator=g)
    i = torch.arange(s, device=_device())
    if pattern == "causal":  # query i sees keys [0, sk - s + i + 1)
        ks, ke = torch.zeros_like(i), (sk - s + i + 1).clamp(0, sk)
    elif pattern == "window":  # sliding windows that start and end mid-tile, some empty
        ke = (i * 37) % (sk + 1)
        ks = (ke - 300).clamp_min(0)
        ks[::7] = ke[::7]  # empty ranges
    else:  # everything
        ks, ke = torch.zeros_like(i), torch.full_like(i, sk)
    return q, kv, kv_sf, w, ks.int(), ke.int()


def paged_cache(lens: list[int], block_kv: int, d: int, fp4: bool, seed: int):
    """A shuffled paged cache for the given context lengths: (kv_cache uint8 [blocks, block_kv, 1, row + 4],
    block_table, dequantized values [blocks, block_kv, D] fp64)."""
    from deep_gemm_sm120.quant import dequantize_fp4, pack_ue8m0_to_int, per_token_cast_to_fp4

    g = torch.Generator(device=_device()).manual_seed(seed)
    nblk = [max(1, ceil_div(n, block_kv)) for n in lens]
    total = sum(nblk) + 3
    x = (
        torch.randn(total * block_kv, d, device=_device(), generator=g)
        * torch.rand(total * block_kv, 1, device=_device(), generator=g)
        * 3
    )
    if fp4:
        vals, sf, _ = per_token_cast_to_fp4(x, "mxfp4")
        deq = dequantize_fp4(vals, sf).double()
        scales = pack_ue8m0_to_int(sf).view(-1).view(torch.uint8).view(total, block_kv * 4)
        row = d // 2
    else:
        sf = x.abs().amax(-1).clamp_min(1e-4) / 448.0
        vals8 = (x / sf[:, None]).to(torch.float8_e4m3fn)
        deq = vals8.double() * sf.double()[:, None]
        vals = vals8.view(torch.uint8)
        scales = sf.view(torch.uint8).view(total, block_kv * 4)
        row = d
    fused = torch.empty(total, block_kv * (row + 4), dtype=torch.uint8, device=_device())
    fused[:, : block_kv * row] = vals.reshape(total, block_kv * row)
    fused[:, block_kv * row :] = scales
    perm = torch.randperm(total, generator=torch.Generator().manual_seed(seed)).tolist()
    table = torch.zeros(len(lens), max(nblk) + 2, dtype=torch.int32)
    k = 0
    for b, n in enumerate(nblk):
        table[b, :n] = torch.tensor(perm[k : k + n])
        k += n
    return fused.view(total, block_kv, 1, row + 4), table.cuda(), deq.view(total, block_kv, d)


def mx_quantize(x: torch.Tensor, fmt: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x [R, D] -> (values [R, D] e4m3 | packed [R, D/2] uint8, packed UE8M0 int32 [R], dequantized fp32 [R, D])."""
    from deep_gemm_sm120.quant import dequantize_fp4, pack_ue8m0_to_int, per_token_cast_to_fp4, per_token_cast_to_fp8

    if fmt == "mxfp8":
        v, sf = per_token_cast_to_fp8(x, use_ue8m0=True, gran_k=32)
        deq = v.float() * sf.repeat_interleave(32, 1)
    else:
        v, sf, _ = per_token_cast_to_fp4(x, "mxfp4")
        deq = dequantize_fp4(v, sf)
    return v, pack_ue8m0_to_int(sf).view(-1), deq


def varied_rows(n: int, d: int, g: torch.Generator) -> torch.Tensor:
    """Rows whose 32-element blocks differ in magnitude (2^-3 .. 2^3), so every scale byte matters."""
    x = torch.randn(n, d, device=_device(), generator=g)
    mag = torch.pow(2.0, torch.randint(-3, 4, (n, d // 32), device=_device(), generator=g).float())
    return x * mag.repeat_interleave(32, 1)


def sparse_q(s: int, h: int, d: int, fmt: str, g: torch.Generator):
    v, sf, deq = mx_quantize(varied_rows(s * h, d, g), fmt)
    return (v.view(s, h, -1), sf.view(s, h)), deq.view(s, h, d)


def sparse_case(s, n, h, d, fmt, block, num_max, seed=0, unaligned=True, ranges=None):
    """Prefill-like rows: row i sees a causal window ending at n - s + i + 1 of random length (unaligned starts),
    every 5th row empty, the last rows ending at n (their last block partial when n % block != 0); with more rows
    than tokens (s > n) the first s - n rows see nothing."""
    g = torch.Generator(device=_device()).manual_seed(seed)
    q, q_deq = sparse_q(s, h, d, fmt, g)
    kvv, kvs, kv_deq = mx_quantize(varied_rows(n, d, g), fmt)
    if ranges is None:
        ke = [max(0, min(n, n - s + i + 1)) for i in range(s)]
        span = torch.randint(0, n + 1, (s,), generator=torch.Generator().manual_seed(seed)).tolist()
        ks = [max(0, e - sp) for e, sp in zip(ke, span)]
        for i in range(0, s, 5):
            ks[i] = ke[i]
        if not unaligned:
            ks = [x // block * block for x in ks]
            for i in range(0, s, 5):
                ke[i] = ks[i]
    else:
        ks, ke = ranges
    idx = sparse_indices(ks, ke, block, num_max, seed)
    w = torch.randn(s, h, device=_device(), generator=g).to(torch.bfloat16)
    ks_t, ke_t = (torch.tensor(x, dtype=torch.int32, device=_device()) for x in (ks, ke))
    return dict(
        q=q,
        q_deq=q_deq,
        kv=(kvv, kvs),
        kv_deq=kv_deq,
        w=w,
        ks=ks_t,
        ke=ke_t,
        idx=idx.cuda(),
        n=n,
        block=block,
        num_max=num_max,
        fmt=fmt,
    )


def run_sparse(c, unaligned=True):
    import deep_gemm_sm120 as dg

    qk = c["q"][0].dtype
    meta = dg.get_sparse_mqa_logits_metadata(
        c["ks"], c["ke"], c["n"], c["idx"], qk, c["block"], use_unaligned_ks=unaligned
    )
    return dg.fp8_fp4_sparse_mqa_logits(
        c["q"], c["kv"], c["w"], meta, c["num_max"], c["block"], use_unaligned_ks=unaligned
    )


def sparse_paged_case(s, h, d, fmt, block, num_max, page_kv=64, seed=0, lens=None):
    """Rows of a few requests, each with its own shuffled pages; context lengths cover empty, one token, partial
    last blocks and full pages."""
    g = torch.Generator(device=_device()).manual_seed(seed)
    cpu = torch.Generator().manual_seed(seed)
    q, q_deq = sparse_q(s, h, d, fmt, g)
    lens = lens or [int(x) for x in torch.randint(0, 900, (s,), generator=cpu)]
    lens[0] = 0
    if s > 1:
        lens[1] = 1
    max_pages = max(1, ceil_div(max(lens), page_kv))
    num_pages = s * max_pages // 2 + max_pages + 3
    table = torch.stack([torch.randperm(num_pages, generator=cpu)[:max_pages] for _ in range(s)]).int()
    rows = num_pages * page_kv
    vals, sf, deq = mx_quantize(varied_rows(rows, d, g), fmt)
    rb = vals.shape[1]
    cache = torch.empty(num_pages, page_kv * (rb + 4), dtype=torch.uint8, device=_device())
    cache[:, : page_kv * rb] = vals.view(torch.uint8).reshape(num_pages, page_kv * rb)
    cache[:, page_kv * rb :] = sf.view(torch.uint8).reshape(num_pages, page_kv * 4)
    idx = sparse_indices([0] * s, lens, block, num_max, seed)
    w = torch.randn(s, h, device=_device(), generator=g).to(torch.bfloat16)
    return dict(
        q=(q[0].unsqueeze(1), q[1].unsqueeze(1)),
        q_deq=q_deq,
        cache=cache.view(num_pages, page_kv, 1, rb + 4),
        pages_deq=deq.view(num_pages, page_kv, d),
        w=w,
        lens=torch.tensor(lens, dtype=torch.int32, device=_device()),
        table=table.cuda(),
        idx=idx.cuda(),
        block=block,
        num_max=num_max,
        page_kv=page_kv,
    )


def run_sparse_paged(c):
    import deep_gemm_sm120 as dg

    s = c["idx"].shape[0]
    req = torch.arange(s, dtype=torch.int32, device=_device())
    meta = dg.get_paged_sparse_mqa_logits_metadata(
        c["lens"], c["table"], req, c["page_kv"], c["idx"], c["q"][0].dtype, c["block"]
    )
    return dg.fp8_fp4_paged_sparse_mqa_logits(c["q"], c["cache"], c["w"], meta, c["num_max"], c["block"])


def valid_slots(ks: torch.Tensor, ke: torch.Tensor, num_max_sparse_blocks: int, sparse_block_kv: int) -> torch.Tensor:
    """n_r per row: the leading entries of a row's index list that are real blocks (the rest is padding)."""
    span = (ke.long() - ks.long()).clamp_min(0)
    return torch.minimum((span + sparse_block_kv - 1) // sparse_block_kv, torch.full_like(span, num_max_sparse_blocks))


def token_grid(indices: torch.Tensor, ks: torch.Tensor, sparse_block_kv: int) -> torch.Tensor:
    """[rows, slots * B] absolute KV token of every output column: blocks are shifted by ks % B so that the row's
    first block starts exactly at ks."""
    offset = ks.long() % sparse_block_kv
    o = torch.arange(sparse_block_kv, device=indices.device)
    return (indices.long()[:, :, None] * sparse_block_kv + offset[:, None, None] + o).flatten(1)


def output_mask(
    indices: torch.Tensor, ks: torch.Tensor, ke: torch.Tensor, sparse_block_kv: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(tokens, valid): the token grid and which of its columns are scores."""
    rows, slots = indices.shape
    tokens = token_grid(indices, ks, sparse_block_kv)
    n = valid_slots(ks, ke, slots, sparse_block_kv)
    slot_of_column = torch.arange(slots * sparse_block_kv, device=indices.device) // sparse_block_kv
    valid = (slot_of_column[None, :] < n[:, None]) & (tokens >= ks.long()[:, None]) & (tokens < ke.long()[:, None])
    return tokens, valid


def sparse_indices(
    ks: list[int], ke: list[int], sparse_block_kv: int, num_max_sparse_blocks: int, seed: int = 0
) -> torch.Tensor:
    """A valid index tensor: per row, n_r distinct increasing blocks of the row's range (all of them when they fit,
    else a random choice), padded by repeating the last (0 for an empty row), as DeepGEMM's callers build it."""
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for s, e in zip(ks, ke):
        first = s // sparse_block_kv
        available = ceil_div(max(0, e - s), sparse_block_kv)
        n = min(available, num_max_sparse_blocks)
        if n == available:
            blocks = list(range(first, first + available))
        else:
            blocks = sorted((torch.randperm(available, generator=gen)[:n] + first).tolist())
        rows.append(blocks + [blocks[-1] if blocks else 0] * (num_max_sparse_blocks - n))
    return torch.tensor(rows, dtype=torch.int32).reshape(len(ks), num_max_sparse_blocks)
