"""Remote fork view over the GitHub REST API: `github:OWNER/REPO@REF`.

Cost: one (conditional) commit lookup and one (conditional) recursive tree read. Digests are git blob
ids straight from the tree, so nothing is downloaded unless a diff is asked for. A truncated recursive
tree is completed by walking only the subtrees along the prefix.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
from collections.abc import Iterator
from typing import overload

from . import checkout
from .archive import install_path
from .errors import CannotCheck, UsageError
from .forkview import ForkFile
from .github import GitHubClient, NotFound
from .hashing import git_blob_sha1

_SPEC = re.compile(r"github:([A-Za-z0-9][A-Za-z0-9-]*)/([A-Za-z0-9._-]+)(?:@(.+))?")
REPO_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]*/[A-Za-z0-9._-]+")
_OID = re.compile(r"[0-9a-f]{40}")


def parse_spec(spec: str) -> tuple[str, str, str]:
    m = _SPEC.fullmatch(spec)
    if not m or m.group(2) in (".", ".."):
        raise UsageError(f"bad remote fork {spec!r}: expected github:OWNER/REPO@REF")
    return m.group(1), m.group(2), m.group(3) or "HEAD"


def _slim_commit(data):
    out = {"sha": data["sha"], "tree": data["commit"]["tree"]["sha"]}
    if not all(isinstance(v, str) and _OID.fullmatch(v) for v in out.values()):
        raise TypeError("malformed commit")
    return out


def _tree_entry(e: dict) -> dict:
    """One tree entry with the types git gives it; a TypeError (an "unexpected answer") otherwise."""
    out = {"path": e["path"], "mode": e["mode"], "type": e["type"], "sha": e["sha"], "size": e.get("size", 0) or 0}
    if not (
        isinstance(out["path"], str)
        and isinstance(out["mode"], str)
        and out["type"] in ("blob", "tree", "commit")
        and isinstance(out["sha"], str)
        and _OID.fullmatch(out["sha"])
        and isinstance(out["size"], int)
        and out["size"] >= 0
    ):
        raise TypeError("malformed tree entry")
    return out


def _slim_tree(data):
    return {
        "sha": data["sha"],
        "truncated": bool(data.get("truncated")),
        "tree": [_tree_entry(e) for e in data["tree"]],
    }


def _entry(path: str, e: dict) -> ForkFile | None:
    if e["type"] == "tree":
        return None
    if e["type"] == "commit":  # a submodule where a file may belong
        return ForkFile(path, "other", "160000", 0, digest=e["sha"])
    mode = e["mode"]
    kind = "symlink" if mode == "120000" else "file"
    return ForkFile(path, kind, mode, e["size"], digest=e["sha"])


class RemoteFork:
    def __init__(
        self, client: GitHubClient, owner: str, repo: str, ref: str, want_blobs: bool = False, sha256: bool = False
    ):
        """`sha256`: hand out sha256 digests, fetching each compared blob (for lineages without blob ids);
        by default the tree's git blob ids, so an in-sync fork costs two requests and downloads nothing."""
        self.client, self.owner, self.repo, self.ref = client, owner, repo, ref
        self.want_blobs = want_blobs
        self.digest_kind = "sha256" if sha256 else "git_blob_sha1"
        self.label = f"github:{owner}/{repo}@{ref}"
        base = f"/repos/{owner}/{repo}"
        self._base = base
        try:
            c = client.get(f"{base}/commits/{ref}", slim=_slim_commit)
        except NotFound:
            raise CannotCheck(
                f"{owner}/{repo}@{ref}: repository or ref not found (or not visible to the token)"
            ) from None
        self.commit_sha, self.tree_sha = c["sha"], c["tree"]
        root = client.get(f"{base}/git/trees/{self.tree_sha}", params={"recursive": "1"}, slim=_slim_tree)
        self.truncated = root["truncated"]
        self._files: dict[str, ForkFile] = {}
        self._dirs: set[str] = set()
        self._unsafe: dict[str, str] = {}
        self._sha256: dict[str, str] = {}
        self._checkout: dict[str, bytes] = {}  # path -> what a checkout writes, where .gitattributes change it
        self._blob_ids: dict[str, str | None] = {}  # path -> its blob's id, where the digest became the checkout's
        self._add(root["tree"], "")

    def _add(self, entries: list[dict], base: str) -> None:
        for e in entries:
            raw = f"{base}/{e['path']}" if base else e["path"]
            path, unsafe = install_path(raw) if isinstance(raw, str) else (None, "not a string")
            # git never stores such names; a server that sends them is not git (no path: "." or "")
            if unsafe or path is None or path != raw:
                self._unsafe[str(raw)] = unsafe or f"not a canonical path (would be {path})"
                continue
            if e["type"] == "tree":
                self._dirs.add(path)
            f = _entry(path, e)
            if f is not None:
                self._files[path] = f

    def findings(self, prefix: str) -> list:
        from .compare import FileResult

        return [
            FileResult(raw, "unsafe", diagnosis="unsafe-member", detail=f"tree entry: {why}", fork_path=raw)
            for raw, why in sorted(self._unsafe.items())
        ]

    def _tree(self, sha: str, recursive: bool) -> dict:
        params = {"recursive": "1"} if recursive else None
        return self.client.get(f"{self._base}/git/trees/{sha}", params=params, slim=_slim_tree)

    def _complete_under(self, prefix: str) -> None:
        """After a truncated listing: walk root -> prefix one level at a time, then the prefix subtree."""
        sha, path = self.tree_sha, ""
        for part in [p for p in prefix.split("/") if p]:
            level = self._tree(sha, recursive=False)
            # attribute files on the way apply below the prefix: a checkout reads them
            self._add([e for e in level["tree"] if e["type"] == "blob" and e["path"] == ".gitattributes"], path)
            nxt = next((e for e in level["tree"] if e["path"] == part and e["type"] == "tree"), None)
            if nxt is None:
                return  # the prefix does not exist: everything is missing
            sha, path = nxt["sha"], f"{path}/{part}" if path else part
        stack = [(sha, path)]
        while stack:
            sha, base = stack.pop()
            sub = self._tree(sha, recursive=True)
            if not sub["truncated"]:
                self._add(sub["tree"], base)
                continue
            level = self._tree(sha, recursive=False)  # still too big: descend one level at a time
            self._add([e for e in level["tree"] if e["type"] != "tree"], base)
            stack += [
                (e["sha"], f"{base}/{e['path']}" if base else e["path"]) for e in level["tree"] if e["type"] == "tree"
            ]

    def list_under(self, prefix: str) -> tuple[dict[str, ForkFile], dict[str, str]]:
        if self.truncated:
            self._complete_under(prefix)
            self.truncated = False
        pre = f"{prefix}/" if prefix else ""
        out = {p[len(pre) :]: f for p, f in self._files.items() if p.startswith(pre)}
        attrs = checkout.on_the_way(checkout.needs_git(self._files), prefix)
        if attrs:
            self._check_out(out, attrs)
        return out, {}

    def _check_out(self, listing: dict[str, ForkFile], attrs: list[str]) -> None:
        """Files whose checkout the tree's .gitattributes change get the digest of what a checkout writes
        (vendorkit.checkout): the attribute files are fetched (a request each), then only the files that have
        conversion attributes, and checked out in a sandbox."""
        files = {
            p: (self._files[p].mode, self._blob_bytes(self._files[p]))
            for p in attrs
            if self._files[p].kind in ("file", "symlink")
        }
        paths = [f.path for f in listing.values() if f.kind in ("file", "symlink") and f.path not in files]
        if not files or not paths:
            return
        set_attrs = checkout.attributes_of(files, paths)
        affected = [p for p in paths if set_attrs.get(p)]
        if not affected:
            return
        for p in affected:
            files[p] = (self._files[p].mode, self._blob_bytes(self._files[p]))
        written, filters = checkout.checkout_bytes(files, affected)
        for p in affected:
            f = self._files[p]
            self._blob_ids[p] = f.digest  # the blob stays fetchable by its own id
            kind, data = written[p]
            self._checkout[p] = data
            f.size = len(data)
            f.digest = git_blob_sha1(data)
            self._sha256[p] = hashlib.sha256(data).hexdigest()
            if kind != f.kind:
                f.kind = kind
            if p in filters:
                f.checkout = (
                    f"a checkout runs the filter driver {filters[p]!r} on it (gitattributes filter="
                    f"{filters[p]}): its bytes depend on the cloner's configuration"
                )

    def iter_paths(self) -> Iterator[str]:
        if self.truncated:
            raise CannotCheck(
                f"{self.label}: the recursive tree listing is truncated; pass --prefix so only "
                f"the device-layer subtree is read"
            )
        return iter(list(self._files))

    def digest_of(self, f: ForkFile) -> str:
        if self.digest_kind == "git_blob_sha1":
            return f.digest or ""
        if f.path not in self._sha256:
            # a blob id names its bytes forever: the watcher's state file keeps blob -> sha256 between runs
            key = f"blob-sha256:{f.digest}"
            known = self.client.etags.entries.get(key)
            if isinstance(known, dict) and isinstance(known.get("sha256"), str):
                self._sha256[f.path] = known["sha256"]
            else:
                data = self.fetch(f)
                if data is None:
                    raise CannotCheck(f"{self.label}: {f.path} could not be fetched")
                self._sha256[f.path] = hashlib.sha256(data).hexdigest()
                if f.digest:
                    self.client.etags.entries[key] = {"sha256": self._sha256[f.path]}
        return self._sha256[f.path]

    def read(self, f: ForkFile, limit: int | None = None) -> bytes | None:
        return self.fetch(f, limit) if self.want_blobs else None

    def fetch(self, f: ForkFile, limit: int | None = None) -> bytes | None:
        """One blob request: diagnoses (cosmetic vs content), stamps and patches need the bytes. None for a blob
        the tree says is larger than `limit` (not requested). A file .gitattributes change: the checkout's."""
        if f.kind not in ("file", "symlink") or (limit is not None and f.size > limit):
            return None
        if f.path in self._checkout:
            return self._checkout[f.path]
        return self._blob_bytes(f, limit)

    @overload
    def _blob_bytes(self, f: ForkFile, limit: None = None) -> bytes: ...
    @overload
    def _blob_bytes(self, f: ForkFile, limit: int | None) -> bytes | None: ...
    def _blob_bytes(self, f: ForkFile, limit: int | None = None) -> bytes | None:
        """The blob's bytes; None when they are more than `limit` (never without a limit)."""
        data = self.client.get(f"{self._base}/git/blobs/{self._blob_ids.get(f.path, f.digest)}", conditional=False)
        if not isinstance(data, dict) or data.get("encoding") != "base64":
            raise CannotCheck(f"unexpected blob encoding for {f.path}")
        try:
            blob = base64.b64decode(data["content"])
        except (ValueError, TypeError, KeyError):
            raise CannotCheck(f"malformed blob for {f.path}") from None
        if limit is not None and len(blob) > limit:
            return None
        return blob


def open_remote_fork(
    spec: str,
    api_url: str | None = None,
    want_blobs: bool = False,
    client: GitHubClient | None = None,
    sha256: bool = False,
) -> RemoteFork:
    owner, repo, ref = parse_spec(spec)
    client = client or GitHubClient(api_url or os.environ.get("GITHUB_API_URL"), os.environ.get("GITHUB_TOKEN"))
    return RemoteFork(client, owner, repo, ref, want_blobs, sha256)
