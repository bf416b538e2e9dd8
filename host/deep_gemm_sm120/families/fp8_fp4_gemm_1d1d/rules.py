"""Shape and dtype rules of the block-scaled ops, on plain values: the API and is_supported call the same
functions, so both raise (or answer) alike."""

from __future__ import annotations

from ...core.limits import MK_ALIGNMENT_FOR_CONTIGUOUS_LAYOUT
from ...core.rules import require_contiguous_m, require_dim, require_dtype, require_tma_rows, show

FP8 = "float8_e4m3fn"
FP4 = ("uint8", "int8", "float4_e2m1fn_x2")  # packed e2m1, two per byte (even K in the low nibble)
_OPERANDS = (FP8, *FP4)


def operand_kind(a_dtype: str | None, b_dtype: str | None) -> tuple[bool | None, bool | None]:
    """(a is packed FP4, b is packed FP4), None where unspecified; TypeError outside FP8 / FP4."""
    for what, dt in (("a", a_dtype), ("b", b_dtype)):
        if dt is not None and dt not in _OPERANDS:
            raise TypeError(
                f"a and b must be float8_e4m3fn or packed FP4 (uint8 / int8 / float4_e2m1fn_x2), "
                f"got {what} = {show(dt)}"
            )
    return (None if a_dtype is None else a_dtype in FP4), (None if b_dtype is None else b_dtype in FP4)


