"""A git ref of a local repository as a fork (`git:DIR@REF`), seen as a checkout of that ref writes it.

The repository is read as data (vendorkit.gitobjects): no git process runs on it, so nothing in it (its
configuration, hooks, promisor remotes, replace refs) can run a program or change what is seen. The tree is
walked lazily: the whole of it only to find the vendor root (nothing of it kept but the names), the subtree at
the vendor root to compare. When `.gitattributes` files apply there, the files get the bytes a checkout writes,
asked of git in a sandbox of our own (vendorkit.checkout); a file whose checkout names a filter driver is
reported as such, never certified. Tree entries a checkout refuses or misplaces are `unsafe` findings. A clone
has none of the repository's own `info/attributes`, so it plays no part.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator

from . import checkout
from .archive import install_path
from .errors import CannotCheck, UsageError
from .forkview import ForkFile
from .gitobjects import Repository
from .limits import MEMBER_MAX_BYTES

_SPEC = re.compile(r"git:(.+)@([^@]+)", re.S)


def is_git_spec(spec: str) -> bool:
    return spec.startswith("git:")


def parse_spec(spec: str) -> tuple[str, str]:
    m = _SPEC.fullmatch(spec)
    if not m:
        raise UsageError(
            f"bad git source {spec!r}: expected git:DIR@REF (a local repository and a branch, tag or commit)"
        )
    return m.group(1), m.group(2)


def _kind(mode: str) -> tuple[str, str]:
    """(kind, git mode as a checkout writes it) of a tree entry's mode."""
    if mode == "160000":
        return "other", "160000"
    if mode == "120000":
        return "symlink", "120000"
    if mode.startswith("100"):
        return "file", "100755" if int(mode, 8) & 0o100 else "100644"
    return "other", mode


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
        self.tree = self.git.commit_tree(self.commit)
        self.label = f"git:{self.repo}@{ref} ({self.commit[:12]})"
        self._unsafe: dict[str, str] = {}
        self._bytes: dict[str, bytes] = {}  # path -> the checkout's bytes, where attributes apply
        self._digests: dict[tuple, tuple[str, int]] = {}  # (blob id, kind) -> (sha256, size): blobs shared by paths

    # ------------------------------------------------------------ walking
    def _entries(self, tree: str, base: str) -> Iterator[tuple[str, str, str]]:
        """(path, mode, oid) below `tree`, unsafe entries recorded instead of yielded."""
        for path, mode, oid, problem in self.git.walk(tree):
            path = f"{base}/{path}" if base else path
            norm, unsafe = install_path(path)
            if problem or unsafe or norm != path:
                self._unsafe[path] = problem or unsafe or f"not a canonical path (would be {norm})"
                continue
            yield path, mode, oid

    def iter_paths(self) -> Iterator[str]:
        for path, _, _ in self._entries(self.tree, ""):
            yield path

    def _subtree(self, prefix: str) -> tuple[str | None, list[tuple[str, str, str]]]:
        """(the tree object at `prefix` or None, the `.gitattributes` entries of the directories on the way).
        A name on the way listed twice in one tree is an unsafe finding: a checkout merges the two copies, so
        attributes of one apply to the files of the other."""
        tree, base, attrs = self.tree, "", []
        for part in [p for p in prefix.split("/") if p]:
            nxt, seen = None, set()
            for mode, name, oid in self.git.tree_entries(tree):
                path = f"{base}/{name}" if base else name
                if name in seen and name in (part, ".gitattributes"):
                    self._unsafe[path] = f"tree {tree} lists {name!r} twice"
                seen.add(name)
                if name == ".gitattributes" and mode != "40000":
                    attrs.append((path, mode, oid))
                if name == part and mode == "40000":
                    nxt = oid
            if nxt is None:
                return None, attrs
            tree, base = nxt, f"{base}/{part}" if base else part
        return tree, attrs

    def list_under(self, prefix: str) -> tuple[dict[str, ForkFile], dict[str, str]]:
        tree, attrs = self._subtree(prefix)
        pre = f"{prefix}/" if prefix else ""
        out: dict[str, ForkFile] = {}
        if tree is not None:
            for path, mode, oid in self._entries(tree, prefix):
                kind, m = _kind(mode)
                out[path[len(pre) :]] = ForkFile(path, kind, m, 0, oid=oid)
                if path.rsplit("/", 1)[-1] == ".gitattributes" and kind in ("file", "symlink"):
                    attrs.append((path, mode, oid))
        for f in out.values():
            if f.kind in ("file", "symlink"):
                kind, size = self.git.header(_oid(f))
                if kind != "blob":
                    raise CannotCheck(f"{self.label}: {f.path} names a {kind}, not a blob")
                f.size = size
                if size > MEMBER_MAX_BYTES:
                    f.too_large = f"a blob of {size:,} bytes, over the {MEMBER_MAX_BYTES >> 20} MiB cap (not read)"
        if attrs:
            self._check_out(out, attrs)
        return out, {}

    def _check_out(self, listing: dict[str, ForkFile], attrs: list[tuple[str, str, str]]) -> None:
        """The bytes a checkout writes for every file of the listing, given the attribute files that apply."""
        files = {p: (m, self.git.read(o, MEMBER_MAX_BYTES, want="blob")[1]) for p, m, o in attrs}
        wanted = {}
        for f in listing.values():
            if f.kind in ("file", "symlink") and not f.too_large:
                files[f.path] = (_tree_mode(f), self._blob(f))
                wanted[f.path] = f
        written, filters = checkout.checkout_bytes(files, list(wanted))
        for path, f in wanted.items():
            kind, data = written[path]
            if kind != f.kind:
                f.kind, f.mode = kind, "" if kind == "other" else f.mode
            self._bytes[path] = data
            f.size = len(data)
            if path in filters:
                f.checkout = (
                    f"a checkout runs the filter driver {filters[path]!r} on it (gitattributes filter="
                    f"{filters[path]}): its bytes depend on the cloner's configuration"
                )

    def _blob(self, f: ForkFile) -> bytes:
        return self.git.read(_oid(f), MEMBER_MAX_BYTES, want="blob")[1]

    # ------------------------------------------------------------ the view
    def findings(self, prefix: str) -> list:
        from .compare import FileResult

        return [
            FileResult(raw, "unsafe", diagnosis="unsafe-member", detail=f"tree entry: {why}", fork_path=raw)
            for raw, why in sorted(self._unsafe.items())
        ]

    def _data(self, f: ForkFile) -> bytes:
        data = self._bytes.get(f.path)
        return data if data is not None else self._blob(f)

    def digest_of(self, f: ForkFile) -> str:
        if f.digest is None:
            if f.too_large or f.kind not in ("file", "symlink"):
                raise CannotCheck(f"{self.label}: {f.path} was not read")
            if f.path in self._bytes:
                f.digest = hashlib.sha256(self._bytes[f.path]).hexdigest()
            else:
                key = (f.oid, f.kind)
                if key not in self._digests:  # many paths may share one blob: it is read once
                    data = self._blob(f)
                    self._digests[key] = (hashlib.sha256(data).hexdigest(), len(data))
                f.digest, f.size = self._digests[key]
        return f.digest

    def read(self, f: ForkFile, limit: int | None = None) -> bytes | None:
        if f.too_large or f.kind not in ("file", "symlink") or (limit is not None and f.size > limit):
            return None
        return self._data(f)

    fetch = read


def _tree_mode(f: ForkFile) -> str:
    return "120000" if f.kind == "symlink" else f.mode


def _oid(f: ForkFile) -> str:
    assert f.oid is not None  # every file list_under() hands out carries the blob id its tree names
    return f.oid
