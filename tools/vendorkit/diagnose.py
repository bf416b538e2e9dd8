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
    ratio: float  # 2 * shared lines / all lines: 0 unrelated .. 1 identical
    kept: float  # share of the release's lines the fork still has, in order
    lines: int  # the release's line count
    removed: int | None = None  # release lines not in the fork (None: not computed, files too unrelated)
    added: int | None = None

    def describe(self) -> str:
        counts = (
            ""
            if self.removed is None
            else f"{self.removed} of {self.lines} lines removed or changed, {self.added} added; "
        )
        return f"{counts}{percent(self.ratio)} % similar"


WORK_CAP = 3_000_000  # steps of one diff search (O((N+M)·D)); a file of the cap's size changed throughout is over it


class OverWorkCap(Exception):
    """The diff would take more than WORK_CAP steps: no similarity, no diff (a bounded finding)."""


def _opcodes(a: list, b: list, cap: int = WORK_CAP) -> list[tuple[str, int, int, int, int]]:
    """A shortest edit script of a -> b as (tag, i1, i2, j1, j2) runs, tag "equal", "delete", "insert" or
    "replace" (Myers' O((N+M)·D) search after the common prefix and suffix are cut off). OverWorkCap past
    `cap` steps, whatever the input."""
    n, m = len(a), len(b)
    lo = 0
    while lo < n and lo < m and a[lo] == b[lo]:
        lo += 1
    hi_a, hi_b = n, m
    while hi_a > lo and hi_b > lo and a[hi_a - 1] == b[hi_b - 1]:
        hi_a, hi_b = hi_a - 1, hi_b - 1
    ids: dict = {}
    x_seq = [ids.setdefault(v, len(ids)) for v in a[lo:hi_a]]  # lines as small ints: fast comparisons
    y_seq = [ids.setdefault(v, len(ids)) for v in b[lo:hi_b]]
    pairs = _lcs_pairs(x_seq, y_seq, cap)
    out: list[tuple[str, int, int, int, int]] = []
    if lo:
        out.append(("equal", 0, lo, 0, lo))
    i = j = 0
    for x, y, run in pairs + [(len(x_seq), len(y_seq), 0)]:
        if i < x or j < y:
            tag = "replace" if i < x and j < y else ("delete" if i < x else "insert")
            out.append((tag, lo + i, lo + x, lo + j, lo + y))
        if run:
            out.append(("equal", lo + x, lo + x + run, lo + y, lo + y + run))
        i, j = x + run, y + run
    if hi_a < n:
        out.append(("equal", hi_a, n, hi_b, m))
    return out


def _lcs_pairs(x: list[int], y: list[int], cap: int) -> list[tuple[int, int, int]]:
    """Runs (i, j, length) of a longest common subsequence of x and y, in order (Myers' greedy search,
    keeping each round's frontier to walk back)."""
    n, m = len(x), len(y)
    if not n or not m:
        return []
    offset = n + m
    v = [0] * (2 * offset + 2)
    trace = []
    work = 0
    found = None
    for d in range(n + m + 1):
        trace.append(v[offset - d : offset + d + 2] if d else [])
        for k in range(-d, d + 1, 2):
            if k == -d or (k != d and v[offset + k - 1] < v[offset + k + 1]):
                i = v[offset + k + 1]
            else:
                i = v[offset + k - 1] + 1
            j = i - k
            start = i
            while i < n and j < m and x[i] == y[j]:
                i, j = i + 1, j + 1
            work += 1 + i - start
            v[offset + k] = i
            if i >= n and j >= m:
                found = d
                break
        if work > cap:
            raise OverWorkCap()
        if found is not None:
            break
    assert found is not None  # the search ends by round n + m: no edit script is longer than n + m
    runs: list[tuple[int, int, int]] = []
    i, j = n, m
    for d in range(found, 0, -1):
        prev = trace[d]  # the frontier before round d: covers diagonals -d+1 .. d-1, at index k + d
        k = i - j

        def at(kk: int) -> int:
            return prev[kk + d] if -d < kk < d else -1

        if k == -d or (k != d and at(k - 1) < at(k + 1)):
            pk = k + 1
            pi = at(pk)
            pj = pi - pk
            mi, mj = pi, pj + 1  # an insertion of y[pj]
        else:
            pk = k - 1
            pi = at(pk)
            pj = pi - pk
            mi, mj = pi + 1, pj  # a deletion of x[pi]
        if i > mi:
            runs.append((mi, mj, i - mi))
        i, j = pi, pj
    if i > 0:
        runs.append((0, 0, i))
    runs.reverse()
    return runs


