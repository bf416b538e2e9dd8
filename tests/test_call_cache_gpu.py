"""The per-signature call caches (launch.CallCache) against the checks they skip: randomized calls of every entry
point that caches, each compared through both paths. A call that hits the cache (new addresses, new data, the
signature seen before) must give bitwise the output of the same call checked afresh (launch.forget_calls()
first); a signature that differs in one stride is checked again and computes its own answer; an illegal call
raises the same exception (type and message) with a warm cache as with a cold one, and is never cached.

DG_SM120_CACHE_SECONDS (default 30) bounds each entry point's time after its first 3 cases and
DG_SM120_CACHE_CASES (default 40) its cases; DG_SM120_CACHE_SEED (default 43) picks the sequence. A failure prints its case, so it replays alone."""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable

import pytest
import torch
from gpu_helpers import contiguous_layout, requires_cuda

from deep_gemm_sm120.core.arith import ceil_div, round_up

pytestmark = [pytest.mark.cuda, pytest.mark.emulation, requires_cuda]

SECONDS = float(os.environ.get("DG_SM120_CACHE_SECONDS", "30"))
CASES = int(os.environ.get("DG_SM120_CACHE_CASES", "40"))
SEED = int(os.environ.get("DG_SM120_CACHE_SEED", "43"))
SENTINEL = -7.0

# A case: make(seed) -> fresh tensors of one fixed signature filled from seed (allocated anew each time, so
# addresses differ while earlier ones are alive); run(tensors) -> the outputs; a list of illegal variants
# (callables built from a set of tensors) that must raise.
Make = Callable[[int], dict]
Run = Callable[[dict], tuple]


def _entries() -> int:
    from deep_gemm_sm120.launch import _CACHES

    return sum(len(c) for c in _CACHES)


def _cold(run: Run, t: dict) -> tuple:
    from deep_gemm_sm120.launch import forget_calls

    forget_calls()
    out = run(t)
    torch.cuda.synchronize()
    return out


def _raised(fn) -> tuple[type, str] | None:
    try:
        fn()
    except Exception as e:  # the comparison is the point: whatever is raised, both paths must agree
        return type(e), str(e)
    return None


def _strided(t: torch.Tensor, pad: int) -> torch.Tensor:
    """t's values in a buffer with `pad` more elements per row (another row stride, same shape)."""
    if pad == 0:
        return t
    buf = torch.zeros(*t.shape[:-1], t.shape[-1] + pad, dtype=t.dtype, device=t.device)
    buf[..., : t.shape[-1]] = t
    return buf[..., : t.shape[-1]]


def _check(label: str, make: Make, run: Run, illegal: list[Callable[[dict], object]], restrided: Make | None) -> None:
    warm = make(1)
    first = _cold(run, warm)  # checks and caches this signature
    before = _entries()
    fresh = make(2)
    fast = run(fresh)  # new data at new addresses, the same signature: a hit
    torch.cuda.synchronize()
    assert _entries() == before, f"{label}: a call with a seen signature was not served from the cache"
    again = make(2)
    slow = _cold(run, again)
    for i, (x, y) in enumerate(zip(fast, slow)):
        assert torch.equal(x, y), f"{label}: output {i} of the cached call differs from the checked one"
    untouched = all(bool((x == SENTINEL).all()) for x in fast)  # nothing to compute (empty groups or masks)
    assert untouched or any(not torch.equal(x, y) for x, y in zip(first, fast)), (
        f"{label}: different inputs gave equal outputs (the case does not tell stale addresses apart)"
    )
    if restrided is not None:  # one stride changed: checked again (a new entry), its own correct answer
        run(warm)  # the cache holds the original signature
        before = _entries()
        other = restrided(2)
        got = run(other)
        torch.cuda.synchronize()
        assert _entries() == before + 1, f"{label}: a changed stride was served from the old signature's entry"
        want = _cold(run, restrided(2))
        for i, (x, y) in enumerate(zip(got, want)):
            assert torch.equal(x, y), f"{label}: output {i} with a changed stride differs from the checked one"
        for i, (x, y) in enumerate(zip(got, slow)):
            assert torch.equal(x, y), f"{label}: output {i} with a changed stride differs from the dense layout's"
    for j, bad in enumerate(illegal):
        t = make(3)
        run(warm)  # warm: the legal signature is cached
        before = _entries()
        hot = _raised(lambda: bad(t))
        assert _entries() == before, f"{label}: illegal variant {j} was cached"
        from deep_gemm_sm120.launch import forget_calls

        forget_calls()
        cold = _raised(lambda: bad(t))
        assert hot is not None, f"{label}: illegal variant {j} did not raise"
        assert hot == cold, f"{label}: illegal variant {j} raised {hot} with a warm cache, {cold} with a cold one"


def _drive(name: str, case) -> None:
    rng = random.Random(f"{SEED}-{name}")
    start, done = time.monotonic(), 0
    # at least 3 cases whatever the clock says: a cold JIT cache (emulated block-scaled kernels compile for ~10 s
    # each) must not turn the time bound into a failure (H200 run 119 lost test_fp8_einsum_... to it, it seems)
    while done < CASES and (done < 3 or time.monotonic() - start < SECONDS):
        label, make, run, illegal, restrided = case(rng)
        _check(f"{name} seed {SEED} case {done} ({label})", make, run, illegal, restrided)
        done += 1
    print(f"{name}: {done} cases in {time.monotonic() - start:.0f} s")


