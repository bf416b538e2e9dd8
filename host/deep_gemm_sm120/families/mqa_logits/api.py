"""fp8_fp4_mqa_logits / fp8_mqa_logits: DeepGEMM's dense indexer scores (see docs/mqa_logits.md).

    logits[i, j] = sum_h weights[i, h] * relu(q[i, h] . kv[j] * kv_sf[j])   for ks[i] <= j < ke[i]
    (FP4: the 1x32 scales of q and kv inside the dot product instead of kv_sf)

Returns a view of a buffer whose row stride is padded to 1024 bytes, as DeepGEMM does: [S, SK] (-inf outside
[ks, ke) when clean_logits) or, with max_seqlen_k > 0, compressed [S, max_seqlen_k] (column c = key ks[i] + c).
"""

from __future__ import annotations

import torch

from ... import jit
from ...arch import target_of
from ...checks import (
    SCALE_CHECKS,
    check_given_scales,
    device_of,
    get_index_checks,
    get_scale_checks,
    index_checks,
    require_int32,
    require_tensor,
)
from ...core.arith import ceil_div, round_up
from ...core.rules import dtype_name
from ...core.tma import tma_request, with_addresses
from ...launch import KEY_ERRORS, CallCache, fast_calls, kernel_memo, launch, recording, tensor_key
from ...launch import empty as fresh_empty
from .kernel import BLOCK_KV, PARAMS, ROWS, MqaLogitsSpec, logits_row_stride
from .rules import mqa_logits_rule

_OFF_Q, _OFF_KV = PARAMS.offsets["tmap_q"], PARAMS.offsets["tmap_kv"]
_pack = PARAMS.packer()
_CALLS = CallCache()  # calls checked once per signature
_LOGIT = {torch.float32: "fp32", torch.bfloat16: "bf16"}
# served in C (launch.fast_calls): q, kv pairs, weights, ks, ke, max_seqlen_k, schedule_meta, clean_logits and
# logits_dtype's name; a hit returns the logits it allocated
_FAST = fast_calls("PPTTTVVVV", returns=True)


@kernel_memo(maxsize=256)
def _kernel(heads: int, head_dim: int, logit: str, mode: str, fp4: bool, index: int, target: str):
    return jit.get_kernel(MqaLogitsSpec(heads, head_dim, logit, mode, fp4), target, index)


def _check_ranges(ks: torch.Tensor, ke: torch.Tensor, seq_len_kv: int, max_seqlen_k: int) -> None:
    """0 <= ks <= ke <= SK for every query and, for compressed rows, ke - ks <= max_seqlen_k (one reduction and a
    sync; skipped while a graph is captured, where the caller vouches for them)."""
    if not index_checks() or ks.numel() == 0:
        return
    bad = (ks < 0) | (ke < ks) | (ke > seq_len_kv)
    if max_seqlen_k > 0:
        bad |= (ke - ks) > max_seqlen_k
    if bool(bad.any()):
        i = int(bad.nonzero()[0, 0])
        extra = f" and cu_seq_len_k_end - cu_seq_len_k_start <= max_seqlen_k = {max_seqlen_k}" if max_seqlen_k else ""
        raise ValueError(
            f"query {i}: need 0 <= cu_seq_len_k_start <= cu_seq_len_k_end <= {seq_len_kv}{extra}, got "
            f"[{int(ks[i])}, {int(ke[i])})"
        )


def _row_bytes(t: torch.Tensor) -> int:
    return t.shape[-1] * t.element_size()


