"""Block-scaled FP8 / FP4 GEMMs (NT): d = alpha * (a * sfa) @ (b * sfb).T (+ c), fp32 accumulation.

Operands come as (tensor, scale factors) pairs, DeepGEMM style:
  FP8:    a [M, K] float8_e4m3fn, b [N, K] float8_e4m3fn; UE8M0 scales per 1x128 (DeepSeek activations) or
          1x32 (MXFP8) along K; b's scales may also be 128x128 blocks [ceil(N/128), ceil(K/128)].
  MXFP4:  a [M, K/2], b [N, K/2] packed e2m1 (uint8 / int8 / float4_e2m1fn_x2, even K in the low nibble);
          UE8M0 scales per 1x32.
  NVFP4:  as MXFP4 with float8_e4m3fn (UE4M3) scales per 1x16; the per-tensor global scales go in `alpha`.
  mixed:  one operand e4m3, the other packed e2m1 (MXFP4 scales); recipe's gran_k is the e4m3 side's.
Scale factors are float32 powers of two, float8_e8m0fnu, float8_e4m3fn (NVFP4), or int32 already in the
kernel's layout (transform_sf_into_required_layout). Unpacked scales are converted on every call (small torch
ops, and a device sync for the power-of-two check); pass packed int32 scales on hot paths and inside CUDA
graphs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ... import jit, keywords
from ...arch import target_of
from ...checks import (
    SCALE_CHECKS,
    check_given_scales,
    device_of,
    get_index_checks,
    get_scale_checks,
    maybe_check_contiguous_layout,
    output_row_stride,
    require_contiguous_layout_shape,
    require_int32,
    require_shape,
    require_tensor,
    rows_view,
    tma_operand,
    write_empty_reduction,
)
from ...core.arith import ceil_div
from ...core.rules import dtype_name
from ...core.tma import DTYPE, tma_2d_pair
from ...device import num_sms_for
from ...launch import (
    KEY_ERRORS,
    CallCache,
    fast_calls,
    kernel_memo,
    launch,
    no_fast,
    recipe_key,
    recording,
    tensor_key,
)
from ...quant import not_power_of_two
from ...scale_layout import (
    check_packed,
    check_unpacked,
    fp32_direct,
    fp32_mn_major,
    pack_sf,
    sf_format,
    sf_words,
)
from ...services.split_k_reduce.launch import SplitK
from ...utils.layout import get_mk_alignment_for_contiguous_layout
from .kernel import MIXED_KINDS, PARAMS, SCALE_KINDS, spec_for
from .plan import dense_plan, grouped_config, m_bucket
from .rules import FP4, dense_rule, m_grouped_contiguous_rule, m_grouped_masked_rule, operand_kind

_FP4_DTYPES = tuple(t for t in (torch.uint8, torch.int8, getattr(torch, "float4_e2m1fn_x2", None)) if t is not None)
_OUT = {torch.bfloat16: "bf16", torch.float32: "fp32"}
_U8 = DTYPE["uint8"]
_OFF_A, _OFF_B = PARAMS.offsets["tmap_a"], PARAMS.offsets["tmap_b"]
_pack = PARAMS.packer()


def _pair(name: str, x) -> tuple[torch.Tensor, torch.Tensor]:
    if not isinstance(x, (tuple, list)) or len(x) != 2:
        raise TypeError(f"{name} must be a (tensor, scale factors) pair, got {type(x).__name__}")
    t, sf = x
    if not (isinstance(t, torch.Tensor) and isinstance(sf, torch.Tensor)):  # the error names which one
        require_tensor(name, t)
        require_tensor(f"{name}'s scale factors", sf)
    return t, sf


def _is_fp4(t: torch.Tensor) -> bool:
    return t.dtype in _FP4_DTYPES


def _kind(a: torch.Tensor, b: torch.Tensor, sfa: torch.Tensor, sfb: torch.Tensor, recipe, exact: bool = False) -> str:
    """mxfp8 / mxfp4 / nvfp4 / e4m3_e2m1 / e2m1_e4m3 from operand and scale dtypes (and the recipe for packed
    FP4 scales); fp8_fp32 (FP32 scales applied exactly) for e4m3 operands whose scales are both float32 when
    `exact` (disable_ue8m0_cast=True, or FP32 scales found not to be powers of two)."""
    operand_kind(dtype_name(a.dtype), dtype_name(b.dtype))  # the family rule: TypeError outside FP8 / FP4
    _check_recipe(recipe)
    fp8 = torch.float8_e4m3fn
    for side, t, sf in (("a", a, sfa), ("b", b, sfb)):
        if t.dtype == fp8 and sf.dtype == fp8:  # UE4M3 bytes would be read as UE8M0 exponents
            raise TypeError(
                f"{side} is float8_e4m3fn, whose scales are UE8M0 (float32, float8_e8m0fnu or packed int32); "
                f"float8_e4m3fn (UE4M3) scales belong to NVFP4 operands"
            )
    if a.dtype == fp8 and b.dtype == fp8:
        return "fp8_fp32" if exact and _exact_shape(a, sfa, sfb, recipe) else "mxfp8"
    if a.dtype == fp8 and _is_fp4(b) or _is_fp4(a) and b.dtype == fp8:
        fp4_sf = sfb if a.dtype == fp8 else sfa
        if sf_format(fp4_sf) == "ue4m3":
            raise NotImplementedError(
                "mixed FP8 x FP4 GEMMs take MXFP4 (UE8M0 1x32) scales on the FP4 side, not NVFP4 (UE4M3)"
            )
        return "e4m3_e2m1" if a.dtype == fp8 else "e2m1_e4m3"
    if _is_fp4(a) and _is_fp4(b):
        fmts = {sf_format(sfa), sf_format(sfb)}
        if fmts == {"packed"}:
            if recipe is None:
                raise ValueError(
                    "FP4 operands with packed int32 scales need recipe=(1, 1, 32) (MXFP4) or (1, 1, 16) (NVFP4)"
                )
            return "nvfp4" if recipe[2] == 16 else "mxfp4"
        fmts.discard("packed")
        if fmts == {"ue4m3"}:
            return "nvfp4"
        if fmts == {"ue8m0"}:
            return "mxfp4"
        raise TypeError("a's and b's FP4 scales must both be UE8M0 (MXFP4) or both UE4M3 (NVFP4)")
    raise TypeError(
        f"a and b must be float8_e4m3fn or packed FP4 (uint8 / int8 / float4_e2m1fn_x2), got {a.dtype} and {b.dtype}"
    )


def _operand_gran(name: str, sf: torch.Tensor, k: int, allowed: tuple[int, ...], recipe_gran: int | None) -> int:
    """K elements per scale of one operand: the recipe's, else the only granularity its scale shape fits."""
    if recipe_gran is not None:
        if recipe_gran not in allowed:
            raise NotImplementedError(
                f"{name} scales cover {' or '.join(map(str, allowed))} K elements; the recipe asks for {recipe_gran}"
            )
        return recipe_gran
    cols = sf.shape[-1]
    count = (lambda g: sf_words(k, g)) if sf.dtype == torch.int32 else (lambda g: ceil_div(k, g))
    cands = [g for g in allowed if count(g) == cols]
    if not cands:
        raise ValueError(
            f"{name} with {cols} columns fits no granularity for K = {k} (expected "
            f"{', '.join(f'{ceil_div(k, g)} (1x{g})' for g in allowed)} unpacked columns)"
        )
    if len(cands) > 1:
        raise ValueError(f"the K granularity of {name} is ambiguous for K = {k}: pass recipe")
    return cands[0]


