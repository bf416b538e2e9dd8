"""Why a vendored file differs: cosmetic (BOM, line endings, whitespace) or real content."""
from __future__ import annotations

BOM = b"\xef\xbb\xbf"
MAX_DIFF_LINES = 400


def _strip_bom(b: bytes) -> bytes:
    return b[3:] if b.startswith(BOM) else b


def _lf(b: bytes) -> bytes:
    return b.replace(b"\r\n", b"\n").replace(b"\r", b"\n")


def cosmetic(fork: bytes, canon: bytes) -> tuple[str, str] | None:
    """(diagnosis, detail) when the difference is only cosmetic, else None."""
    kinds = []
    if fork.startswith(BOM) != canon.startswith(BOM):
        kinds.append("a UTF-8 byte-order mark")
    f, c = _strip_bom(fork), _strip_bom(canon)
    if f == c:
        return "bom-only", "differs only by " + kinds[0]
    if _lf(f) == _lf(c):
        kinds.append("line endings (CRLF/CR vs LF)")
        if len(kinds) == 1:
            return "eol-only", "differs only in line endings (CRLF/CR vs LF)"
        return "whitespace-only", "differs only by " + " and ".join(kinds)
    if f.split() == c.split():
        kinds.append("whitespace")
        return "whitespace-only", "differs only by " + " and ".join(kinds) + " (tokens identical)"
    return None


def unified_diff(canon: bytes, fork: bytes, canon_name: str, fork_name: str) -> str:
    import difflib  # only loaded when a content diff is needed

    a = canon.decode("utf-8", errors="replace").splitlines(keepends=True)
    b = fork.decode("utf-8", errors="replace").splitlines(keepends=True)
    lines = list(difflib.unified_diff(a, b, fromfile=canon_name, tofile=fork_name))
    lines = [ln if ln.endswith("\n") else ln + "\n\\ No newline at end of file\n" for ln in lines]
    if len(lines) > MAX_DIFF_LINES:
        more = len(lines) - MAX_DIFF_LINES
        lines = lines[:MAX_DIFF_LINES] + [f"... diff truncated: {more} more lines\n"]
    return "".join(lines)
