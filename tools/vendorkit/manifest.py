"""The release manifest (schema 1): model, validation, loading and deterministic writing."""

from __future__ import annotations

import os
import posixpath
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from . import manifest_text, safefs, yamlio
from .errors import CannotCheck, ManifestError, UsageError
from .hashing import tree_sha256
from .versions import is_tag, parse_tag, sort_key

SCHEMA = 1
ROOT = "device_layer"
MANIFEST_DIR = "vendor_manifests"
MODES = ("100644", "100755", "120000")
MAX_MANIFEST_BYTES = 16 << 20  # a 1,000-file manifest is ~200 KB
DEFAULT_REQUIRES = {"cuda": ">=13.0", "targets": ["sm_120a", "sm_120f", "sm_121a"]}

_HEX64 = re.compile(r"[0-9a-f]{64}")
_HEX40 = re.compile(r"[0-9a-f]{40}")
_TOP_KEYS = {"schema", "tag", "root", "created", "requires", "tree_sha256", "files"}
_FILE_KEYS = {"path", "sha256", "git_blob_sha1", "size", "mode"}


def is_our_name(path: str) -> bool:
    """The device-layer naming rule: `sm120_*` files, plus `mma/sm120.cuh`-style `sm120.cuh`."""
    base = posixpath.basename(path)
    return base.startswith("sm120_") or base == "sm120.cuh"


def fold(path: str) -> str:
    """The name file systems that ignore case, Unicode normalization or some characters see: two paths with the same
    fold are one file on at least one of them. A superset of what any of them folds, on purpose: compatibility
    normalization and full case folding (APFS, NTFS), format characters and variation selectors dropped (HFS+
    ignores several), a trailing `::$DATA` (NTFS's name for a file's own data) and trailing dots and spaces (which
    Windows strips) removed from each component."""
    out = []
    for part in path.split("/"):
        p = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", part).casefold())
        p = "".join(c for c in p if unicodedata.category(c) != "Cf" and not 0xFE00 <= ord(c) <= 0xFE0F)
        if p.endswith("::$data"):
            p = p[: -len("::$data")]
        out.append(p.rstrip(". ") or p)
    return "/".join(out)


def folds_to_itself(path: str) -> bool:
    """A quick `fold(path) == path` for the common case (lowercase ASCII, nothing Windows strips)."""
    return (
        path.isascii()
        and path.islower()
        and ":" not in path
        and not any(part.endswith((".", " ")) for part in path.split("/"))
    )


# Names a release may not ship at any depth: what --sync writes beside the layer (the stamp, the verifier, its
# backups and journal; vendorkit.stamp holds the same names) and anything git reads as its own (.git, .gitattributes,
# .gitmodules, .github): a root-layout fork would otherwise get a hook, a filter or a workflow from a manifest.
RESERVED_NAMES = (".sm120-vendor.json", ".sm120-vendor-verify.py", ".sm120-sync-backup")


def reserved_part(path: str) -> str | None:
    """The first component of `path` a release may not ship, or None."""
    for part in path.split("/"):
        low = fold(part) if not folds_to_itself(part) else part
        if low.startswith(".git") or low in RESERVED_NAMES or low.startswith(".sm120-sync-journal"):
            return part
    return None


def check_release_path(path: Any, where: str) -> str:
    """A path a release may ship: safe (check_safe_path) and no reserved component (reserved_part)."""
    path = check_safe_path(path, where)
    bad = reserved_part(path)
    if bad is not None:
        raise ManifestError(f"{where} ({path}): a release never ships {bad!r} (reserved for git and check_vendor)")
    return path


def check_safe_path(path: Any, where: str) -> str:
    """Manifest paths obey safefs's rule (relative POSIX, no `..`, `.`, empty parts, backslashes, NULs or drive
    letters); the message says which part of it a path breaks."""
    if safefs.path_parts(path) is not None:
        return path
    if not isinstance(path, str) or not path:
        raise ManifestError(f"{where}: path must be a non-empty string")
    if path.startswith("/") or re.match(r"[A-Za-z]:", path):
        raise ManifestError(f"{where}: unsafe absolute path {path!r}")
    if "\\" in path or "\0" in path:
        raise ManifestError(f"{where}: unsafe path {path!r} (backslash or NUL)")
    raise ManifestError(f"{where}: unsafe path {path!r} (empty, '.' or '..' component)")


