"""Typed kernel parameter lists: written once per family, packed into the launch buffer by name, and checked
against both the header's kernel signature and the compiled cubin's parameter table.

A kernel receives its arguments as one buffer (cuLaunchKernelEx's `extra`), laid out as the CUDA ABI lays
out the parameter constant bank: each parameter at the next multiple of its alignment, in declaration order.
Tensor maps (CUtensorMap, 128 bytes, aligned to 128 by CUDA 13's cuda.h) are left as zeros here and encoded
into their slot by the C++ runtime, which needs libcuda for that.
"""
from __future__ import annotations

import keyword
import re
import struct
from dataclasses import dataclass
from typing import Callable

TMAP = "CUtensorMap"
# base C++ type -> (struct code, size, alignment)
_SCALARS = {
    "uint32_t": ("I", 4, 4), "int32_t": ("i", 4, 4), "uint64_t": ("Q", 8, 8), "int64_t": ("q", 8, 8),
    "float": ("f", 4, 4), "bool": ("?", 1, 1), "uint16_t": ("H", 2, 2), "uint8_t": ("B", 1, 1),
}
_POINTER = ("Q", 8, 8)
_TMAP_LAYOUT = (None, 128, 128)


def _kind(ctype: str) -> str:
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
        raise ValueError(f"unsupported kernel parameter type {ctype!r} (pointers, tensor maps and "
                         f"{', '.join(_SCALARS)} are allowed)")
    return t


@dataclass(frozen=True)
class Param:
    """One kernel parameter. `ctype` is the C++ type as the explicit instantiation spells it; it may hold
    `{placeholders}` filled from the spec (e.g. "{out}*" for a pointer to the output type)."""
    name: str
    ctype: str

    @property
    def kind(self) -> str:
        return _kind(self.ctype.format_map(_AnyType()))

    @property
    def layout(self) -> tuple[str | None, int, int]:
        k = self.kind
        return _TMAP_LAYOUT if k == "tmap" else _POINTER if k == "ptr" else _SCALARS[k]


class _AnyType(dict):
    """format_map filler: any placeholder becomes a type name that classifies like the real one."""

    def __missing__(self, key: str) -> str:
        return "OutT"


def _keyword_packer(names: tuple[str, ...], pack: Callable[..., bytes]) -> Callable[..., bytes]:
    """`def pack(*, a, b, ...): return struct_pack(a, b, ...)`, generated once per list: Python itself then
    rejects a missing or misspelled argument, at a third of the cost of a **kwargs version (this runs on
    every launch)."""
    for n in names:
        if not n.isidentifier() or keyword.iskeyword(n) or n.startswith("_"):
            raise ValueError(f"kernel parameter name {n!r} is not a plain identifier")
    if not names:
        return lambda: pack()
    args = ", ".join(names)
    namespace = {"_pack": pack}
    exec(f"def pack(*, {args}):\n    return _pack({args})\n", namespace)  # noqa: S102 - names checked above
    return namespace["pack"]


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
        self.layout = tuple(layout)       # (name, offset, size, alignment) in declaration order
        self.size = off                   # bytes of the parameter buffer (the cubin's CBANK_PARAM_SIZE)
        self.tmaps = tuple(p.name for p in params if p.kind == "tmap")
        self.values = tuple(p.name for p in params if p.kind != "tmap")
        self.offsets = {name: o for name, o, _, _ in layout}
        self._struct = struct.Struct("".join(fmt))
        assert self._struct.size == self.size, (self._struct.size, self.size)
        self.pack = _keyword_packer(self.values, self._struct.pack)

    def pack(self, **values) -> bytes:  # replaced per instance by the generated keyword-only packer
        """The launch buffer from keyword values: every non-tensor-map parameter, by name (a missing or unknown
        name is a TypeError naming it)."""
        raise NotImplementedError

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


# ---------------------------------------------------------------- the header's kernel signature

def _split_top_level(text: str) -> list[str]:
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch in "(<[":
            depth += 1
        elif ch in ")>]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        parts.append("".join(cur))
    return parts


def _strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def header_signature(header_text: str, kernel: str) -> list[tuple[str, str]]:
    """[(kind, name)] of the __global__ function `kernel` as the header declares it."""
    text = _strip_comments(header_text)
    for m in re.finditer(r"\b" + re.escape(kernel) + r"\s*\(", text):
        before = text[max(0, m.start() - 400):m.start()]
        if "__global__" not in before:
            continue
        depth, i = 1, m.end()
        while depth and i < len(text):
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        out = []
        for raw in _split_top_level(text[m.end():i - 1]):
            decl = raw.split("=")[0].strip()
            mm = re.match(r"(.*?)([A-Za-z_][A-Za-z0-9_]*)\s*$", decl, re.S)
            if not mm or not mm.group(1).strip():
                raise ValueError(f"cannot read parameter {raw.strip()!r} of {kernel}")
            ctype, name = mm.group(1).strip(), mm.group(2)
            out.append((_kind(ctype), name))
        return out
    raise ValueError(f"no __global__ function {kernel} in the header")


