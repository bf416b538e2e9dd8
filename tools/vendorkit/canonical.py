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
        if not self._git_ok:
            return None
        try:
            data = self.git.cat_blobs([e.git_blob_sha1])[e.git_blob_sha1]
        except CannotCheck:
            return None
        return data if sha256_bytes(data) == e.sha256 else None