def _check_recipe(recipe) -> None:
    if recipe is not None and (not isinstance(recipe, (tuple, list)) or len(recipe) != 3):
        raise ValueError(f"recipe must be (gran_m, gran_n, gran_k), got {recipe!r}")


def _grans(kind: str, k: int, recipe, sfa: torch.Tensor, sfb: torch.Tensor) -> tuple[int, int]:
    """(A, B) K granularities. Non-mixed kinds need equal ones; for mixed operands the recipe's gran_k is the
    e4m3 side's and the e2m1 side is 1x32."""
    _check_recipe(recipe)
    rg = int(recipe[2]) if recipe is not None else None
    if rg is not None and rg <= 0:
        raise ValueError(f"recipe's gran_k must be a positive number of K elements, got {recipe[2]!r}")
    if kind in MIXED_KINDS:
        a_fp8 = kind == "e4m3_e2m1"
        ga = _operand_gran("sfa", sfa, k, SCALE_KINDS["mxfp8"].grans if a_fp8 else (32,), rg if a_fp8 else None)
        gb = _operand_gran("sfb", sfb, k, (32,) if a_fp8 else SCALE_KINDS["mxfp8"].grans, None if a_fp8 else rg)
        return ga, gb
    ga = _operand_gran("sfa", sfa, k, SCALE_KINDS[kind].grans, rg)
    gb = _operand_gran("sfb", sfb, k, SCALE_KINDS[kind].grans, rg)
    if ga != gb:
        raise NotImplementedError(f"a and b scales use different K granularities (1x{ga} and 1x{gb})")
    return ga, gb


def _unpacked_recipe(name: str, sf: torch.Tensor, mn: int, gran_k: int, groups: int | None, is_sfa: bool) -> tuple:
    """The recipe pack_sf reads unpacked scales of one operand with: one scale per row for A; per row or
    128x128 blocks (DeepSeek weights) for B, told by the row count."""
    lead = () if groups is None else (groups,)
    if sf.dim() != len(lead) + 2:
        raise ValueError(
            f"{name} must be {'[G, rows, K blocks]' if groups is not None else '[rows, K blocks]'}, "
            f"got shape {tuple(sf.shape)}"
        )
    gran_mn = 1 if sf.shape[-2] == mn or is_sfa else 128
    return (gran_mn, gran_mn, gran_k)


def _fp32_pair(sfa, sfb) -> bool:
    return sfa.dtype == torch.float32 and sfb.dtype == torch.float32


def _exact_shape(a, sfa, sfb, recipe) -> bool:
    """float32 scales on both sides, one per 128 K (recipe and shapes): what the exact kernel takes. FP32 scales
    per 32 K (MXFP8) stay on the UE8M0 kernel, powers of two required, with or without disable_ue8m0_cast."""
    blocks = ceil_div(a.shape[-1], 128)
    return (
        _fp32_pair(sfa, sfb)
        and (recipe is None or recipe[2] == 128)
        and sfa.dim() > 0
        and sfb.dim() > 0
        and sfa.shape[-1] == blocks
        and sfb.shape[-1] == blocks
    )


def _exact_capable(a, b, sfa, sfb, recipe) -> bool:
    """Whether a call whose FP32 scales are not powers of two can take the exact FP32-scale kernel: e4m3
    operands, float32 scales on both sides, one per 128 K (the recipe's and the scales' shape)."""
    fp8 = torch.float8_e4m3fn
    return a.dtype == fp8 and b.dtype == fp8 and _exact_shape(a, sfa, sfb, recipe)


def _inexact(e: ValueError) -> ValueError:
    """The ValueError for FP32 scales UE8M0 cannot hold on a call the exact kernel cannot take."""
    return ValueError(
        f"{e}; or take the exact FP32-scale kernel: e4m3 a and b with float32 scales on both sides (one per 128 K)"
    )


def _packed_fmt(kind: str) -> str:
    """The byte encoding of a kind's packed int32 scales ('' for the exact kernel's float32 scales)."""
    return "" if kind == "fp8_fp32" else ("ue4m3" if kind == "nvfp4" else "ue8m0")


def _check_given_packed(kind: str, named: tuple) -> None:
    """DG_SM120_CHECK_SCALES: the special encodings in the packed scales a call took from the caller as they are
    (named: (name, tensor, taken as given)); unpacked ones were checked when they were packed."""
    fmt = _packed_fmt(kind)
    if fmt:
        check_given_scales(fmt, *((name, sf) for name, sf, given in named if given))


def _retry_exact(e: ValueError, exact: bool, a, b, sfa, sfb, recipe) -> None:
    """After a ValueError from packing a call's scales: returns when they are FP32 scales UE8M0 cannot hold and
    the exact kernel can take the call (the caller retries with disable_ue8m0_cast=True); raises otherwise."""
    if not not_power_of_two(e):
        raise e
    if exact or not _exact_capable(a, b, sfa, sfb, recipe):
        raise _inexact(e) from None