def compare(canon: bytes, fork: bytes) -> tuple[Similarity, list | None]:
    """(line-based similarity of the fork's file to the release's, the edit script it comes from, or None when
    the files are so unrelated that a multiset upper bound already says so). OverWorkCap when the files are too
    large and too different to compare within the work cap."""
    from collections import Counter

    a, b = _lines(canon), _lines(fork)
    if not a or not b:
        return Similarity(1.0 if a == b else 0.0, 1.0 if not a else 0.0, len(a)), None
    bound = sum((Counter(a) & Counter(b)).values())  # >= the shared lines of any alignment
    quick, quick_kept = 2.0 * bound / (len(a) + len(b)), bound / len(a)
    if quick < 0.1 and quick_kept < 0.1:
        return Similarity(quick, quick_kept, len(a)), None
    ops = _opcodes(a, b)
    shared = sum(i2 - i1 for tag, i1, i2, _, _ in ops if tag == "equal")
    sim = Similarity(2.0 * shared / (len(a) + len(b)), shared / len(a), len(a), len(a) - shared, len(b) - shared)
    return sim, ops


def similarity(canon: bytes, fork: bytes) -> Similarity:
    return compare(canon, fork)[0]


def _span(start: int, stop: int) -> str:
    """A unified-diff range: `start,length` 1-based, `start` alone for one line, `start-1,0` for none."""
    length = stop - start
    if length == 1:
        return str(start + 1)
    return f"{start if not length else start + 1},{length}"


def unified_diff(
    canon: bytes, fork: bytes, canon_name: str, fork_name: str, context: int = 3, ops: list | None = None
) -> str:
    """The whole diff (both files are under the diagnosis size cap); renderers cap what they show. `ops`: the
    edit script compare() found, when it did. OverWorkCap when it cannot be found within the work cap."""
    a, b = _lines(canon), _lines(fork)
    ops = _opcodes(a, b) if ops is None else ops
    if all(op[0] == "equal" for op in ops):
        return ""
    hunks: list[list[tuple]] = [[]]
    for n, op in enumerate(ops):  # cut long equal runs down to the context, splitting hunks between them
        tag, i1, i2, j1, j2 = op
        if tag == "equal":
            first, last = n == 0, n == len(ops) - 1
            if i2 - i1 > (context if first or last else 2 * context):
                if not first:
                    hunks[-1].append(("equal", i1, i1 + context, j1, j1 + context))
                if not last:
                    hunks.append([("equal", i2 - context, i2, j2 - context, j2)])
                continue
        hunks[-1].append(op)
    out = [f"--- {inert.text(canon_name)}\n", f"+++ {inert.text(fork_name)}\n"]
    for h in hunks:
        if not any(op[0] != "equal" for op in h):
            continue
        out.append(f"@@ -{_span(h[0][1], h[-1][2])} +{_span(h[0][3], h[-1][4])} @@\n")
        for tag, i1, i2, j1, j2 in h:
            if tag == "equal":
                out += [" " + ln for ln in a[i1:i2]]
                continue
            out += ["-" + ln for ln in a[i1:i2]]
            out += ["+" + ln for ln in b[j1:j2]]
    return "".join(ln if ln.endswith("\n") else ln + "\n\\ No newline at end of file\n" for ln in out)


def capped(diff: str, max_lines: int | None) -> tuple[str, int]:
    """(the first `max_lines` lines of a diff, each cut at DIFF_LINE_CHARS; how many lines were left out).
    None keeps every line."""
    lines = diff.splitlines(keepends=True)
    keep = lines if max_lines is None else lines[:max_lines]
    out = "".join(
        ln
        if len(ln) <= DIFF_LINE_CHARS
        else ln[:DIFF_LINE_CHARS] + f" ... ({len(ln) - DIFF_LINE_CHARS:,} more characters)\n"
        for ln in keep
    )
    return out, len(lines) - len(keep)
