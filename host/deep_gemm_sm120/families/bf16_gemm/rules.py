"""Shape and dtype rules of the BF16 ops, on plain values: the API and is_supported call the same functions, so
both raise (or answer) alike."""

from __future__ import annotations

from ...core.limits import MK_ALIGNMENT_FOR_CONTIGUOUS_LAYOUT
from ...core.rules import require_contiguous_m, require_dim, require_dtype, require_tma_rows, show

# einsum expressions and the kernel form each runs on
EINSUM_EXPRS = {"bmk,bnk->mn": "batch_reduce", "bhr,hdr->bhd": "batched", "bhd,hdr->bhr": "batched"}

BF16 = ("bfloat16",)
_OUT_NAMES = ("bfloat16", "float32")


def _common(dtypes: tuple, out_dtype, c_dtype, out_allowed=_OUT_NAMES, **dims) -> None:
    """dtypes: (ab_dtype, a_dtype, b_dtype); a_dtype / b_dtype override ab_dtype for one operand."""
    ab, a, b = dtypes
    require_dtype("a", a if a is not None else ab, BF16)
    require_dtype("b", b if b is not None else ab, BF16)
    require_dtype("d", out_dtype, out_allowed)
    if c_dtype is not None and out_dtype is not None and c_dtype != out_dtype:
        raise TypeError(f"c must have d's dtype {show(out_dtype)}, got {show(c_dtype)}")
    for name, v in dims.items():
        if v is not None:
            require_dim(name, v)


def dense_rule(layout: str):
    a_mn, b_mn = layout[0] == "t", layout[1] == "n"

    def rule(
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
    ) -> None:
        """lda / ldb: row strides (elements) of a and b as stored; None for contiguous."""
        _common((ab_dtype, a_dtype, b_dtype), out_dtype, c_dtype, m=m, n=n, k=k)
        if k == 0 or m == 0 or n == 0:
            return  # nothing is read through TMA
        (a_inner, a_rows), (b_inner, b_rows) = ((m, k) if a_mn else (k, m)), ((n, k) if b_mn else (k, n))
        if a_inner is not None:
            require_tma_rows("a", a_inner, 2, lda, a_rows)
        if b_inner is not None:
            require_tma_rows("b", b_inner, 2, ldb, b_rows)

    return rule


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
) -> None:
    _common((ab_dtype, a_dtype, b_dtype), out_dtype, None, ("bfloat16",), m=m, n=n, k=k, num_groups=num_groups)
    if m is not None and not use_psum_layout:
        require_contiguous_m(m, MK_ALIGNMENT_FOR_CONTIGUOUS_LAYOUT)
    _grouped_k(k, m, n, num_groups)


def _grouped_k(k, *others) -> None:
    if k is None or any(x == 0 for x in others):
        return
    if k == 0:
        raise ValueError("K must be positive for grouped GEMMs")
    require_tma_rows("a and b", k, 2)


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
) -> None:
    _common((ab_dtype, a_dtype, b_dtype), out_dtype, None, ("bfloat16",), num_groups=num_groups, m=m, n=n, k=k)
    if expected_m is not None and (not isinstance(expected_m, int) or isinstance(expected_m, bool) or expected_m < 0):
        raise TypeError(f"expected_m must be a non-negative int, got {expected_m!r}")
    _grouped_k(k, num_groups, m, n)


def k_grouped_rule(
    m: int | None = None,
    n: int | None = None,
    k: int | None = None,
    num_groups: int | None = None,
    ab_dtype: str | None = None,
    a_dtype: str | None = None,
    b_dtype: str | None = None,
    out_dtype: str | None = None,
    c_dtype: str | None = None,
) -> None:
    """k: the total K over all groups (sum of ks)."""
    _common((ab_dtype, a_dtype, b_dtype), out_dtype, c_dtype, ("float32",), m=m, n=n, k=k, num_groups=num_groups)
    if k == 0 or num_groups == 0 or m == 0 or n == 0:
        return
    if m is not None:
        require_tma_rows("a", m, 2, None, k)  # a [sum K, M]: MN-major rows of M
    if n is not None:
        require_tma_rows("b", n, 2, None, k)


def einsum_rule(
    expr: str | None = None,
    b: int | None = None,
    m: int | None = None,
    n: int | None = None,
    k: int | None = None,
    h: int | None = None,
    r: int | None = None,
    d: int | None = None,
    a_dtype: str | None = None,
    b_dtype: str | None = None,
    out_dtype: str | None = None,
    c_dtype: str | None = None,
    c_is_d: bool | None = None,
) -> None:
    """DeepGEMM's einsum: `bmk,bnk->mn` (b, m, n, k), `bhr,hdr->bhd` and `bhd,hdr->bhr` (b, h, r, d); runtime
    shapes. Operand strides: every stride but the last a multiple of 16 bytes (the API checks them)."""
    if expr is not None and expr not in EINSUM_EXPRS:
        raise NotImplementedError(f"einsum expression {expr!r} is not supported; supported: {sorted(EINSUM_EXPRS)}")
    require_dtype("a", a_dtype, BF16)
    require_dtype("b", b_dtype, BF16)
    if expr == "bmk,bnk->mn" or expr is None:
        require_dtype("d", out_dtype, _OUT_NAMES)
    else:
        require_dtype("d", out_dtype, BF16)
    for name, v in (("b", b), ("m", m), ("n", n), ("k", k), ("h", h), ("r", r), ("d", d)):
        if v is not None:
            require_dim(name, v)
    if c_dtype is not None:
        if expr is not None and expr != "bmk,bnk->mn":
            raise ValueError(f"einsum {expr!r} takes no c (DeepGEMM's contract)")
        if out_dtype is not None and out_dtype != "float32":
            raise ValueError("c is only taken with an fp32 d (d += a.b); a bf16 d is written fresh")
        if c_dtype != "float32":
            raise TypeError(f"c must be torch.float32 like d, got {show(c_dtype)}")
    if expr == "bmk,bnk->mn" and k:
        require_tma_rows("a and b", k, 2)
    elif expr == "bhr,hdr->bhd" and r:
        require_tma_rows("a and b", r, 2)
    elif expr == "bhd,hdr->bhr":
        if d:
            require_tma_rows("a", d, 2)
        if r:
            require_tma_rows("b", r, 2)