def _check_sf(
    name: str, sf: torch.Tensor, mn: int, k: int, gran_k: int, groups: int | None, is_sfa: bool, exact: bool = False
):
    """_prepare_sf's checks that the signature decides. Returns (word stride, group stride) for packed int32
    scales (used as given), None for unpacked ones (packed, and their values checked, on every call). Exact
    FP32 scales (`exact`): (float block stride, group stride) when already in the kernel's layout, else None
    (converted on every call, no value read)."""
    lead = () if groups is None else (groups,)
    if exact:
        check_unpacked(sf, mn, k, _unpacked_recipe(name, sf, mn, gran_k, groups, is_sfa), groups, is_sfa)
        return fp32_direct(sf, (*lead, mn, ceil_div(k, gran_k)))
    if sf.dtype == torch.int32:
        return check_packed(name, sf, (*lead, mn, sf_words(k, gran_k)))
    check_unpacked(sf, mn, k, _unpacked_recipe(name, sf, mn, gran_k, groups, is_sfa), groups, is_sfa)
    return None


def _prepare_sf(
    name: str, sf: torch.Tensor, mn: int, k: int, gran_k: int, groups: int | None, is_sfa: bool, exact: bool = False
) -> tuple[torch.Tensor, int, int]:
    """(packed int32 scales, word stride, group stride) for one operand; exact FP32 scales: (float32 scales in
    the kernel's layout, block stride, group stride)."""
    lead = () if groups is None else (groups,)
    if exact:
        direct = _check_sf(name, sf, mn, k, gran_k, groups, is_sfa, True)
        if direct is not None:
            return sf, *direct
        gran_mn = _unpacked_recipe(name, sf, mn, gran_k, groups, is_sfa)[0]
        conv = fp32_mn_major(sf, mn, gran_mn)
        direct = fp32_direct(conv, (*lead, mn, ceil_div(k, gran_k)))
        if direct is None:  # fp32_mn_major's layout, refused only when its strides pass 32 bits
            raise ValueError(f"{name}: {tuple(conv.shape)} float32 scales need strides past 32 bits")
        return conv, *direct
    if sf.dtype == torch.int32:
        ps, gs = check_packed(name, sf, (*lead, mn, sf_words(k, gran_k)))
        return sf, ps, gs
    packed = pack_sf(sf, mn, k, _unpacked_recipe(name, sf, mn, gran_k, groups, is_sfa), groups, is_sfa)
    ps, gs = check_packed(name, packed, (*lead, mn, sf_words(k, gran_k)))
    return packed, ps, gs


def _operands(a_pair, b_pair, recipe):
    a, sfa = _pair("a", a_pair)
    b, sfb = _pair("b", b_pair)
    sf_format(sfa), sf_format(sfb)  # TypeError for scale dtypes outside the contract, before any device work
    kind = _kind(a, b, sfa, sfb, recipe)
    return a, sfa, b, sfb, kind


def _k_of(t: torch.Tensor) -> int:
    """K elements of an operand: bytes per row, twice that for packed FP4."""
    return t.shape[-1] * (2 if _is_fp4(t) else 1)


def _alpha(alpha) -> float:
    if isinstance(alpha, torch.Tensor):
        raise TypeError("alpha must be a Python float (a tensor would need a device sync)")
    try:
        return float(alpha)
    except (TypeError, ValueError):
        raise TypeError(f"alpha must be a float, got {alpha!r}") from None


def _check_out(d, c, shape: tuple[int, ...]) -> None:
    """d (and c) tensors of `shape`; their dtypes are the family rule's."""
    require_tensor("d", d)
    require_shape("d", d, shape, "[G, M, N]" if len(shape) == 3 else "[M, N]")
    if c is not None:
        require_tensor("c", c)


def _operand_maps(
    pa: int, ka: int, rows_a: int, lda: int, pb: int, kb: int, rows_b: int, ldb: int, cfg, row_bytes
) -> bytes:
    """Byte operands (e4m3 or packed e2m1) at addresses pa / pb as [rows, K bytes ka / kb] with row strides
    lda / ldb bytes, boxes of one swizzle span along K (128 bytes, or 64 for the packed side of mixed operands);
    scale words are read by the kernel through plain pointers."""
    ra, rb = row_bytes
    return tma_2d_pair(
        _OFF_A, _U8, pa, ka, rows_a, lda, ra, cfg.block_m, ra,
        _OFF_B, _U8, pb, kb, rows_b, ldb, rb, cfg.block_n, rb,
    )  # fmt: skip


@dataclass(frozen=True)
class _Dense:
    """What the checks and the plan of one dense call signature produced (scales: packed int32 ones are used
    as they are; others are packed on every call, a value-dependent conversion)."""

    target: str
    index: int
    m: int
    n: int
    k: int
    grans: tuple | None
    lda: int
    ldb: int
    ldd: int
    ldc: int
    sfa_stride: int  # packed scales: their word stride; -1: pack on every call
    sfb_stride: int
    kernel: object = None  # None: nothing to launch (an empty output or an empty reduction)
    grid: int = 0
    config: object = None
    splits: int = 1
    reduce: SplitK | None = None
    row_bytes: tuple = (0, 0)
    ka: int = 0  # K bytes per row of each operand
    kb: int = 0
    exact: bool = False  # the fp8_fp32 kernel: scales are float32 in its layout (converted per call if not)
    kind: str = ""


_DENSE = CallCache()


