"""A git ref of a local repository as a fork (`git:DIR@REF`): read from git's objects, no checkout needed. The tree
is listed once (`git ls-tree -r -l`), blobs are read through one `git cat-file --batch` when first needed."""
from __future__ import annotations

import hashlib
import os
import re
import subprocess
from typing import Iterator

from .archive import install_path
from .errors import CannotCheck, UsageError
from .forkview import ForkFile
from .limits import MEMBER_MAX_BYTES

_SPEC = re.compile(r"^git:(.+)@([^@]+)$")


def is_git_spec(spec: str) -> bool:
    return spec.startswith("git:")


def parse_spec(spec: str) -> tuple[str, str]:
    m = _SPEC.match(spec)
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
        self.repo, self.ref = os.path.abspath(repo), ref
        self.commit = self._git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}").decode().strip()
        self.label = f"git:{self.repo}@{ref} ({self.commit[:12]})"
        self._files: dict[str, ForkFile] = {}
        self._oid: dict[str, str] = {}
        self._unsafe: dict[str, str] = {}
        self._blobs: dict[str, bytes] | None = None
        self._wanted: list[str] = []
        out = self._git("ls-tree", "-r", "-l", "-z", "--full-tree", self.commit)
        for rec in out.split(b"\0"):
            if not rec:
                continue
            meta, raw = rec.split(b"\t", 1)
            mode, kind, oid, size = meta.decode().split()
            name = os.fsdecode(raw)
            path, unsafe = install_path(name)
            if unsafe or path != name:
                self._unsafe[name] = unsafe or f"not a canonical path (would be {path})"
                continue
            if kind == "commit":
                f = ForkFile(path, "other", "160000", 0)
            else:
                f = ForkFile(path, "symlink" if mode == "120000" else "file", mode, int(size) if size != "-" else 0)
                if f.size > MEMBER_MAX_BYTES:
                    f.too_large = f"a blob of {f.size:,} bytes, over the {MEMBER_MAX_BYTES >> 20} MiB cap (not read)"
            self._files[path] = f
            self._oid[path] = oid

    def _git(self, *args: str, stdin: bytes | None = None) -> bytes:
        p = subprocess.run(["git", "-C", self.repo, *args], input=stdin, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)
        if p.returncode != 0:
            msg = p.stderr.decode(errors="replace").strip().splitlines()
            raise CannotCheck(f"git {args[0]} in {self.repo} failed: {msg[-1] if msg else 'no such ref ' + self.ref}")
        return p.stdout

    def findings(self, prefix: str) -> list:
        from .compare import FileResult

        return [FileResult(raw, "unsafe", diagnosis="unsafe-member", detail=f"tree entry: {why}", fork_path=raw)
                for raw, why in sorted(self._unsafe.items())]

    def list_under(self, prefix: str) -> tuple[dict[str, ForkFile], dict[str, str]]:
        pre = f"{prefix}/" if prefix else ""
        out = {p[len(pre):]: f for p, f in self._files.items() if p.startswith(pre)}
        self._wanted = [f"{pre}{rel}" for rel, f in out.items() if f.kind in ("file", "symlink") and not f.too_large]
        return out, {}

    def iter_paths(self) -> Iterator[str]:
        return iter(list(self._files))

    def _bytes(self, f: ForkFile) -> bytes:
        if self._blobs is None or f.path not in self._blobs:  # one batch for everything under the prefix
            want = [p for p in dict.fromkeys(self._wanted + [f.path]) if p in self._oid]
            oids = [self._oid[p] for p in want]
            out = self._git("cat-file", "--batch", stdin="".join(o + "\n" for o in oids).encode())
            blobs, pos = {}, 0
            for p, oid in zip(want, oids):
                nl = out.index(b"\n", pos)
                size = int(out[pos:nl].split()[2])
                blobs[p] = out[nl + 1: nl + 1 + size]
                pos = nl + 1 + size + 1
            self._blobs = {**(self._blobs or {}), **blobs}
        return self._blobs[f.path]

    def digest_of(self, f: ForkFile) -> str:
        if f.digest is None:
            if f.too_large or f.kind not in ("file", "symlink"):
                raise CannotCheck(f"{self.label}: {f.path} was not read")
            f.digest = hashlib.sha256(self._bytes(f)).hexdigest()
        return f.digest

    def read(self, f: ForkFile, limit: int | None = None) -> bytes | None:
        if f.too_large or f.kind not in ("file", "symlink") or (limit is not None and f.size > limit):
            return None
        return self._bytes(f)

    fetch = read
