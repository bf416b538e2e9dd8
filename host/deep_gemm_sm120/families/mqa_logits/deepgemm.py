"""DeepGEMM's dense MQA-logits names on this family's kernel: both published argument forms (DeepGEMM main and
sgl-deep-gemm 0.2.5) told apart without ambiguity (the Entry table is in __init__.py's declaration)."""
from __future__ import annotations

import torch

from . import api as _mqa

_MQA_REQUIRED = ("q", "kv", "weights", "cu_seq_len_k_start", "cu_seq_len_k_end")
_MQA_OPTIONAL = ("clean_logits", "max_seqlen_k", "logits_dtype", "schedule_meta")


def mqa_logits_arguments(args: tuple, kwargs: dict) -> dict:
    """Both published forms of fp8_fp4_mqa_logits / fp8_mqa_logits, without ambiguity:
    DeepGEMM main: (q, kv, weights, ks, ke, clean_logits=True, max_seqlen_k=0, logits_dtype=float32)
    sgl-deep-gemm 0.2.5: (q, kv, weights, ks, ke, max_seqlen_k, schedule_meta=None)
    A bool 6th positional is clean_logits, an int is max_seqlen_k: an int is never read as clean_logits."""
    kwargs = dict(kwargs)
    unknown = sorted(set(kwargs) - set(_MQA_REQUIRED) - set(_MQA_OPTIONAL))
    if unknown:
        raise TypeError(f"mqa_logits got unexpected keyword(s) {unknown}")
    out = dict(zip(_MQA_REQUIRED, args))
    for name in _MQA_REQUIRED[len(out):]:
        if name not in kwargs:
            raise TypeError(f"mqa_logits is missing {name}")
        out[name] = kwargs.pop(name)
    tail = list(args[len(_MQA_REQUIRED):])
    if tail:
        if isinstance(tail[0], bool):      # DeepGEMM main
            order = ("clean_logits", "max_seqlen_k", "logits_dtype")
        elif isinstance(tail[0], int):     # sgl-deep-gemm 0.2.5
            order = ("max_seqlen_k", "schedule_meta")
        else:
            raise TypeError(f"mqa_logits: the 6th argument is clean_logits (bool) or max_seqlen_k (int), got "
                            f"{type(tail[0]).__name__}")
        if len(tail) > len(order):
            raise TypeError("mqa_logits got too many positional arguments")
        out.update(zip(order, tail))
    for name, value in kwargs.items():
        if name in out:
            raise TypeError(f"mqa_logits got multiple values for {name}")
        out[name] = value
    explicit_clean = "clean_logits" in out
    out.setdefault("max_seqlen_k", 0)
    out.setdefault("logits_dtype", torch.float32)
    out.setdefault("schedule_meta", None)
    if isinstance(out["max_seqlen_k"], bool) or not isinstance(out["max_seqlen_k"], int):
        raise TypeError(f"max_seqlen_k must be an int, got {type(out['max_seqlen_k']).__name__}")
    # compressed logits ([S, max_seqlen_k]) are never cleaned: the default follows the form
    out.setdefault("clean_logits", out["max_seqlen_k"] == 0)
    if not isinstance(out["clean_logits"], bool):
        raise TypeError(f"clean_logits must be a bool, got {type(out['clean_logits']).__name__}")
    if explicit_clean and out["clean_logits"] and out["max_seqlen_k"] > 0:
        raise ValueError("compressed logits (max_seqlen_k > 0) require clean_logits=False")
    return out


def fp8_fp4_mqa_logits(*args, **kwargs):
    a = mqa_logits_arguments(args, dict(kwargs))  # schedule_meta (sgl-deep-gemm's form) is accepted and unused
    return _mqa.fp8_fp4_mqa_logits(a["q"], a["kv"], a["weights"], a["cu_seq_len_k_start"], a["cu_seq_len_k_end"],
                                   a["clean_logits"], a["max_seqlen_k"], a["logits_dtype"])


def fp8_mqa_logits(*args, **kwargs):
    a = mqa_logits_arguments(args, dict(kwargs))
    q = a["q"]
    return _mqa.fp8_fp4_mqa_logits(q if isinstance(q, (tuple, list)) else (q, None), a["kv"], a["weights"],
                                   a["cu_seq_len_k_start"], a["cu_seq_len_k_end"], a["clean_logits"],
                                   a["max_seqlen_k"], a["logits_dtype"])


def get_mqa_logits_metadata(cu_seq_len_k_start, cu_seq_len_k_end, num_kv_tokens, num_heads):
    """sgl-deep-gemm's dense schedule. The SM120 dense kernel derives each CTA's key range from ks / ke on the
    device, so there is nothing to precompute: an empty int32 tensor on ks's device, which fp8_fp4_mqa_logits
    accepts as schedule_meta. The arguments are checked as that call would."""
    from ...validation import require_int32

    require_int32("cu_seq_len_k_start", cu_seq_len_k_start)
    require_int32("cu_seq_len_k_end", cu_seq_len_k_end)
    if cu_seq_len_k_start.shape != cu_seq_len_k_end.shape or cu_seq_len_k_start.dim() != 1:
        raise ValueError("cu_seq_len_k_start and cu_seq_len_k_end must be [S] tensors of one shape")
    for name, v in (("num_kv_tokens", num_kv_tokens), ("num_heads", num_heads)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise ValueError(f"{name} must be a non-negative int, got {v!r}")
    return torch.empty(0, dtype=torch.int32, device=cu_seq_len_k_start.device)
