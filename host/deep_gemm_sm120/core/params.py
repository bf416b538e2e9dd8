"""Typed kernel parameter lists: written once per family, packed into the launch buffer by name, and checked
against both the header's kernel signature and the compiled cubin's parameter table.

The header's kernel signature and a compiled cubin's parameter table are checked against these lists by the
tests (tests/kernel_signatures.py); at load time the driver's parameter info is (runtime.load_kernel).

A kernel receives its arguments as one buffer (cuLaunchKernelEx's `extra`), laid out as the CUDA ABI lays
out the parameter constant bank: each parameter at the next multiple of its alignment, in declaration order.
Tensor maps (CUtensorMap, 128 bytes, aligned to 128 by CUDA 13's cuda.h) are left as zeros here and encoded
into their slot by the C++ runtime, which needs libcuda for that.
"""

from __future__ import annotations

import operator
import struct
from collections.abc import Callable
from dataclasses import dataclass

TMAP = "CUtensorMap"
# base C++ type -> (struct code, size, alignment)
_SCALARS = {
    "uint32_t": ("I", 4, 4),
    "int32_t": ("i", 4, 4),
    "uint64_t": ("Q", 8, 8),
    "int64_t": ("q", 8, 8),
    "float": ("f", 4, 4),
    "bool": ("?", 1, 1),
    "uint16_t": ("H", 2, 2),
    "uint8_t": ("B", 1, 1),
}
_POINTER = ("Q", 8, 8)
_TMAP_LAYOUT = (None, 128, 128)


def kind_of(ctype: str) -> str:
    """'tmap', 'ptr' or the scalar's base type for a C++ parameter type."""
    t = ctype.replace("__restrict__", " ").replace("__grid_constant__", " ").replace("const", " ")
    t = " ".join(t.split())
    if TMAP in t:
        if "*" in t or "&" in t:
            raise ValueError(f"tensor maps are passed by value as const __grid_constant__ CUtensorMap, got {ctype!r}")
        return "tmap"
    if t.endswith("*"):
        return "ptr"
    t = t.replace("std::", "")
    if t not in _SCALARS:
        raise ValueError(
            f"unsupported kernel parameter type {ctype!r} (pointers, tensor maps and {', '.join(_SCALARS)} are allowed)"
        )
    return t


@dataclass(frozen=True)
class Param:
    """One kernel parameter. `ctype` is the C++ type as the explicit instantiation spells it; it may hold
    `{placeholders}` filled from the spec (e.g. "{out}*" for a pointer to the output type)."""

    name: str
    ctype: str

    @property
    def kind(self) -> str:
        return kind_of(self.ctype.format_map(_AnyType()))

    @property
    def layout(self) -> tuple[str | None, int, int]:
        k = self.kind
        return _TMAP_LAYOUT if k == "tmap" else _POINTER if k == "ptr" else _SCALARS[k]


class _AnyType(dict):
    """format_map filler: any placeholder becomes a type name that classifies like the real one."""

    def __missing__(self, key: str) -> str:
        return "OutT"


def _keyword_packer(names: tuple[str, ...], pack: Callable[..., bytes]) -> Callable[..., bytes]:
    """`pack(**values)`: every name exactly once, packed in declaration order. The count is checked first and a
    missing name surfaces as the getter's KeyError, so a well-formed call costs one len() and one itemgetter
    (this runs on every launch); the error names what is missing or unknown."""
    count = len(names)
    get = operator.itemgetter(*names) if count > 1 else (lambda v: (v[names[0]],)) if count else (lambda v: ())

    def keyword_pack(**values) -> bytes:
        if len(values) == count:
            try:
                return pack(*get(values))
            except KeyError:
                pass
        missing, unknown = sorted(set(names) - set(values)), sorted(set(values) - set(names))
        raise TypeError(f"kernel parameters: missing {missing}, unknown {unknown} (expected {list(names)})")

    return keyword_pack


class ParamList:
    """The ordered parameters of one kernel template (same for every instantiation of it)."""

    def __init__(self, *params: Param):
        names = [p.name for p in params]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate parameter names in {names}")
        self.params = params
        self.names = tuple(names)
        fmt, off, layout = ["<"], 0, []
        for p in params:
            code, size, align = p.layout
            pad = -off % align
            if pad:
                fmt.append(f"{pad}x")
            off += pad
            layout.append((p.name, off, size, align))
            fmt.append(f"{size}x" if code is None else code)
            off += size
        self.layout = tuple(layout)  # (name, offset, size, alignment) in declaration order
        self.size = off  # bytes of the parameter buffer (the cubin's CBANK_PARAM_SIZE)
        self.tmaps = tuple(p.name for p in params if p.kind == "tmap")
        self.values = tuple(p.name for p in params if p.kind != "tmap")
        self.offsets = {name: o for name, o, _, _ in layout}
        self.pointers = tuple(o for p, (_, o, _, _) in zip(params, layout) if p.kind == "ptr")  # pointer slots
        self._struct = struct.Struct("".join(fmt))
        assert self._struct.size == self.size, (self._struct.size, self.size)
        # the launch buffer from keyword values: every non-tensor-map parameter, by name (a missing or unknown
        # name is a TypeError naming it)
        self.pack: Callable[..., bytes] = _keyword_packer(self.values, self._struct.pack)

    def unpack(self, buf: bytes) -> dict:
        """{name: value} of a packed buffer (tensor-map slots omitted): tests decode launches with it."""
        return dict(zip(self.values, self._struct.unpack(buf)))

    def packer(self) -> Callable[..., bytes]:
        """A fast positional packer taking the non-tensor-map values in declaration order (`self.values`).
        Hot paths bind it once; `pack` is the keyword form used everywhere else."""
        return self._struct.pack

    def instantiation_types(self, **subst: str) -> list[str]:
        """C++ parameter types for an explicit instantiation, placeholders filled from `subst`."""
        out = []
        for p in self.params:
            t = p.ctype.format(**subst)
            out.append(f"const __grid_constant__ {TMAP}" if p.kind == "tmap" else t)
        return out

    def __len__(self) -> int:
        return len(self.params)
