"""The shape and dtype rule of chunk_gated_delta_rule, on plain values: the API and is_supported call it."""

from __future__ import annotations

from ...core.rules import require_dim, require_dtype
from .kernel import ELEM_DTYPES, HEAD_DIMS
from .prep import CHUNKS


def gdr_rule(
    dtype: str | None = None,
    beta_dtype: str | None = None,
    g_dtype: str | None = None,
    initial_state_dtype: str | None = None,
    heads: int | None = None,
    value_heads: int | None = None,
    head_dim: int | None = None,
    value_dim: int | None = None,
    chunk_size: int | None = None,
    backward: bool | None = None,
) -> None:
    """q / k / v bf16 or fp16 (one dtype), g fp32, beta q's dtype or fp32, initial_state fp32; HV a positive
    multiple of H; K = V = 128 (NotImplementedError otherwise); chunk_size 16 / 32 / 64 or None (the device's
    default_chunk_size()). backward: whether gradients are asked for too (inputs that require grad): the backward
    (backward.py) covers every call the forward accepts, any chunk_size (it works in 64-token chunks), so the
    answer is the forward's."""
    if backward is not None and not isinstance(backward, bool):
        raise TypeError(f"backward must be None or a bool, got {type(backward).__name__}")
    require_dtype("q / k / v", dtype, tuple(ELEM_DTYPES))
    require_dtype("g (log-space decay)", g_dtype, ("float32",))
    require_dtype("beta", beta_dtype, (dtype or "bfloat16", "float32") if dtype else tuple(ELEM_DTYPES) + ("float32",))
    require_dtype("initial_state", initial_state_dtype, ("float32",))
    for name, x in (("heads", heads), ("value_heads", value_heads), ("head_dim", head_dim), ("value_dim", value_dim)):
        if x is not None:
            require_dim(name, x)
    if heads is not None and value_heads is not None and (heads == 0 or value_heads % heads):
        raise ValueError(f"HV = {value_heads} value heads must be a positive multiple of H = {heads} q/k heads")
    for name, x in (("K", head_dim), ("V", value_dim)):
        if x is not None and x not in HEAD_DIMS:
            raise NotImplementedError(f"head dim {name} = {x} is not supported yet; supported: K = V = 128")
    if chunk_size is not None:
        if not isinstance(chunk_size, int) or isinstance(chunk_size, bool):
            raise TypeError(f"chunk_size must be None or an int, got {type(chunk_size).__name__}")
        if chunk_size not in CHUNKS:
            raise NotImplementedError(f"chunk_size {chunk_size} is not supported; supported: {CHUNKS}")
