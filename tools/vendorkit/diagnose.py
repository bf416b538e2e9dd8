"""Why a vendored file differs: cosmetic (BOM, line endings, whitespace) or real content."""
from __future__ import annotations

import math
from dataclasses import dataclass

from . import inert
from .limits import DIFF_LINE_CHARS

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


def percent(ratio: float) -> str:
    """A similarity for people: one decimal, rounded down, so only identical files read 100."""
    if ratio >= 1.0:
        return "100"
    return f"{min(99.9, math.floor(ratio * 1000) / 10):.1f}".rstrip("0").rstrip(".")


@dataclass(frozen=True)
class Similarity:
    ratio: float        # difflib's line ratio: 0 unrelated .. 1 identical
    kept: float         # share of the release's lines the fork still has, in order
    lines: int          # the release's line count
    removed: int | None = None  # release lines not in the fork (None: not computed, files too unrelated)
    added: int | None = None

    def describe(self) -> str:
        counts = "" if self.removed is None else \
            f"{self.removed} of {self.lines} lines removed or changed, {self.added} added; "
        return f"{counts}{percent(self.ratio)} % similar"


def similarity(canon: bytes, fork: bytes) -> Similarity:
    """Line-based similarity of the fork's file to the release's. Multiset upper bounds come first, so
    unrelated files cost little."""
    import difflib

    a, b = _lines(canon), _lines(fork)
    if not a or not b:
        return Similarity(1.0 if a == b else 0.0, 1.0 if not a else 0.0, len(a))
    sm = difflib.SequenceMatcher(None, a, b, autojunk=False)
    quick = sm.quick_ratio()                 # >= ratio
    quick_kept = quick * (len(a) + len(b)) / (2 * len(a))  # >= kept
    if quick < 0.1 and quick_kept < 0.1:
        return Similarity(quick, quick_kept, len(a))
    shared = sum(m.size for m in sm.get_matching_blocks())
    return Similarity(2.0 * shared / (len(a) + len(b)), shared / len(a), len(a), len(a) - shared, len(b) - shared)


def unified_diff(canon: bytes, fork: bytes, canon_name: str, fork_name: str) -> str:
    """The whole diff (both files are under the diagnosis size cap); renderers cap what they show."""
    import difflib  # only loaded when a content diff is needed

    lines = list(difflib.unified_diff(_lines(canon), _lines(fork), fromfile=inert.text(canon_name),
                                      tofile=inert.text(fork_name)))
    return "".join(ln if ln.endswith("\n") else ln + "\n\\ No newline at end of file\n" for ln in lines)


def capped(diff: str, max_lines: int | None) -> tuple[str, int]:
    """(the first `max_lines` lines of a diff, each cut at DIFF_LINE_CHARS; how many lines were left out).
    None keeps every line."""
    lines = diff.splitlines(keepends=True)
    keep = lines if max_lines is None else lines[:max_lines]
    out = "".join(ln if len(ln) <= DIFF_LINE_CHARS else
                  ln[:DIFF_LINE_CHARS] + f" ... ({len(ln) - DIFF_LINE_CHARS:,} more characters)\n" for ln in keep)
    return out, len(lines) - len(keep)