def _check_k(
    k: int | None,
    fp4: tuple[bool | None, bool | None],
    lda: int | None = None,
    ldb: int | None = None,
    m: int | None = None,
    n: int | None = None,
) -> None:
    """K-major byte rows: K (FP8) or K/2 (packed FP4) bytes per row, 16-byte TMA rows on both sides."""
    if k is None or k == 0:
        return
    any_fp4 = any(bool(x) for x in fp4)
    if any_fp4 and k % 32:
        raise ValueError(f"K = {k} must be a multiple of 32 with a packed FP4 operand (16-byte TMA rows)")
    for name, is4, ld, rows in (("a", fp4[0], lda, m), ("b", fp4[1], ldb, n)):
        require_tma_rows(name, k // 2 if is4 else k, 1, ld, rows)


def _dtypes(ab_dtype, a_dtype, b_dtype) -> tuple[str | None, str | None]:
    return (a_dtype if a_dtype is not None else ab_dtype), (b_dtype if b_dtype is not None else ab_dtype)


SF_DTYPES = ("float32", "float8_e8m0fnu", "float8_e4m3fn", "int32")


def _scale_rule(
    fp4: tuple[bool | None, bool | None], sf_dtype: str | None, gran_k: int | None, disable_ue8m0_cast: bool | None
) -> None:
    """What the signature says about the scales (is_supported's sf_dtype / gran_k / disable_ue8m0_cast; the API
    reads the same from the tensors). gran_k: K elements per scale (of the e4m3 side for mixed operands). e4m3
    operands with float32 scales per 128 K and disable_ue8m0_cast=True take the exact FP32-scale kernel
    (docs/fp32_scales.md). Values are not a signature's: whether float32 scales are powers of two is per call."""
    if disable_ue8m0_cast is not None and not isinstance(disable_ue8m0_cast, bool):
        raise TypeError(f"disable_ue8m0_cast must be a bool, got {type(disable_ue8m0_cast).__name__}")
    if sf_dtype is not None and sf_dtype not in SF_DTYPES:
        raise TypeError(
            f"scale factors must be float32, float8_e8m0fnu, float8_e4m3fn (NVFP4) or packed int32, got {show(sf_dtype)}"
        )
    if gran_k is not None and (not isinstance(gran_k, int) or isinstance(gran_k, bool) or gran_k <= 0):
        raise ValueError(f"gran_k must be a positive number of K elements, got {gran_k!r}")
    if None in fp4:
        return
    if not any(fp4) or fp4[0] != fp4[1]:  # an e4m3 side: UE8M0 scales per 128 or 32 K
        if sf_dtype == "float8_e4m3fn":
            raise TypeError("float8_e4m3fn operands take UE8M0 scales; float8_e4m3fn (UE4M3) scales are NVFP4's")
        allowed: tuple[int, ...] = (128, 32)
    else:  # both packed e2m1: MXFP4 (UE8M0 per 32 K) or NVFP4 (UE4M3 per 16 K)
        allowed = (
            (16,) if sf_dtype == "float8_e4m3fn" else (32,) if sf_dtype in ("float32", "float8_e8m0fnu") else (32, 16)
        )
    if gran_k is not None and gran_k not in allowed:
        raise NotImplementedError(
            f"these operands' scales cover {' or '.join(map(str, allowed))} K elements each, got gran_k = {gran_k}"
        )


def dense_rule(
    m: int | None = None,
    n: int | None = None,
    k: int | None = None,
    ab_dtype: str | None = None,
    a_dtype: str | None = None,
    b_dtype: str | None = None,
    out_dtype: str | None = None,
    c_dtype: str | None = None,
    lda: int | None = None,
    ldb: int | None = None,
    sf_dtype: str | None = None,
    gran_k: int | None = None,
    disable_ue8m0_cast: bool | None = None,
) -> None:
    """k counts elements (packed FP4: two per byte); lda / ldb: row strides in bytes as stored; sf_dtype /
    gran_k / disable_ue8m0_cast: the scales' (see _scale_rule)."""
    fp4 = operand_kind(*_dtypes(ab_dtype, a_dtype, b_dtype))
    _scale_rule(fp4, sf_dtype, gran_k, disable_ue8m0_cast)
    require_dtype("d", out_dtype, ("bfloat16", "float32"))
    if c_dtype is not None and out_dtype is not None and c_dtype != out_dtype:
        raise TypeError(f"c must have d's dtype {show(out_dtype)}, got {show(c_dtype)}")
    for name, v in (("m", m), ("n", n), ("k", k)):
        if v is not None:
            require_dim(name, v)
    if m == 0 or n == 0:
        return
    _check_k(k, fp4, lda, ldb, m, n)


def _grouped(k, fp4, *others) -> None:
    if k is None or any(x == 0 for x in others):
        return
    if k == 0:
        raise ValueError(f"K = {k} must be positive{' and a multiple of 32 for FP4' if any(fp4) else ''}")
    _check_k(k, fp4)


def m_grouped_contiguous_rule(
    m: int | None = None,
    n: int | None = None,
    k: int | None = None,
    num_groups: int | None = None,
    ab_dtype: str | None = None,
    a_dtype: str | None = None,
    b_dtype: str | None = None,
    out_dtype: str | None = None,
    use_psum_layout: bool = False,
    sf_dtype: str | None = None,
    gran_k: int | None = None,
    disable_ue8m0_cast: bool | None = None,
) -> None:
    fp4 = operand_kind(*_dtypes(ab_dtype, a_dtype, b_dtype))
    _scale_rule(fp4, sf_dtype, gran_k, disable_ue8m0_cast)
    require_dtype("d", out_dtype, ("bfloat16",))
    for name, v in (("m", m), ("n", n), ("k", k), ("num_groups", num_groups)):
        if v is not None:
            require_dim(name, v)
    if m is not None and not use_psum_layout:
        require_contiguous_m(m, MK_ALIGNMENT_FOR_CONTIGUOUS_LAYOUT)
    _grouped(k, fp4, m, n, num_groups)


def m_grouped_masked_rule(
    num_groups: int | None = None,
    m: int | None = None,
    n: int | None = None,
    k: int | None = None,
    expected_m: int | None = None,
    ab_dtype: str | None = None,
    a_dtype: str | None = None,
    b_dtype: str | None = None,
    out_dtype: str | None = None,
    sf_dtype: str | None = None,
    gran_k: int | None = None,
    disable_ue8m0_cast: bool | None = None,
) -> None:
    fp4 = operand_kind(*_dtypes(ab_dtype, a_dtype, b_dtype))
    _scale_rule(fp4, sf_dtype, gran_k, disable_ue8m0_cast)
    require_dtype("d", out_dtype, ("bfloat16",))
    for name, v in (("num_groups", num_groups), ("m", m), ("n", n), ("k", k)):
        if v is not None:
            require_dim(name, v)
    if expected_m is not None and (not isinstance(expected_m, int) or isinstance(expected_m, bool) or expected_m < 0):
        raise TypeError(f"expected_m must be a non-negative int, got {expected_m!r}")
    _grouped(k, fp4, num_groups, m, n)


FP8_EINSUM_EXPRS = ("bhr,hdr->bhd",)
FP8_EINSUM_RECIPE = (1, 128, 128)


def fp8_einsum_rule(
    expr: str | None = None,
    b: int | None = None,
    h: int | None = None,
    r: int | None = None,
    d: int | None = None,
    a_dtype: str | None = None,
    b_dtype: str | None = None,
    out_dtype: str | None = None,
    c_dtype: str | None = None,
    recipe=None,
) -> None:
    """fp8_einsum: `bhr,hdr->bhd` with e4m3 x [b,h,r] (1x128 scales) and y [h,d,r] (128x128 scales)."""
    if expr is not None and expr not in FP8_EINSUM_EXPRS:
        raise NotImplementedError(
            f"fp8_einsum expression {expr!r} is not supported; supported: "
            f"{list(FP8_EINSUM_EXPRS)} (DeepGEMM runs its other two on SM100 only)"
        )
    if recipe is not None and tuple(recipe) != FP8_EINSUM_RECIPE:
        raise NotImplementedError(f"fp8_einsum recipe {tuple(recipe)} is not supported; supported: {FP8_EINSUM_RECIPE}")
    require_dtype("a", a_dtype, ("float8_e4m3fn",))
    require_dtype("b", b_dtype, ("float8_e4m3fn",))
    require_dtype("d", out_dtype, ("bfloat16", "float32"))
    if c_dtype is not None and out_dtype is not None and c_dtype != out_dtype:
        raise TypeError(f"c must have d's dtype {show(out_dtype)}, got {show(c_dtype)}")
    for name, v in (("b", b), ("h", h), ("r", r), ("d", d)):
        if v is not None:
            require_dim(name, v)
    if r:
        require_tma_rows("a and b", r, 1)