def _prepare_dense(a, sfa, b, sfb, d, c, recipe, exact: bool = False) -> _Dense:
    """Every check of a dense call (each raises the typed error naming what was expected), then its plan."""
    sf_format(sfa), sf_format(sfb)  # TypeError for scale dtypes outside the contract, before any device work
    kind = _kind(a, b, sfa, sfb, recipe, exact)
    if a.dim() != 2 or b.dim() != 2:
        raise ValueError(f"a must be [M, K] and b [N, K], got {tuple(a.shape)} and {tuple(b.shape)}")
    m, n = a.shape[0], b.shape[0]
    k = _k_of(a)
    if _k_of(b) != k:
        raise ValueError(f"a {tuple(a.shape)} and b {tuple(b.shape)} must agree on K")
    _check_out(d, c, (m, n))
    (lda, lda_bytes), (ldb, ldb_bytes) = tma_operand("a", a), tma_operand("b", b)
    dense_rule(
        m=m,
        n=n,
        k=k,
        a_dtype=dtype_name(a.dtype),
        b_dtype=dtype_name(b.dtype),
        out_dtype=dtype_name(d.dtype),
        c_dtype=dtype_name(c.dtype) if c is not None else None,
        lda=lda,
        ldb=ldb,
    )
    if c is not None:
        require_shape("c", c, (m, n), "[M, N]")
    ldd = output_row_stride("d", d)
    ldc = output_row_stride("c", c) if c is not None else 0
    grans = _grans(kind, k, recipe, sfa, sfb) if m and n and k else None  # scale shapes only: no device work
    index = device_of(a=a, b=b, sfa=sfa, sfb=sfb, d=d, **({"c": c} if c is not None else {}))
    target = target_of(index)
    if m == 0 or n == 0 or k == 0:
        return _Dense(target, index, m, n, k, grans, lda_bytes, ldb_bytes, ldd, ldc, -1, -1)
    strides = []
    for name, sf, mn, g, is_sfa in (("sfa", sfa, m, grans[0], True), ("sfb", sfb, n, grans[1], False)):
        packed = _check_sf(name, sf, mn, k, g, None, is_sfa, kind == "fp8_fp32")
        strides.append(-1 if packed is None else packed[0])
    num_sms = num_sms_for(index)
    p = dense_plan(m_bucket(m), n, k, num_sms, kind)
    out = _OUT[d.dtype]
    spec = spec_for(p.config, kind, grans, "fp32" if p.splits > 1 else out, c is not None and p.splits == 1)
    reduce = SplitK(out, c is not None, target, index, num_sms) if p.splits > 1 else None
    return _Dense(
        target,
        index,
        m,
        n,
        k,
        grans,
        lda_bytes,
        ldb_bytes,
        ldd,
        ldc,
        strides[0],
        strides[1],
        jit.get_kernel(spec, target, index),
        p.grid(num_sms),
        p.config,
        p.splits,
        reduce,
        spec.row_bytes,
        a.shape[1] * a.element_size(),
        b.shape[1] * b.element_size(),
        kind == "fp8_fp32",
        kind,
    )


def _scales(
    name: str, sf: torch.Tensor, stride: int, mn: int, k: int, gran: int, is_sfa: bool, exact: bool = False
) -> tuple:
    """(tensor, word stride) of an operand's packed scales: as given when packed, else packed now. The caller
    holds the tensor until the launch is enqueued: a packed copy freed before that could be handed to the next
    allocation (the other operand's scales) and overwritten ahead of the GEMM in stream order."""
    if stride >= 0:
        return sf, stride
    packed, ps, _ = _prepare_sf(name, sf, mn, k, gran, None, is_sfa, exact)
    return packed, ps


def fp8_fp4_gemm_nt(
    a,
    b,
    d: torch.Tensor,
    c: torch.Tensor | None = None,
    recipe=None,
    recipe_a=None,
    recipe_b=None,
    compiled_dims: str = "nk",
    disable_ue8m0_cast: bool = False,
    alpha=None,
    epilogue=None,
) -> None:
    """d = alpha * (a[0] * a[1]) @ (b[0] * b[1]).T (+ c) for a = (a, sfa) [M, K], b = (b, sfb) [N, K] (FP4: K/2
    bytes); a bare tensor means unit scales. d/c: [M, N] bf16 or fp32 (c optional, may alias d). recipe:
    DeepGEMM's (gran_m, gran_n, gran_k), or per operand recipe_a / recipe_b (gran_mn, gran_k). DeepGEMM's
    signature: `compiled_dims` accepted (no effect), `disable_ue8m0_cast` (FP32 scales are never rounded:
    keywords.ue8m0_cast), `epilogue` None / Identity() / Alpha(x) (= alpha=x). A call is checked once per signature
    (launch.tensor_key); later calls with that signature only pack what must be packed and launch."""
    sig = (
        _FAST_DENSE(a, b, d, c, recipe, compiled_dims, disable_ue8m0_cast, alpha)
        if epilogue is None
        and recipe_a is None
        and recipe_b is None
        and (SCALE_CHECKS.value is False or not get_scale_checks())
        else None
    )
    if sig is True:  # served in C (launch.fast_calls)
        return
    fast_args = (a, b, d, c, recipe, compiled_dims, disable_ue8m0_cast, alpha)
    name = "fp8_fp4_gemm_nt"
    alpha = keywords.gemm(name, compiled_dims, epilogue, alpha, True, disable_ue8m0_cast)
    alpha = 1.0 if alpha is None else _alpha(alpha)
    exact = disable_ue8m0_cast is True
    paired = type(a) is tuple and type(b) is tuple and len(a) == 2 and len(b) == 2
    if paired and recipe_a is None and recipe_b is None:  # the common spelling: what pair/recipe would return
        (a, sfa), (b, sfb) = a, b  # each part's class is in the key; _pair checks them on a miss
    else:
        a, sfa = _pair("a", keywords.pair("a", a, FP4))
        b, sfb = _pair("b", keywords.pair("b", b, FP4))
        recipe = keywords.recipe(name, recipe, recipe_a, recipe_b, a, b, FP4)
    try:
        key = sig or (
            tensor_key(a),
            tensor_key(sfa),
            tensor_key(b),
            tensor_key(sfb),
            tensor_key(d),
            None if c is None else tensor_key(c),
            recipe_key(recipe),
            exact,
        )
        call = _DENSE.get(key)
    except KEY_ERRORS:  # not tensors, storage-less ones, or a recipe no key holds: checked every time
        key, call = None, None
    store = None  # a new signature's entry, stored once the call succeeded (a failing call leaves none)
    if call is None or target_of(call.index) != call.target:
        a, sfa = _pair("a", (a, sfa))
        b, sfb = _pair("b", (b, sfb))
        call = _prepare_dense(a, sfa, b, sfb, d, c, recipe, exact)
        store = key
        if sig is not None:  # a new signature: what it launches is kept for the C table
            with recording(_FAST_DENSE, fast_args):
                _run_dense(call, a, sfa, b, sfb, d, c, recipe, alpha, store)
            return
    _run_dense(call, a, sfa, b, sfb, d, c, recipe, alpha, store)


