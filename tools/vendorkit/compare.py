"""The comparison engine: one fork view + the release manifests -> per-file statuses and a verdict."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from . import diagnose
from .errors import EXIT_CANNOT_CHECK, EXIT_DRIFT, EXIT_OK, CannotCheck, UsageError
from .forkview import ForkFile, ForkView, join_path as _join
from .manifest import FileEntry, Manifest, ManifestSet, is_our_name

STATUSES = ("ok", "missing", "changed", "extra", "renamed", "mode", "error")


@dataclass
class FileResult:
    path: str                       # path relative to the prefix (the canonical path)
    status: str
    diagnosis: str | None = None
    detail: str | None = None
    expected: str | None = None     # digest from the manifest
    actual: str | None = None       # digest found in the fork
    fork_path: str | None = None    # where in the fork the file is (or was looked for)
    diff: str | None = None

    def as_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items()}


@dataclass
class Report:
    mode: str                       # "fork" or "self"
    target: str                     # fork label or repo path
    tag: str | None
    prefix: str | None
    digest_kind: str
    verdict: str = "unknown"
    stale_tag: str | None = None
    files: list[FileResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        if self.verdict in ("in-sync", "released", "unreleased"):
            return EXIT_OK
        if self.verdict in ("stale", "drifted", "invalid"):
            return EXIT_DRIFT
        return EXIT_CANNOT_CHECK

    def counts(self) -> dict[str, int]:
        c = {s: 0 for s in STATUSES}
        for f in self.files:
            c[f.status] = c.get(f.status, 0) + 1
        return {k: v for k, v in c.items() if v}


def detect_prefix(paths, released: set[str]) -> str:
    """Locate the device layer inside a fork from where released paths appear."""
    found: dict[str, set[str]] = {}
    for p in paths:
        if not is_our_name(p):
            continue
        parts = p.split("/")
        for i in range(len(parts)):  # longest released suffix wins
            suffix = "/".join(parts[i:])
            if suffix in released:
                found.setdefault("/".join(parts[:i]), set()).add(suffix)
                break
    if not found:
        raise UsageError("no released device-layer file found in the fork: pass --prefix DIR")
    if len(found) > 1:
        cands = ", ".join(f"{p or '.'} ({len(s)} files)" for p, s in
                          sorted(found.items(), key=lambda kv: (-len(kv[1]), kv[0])))
        raise UsageError(f"ambiguous prefix: released files appear under {cands}; pass --prefix DIR")
    return next(iter(found))


class Comparator:
    def __init__(self, view: ForkView, manifests: ManifestSet, tag: Manifest, prefix: str,
                 canonical: Callable[[FileEntry], bytes | None] | None = None, want_diff: bool = True):
        self.view = view
        self.ms = manifests
        self.tag = tag
        self.prefix = prefix
        self.canonical = canonical
        self.want_diff = want_diff
        self.kind = view.digest_kind

    def _digest(self, f: ForkFile, errors: list[FileResult], rel: str) -> str | None:
        try:
            return self.view.digest_of(f)
        except CannotCheck as e:
            errors.append(FileResult(rel, "error", detail=str(e), fork_path=f.path))
            return None

    def _diagnose_changed(self, rel: str, entry: FileEntry, f: ForkFile, actual: str) -> FileResult:
        r = FileResult(rel, "changed", expected=entry.digest(self.kind), actual=actual,
                       fork_path=f.path)
        if f.kind == "symlink" and entry.mode != "120000":
            where = "outside the fork, not followed" if f.escapes else "not followed"
            to = f" to {f.target}" if f.target is not None else ""
            r.diagnosis, r.detail = "symlink", f"is a symlink{to} ({where})"
            return r
        if f.kind == "other":
            r.diagnosis, r.detail = "not-a-file", "is not a regular file"
            return r
        older = [t for t in self.ms.releases_with(rel, actual, self.kind) if t != self.tag.tag]
        if older:
            r.diagnosis = f"matches {older[-1]}"
            r.detail = "identical to the file released in " + ", ".join(older)
            return r
        r.diagnosis = "content"
        canon = self.canonical(entry) if self.canonical else None
        fork_bytes = self.view.read(f) if (canon is not None and self.want_diff) else None
        if canon is None or fork_bytes is None:
            r.detail = "content differs" + ("" if canon is not None else
                                            " (canonical bytes unavailable for a diff)")
            return r
        cos = diagnose.cosmetic(fork_bytes, canon)
        if cos:
            r.diagnosis, r.detail = cos
        else:
            r.detail = "content differs"
            r.diff = diagnose.unified_diff(canon, fork_bytes, f"{self.tag.tag}:{rel}", f"fork:{f.path}")
        return r

    def run(self, report: Report) -> Report:
        listing, linked_dirs = self.view.list_under(self.prefix)
        results: list[FileResult] = []
        errors: list[FileResult] = []
        missing: list[FileEntry] = []
        ours_digests: dict[str, tuple[str, str]] = {}  # rel -> (digest, mode) for stale detection

        for entry in self.tag.files:
            f = listing.get(entry.path)
            fork_path = _join(self.prefix, entry.path)
            if f is None:
                missing.append(entry)
                continue
            actual = self._digest(f, errors, entry.path)
            if actual is None:
                continue
            ours_digests[entry.path] = (actual, f.mode)
            expected = entry.digest(self.kind)
            if actual == expected and (f.kind == "symlink") == (entry.mode == "120000"):
                if f.mode != entry.mode:
                    results.append(FileResult(entry.path, "mode", detail=f"mode {f.mode}, expected {entry.mode}",
                                              expected=expected, actual=actual, fork_path=fork_path))
                else:
                    results.append(FileResult(entry.path, "ok", expected=expected, actual=actual,
                                              fork_path=fork_path))
            else:
                results.append(self._diagnose_changed(entry.path, entry, f, actual))

        released = self.ms.all_paths()
        others = {rel: f for rel, f in listing.items() if rel not in self.tag.by_path}

        # renamed: a missing file's exact bytes at another path under the prefix
        consumed: set[str] = set()
        if missing:
            sizes = {e.size for e in missing}
            by_digest: dict[str, str] = {}
            for rel, f in sorted(others.items()):
                if f.kind == "file" and f.size in sizes:
                    d = self._digest(f, errors, rel)
                    if d is not None:
                        by_digest.setdefault(d, rel)
            for entry in missing:
                rel = by_digest.get(entry.digest(self.kind))
                if rel is not None and rel not in consumed:
                    consumed.add(rel)
                    results.append(FileResult(entry.path, "renamed", detail=f"same bytes at {_join(self.prefix, rel)}",
                                              expected=entry.digest(self.kind), actual=entry.digest(self.kind),
                                              fork_path=_join(self.prefix, rel)))
                else:
                    detail = None
                    for d in linked_dirs:
                        if d == "" or entry.path.startswith(d + "/"):
                            detail = f"under {_join(self.prefix, d) or '.'}, a symlinked directory (not followed)"
                    results.append(FileResult(entry.path, "missing", detail=detail,
                                              expected=entry.digest(self.kind),
                                              fork_path=_join(self.prefix, entry.path)))

        for rel, f in sorted(others.items()):
            if rel in consumed or not (rel in released or is_our_name(rel)):
                continue
            actual = self._digest(f, errors, rel) if f.kind != "other" else None
            if actual is not None:
                ours_digests[rel] = (actual, f.mode)
            shipped = [m.tag for m in self.ms.manifests if rel in m.by_path]
            if shipped:
                detail = f"shipped by {', '.join(shipped)}; not in {self.tag.tag}"
            else:
                detail = "named like a device-layer file (sm120_*) but no release ships it"
            if f.kind == "symlink":
                detail += f"; symlink to {f.target}" + (" (outside the fork)" if f.escapes else "")
            results.append(FileResult(rel, "extra", detail=detail, actual=actual,
                                      fork_path=_join(self.prefix, rel)))

        results.extend(errors)
        results.sort(key=lambda r: (r.path, r.status))
        report.files = results
        report.verdict, report.stale_tag = self._verdict(results, ours_digests)
        if report.verdict == "stale":
            report.notes.append(f"the fork is identical to {report.stale_tag}; "
                                f"run with --sync to move it to {self.tag.tag}")
        return report

    def _verdict(self, results: list[FileResult], ours: dict[str, tuple[str, str]]) -> tuple[str, str | None]:
        if any(r.status == "error" for r in results):
            return "unknown", None
        if all(r.status == "ok" for r in results):
            return "in-sync", None
        for m in reversed(self.ms.manifests):
            if m.tag == self.tag.tag or set(m.by_path) != set(ours):
                continue
            if all(ours[p] == (e.digest(self.kind), e.mode) for p, e in m.by_path.items()):
                if m.version < self.tag.version:
                    return "stale", m.tag
                return "drifted", None
        return "drifted", None