def signature_problems(expected: ParamList, header: list[tuple[str, str]]) -> list[str]:
    """Differences between a family's parameter list and the header's kernel signature, by position: kind
    (tensor map, pointer, scalar type) and name. Names catch swaps that keep the byte layout (two uint32_t)."""
    problems = []
    if len(header) != len(expected):
        problems.append(f"the header declares {len(header)} parameters, the family {len(expected)}")
    for i, ((hkind, hname), p) in enumerate(zip(header, expected.params)):
        if (hkind, hname) != (p.kind, p.name):
            problems.append(f"parameter {i}: the header has {hkind} {hname!r}, the family declares {p.kind} {p.name!r}")
    return problems


# ---------------------------------------------------------------- the cubin's parameter table

_EIATTR_KPARAM_INFO = 0x17
_EIATTR_CBANK_PARAM_SIZE = 0x19
_EIFMT_NVAL, _EIFMT_BVAL, _EIFMT_HVAL, _EIFMT_SVAL = 1, 2, 3, 4


@dataclass(frozen=True)
class CubinKernelParams:
    name: str                                   # the (mangled) kernel name
    params: tuple[tuple[int, int, int], ...]    # (ordinal, offset, size), by ordinal
    size: int                                   # total parameter bytes (CBANK_PARAM_SIZE)


def cubin_kernel_params(cubin: bytes) -> list[CubinKernelParams]:
    """Each kernel's parameter offsets and sizes from the `.nv.info.<kernel>` sections of an ELF cubin
    (EIATTR_KPARAM_INFO records: u32 index, u16 ordinal, u16 offset, u32 flags with the size in bits 18-31)."""
    if cubin[:4] != b"\x7fELF" or cubin[4] != 2:
        raise ValueError("not a 64-bit ELF cubin")
    shoff = struct.unpack_from("<Q", cubin, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    sections = []
    for i in range(shnum):
        name, _typ, _flags, _addr, offset, size = struct.unpack_from("<IIQQQQ", cubin, shoff + i * shentsize)
        sections.append((name, offset, size))
    strtab = sections[shstrndx][1]

    def sec_name(off: int) -> str:
        start = strtab + off
        return cubin[start:cubin.index(b"\0", start)].decode()

    out = []
    for name_off, offset, size in sections:
        name = sec_name(name_off)
        if not name.startswith(".nv.info."):
            continue
        params, total, p, end = [], None, offset, offset + size
        while p < end:
            fmt, attr = cubin[p], cubin[p + 1]
            if fmt == _EIFMT_SVAL:
                n = struct.unpack_from("<H", cubin, p + 2)[0]
                payload, p = cubin[p + 4:p + 4 + n], p + 4 + n
            elif fmt in (_EIFMT_NVAL, _EIFMT_BVAL, _EIFMT_HVAL):  # 4-byte records (value, if any, in bytes 2-3)
                payload, p = cubin[p + 2:p + 4], p + 4
            else:
                raise ValueError(f"unknown .nv.info record format {fmt} in {name}")
            if attr == _EIATTR_KPARAM_INFO:
                _index, ordinal, poff, flags = struct.unpack("<IHHI", payload)
                params.append((ordinal, poff, (flags >> 18) & 0x3FFF))
            elif attr == _EIATTR_CBANK_PARAM_SIZE:
                total = struct.unpack("<H", payload)[0]
        if total is not None:
            out.append(CubinKernelParams(name[len(".nv.info."):], tuple(sorted(params)), total))
    return out


def layout_problems(expected: ParamList, found: CubinKernelParams) -> list[str]:
    """Differences between a family's parameter list and a compiled kernel's parameter table: count, order,
    sizes, and offsets relative to the first parameter (the device-side base is the compiler's: sm_90a puts
    112 bytes before a leading 128-byte-aligned CUtensorMap, sm_120a none; the driver copies each parameter
    from our buffer into its slot, so only relative placement and sizes must agree)."""
    problems = []
    if [o for o, _, _ in found.params] != list(range(len(found.params))):
        problems.append(f"the cubin's parameter ordinals are not 0..{len(found.params) - 1}")
    if len(found.params) != len(expected):
        problems.append(f"{len(found.params)} parameters in the cubin, {len(expected)} declared")
    if not found.params or not expected.layout:
        return problems
    base, fbase = expected.layout[0][1], found.params[0][1]
    for (name, off, size, align), (ordinal, foff, fsize) in zip(expected.layout, found.params):
        # equal relative offsets mean equal padding, i.e. the alignments agree as well
        if fsize != size or foff - fbase != off - base:
            problems.append(f"parameter {ordinal} ({name}): declared size {size} at +{off - base} (align {align}), "
                            f"cubin size {fsize} at +{foff - fbase} (offset {foff})")
    if found.size - fbase != expected.size - base:
        problems.append(f"parameter buffer: declared {expected.size - base} bytes after the first parameter, "
                        f"cubin {found.size - fbase}")
    return problems
