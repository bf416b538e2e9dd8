"""Thin, read-mostly access to a git checkout through the git CLI."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass

from .errors import CannotCheck


@dataclass(frozen=True)
class TreeEntry:
    mode: str
    kind: str  # blob | tree | commit
    oid: str
    path: str


class GitRepo:
    def __init__(self, root: str):
        self.root = root

    @staticmethod
    def available() -> bool:
        return shutil.which("git") is not None

    def run(self, *args: str, stdin: bytes | None = None, check: bool = True) -> bytes:
        try:
            p = subprocess.run(["git", "-C", self.root, *args], input=stdin, capture_output=True)
        except FileNotFoundError:
            raise CannotCheck("git is not installed") from None
        if check and p.returncode != 0:
            msg = p.stderr.decode(errors="replace").strip().splitlines()
            raise CannotCheck(f"git {' '.join(args[:2])} failed: {msg[-1] if msg else p.returncode}")
        return p.stdout

    def is_repo(self) -> bool:
        if not self.available():
            return False
        try:
            out = self.run("rev-parse", "--is-inside-work-tree", check=False)
        except CannotCheck:
            return False
        return out.strip() == b"true"

    def head(self) -> str:
        return self.run("rev-parse", "HEAD").decode().strip()

    def is_shallow(self) -> bool:
        return self.run("rev-parse", "--is-shallow-repository").strip() == b"true"

    def ls_tree(self, rev: str, subdir: str) -> list[TreeEntry]:
        out = self.run("ls-tree", "-r", "-z", "--full-tree", rev, "--", subdir)
        entries = []
        for rec in out.split(b"\0"):
            if not rec:
                continue
            meta, path = rec.split(b"\t", 1)
            mode, kind, oid = meta.decode().split()
            entries.append(TreeEntry(mode, kind, oid, path.decode()))
        return entries

    def cat_blobs(self, oids: list[str]) -> dict[str, bytes]:
        """Read many blobs through one `git cat-file --batch` process."""
        if not oids:
            return {}
        out = self.run("cat-file", "--batch", stdin="".join(o + "\n" for o in oids).encode())
        blobs: dict[str, bytes] = {}
        pos = 0
        for oid in oids:
            nl = out.index(b"\n", pos)
            header = out[pos:nl].decode().split()
            if len(header) < 3 or header[1] != "blob":
                raise CannotCheck(f"git object {oid} is missing or not a blob")
            size = int(header[2])
            blobs[oid] = out[nl + 1 : nl + 1 + size]
            pos = nl + 1 + size + 1
        return blobs

    def status(self, path: str) -> list[str]:
        out = self.run("status", "--porcelain", "--untracked-files=all", "--", path)
        return [line for line in out.decode(errors="replace").splitlines() if line]

    def first_commit_adding(self, path: str) -> str | None:
        out = self.run("log", "--diff-filter=A", "--format=%H", "--reverse", "--", path)
        commits = out.decode().split()
        return commits[0] if commits else None

    def commits_touching(self, path: str) -> list[str]:
        """Every commit that changed `path`, oldest first."""
        return self.run("log", "--format=%H", "--reverse", "--", path).decode().split()

    def show(self, rev: str, path: str) -> bytes | None:
        out = subprocess.run(
            ["git", "-C", self.root, "show", f"{rev}:{path}"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        return out.stdout if out.returncode == 0 else None