_FAST_DENSE = fast_calls("PPTTVVVV")


def _run_dense(call: _Dense, a, sfa, b, sfb, d, c, recipe, alpha: float, store) -> None:
    """The launch of a checked (or cached) dense call; stores a new signature's entry once it succeeded."""
    m, n, k, index = call.m, call.n, call.k, call.index
    if call.kernel is None:
        if m and n:  # K = 0: d = c
            write_empty_reduction(d, c)
        if store is not None:
            _DENSE.put(store, call)
        return
    try:
        sfa_p, sfa_ps = (
            (sfa, call.sfa_stride)
            if call.sfa_stride >= 0
            else _scales("sfa", sfa, -1, m, k, call.grans[0], True, call.exact)
        )
        sfb_p, sfb_ps = (
            (sfb, call.sfb_stride)
            if call.sfb_stride >= 0
            else _scales("sfb", sfb, -1, n, k, call.grans[1], False, call.exact)
        )
    except ValueError as e:  # FP32 scales UE8M0 cannot hold: the exact kernel, when the operands allow it
        _retry_exact(e, call.exact, a, b, sfa, sfb, recipe)
        no_fast()  # which kernel runs depends on the scales' values
        fp8_fp4_gemm_nt((a, sfa), (b, sfb), d, c, recipe=recipe, disable_ue8m0_cast=True, alpha=alpha)
        if store is not None:
            _DENSE.put(store, call)
        return
    sw = SCALE_CHECKS.value  # opt-in (DG_SM120_CHECK_SCALES): one attribute read on the hot path when off
    if sw or (sw is None and get_scale_checks()):
        no_fast()  # the check reads the scales' values on every call
        _check_given_packed(call.kind, (("sfa", sfa, call.sfa_stride >= 0), ("sfb", sfb, call.sfb_stride >= 0)))
    if store is not None:
        _DENSE.put(store, call)
    splits, pd = call.splits, d.data_ptr()
    pc = c.data_ptr() if c is not None else 0
    out_ptr, out_ld, c_ptr, c_ld, split_stride = pd, call.ldd, pc, call.ldc, 0
    if splits > 1:  # fp32 slices [splits, M, N]; the reduce kernel adds them in order, then C
        ws = SplitK.workspace(splits, m, n, d.device)
        out_ptr, out_ld, c_ptr, c_ld, split_stride = ws.data_ptr(), n, 0, 0, m * n
    launch(
        call.kernel,
        call.grid,
        _pack(
            sfa_p.data_ptr(),
            sfb_p.data_ptr(),
            out_ptr,
            c_ptr,
            0,
            m,
            n,
            k,
            out_ld,
            c_ld,
            1,
            0,
            splits,
            split_stride,
            sfa_ps,
            0,
            sfb_ps,
            0,
            alpha,
        ),
        _operand_maps(
            a.data_ptr(), call.ka, m, call.lda, b.data_ptr(), call.kb, n, call.ldb, call.config, call.row_bytes
        ),
        index,
    )
    if splits > 1:
        call.reduce.reduce(out_ptr, pd, pc, m, n, call.ldd, call.ldc, splits, index)


def _not_nt(name: str):
    dims = "mn" if name.endswith(("_tn", "_tt")) else "nk"  # DeepGEMM's defaults

    def refuse(
        a,
        b,
        d,
        c=None,
        recipe=None,
        recipe_a=None,
        recipe_b=None,
        compiled_dims=dims,
        disable_ue8m0_cast=False,
        alpha=None,
        epilogue=None,
    ):
        raise NotImplementedError(
            f"{name}: the SM120 block-scaled kernel reads K-major operands only; call "
            f"fp8_fp4_gemm_nt with contiguous transposes of the MN-major operand(s)"
        )

    refuse.__name__ = refuse.__qualname__ = name
    return refuse


fp8_fp4_gemm_nn, fp8_fp4_gemm_tn, fp8_fp4_gemm_tt = (_not_nt(f"fp8_fp4_gemm_{lay}") for lay in ("nn", "tn", "tt"))


@kernel_memo(maxsize=256)
def _grouped_kernel(kind: str, grans: tuple[int, int], gemm_type: str, cfg, index: int, target: str):
    spec = spec_for(cfg, kind, grans, "bf16", False, gemm_type)
    return jit.get_kernel(spec, target, index), spec.row_bytes


@dataclass(frozen=True)
class _Grouped:
    """What the checks and the plan of one M-grouped call signature produced (masked or contiguous). Scales:
    packed int32 ones are used as given with the strides checked here; others are packed on every call."""

    target: str
    index: int
    g: int
    m: int
    n: int
    k: int
    kernel: object = None  # None: nothing to launch (an empty problem)
    grid: int = 0
    kind: str = ""
    grans: tuple = (0, 0)
    rows_a: int = 0
    rows_b: int = 0
    ka: int = 0  # K bytes per row of each operand
    kb: int = 0
    lda: int = 0  # row strides in bytes
    ldb: int = 0
    ldd: int = 0
    config: object = None
    row_bytes: tuple = (0, 0)
    sfa: tuple | None = None  # packed scales: (word stride, group stride); None: pack on every call
    sfb: tuple | None = None


_M_GROUPED = CallCache()


def _grouped_plan(
    masked: bool,
    kind: str,
    grans,
    a2,
    rows_a: int,
    b2,
    rows_b: int,
    sfa,
    sfb,
    ldd: int,
    g: int,
    m: int,
    n: int,
    k: int,
    tile_m: int,
    index: int,
    target: str,
) -> _Grouped:
    """The plan of a checked M-grouped call: tile, kernel, grid, descriptor extents and packed-scale strides."""
    lead = g if masked else None
    strides = [
        _check_sf(name, sf, mn, k, gran, groups, name == "sfa", kind == "fp8_fp32")
        for name, sf, mn, gran, groups in (("sfa", sfa, m, grans[0], lead), ("sfb", sfb, n, grans[1], g))
    ]
    cfg = grouped_config(tile_m)
    tiles = (g if masked else 1) * ceil_div(m, cfg.block_m) * ceil_div(n, cfg.block_n)
    kern, row_bytes = _grouped_kernel(kind, grans, "m_masked" if masked else "m_contiguous", cfg, index, target)
    (_, lda), (_, ldb) = tma_operand("a", a2), tma_operand("b", b2)
    return _Grouped(
        target,
        index,
        g,
        m,
        n,
        k,
        kern,
        min(num_sms_for(index), max(tiles, 1)),
        kind,
        grans,
        rows_a,
        rows_b,
        a2.shape[1] * a2.element_size(),
        b2.shape[1] * b2.element_size(),
        lda,
        ldb,
        ldd,
        cfg,
        row_bytes,
        strides[0],
        strides[1],
    )


