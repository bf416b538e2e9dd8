"""The comparison engine: one fork view + the release manifests (+ the fork's stamp, when --sync wrote one)
-> per-file statuses and a verdict."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from . import diagnose, verifier_gen
from .errors import EXIT_CANNOT_CHECK, EXIT_DRIFT, EXIT_OK, CannotCheck, UsageError
from .forkview import ForkFile, ForkView
from .forkview import join_path as _join
from .hashing import sha256_bytes
from .limits import DIAGNOSE_MAX_BYTES, MEMBER_MAX_BYTES, STAMP_MAX_BYTES
from .manifest import FileEntry, Manifest, ManifestSet, fold, folds_to_itself
from .stamp import BACKUP_DIR, STAMP, VERIFIER, StampInfo, read_stamp, unusable_stamp

STATUSES = ("ok", "missing", "changed", "extra", "renamed", "mode", "patched", "foreign", "unsafe", "error")
# a changed file this dissimilar to the release is "replaced", not edited: no diff, just the ratio
REPLACED_BELOW = 0.35
IN_SYNC_STATUSES = ("ok", "patched", "foreign")
# findings that no release explains: a fork showing one is drifted, never merely stale
UNSTALE = (
    "unsafe-member",
    "duplicate-member",
    "invalid-stamp",
    "too-large",
    "hardlink",
    "checkout-attributes",
    "case-twin",
    "beside-verifier",
)
_BESIDE = (
    "importable by Python from the directory of the offline verifier: an interpreter that does not isolate "
    "itself (python without -I, or a verifier older than this check_vendor) imports it in place of the "
    "standard library module it names"
)
_TWIN = (
    "on file systems that ignore case or Unicode normalization (macOS, Windows) {} and this path are one "
    "file: which bytes land there depends on the order of writing"
)


@dataclass
class FileResult:
    path: str  # path relative to the prefix (the canonical path)
    status: str
    diagnosis: str | None = None
    detail: str | None = None
    expected: str | None = None  # digest from the manifest
    actual: str | None = None  # digest found in the fork
    fork_path: str | None = None  # where in the fork the file is (or was looked for)
    diff: str | None = None  # unified diff (renderers cap it at --diff-lines unless --full-diffs)
    similarity: float | None = None  # changed content: difflib ratio against the release (0..1)
    patch: dict | None = None  # patched: the pinned patch (reason, upstream)
    drift: bool = True  # foreign files count only when they shadow a released path or --strict
    dist: str | None = None  # the file of a multi-file release (a pypi: wheel or sdist) this is from

    def __post_init__(self) -> None:
        if self.status == "ok":  # an identical file is never drift
            self.drift = False

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class Report:
    mode: str  # "fork" or "self"
    target: str  # fork label or repo path
    tag: str | None
    prefix: str | None
    digest_kind: str
    verdict: str = "unknown"
    stale_tag: str | None = None
    files: list[FileResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    stamp: dict | None = None  # {"tag", "owned", "patches", "problems"} when the fork has one
    lineage: str | None = None  # the upstream lineage compared with (None: our releases)
    owned: frozenset = frozenset()  # paths a trustworthy stamp owns (--sync may overwrite them, with a backup)
    distributions: list | None = None  # a multi-file release: what each file is and its verdict
    trust: dict | None = None  # {"status", "detail", "finding", "signer", "pin"}: vendorkit.forktrust

    @property
    def exit_code(self) -> int:
        if self.verdict in ("in-sync", "released", "unreleased"):
            return EXIT_OK
        if self.verdict in ("stale", "drifted", "invalid", "not-vendored", "untrusted"):
            return EXIT_DRIFT
        return EXIT_CANNOT_CHECK

    @classmethod
    def from_dict(cls, d: dict, owned=()) -> Report:
        """The report a JSON document (render.to_json) describes; `owned`: the paths its stamp owns."""
        fields = set(FileResult.__dataclass_fields__)
        r = cls(
            mode=d["mode"],
            target=d["target"],
            tag=d["tag"],
            prefix=d["prefix"],
            digest_kind=d["digest"],
            verdict=d["verdict"],
            stale_tag=d["stale_tag"],
            notes=list(d["notes"]),
            errors=list(d["errors"]),
            stamp=d["stamp"],
            lineage=d["lineage"],
            owned=frozenset(owned),
            distributions=d.get("distributions"),
            trust=d.get("trust"),
        )
        r.files = [FileResult(**{k: v for k, v in f.items() if k in fields}) for f in d["files"]]
        return r

    def counts(self) -> dict[str, int]:
        c = {s: 0 for s in STATUSES}
        for f in self.files:
            c[f.status] = c.get(f.status, 0) + 1
        return {k: v for k, v in c.items() if v}


class AmbiguousPrefix(UsageError):
    """Released files appear under more than one directory (exit 3, naming them)."""


def detect_prefix(paths, released: set[str], ignore: tuple[str, ...] = ()) -> str:
    """Locate the device layer inside a fork: where its stamp is, else where released paths appear; two or more
    places are ambiguous (exit 3, naming them). A stamp anchors the detection, so releases that list the same
    files one directory deeper or shallower cannot move the check away from the stamp (and its pin); released
    files outside the stamp's directory are a second copy (ambiguous). `ignore`: fork-relative directories to
    skip, which only the caller decides (this checkout, when it lives inside the fork: the CI recipe's .sm120/).
    Nothing the fork holds is a reason to skip a candidate: a planted `vendor_manifests/` beside a copy does not
    make it "a checkout of this repository", so it cannot make the detection pick a decoy."""
    found: dict[str, set[str]] = {}
    stamps: set[str] = set()
    outside: dict[str, list[str]] = {}  # released-looking files by the directory they would be vendored under
    ignore = (*ignore, BACKUP_DIR)
    names = {r.rsplit("/", 1)[-1] for r in released}
    for p in paths:
        base = p.rsplit("/", 1)[-1]
        if any(p == d or p.startswith(d + "/") for d in ignore if d):
            continue
        if base == STAMP:
            stamps.add(p.rsplit("/", 1)[0] if "/" in p else "")
            continue
        if base not in names:
            continue
        parts = p.split("/")
        for i in range(len(parts)):  # longest released suffix wins
            suffix = "/".join(parts[i:])
            if suffix in released:
                found.setdefault("/".join(parts[:i]), set()).add(suffix)
                outside.setdefault("/".join(parts[:i]), []).append(p)
                break
    if len(stamps) > 1:
        raise AmbiguousPrefix(
            f"ambiguous prefix: stamps ({STAMP}) under {', '.join(d or '.' for d in sorted(stamps))}; pass --prefix DIR"
        )
    if stamps:
        (anchor,) = stamps
        under = (lambda p: p.startswith(anchor + "/")) if anchor else (lambda p: True)
        others = sorted({c for c, ps in outside.items() for p in ps if not under(p)})
        if others:
            cands = ", ".join(
                [f"{anchor or '.'} (the stamp)"] + [f"{c or '.'} ({len(found[c])} files)" for c in others]
            )
            raise AmbiguousPrefix(f"ambiguous prefix: released files appear under {cands}; pass --prefix DIR")
        return anchor
    if not found:
        raise UsageError("no released device-layer file found in the fork: pass --prefix DIR")
    if len(found) > 1:
        cands = ", ".join(
            f"{p or '.'} ({len(s)} files)" for p, s in sorted(found.items(), key=lambda kv: (-len(kv[1]), kv[0]))
        )
        raise AmbiguousPrefix(f"ambiguous prefix: released files appear under {cands}; pass --prefix DIR")
    return next(iter(found))


def _matches(tags: list[str], checked: Manifest, ms: ManifestSet) -> tuple[str, str]:
    """Diagnosis for bytes equal to other releases: the nearest older one if any, else the nearest newer."""
    older = [ms.label(t) for t in tags if ms.by_tag[t].version < checked.version]
    newer = [ms.label(t) for t in tags if ms.by_tag[t].version > checked.version]
    if older:
        return (
            f"matches {older[-1]} (older)",
            f"identical to the file released in {', '.join(older)}: not yet updated to {checked.label}",
        )
    return (
        f"matches {newer[0]} (newer)",
        f"identical to the file released in {', '.join(newer)}, newer than {checked.label}",
    )


class Comparator:
    def __init__(
        self,
        view: ForkView,
        manifests: ManifestSet,
        tag: Manifest,
        prefix: str,
        canonical: Callable[[FileEntry], bytes | None] | None = None,
        want_diff: bool = True,
        strict: bool = False,
        ignore: tuple[str, ...] = (),
    ):
        self.view = view
        self.ignore = ignore  # fork-relative directories that are not the fork's (this checkout, inside it)
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
            if not any(x.path == rel for x in errors):
                errors.append(FileResult(rel, "error", detail=str(e), fork_path=f.path))
            return None

    def _could_match(self, rel: str, f: ForkFile) -> bool:
        """Whether `f`'s digest is worth reading: it could hold the bytes some release shipped at `rel`, or it is
        small enough to diagnose anyway. False for a large file of a size no release has: never read."""
        if f.kind != "file" or self.kind != "sha256" or f.size <= DIAGNOSE_MAX_BYTES:
            return True
        sizes = {m.by_path[rel].size for m in self.ms.manifests if rel in m.by_path}
        return not sizes or None in sizes or f.size in sizes

    def _twins(self, listing: dict[str, ForkFile]) -> dict[str, list[str]]:
        """rel -> the other paths a case- or normalization-insensitive file system makes the same file, for each
        path under the prefix that has such a twin there or among the released paths, when one of them is
        named like ours."""
        groups: dict[str, list[str]] = {}
        for rel in listing:
            groups.setdefault(rel if folds_to_itself(rel) else fold(rel), []).append(rel)
        released = self.ms.folded_paths()
        out: dict[str, list[str]] = {}
        for key, rels in groups.items():
            rel0 = released.get(key)
            group = sorted(set(rels) | ({rel0} if rel0 else set()))
            if len(group) > 1 and any(self.ms.named_like(r) for r in group):
                for r in rels:
                    out[r] = [x for x in group if x != r]
        return out

    @staticmethod
    def _beside_verifier(listing: dict[str, ForkFile]) -> set[str]:
        """Entries of the vendor root Python would import from the verifier's directory: modules and extension
        modules (any suffix the interpreter loads), .pth files, packages (a directory with __init__) and the
        bytecode cache."""
        import importlib.machinery

        suffixes = tuple(importlib.machinery.all_suffixes()) + (".pth",)
        out = set()
        for rel in listing:
            top, _, rest = rel.partition("/")
            if rel == VERIFIER:
                continue
            if (
                (not rest and top.endswith(suffixes))
                or top == "__pycache__"
                or (rest.startswith("__init__.") and "/" not in rest)
            ):
                out.add(rel)
        return out

    def _sha256(self, f: ForkFile, digest: str) -> str | None:
        """The file's sha256 (stamps and patches speak sha256): the digest itself for sha256 views, else the
        fetched bytes' (one blob request for a github: fork)."""
        if self.kind == "sha256":
            return digest
        data = self.view.fetch(f, DIAGNOSE_MAX_BYTES)
        return sha256_bytes(data) if data is not None else None

    def _diagnose_changed(
        self,
        rel: str,
        entry: FileEntry,
        f: ForkFile,
        actual: str | None,
        canon: bytes | None = None,
        what: str = "the release",
    ) -> FileResult:
        r = FileResult(rel, "changed", expected=entry.digest(self.kind), actual=actual, fork_path=f.path)
        if f.kind == "symlink" and entry.mode != "120000":
            where = "outside the fork, not followed" if f.escapes else "not followed"
            to = f" to {f.target}" if f.target is not None else ""
            r.diagnosis, r.detail = "symlink", f"is a symlink{to} ({where})"
            return r
        if f.kind == "hardlink":
            r.diagnosis, r.detail = (
                "hardlink",
                f"is a hard link to {f.target} (an installer writes that member's bytes)",
            )
            return r
        if f.kind == "other":
            r.diagnosis, r.detail = "not-a-file", "is not a regular file"
            return r
        if f.too_large:
            r.diagnosis, r.detail = "too-large", f.too_large
            return r
        others = [t for t in self.ms.releases_with(rel, actual, self.kind) if t != self.tag.tag] if actual else []
        if others:
            r.diagnosis, r.detail = _matches(others, self.tag, self.ms)
            return r
        r.diagnosis = "content"
        if not self.want_diff:
            r.detail = "content differs"
            return r
        if max(f.size, entry.size or 0) > DIAGNOSE_MAX_BYTES:
            r.detail = (
                f"content differs ({f.size:,} bytes, {what} {entry.size or 0:,}; over the "
                f"{DIAGNOSE_MAX_BYTES >> 20} MiB diagnosis cap: no diff)"
            )
            return r
        if canon is None and self.canonical is not None:
            canon = self.canonical(entry)
        if canon is None:
            r.detail = "content differs (this checkout cannot produce the released bytes for a diff)"
            return r
        fork_bytes = self.view.fetch(f, DIAGNOSE_MAX_BYTES)
        if fork_bytes is None:
            r.detail = "content differs (the fork's bytes could not be fetched)"
            return r
        cos = diagnose.cosmetic(fork_bytes, canon)
        if cos:
            r.diagnosis, r.detail = cos
            return r
        try:
            sim, ops = diagnose.compare(canon, fork_bytes)
        except diagnose.OverWorkCap:
            mine, theirs = fork_bytes.count(b"\n"), canon.count(b"\n")
            r.detail = (
                f"content differs ({mine:,} lines, {what} {theirs:,}; too different to compare within "
                f"the diagnosis work cap: no similarity or diff)"
            )
            return r
        r.similarity = round(sim.ratio, 3)
        if sim.ratio < REPLACED_BELOW and sim.kept < 0.5:  # not just our file with a lot added to it
            r.diagnosis = "replaced"
            r.detail = f"replaced by an unrelated file ({diagnose.percent(sim.ratio)} % similar)"
            return r
        r.detail = f"content differs ({sim.describe()})"
        r.diff = diagnose.unified_diff(canon, fork_bytes, f"{self.tag.tag}:{rel}", f"fork:{f.path}", ops=ops)
        return r

    def _load_stamp(self, listing: dict[str, ForkFile]) -> StampInfo | None:
        f = listing.get(STAMP)
        if f is None:
            return None
        where = _join(self.prefix, STAMP)
        if f.kind != "file":
            what = f"a symlink to {f.target}" if f.kind == "symlink" else "not a regular file"
            return unusable_stamp(f"{where} is {what} (not followed)")
        if f.size > STAMP_MAX_BYTES:
            return unusable_stamp(f"{where} is larger than {STAMP_MAX_BYTES >> 20} MiB (not read)")
        return read_stamp(self.view.fetch(f, STAMP_MAX_BYTES), self.ms, where)

    def _verifier_result(self, f: ForkFile | None, stamp: StampInfo | None) -> FileResult | None:
        """The offline verifier is an owned file: its bytes must be the ones --sync writes for the release the
        stamp names (the checked tag when there is no trustworthy stamp)."""
        if f is None and stamp is None:
            return None
        release = self.ms.by_tag.get(stamp.doc["tag"]) if stamp is not None and not stamp.problems else None
        release = release or self.tag
        expected = verifier_gen.digest(release, self.kind)
        fork_path = _join(self.prefix, VERIFIER)
        if f is None:
            return FileResult(
                VERIFIER,
                "missing",
                detail=f"the offline verifier --sync writes for {release.tag}",
                expected=expected,
                fork_path=fork_path,
            )
        entry = FileEntry(
            VERIFIER,
            verifier_gen.digest(release, "sha256"),
            verifier_gen.digest(release, "git"),
            len(verifier_gen.build(release)),
            "100755",
        )
        actual = None if f.kind != "file" or f.too_large else self.view.digest_of(f)
        if actual == expected:
            if f.mode != entry.mode:
                return FileResult(
                    VERIFIER,
                    "mode",
                    detail=f"mode {f.mode}, expected {entry.mode}",
                    expected=expected,
                    actual=actual,
                    fork_path=fork_path,
                )
            return FileResult(VERIFIER, "ok", expected=expected, actual=actual, fork_path=fork_path)
        if actual is not None:
            sha = self._sha256(f, actual)
            older = [m.tag for m in self.ms.manifests if verifier_gen.digest(m, self.kind) == actual]
            if older:
                diag, detail = _matches(older, release, self.ms)
                return FileResult(
                    VERIFIER,
                    "changed",
                    diagnosis=diag,
                    detail=f"{detail} (the verifier)",
                    expected=expected,
                    actual=actual,
                    fork_path=fork_path,
                )
            if sha in verifier_gen.LEGACY:
                return FileResult(
                    VERIFIER,
                    "changed",
                    diagnosis="older-verifier",
                    detail=f"written by {verifier_gen.LEGACY[sha]}, which trusts any stamp that adds "
                    f"up; --sync replaces it",
                    expected=expected,
                    actual=actual,
                    fork_path=fork_path,
                )
            data = self.view.fetch(f, DIAGNOSE_MAX_BYTES) if f.size <= DIAGNOSE_MAX_BYTES else None
            who = verifier_gen.older(data) if data is not None else None
            if who is not None:
                return FileResult(
                    VERIFIER,
                    "changed",
                    diagnosis="older-verifier",
                    detail=f"written by {who}; --sync replaces it",
                    expected=expected,
                    actual=actual,
                    fork_path=fork_path,
                )
        r = self._diagnose_changed(
            VERIFIER, entry, f, actual, verifier_gen.build(release), f"the verifier of {release.tag}"
        )
        if r.diagnosis in ("content", "replaced"):
            assert r.detail is not None  # _diagnose_changed says how the content differs whenever it does
            r.detail = f"not the verifier --sync writes for {release.tag} (edited or replaced): " + r.detail
        return r

    def _vendors_our_layer(self, listing: dict[str, ForkFile], errors: list[FileResult]) -> bool:
        """Whether any file under the prefix is byte-equal to some released file (no stamp present)."""
        released = {e.digest(self.kind) for m in self.ms.manifests for e in m.files}
        sizes = {e.size for m in self.ms.manifests for e in m.files}
        for rel, f in listing.items():
            if f.kind != "file" or (None not in sizes and f.size not in sizes) or not self.ms.named_like(rel):
                continue
            d = self._digest(f, errors, rel)
            if d is not None and d in released:
                return True
        return False

    def run(self, report: Report) -> Report:
        listing, blocked = self.view.list_under(self.prefix)
        if not self.prefix:  # the vendor root is the fork root: sync backups are not part of the layer
            listing = {p: f for p, f in listing.items() if not p.startswith(BACKUP_DIR + "/")}
        inner = [
            d if not self.prefix else d[len(self.prefix) + 1 :]
            for d in self.ignore
            if d and (not self.prefix or d.startswith(self.prefix + "/"))
        ]
        if inner:  # this checkout inside the vendor root (the CI recipe's .sm120/ at a root layout): not the fork's
            listing = {p: f for p, f in listing.items() if not any(p == d or p.startswith(d + "/") for d in inner)}
        results: list[FileResult] = []
        errors: list[FileResult] = []
        missing: list[FileEntry] = []
        ours_digests: dict[str, tuple[str | None, str]] = {}  # rel -> (digest, mode) for stale detection
        results.extend(getattr(self.view, "findings", lambda prefix: [])(self.prefix))
        report.notes.extend(getattr(self.view, "notes", []))

        twins = self._twins(listing)
        beside = self._beside_verifier(listing) if VERIFIER in listing or STAMP in listing else set()
        stamp = self._load_stamp(listing)
        if stamp is not None:
            report.stamp = stamp.summary()
            if not stamp.problems:
                report.owned = frozenset(stamp.owned)
            if stamp.problems:  # one finding; the JSON's stamp.problems keeps them apart
                results.append(
                    FileResult(
                        STAMP,
                        "changed",
                        diagnosis="invalid-stamp",
                        detail="; ".join(stamp.problems),
                        fork_path=_join(self.prefix, STAMP),
                    )
                )
        elif (
            (named := sum(1 for rel in listing if self.ms.named_like(rel)))
            and not self._vendors_our_layer(listing, errors)
            and not errors
        ):
            # SM120-named files, none of them ours: the fork carries its own headers. (Only the fork's other files
            # under the prefix: a first vendoring, every file missing, which --sync writes.)
            report.verdict = "not-vendored"
            report.notes.append(
                f"does not vendor this layer: none of the {named} device-layer-named files under "
                f"{self.prefix or '.'} equals a file of any release (its own SM120 headers?); "
                f"--sync would replace them and refuses to"
            )
            self.want_diff = False
        try:
            verifier = self._verifier_result(listing.get(VERIFIER), stamp)
        except CannotCheck as e:
            verifier = FileResult(VERIFIER, "error", detail=str(e), fork_path=_join(self.prefix, VERIFIER))
        if verifier is not None:
            results.append(verifier)

        for entry in self.tag.files:
            f = listing.get(entry.path)
            fork_path = _join(self.prefix, entry.path)
            if f is None:
                missing.append(entry)
                continue
            pinned = stamp is not None and any(p.get("path") == entry.path for p in stamp.doc["patches"])
            actual = (
                self._digest(f, errors, entry.path)
                if f.kind in ("file", "symlink") and not f.too_large and (pinned or self._could_match(entry.path, f))
                else None
            )
            if actual is None and any(e.path == entry.path for e in errors):
                continue
            ours_digests[entry.path] = (actual, f.mode)  # None: bytes no release has (or not a file)
            expected = entry.digest(self.kind)
            if entry.path in twins:
                results.append(
                    FileResult(
                        entry.path,
                        "changed",
                        diagnosis="case-twin",
                        detail=_TWIN.format(", ".join(twins[entry.path])),
                        expected=expected,
                        actual=actual,
                        fork_path=fork_path,
                    )
                )
                continue
            if f.checkout:  # git: what a checkout writes depends on the cloner (a filter, ident, an encoding)
                results.append(
                    FileResult(
                        entry.path,
                        "changed",
                        diagnosis="checkout-attributes",
                        detail=f.checkout,
                        expected=expected,
                        actual=actual,
                        fork_path=fork_path,
                    )
                )
                continue
            if actual == expected and (f.kind == "symlink") == (entry.mode == "120000") and not f.duplicate:
                if not entry.mode_matches(f.mode):
                    results.append(
                        FileResult(
                            entry.path,
                            "mode",
                            detail=f"mode {f.mode}, expected {entry.mode}",
                            expected=expected,
                            actual=actual,
                            fork_path=fork_path,
                        )
                    )
                else:
                    results.append(FileResult(entry.path, "ok", expected=expected, actual=actual, fork_path=fork_path))
                continue
            if f.duplicate:
                results.append(
                    FileResult(
                        entry.path,
                        "changed",
                        diagnosis="duplicate-member",
                        detail=f.duplicate,
                        expected=expected,
                        actual=actual,
                        fork_path=fork_path,
                    )
                )
                continue
            patch = None
            if stamp is not None and stamp.doc["patches"] and f.kind == "file" and actual is not None:
                sha = self._sha256(f, actual)
                patch = stamp.patch_for(entry.path, sha, entry.sha256) if sha else None
            if patch is not None:
                why = patch["reason"] + (f" ({patch['upstream']})" if patch.get("upstream") else "")
                results.append(
                    FileResult(
                        entry.path,
                        "patched",
                        diagnosis="pinned patch",
                        detail=why,
                        expected=expected,
                        actual=actual,
                        fork_path=fork_path,
                        patch=patch,
                        drift=False,
                    )
                )
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
                if f.kind == "file" and (None in sizes or f.size in sizes) and not f.too_large:
                    d = self._digest(f, errors, rel)
                    if d is not None:
                        by_digest.setdefault(d, rel)
            for entry in missing:
                want = entry.digest(self.kind)
                moved = by_digest.get(want) if want is not None else None
                if moved is not None and moved not in consumed:
                    consumed.add(moved)
                    results.append(
                        FileResult(
                            entry.path,
                            "renamed",
                            detail=f"same bytes at {_join(self.prefix, moved)}",
                            expected=entry.digest(self.kind),
                            actual=entry.digest(self.kind),
                            fork_path=_join(self.prefix, moved),
                        )
                    )
                elif entry.path in getattr(self.view, "dirs", ()):
                    results.append(
                        FileResult(
                            entry.path,
                            "changed",
                            diagnosis="not-a-file",
                            detail="is a directory (a file belongs here)",
                            expected=entry.digest(self.kind),
                            fork_path=_join(self.prefix, entry.path),
                        )
                    )
                else:
                    results.append(
                        FileResult(
                            entry.path,
                            "missing",
                            detail=_blocked_detail(entry.path, blocked),
                            expected=entry.digest(self.kind),
                            fork_path=_join(self.prefix, entry.path),
                        )
                    )

        for rel, f in sorted(others.items()):
            if rel in consumed:
                continue
            if rel in beside:
                results.append(
                    FileResult(
                        rel, "extra", diagnosis="beside-verifier", detail=_BESIDE, fork_path=_join(self.prefix, rel)
                    )
                )
                continue
            if stamp is None and not (rel in released or self.ms.named_like(rel)):
                continue  # without a stamp only files that look like ours are considered
            foreign = stamp is not None and rel not in stamp.owned and rel not in released and rel not in twins
            # a digest only where it can say something: foreign files, sizes no release has at a released path and
            # files over the member cap elsewhere are never read
            wanted = not foreign and (self._could_match(rel, f) if rel in released else f.size <= MEMBER_MAX_BYTES)
            actual = (
                self._digest(f, errors, rel) if f.kind in ("file", "symlink") and not f.too_large and wanted else None
            )
            if rel in twins:
                results.append(
                    FileResult(
                        rel,
                        "extra",
                        diagnosis="case-twin",
                        detail=_TWIN.format(", ".join(twins[rel])),
                        actual=actual,
                        fork_path=_join(self.prefix, rel),
                    )
                )
                continue
            if not foreign:  # foreign files never decide whether the fork is stale (a None digest: no release's)
                ours_digests[rel] = (actual, f.mode)
            shipped = [m.label for m in self.ms.manifests if rel in m.by_path]
            link = (
                f"; symlink to {f.target}" + (" (outside the fork)" if f.escapes else "") if f.kind == "symlink" else ""
            ) + (f"; {f.too_large}" if f.too_large else "")
            if stamp is not None and rel not in stamp.owned:
                if shipped:
                    results.append(
                        FileResult(
                            rel,
                            "extra",
                            detail=f"not owned by the stamp, at a path "
                            f"{', '.join(shipped)} shipped (shadows a released file){link}",
                            actual=actual,
                            fork_path=_join(self.prefix, rel),
                        )
                    )
                else:
                    detail = (
                        "not written by --sync (the stamp does not own it)"
                        + ("; --strict counts it as drift" if self.strict else "")
                        + link
                    )
                    results.append(
                        FileResult(
                            rel,
                            "foreign",
                            detail=detail,
                            actual=actual,
                            fork_path=_join(self.prefix, rel),
                            drift=self.strict,
                        )
                    )
                continue
            if shipped:
                detail = f"shipped by {', '.join(shipped)}; not in {self.tag.label}"
            else:
                detail = "named like a device-layer file (sm120_*) but no release ships it"
            results.append(
                FileResult(rel, "extra", detail=detail + link, actual=actual, fork_path=_join(self.prefix, rel))
            )

        results.extend(errors)
        results.sort(key=lambda r: (r.path, r.status))
        report.files = results
        if report.verdict != "not-vendored" or errors:
            report.verdict, report.stale_tag = self._verdict(results, ours_digests)
        if report.verdict == "stale":
            assert report.stale_tag is not None  # _verdict names the release whenever it says stale
            report.notes.append(
                f"the fork is identical to {self.ms.label(report.stale_tag)}; "
                f"run with --sync to move it to {self.tag.label}"
            )
        return report

    def _verdict(self, results: list[FileResult], ours: dict[str, tuple[str | None, str]]) -> tuple[str, str | None]:
        if any(r.status == "error" for r in results):
            return "unknown", None
        if all(r.status in IN_SYNC_STATUSES and not (r.status == "foreign" and r.drift) for r in results):
            return "in-sync", None
        if any(r.diagnosis in UNSTALE for r in results):
            return "drifted", None
        for m in reversed(self.ms.manifests):
            if m.tag == self.tag.tag or set(m.by_path) != set(ours):
                continue
            if all(ours[p][0] == e.digest(self.kind) and e.mode_matches(ours[p][1]) for p, e in m.by_path.items()):
                if m.version < self.tag.version:
                    return "stale", m.tag
                return "drifted", None
        return "drifted", None


def _blocked_detail(path: str, blocked: dict[str, str]) -> str | None:
    """Why a missing file could not be looked for: a directory on its way that was not entered."""
    for d, why in sorted(blocked.items(), key=lambda kv: -len(kv[0])):
        if d == "" or path.startswith(d + "/"):
            return f"{why} (not followed)"
    return None