def _gen(seed: int) -> torch.Generator:
    return torch.Generator(device="cuda").manual_seed(seed)


def _dim(rng: random.Random, choices=(1, 7, 64, 100, 128, 200, 256), align: int = 1) -> int:
    x = rng.choice(choices)
    return max(align, round_up(x, align))


# ---------------------------------------------------------------- BF16 dense


def _bf16_dense(rng: random.Random):
    import deep_gemm_sm120 as dg

    layout = rng.choice(["nt", "nn", "tn", "tt"])
    m, n = _dim(rng, align=8 if layout[0] == "t" else 1), _dim(rng, align=8)  # an MN-major A: 16-byte rows
    k = rng.choice([64, 128, 256, 4096]) if m <= 8 and rng.random() < 0.5 else _dim(rng, (64, 128, 192, 320), 8)
    out = rng.choice([torch.bfloat16, torch.float32])
    with_c = out == torch.float32 and rng.random() < 0.6
    alias = with_c and rng.random() < 0.5
    pad = rng.choice([0, 0, 8, 64])
    fn = getattr(dg, f"bf16_gemm_{layout}")
    a_shape = (k, m) if layout[0] == "t" else (m, k)
    b_shape = (k, n) if layout[1] == "n" else (n, k)

    def make(seed: int, pad_a: int = pad) -> dict:
        g = _gen(seed)
        a = _strided(torch.randn(*a_shape, device="cuda", dtype=torch.bfloat16, generator=g), pad_a)
        b = torch.randn(*b_shape, device="cuda", dtype=torch.bfloat16, generator=g)
        d = torch.full((m, n), SENTINEL, device="cuda", dtype=out)
        c = torch.randn(m, n, device="cuda", generator=g) if with_c else None
        if alias:
            d.copy_(c)
            c = d
        return dict(a=a, b=b, d=d, c=c)

    def run(t: dict) -> tuple:
        fn(t["a"], t["b"], t["d"], c=t["c"])
        return (t["d"],)

    illegal = [
        lambda t: fn(t["a"].float(), t["b"], t["d"], c=t["c"]),
        lambda t: fn(t["a"], t["b"], t["d"][:, : max(n - 8, 1)], c=t["c"]),
        lambda t: fn(t["a"], t["b"][1:] if b_shape[0] > 1 else t["b"].view(-1)[1:], t["d"], c=t["c"]),
    ]
    label = f"bf16_gemm_{layout} m={m} n={n} k={k} out={out} c={with_c} alias={alias} pad={pad}"
    return label, make, run, illegal, (lambda seed: make(seed, pad + 8)) if a_shape[0] > 1 else None


def test_bf16_dense_cached_equals_checked(sm120_or_emulation):
    _drive("bf16 dense", _bf16_dense)


# ---------------------------------------------------------------- BF16 M-grouped