def _grouped_launch(
    call: _Grouped, masked: bool, a, sfa, b, sfb, d_ptr: int, layout_ptr: int, psum: bool, alpha: float
) -> None:
    """Launch a planned M-grouped call with this call's addresses; unpacked scales are packed here (held in
    locals until the launch is enqueued)."""
    m, n, k, g = call.m, call.n, call.k, call.g
    exact = call.kind == "fp8_fp32"
    sw = SCALE_CHECKS.value  # opt-in (DG_SM120_CHECK_SCALES)
    if sw or (sw is None and get_scale_checks()):
        no_fast()  # the check reads the scales' values on every call
        _check_given_packed(call.kind, (("sfa", sfa, call.sfa is not None), ("sfb", sfb, call.sfb is not None)))
    if call.sfa is not None:
        sfa_p, (sfa_ps, sfa_gs) = sfa, call.sfa
    else:
        sfa_p, sfa_ps, sfa_gs = _prepare_sf("sfa", sfa, m, k, call.grans[0], g if masked else None, True, exact)
    if call.sfb is not None:
        sfb_p, (sfb_ps, sfb_gs) = sfb, call.sfb
    else:
        sfb_p, sfb_ps, sfb_gs = _prepare_sf("sfb", sfb, n, k, call.grans[1], g, False, exact)
    launch(
        call.kernel,
        call.grid,
        _pack(
            sfa_p.data_ptr(),
            sfb_p.data_ptr(),
            d_ptr,
            0,
            layout_ptr,
            m,
            n,
            k,
            call.ldd,
            0,
            g,
            int(psum),
            1,
            0,
            sfa_ps,
            sfa_gs,
            sfb_ps,
            sfb_gs,
            alpha,
        ),
        _operand_maps(
            a.data_ptr(),
            call.ka,
            call.rows_a,
            call.lda,
            b.data_ptr(),
            call.kb,
            call.rows_b,
            call.ldb,
            call.config,
            call.row_bytes,
        ),
        call.index,
    )


def _prepare_contiguous(
    a, sfa, b, sfb, d, grouped_layout, recipe, use_psum_layout: bool, alpha, exact: bool = False
) -> _Grouped:
    """Every check of a contiguous call that its signature decides (each raises the typed error naming what
    was expected), in the documented order, then its plan. The layout's values are checked per call."""
    kind = _kind(a, b, sfa, sfb, recipe, exact)
    require_int32("grouped_layout", grouped_layout)
    if a.dim() != 2 or b.dim() != 3:
        raise ValueError(f"a must be [M, K] and b [G, N, K], got {tuple(a.shape)} and {tuple(b.shape)}")
    m, k = a.shape[0], _k_of(a)
    g, n = b.shape[:2]
    if _k_of(b) != k:
        raise ValueError(f"a {tuple(a.shape)} and b {tuple(b.shape)} must agree on K")
    _check_out(d, None, (m, n))
    m_grouped_contiguous_rule(
        m=m,
        n=n,
        k=k,
        num_groups=g,
        a_dtype=dtype_name(a.dtype),
        b_dtype=dtype_name(b.dtype),
        out_dtype=dtype_name(d.dtype),
        use_psum_layout=use_psum_layout,
    )
    require_contiguous_layout_shape(grouped_layout, m, g, use_psum_layout)
    if alpha is not None:  # a value, checked again per call; here so errors come in the documented order
        _alpha(alpha)
    ldd = output_row_stride("d", d)
    grans = _grans(kind, k, recipe, sfa, sfb) if m and n and g else None
    index = device_of(a=a, b=b, sfa=sfa, sfb=sfb, d=d, grouped_layout=grouped_layout)
    target = target_of(index)
    if m == 0 or n == 0 or g == 0:
        return _Grouped(target, index, g, m, n, k)
    b2 = rows_view("b", b)
    return _grouped_plan(False, kind, grans, a, m, b2, g * n, sfa, sfb, ldd, g, m, n, k, m, index, target)


