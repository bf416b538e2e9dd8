"""Readers the tests use to check a family's parameter list (core/params.py) against the kernel it describes:
the __global__ signature in the header, and the parameter table (.nv.info) of a compiled cubin."""

from __future__ import annotations

import os
import re
import struct
import sys
from dataclasses import dataclass

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))
import host_decls

_params = host_decls.load("core.params")
ParamList, kind_of = _params.ParamList, _params.kind_of


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
        before = text[max(0, m.start() - 400) : m.start()]
        if "__global__" not in before:
            continue
        depth, i = 1, m.end()
        while depth and i < len(text):
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        out = []
        for raw in _split_top_level(text[m.end() : i - 1]):
            decl = raw.split("=")[0].strip()
            mm = re.match(r"(.*?)([A-Za-z_][A-Za-z0-9_]*)\s*$", decl, re.S)
            if not mm or not mm.group(1).strip():
                raise ValueError(f"cannot read parameter {raw.strip()!r} of {kernel}")
            ctype, name = mm.group(1).strip(), mm.group(2)
            out.append((kind_of(ctype), name))
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
    name: str  # the (mangled) kernel name
    params: tuple[tuple[int, int, int], ...]  # (ordinal, offset, size), by ordinal
    size: int  # total parameter bytes (CBANK_PARAM_SIZE)


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
        return cubin[start : cubin.index(b"\0", start)].decode()

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
                payload, p = cubin[p + 4 : p + 4 + n], p + 4 + n
            elif fmt in (_EIFMT_NVAL, _EIFMT_BVAL, _EIFMT_HVAL):  # 4-byte records (value, if any, in bytes 2-3)
                payload, p = cubin[p + 2 : p + 4], p + 4
            else:
                raise ValueError(f"unknown .nv.info record format {fmt} in {name}")
            if attr == _EIATTR_KPARAM_INFO:
                _index, ordinal, poff, flags = struct.unpack("<IHHI", payload)
                params.append((ordinal, poff, (flags >> 18) & 0x3FFF))
            elif attr == _EIATTR_CBANK_PARAM_SIZE:
                total = struct.unpack("<H", payload)[0]
        if total is not None:
            out.append(CubinKernelParams(name[len(".nv.info.") :], tuple(sorted(params)), total))
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
            problems.append(
                f"parameter {ordinal} ({name}): declared size {size} at +{off - base} (align {align}), "
                f"cubin size {fsize} at +{foff - fbase} (offset {foff})"
            )
    if found.size - fbase != expected.size - base:
        problems.append(
            f"parameter buffer: declared {expected.size - base} bytes after the first parameter, "
            f"cubin {found.size - fbase}"
        )
    return problems
