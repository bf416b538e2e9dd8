"""Digests used in manifests: sha256, git blob ids and the tree digest."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import BinaryIO

CHUNK = 1 << 20


def sha256_stream(f: BinaryIO) -> str:
    h = hashlib.sha256()
    for block in iter(lambda: f.read(CHUNK), b""):
        h.update(block)
    return h.hexdigest()


def sha256_file(path: str) -> str:
    with open(path, "rb") as f:
        return sha256_stream(f)


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def git_blob_sha1(data: bytes) -> str:
    """The object id git gives a blob: sha1 over b"blob <size>\\0" + content."""
    h = hashlib.sha1(b"blob %d\0" % len(data))
    h.update(data)
    return h.hexdigest()


def tree_sha256(entries: Iterable[tuple[str, str]]) -> str:
    """sha256 over "<sha256>  <path>\\n" lines in path order (the sha256sum format)."""
    h = hashlib.sha256()
    for path, digest in sorted(entries):
        h.update(f"{digest}  {path}\n".encode())
    return h.hexdigest()