@dataclass(frozen=True)
class FileEntry:
    path: str
    sha256: str
    git_blob_sha1: str | None  # None, like size and mode, in lineages imported from hashes only
    size: int | None
    mode: str | None

    def digest(self, kind: str) -> str | None:
        return self.sha256 if kind == "sha256" else self.git_blob_sha1

    def mode_matches(self, mode: str) -> bool:
        return self.mode is None or self.mode == mode


@dataclass
class Manifest:
    tag: str
    created: str
    tree_sha256: str
    files: list[FileEntry]
    requires: dict[str, Any] = field(default_factory=lambda: dict(DEFAULT_REQUIRES))
    root: str = ROOT
    schema: int = SCHEMA
    source: str | None = None  # file it was loaded from
    lineage: str | None = None  # None: a deep_gemm_sm120 release; else an imported upstream (vendorkit.lineage)
    origin: str | None = None  # lineages: where the hashes came from
    text: str | None = field(default=None, repr=False, compare=False)  # the exact bytes it was loaded from
    chain: tuple[int, str] | None = None  # (chain length up to it, its line's digest) when chain.txt holds it

    def __post_init__(self) -> None:
        self.by_path = {f.path: f for f in self.files}

    @property
    def version(self) -> tuple:
        return sort_key(self.tag)

    @property
    def label(self) -> str:
        """How reports name this release: `v0.7.3` for ours, `NAME@v0.1.4` for an upstream lineage's."""
        return self.tag if self.lineage is None else f"{self.lineage}@{self.tag}"


def _entry(raw: Any, i: int, where: str) -> FileEntry:
    w = f"{where}: files[{i}]"
    if not isinstance(raw, dict):
        raise ManifestError(f"{w}: expected a mapping")
    keys = set(raw)
    if keys != _FILE_KEYS:
        missing, unknown = _FILE_KEYS - keys, keys - _FILE_KEYS
        raise ManifestError(f"{w}: missing keys {sorted(missing)}, unknown keys {sorted(unknown)}")
    path = check_release_path(raw["path"], w)
    if not isinstance(raw["sha256"], str) or not _HEX64.fullmatch(raw["sha256"]):
        raise ManifestError(f"{w} ({path}): sha256 must be 64 lowercase hex digits")
    if not isinstance(raw["git_blob_sha1"], str) or not _HEX40.fullmatch(raw["git_blob_sha1"]):
        raise ManifestError(f"{w} ({path}): git_blob_sha1 must be 40 lowercase hex digits")
    size = raw["size"]
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise ManifestError(f"{w} ({path}): size must be a non-negative integer")
    mode = raw["mode"]
    if mode not in MODES:
        raise ManifestError(f"{w} ({path}): mode must be one of {', '.join(MODES)} (a string)")
    return FileEntry(path, raw["sha256"], raw["git_blob_sha1"], size, mode)


