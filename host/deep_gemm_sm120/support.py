"""`is_supported` / `why_unsupported`: whether a call would run, answered from the same rule functions the API
calls (each op's rule in its family declaration), without raising and without touching CUDA unless a device
is given. Shapes are those of contiguous operands."""

from __future__ import annotations

import difflib
import inspect

from .arch import emulation_requested, target_for_capability
from .core.registry import registry
from .core.rules import dtype_name

_ARCH_KEYS = ("capability", "device")


def _keywords(rule) -> list[str]:
    return [p for p in inspect.signature(rule).parameters]


def why_unsupported(op: str, **kw) -> str | None:
    """None if `op` with these shapes/dtypes would run, else the reason (what the API would raise, or why the
    question cannot be answered: an unknown op or keyword). Never raises."""
    try:
        ops = registry().ops
        if op not in ops:
            close = difflib.get_close_matches(op, ops, n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            return f"unknown op {op!r}: deep_gemm_sm120 provides {', '.join(sorted(ops))}{hint}"
        _, decl = ops[op]
        accepted = _keywords(decl.rule)
        unknown = sorted(set(kw) - set(accepted) - set(_ARCH_KEYS))
        if unknown:
            return (
                f"unknown keyword(s) {', '.join(unknown)} for {op}; it answers for "
                f"{', '.join(accepted + list(_ARCH_KEYS))}"
            )
        args = {key: v for key, v in kw.items() if key not in _ARCH_KEYS}
        for key in list(args):
            if key.endswith("dtype") and args[key] is not None:
                args[key] = dtype_name(args[key])
        decl.rule(**args)
        cap = kw.get("capability")
        if cap is None and kw.get("device") is not None:
            import torch

            cap = torch.cuda.get_device_capability(kw["device"])
        if cap is not None:
            target_for_capability(tuple(cap), emulation_requested())
        return None
    except Exception as e:
        return f"{type(e).__name__}: {e}"


def is_supported(op: str, **kw) -> bool:
    """is_supported("bf16_gemm_nt", m=.., n=.., k=.., ab_dtype=torch.bfloat16, out_dtype=torch.float32,
    capability=(12, 0)) -> bool. Keywords are each op's rule parameters plus capability / device; unknown ops,
    keywords, dtypes or shapes answer False (why_unsupported says why)."""
    return why_unsupported(op, **kw) is None


def supported_ops() -> dict[str, list[str]]:
    """Every op (and alias) with the keywords is_supported answers for."""
    return {name: _keywords(decl.rule) + list(_ARCH_KEYS) for name, (_, decl) in sorted(registry().ops.items())}


__all__ = ["is_supported", "why_unsupported", "supported_ops"]
