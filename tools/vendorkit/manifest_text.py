"""A strict, stdlib-only reader for the manifest format `dump_manifest` writes, so verifying a fork needs no
PyYAML. It accepts exactly that layout (scalar lines, the `requires` flow mapping, one flow mapping per file)
and refuses anything else with a ManifestError; with PyYAML installed the general loader is used instead, and
a test proves both readers agree on every released manifest."""
from __future__ import annotations

import re

from .errors import ManifestError

_SCALAR = re.compile(r'^(schema|tag|root|created|tree_sha256): (?:"([^"\\]*)"|([^"{}\[\],#\s][^{}\[\],#]*?))\s*$')
_REQUIRES = re.compile(r'^requires: \{cuda: "([^"\\]*)", targets: \[([A-Za-z0-9_, ]*)\]\}\s*$')
_FILE = re.compile(r'^  - \{path: "([^"\\]*)", sha256: "([^"\\]*)", git_blob_sha1: "([^"\\]*)", '
                   r'size: (\d+), mode: "([^"\\]*)"\}\s*$')


def _scalar(key: str, quoted: str | None, plain: str | None):
    if quoted is not None:
        return quoted
    if key == "schema" and re.fullmatch(r"\d+", plain):
        return int(plain)
    return plain


def parse(text: str, where: str) -> dict:
    """The mapping PyYAML's safe loader would produce for a manifest we wrote (dates stay strings)."""
    out: dict = {}
    files = None
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if files is not None and line.startswith("  - "):
            m = _FILE.match(line)
            if not m:
                raise ManifestError(f"{where}:{n}: file entry not in the manifest format "
                                    f"(install PyYAML to read other YAML layouts)")
            path, sha, blob, size, mode = m.groups()
            files.append({"path": path, "sha256": sha, "git_blob_sha1": blob, "size": int(size), "mode": mode})
            continue
        if line == "files:":
            if "files" in out:
                raise ManifestError(f"{where}:{n}: duplicate key files")
            files = out["files"] = []
            continue
        m = _SCALAR.match(line) or _REQUIRES.match(line)
        if m is None:
            raise ManifestError(f"{where}:{n}: line not in the manifest format (install PyYAML to read other "
                                f"YAML layouts): {line[:80]!r}")
        key = "requires" if m.re is _REQUIRES else m.group(1)
        if key in out:
            raise ManifestError(f"{where}:{n}: duplicate key {key}")
        if key == "requires":
            targets = [t.strip() for t in m.group(2).split(",") if t.strip()]
            out[key] = {"cuda": m.group(1), "targets": targets}
        else:
            out[key] = _scalar(key, m.group(2), m.group(3))
        files = None
    return out
