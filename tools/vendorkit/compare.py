"""The comparison engine: one fork view + the release manifests (+ the fork's stamp, when --sync wrote one)
-> per-file statuses and a verdict."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from . import diagnose
from .errors import EXIT_CANNOT_CHECK, EXIT_DRIFT, EXIT_OK, CannotCheck, UsageError
from .forkview import ForkFile, ForkView, join_path as _join
from .hashing import sha256_bytes
from .manifest import FileEntry, Manifest, ManifestSet, is_our_name
from .stamp import BACKUP_DIR, STAMP, VERIFIER, StampInfo, read_stamp

STATUSES = ("ok", "missing", "changed", "extra", "renamed", "mode", "patched", "foreign", "error")
# a changed file this dissimilar to the release is "replaced", not edited: no diff, just the ratio
REPLACED_BELOW = 0.35
IN_SYNC_STATUSES = ("ok", "patched", "foreign")


@dataclass
class FileResult:
    path: str                       # path relative to the prefix (the canonical path)
    status: str
    diagnosis: str | None = None
    detail: str | None = None
    expected: str | None = None     # digest from the manifest
    actual: str | None = None       # digest found in the fork
    fork_path: str | None = None    # where in the fork the file is (or was looked for)
    diff: str | None = None         # full unified diff (renderers cap it)
    similarity: float | None = None  # changed content: difflib ratio against the release (0..1)
    patch: dict | None = None       # patched: the pinned patch (reason, upstream)
    drift: bool = True              # foreign files count only when they shadow a released path or --strict

    def as_dict(self) -> dict:
        return dict(self.__dict__)


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
    stamp: dict | None = None       # {"tag", "owned", "patches", "problems"} when the fork has one
    owned: frozenset = frozenset()  # paths a trustworthy stamp owns (--sync may overwrite them, with a backup)

    @property
    def exit_code(self) -> int:
        if self.verdict in ("in-sync", "released", "unreleased"):
            return EXIT_OK
        if self.verdict in ("stale", "drifted", "invalid", "not-vendored"):
            return EXIT_DRIFT
        return EXIT_CANNOT_CHECK

    def counts(self) -> dict[str, int]:
        c = {s: 0 for s in STATUSES}
        for f in self.files:
            c[f.status] = c.get(f.status, 0) + 1
        return {k: v for k, v in c.items() if v}


def detect_prefix(paths, released: set[str], ignore: tuple[str, ...] = ()) -> str:
    """Locate the device layer inside a fork from where released paths appear. `ignore`: fork-relative
    directories to skip (a checkout of this repository inside the fork, e.g. the CI recipe's .sm120/)."""
    found: dict[str, set[str]] = {}
    ignore = (*ignore, BACKUP_DIR)
    for p in paths:
        if not is_our_name(p) or any(p == d or p.startswith(d + "/") for d in ignore if d):
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


def _matches(tags: list[str], checked: Manifest, ms: ManifestSet) -> tuple[str, str]:
    """Diagnosis for bytes equal to other releases: the nearest older one if any, else the nearest newer."""
    older = [t for t in tags if ms.by_tag[t].version < checked.version]
    newer = [t for t in tags if ms.by_tag[t].version > checked.version]
    if older:
        return f"matches {older[-1]} (older)", f"identical to the file released in {', '.join(older)}: not yet " \
                                                f"updated to {checked.tag}"
    return f"matches {newer[0]} (newer)", f"identical to the file released in {', '.join(newer)}, newer than " \
                                          f"{checked.tag}"


class Comparator:
    def __init__(self, view: ForkView, manifests: ManifestSet, tag: Manifest, prefix: str,
                 canonical: Callable[[FileEntry], bytes | None] | None = None, want_diff: bool = True,
                 strict: bool = False):
        self.view = view
        self.ms = manifests
        self.tag = tag
        self.prefix = prefix
        self.canonical = canonical
        self.want_diff = want_diff
        self.strict = strict
        self.kind = view.digest_kind

    def _digest(self, f: ForkFile, errors: list[FileResult], rel: str) -> str | None:
        try:
            return self.view.digest_of(f)
        except CannotCheck as e:
            errors.append(FileResult(rel, "error", detail=str(e), fork_path=f.path))
            return None

    def _sha256(self, f: ForkFile, digest: str) -> str | None:
        """The file's sha256 (stamps and patches speak sha256): the digest itself for sha256 views, else the
        fetched bytes' (one blob request for a github: fork)."""
        if self.kind == "sha256":
            return digest
        data = self.view.fetch(f)
        return sha256_bytes(data) if data is not None else None

    def _diagnose_changed(self, rel: str, entry: FileEntry, f: ForkFile, actual: str) -> FileResult:
        r = FileResult(rel, "changed", expected=entry.digest(self.kind), actual=actual, fork_path=f.path)
        if f.kind == "symlink" and entry.mode != "120000":
            where = "outside the fork, not followed" if f.escapes else "not followed"
            to = f" to {f.target}" if f.target is not None else ""
            r.diagnosis, r.detail = "symlink", f"is a symlink{to} ({where})"
            return r
        if f.kind == "other":
            r.diagnosis, r.detail = "not-a-file", "is not a regular file"
            return r
        others = [t for t in self.ms.releases_with(rel, actual, self.kind) if t != self.tag.tag]
        if others:
            r.diagnosis, r.detail = _matches(others, self.tag, self.ms)
            return r
        r.diagnosis = "content"
        if not self.want_diff:
            r.detail = "content differs"
            return r
        canon = self.canonical(entry) if self.canonical else None
        fork_bytes = self.view.fetch(f)
        if canon is None:
            r.detail = "content differs (this checkout cannot produce the released bytes for a diff)"
            return r
        if fork_bytes is None:
            r.detail = "content differs (the fork's bytes could not be fetched)"
            return r
        cos = diagnose.cosmetic(fork_bytes, canon)
        if cos:
            r.diagnosis, r.detail = cos
            return r
        ratio, kept = diagnose.similarity(canon, fork_bytes)
        r.similarity = round(ratio, 3)
        if ratio < REPLACED_BELOW and kept < 0.5:  # not just our file with a lot added to it
            r.diagnosis = "replaced"
            r.detail = f"replaced by an unrelated file ({round(100 * r.similarity)} % similar)"
            return r
        r.detail = f"content differs ({round(100 * r.similarity)} % similar)"
        r.diff = diagnose.unified_diff(canon, fork_bytes, f"{self.tag.tag}:{rel}", f"fork:{f.path}")
        return r

    def _load_stamp(self, listing: dict[str, ForkFile]) -> StampInfo | None:
        f = listing.get(STAMP)
        if f is None:
            return None
        return read_stamp(self.view.fetch(f), self.ms, _join(self.prefix, STAMP))

    def _vendors_our_layer(self, listing: dict[str, ForkFile], errors: list[FileResult]) -> bool:
        """Whether any file under the prefix is byte-equal to some released file (no stamp present)."""
        released = {e.digest(self.kind) for m in self.ms.manifests for e in m.files}
        for rel, f in listing.items():
            if f.kind == "other" or not (is_our_name(rel) or rel in self.tag.by_path):
                continue
            d = self._digest(f, errors, rel)
            if d is not None and d in released:
                return True
        return False

    def run(self, report: Report) -> Report:
        listing, linked_dirs = self.view.list_under(self.prefix)
        if not self.prefix:  # the vendor root is the fork root: sync backups are not part of the layer
            listing = {p: f for p, f in listing.items() if not p.startswith(BACKUP_DIR + "/")}
        results: list[FileResult] = []
        errors: list[FileResult] = []
        missing: list[FileEntry] = []
        ours_digests: dict[str, tuple[str, str]] = {}  # rel -> (digest, mode) for stale detection

        stamp = self._load_stamp(listing)
        if stamp is not None:
            report.stamp = stamp.summary()
            if not stamp.problems:
                report.owned = frozenset(stamp.owned)
            if stamp.problems:  # one finding; the JSON's stamp.problems keeps them apart
                results.append(FileResult(STAMP, "changed", diagnosis="invalid-stamp",
                                          detail="; ".join(stamp.problems), fork_path=_join(self.prefix, STAMP)))
        elif listing and not self._vendors_our_layer(listing, errors) and not errors:
            named = sum(1 for rel in listing if is_our_name(rel))
            report.verdict = "not-vendored"
            report.notes.append(f"does not vendor this layer: none of the {named} device-layer-named files under "
                                f"{self.prefix or '.'} equals a file of any release (its own SM120 headers?); "
                                f"--sync would replace them and refuses to")
            self.want_diff = False

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
                continue
            patch = None
            if stamp is not None and stamp.doc["patches"] and f.kind == "file":
                sha = self._sha256(f, actual)
                patch = stamp.patch_for(entry.path, sha, entry.sha256) if sha else None
            if patch is not None:
                why = patch["reason"] + (f" ({patch['upstream']})" if patch.get("upstream") else "")
                results.append(FileResult(entry.path, "patched", diagnosis="pinned patch", detail=why,
                                          expected=expected, actual=actual, fork_path=fork_path, patch=patch,
                                          drift=False))
            else:
                results.append(self._diagnose_changed(entry.path, entry, f, actual))

        released = self.ms.all_paths()
        others = {rel: f for rel, f in listing.items() if rel not in self.tag.by_path and rel not in (STAMP, VERIFIER)}

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
            if rel in consumed:
                continue
            if stamp is None and not (rel in released or is_our_name(rel)):
                continue  # without a stamp only files that look like ours are considered
            actual = self._digest(f, errors, rel) if f.kind != "other" else None
            if actual is not None:
                ours_digests[rel] = (actual, f.mode)
            shipped = [m.tag for m in self.ms.manifests if rel in m.by_path]
            link = (f"; symlink to {f.target}" + (" (outside the fork)" if f.escapes else "")
                    if f.kind == "symlink" else "")
            if stamp is not None and rel not in stamp.owned:
                if shipped:
                    results.append(FileResult(rel, "extra", detail=f"not owned by the stamp, at a path "
                                              f"{', '.join(shipped)} shipped (shadows a released file){link}",
                                              actual=actual, fork_path=_join(self.prefix, rel)))
                else:
                    detail = "not written by --sync (the stamp does not own it)" + (
                        "; --strict counts it as drift" if self.strict else "") + link
                    results.append(FileResult(rel, "foreign", detail=detail, actual=actual,
                                              fork_path=_join(self.prefix, rel), drift=self.strict))
                continue
            if shipped:
                detail = f"shipped by {', '.join(shipped)}; not in {self.tag.tag}"
            else:
                detail = "named like a device-layer file (sm120_*) but no release ships it"
            results.append(FileResult(rel, "extra", detail=detail + link, actual=actual,
                                      fork_path=_join(self.prefix, rel)))

        results.extend(errors)
        results.sort(key=lambda r: (r.path, r.status))
        report.files = results
        if report.verdict != "not-vendored" or errors:
            report.verdict, report.stale_tag = self._verdict(results, ours_digests)
        if report.verdict == "stale":
            report.notes.append(f"the fork is identical to {report.stale_tag}; "
                                f"run with --sync to move it to {self.tag.tag}")
        return report

    def _verdict(self, results: list[FileResult], ours: dict[str, tuple[str, str]]) -> tuple[str, str | None]:
        if any(r.status == "error" for r in results):
            return "unknown", None
        if all(r.status in IN_SYNC_STATUSES and not (r.status == "foreign" and r.drift) for r in results):
            return "in-sync", None
        for m in reversed(self.ms.manifests):
            if m.tag == self.tag.tag or set(m.by_path) != set(ours):
                continue
            if all(ours[p] == (e.digest(self.kind), e.mode) for p, e in m.by_path.items()):
                if m.version < self.tag.version:
                    return "stale", m.tag
                return "drifted", None
        return "drifted", None

