"""The shape and dtype rule of tf32_hc_prenorm_gemm, on plain values: the API and is_supported call it."""

from __future__ import annotations

from ...core.rules import require_dim, require_dtype, require_tma_rows
from .kernel import MAX_N


def hc_prenorm_rule(
    m: int | None = None,
    n: int | None = None,
    k: int | None = None,
    a_dtype: str | None = None,
    b_dtype: str | None = None,
    d_dtype: str | None = None,
    sqr_sum_dtype: str | None = None,
    num_splits=None,
    lda: int | None = None,
    ldb: int | None = None,
) -> None:
    """a [M, K] bf16, b [N, K] fp32, d and sqr_sum fp32; lda / ldb: row strides in elements (None: contiguous)."""
    require_dtype("a", a_dtype, ("bfloat16",))
    require_dtype("b", b_dtype, ("float32",))
    require_dtype("d", d_dtype, ("float32",))
    require_dtype("sqr_sum", sqr_sum_dtype, ("float32",))
    for name, v in (("m", m), ("n", n), ("k", k)):
        if v is not None:
            require_dim(name, v)
    if num_splits is not None:
        if not isinstance(num_splits, int) or isinstance(num_splits, bool):
            raise TypeError(f"num_splits must be None or an int, got {type(num_splits).__name__}")
        if num_splits < 1:
            raise ValueError(f"num_splits must be >= 1, got {num_splits}")
        if num_splits > 65535:
            raise ValueError(f"num_splits must be <= 65535 (one grid row per split), got {num_splits}")
    if n is not None and not 1 <= n <= MAX_N:
        raise ValueError(f"N must be in [1, {MAX_N}] (hyper-connection streams; DeepGEMM allows at most 32), got {n}")
    if k is not None and k == 0:
        raise ValueError("K must be positive")
    if k is not None and m != 0:
        require_tma_rows("a", k, 2, lda, m)
        require_tma_rows("b", k, 4, ldb, n)