def _bf16_grouped(rng: random.Random):
    import deep_gemm_sm120 as dg

    g, n, k = rng.randint(1, 4), _dim(rng, (64, 128, 256), 64), _dim(rng, (64, 128, 256), 64)
    if rng.random() < 0.5:  # masked
        m = rng.choice([16, 64, 128, 200])
        expected = rng.choice([1, m // 2 + 1, m])

        def make(seed: int, pad_d: int = 0) -> dict:
            gen = _gen(seed)
            a = torch.randn(g, m, k, device="cuda", dtype=torch.bfloat16, generator=gen)
            b = torch.randn(g, n, k, device="cuda", dtype=torch.bfloat16, generator=gen)
            d = _strided(torch.full((g, m, n), SENTINEL, device="cuda", dtype=torch.bfloat16), pad_d)
            masks = torch.randint(0, m + 1, (g,), generator=torch.Generator().manual_seed(seed)).int().cuda()
            return dict(a=a, b=b, d=d, masked=masks)

        def run(t: dict) -> tuple:
            dg.m_grouped_bf16_gemm_nt_masked(t["a"], t["b"], t["d"], t["masked"], expected)
            return (t["d"],)

        illegal = [
            lambda t: dg.m_grouped_bf16_gemm_nt_masked(t["a"], t["b"], t["d"], t["masked"].long(), expected),
            lambda t: dg.m_grouped_bf16_gemm_nt_masked(t["a"], t["b"], t["d"], t["masked"], float(expected)),
            lambda t: dg.m_grouped_bf16_gemm_nt_masked(t["a"], t["b"][:, :, :-8], t["d"], t["masked"], expected),
        ]
        return f"masked g={g} m={m} n={n} k={k} expected_m={expected}", make, run, illegal, None  # d's stride: dense
    sizes = [rng.choice([0, 1, 100, 128, 300]) for _ in range(g)]
    psum = rng.random() < 0.5
    check = rng.choice([None, False])

    def make(seed: int) -> dict:
        gen = _gen(seed)
        per_row, ends = contiguous_layout(sizes)
        rows = per_row.numel()
        a = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16, generator=gen)
        b = torch.randn(g, n, k, device="cuda", dtype=torch.bfloat16, generator=gen)
        d = torch.full((rows, n), SENTINEL, device="cuda", dtype=torch.bfloat16)
        return dict(a=a, b=b, d=d, layout=ends if psum else per_row)

    def run(t: dict) -> tuple:
        dg.m_grouped_bf16_gemm_nt_contiguous(
            t["a"], t["b"], t["d"], t["layout"], use_psum_layout=psum, check_layout=check
        )
        return (t["d"],)

    def bad_layout(t: dict) -> None:  # a value error, checked per call unless check_layout=False
        bad = t["layout"].clone()
        if psum:
            bad[-1] = t["d"].shape[0] + 1  # the last group ends past M
        else:
            bad[0] = g + 5  # no such group
        dg.m_grouped_bf16_gemm_nt_contiguous(t["a"], t["b"], t["d"], bad, use_psum_layout=psum, check_layout=True)

    illegal = [
        lambda t: dg.m_grouped_bf16_gemm_nt_contiguous(
            t["a"], t["b"].float(), t["d"], t["layout"], use_psum_layout=psum
        ),
        lambda t: dg.m_grouped_bf16_gemm_nt_contiguous(
            t["a"][:, :-8], t["b"], t["d"], t["layout"], use_psum_layout=psum
        ),
    ]
    if sum(sizes):
        illegal.append(bad_layout)
    label = f"contiguous sizes={sizes} n={n} k={k} psum={psum} check_layout={check}"
    return label, make, run, illegal, None


def test_bf16_grouped_cached_equals_checked(sm120_or_emulation):
    _drive("bf16 m-grouped", _bf16_grouped)


# ---------------------------------------------------------------- block-scaled (FP8 / FP4)


def _pow2(shape, gen: torch.Generator) -> torch.Tensor:
    return torch.exp2(torch.randint(-3, 4, shape, device="cuda", generator=gen).float())


def _side(kind: str, lead: tuple, rows: int, k: int, gen: torch.Generator, block_rows: int = 1):
    """(values, unpacked scales) of one operand: e4m3 with 1x128 (or 128x128 when block_rows) UE8M0 scales, or
    packed e2m1 with MXFP4 (1x32 UE8M0) / NVFP4 (1x16 UE4M3) scales."""
    if kind == "mxfp8":
        x = torch.randn(*lead, rows, k, device="cuda", generator=gen).to(torch.float8_e4m3fn)
        return x, _pow2((*lead, ceil_div(rows, block_rows), ceil_div(k, 128)), gen)
    x = torch.randint(0, 256, (*lead, rows, k // 2), device="cuda", generator=gen, dtype=torch.uint8)
    if kind == "mxfp4":
        return x, _pow2((*lead, rows, k // 32), gen)
    sf = (torch.rand(*lead, rows, k // 16, device="cuda", generator=gen) * 4 + 0.25).to(torch.float8_e4m3fn)
    return x, sf


_RECIPE = {"mxfp8": (1, 128, 128), "mxfp4": (1, 1, 32), "nvfp4": (1, 1, 16)}


def _block_scaled(rng: random.Random):
    import deep_gemm_sm120 as dg

    kind = rng.choice(["mxfp8", "mxfp8", "mxfp4", "nvfp4"])
    form = rng.choice(["dense", "dense", "masked", "contiguous"])
    packed = kind == "nvfp4" or rng.random() < 0.7  # NVFP4 scales are taken packed or as e4m3
    recipe = _RECIPE[kind]
    n, k = _dim(rng, (64, 128, 256), 64), rng.choice([128, 256, 512])
    alpha = rng.choice([None, 0.5, 3.0]) if kind != "mxfp8" or rng.random() < 0.3 else None
    gran_b = 128 if kind == "mxfp8" and rng.random() < 0.6 else 1

    def pack(sf, mn, groups, is_sfa):
        if not packed or sf.dtype != torch.float32:
            return sf
        rr = (1, 1 if gran_b == 1 else 128, recipe[2])
        return dg.transform_sf_into_required_layout(sf, mn, k, rr, groups, is_sfa=is_sfa)

    if form == "dense":
        m = _dim(rng, (1, 7, 64, 100, 256))
        out = rng.choice([torch.bfloat16, torch.float32])

        def make(seed: int) -> dict:
            gen = _gen(seed)
            a, sfa = _side(kind, (), m, k, gen)
            b, sfb = _side(kind, (), n, k, gen, gran_b)
            d = torch.full((m, n), SENTINEL, device="cuda", dtype=out)
            return dict(a=(a, pack(sfa, m, None, True)), b=(b, pack(sfb, n, None, False)), d=d)

        def run(t: dict) -> tuple:
            dg.fp8_fp4_gemm_nt(t["a"], t["b"], t["d"], recipe=recipe if packed else None, alpha=alpha)
            return (t["d"],)

        illegal = [
            lambda t: dg.fp8_fp4_gemm_nt(t["a"], t["b"], t["d"].half(), recipe=recipe if packed else None),
            lambda t: dg.fp8_fp4_gemm_nt(t["a"], (t["b"][0], t["b"][1].unsqueeze(0)), t["d"], recipe=recipe),
            lambda t: dg.fp8_fp4_gemm_nt(t["a"], t["b"], t["d"], recipe=recipe, alpha=torch.ones(())),
        ]
        label = f"dense {kind} m={m} n={n} k={k} packed={packed} b blocks={gran_b} out={out} alpha={alpha}"
        return label, make, run, illegal, None
    g = rng.randint(1, 3)
    if form == "masked":
        m = rng.choice([32, 64, 128])
        expected = rng.choice([1, m])

        def make(seed: int) -> dict:
            gen = _gen(seed)
            a, sfa = _side(kind, (g,), m, k, gen)
            b, sfb = _side(kind, (g,), n, k, gen, gran_b)
            d = torch.full((g, m, n), SENTINEL, device="cuda", dtype=torch.bfloat16)
            masks = torch.randint(0, m + 1, (g,), generator=torch.Generator().manual_seed(seed)).int().cuda()
            return dict(a=(a, pack(sfa, m, g, True)), b=(b, pack(sfb, n, g, False)), d=d, masked=masks)

        def run(t: dict) -> tuple:
            dg.m_grouped_fp8_fp4_gemm_nt_masked(
                t["a"], t["b"], t["d"], t["masked"], expected, recipe=recipe if packed else None, alpha=alpha
            )
            return (t["d"],)

        illegal = [
            lambda t: dg.m_grouped_fp8_fp4_gemm_nt_masked(
                t["a"], t["b"], t["d"], t["masked"].long(), expected, recipe=recipe
            ),
            lambda t: dg.m_grouped_fp8_fp4_gemm_nt_masked(
                t["a"], t["b"], t["d"][:, :-1], t["masked"], expected, recipe=recipe
            ),
            lambda t: dg.m_grouped_fp8_fp4_gemm_nt_masked(
                t["a"], t["b"], t["d"], t["masked"], str(expected), recipe=recipe
            ),
        ]
        label = f"masked {kind} g={g} m={m} n={n} k={k} packed={packed} expected_m={expected} alpha={alpha}"
        return label, make, run, illegal, None
    sizes = [rng.choice([0, 1, 128, 200]) for _ in range(g)]
    psum = rng.random() < 0.5

    def make(seed: int) -> dict:
        gen = _gen(seed)
        per_row, ends = contiguous_layout(sizes)
        rows = per_row.numel()
        a, sfa = _side(kind, (), rows, k, gen)
        b, sfb = _side(kind, (g,), n, k, gen, gran_b)
        d = torch.full((rows, n), SENTINEL, device="cuda", dtype=torch.bfloat16)
        return dict(
            a=(a, pack(sfa, rows, None, True)), b=(b, pack(sfb, n, g, False)), d=d, layout=ends if psum else per_row
        )

    def run(t: dict) -> tuple:
        dg.m_grouped_fp8_fp4_gemm_nt_contiguous(
            t["a"], t["b"], t["d"], t["layout"], recipe=recipe if packed else None, use_psum_layout=psum, alpha=alpha
        )
        return (t["d"],)

    illegal = [
        lambda t: dg.m_grouped_fp8_fp4_gemm_nt_contiguous(t["a"], t["b"], t["d"].float(), t["layout"], recipe=recipe),
        lambda t: dg.m_grouped_fp8_fp4_gemm_nt_contiguous(  # one entry too many (also when no row is in use)
            t["a"],
            t["b"],
            t["d"],
            torch.cat([t["layout"], t["layout"].new_zeros(1)]),
            recipe=recipe,
            use_psum_layout=psum,
        ),
    ]
    label = f"contiguous {kind} sizes={sizes} n={n} k={k} packed={packed} psum={psum} alpha={alpha}"
    return label, make, run, illegal, None


def test_block_scaled_cached_equals_checked(sm120_or_emulation):
    _drive("block-scaled", _block_scaled)


def _exact_fp32(rng: random.Random):
    """The exact FP32-scale kernel (issue 40): float32 scales that are not powers of two, with
    disable_ue8m0_cast=True, taken as given (K-major: converted per call) or prepared in the kernel's layout."""
    import deep_gemm_sm120 as dg

    form = rng.choice(["dense", "masked", "contiguous"])
    prepared = rng.random() < 0.5
    n, k = _dim(rng, (64, 128, 200, 256), 8), rng.choice([128, 256, 384])
    kb = ceil_div(k, 128)

    def scales(gen, *shape):
        return torch.rand(*shape, device="cuda", generator=gen) * 0.3 + 0.01  # not powers of two

    def values(gen, *shape):
        return torch.randn(*shape, device="cuda", generator=gen).to(torch.float8_e4m3fn)

    def prep(sf, mn, groups, is_sfa, blocks):
        if not prepared:
            return sf
        rec = (1, 128) if is_sfa else (128 if blocks else 1, 128)
        return dg.transform_sf_into_required_layout(sf, mn, k, rec, groups, is_sfa=is_sfa, disable_ue8m0_cast=True)

    blocks = rng.random() < 0.6  # 128x128 weight blocks, else per-channel
    brows = ceil_div(n, 128) if blocks else n
    if form == "dense":
        m = _dim(rng, (1, 7, 64, 100, 256))

        def make(seed: int) -> dict:
            gen = _gen(seed)
            a, b = values(gen, m, k), values(gen, n, k)
            sfa, sfb = (
                prep(scales(gen, m, kb), m, None, True, False),
                prep(scales(gen, brows, kb), n, None, False, blocks),
            )
            return dict(a=(a, sfa), b=(b, sfb), d=torch.full((m, n), SENTINEL, device="cuda", dtype=torch.bfloat16))

        def run(t: dict) -> tuple:
            dg.fp8_gemm_nt(t["a"], t["b"], t["d"], disable_ue8m0_cast=True)
            return (t["d"],)

        label = f"exact dense m={m} n={n} k={k} prepared={prepared} blocks={blocks}"
        illegal = [lambda t: dg.fp8_gemm_nt(t["a"], t["b"], t["d"], recipe=(1, 128, 64), disable_ue8m0_cast=True)]
        return label, make, run, illegal, None
    g = rng.randint(1, 3)
    if form == "masked":
        m = rng.choice([32, 64, 128])

        def make(seed: int) -> dict:
            gen = _gen(seed)
            a, b = values(gen, g, m, k), values(gen, g, n, k)
            sfa = prep(scales(gen, g, m, kb), m, g, True, False)
            sfb = prep(scales(gen, g, brows, kb), n, g, False, blocks)
            masks = torch.randint(0, m + 1, (g,), generator=torch.Generator().manual_seed(seed)).int().cuda()
            d = torch.full((g, m, n), SENTINEL, device="cuda", dtype=torch.bfloat16)
            return dict(a=(a, sfa), b=(b, sfb), d=d, masked=masks)

        def run(t: dict) -> tuple:
            dg.m_grouped_fp8_gemm_nt_masked(t["a"], t["b"], t["d"], t["masked"], m, disable_ue8m0_cast=True)
            return (t["d"],)

        return f"exact masked g={g} m={m} n={n} k={k} prepared={prepared} blocks={blocks}", make, run, [], None
    sizes = [rng.choice([0, 1, 128, 200]) for _ in range(g)]

    def make(seed: int) -> dict:
        gen = _gen(seed)
        per_row, _ = contiguous_layout(sizes)
        rows = per_row.numel()
        a, b = values(gen, rows, k), values(gen, g, n, k)
        sfa = prep(scales(gen, rows, kb), rows, None, True, False)
        sfb = prep(scales(gen, g, brows, kb), n, g, False, blocks)
        d = torch.full((rows, n), SENTINEL, device="cuda", dtype=torch.bfloat16)
        return dict(a=(a, sfa), b=(b, sfb), d=d, layout=per_row)

    def run(t: dict) -> tuple:
        dg.m_grouped_fp8_gemm_nt_contiguous(t["a"], t["b"], t["d"], t["layout"], disable_ue8m0_cast=True)
        return (t["d"],)

    return f"exact contiguous sizes={sizes} n={n} k={k} prepared={prepared} blocks={blocks}", make, run, [], None


def test_exact_fp32_cached_equals_checked(sm120_or_emulation):
    _drive("exact-fp32", _exact_fp32)


# ---------------------------------------------------------------- einsum and the HC pre-norm GEMM


def _einsum(rng: random.Random):
    import deep_gemm_sm120 as dg

    expr = rng.choice(["bmk,bnk->mn", "bhr,hdr->bhd", "bhd,hdr->bhr"])
    pad = rng.choice([0, 0, 8, 64])
    if expr == "bmk,bnk->mn":
        bs, m, n, k = rng.randint(1, 4), _dim(rng), _dim(rng, align=8), _dim(rng, (64, 128, 1024), 8)
        out = rng.choice([torch.bfloat16, torch.float32])
        accumulate = out == torch.float32 and rng.random() < 0.5  # c is d: d += ...
        shapes = ((bs, m, k), (bs, n, k), (m, n))
    else:
        bs, h, r, dd = (
            _dim(rng, (1, 4, 32, 100)),
            rng.choice([1, 2, 8]),
            _dim(rng, (64, 128, 512), 64),
            _dim(rng, (64, 128, 256), 64),
        )
        out, accumulate = torch.bfloat16, False
        a_last = r if expr == "bhr,hdr->bhd" else dd
        shapes = ((bs, h, a_last), (h, dd, r), (bs, h, dd if expr == "bhr,hdr->bhd" else r))

    def make(seed: int, pad_a: int = pad) -> dict:
        g = _gen(seed)
        a = _strided(torch.randn(*shapes[0], device="cuda", dtype=torch.bfloat16, generator=g), pad_a)
        b = _strided(torch.randn(*shapes[1], device="cuda", dtype=torch.bfloat16, generator=g), pad)
        d = (
            torch.randn(*shapes[2], device="cuda", generator=g).to(out)
            if accumulate
            else torch.full(shapes[2], SENTINEL, device="cuda", dtype=out)
        )
        return dict(a=a, b=b, d=d)

    def run(t: dict) -> tuple:
        dg.einsum(expr, t["a"], t["b"], t["d"], c=t["d"] if accumulate else None)
        return (t["d"],)

    illegal = [
        lambda t: dg.einsum(expr, t["a"].float(), t["b"], t["d"]),
        lambda t: dg.einsum(expr, t["a"], t["b"][..., :-8], t["d"]),
        lambda t: dg.einsum(expr.replace("->", " ->"), t["a"], t["b"], t["d"].half()),
    ]
    return (
        f"einsum {expr} shapes={shapes} out={out} accumulate={accumulate} pad={pad}",
        make,
        run,
        illegal,
        (lambda seed: make(seed, pad + 8)),
    )


def test_einsum_cached_equals_checked(sm120_or_emulation):
    _drive("einsum", _einsum)


def _fp8_einsum(rng: random.Random):
    import deep_gemm_sm120 as dg
    from deep_gemm_sm120.selftest.workloads.block_scaled import einsum_operands

    bs, h = _dim(rng, (1, 7, 64, 130)), rng.choice([1, 2, 4])
    r, dd = _dim(rng, (128, 512, 1024), 128), _dim(rng, (64, 128, 200, 256), 16)
    form = rng.choice(["packed", "packed", "ue8m0", "fp32"])  # fp32: the exact kernel, routed per call
    out = rng.choice([torch.bfloat16, torch.float32])
    with_c = out == torch.float32 and rng.random() < 0.5
    pad = rng.choice([0, 0, 128])

    def make(seed: int, pad_x: int = pad) -> dict:
        g = _gen(seed)
        x = torch.randn(bs, h, r, device="cuda", generator=g)
        y = torch.randn(h, dd, r, device="cuda", generator=g)
        (xq, sx), (yq, sy) = einsum_operands(x, y, ue8m0=form != "fp32")
        if form == "packed":
            sx = dg.transform_sf_into_required_layout(
                sx.transpose(0, 1), bs, r, (1, 128, 128), num_groups=h, is_sfa=True
            )
            sy = dg.transform_sf_into_required_layout(sy, dd, r, (1, 128, 128), num_groups=h)
        c = torch.randn(bs, h, dd, device="cuda", generator=g) if with_c else None
        return dict(
            x=_strided(xq, pad_x),
            sx=sx,
            y=yq,
            sy=sy,
            c=c,
            d=torch.full((bs, h, dd), SENTINEL, device="cuda", dtype=out),
        )

    def run(t: dict) -> tuple:
        dg.fp8_einsum("bhr,hdr->bhd", (t["x"], t["sx"]), (t["y"], t["sy"]), t["d"], c=t["c"])
        return (t["d"],)

    illegal = [
        lambda t: dg.fp8_einsum("bhr,hdr->bhd", (t["x"], t["sx"]), (t["y"], t["sy"]), t["d"].half()),
        lambda t: dg.fp8_einsum("bhr,hdr->bhd", (t["x"], t["sx"]), (t["y"][:, :-16], t["sy"]), t["d"]),
        lambda t: dg.fp8_einsum("bhr,hdr->bhd", (t["x"], t["sx"]), (t["y"], t["sy"]), t["d"], recipe=(1, 1, 128)),
    ]
    return (
        f"fp8_einsum bs={bs} h={h} r={r} d={dd} scales={form} out={out} c={with_c} pad={pad}",
        make,
        run,
        illegal,
        (lambda seed: make(seed, pad + 128)),
    )


def test_fp8_einsum_cached_equals_checked(sm120_or_emulation):
    _drive("fp8_einsum", _fp8_einsum)


def _sparse(rng: random.Random):
    import deep_gemm_sm120 as dg
    from deep_gemm_sm120.selftest.workloads import mqa

    fmt, d = rng.choice([("mxfp8", 128), ("mxfp8", 64), ("mxfp4", 128)])
    h, block, num_max = rng.choice([16, 32, 64]), rng.choice([8, 16, 32]), rng.randint(1, 12)
    paged = rng.random() < 0.5
    # sparse_paged_case gives request 0 no context and sparse_case leaves every 5th row empty (row 0 too), so one
    # row would give all -inf whatever the inputs; n >= 100 keeps the other rows' windows from being empty by chance
    s = rng.choice([2, 9, 40])
    n = rng.choice([100, 611])

    def make(seed: int) -> dict:
        if paged:
            c = mqa.sparse_paged_case(s, h, d, fmt, block, num_max, page_kv=64, seed=seed, lens=[300] * s)
            req = torch.arange(s, dtype=torch.int32, device="cuda")
            meta = dg.get_paged_sparse_mqa_logits_metadata(
                c["lens"], c["table"], req, c["page_kv"], c["idx"], c["q"][0].dtype, block
            )
        else:
            c = mqa.sparse_case(s, n, h, d, fmt, block, num_max, seed=seed)
            meta = dg.get_sparse_mqa_logits_metadata(c["ks"], c["ke"], n, c["idx"], c["q"][0].dtype, block, True)
        return dict(c=c, meta=meta)

    def call(t: dict, **over):
        c, meta = t["c"], over.get("meta", t["meta"])
        w, nm = over.get("w", c["w"]), over.get("num_max", num_max)
        if paged:
            return dg.fp8_fp4_paged_sparse_mqa_logits(c["q"], c["cache"], w, meta, nm, block)
        return dg.fp8_fp4_sparse_mqa_logits(c["q"], c["kv"], w, meta, nm, block, use_unaligned_ks=True)

    def run(t: dict) -> tuple:
        return (call(t),)

    illegal = [
        lambda t: call(t, w=t["c"]["w"].float()),
        lambda t: call(t, num_max=num_max + 1),
        lambda t: call(t, meta=t["meta"][:, :, :1].contiguous()),
    ]
    label = f"sparse {'paged' if paged else 'contiguous'} {fmt} d={d} h={h} block={block} num_max={num_max} s={s}"
    return (label, make, run, illegal, None)


def test_sparse_mqa_logits_cached_equals_checked(sm120_or_emulation):
    _drive("sparse_mqa_logits", _sparse)


def _gdr(rng: random.Random):
    import deep_gemm_sm120 as dg

    varlen = rng.random() < 0.5
    b, t = (1 if varlen else rng.randint(1, 2)), rng.choice([1, 33, 200])
    h = rng.choice([1, 2, 4])
    hv = h * rng.choice([1, 2])
    n = 3 if varlen else b
    dt = rng.choice([torch.bfloat16, torch.float16])
    init, final, l2 = rng.random() < 0.5, rng.random() < 0.5, rng.random() < 0.5
    chunk = rng.choice([None, 16, 32, 64])

    def make(seed: int) -> dict:
        gen = _gen(seed)
        r = lambda *shape, dtype=dt: torch.randn(*shape, device="cuda", generator=gen).to(dtype)
        t_ = dict(q=r(b, t, h, 128) * 0.1, k=r(b, t, h, 128) * 0.1, v=r(b, t, hv, 128))
        t_["g"] = -torch.rand(b, t, hv, device="cuda", generator=gen) * 0.1
        t_["beta"] = torch.rand(b, t, hv, device="cuda", generator=gen).to(dt)
        t_["init"] = r(n, hv, 128, 128, dtype=torch.float32) * 0.01 if init else None
        t_["cu"] = torch.tensor([0, t // 3, t // 2, t], dtype=torch.int32, device="cuda") if varlen else None
        return t_

    def call(t_: dict, **over):
        kw = dict(initial_state=t_["init"], output_final_state=final, cu_seqlens=t_["cu"],
                  use_qk_l2norm_in_kernel=l2, chunk_size=chunk)  # fmt: skip
        kw.update(over)
        return dg.chunk_gated_delta_rule(t_["q"], t_["k"], t_["v"], t_["g"], t_["beta"], **kw)

    def run(t_: dict) -> tuple:
        o, fs = call(t_)
        return (o,) if fs is None else (o, fs)

    illegal = [
        lambda t_: call(t_, chunk_size=48),
        lambda t_: dg.chunk_gated_delta_rule(t_["q"], t_["k"], t_["v"], t_["g"].half(), t_["beta"]),
        lambda t_: call(t_, scale="x"),
    ]
    label = f"gdr b={b} t={t} h={h} hv={hv} varlen={varlen} init={init} final={final} l2={l2} chunk={chunk} {dt}"
    return (label, make, run, illegal, None)


def test_gated_delta_rule_cached_equals_checked(sm120_or_emulation):
    _drive("gated_delta_rule", _gdr)


def _hc_prenorm(rng: random.Random):
    import deep_gemm_sm120 as dg

    m, n, k = _dim(rng, (1, 7, 64, 300, 2048)), rng.choice([4, 16, 24, 32]), rng.choice([64, 256, 1024, 4096, 7168])
    splits = rng.choice([None, None, 1, 4])
    pad = rng.choice([0, 0, 64])
    lead = () if splits is None else (splits,)

    def make(seed: int, pad_a: int = pad) -> dict:
        g = _gen(seed)
        a = _strided(torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=g), pad_a)
        b = torch.randn(n, k, device="cuda", generator=g)
        d = torch.full((*lead, m, n), SENTINEL, device="cuda")
        s = torch.full((*lead, m), SENTINEL, device="cuda")
        return dict(a=a, b=b, d=d, s=s)

    def run(t: dict) -> tuple:
        dg.tf32_hc_prenorm_gemm(t["a"], t["b"], t["d"], t["s"], num_splits=splits)
        return t["d"], t["s"]

    illegal = [
        lambda t: dg.tf32_hc_prenorm_gemm(t["a"], t["b"].bfloat16(), t["d"], t["s"], num_splits=splits),
        lambda t: dg.tf32_hc_prenorm_gemm(t["a"], t["b"], t["d"], t["s"], num_splits=float(splits or 1)),
        lambda t: dg.tf32_hc_prenorm_gemm(t["a"], t["b"], t["d"][..., :-1], t["s"], num_splits=splits),
    ]
    label = f"hc_prenorm m={m} n={n} k={k} num_splits={splits} pad={pad}"
    return label, make, run, illegal, (lambda seed: make(seed, pad + 64)) if m > 1 else None


def test_hc_prenorm_cached_equals_checked(sm120_or_emulation):
    _drive("tf32_hc_prenorm_gemm", _hc_prenorm)


# ---------------------------------------------------------------- MQA logits (dense prefill, paged decode)


def _mqa(rng: random.Random):
    import deep_gemm_sm120 as dg

    s, sk, h, d = rng.choice([1, 17, 64, 130]), rng.choice([1, 100, 512]), rng.choice([16, 32, 64]), 128
    compressed = rng.random() < 0.3
    max_k = rng.choice([16, 64]) if compressed else 0

    def make(seed: int) -> dict:
        g = _gen(seed)
        cpu = torch.Generator().manual_seed(seed)
        q = torch.randn(s, h, d, device="cuda", generator=g).to(torch.float8_e4m3fn)
        kv = torch.randn(sk, d, device="cuda", generator=g).to(torch.float8_e4m3fn)
        sf = torch.rand(sk, device="cuda", generator=g) + 0.5
        w = torch.randn(s, h, device="cuda", generator=g)
        ke = torch.randint(0, sk + 1, (s,), generator=cpu)
        span = torch.randint(0, (max_k or sk) + 1, (s,), generator=cpu)
        ks = (ke - span).clamp_min(0)
        return dict(q=q, kv=kv, sf=sf, w=w, ks=ks.int().cuda(), ke=ke.int().cuda())

    def run(t: dict) -> tuple:
        out = dg.fp8_mqa_logits(
            t["q"], (t["kv"], t["sf"]), t["w"], t["ks"], t["ke"], max_k, clean_logits=not compressed
        )
        if compressed:  # columns past a row's range are not written: compare the written ones
            cols = torch.arange(out.shape[1], device="cuda")
            out = out.masked_fill(cols[None, :] >= (t["ke"] - t["ks"])[:, None], 0)
        return (out,)

    def bad_range(t: dict) -> None:
        ke = t["ke"].clone()
        ke[0] = sk + 1
        dg.fp8_mqa_logits(t["q"], (t["kv"], t["sf"]), t["w"], t["ks"], ke, max_k)

    illegal = [
        bad_range,
        lambda t: dg.fp8_mqa_logits(t["q"], (t["kv"], t["sf"]), t["w"].half(), t["ks"], t["ke"], max_k),
        lambda t: dg.fp8_mqa_logits(t["q"], (t["kv"], t["sf"][:-1]), t["w"], t["ks"], t["ke"], max_k),
        lambda t: dg.fp8_mqa_logits(t["q"], (t["kv"], t["sf"]), t["w"], t["ks"], t["ke"], float(max_k)),
    ]
    return f"mqa s={s} sk={sk} h={h} max_seqlen_k={max_k}", make, run, illegal, None


def test_mqa_logits_cached_equals_checked(sm120_or_emulation):
    _drive("fp8_mqa_logits", _mqa)


def _paged_mqa(rng: random.Random):
    import deep_gemm_sm120 as dg
    from deep_gemm_sm120.selftest.workloads.mqa import paged_cache

    batch, next_n, h, block_kv = (
        rng.randint(1, 6),
        rng.choice([1, 2]),
        rng.choice([16, 32, 64]),
        rng.choice([32, 64, 128]),
    )
    lens = [rng.randint(0, 700) for _ in range(batch)]
    sms = torch.cuda.get_device_properties(0).multi_processor_count

    def make(seed: int) -> dict:
        cache, table, _ = paged_cache(lens, block_kv, 128, False, seed)
        g = _gen(seed)
        q = torch.randn(batch, next_n, h, 128, device="cuda", generator=g).to(torch.float8_e4m3fn)
        w = torch.randn(batch * next_n, h, device="cuda", generator=g)
        ctx = torch.tensor(lens, dtype=torch.int32, device="cuda")
        return dict(
            q=q, cache=cache, w=w, ctx=ctx, table=table, meta=dg.get_paged_mqa_logits_metadata(ctx, block_kv, sms)
        )

    max_len = (max(lens) // block_kv + 3) * block_kv

    def run(t: dict) -> tuple:
        out = dg.fp8_paged_mqa_logits(
            t["q"], t["cache"], t["w"], t["ctx"], t["table"], t["meta"], max_len, clean_logits=True
        )
        return (out,)

    def bad_table(t: dict) -> None:
        table = t["table"].clone()
        table[0, 0] = t["cache"].shape[0]
        dg.fp8_paged_mqa_logits(t["q"], t["cache"], t["w"], t["ctx"], table, t["meta"], max_len, clean_logits=True)

    illegal = [
        bad_table,
        lambda t: dg.fp8_paged_mqa_logits(t["q"], t["cache"], t["w"], t["ctx"].long(), t["table"], t["meta"], max_len),
        lambda t: dg.fp8_paged_mqa_logits(t["q"], t["cache"], t["w"][:-1], t["ctx"], t["table"], t["meta"], max_len),
        lambda t: dg.fp8_paged_mqa_logits(t["q"], t["cache"], t["w"], t["ctx"], t["table"], t["meta"], float(max_len)),
    ]
    label = f"paged batch={batch} next_n={next_n} h={h} block_kv={block_kv} lens={lens}"
    return label, make, run, illegal, None


def test_paged_mqa_logits_cached_equals_checked(sm120_or_emulation):
    _drive("fp8_paged_mqa_logits", _paged_mqa)


def test_index_checks_switch_skips_the_syncing_checks(sm120_or_emulation):
    """set_index_checks(False) (or DG_SM120_INDEX_CHECKS=0) skips the host checks that read index values, on a
    cached call too; the kernel then gives its documented defined result (docs/untrusted_indices.md: key
    ranges clamped to [0, SK]) instead of the ValueError."""
    import deep_gemm_sm120 as dg

    s, sk, h = 8, 64, 16
    q = torch.randn(s, h, 128, device="cuda").to(torch.float8_e4m3fn)
    kv = torch.randn(sk, 128, device="cuda").to(torch.float8_e4m3fn)
    sf, w = torch.ones(sk, device="cuda"), torch.randn(s, h, device="cuda")
    ks = torch.zeros(s, dtype=torch.int32, device="cuda")
    ke = torch.full((s,), sk, dtype=torch.int32, device="cuda")
    want = dg.fp8_mqa_logits(q, (kv, sf), w, ks, ke, clean_logits=True)  # caches the signature
    bad = ke.clone()
    bad[3] = sk + 1000
    assert dg.get_index_checks()
    with pytest.raises(ValueError, match="query 3"):
        dg.fp8_mqa_logits(q, (kv, sf), w, ks, bad, clean_logits=True)
    dg.set_index_checks(False)
    try:
        got = dg.fp8_mqa_logits(q, (kv, sf), w, ks, bad, clean_logits=True)
        torch.cuda.synchronize()
    finally:
        dg.set_index_checks(True)
    assert torch.equal(got, want)  # ke clamped to SK: row 3 is the full row
    with pytest.raises(TypeError):
        dg.set_index_checks(0)
