"""The offline verifier --sync writes into a fork: tools/sm120_vendor_verify.py with its two helper modules
inlined and the release's digests baked in. The bytes are a pure function of (this checkout's template, the
release manifest), so check_vendor compares a fork's verifier with them like any owned file."""
from __future__ import annotations

import functools
import json
import os
import re

from .hashing import git_blob_sha1, sha256_bytes
from .manifest import Manifest

TOOLS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEMPLATE = os.path.join(TOOLS, "sm120_vendor_verify.py")
_BLOCK = re.compile(r"^# >>> inline vendorkit\.(\w+)\n.*?^# <<< inline vendorkit\.\1\n", re.M | re.S)
_RELEASE_LINE = "_RELEASE = None\n"

# sha256 of every verifier an earlier check_vendor wrote (the unbaked template of 2026-11-30, two versions).
# They trust any stamp that adds up, so a fork still carrying one is told to re-sync; --sync replaces them
# without a backup (their bytes are ours).
LEGACY = {
    "3617f748475f430b6f2c1ea5c6c6f570ff8f9f4ac85d2946eba97cf7a7db4195": "check_vendor of 2026-11-30 (6d0daf9)",
    "00471595379e1976807d6a7b2421ed49df83ffe454c3e63611a58a91ec5670e6": "check_vendor of 2026-11-30 (6b95bad)",
}


def _module_body(name: str) -> str:
    """A vendorkit module's source after its `from __future__` line (the verifier has its own)."""
    with open(os.path.join(TOOLS, "vendorkit", f"{name}.py"), encoding="utf-8") as fh:
        src = fh.read()
    head, sep, body = src.partition("from __future__ import annotations\n")
    if not sep:
        raise RuntimeError(f"vendorkit/{name}.py must start with a docstring and the __future__ import")
    return body.strip("\n") + "\n"


@functools.lru_cache(maxsize=None)
def _template() -> str:
    with open(TEMPLATE, encoding="utf-8") as fh:
        src = fh.read()

    def inline(m: re.Match) -> str:
        name = m.group(1)
        body = _module_body(name)
        if name == "inert":  # the template calls inert.text(...): give the inlined functions that namespace
            body += "\n\nclass inert:  # noqa: N801 - the module's name in the template\n" + "".join(
                f"    {fn} = staticmethod({fn})\n" for fn in ("text", "md_code", "html"))
        return f"# ---- inlined from deep_gemm_sm120 tools/vendorkit/{name}.py\n{body}# ---- end of {name}.py\n"

    out, n = _BLOCK.subn(inline, src)
    if n != 2 or out.count(_RELEASE_LINE) != 1:
        raise RuntimeError("tools/sm120_vendor_verify.py lost its inline markers or its _RELEASE line")
    return out


@functools.lru_cache(maxsize=None)
def _build(tag: str, tree: str, files: tuple, lineage: str | None) -> bytes:
    doc = {"tag": tag, "tree_sha256": tree, "files": dict(files)}
    if lineage:  # our own releases' verifiers carry no lineage key
        doc["lineage"] = lineage
    baked = json.dumps(doc, sort_keys=True)
    return _template().replace(_RELEASE_LINE, f"_RELEASE = {baked}\n").encode("utf-8")


def build(m: Manifest) -> bytes:
    """The verifier --sync writes for release `m` (of our lineage or an upstream's)."""
    return _build(m.tag, m.tree_sha256, tuple((e.path, e.sha256) for e in m.files), m.lineage)


def digest(m: Manifest, kind: str) -> str:
    data = build(m)
    return sha256_bytes(data) if kind == "sha256" else git_blob_sha1(data)