def m_grouped_fp8_fp4_gemm_nt_contiguous(
    a,
    b,
    d: torch.Tensor,
    grouped_layout: torch.Tensor,
    recipe=None,
    recipe_a=None,
    recipe_b=None,
    compiled_dims: str = "nk",
    disable_ue8m0_cast: bool = False,
    use_psum_layout: bool = False,
    ensure_zero_padding: bool = True,
    expected_m_for_psum_layout=None,
    epilogue=None,
    *,
    check_layout: bool | None = None,
    alpha=None,
) -> None:
    """d[r] = alpha * a[r] @ b[g(r)].T for the rows r of group g(r) (MoE, tokens sorted by expert).

    a = (a [M, K], sfa); b = (b [G, N, K], sfb [G, ...]); d [M, N] bf16. FP4: K/2 bytes per row.
    grouped_layout: int32 [M] group id per row (-1 = padding), or with use_psum_layout int32 [G] group ends;
    every group starts at a multiple of get_mk_alignment_for_contiguous_layout() rows (checked, as for BF16).
    DeepGEMM's signature and keywords as for fp8_fp4_gemm_nt; ensure_zero_padding (psum layout) zeroes the rows
    between a group's end and the next group's aligned start. Ours, keyword only: check_layout (None: check
    unless capturing a CUDA graph) and alpha. Checked once per call signature; the layout's values (unless
    check_layout=False) and unpacked scales are checked on every call."""
    fast_args = (
        a, b, d, grouped_layout, recipe, compiled_dims, disable_ue8m0_cast, use_psum_layout, ensure_zero_padding,
        expected_m_for_psum_layout, check_layout, alpha,
    )  # fmt: skip
    # served in C only where the checked path reads no value (packed scales, layout unchecked, scale checks off)
    sig = (
        _FAST_CONTIG(*fast_args)
        if epilogue is None
        and recipe_a is None
        and recipe_b is None
        and (check_layout is False or (check_layout is None and not get_index_checks()))
        and (SCALE_CHECKS.value is False or not get_scale_checks())
        else None
    )
    if sig is True:
        return
    name = "m_grouped_fp8_fp4_gemm_nt_contiguous"
    alpha = keywords.gemm(name, compiled_dims, epilogue, alpha, True, disable_ue8m0_cast)
    exact = disable_ue8m0_cast is True
    use_psum_layout = keywords.flag(name, "use_psum_layout", use_psum_layout)
    zero = keywords.flag(name, "ensure_zero_padding", ensure_zero_padding)
    a, b = keywords.pair("a", a, FP4), keywords.pair("b", b, FP4)
    recipe = keywords.recipe(name, recipe, recipe_a, recipe_b, a[0], b[0], FP4)
    a, sfa = _pair("a", a)
    b, sfb = _pair("b", b)
    try:
        key = (
            (0, sig)
            if sig is not None
            else (
                0,
                tensor_key(a),
                tensor_key(sfa),
                tensor_key(b),
                tensor_key(sfb),
                tensor_key(d),
                tensor_key(grouped_layout),
                recipe_key(recipe),
                use_psum_layout,
                exact,
            )
        )
        call = _M_GROUPED.get(key)
    except KEY_ERRORS:  # not tensors, storage-less ones, or a recipe no key holds: checked every time
        key, call = None, None
    store = None  # a new signature's entry, stored once the call succeeded (a failing call leaves none)
    if call is None or target_of(call.index) != call.target:
        sf_format(sfa), sf_format(sfb)  # TypeError for scale dtypes outside the contract, before any device work
        call = _prepare_contiguous(a, sfa, b, sfb, d, grouped_layout, recipe, use_psum_layout, alpha, exact)
        store = key
    alpha = 1.0 if alpha is None else _alpha(alpha)
    maybe_check_contiguous_layout(check_layout, grouped_layout, call.m, call.g, use_psum_layout)
    if call.kernel is None:
        if store is not None:
            _M_GROUPED.put(store, call)
        return
    if store is not None and sig is not None:  # a new signature: what it launches is kept for the C table
        with recording(_FAST_CONTIG, fast_args):
            _contiguous_launch(call, a, sfa, b, sfb, d, grouped_layout, recipe, use_psum_layout, zero, exact, alpha)
    else:
        _contiguous_launch(call, a, sfa, b, sfb, d, grouped_layout, recipe, use_psum_layout, zero, exact, alpha)
    if store is not None:
        _M_GROUPED.put(store, call)


_FAST_CONTIG = fast_calls("PPTTVVVVVVVV")


def _contiguous_launch(
    call: _Grouped, a, sfa, b, sfb, d, grouped_layout, recipe, use_psum_layout: bool, zero: bool, exact: bool, alpha
) -> None:
    try:
        _grouped_launch(call, False, a, sfa, b, sfb, d.data_ptr(), grouped_layout.data_ptr(), use_psum_layout, alpha)
    except ValueError as e:  # FP32 scales UE8M0 cannot hold: the exact kernel, when the operands allow it
        _retry_exact(e, exact, a, b, sfa, sfb, recipe)
        no_fast()  # which kernel runs depends on the scales' values
        m_grouped_fp8_fp4_gemm_nt_contiguous(
            (a, sfa),
            (b, sfb),
            d,
            grouped_layout,
            recipe=recipe,
            use_psum_layout=use_psum_layout,
            ensure_zero_padding=zero,
            disable_ue8m0_cast=True,
            check_layout=False,  # checked above (or asked not to be)
            alpha=alpha,
        )
        return
    if zero and use_psum_layout:
        no_fast()  # torch operations on the layout's values, not a recorded launch
        keywords.zero_psum_padding(d, grouped_layout, get_mk_alignment_for_contiguous_layout())


def m_grouped_fp8_fp4_gemm_nn_contiguous(
    a,
    b,
    d,
    grouped_layout,
    recipe=None,
    recipe_a=None,
    recipe_b=None,
    compiled_dims="nk",
    disable_ue8m0_cast=False,
    use_psum_layout=False,
    ensure_zero_padding=True,
    epilogue=None,
):
    raise NotImplementedError(
        "m_grouped_fp8_fp4_gemm_nn_contiguous: the SM120 block-scaled kernel takes b as "
        "[G, N, K] (K-major) only; use m_grouped_fp8_fp4_gemm_nt_contiguous"
    )


def _prepare_masked(a, sfa, b, sfb, d, masked_m, expected_m, recipe, alpha, exact: bool = False) -> _Grouped:
    """Every check of a masked call (each raises the typed error naming what was expected), in the documented
    order, then its plan."""
    kind = _kind(a, b, sfa, sfb, recipe, exact)
    require_int32("masked_m", masked_m)
    if a.dim() != 3 or b.dim() != 3:
        raise ValueError(f"a must be [G, M, K] and b [G, N, K], got {tuple(a.shape)} and {tuple(b.shape)}")
    g, m = a.shape[:2]
    n = b.shape[1]
    k = _k_of(a)
    if b.shape[0] != g or _k_of(b) != k:
        raise ValueError(f"a {tuple(a.shape)} and b {tuple(b.shape)} must agree on G and K")
    _check_out(d, None, (g, m, n))
    require_shape("masked_m", masked_m, (g,), "[G]")
    m_grouped_masked_rule(
        num_groups=g,
        m=m,
        n=n,
        k=k,
        expected_m=keywords.expected_m("m_grouped_fp8_fp4_gemm_nt_masked", expected_m),
        a_dtype=dtype_name(a.dtype),
        b_dtype=dtype_name(b.dtype),
        out_dtype=dtype_name(d.dtype),
    )
    if alpha is not None:  # a value, checked again per call; here so errors come in the documented order
        _alpha(alpha)
    grans = _grans(kind, k, recipe, sfa, sfb) if g and m and n else None
    index = device_of(a=a, b=b, sfa=sfa, sfb=sfb, d=d, masked_m=masked_m)
    target = target_of(index)
    if g == 0 or m == 0 or n == 0:
        return _Grouped(target, index, g, m, n, k)
    a2, b2, d2 = rows_view("a", a), rows_view("b", b), rows_view("d", d)
    ldd = output_row_stride("d", d2)
    return _grouped_plan(
        True, kind, grans, a2, g * m, b2, g * n, sfa, sfb, ldd, g, m, n, k, max(expected_m, 1), index, target
    )


