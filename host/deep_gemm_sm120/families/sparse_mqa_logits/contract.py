"""The argument contract of the sparse MQA-logits entry points (docs/sparse_mqa_logits.md), torch-level but
device-free: the shapes here, the dtypes and supported geometry through the family's sparse_rule (the rule
is_supported runs), with the typed errors the API raises. The API launches from the `SparseProblem` these
return."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...core.rules import dtype_name
from .kernel import SCALE_BYTES
from .rules import sparse_rule

# packed e2m1 bytes; torch's float4_e2m1fn_x2 where this torch has it
FP4_VALUE_DTYPES = (torch.int8, torch.uint8) + tuple(
    d for d in (getattr(torch, "float4_e2m1fn_x2", None),) if d is not None
)


@dataclass(frozen=True)
class SparseProblem:
    fmt: str  # "mxfp8" or "mxfp4"
    rows: int  # S query tokens
    heads: int
    head_dim: int  # D (unpacked)
    num_max_sparse_blocks: int
    sparse_block_kv: int
    paged: bool


def fmt_of(qk_dtype) -> str:
    """'mxfp8' for e4m3 values, 'mxfp4' for packed e2m1 bytes (int8 / uint8), TypeError otherwise."""
    if qk_dtype == torch.float8_e4m3fn:
        return "mxfp8"
    if qk_dtype in FP4_VALUE_DTYPES:
        return "mxfp4"
    raise TypeError(
        f"qk_dtype must be torch.float8_e4m3fn (MXFP8) or torch.int8 / torch.uint8 / "
        f"torch.float4_e2m1fn_x2 (packed MXFP4), got {qk_dtype}"
    )


def check_indices(sparse_kv_block_indices, rows: int | None = None) -> int:
    """int32 [S, num_max_sparse_blocks], num_max >= 1; returns num_max."""
    t = sparse_kv_block_indices
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"sparse_kv_block_indices must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype != torch.int32:
        raise TypeError(f"sparse_kv_block_indices must be torch.int32, got {t.dtype}")
    if t.dim() != 2 or t.shape[1] < 1 or (rows is not None and t.shape[0] != rows):
        want = f"[{rows if rows is not None else 'S'}, num_max_sparse_blocks >= 1]"
        raise ValueError(f"sparse_kv_block_indices must be {want}, got {tuple(t.shape)}")
    return t.shape[1]


def check_q(q, paged: bool) -> tuple[str, int, int, int]:
    """(values, scales) pair: MXFP8 [S, H, D] e4m3 or MXFP4 [S, H, D/2] bytes (paged: [S, 1, H, ...]); scales int32
    [S, H] (paged [S, 1, H]). Returns (fmt, S, H, D)."""
    if not isinstance(q, (tuple, list)) or len(q) != 2:
        raise TypeError(f"q must be a (values, packed UE8M0 scales) pair, got {type(q).__name__}")
    values, scales = q
    for name, t in (("q", values), ("q scales", scales)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    fmt = fmt_of(values.dtype)
    if scales.dtype != torch.int32:
        raise TypeError(f"q scales must be torch.int32 (packed UE8M0), got {scales.dtype}")
    if paged:
        if values.dim() != 4 or values.shape[1] != 1:
            raise ValueError(
                f"paged q must be [S, 1, H, D{'/2' if fmt == 'mxfp4' else ''}] (next_n = 1), got {tuple(values.shape)}"
            )
        values, scales = values[:, 0], scales.reshape(scales.shape[0], -1) if scales.dim() == 3 else scales
    if values.dim() != 3:
        raise ValueError(f"q must be [S, H, D{'/2' if fmt == 'mxfp4' else ''}], got {tuple(values.shape)}")
    s, h, cols = values.shape
    d = 2 * cols if fmt == "mxfp4" else cols
    if tuple(scales.shape) != (s, h):
        raise ValueError(
            f"q scales must be [S, H] = {(s, h)}{' (paged: [S, 1, H])' if paged else ''}, got {tuple(q[1].shape)}"
        )
    return fmt, s, h, d


def check_weights(weights, rows: int, heads: int) -> None:
    if not isinstance(weights, torch.Tensor):
        raise TypeError(f"weights must be a torch.Tensor, got {type(weights).__name__}")
    if tuple(weights.shape) != (rows, heads) or weights.stride(-1) != 1:
        raise ValueError(
            f"weights must be [S, H] = {(rows, heads)} with unit column stride, got shape "
            f"{tuple(weights.shape)}, strides {weights.stride()}"
        )


def _rule(q, weights, num_max_sparse_blocks, sparse_block_kv, **kv_dtypes) -> None:
    """The value-level checks (dtypes, geometry, num_max_sparse_blocks), as is_supported makes them."""
    if not isinstance(weights, torch.Tensor):
        raise TypeError(f"weights must be a torch.Tensor, got {type(weights).__name__}")
    values = q[0][:, 0] if q[0].dim() == 4 else q[0]
    cols = values.shape[-1] if values.dim() == 3 else 0
    sparse_rule(
        heads=values.shape[1] if values.dim() == 3 else None,
        head_dim=2 * cols if fmt_of(values.dtype) == "mxfp4" else cols,
        q_dtype=dtype_name(values.dtype),
        q_sf_dtype=dtype_name(q[1].dtype),
        weights_dtype=dtype_name(weights.dtype),
        num_max_sparse_blocks=num_max_sparse_blocks,
        sparse_block_kv=sparse_block_kv,
        **kv_dtypes,
    )


def check_sparse_call(q, kv, weights, num_max_sparse_blocks, sparse_block_kv) -> SparseProblem:
    """fp8_fp4_sparse_mqa_logits's arguments besides the metadata."""
    fmt, s, h, d = check_q(q, paged=False)
    if not isinstance(kv, (tuple, list)) or len(kv) != 2:
        raise TypeError(f"kv must be a (values, packed UE8M0 scales) pair, got {type(kv).__name__}")
    values, scales = kv
    if not isinstance(values, torch.Tensor) or not isinstance(scales, torch.Tensor):
        raise TypeError("kv values and scales must be torch.Tensors")
    _rule(
        q,
        weights,
        num_max_sparse_blocks,
        sparse_block_kv,
        kv_dtype=dtype_name(values.dtype),
        kv_sf_dtype=dtype_name(scales.dtype),
    )
    cols = d // 2 if fmt == "mxfp4" else d
    if values.dim() != 2 or values.shape[1] != cols:
        raise ValueError(f"kv must be [N, {cols}], got {tuple(values.shape)}")
    if tuple(scales.shape) != (values.shape[0],):
        raise ValueError(f"kv scales must be [N] = ({values.shape[0]},), got {tuple(scales.shape)}")
    check_weights(weights, s, h)
    return SparseProblem(fmt, s, h, d, num_max_sparse_blocks, sparse_block_kv, False)


