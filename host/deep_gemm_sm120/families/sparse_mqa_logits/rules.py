"""Shape and dtype rules of the sparse MQA-logits ops, on plain values: the API and is_supported call them.
Tensor-level checks (shapes, strides, index ranges) are contract.py's."""

from __future__ import annotations

from ...core.rules import require_dim, require_dtype
from ..mqa_logits.kernel import FP4_DTYPES
from .kernel import HEAD_DIMS, HEADS, SPARSE_BLOCKS


def _fmt(q_dtype: str | None) -> str | None:
    if q_dtype is None:
        return None
    if q_dtype == "float8_e4m3fn":
        return "mxfp8"
    if q_dtype in FP4_DTYPES:
        return "mxfp4"
    raise TypeError(f"q must be float8_e4m3fn (MXFP8) or packed e2m1 ({' / '.join(FP4_DTYPES)}, MXFP4), got {q_dtype}")


def geometry_rule(fmt: str | None, heads: int | None, head_dim: int | None, sparse_block_kv: int | None) -> None:
    """The supported geometry: NotImplementedError naming the supported set."""
    for name, v in (("heads", heads), ("head_dim", head_dim), ("sparse_block_kv", sparse_block_kv)):
        if v is not None:
            require_dim(name, v)
    if heads is not None and heads not in HEADS:
        raise NotImplementedError(f"{heads} heads are not supported; supported: {HEADS}")
    if head_dim is not None:
        dims = HEAD_DIMS[fmt or "mxfp8"] if fmt else tuple(sorted({d for v in HEAD_DIMS.values() for d in v}))
        if head_dim not in dims:
            raise NotImplementedError(
                f"head dim {head_dim} is not supported for {(fmt or 'mxfp8').upper()}; supported: {dims}"
            )
    if sparse_block_kv is not None and sparse_block_kv not in SPARSE_BLOCKS:
        raise NotImplementedError(f"sparse_block_kv {sparse_block_kv} is not supported; supported: {SPARSE_BLOCKS}")


def sparse_rule(
    rows: int | None = None,
    heads: int | None = None,
    head_dim: int | None = None,
    q_dtype: str | None = None,
    kv_dtype: str | None = None,
    q_sf_dtype: str | None = None,
    kv_sf_dtype: str | None = None,
    weights_dtype: str | None = None,
    num_max_sparse_blocks: int | None = None,
    sparse_block_kv: int | None = None,
    kv_cache_dtype: str | None = None,
    page_kv: int | None = None,
) -> None:
    """q (values, int32 packed UE8M0 [S, H]) MXFP8 e4m3 [S, H, D] or MXFP4 packed [S, H, D/2]; kv the same format
    (contiguous) or a uint8 cache (paged); bf16 weights [S, H]; head_dim is D (unpacked)."""
    fmt = _fmt(q_dtype)
    if kv_dtype is not None and fmt is not None and _fmt(kv_dtype) != fmt:
        raise TypeError(f"kv must be {fmt.upper()} like q, got {kv_dtype}")
    for name, dt in (("q scales", q_sf_dtype), ("kv scales", kv_sf_dtype)):
        require_dtype(name, dt, ("int32",))
    require_dtype("weights", weights_dtype, ("bfloat16",))
    require_dtype("kv_cache", kv_cache_dtype, ("uint8",))
    geometry_rule(fmt, heads, head_dim, sparse_block_kv)
    if rows is not None:
        require_dim("rows", rows)
    if num_max_sparse_blocks is not None:
        require_dim("num_max_sparse_blocks", num_max_sparse_blocks)
        if num_max_sparse_blocks < 1:
            raise ValueError(f"num_max_sparse_blocks must be >= 1, got {num_max_sparse_blocks}")
    if page_kv is not None:
        require_dim("page_kv", page_kv)
        if sparse_block_kv is not None and (page_kv < 1 or page_kv % sparse_block_kv):
            raise ValueError(
                f"page_kv = {page_kv} must be a positive multiple of sparse_block_kv = "
                f"{sparse_block_kv} (a block never straddles pages)"
            )