def _forms(max_seqlen_k, schedule_meta, clean_logits):
    """DeepGEMM 2.8.1's positional form (..., max_seqlen_k, schedule_meta=None), which sgl-deep-gemm 0.2.5 shares,
    and DeepGEMM main's (..., clean_logits, max_seqlen_k=0; logits_dtype by keyword), told apart without
    ambiguity: a bool 6th argument is main's clean_logits (then an int 7th is its max_seqlen_k), an int is
    max_seqlen_k; an int is never read as clean_logits. Returns (clean_logits, max_seqlen_k); schedule_meta is
    accepted and unused."""
    if isinstance(max_seqlen_k, bool):  # DeepGEMM main's form
        if clean_logits is not None:
            raise TypeError("mqa_logits got multiple values for clean_logits")
        clean_logits = max_seqlen_k
        if isinstance(schedule_meta, int) and not isinstance(schedule_meta, bool):
            max_seqlen_k = schedule_meta
        elif schedule_meta is None:
            max_seqlen_k = 0
        else:
            raise TypeError(
                f"mqa_logits: after a bool clean_logits, the 7th argument is max_seqlen_k (an int), "
                f"got {type(schedule_meta).__name__}"
            )
    elif not isinstance(max_seqlen_k, int):
        raise TypeError(
            f"mqa_logits: the 6th argument is max_seqlen_k (an int) or DeepGEMM main's clean_logits "
            f"(a bool), got {type(max_seqlen_k).__name__}"
        )
    if clean_logits is not None and not isinstance(clean_logits, bool):
        raise TypeError(f"clean_logits must be a bool, got {type(clean_logits).__name__}")
    if clean_logits is None:  # compressed logits ([S, max_seqlen_k]) are never cleaned: the default follows
        clean_logits = max_seqlen_k == 0
    elif clean_logits and max_seqlen_k > 0:
        raise ValueError("compressed logits (max_seqlen_k > 0) require clean_logits=False")
    return clean_logits, max_seqlen_k


