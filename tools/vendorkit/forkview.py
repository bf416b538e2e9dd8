"""What the comparison engine needs from a fork, and the local-directory implementation.

A view lists entries under a prefix and yields one digest per file. The local view hashes with
sha256; a remote view (GitHub trees) hands out git blob ids, so the engine compares whichever
digest the view declares in `digest_kind`.
"""
from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from typing import Iterator, Protocol

from .errors import CannotCheck
from .hashing import sha256_bytes, sha256_file


@dataclass
class ForkFile:
    path: str                 # POSIX path relative to the fork root
    kind: str                 # "file" | "symlink" | "other"
    mode: str                 # git-style: 100644, 100755, 120000, or "" for other
    size: int
    target: str | None = None  # symlink target, as stored in the link
    escapes: bool = False      # symlink that resolves outside the fork root
    digest: str | None = None  # filled lazily (local) or from the listing (remote)


class ForkView(Protocol):
    digest_kind: str  # "sha256" or "git_blob_sha1"
    label: str

    def list_under(self, prefix: str) -> tuple[dict[str, ForkFile], list[str]]:
        """Entries under prefix keyed by path relative to it; plus symlinked directories."""

    def iter_paths(self) -> Iterator[str]:
        """Every file path in the fork (for prefix detection)."""

    def digest_of(self, f: ForkFile) -> str: ...

    def read(self, f: ForkFile) -> bytes | None:
        """File bytes, or None when this view does not fetch contents."""

    def fetch(self, f: ForkFile) -> bytes | None:
        """File bytes whenever the view can get them (a remote view downloads the blob)."""


def join_path(prefix: str, rel: str) -> str:
    return f"{prefix}/{rel}" if prefix else rel


class LocalFork:
    digest_kind = "sha256"

    def __init__(self, root: str):
        if not os.path.exists(root):
            raise CannotCheck(f"fork path {root} does not exist")
        if not os.path.isdir(root):
            raise CannotCheck(f"fork path {root} is not a directory")
        self.root = os.path.abspath(root)
        self.real_root = os.path.realpath(root)
        self.label = self.root

    def _abs(self, rel: str) -> str:
        return os.path.join(self.root, *rel.split("/")) if rel else self.root

    def _entry(self, rel: str, st: os.stat_result) -> ForkFile:
        if stat.S_ISLNK(st.st_mode):
            target = os.readlink(self._abs(rel))
            resolved = os.path.realpath(self._abs(rel))
            inside = resolved == self.real_root or resolved.startswith(self.real_root + os.sep)
            return ForkFile(rel, "symlink", "120000", len(os.fsencode(target)), target, not inside)
        if stat.S_ISREG(st.st_mode):
            mode = "100755" if st.st_mode & stat.S_IXUSR else "100644"
            return ForkFile(rel, "file", mode, st.st_size)
        return ForkFile(rel, "other", "", 0)

    def list_under(self, prefix: str) -> tuple[dict[str, ForkFile], list[str]]:
        base = self._abs(prefix)
        if os.path.islink(base):
            return {}, [""]
        if not os.path.isdir(base):
            return {}, []
        files: dict[str, ForkFile] = {}
        linked_dirs: list[str] = []
        stack = [""]
        while stack:
            rel_dir = stack.pop()
            try:
                it = os.scandir(os.path.join(base, *rel_dir.split("/")) if rel_dir else base)
            except OSError as e:
                raise CannotCheck(f"cannot list {join_path(prefix, rel_dir) or '.'}: {e.strerror}") from None
            with it:
                for de in it:
                    rel = f"{rel_dir}/{de.name}" if rel_dir else de.name
                    if de.name == ".git" and not rel_dir:
                        continue
                    st = de.stat(follow_symlinks=False)
                    if stat.S_ISDIR(st.st_mode):
                        stack.append(rel)
                        continue
                    if stat.S_ISLNK(st.st_mode) and os.path.isdir(de.path):
                        linked_dirs.append(rel)
                    files[rel] = self._entry(join_path(prefix, rel), st)
        return files, linked_dirs

    def iter_paths(self) -> Iterator[str]:
        for dirpath, dirnames, filenames in os.walk(self.root, followlinks=False):
            dirnames[:] = [d for d in dirnames if d != ".git"]
            rel_dir = os.path.relpath(dirpath, self.root)
            rel_dir = "" if rel_dir == "." else rel_dir.replace(os.sep, "/")
            for name in filenames:
                yield f"{rel_dir}/{name}" if rel_dir else name

    def digest_of(self, f: ForkFile) -> str:
        if f.digest is None:
            if f.kind == "symlink":
                f.digest = sha256_bytes(os.fsencode(f.target or ""))
            else:
                try:
                    f.digest = sha256_file(self._abs(f.path))
                except OSError as e:
                    raise CannotCheck(f"cannot read {f.path}: {e.strerror or e}") from None
        return f.digest

    def fetch(self, f: ForkFile) -> bytes | None:
        return self.read(f)

    def read(self, f: ForkFile) -> bytes | None:
        if f.kind == "symlink":
            return os.fsencode(f.target or "")
        try:
            with open(self._abs(f.path), "rb") as fh:
                return fh.read()
        except OSError as e:
            raise CannotCheck(f"cannot read {f.path}: {e.strerror or e}") from None
