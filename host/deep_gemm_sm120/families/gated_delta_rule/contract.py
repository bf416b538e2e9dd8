"""chunk_gated_delta_rule's argument contract, torch-level but device-free: shapes, the sequence layout and the
chunk size, with the typed errors the API raises (dtypes and head dims through the op's rule, `gdr_rule`, which
is_supported calls too). The API launches the kernels on the `GdrProblem` this returns."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...arch import device_capability
from ...core.rules import dtype_name
from .kernel import OTHER_CHUNK, SM120_CHUNK
from .rules import gdr_rule


def default_chunk_size(device: torch.device | int | None = None) -> int:
    """32 on SM120 (compute capability 12.x) and, as measured on the H200, elsewhere too (and without a GPU). The
    two are separate constants because they are separate decisions; the capability comes from the package's
    per-device cache (arch.device_capability), so calling this per forward costs no driver query."""
    if not torch.cuda.is_available():
        return OTHER_CHUNK
    index = device.index if isinstance(device, torch.device) else device
    major = device_capability(torch.cuda.current_device() if index is None else index)[0]
    return SM120_CHUNK if major == 12 else OTHER_CHUNK


@dataclass(frozen=True)
class GdrProblem:
    batch: int
    seq_len: int
    heads: int
    value_heads: int
    head_dim: int
    value_dim: int
    num_sequences: int
    chunk_size: int
    scale: float
    varlen: bool


def _tensor(name: str, t) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    return t


def check_arguments(
    q,
    k,
    v,
    g,
    beta,
    scale=None,
    initial_state=None,
    output_final_state=False,
    cu_seqlens=None,
    use_qk_l2norm_in_kernel=False,
    chunk_size=None,
    default_chunk: int = OTHER_CHUNK,
) -> GdrProblem:
    """TypeError for a dtype or Python type outside the contract, ValueError for shapes and values,
    NotImplementedError for what FLA accepts and we do not (yet): head dims other than 128, other chunk sizes."""
    for name, t in (("q", q), ("k", k), ("v", v), ("g", g), ("beta", beta)):
        _tensor(name, t)
    gdr_rule(
        dtype=dtype_name(q.dtype),
        beta_dtype=dtype_name(beta.dtype),
        g_dtype=dtype_name(g.dtype),
        initial_state_dtype=None if not isinstance(initial_state, torch.Tensor) else dtype_name(initial_state.dtype),
        chunk_size=chunk_size,
    )
    for name, t in (("k", k), ("v", v)):
        if t.dtype != q.dtype:
            raise TypeError(f"{name} must have q's dtype {q.dtype}, got {t.dtype}")
    if not isinstance(output_final_state, bool) or not isinstance(use_qk_l2norm_in_kernel, bool):
        raise TypeError("output_final_state and use_qk_l2norm_in_kernel must be bools")
    if q.dim() != 4 or k.shape != q.shape:
        raise ValueError(f"q and k must be [B, T, H, K] of one shape, got {tuple(q.shape)} and {tuple(k.shape)}")
    b, t, h, dk = q.shape
    if v.dim() != 4 or v.shape[:2] != (b, t):
        raise ValueError(f"v must be [B, T, HV, V] = ({b}, {t}, HV, V), got {tuple(v.shape)}")
    hv, dv = v.shape[2], v.shape[3]
    if h == 0 or hv % h:
        raise ValueError(f"HV = {hv} value heads must be a positive multiple of H = {h} q/k heads")
    for name, x in (("g", g), ("beta", beta)):
        if tuple(x.shape) != (b, t, hv):
            raise ValueError(f"{name} must be [B, T, HV] = {(b, t, hv)}, got {tuple(x.shape)}")
    gdr_rule(heads=h, value_heads=hv, head_dim=dk, value_dim=dv)
    varlen = cu_seqlens is not None
    if varlen:
        _tensor("cu_seqlens", cu_seqlens)
        if cu_seqlens.dtype not in (torch.int32, torch.int64):
            raise TypeError(f"cu_seqlens must be int32 or int64, got {cu_seqlens.dtype}")
        if b != 1:
            raise ValueError(f"with cu_seqlens the batch must be 1 (sequences packed along T), got B = {b}")
        if cu_seqlens.dim() != 1 or cu_seqlens.numel() < 2:
            raise ValueError(f"cu_seqlens must be [N + 1] offsets, got shape {tuple(cu_seqlens.shape)}")
        n = cu_seqlens.numel() - 1
    else:
        n = b
    if initial_state is not None:
        _tensor("initial_state", initial_state)
        if tuple(initial_state.shape) != (n, hv, dk, dv):
            raise ValueError(
                f"initial_state must be [N, HV, K, V] = {(n, hv, dk, dv)}, got {tuple(initial_state.shape)}"
            )
    if chunk_size is None:
        chunk_size = default_chunk
    if scale is not None and (not isinstance(scale, (int, float)) or isinstance(scale, bool)):
        raise TypeError(f"scale must be None or a float, got {type(scale).__name__}")
    return GdrProblem(b, t, h, hv, dk, dv, n, chunk_size, scale_value(scale, dk), varlen)


def scale_value(scale, head_dim: int) -> float:
    """The scale a call applies (dk ** -0.5 for None), as the float its kernel receives; ValueError for a number
    no float holds. Called per call too: the cache keys scale by value, and -0.0 == 0.0 there."""
    if scale is None:
        return head_dim**-0.5
    try:
        return float(scale)
    except OverflowError:
        raise ValueError(f"scale must fit a float, got {scale!r}") from None


def check_cu_seqlens_values(cu_seqlens: torch.Tensor, seq_len: int) -> None:
    """Offsets start at 0, never decrease and end at T (one reduction and a sync; callers skip it while a CUDA
    graph is captured)."""
    if int(cu_seqlens[0]) != 0 or int(cu_seqlens[-1]) != seq_len or bool((cu_seqlens[1:] < cu_seqlens[:-1]).any()):
        raise ValueError(
            f"cu_seqlens must start at 0, never decrease and end at T = {seq_len}, got "
            f"{cu_seqlens.tolist() if cu_seqlens.numel() <= 16 else '...'}"
        )


def cu_seqlens_int32(cu_seqlens: torch.Tensor, seq_len: int) -> torch.Tensor:
    """cu_seqlens as the kernels read it (int32, contiguous). int64 offsets are clamped to [0, T] first: narrowed
    as they are, 2**32 would read as 0 and 2**31 + 5 as a negative number, so unchecked offsets (index checks
    off) would not be clamped as documented, and the backward's host layout (which clamps) would disagree with the
    sequences the kernels walked. int32 offsets need nothing (the kernels clamp them)."""
    if cu_seqlens.dtype == torch.int64:
        cu_seqlens = cu_seqlens.clamp(0, seq_len)
    return cu_seqlens.to(torch.int32).contiguous()


def chunk_gated_delta_rule_bwd(*args, **kwargs):
    """FLA's internal backward entry point (its saved factors, its argument order): not reproduced. Gradients come
    from autograd through chunk_gated_delta_rule (inputs that require grad, then .backward())."""
    raise NotImplementedError(
        "chunk_gated_delta_rule_bwd (FLA's internal backward signature) is not provided by deep_gemm_sm120: "
        "call chunk_gated_delta_rule on inputs that require grad and backpropagate through its outputs"
    )
