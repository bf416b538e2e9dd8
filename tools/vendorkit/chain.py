"""The release chain: `vendor_manifests/chain.txt`, one line per release, oldest first, each naming the sha256 of
its manifest's exact bytes and the sha256 of the line before it.

    v0.1.0 <sha256 of vendor_manifests/v0.1.0.yaml> 0000...0000
    v0.2.0 <sha256 of vendor_manifests/v0.2.0.yaml> <sha256 of the v0.1.0 line, newline included>

Rewriting a released manifest changes its digest (its line no longer matches); rewriting a line changes the
link every later line holds. A release's *position* is the digest of its own line: whoever pinned it (a fork's
stamp) can tell later whether the chain they are shown still holds that exact line (else the history was
rewritten) and whether the release offered comes at or after it (else a rollback). The file is append-only: a
release adds its line, nothing else changes (released manifests never carry the chain: they predate it).
Standard library only; every read is bounded.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

from . import trust
from .errors import ManifestError
from .versions import sort_key

CHAIN_NAME = "chain.txt"
GENESIS = trust.GENESIS
MAX_BYTES = trust.CHAIN_MAX_BYTES
HEADER = (
    "# deep_gemm_sm120 release chain (docs/vendoring.md): append-only; each line is a release tag, the sha256 of\n"
    "# vendor_manifests/<tag>.yaml's bytes and the sha256 of the previous line (newline included)\n"
)


@dataclass(frozen=True)
class Link:
    tag: str
    manifest_sha256: str
    prev: str  # sha256 of the previous line's bytes (GENESIS for the first)
    line: bytes  # the exact line, newline included

    @property
    def position(self) -> str:
        """This release's place in history: the digest the next line links to and a stamp pins."""
        return hashlib.sha256(self.line).hexdigest()


def line_for(tag: str, manifest_sha256: str, prev: str) -> bytes:
    return f"{tag} {manifest_sha256} {prev}\n".encode()


def parse(data: bytes, where: str = CHAIN_NAME) -> list[Link]:
    """Links of a chain file, checked as a chain (vendorkit.trust.chain_links, which the offline verifier shares):
    strict line format, tags strictly increasing, each `prev` the digest of the line before. ManifestError naming
    the first broken line otherwise."""
    try:
        raw = trust.chain_links(data, where)
    except trust.TrustError as e:
        raise ManifestError(str(e)) from None
    return [Link(tag, digest, prev, line_for(tag, digest, prev)) for tag, digest, prev, _ in raw]


def read(manifest_dir: str) -> list[Link] | None:
    """The chain of a manifest directory; None when it has no chain file."""
    path = os.path.join(manifest_dir, CHAIN_NAME)
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_BYTES + 1)
    except FileNotFoundError:
        return None
    return parse(data, f"vendor_manifests/{CHAIN_NAME}")


def manifest_digest(manifest_dir: str, tag: str) -> str:
    with open(os.path.join(manifest_dir, f"{tag}.yaml"), "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def problems(manifest_dir: str, tags: list[str]) -> list[str]:
    """What is wrong between the chain and the released manifests `tags` (oldest first): a missing chain, a
    release missing from it or named out of order, a manifest whose bytes are not the ones chained."""
    try:
        links = read(manifest_dir)
    except ManifestError as e:
        return [str(e)]
    if links is None:
        return [f"vendor_manifests/{CHAIN_NAME} is missing: releases are not chained"] if tags else []
    out = []
    chained = [link.tag for link in links]
    if chained != tags[: len(chained)] or len(chained) > len(tags):
        out.append(f"vendor_manifests/{CHAIN_NAME} chains {', '.join(chained)}; the releases are {', '.join(tags)}")
    for link in links:
        if link.tag in tags and manifest_digest(manifest_dir, link.tag) != link.manifest_sha256:
            out.append(f"vendor_manifests/{link.tag}.yaml is not the manifest the chain holds for {link.tag}")
    missing = tags[len(chained) :]
    if missing and not out:
        out.append(f"not chained yet: {', '.join(missing)} (check_vendor.py release appends each release's line)")
    return out


def append(manifest_dir: str, tag: str) -> Link:
    """Add `tag`'s line (its manifest already written) after the chain's last; creates the file with its
    header for the first release. The file is rewritten atomically with its old bytes as a prefix."""
    links = read(manifest_dir) or []
    if links and sort_key(tag) <= sort_key(links[-1].tag):
        raise ManifestError(f"{tag} does not come after the chain's last release {links[-1].tag}")
    prev = links[-1].position if links else GENESIS
    line = line_for(tag, manifest_digest(manifest_dir, tag), prev)
    path = os.path.join(manifest_dir, CHAIN_NAME)
    old = b""
    if os.path.exists(path):
        with open(path, "rb") as fh:
            old = fh.read()
    tmp = path + ".tmp"
    with open(tmp, "wb") as fh:
        fh.write((old or HEADER.encode()) + line)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
    return parse(old + line if old else HEADER.encode() + line)[-1]