def m_grouped_fp8_fp4_gemm_nt_masked(
    a,
    b,
    d: torch.Tensor,
    masked_m: torch.Tensor,
    expected_m: int,
    recipe=None,
    recipe_a=None,
    recipe_b=None,
    compiled_dims: str = "nk",
    disable_ue8m0_cast: bool = False,
    epilogue=None,
    *,
    alpha=None,
) -> None:
    """d[g, :masked_m[g]] = alpha * a[g, :masked_m[g]] @ b[g].T; rows past masked_m[g] stay untouched.

    a = (a [G, M, K], sfa [G, ...]); b = (b [G, N, K], sfb [G, ...]); d [G, M, N] bf16; masked_m int32 [G] on
    the device (read only by the kernel: graph-safe with packed scales). expected_m picks the tile size.
    DeepGEMM's signature and keywords as for fp8_fp4_gemm_nt; alpha (ours) keyword only. Checked once per call
    signature (expected_m with its type); unpacked scales are packed and checked on every call."""
    sig = (
        _FAST_MASKED(a, b, d, masked_m, expected_m, recipe, compiled_dims, disable_ue8m0_cast, alpha)
        if epilogue is None
        and recipe_a is None
        and recipe_b is None
        and (SCALE_CHECKS.value is False or not get_scale_checks())
        else None
    )
    if sig is True:  # served in C (launch.fast_calls)
        return
    fast_args = (a, b, d, masked_m, expected_m, recipe, compiled_dims, disable_ue8m0_cast, alpha)
    name = "m_grouped_fp8_fp4_gemm_nt_masked"
    alpha = keywords.gemm(name, compiled_dims, epilogue, alpha, True, disable_ue8m0_cast)
    exact = disable_ue8m0_cast is True
    a, b = keywords.pair("a", a, FP4), keywords.pair("b", b, FP4)
    recipe = keywords.recipe(name, recipe, recipe_a, recipe_b, a[0], b[0], FP4)
    a, sfa = _pair("a", a)
    b, sfb = _pair("b", b)
    try:
        key = sig or (
            1,
            tensor_key(a),
            tensor_key(sfa),
            tensor_key(b),
            tensor_key(sfb),
            tensor_key(d),
            tensor_key(masked_m),
            recipe_key(recipe),
            type(expected_m),
            expected_m,
            exact,
        )
        call = _M_GROUPED.get(key)
    except KEY_ERRORS:  # not tensors, storage-less ones, or a recipe / expected_m no key holds: checked every time
        key, call = None, None
    store = None  # a new signature's entry, stored once the call succeeded (a failing call leaves none)
    if call is None or target_of(call.index) != call.target:
        sf_format(sfa), sf_format(sfb)  # TypeError for scale dtypes outside the contract, before any device work
        call = _prepare_masked(a, sfa, b, sfb, d, masked_m, expected_m, recipe, alpha, exact)
        store = key
    alpha = 1.0 if alpha is None else _alpha(alpha)
    if call.kernel is None:
        if store is not None:
            _M_GROUPED.put(store, call)
        return
    if store is not None and sig is not None:  # a new signature: what it launches is kept for the C table
        with recording(_FAST_MASKED, fast_args):
            _masked_launch(call, a, sfa, b, sfb, d, masked_m, expected_m, recipe, exact, alpha)
    else:
        _masked_launch(call, a, sfa, b, sfb, d, masked_m, expected_m, recipe, exact, alpha)
    if store is not None:
        _M_GROUPED.put(store, call)


_FAST_MASKED = fast_calls("PPTTVVVVV")


def _masked_launch(call: _Grouped, a, sfa, b, sfb, d, masked_m, expected_m, recipe, exact: bool, alpha: float):
    try:
        _grouped_launch(call, True, a, sfa, b, sfb, d.data_ptr(), masked_m.data_ptr(), False, alpha)
    except ValueError as e:  # FP32 scales UE8M0 cannot hold: the exact kernel, when the operands allow it
        _retry_exact(e, exact, a, b, sfa, sfb, recipe)
        no_fast()  # which kernel runs depends on the scales' values
        m_grouped_fp8_fp4_gemm_nt_masked(
            (a, sfa), (b, sfb), d, masked_m, expected_m, recipe=recipe, disable_ue8m0_cast=True, alpha=alpha
        )


_NO_K_GROUPED = "deep_gemm_sm120 has no block-scaled K-grouped GEMM (k_grouped_bf16_gemm_tn_contiguous covers BF16)"


def k_grouped_fp8_gemm_tn_contiguous(
    a,
    b,
    d,
    ks_cpu,
    grouped_layout,
    c=None,
    recipe=(1, 1, 128),
    compiled_dims="mn",
    use_psum_layout=False,
    epilogue=None,
    *,
    use_padded_sf_layout=False,
):
    raise NotImplementedError(f"k_grouped_fp8_gemm_tn_contiguous: {_NO_K_GROUPED}")


def k_grouped_fp8_gemm_nt_contiguous(
    a,
    b,
    d,
    ks_cpu,
    grouped_layout,
    c=None,
    recipe=(1, 1, 128),
    compiled_dims="mn",
    use_psum_layout=False,
    epilogue=None,
    *,
    use_padded_sf_layout=False,
):
    raise NotImplementedError(f"k_grouped_fp8_gemm_nt_contiguous: {_NO_K_GROUPED}")


def k_grouped_fp4_gemm_nt_contiguous(
    a, b, d, ks_cpu, grouped_layout, c=None, recipe=(1, 1, 32), compiled_dims="mn", use_psum_layout=False, epilogue=None
):
    raise NotImplementedError(f"k_grouped_fp4_gemm_nt_contiguous: {_NO_K_GROUPED}")