def parse_manifest(text: str, where: str, expect_tag: str | None = None) -> Manifest:
    try:  # the strict reader of the layout we write (5x faster than PyYAML on a 1,000-file manifest)
        raw = manifest_text.parse(text, where)
    except ManifestError:
        if not yamlio.available():
            raise
        try:  # any other YAML layout of the same mapping
            raw = yamlio.safe_load(text)
        except yamlio.yaml_error_types() as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ManifestError(f"{where}: malformed YAML ({first})") from None
    if not isinstance(raw, dict):
        raise ManifestError(f"{where}: expected a mapping at the top level")
    keys = set(raw)
    if keys != _TOP_KEYS:
        missing, unknown = _TOP_KEYS - keys, keys - _TOP_KEYS
        raise ManifestError(f"{where}: missing keys {sorted(missing)}, unknown keys {sorted(unknown)}")
    if raw["schema"] != SCHEMA:
        raise ManifestError(f"{where}: unsupported schema {raw['schema']!r} (this tool reads schema {SCHEMA})")
    tag = raw["tag"]
    if not isinstance(tag, str) or not is_tag(tag):
        raise ManifestError(f"{where}: tag {tag!r} is not vMAJOR.MINOR.PATCH")
    if expect_tag is not None and tag != expect_tag:
        raise ManifestError(f"{where}: tag {tag!r} does not match the file name ({expect_tag})")
    if raw["root"] != ROOT:
        raise ManifestError(f"{where}: root must be {ROOT!r}")
    created = raw["created"]
    created = created.isoformat() if hasattr(created, "isoformat") else created
    if not isinstance(created, str) or not re.fullmatch(r"\d{4}-\d{2}-\d{2}", created):
        raise ManifestError(f"{where}: created must be a YYYY-MM-DD date")
    if not isinstance(raw["requires"], dict):
        raise ManifestError(f"{where}: requires must be a mapping")
    files_raw = raw["files"]
    if not isinstance(files_raw, list) or not files_raw:
        raise ManifestError(f"{where}: files must be a non-empty list")
    files = [_entry(f, i, where) for i, f in enumerate(files_raw)]
    paths = [f.path for f in files]
    if paths != sorted(paths) or len(set(paths)) != len(paths):
        raise ManifestError(f"{where}: file paths must be unique and sorted")
    ts = raw["tree_sha256"]
    if not isinstance(ts, str) or not _HEX64.fullmatch(ts):
        raise ManifestError(f"{where}: tree_sha256 must be 64 lowercase hex digits")
    if ts != tree_sha256((f.path, f.sha256) for f in files):
        raise ManifestError(f"{where}: tree_sha256 does not match the listed files")
    return Manifest(tag=tag, created=created, tree_sha256=ts, files=files, requires=raw["requires"], source=where)


def dump_manifest(m: Manifest) -> str:
    """Deterministic YAML: one flow mapping per file, keys in contract order.

    Hex digests are quoted: an all-digit hex string would otherwise load as an integer.
    """
    req = m.requires
    targets = ", ".join(req.get("targets", []))
    lines = [
        f"schema: {m.schema}",
        f"tag: {m.tag}",
        f"root: {m.root}",
        f"created: {m.created}",
        f'requires: {{cuda: "{req.get("cuda", "")}", targets: [{targets}]}}',
        f'tree_sha256: "{m.tree_sha256}"',
        "files:",
    ]
    for f in m.files:
        lines.append(
            f'  - {{path: "{f.path}", sha256: "{f.sha256}", git_blob_sha1: "{f.git_blob_sha1}", '
            f'size: {f.size}, mode: "{f.mode}"}}'
        )
    return "\n".join(lines) + "\n"


def build_manifest(tag: str, created: str, files: Iterable[FileEntry]) -> Manifest:
    files = sorted(files, key=lambda f: f.path)
    return Manifest(tag=tag, created=created, files=files, tree_sha256=tree_sha256((f.path, f.sha256) for f in files))


def _attach_chain(directory: str, manifests: list[Manifest]) -> None:
    """Give each manifest its chain position when chain.txt holds its exact bytes (a broken or missing chain
    attaches nothing: the self-check reports it, and a fork check then has no position to compare)."""
    from . import chain
    from .hashing import sha256_bytes

    try:
        links = chain.read(directory) or []
    except (ManifestError, OSError):
        return
    by_tag = {m.tag: m for m in manifests}
    for i, link in enumerate(links, 1):
        m = by_tag.get(link.tag)
        if m is not None and m.text is not None and sha256_bytes(m.text.encode("utf-8")) == link.manifest_sha256:
            m.chain = (i, link.position)


