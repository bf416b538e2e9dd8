"""Fork-controlled text (file names, link targets, diff lines, stamp reasons) made inert for each output.

text():    no control or format characters survive (newlines, ANSI escapes, bidi overrides, line separators,
           undecodable bytes): each becomes a visible \\xNN / \\uNNNN escape, so a name cannot forge a report line,
           recolour a terminal or reorder what is shown.
md_code(): a markdown code span whose delimiter is longer than any backtick run inside, so the text cannot end
           the span; inside a code span GitHub makes no mention, link, image, reference or HTML.
html():    text() plus HTML escaping, for text that is HTML (none of it fork-controlled today).
json_safe(): a JSON-ready copy with no lone surrogate left (strict JSON readers reject them): each byte of a name
           that is not UTF-8 (os.fsdecode's surrogate escapes) becomes the four characters \\xNN, any other lone
           surrogate \\uNNNN, exactly as text() shows them.

Standard library only and no package imports: tools/sm120_vendor_verify.py inlines this file.
"""
from __future__ import annotations

import html as _html
import re
import unicodedata

# categories that draw nothing or move the cursor: controls, format (bidi, zero-width), separators, surrogates
# (undecodable bytes from os.fsdecode), private use and unassigned code points
_HIDDEN = frozenset(("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"))
_TICKS = re.compile(r"`+")


def _escape(ch: str) -> str:
    o = ord(ch)
    if 0xDC80 <= o <= 0xDCFF:  # an undecodable byte of a file name (surrogateescape): shown as that byte
        return f"\\x{o - 0xDC00:02x}"
    return f"\\x{o:02x}" if o < 0x100 else (f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}")


def text(s) -> str:
    """`s` with every hidden or control character written as an escape; plain ASCII passes unchanged."""
    s = "" if s is None else str(s)
    if s.isascii() and s.isprintable():
        return s
    return "".join(_escape(c) if unicodedata.category(c) in _HIDDEN else c for c in s)


def json_safe(obj):
    """`obj` (dicts, lists, strings, numbers) with every lone surrogate in its strings (keys included) escaped."""
    if isinstance(obj, str):
        return obj if obj.isascii() else "".join(_escape(c) if unicodedata.category(c) == "Cs" else c for c in obj)
    if isinstance(obj, dict):
        return {json_safe(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


def md_code(s, table: bool = True) -> str:
    """A code span holding `s` verbatim (after text()). `table`: the span sits in a table cell, where an
    unescaped `|` would end the cell even inside a code span."""
    s = text(s)
    if not s:
        return ""
    if table:
        s = s.replace("|", "\\|")
    fence = "`" * (max((len(m) for m in _TICKS.findall(s)), default=0) + 1)
    pad = " " if s[0] in "` " or s[-1] in "` " else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def md_fence(body: str, info: str = "") -> list[str]:
    """A fenced code block around `body` (each line through text()) that no line of it can close."""
    lines = [text(ln) for ln in body.split("\n")]
    longest = max((len(m) for ln in lines for m in _TICKS.findall(ln)), default=0)
    fence = "`" * max(3, longest + 1)
    return [f"{fence}{info}", *lines, fence]


def html(s) -> str:
    return _html.escape(text(s), quote=True)
