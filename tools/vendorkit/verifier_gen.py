"""The offline verifier --sync writes into a fork: tools/sm120_vendor_verify.py with its two helper modules
inlined and the release's digests and modes baked in. The bytes are a pure function of (this checkout's
template, the release manifest), so check_vendor compares a fork's verifier with them like any owned file.

A verifier an earlier check_vendor wrote is recognised as such (`older-verifier`, replaced by --sync without a
backup): the unbaked ones of 2026-11-30 by their digest (LEGACY), the baked ones by the digest of their template,
their `_RELEASE` line put back to `_RELEASE = None` (LEGACY_TEMPLATES)."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re

from .hashing import git_blob_sha1, sha256_bytes
from .manifest import Manifest

TOOLS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEMPLATE = os.path.join(TOOLS, "sm120_vendor_verify.py")
INLINED = ("safefs", "inert", "trust")
_BLOCK = re.compile(r"^# >>> inline vendorkit\.(\w+)\n.*?^# <<< inline vendorkit\.\1\n", re.M | re.S)
_RELEASE_LINE = "_RELEASE = None\n"
_BAKED_LINE = re.compile(rb"^_RELEASE = .*$", re.M)

# sha256 of every verifier an earlier check_vendor wrote (the unbaked template of 2026-11-30, two versions).
# They trust any stamp that adds up, so a fork still carrying one is told to re-sync; --sync replaces them
# without a backup (their bytes are ours).
LEGACY = {
    "3617f748475f430b6f2c1ea5c6c6f570ff8f9f4ac85d2946eba97cf7a7db4195": "check_vendor of 2026-11-30 (6d0daf9)",
    "00471595379e1976807d6a7b2421ed49df83ffe454c3e63611a58a91ec5670e6": "check_vendor of 2026-11-30 (6b95bad)",
}
# sha256 of each earlier baked template (inlined, `_RELEASE = None`), by the commit that wrote it and what it
# lacks; a fork carrying one is told to re-sync (the bytes --sync writes changed).
_UNISOLATED = ", whose verifier imports modules found beside it (a planted hashlib.py decides it) and ignores modes"
_LINKED = ", whose verifier run through a symlinked path imports modules found beside it"
_UNPINNED = ", whose verifier checks neither the release's signature nor its place in the release chain"
LEGACY_TEMPLATES = {
    "463c78b4455596681173a5f3b596eaa748fe1df594536e75549786edc431fdea": "check_vendor of 2026-12-01 (c464b40)"
    + _UNISOLATED,
    "8d6d265f2406ada846ee6c27f6d801ed48dcdd6af46a21e65799a5d9a8b89d9a": "check_vendor of 2026-12-01 (b4338cd)"
    + _UNISOLATED,
    "3209998d37e04146a223b1cb3b848ab9e7934d155cd3e999217e59429fd62cbe": "check_vendor of 2026-12-01 (a44df92)"
    + _UNISOLATED,
    "106af379be1a3d5fa040f5eda739ff9918a5ae06d9ef8a9a7e970944b14fa098": "check_vendor of 2026-12-01 (6416b30)"
    + _UNISOLATED,
    "717004581df13a8494238f82055f87ee85306fdc56f7a9dc7bdeec0a94f3bb8e": "check_vendor of 2026-12-02 (6ed4cc4)"
    + _LINKED,
    "a65218f52710095539fd8c76e2b6bbe7f6c9c584bd7350acc3614684f636edbb": "check_vendor of 2026-12-02 (9487992)"
    + _LINKED,
    "7f19560b53ac1c9a9582a2ba059ca115c67a024ddfcad535e3c5e11a24720e94": "check_vendor of 2026-12-02 (e35f13a)"
    + _UNPINNED,
    "bbf676bb805f906eb52d31f896e51294daaf2c07343a621080eb9569ab562fca": "check_vendor of 2026-12-04 (b96b11b)"
    + ", whose verifier's manifest reader is quadratic on a hostile line and fails on text outside the BMP",
    "209dd64ab373eba8e23f51830b0b726bce7afe2cef9a299051f8944a1df6fdfa": "check_vendor of 2026-12-04 (c0dea63)"
    + ", whose verifier accepts a non-ASCII pinned signature and ignores --chain where it cannot check it",
}


def _module_body(src: str, name: str) -> str:
    """A vendorkit module's source after its `from __future__` line (the verifier imports nothing before it
    isolates itself, so the inlined copy carries none)."""
    head, sep, body = src.partition("from __future__ import annotations\n")
    if not sep:
        raise RuntimeError(f"vendorkit/{name}.py must start with a docstring and the __future__ import")
    return body.strip("\n") + "\n"


_PUBLIC = re.compile(r"^(?:(def|class) ([A-Za-z]\w*)|([A-Z][A-Z0-9_]*) = )", re.M)


def _public_names(body: str) -> list[tuple[str, str]]:
    """(kind, name) of the functions, classes and constants a module body defines at top level, in order."""
    return [
        ("def", m.group(2)) if m.group(1) == "def" else ("value", m.group(2) or m.group(3))
        for m in _PUBLIC.finditer(body)
    ]


def inline(template: str, modules: dict[str, str]) -> str:
    """The verifier template with each `# >>> inline vendorkit.NAME` block replaced by that module's source: a
    pure function of the sources, so the template of any earlier commit can be rebuilt from its files."""

    def one(m: re.Match) -> str:
        name = m.group(1)
        body = _module_body(modules[name], name)
        if name == "inert":  # the template calls inert.text(...): give the inlined functions that namespace
            body += "\n\nclass inert:  # noqa: N801 - the module's name in the template\n" + "".join(
                f"    {fn} = staticmethod({fn})\n" for fn in ("text", "md_code", "html", "json_safe")
            )
        elif name == "trust":  # likewise trust.X, for every public name the module defines
            body += "\n\nclass trust:  # noqa: N801 - the module's name in the template\n" + "".join(
                f"    {n} = staticmethod({n})\n" if kind == "def" else f"    {n} = {n}\n"
                for kind, n in _public_names(body)
            )
        return f"# ---- inlined from deep_gemm_sm120 tools/vendorkit/{name}.py\n{body}# ---- end of {name}.py\n"

    out, n = _BLOCK.subn(one, template)
    if n != len(modules) or out.count(_RELEASE_LINE) != 1:
        raise RuntimeError("tools/sm120_vendor_verify.py lost its inline markers or its _RELEASE line")
    return out


@functools.cache
def _template() -> str:
    def read(path: str) -> str:
        with open(path, encoding="utf-8") as fh:
            return fh.read()

    return inline(read(TEMPLATE), {n: read(os.path.join(TOOLS, "vendorkit", f"{n}.py")) for n in INLINED})


def template_digest(template: str) -> str:
    return hashlib.sha256(template.encode("utf-8")).hexdigest()


@functools.cache
def _build(
    tag: str, tree: str, files: tuple, modes: tuple, lineage: str | None, text: str | None, chain: tuple | None
) -> bytes:
    doc: dict = {"tag": tag, "tree_sha256": tree, "files": dict(files)}
    if chain is not None and text is not None:  # a chained release: its exact manifest and place in the chain
        doc.update(manifest=text, chain_length=chain[0], chain_head=chain[1])
    if modes:  # paths whose git mode is not 100644
        doc["modes"] = dict(modes)
    if lineage:  # our own releases' verifiers carry no lineage key
        doc["lineage"] = lineage
    # not ASCII-escaped: JSON spells a character outside the BMP as a surrogate pair, which a Python literal
    # reads as two lone surrogates (the baked manifest text would no longer be its bytes)
    baked = json.dumps(doc, sort_keys=True, ensure_ascii=False)
    return _template().replace(_RELEASE_LINE, f"_RELEASE = {baked}\n").encode("utf-8")


def build(m: Manifest) -> bytes:
    """The verifier --sync writes for release `m` (of our lineage or an upstream's)."""
    return _build(
        m.tag,
        m.tree_sha256,
        tuple((e.path, e.sha256) for e in m.files),
        tuple((e.path, e.mode) for e in m.files if e.mode not in (None, "100644")),
        m.lineage,
        m.text if m.lineage is None else None,
        m.chain if m.lineage is None else None,
    )


def digest(m: Manifest, kind: str) -> str:
    data = build(m)
    return sha256_bytes(data) if kind == "sha256" else git_blob_sha1(data)


def older(data: bytes) -> str | None:
    """Which earlier check_vendor wrote these verifier bytes (any release's), or None."""
    sha = sha256_bytes(data)
    if sha in LEGACY:
        return LEGACY[sha]
    unbaked, n = _BAKED_LINE.subn(b"_RELEASE = None", data, count=1)
    return LEGACY_TEMPLATES.get(sha256_bytes(unbaked)) if n else None