class ManifestSet:
    """Every manifest of one lineage (ours in vendor_manifests/, an upstream's in vendor_manifests/upstreams/NAME/),
    oldest first; all validated on load."""

    def __init__(self, manifests: list[Manifest], lineage: str | None = None):
        self.manifests = sorted(manifests, key=lambda m: m.version)
        self.by_tag = {m.tag: m for m in self.manifests}
        self.lineage = lineage
        self.directory: str | None = None  # where load_dir read them (release signatures and the chain live there)

    @property
    def name(self) -> str:
        return self.lineage or "deep_gemm_sm120"

    def label(self, tag: str) -> str:
        return tag if self.lineage is None else f"{self.lineage}@{tag}"

    @property
    def has_blob_ids(self) -> bool:
        """Whether every file has a git blob id (a github: fork can then be compared from its tree alone)."""
        return all(e.git_blob_sha1 for m in self.manifests for e in m.files)

    def named_like(self, path: str) -> bool:
        """A path that looks like this lineage's: the sm120_* naming rule, or any path one of its releases ships,
        also after folding case and Unicode normalization (`SM120_ARCH.cuh`, `\u017fm120_arch.cuh`)."""
        if is_our_name(path) or path in self.all_paths():
            return True
        if folds_to_itself(path):
            return False
        folded = fold(path)
        return is_our_name(folded) or folded in self.folded_paths()

    def folded_paths(self) -> dict[str, str]:
        """fold(path) -> path, for every path a release ships."""
        if not hasattr(self, "_folded"):
            self._folded = {fold(p): p for p in sorted(self.all_paths())}
        return self._folded

    @classmethod
    def load_dir(cls, directory: str) -> ManifestSet:
        try:
            names = sorted(os.listdir(directory))
        except FileNotFoundError:
            names = []
        except OSError as e:
            raise CannotCheck(f"cannot list {directory}: {e.strerror}") from None
        out = []
        for name in names:
            if not name.endswith(".yaml"):
                continue
            tag = name[: -len(".yaml")]
            where = f"{MANIFEST_DIR}/{name}"
            if not is_tag(tag):
                raise ManifestError(f"{where}: file name is not a release tag (vMAJOR.MINOR.PATCH.yaml)")
            try:
                with open(os.path.join(directory, name), "rb") as fh:
                    data = fh.read(MAX_MANIFEST_BYTES + 1)
                if len(data) > MAX_MANIFEST_BYTES:
                    raise ManifestError(f"{where}: over {MAX_MANIFEST_BYTES >> 20} MiB (not read)")
                text = data.decode("utf-8")  # bytes, so the text is exactly what the chain hashes
            except (OSError, UnicodeDecodeError) as e:
                raise CannotCheck(f"cannot read {where}: {e}") from None
            m = parse_manifest(text, where, expect_tag=tag)
            misnamed = [e.path for e in m.files if not is_our_name(e.path)]
            if misnamed:  # `release` writes only sm120_* files: anything else was not cut by it
                raise ManifestError(f"{where}: files not named sm120_*: {', '.join(misnamed[:5])}")
            m.text = text
            out.append(m)
        _attach_chain(directory, out)
        ms = cls(out)
        ms.directory = directory
        return ms

    @property
    def latest(self) -> Manifest | None:
        return self.manifests[-1] if self.manifests else None

    def resolve(self, tag: str | None) -> Manifest:
        if not self.manifests:
            raise UsageError("no release manifests found in vendor_manifests/")
        if tag is None:
            return self.manifests[-1]
        if self.lineage is None:
            parse_tag(tag)
        if tag not in self.by_tag:
            known = ", ".join(m.tag for m in self.manifests)
            raise UsageError(f"unknown tag {tag}: {self.name}'s releases are {known}")
        return self.by_tag[tag]

    def all_paths(self) -> set[str]:
        if not hasattr(self, "_paths"):
            self._paths = {f.path for m in self.manifests for f in m.files}
        return self._paths

    def releases_with(self, path: str, digest: str, kind: str) -> list[str]:
        """Tags (oldest first) whose file at `path` has this digest."""
        out = []
        for m in self.manifests:
            e = m.by_path.get(path)
            if e is not None and e.digest(kind) == digest:
                out.append(m.tag)
        return out
