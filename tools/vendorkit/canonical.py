"""Canonical bytes of any released file: from the working tree when unchanged, else from git."""

from __future__ import annotations

import os

from .errors import CannotCheck
from .gitrepo import GitRepo
from .hashing import sha256_bytes
from .manifest import ROOT, FileEntry


class CanonicalStore:
    def __init__(self, repo_root: str):
        self.repo_root = repo_root
        self.git = GitRepo(repo_root)
        self._git_ok: bool | None = None

    def _from_tree(self, e: FileEntry) -> bytes | None:
        p = os.path.join(self.repo_root, ROOT, *e.path.split("/"))
        try:
            if e.mode == "120000":
                data = os.fsencode(os.readlink(p))
            else:
                with open(p, "rb") as fh:
                    data = fh.read()
        except OSError:
            return None
        return data if sha256_bytes(data) == e.sha256 else None

    def get(self, e: FileEntry) -> bytes | None:
        """Bytes whose sha256 matches the entry, or None when this checkout cannot supply them."""
        data = self._from_tree(e)
        if data is not None:
            return data
        if self._git_ok is None:
            self._git_ok = self.git.is_repo()
        if not self._git_ok or e.git_blob_sha1 is None:  # (None: an entry of hashes only names no blob)
            return None
        try:
            data = self.git.cat_blobs([e.git_blob_sha1])[e.git_blob_sha1]
        except CannotCheck:
            return None
        return data if sha256_bytes(data) == e.sha256 else None


class SourceStore:
    """Released bytes of an upstream lineage, taken from a source that has them (--bytes-from: a checkout, a git
    ref, github:, a wheel). Bytes are served only when their sha256 is the manifest's; without a source the
    lineage is hashes only and nothing can be written."""

    def __init__(self, view, ms):
        self.view, self.ms = view, ms
        self.prefix = None
        if view is not None:
            from .compare import detect_prefix

            self.prefix = detect_prefix(view.iter_paths(), ms.all_paths())
            self.listing = view.list_under(self.prefix)[0]

    def get(self, e: FileEntry) -> bytes | None:
        if self.view is None:
            return None
        f = self.listing.get(e.path)
        data = self.view.fetch(f) if f is not None else None
        return data if data is not None and sha256_bytes(data) == e.sha256 else None

    def why_missing(self) -> str:
        return (
            (
                "the lineage was imported from hashes only: pass --bytes-from SOURCE (a checkout, git:DIR@REF, "
                "github:OWNER/REPO@REF or a wheel that has these bytes)"
            )
            if self.view is None
            else "--bytes-from does not hold these bytes at the lineage's paths"
        )
