"""Why a vendored file differs: cosmetic (BOM, line endings, whitespace) or real content."""
from __future__ import annotations

BOM = b"\xef\xbb\xbf"
DEFAULT_DIFF_LINES = 200


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


def _lines(b: bytes) -> list[str]:
    return b.decode("utf-8", errors="replace").splitlines(keepends=True)


def similarity(canon: bytes, fork: bytes) -> tuple[float, float]:
    """(ratio, kept): difflib's line-based ratio (0 unrelated .. 1 identical) and the share of the release's
    lines the fork still has in order. Multiset upper bounds come first, so unrelated files cost little."""
    import difflib

    a, b = _lines(canon), _lines(fork)
    if not a or not b:
        return (1.0 if a == b else 0.0), (1.0 if not a else 0.0)
    sm = difflib.SequenceMatcher(None, a, b, autojunk=False)
    quick = sm.quick_ratio()                 # >= ratio
    quick_kept = quick * (len(a) + len(b)) / (2 * len(a))  # >= kept
    if quick < 0.1 and quick_kept < 0.1:
        return quick, quick_kept
    shared = sum(m.size for m in sm.get_matching_blocks())
    return 2.0 * shared / (len(a) + len(b)), shared / len(a)


def unified_diff(canon: bytes, fork: bytes, canon_name: str, fork_name: str) -> str:
    """The whole diff: renderers cap what they print (--diff-lines), JSON keeps it all."""
    import difflib  # only loaded when a content diff is needed

    lines = list(difflib.unified_diff(_lines(canon), _lines(fork), fromfile=canon_name, tofile=fork_name))
    return "".join(ln if ln.endswith("\n") else ln + "\n\\ No newline at end of file\n" for ln in lines)


def capped(diff: str, max_lines: int) -> str:
    lines = diff.splitlines(keepends=True)
    if len(lines) <= max_lines:
        return diff
    return "".join(lines[:max_lines]) + f"... diff truncated: {len(lines) - max_lines} more lines (--diff-lines N)\n"
