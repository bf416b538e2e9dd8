"""Refusals under DeepGEMM's names the compat table declares (compat/surface.py): one object per name, so
`deep_gemm.X is deep_gemm.mega.X` holds as in DeepGEMM."""

from __future__ import annotations

from ..core.names import make_refusal

_DECLARED: dict[str, object] = {}


def declared_refusal(name: str):
    """The refusal of a name the compat table declares as not provided / out of scope, with the table's reason."""
    if name not in _DECLARED:
        from .surface import ENTRIES

        reasons = [e.does for e in ENTRIES if e.name == name]
        if not reasons:
            raise LookupError(f"{name} is not in the compat table (compat/surface.py)")
        _DECLARED[name] = make_refusal(name, reasons[0])
    return _DECLARED[name]
