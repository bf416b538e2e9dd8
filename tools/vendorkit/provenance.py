"""`check_vendor.py provenance SOURCE...`: per vendored file of each source, which known releases have exactly
those bytes at that path: ours (vendor_manifests/) and every imported upstream lineage
(vendor_manifests/upstreams/NAME/). Answers "which tag is this file from?" for trees that drifted from more than
one canonical source.

JSON (schema_version 1): {"schema_version": 1, "sources": [{"source": <as given>, "label", "prefix", "error",
"files": [{"path": <relative to the vendor root>, "sha256", "matches": ["<lineage>@<tag>", ...]}]}], "exit_code"}.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from . import inert
from .errors import EXIT_CANNOT_CHECK, EXIT_DRIFT, EXIT_OK, EXIT_USAGE, CannotCheck, UsageError, VendorError
from .manifest import MANIFEST_DIR, ManifestSet, is_our_name

SCHEMA_VERSION = 1
OURS = "deep_gemm_sm120"


@dataclass
class SourceResult:
    source: str
    label: str | None = None
    prefix: str | None = None
    files: list[dict] = field(default_factory=list)
    error: str | None = None
    error_code: int = 0


@dataclass
class Result:
    sources: list[SourceResult]

    @property
    def exit_code(self) -> int:
        codes = [s.error_code for s in self.sources if s.error]
        if EXIT_USAGE in codes:
            return EXIT_USAGE
        if codes:
            return EXIT_CANNOT_CHECK
        if any(not f["matches"] for s in self.sources for f in s.files):
            return EXIT_DRIFT
        return EXIT_OK


class Index:
    """(path, sha256) -> the releases that shipped those bytes there, ours first, then each lineage by name."""

    def __init__(self, sets: list[ManifestSet]):
        self.sets = sets
        self.paths: set[str] = set()
        self._by: dict[tuple[str, str], list[str]] = {}
        for ms in sets:
            for m in ms.manifests:
                for e in m.files:
                    label = f"{ms.lineage or OURS}@{m.tag}"
                    self._by.setdefault((e.path, e.sha256), []).append(label)
                    if e.git_blob_sha1:
                        self._by.setdefault((e.path, e.git_blob_sha1), []).append(label)
            self.paths |= ms.all_paths()

    def matches(self, path: str, digest: str, kind: str = "sha256") -> list[str]:
        """Releases whose file at `path` has this digest (a sha256, or a git blob id: lineages imported from
        hashes only have no blob ids, so a blob id can match only ours and tree-imported lineages)."""
        return list(self._by.get((path, digest), []))

    def named_like(self, path: str) -> bool:
        return is_our_name(path) or path in self.paths


def load_index(repo: str) -> Index:
    import os

    from . import lineage

    sets = [ManifestSet.load_dir(os.path.join(repo, MANIFEST_DIR))]
    sets += [lineage.load(repo, name) for name in lineage.names(repo)]
    return Index(sets)


def _read(res: SourceResult, view, index: Index, prefix: str | None) -> None:
    from .compare import detect_prefix

    res.label = view.label
    res.prefix = prefix.strip("/") if prefix is not None else detect_prefix(view.iter_paths(), index.paths)
    listing, blocked = view.list_under(res.prefix)
    for rel, f in sorted(listing.items()):
        if f.kind != "file" or not index.named_like(rel) or f.too_large:
            continue
        sha = view.digest_of(f)
        res.files.append({"path": rel, "sha256": sha, "matches": index.matches(rel, sha)})
    for raw_finding in getattr(view, "findings", lambda p: [])(res.prefix):
        res.files.append({"path": raw_finding.path, "sha256": None, "matches": [], "finding": raw_finding.diagnosis})


def _guarded(res: SourceResult, fn) -> None:
    try:
        fn()
    except VendorError as e:
        res.error, res.error_code = str(e), e.exit_code
    except OSError as e:
        res.error, res.error_code = str(e) or type(e).__name__, EXIT_CANNOT_CHECK


def _one(
    spec: str, index: Index, prefix: str | None, api_url: str | None, index_url: str | None, ranges: bool = False
) -> list[SourceResult]:
    """One result per tree: a source, or each file of a pypi: release."""
    from .sources import open_source

    res = SourceResult(spec)
    out = [res]
    view = None

    def open_it():
        nonlocal view
        view = open_source(spec, api_url, index_url, sha256=True, ranges=ranges)

    _guarded(res, open_it)
    if view is None:
        return out
    if not hasattr(view, "parts"):
        _guarded(res, lambda: _read(res, view, index, prefix))
        return out
    out = []
    parts = view.parts()
    while True:
        part = SourceResult(spec)
        try:
            dist, tree = next(parts)
        except StopIteration:
            break
        except VendorError as e:  # a file of the release could not be downloaded or opened
            part.label, part.error, part.error_code = view.label, str(e), e.exit_code
            out.append(part)
            break
        except OSError as e:
            part.label, part.error, part.error_code = view.label, str(e) or type(e).__name__, EXIT_CANNOT_CHECK
            out.append(part)
            break
        _guarded(part, lambda: _read(part, tree, index, prefix))
        part.label = part.label or view.part_label(dist)
        out.append(part)
    return out or [res]


def run(
    repo: str,
    specs: list[str],
    prefix: str | None = None,
    api_url: str | None = None,
    index_url: str | None = None,
    ranges: bool = False,
) -> Result:
    index = load_index(repo)
    return Result([r for s in specs for r in _one(s, index, prefix, api_url, index_url, ranges)])


# ---------------------------------------------------------------- rendering


def _compact(matches: list[str]) -> str:
    """`deepgemm-sm120@v0.1.0,v0.1.1` for matches of one lineage; lineages separated by `; `."""
    by: dict[str, list[str]] = {}
    for m in matches:
        name, _, tag = m.rpartition("@")
        by.setdefault(name, []).append(tag)
    return "; ".join(f"{name}@{','.join(tags)}" for name, tags in by.items())


def _table(result: Result) -> tuple[list[str], list[list[str]]]:
    heads = [f"[{i + 1}]" for i in range(len(result.sources))]
    paths = sorted({f["path"] for s in result.sources for f in s.files})
    rows = []
    for p in paths:
        row = [p]
        for s in result.sources:
            f = next((x for x in s.files if x["path"] == p), None)
            row.append("-" if f is None else (f.get("finding") or _compact(f["matches"]) or "NONE"))
        rows.append(row)
    return heads, rows


def to_text(result: Result) -> str:
    t = inert.text
    out = ["provenance: which known release has each vendored file's bytes (NONE: no release has them)"]
    for i, s in enumerate(result.sources):
        where = f" (vendor root {t(s.prefix or '.')})" if s.prefix is not None else ""
        out.append(f"  [{i + 1}] {t(s.label or s.source)}{where}" + (f"  error: {t(s.error)}" if s.error else ""))
    heads, rows = _table(result)
    if rows:
        cells = [["file", *heads]] + [[t(c) for c in r] for r in rows]
        widths = [max(len(r[i]) for r in cells) for i in range(len(cells[0]))]
        for r in cells:
            out.append("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    unmatched = sum(1 for s in result.sources for f in s.files if not f["matches"])
    out.append(
        f"exit {result.exit_code}: {unmatched} file(s) match no known release"
        if result.exit_code in (EXIT_OK, EXIT_DRIFT)
        else f"exit {result.exit_code}: a source could not be checked"
    )
    return "\n".join(out) + "\n"


def to_markdown(result: Result) -> str:
    c = inert.md_code
    out = ["### provenance of vendored files", ""]
    for i, s in enumerate(result.sources):
        out.append(
            f"- [{i + 1}] {c(s.label or s.source, False)}"
            + (f" (vendor root {c(s.prefix or '.', False)})" if s.prefix is not None else "")
            + (f": could not check: {c(s.error, False)}" if s.error else "")
        )
    heads, rows = _table(result)
    if rows:
        out += ["", "| file | " + " | ".join(heads) + " |", "|---|" + "---|" * len(heads)]
        out += ["| " + " | ".join(c(x) for x in r) + " |" for r in rows]
    return "\n".join(out) + "\n"


def to_json(result: Result) -> str:
    doc = {
        "schema_version": SCHEMA_VERSION,
        "exit_code": result.exit_code,
        "sources": [
            {"source": s.source, "label": s.label, "prefix": s.prefix, "error": s.error, "files": s.files}
            for s in result.sources
        ],
    }
    return json.dumps(inert.json_safe(doc), indent=2) + "\n"


def render(result: Result, fmt: str) -> str:
    return {"json": to_json, "markdown": to_markdown}.get(fmt, to_text)(result)


__all__ = ["run", "render", "Result", "SourceResult", "load_index", "CannotCheck", "UsageError"]