def fp8_mqa_logits(
    q: torch.Tensor,
    kv,
    weights: torch.Tensor,
    cu_seq_len_k_start: torch.Tensor,
    cu_seq_len_k_end: torch.Tensor,
    max_seqlen_k: int = 0,
    schedule_meta=None,
    *,
    clean_logits: bool | None = None,
    logits_dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """The FP8 form of fp8_fp4_mqa_logits: q a tensor [S, H, D] e4m3."""
    return fp8_fp4_mqa_logits(
        q if isinstance(q, (tuple, list)) else (q, None),
        kv,
        weights,
        cu_seq_len_k_start,
        cu_seq_len_k_end,
        max_seqlen_k,
        schedule_meta,
        clean_logits=clean_logits,
        logits_dtype=logits_dtype,
    )


def get_mqa_logits_metadata(cu_seq_len_k_start, cu_seq_len_k_end, num_kv_tokens, num_heads) -> torch.Tensor:
    """sgl-deep-gemm's dense schedule. The SM120 dense kernel derives each CTA's key range from ks / ke on the
    device, so there is nothing to precompute: an empty int32 tensor on ks's device, which fp8_fp4_mqa_logits
    accepts as schedule_meta. The arguments are checked as that call would."""
    require_int32("cu_seq_len_k_start", cu_seq_len_k_start)
    require_int32("cu_seq_len_k_end", cu_seq_len_k_end)
    if cu_seq_len_k_start.shape != cu_seq_len_k_end.shape or cu_seq_len_k_start.dim() != 1:
        raise ValueError("cu_seq_len_k_start and cu_seq_len_k_end must be [S] tensors of one shape")
    for name, v in (("num_kv_tokens", num_kv_tokens), ("num_heads", num_heads)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise ValueError(f"{name} must be a non-negative int, got {v!r}")
    return torch.empty(0, dtype=torch.int32, device=cu_seq_len_k_start.device)


def _prepare(q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, clean_logits, max_seqlen_k, logits_dtype):
    """(target, device index, what a call of this signature runs, given its tensors) after every check that the
    signature decides; the key ranges are values, checked per call (index_checks())."""
    if not isinstance(q, (tuple, list)) or len(q) != 2:
        raise TypeError(f"q must be a (values, scale factors or None) pair, got {type(q).__name__}")
    if not isinstance(kv, (tuple, list)) or len(kv) != 2:
        raise TypeError(f"kv must be a (values, scale factors) pair, got {type(kv).__name__}")
    qv, q_sf = q
    kvv, kv_sf = kv
    fp4 = q_sf is not None
    for name, t in (("q", qv), ("kv", kvv), ("kv scales", kv_sf), ("weights", weights)) + (
        (("q scales", q_sf),) if fp4 else ()
    ):
        require_tensor(name, t)
    ks, ke = (
        require_int32("cu_seq_len_k_start", cu_seq_len_k_start),
        require_int32("cu_seq_len_k_end", cu_seq_len_k_end),
    )
    if not isinstance(logits_dtype, torch.dtype):
        raise TypeError(f"logits_dtype must be a torch.dtype, got {type(logits_dtype).__name__}")
    if qv.dim() != 3:
        raise ValueError(f"q must be [S, H, D{'/2' if fp4 else ''}], got shape {tuple(qv.shape)}")
    seq_len, heads, row_bytes = qv.shape[0], qv.shape[1], _row_bytes(qv)
    head_dim = 2 * row_bytes if fp4 else row_bytes
    mqa_logits_rule(
        heads=heads,
        head_dim=head_dim,
        q_dtype=dtype_name(qv.dtype),
        kv_dtype=dtype_name(kvv.dtype),
        q_sf_dtype=dtype_name(q_sf.dtype) if fp4 else None,
        kv_sf_dtype=dtype_name(kv_sf.dtype),
        weights_dtype=dtype_name(weights.dtype),
        logits_dtype=dtype_name(logits_dtype),
        clean_logits=bool(clean_logits),
        max_seqlen_k=max_seqlen_k,
        fp4=fp4,
    )
    if kvv.dim() != 2 or _row_bytes(kvv) != row_bytes:
        raise ValueError(f"kv must be [SK, {'D/2' if fp4 else 'D'} = {qv.shape[-1]}], got shape {tuple(kvv.shape)}")
    seq_len_kv = kvv.shape[0]
    if tuple(kv_sf.shape) != (seq_len_kv,):
        raise ValueError(f"kv scales must be [SK] = ({seq_len_kv},), got {tuple(kv_sf.shape)}")
    if fp4 and tuple(q_sf.shape) != (seq_len, heads):
        raise ValueError(f"q scales must be [S, H] = ({seq_len}, {heads}), got {tuple(q_sf.shape)}")
    if tuple(weights.shape) != (seq_len, heads) or (weights.stride(1) != 1 and heads > 1):
        raise ValueError(
            f"weights must be [S, H] = ({seq_len}, {heads}) with stride(1) == 1, got shape "
            f"{tuple(weights.shape)} strides {tuple(weights.stride())}"
        )
    for name, t in (("cu_seq_len_k_start", ks), ("cu_seq_len_k_end", ke)):
        if tuple(t.shape) != (seq_len,) or not t.is_contiguous():
            raise ValueError(f"{name} must be a contiguous [S] = ({seq_len},) tensor, got {tuple(t.shape)}")
    for name, t in (("q", qv), ("kv", kvv), ("kv scales", kv_sf)) + ((("q scales", q_sf),) if fp4 else ()):
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous")
    tensors = dict(q=qv, kv=kvv, kv_sf=kv_sf, weights=weights, cu_seq_len_k_start=ks, cu_seq_len_k_end=ke)
    index = device_of(**tensors, **({"q_sf": q_sf} if fp4 else {}))
    elem = 4 if logits_dtype == torch.float32 else 2
    stride = logits_row_stride(seq_len_kv, max_seqlen_k, elem)
    rows, cols = round_up(max(seq_len, 1), ROWS // heads), max_seqlen_k or seq_len_kv
    target = target_of(index)

    def empty(qv, q_sf, kvv, kv_sf, weights, ks, ke) -> torch.Tensor:
        return torch.empty(rows, stride, dtype=logits_dtype, device=qv.device)[:seq_len, :cols]

    if seq_len == 0:
        return target, index, empty
    mode = "compressed" if max_seqlen_k else ("clean" if clean_logits else "plain")
    kern = _kernel(heads, head_dim, _LOGIT[logits_dtype], mode, fp4, index, target)
    maps = tma_request(
        _OFF_Q, "uint8", qv.data_ptr(), (row_bytes, seq_len * heads), (row_bytes,), (row_bytes, ROWS), row_bytes
    ) + tma_request(
        _OFF_KV,
        "uint8",
        kvv.data_ptr(),
        (row_bytes, max(seq_len_kv, 1)),
        (row_bytes,),
        (row_bytes, BLOCK_KV),
        row_bytes,
    )
    ld_weights, grid = weights.stride(0) if seq_len > 1 else heads, ceil_div(seq_len, ROWS // heads)

    def run(qv, q_sf, kvv, kv_sf, weights, ks, ke) -> torch.Tensor:
        buf = fresh_empty((rows, stride), logits_dtype, qv.device)
        _check_ranges(ks, ke, seq_len_kv, max_seqlen_k)
        params = _pack(
            0 if fp4 else kv_sf.data_ptr(),
            q_sf.data_ptr() if fp4 else 0,
            kv_sf.data_ptr() if fp4 else 0,
            weights.data_ptr(),
            ks.data_ptr(),
            ke.data_ptr(),
            buf.data_ptr(),
            seq_len,
            seq_len_kv,
            ld_weights,
            stride,
        )
        launch(kern, grid, params, with_addresses(maps, qv.data_ptr(), kvv.data_ptr()), index)
        return buf[:seq_len, :cols]

    return target, index, run


def fp8_fp4_mqa_logits(
    q,
    kv,
    weights: torch.Tensor,
    cu_seq_len_k_start: torch.Tensor,
    cu_seq_len_k_end: torch.Tensor,
    max_seqlen_k: int = 0,
    schedule_meta=None,
    *,
    clean_logits: bool | None = None,
    logits_dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """FP8: q = (q [S, H, D] e4m3, None), kv = (kv [SK, D] e4m3, kv_sf fp32 [SK]).
    FP4: q = (q [S, H, D/2] packed e2m1, q_sf int32 [S, H]), kv = (kv [SK, D/2], kv_sf int32 [SK]) with packed
    UE8M0 1x32 scales. weights fp32 [S, H]; cu_seq_len_k_start / _end int32 [S]. clean_logits: -inf outside
    [ks, ke) (default: True unless max_seqlen_k > 0). DeepGEMM 2.8.1's order (sgl-deep-gemm's too), and DeepGEMM
    main's (a bool 6th argument, see _forms); clean_logits and logits_dtype keyword only. Checked once per
    call signature; the key ranges on every call (index_checks())."""
    fast_args = (
        q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, max_seqlen_k, schedule_meta, clean_logits,
        _LOGIT.get(logits_dtype) if type(logits_dtype) is torch.dtype else None,
    )  # fmt: skip
    # served in C where no value is read per call: index checks off (the key ranges), scale checks off
    sig = (
        _FAST(*fast_args)
        if (SCALE_CHECKS.value is False or not get_scale_checks()) and not get_index_checks()
        else None
    )
    if sig is not None and sig.__class__ is not bytes:  # served: the logits it allocated
        return sig
    clean_logits, max_seqlen_k = _forms(max_seqlen_k, schedule_meta, clean_logits)
    try:
        (qv, q_sf), (kvv, kv_sf) = q, kv
        key = sig or (
            tensor_key(qv),
            None if q_sf is None else tensor_key(q_sf),
            tensor_key(kvv),
            tensor_key(kv_sf),
            tensor_key(weights),
            tensor_key(cu_seq_len_k_start),
            tensor_key(cu_seq_len_k_end),
            type(clean_logits),
            clean_logits,
            type(max_seqlen_k),
            max_seqlen_k,
            logits_dtype,
        )
        call = _CALLS.get(key)
    except (*KEY_ERRORS, ValueError):  # not pairs of tensors, storage-less, or unhashable: the checks name it
        key, call = None, None
    if call is None or target_of(call[1]) != call[0]:
        call = _prepare(q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, clean_logits, max_seqlen_k, logits_dtype)
        if key is not None:
            _CALLS.put(key, call)
        qv, q_sf = q
        kvv, kv_sf = kv
        if sig is not None:  # a new signature: what it launches and returns is kept for the C table
            with recording(_FAST, fast_args) as rec:
                rec.result = call[2](qv, q_sf, kvv, kv_sf, weights, cu_seq_len_k_start, cu_seq_len_k_end)
            return rec.result
    if q_sf is not None and get_scale_checks():  # opt-in (DG_SM120_CHECK_SCALES): packed UE8M0 taken as given
        check_given_scales("ue8m0", ("q scales", q_sf), ("kv scales", kv_sf))
    return call[2](qv, q_sf, kvv, kv_sf, weights, cu_seq_len_k_start, cu_seq_len_k_end)
