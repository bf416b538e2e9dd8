"""What the comparison engine needs from a fork, and the local-directory implementation.

A view lists entries under a prefix and yields one digest per file. The local view hashes with
sha256; a remote view (GitHub trees) hands out git blob ids, so the engine compares whichever
digest the view declares in `digest_kind`.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from . import budget
from .errors import CannotCheck
from .hashing import sha256_bytes
from .safefs import ForkRoot, UnsafePath


@dataclass(slots=True)  # a listing can hold hundreds of thousands of them
class ForkFile:
    path: str  # POSIX path relative to the fork root
    kind: str  # "file" | "symlink" | "hardlink" (tar) | "other"
    mode: str  # git-style: 100644, 100755, 120000, or "" for other
    size: int
    target: str | None = None  # symlink target, as stored in the link
    escapes: bool = False  # symlink that resolves outside the fork root
    digest: str | None = None  # filled lazily (local) or from the listing (remote)
    too_large: str | None = None  # why an archive member is not read (size or compression-ratio cap)
    duplicate: str | None = None  # several archive members install to this path (detail)
    checkout: str | None = None  # git: why a checkout's bytes cannot be known (a filter driver)
    oid: str | None = None  # git: the blob's id (what the tree names)


class ForkView(Protocol):
    digest_kind: str  # "sha256" or "git_blob_sha1"
    label: str

    def list_under(self, prefix: str) -> tuple[dict[str, ForkFile], dict[str, str]]:
        """Entries under prefix keyed by path relative to it; plus the prefix-relative directories that could
        not be entered without following a link ("" for the prefix itself), each with the reason."""

    def iter_paths(self) -> Iterator[str]:
        """Every file path in the fork (for prefix detection)."""

    def digest_of(self, f: ForkFile) -> str: ...

    def read(self, f: ForkFile, limit: int | None = None) -> bytes | None:
        """File bytes, or None when this view does not fetch contents or the file is larger than `limit`."""

    def fetch(self, f: ForkFile, limit: int | None = None) -> bytes | None:
        """File bytes whenever the view can get them (a remote view downloads the blob); None over `limit`."""


def join_path(prefix: str, rel: str) -> str:
    return f"{prefix}/{rel}" if prefix else rel


class LocalFork:
    """A fork on disk. Every access goes through safefs.ForkRoot: nothing below the root is followed."""

    digest_kind = "sha256"

    def __init__(self, root: str):
        if not os.path.exists(root):
            raise CannotCheck(f"fork path {root} does not exist")
        if not os.path.isdir(root):
            raise CannotCheck(f"fork path {root} is not a directory")
        try:
            self.fs = ForkRoot(root)
        except OSError as e:
            raise CannotCheck(f"cannot open fork {root}: {e.strerror or e}") from None
        self.root = self.fs.path
        self.label = self.root
        self.dirs: set[str] = set()  # prefix-relative directories seen by the last list_under()

    def _entry(self, rel: str, st: os.stat_result) -> ForkFile:
        if stat.S_ISLNK(st.st_mode):
            try:
                target = self.fs.readlink(rel)
            except OSError:
                target = ""
            return ForkFile(
                rel, "symlink", "120000", len(os.fsencode(target)), target, link_escapes(rel, target, self.root)
            )
        if stat.S_ISREG(st.st_mode):
            mode = "100755" if st.st_mode & stat.S_IXUSR else "100644"
            return ForkFile(rel, "file", mode, st.st_size)
        return ForkFile(rel, "other", "", 0)

    def list_under(self, prefix: str) -> tuple[dict[str, ForkFile], dict[str, str]]:
        try:
            st = self.fs.lstat(prefix)
        except UnsafePath as e:
            return {}, {"": f"on the way to the vendor root, {e.component} is {e.why}"}
        except OSError as e:
            raise CannotCheck(f"cannot list {prefix or '.'}: {e.strerror or e}") from None
        if st is None:
            return {}, {}
        if stat.S_ISLNK(st.st_mode):
            return {}, {"": f"under {prefix}, a symlinked directory"}
        if not stat.S_ISDIR(st.st_mode):
            return {}, {"": f"{prefix} is not a directory"}
        files: dict[str, ForkFile] = {}
        blocked: dict[str, str] = {}
        pre = f"{prefix}/" if prefix else ""
        self.dirs = set()

        b = budget.current()

        def skip(p: str) -> bool:  # descend everything but the prefix's .git; remember each directory
            b.entry(p)
            b.path(p)
            self.dirs.add(p[len(pre) :])
            return p == pre + ".git"

        try:
            for path, st in self.fs.walk(prefix, skip=skip):
                b.entry(path)
                b.path(path)
                rel = path[len(pre) :]
                if stat.S_ISLNK(st.st_mode):
                    blocked[rel] = f"under {path}, a symlinked directory"
                files[rel] = self._entry(path, st)
        except (OSError, UnsafePath) as e:
            raise CannotCheck(f"cannot list {prefix or '.'}: {getattr(e, 'strerror', None) or e}") from None
        return files, blocked

    def iter_paths(self) -> Iterator[str]:
        b = budget.current()

        def skip(p: str) -> bool:
            b.entry(p)
            b.path(p)
            return p.rsplit("/", 1)[-1] == ".git"

        try:
            for path, _ in self.fs.walk("", skip=skip):
                b.entry(path)
                b.path(path)
                yield path
        except (OSError, UnsafePath) as e:
            raise CannotCheck(f"cannot list the fork: {getattr(e, 'strerror', None) or e}") from None

    def digest_of(self, f: ForkFile) -> str:
        if f.digest is None:
            if f.kind == "symlink":
                f.digest = sha256_bytes(os.fsencode(f.target or ""))
            else:
                try:
                    with self.fs.open_read(f.path) as fh:
                        f.digest = _hash_counted(fh, f.path)
                except (OSError, UnsafePath) as e:
                    raise CannotCheck(f"cannot read {f.path}: {getattr(e, 'strerror', None) or e}") from None
        return f.digest

    def fetch(self, f: ForkFile, limit: int | None = None) -> bytes | None:
        return self.read(f, limit)

    def read(self, f: ForkFile, limit: int | None = None) -> bytes | None:
        """The file's bytes; None when it is larger than `limit` (never read past it)."""
        if f.kind == "symlink":
            return os.fsencode(f.target or "")
        try:
            data = self.fs.read_bytes(f.path, limit)
        except OverflowError:
            return None
        except (OSError, UnsafePath) as e:
            raise CannotCheck(f"cannot read {f.path}: {getattr(e, 'strerror', None) or e}") from None
        budget.current().take(len(data), f.path)
        return data


def _hash_counted(fh, what: str) -> str:
    """sha256 of a stream, every chunk drawn from the run budget."""
    import hashlib

    b = budget.current()
    h = hashlib.sha256()
    for chunk in iter(lambda: fh.read(1 << 20), b""):
        b.take(len(chunk), what)
        h.update(chunk)
    return h.hexdigest()


def link_escapes(rel: str, target: str, root: str | None = None) -> bool:
    """Whether a link at fork-relative `rel` names something outside the fork (or archive), decided from the link
    text alone: nothing is resolved, so an intermediate link in the target is not followed either. An absolute
    target is inside only when it lies under `root` (a local fork's absolute path; archives have none)."""
    if target.startswith("/") or re.match(r"[A-Za-z]:", target):
        if root is None:
            return True
        t = os.path.normpath(target)
        return not (t == root or t.startswith(root.rstrip(os.sep) + os.sep))
    depth = len(rel.split("/")) - 1
    for part in target.replace("\\", "/").split("/"):
        depth += -1 if part == ".." else (0 if part in ("", ".") else 1)
        if depth < 0:
            return True
    return False
