"""Shape and dtype rules of the MQA-logits ops (the dense ones here; the paged family reuses operand_rule), on
plain values: the API and is_supported call the same functions."""

from __future__ import annotations

from ...core.rules import require_dim, require_dtype
from .kernel import FP4_DTYPES, FP4_HEAD_DIMS, HEAD_DIMS, HEADS


def operand_rule(
    fp4: bool,
    q_dtype: str | None,
    kv_dtype: str | None,
    q_sf_dtype: str | None,
    kv_sf_dtype: str | None,
    weights_dtype: str | None,
    logits_dtype: str | None,
    heads: int | None,
    head_dim: int | None,
) -> None:
    """What the dense and paged forms share: operand dtypes (FP8: e4m3 values, fp32 per-key scales; FP4: packed
    e2m1 with int32 packed UE8M0 words), fp32 weights, fp32 / bf16 logits, and the supported heads and head dims.
    None skips a check (is_supported's unspecified values; the paged cache is uint8, checked by its own rule)."""
    if fp4:
        require_dtype("q", q_dtype, FP4_DTYPES)
        require_dtype("q scales", q_sf_dtype, ("int32",))
        if kv_dtype is not None:
            require_dtype("kv", kv_dtype, FP4_DTYPES)
        require_dtype("kv scales", kv_sf_dtype, ("int32",))
    else:
        require_dtype("q", q_dtype, ("float8_e4m3fn",))
        if kv_dtype is not None:
            require_dtype("kv", kv_dtype, ("float8_e4m3fn",))
        require_dtype("kv scales", kv_sf_dtype, ("float32",))
    require_dtype("weights", weights_dtype, ("float32",), not_yet=("bfloat16",))
    require_dtype("logits_dtype", logits_dtype, ("float32", "bfloat16"))
    for name, v in (("heads", heads), ("head_dim", head_dim)):
        if v is not None:
            require_dim(name, v)
    if heads is not None and heads not in HEADS:
        raise NotImplementedError(f"{heads} heads are not supported; supported: {HEADS}")
    dims = FP4_HEAD_DIMS if fp4 else HEAD_DIMS
    if head_dim is not None and head_dim not in dims:
        raise NotImplementedError(
            f"head dim {head_dim} is not supported for {'FP4' if fp4 else 'FP8'}; supported: {dims}"
        )


def mqa_logits_rule(
    seq_len: int | None = None,
    seq_len_kv: int | None = None,
    heads: int | None = None,
    head_dim: int | None = None,
    q_dtype: str | None = None,
    kv_dtype: str | None = None,
    q_sf_dtype: str | None = None,
    kv_sf_dtype: str | None = None,
    weights_dtype: str | None = None,
    logits_dtype: str | None = None,
    clean_logits: bool = True,
    max_seqlen_k: int = 0,
    fp4: bool = False,
) -> None:
    """FP8: q [S, H, D] e4m3 (no q scales), kv [SK, D] e4m3 with fp32 per-key scales. FP4: q [S, H, D/2] and
    kv [SK, D/2] packed e2m1 with int32 packed UE8M0 1x32 scales [S, H] and [SK]. weights fp32 [S, H];
    head_dim is D (unpacked)."""
    operand_rule(fp4, q_dtype, kv_dtype, q_sf_dtype, kv_sf_dtype, weights_dtype, logits_dtype, heads, head_dim)
    for name, v in (("seq_len", seq_len), ("seq_len_kv", seq_len_kv)):
        if v is not None:
            require_dim(name, v)
    if not isinstance(max_seqlen_k, int) or isinstance(max_seqlen_k, bool) or max_seqlen_k < 0:
        raise ValueError(f"max_seqlen_k must be a non-negative int, got {max_seqlen_k!r}")
    if max_seqlen_k > 0 and clean_logits:
        raise ValueError("compressed logits (max_seqlen_k > 0) require clean_logits=False (DeepGEMM's contract)")


def metadata_rule(
    seq_len: int | None = None,
    num_kv_tokens: int | None = None,
    num_heads: int | None = None,
    ks_dtype: str | None = None,
) -> None:
    """get_mqa_logits_metadata: int32 cu_seq_len_k_start / _end [S]; non-negative counts."""
    require_dtype("cu_seq_len_k_start", ks_dtype, ("int32",))
    for name, v in (("seq_len", seq_len), ("num_kv_tokens", num_kv_tokens), ("num_heads", num_heads)):
        if v is not None:
            require_dim(name, v)