def check_paged_sparse_call(q, kv_cache, weights, num_max_sparse_blocks, sparse_block_kv) -> SparseProblem:
    """fp8_fp4_paged_sparse_mqa_logits's arguments besides the metadata: kv_cache uint8
    [num_pages, page_kv, 1, D(/2) + 4] (values, then scales, per page), page_kv a multiple of sparse_block_kv."""
    fmt, s, h, d = check_q(q, paged=True)
    if not isinstance(kv_cache, torch.Tensor):
        raise TypeError(f"kv_cache must be a torch.Tensor, got {type(kv_cache).__name__}")
    row = (d // 2 if fmt == "mxfp4" else d) + SCALE_BYTES
    page_kv = kv_cache.shape[1] if kv_cache.dim() == 4 else None
    _rule(
        q, weights, num_max_sparse_blocks, sparse_block_kv, kv_cache_dtype=dtype_name(kv_cache.dtype), page_kv=page_kv
    )
    if kv_cache.dim() != 4 or kv_cache.shape[2] != 1 or kv_cache.shape[3] != row:
        raise ValueError(f"kv_cache must be [num_pages, page_kv, 1, {row}], got {tuple(kv_cache.shape)}")
    check_weights(weights, s, h)
    return SparseProblem(fmt, s, h, d, num_max_sparse_blocks, sparse_block_kv, True)
