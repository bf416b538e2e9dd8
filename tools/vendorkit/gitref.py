"""A git ref of a local repository as a fork (`git:DIR@REF`), seen as a checkout of that ref writes it.

The repository is read as data (vendorkit.gitobjects): no git process runs on it, so nothing in it (its
configuration, hooks, promisor remotes, replace refs) can run a program or change what is seen. Files get the
bytes a checkout writes: line endings converted where the tree's attributes say so (vendorkit.gitattrs), and a
file whose checkout depends on the cloner (a filter driver, `ident`, a working-tree encoding) is reported as
such, never certified. Tree entries a checkout refuses or misplaces are `unsafe` findings.
"""
from __future__ import annotations

import hashlib
import os
import re
from typing import Iterator

from . import gitattrs
from .archive import install_path
from .errors import CannotCheck, UsageError
from .forkview import ForkFile
from .gitobjects import Repository
from .limits import DIAGNOSE_MAX_BYTES, MEMBER_MAX_BYTES

_SPEC = re.compile(r"git:(.+)@([^@]+)", re.S)
_ATTRS_MAX = 1 << 20


def is_git_spec(spec: str) -> bool:
    return spec.startswith("git:")


def parse_spec(spec: str) -> tuple[str, str]:
    m = _SPEC.fullmatch(spec)
    if not m:
        raise UsageError(f"bad git source {spec!r}: expected git:DIR@REF (a local repository and a branch, tag "
                         f"or commit)")
    return m.group(1), m.group(2)


class GitRefFork:
    digest_kind = "sha256"

    def __init__(self, repo: str, ref: str):
        if not os.path.isdir(repo):
            raise CannotCheck(f"git source {repo} does not exist")
        if ref.startswith("-"):
            raise UsageError(f"bad ref {ref!r}")
        self.git = Repository(repo)
        self.repo, self.ref = self.git.path, ref
        self.commit = self.git.resolve(ref)
        self.label = f"git:{self.repo}@{ref} ({self.commit[:12]})"
        self._files: dict[str, ForkFile] = {}
        self._oid: dict[str, str] = {}
        self._unsafe: dict[str, str] = {}
        self._bytes: dict[str, bytes] = {}      # path -> checkout bytes, for small files already read
        self._attrs: gitattrs.Attributes | None = None
        self._digests: dict[tuple, tuple[str, int]] = {}  # (blob id, attributes) -> (sha256, size) of its checkout
        for path, mode, oid, problem in self.git.walk(self.git.commit_tree(self.commit)):
            norm, unsafe = install_path(path)
            if problem or unsafe or norm != path:
                self._unsafe[path] = problem or unsafe or f"not a canonical path (would be {norm})"
                continue
            if mode == "160000":
                f = ForkFile(path, "other", "160000", 0)
            elif mode == "120000":
                f = ForkFile(path, "symlink", "120000", 0)
            elif mode.startswith("100"):
                f = ForkFile(path, "file", "100755" if int(mode, 8) & 0o100 else "100644", 0)
            else:
                f = ForkFile(path, "other", mode, 0)
            self._files[path] = f
            self._oid[path] = oid

    # ------------------------------------------------------------ attributes
    def _attributes(self) -> gitattrs.Attributes:
        """The tree's .gitattributes files (every directory's) and info/attributes, read once."""
        if self._attrs is None:
            files = {}
            for path, f in self._files.items():
                if path.rsplit("/", 1)[-1] == ".gitattributes" and f.kind == "file":
                    files[path.rpartition("/")[0]] = self._blob(path, _ATTRS_MAX).decode("utf-8", "replace")
            info = ""
            try:
                info = self.git._read("info/attributes", _ATTRS_MAX).decode("utf-8", "replace")
            except FileNotFoundError:
                pass
            self._attrs = gitattrs.Attributes(files, info)
        return self._attrs

    def _blob(self, path: str, cap: int) -> bytes:
        return self.git.read(self._oid[path], cap, want="blob")[1]

    def _checkout(self, f: ForkFile) -> bytes:
        """The bytes a checkout writes for `f` (a symlink's target as stored)."""
        data = self._bytes.get(f.path)
        if data is None:
            data = self._blob(f.path, MEMBER_MAX_BYTES)
            if f.kind == "file":
                data, converted, refused = gitattrs.checkout(data, self._attributes().of(f.path))
                f.checkout = refused
            if len(data) <= DIAGNOSE_MAX_BYTES:
                self._bytes[f.path] = data
        return data

    def _refusal(self, f: ForkFile) -> str | None:
        """Why the checkout of `f` cannot be known (a filter, ident, an encoding), from its attributes alone
        when its bytes do not matter (filters and encodings), else from its bytes."""
        attrs = self._attributes().of(f.path)
        if not attrs:
            return None
        return gitattrs.checkout(self._blob(f.path, MEMBER_MAX_BYTES) if attrs.get("ident") is True else b"",
                                 attrs)[2]

    # ------------------------------------------------------------ the view
    def findings(self, prefix: str) -> list:
        from .compare import FileResult

        return [FileResult(raw, "unsafe", diagnosis="unsafe-member", detail=f"tree entry: {why}", fork_path=raw)
                for raw, why in sorted(self._unsafe.items())]

    def list_under(self, prefix: str) -> tuple[dict[str, ForkFile], dict[str, str]]:
        pre = f"{prefix}/" if prefix else ""
        out = {p[len(pre):]: f for p, f in self._files.items() if p.startswith(pre)}
        for f in out.values():
            if f.kind in ("file", "symlink") and not f.size and f.digest is None:
                kind, size = self.git.header(self._oid[f.path])
                if kind != "blob":
                    raise CannotCheck(f"{self.label}: {f.path} names a {kind}, not a blob")
                f.size = size
                if size > MEMBER_MAX_BYTES:
                    f.too_large = f"a blob of {size:,} bytes, over the {MEMBER_MAX_BYTES >> 20} MiB cap (not read)"
                elif f.kind == "file" and self._attributes().of(f.path):
                    f.size = len(self._checkout(f))  # attributes may change the bytes (and the size)
        return out, {}

    def iter_paths(self) -> Iterator[str]:
        return iter(list(self._files))

    def digest_of(self, f: ForkFile) -> str:
        if f.digest is None:
            if f.too_large or f.kind not in ("file", "symlink"):
                raise CannotCheck(f"{self.label}: {f.path} was not read")
            key = (self._oid[f.path], f.kind, tuple(sorted(self._attributes().of(f.path).items(), key=str)))
            if key not in self._digests:  # many paths may share one blob: it is read once
                data = self._checkout(f)
                self._digests[key] = (hashlib.sha256(data).hexdigest(), len(data))
            elif f.kind == "file":
                f.checkout = self._refusal(f)
            f.digest, f.size = self._digests[key]
        return f.digest

    def read(self, f: ForkFile, limit: int | None = None) -> bytes | None:
        if f.too_large or f.kind not in ("file", "symlink") or (limit is not None and f.size > limit):
            return None
        return self._checkout(f)

    fetch = read
