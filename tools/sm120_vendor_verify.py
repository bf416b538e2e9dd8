#!/usr/bin/env python3
"""Offline verifier of a vendored deep_gemm_sm120 device layer (standard library only, one file).

`check_vendor.py --sync` writes this file and `.sm120-vendor.json` (the stamp) into the fork's vendor root.
The stamp names the release tag, its tree digest, the sha256 of every file --sync wrote (the files it
"owns") and any reviewed local patches. In the fork's own CI:

    python deep_gemm/include/deep_gemm/.sm120-vendor-verify.py [--manifest vX.Y.Z.yaml] [--strict]
                                                               [--format text|json]

checks each owned file against the stamp (a pinned patch whose base is the stamped hash reports `patched`),
lists files the stamp does not own (`foreign`; drift only with --strict), and, given a release manifest,
checks the stamp itself against it (a stamp edited to bless drifted files is caught there).
Exit: 0 in sync, 1 drifted, 2 could not read the files, 3 usage error or unreadable stamp / manifest.

deep_gemm_sm120's tools/check_vendor.py imports this module for its stamp handling: one implementation.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys

STAMP = ".sm120-vendor.json"
VERIFIER = ".sm120-vendor-verify.py"
BACKUP_DIR = ".sm120-sync-backup"  # where --sync copies a fork's bytes before overwriting them
STAMP_SCHEMA = 1
EXIT_OK, EXIT_DRIFT, EXIT_CANNOT_CHECK, EXIT_USAGE = 0, 1, 2, 3
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


class VerifyError(Exception):
    def __init__(self, message: str, exit_code: int = EXIT_USAGE):
        super().__init__(message)
        self.exit_code = exit_code


# ---------------------------------------------------------------- shared helpers

def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def tree_sha256(entries) -> str:
    """sha256 over "<sha256>  <path>\\n" in path order (the manifests' tree_sha256)."""
    h = hashlib.sha256()
    for path, digest in sorted(entries):
        h.update(f"{digest}  {path}\n".encode())
    return h.hexdigest()


def safe_relative(path) -> bool:
    """A relative POSIX path with no '..', '.', empty parts, backslashes, NULs or drive letters."""
    if not isinstance(path, str) or not path or path.startswith("/") or "\\" in path or "\0" in path:
        return False
    if re.match(r"^[A-Za-z]:", path):
        return False
    return all(p not in ("", ".", "..") for p in path.split("/"))


# ---------------------------------------------------------------- the manifest format (strict reader)

_SCALAR = re.compile(r'^(schema|tag|root|created|tree_sha256): (?:"([^"\\]*)"|([^"{}\[\],#\s][^{}\[\],#]*?))\s*$')
_REQUIRES = re.compile(r'^requires: \{cuda: "([^"\\]*)", targets: \[([A-Za-z0-9_, ]*)\]\}\s*$')
_FILE = re.compile(r'^  - \{path: "([^"\\]*)", sha256: "([^"\\]*)", git_blob_sha1: "([^"\\]*)", '
                   r'size: (\d+), mode: "([^"\\]*)"\}\s*$')


def parse_manifest_text(text: str, where: str) -> dict:
    """The mapping PyYAML's safe loader gives for a manifest check_vendor wrote (dates stay strings). Strict:
    any other layout raises VerifyError (check_vendor then suggests installing PyYAML)."""
    out: dict = {}
    files = None
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if files is not None and line.startswith("  - "):
            m = _FILE.match(line)
            if not m:
                raise VerifyError(f"{where}:{n}: file entry not in the manifest format")
            path, sha, blob, size, mode = m.groups()
            files.append({"path": path, "sha256": sha, "git_blob_sha1": blob, "size": int(size), "mode": mode})
            continue
        if line == "files:":
            if "files" in out:
                raise VerifyError(f"{where}:{n}: duplicate key files")
            files = out["files"] = []
            continue
        m = _SCALAR.match(line) or _REQUIRES.match(line)
        if m is None:
            raise VerifyError(f"{where}:{n}: line not in the manifest format: {line[:80]!r}")
        key = "requires" if m.re is _REQUIRES else m.group(1)
        if key in out:
            raise VerifyError(f"{where}:{n}: duplicate key {key}")
        if key == "requires":
            out[key] = {"cuda": m.group(1), "targets": [t.strip() for t in m.group(2).split(",") if t.strip()]}
        elif m.group(2) is not None:
            out[key] = m.group(2)
        else:
            out[key] = int(m.group(3)) if key == "schema" and m.group(3).isdigit() else m.group(3)
        files = None
    return out


# ---------------------------------------------------------------- the stamp

def parse_stamp(text: str, where: str = STAMP) -> dict:
    """Load and check the stamp's own shape (VerifyError, exit 3, when it cannot be used at all). Paths are
    kept as written: validate() reports unsafe ones as findings and nothing ever reads them."""
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise VerifyError(f"{where}: not valid JSON ({e})") from None
    if not isinstance(doc, dict) or doc.get("schema") != STAMP_SCHEMA:
        raise VerifyError(f"{where}: expected a schema {STAMP_SCHEMA} stamp object")
    for key, kind in (("tag", str), ("tree_sha256", str), ("files", list), ("patches", list)):
        if not isinstance(doc.get(key), kind):
            raise VerifyError(f"{where}: '{key}' must be a {kind.__name__}")
    for i, f in enumerate(doc["files"]):
        if not isinstance(f, dict) or not isinstance(f.get("path"), str) or not isinstance(f.get("sha256"), str):
            raise VerifyError(f"{where}: files[{i}] must be {{path, sha256}}")
    for i, p in enumerate(doc["patches"]):
        if not isinstance(p, dict) or not all(isinstance(p.get(k), str) for k in
                                              ("path", "base_sha256", "patched_sha256", "reason")):
            raise VerifyError(f"{where}: patches[{i}] must be {{path, base_sha256, patched_sha256, reason, "
                              f"upstream?}}")
    return doc


def make_stamp(tag: str, files: dict[str, str], patches: list[dict] | None = None,
               verifier_sha256: str | None = None) -> str:
    """The stamp --sync writes: files = {path: sha256} of the release files it owns (sorted)."""
    doc = {"schema": STAMP_SCHEMA, "tool": "deep_gemm_sm120 tools/check_vendor.py", "tag": tag,
           "tree_sha256": tree_sha256(files.items()),
           "files": [{"path": p, "sha256": s} for p, s in sorted(files.items())],
           "patches": sorted(patches or [], key=lambda p: p["path"])}
    if verifier_sha256:
        doc["verifier"] = {"path": VERIFIER, "sha256": verifier_sha256}
    return json.dumps(doc, indent=1) + "\n"


def validate(doc: dict, manifest_files: dict[str, str] | None = None, manifest_tree: str | None = None,
             manifest_tag: str | None = None) -> list[str]:
    """Findings that make the stamp itself untrustworthy (each one is drift): unsafe paths, a tree digest that
    does not add up, and, given the release manifest of its tag, paths or hashes that disagree with it, and
    patches whose base is not the released hash."""
    problems = []
    files = {}
    for f in doc["files"]:
        if not safe_relative(f["path"]):
            problems.append(f"stamp lists an unsafe path {f['path']!r} (outside the vendor root); it is not read")
            continue
        if not _HEX64.match(f["sha256"]):
            problems.append(f"stamp hash of {f['path']} is not a sha256")
        files[f["path"]] = f["sha256"]
    if tree_sha256(files.items()) != doc["tree_sha256"] and not problems:
        problems.append("stamp tree_sha256 does not match its own file list (edited by hand?)")
    if manifest_files is not None:
        if manifest_tag is not None and doc["tag"] != manifest_tag:
            problems.append(f"stamp names {doc['tag']}, checked against {manifest_tag}")
        for path, sha in sorted(files.items()):
            if path not in manifest_files:
                problems.append(f"stamp owns {path}, which {doc['tag']} does not ship")
            elif manifest_files[path] != sha:
                problems.append(f"stamp hash of {path} is not the released one (stamp edited to bless a change?)")
        for path in sorted(set(manifest_files) - set(files)):
            problems.append(f"stamp omits {path}, which {doc['tag']} ships")
        if manifest_tree is not None and doc["tree_sha256"] != manifest_tree:
            problems.append(f"stamp tree_sha256 is not {doc['tag']}'s")
    for p in doc["patches"]:
        if not safe_relative(p["path"]):
            problems.append(f"patch entry has an unsafe path {p['path']!r}")
        elif p["path"] not in files:
            problems.append(f"patch for {p['path']}, a file the stamp does not own")
        elif p["base_sha256"] != files[p["path"]]:
            problems.append(f"patch for {p['path']} has a base that is not the released hash")
    return problems


def patch_for(doc: dict, path: str, actual_sha256: str, base_sha256: str) -> dict | None:
    """The pinned patch that explains `actual` bytes at `path`, if its base is the released hash."""
    for p in doc["patches"]:
        if p["path"] == path and p["patched_sha256"] == actual_sha256 and p["base_sha256"] == base_sha256:
            return p
    return None


# ---------------------------------------------------------------- the offline check

def verify(root: str, manifest_path: str | None = None, strict: bool = False) -> dict:
    """{verdict, exit_code, files: [{path, status, detail}], problems} for the vendor root `root`."""
    stamp_path = os.path.join(root, STAMP)
    try:
        with open(stamp_path, "rb") as fh:
            raw = fh.read()
        doc = parse_stamp(raw.decode("utf-8"), stamp_path)
    except FileNotFoundError:
        raise VerifyError(f"no {STAMP} in {root}: this vendor root was not written by check_vendor --sync") from None
    except UnicodeDecodeError:
        raise VerifyError(f"{stamp_path}: not UTF-8 text") from None
    except OSError as e:
        raise VerifyError(f"cannot read {stamp_path}: {e}", EXIT_CANNOT_CHECK) from None
    mfiles = mtree = mtag = None
    if manifest_path:
        try:
            with open(manifest_path, encoding="utf-8") as fh:
                m = parse_manifest_text(fh.read(), manifest_path)
        except UnicodeDecodeError:
            raise VerifyError(f"{manifest_path}: not UTF-8 text") from None
        except OSError as e:
            raise VerifyError(f"cannot read {manifest_path}: {e}") from None
        mfiles = {f["path"]: f["sha256"] for f in m.get("files", [])}
        mtree, mtag = m.get("tree_sha256"), m.get("tag")
    problems = validate(doc, mfiles, mtree, mtag)
    owned = {f["path"]: f["sha256"] for f in doc["files"] if safe_relative(f["path"])}
    results = []
    real_root = os.path.realpath(root)
    for path, sha in sorted(owned.items()):
        full = os.path.join(root, *path.split("/"))
        if os.path.islink(full) or not os.path.realpath(full).startswith(real_root + os.sep):
            results.append({"path": path, "status": "changed", "detail": "a symlink or a path leaving the root "
                            "(not followed)"})
            continue
        try:
            actual = sha256_file(full)
        except FileNotFoundError:
            results.append({"path": path, "status": "missing", "detail": "owned by the stamp, not on disk"})
            continue
        except OSError as e:
            raise VerifyError(f"cannot read {full}: {e}", EXIT_CANNOT_CHECK) from None
        if actual == sha:
            results.append({"path": path, "status": "ok", "detail": None})
        elif (p := patch_for(doc, path, actual, sha)) is not None:
            results.append({"path": path, "status": "patched", "detail": p["reason"] +
                            (f" ({p['upstream']})" if p.get("upstream") else "")})
        else:
            results.append({"path": path, "status": "changed", "detail": "bytes differ from the stamp"})
    verifier = doc.get("verifier") or {}
    skip = {STAMP, VERIFIER}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in (".git", BACKUP_DIR))
        rel_dir = os.path.relpath(dirpath, root).replace(os.sep, "/")
        for name in sorted(filenames):
            rel = name if rel_dir == "." else f"{rel_dir}/{name}"
            if rel in owned or rel in skip:
                continue
            results.append({"path": rel, "status": "foreign",
                            "detail": "not written by --sync" + ("; --strict counts it as drift" if strict else "")})
    if verifier.get("sha256") and os.path.isfile(os.path.join(root, VERIFIER)):
        if sha256_file(os.path.join(root, VERIFIER)) != verifier["sha256"]:
            results.append({"path": VERIFIER, "status": "changed", "detail": "the verifier itself was edited"})
    bad = [r for r in results if r["status"] in ("changed", "missing") or (strict and r["status"] == "foreign")]
    verdict = "drifted" if problems or bad else "in-sync"
    return {"schema_version": 1, "tag": doc["tag"], "verdict": verdict,
            "exit_code": EXIT_DRIFT if verdict == "drifted" else EXIT_OK, "problems": problems, "files": results}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=VERIFIER, description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=os.path.dirname(os.path.abspath(__file__)), help="the vendor root")
    ap.add_argument("--manifest", help="deep_gemm_sm120 release manifest (vX.Y.Z.yaml) to check the stamp against")
    ap.add_argument("--strict", action="store_true", help="files the stamp does not own are drift")
    ap.add_argument("--format", choices=("text", "json"), default="text")
    try:
        a = ap.parse_args(argv)
    except SystemExit as e:  # argparse: usage errors exit 3 here, like every deep_gemm_sm120 tool
        return EXIT_USAGE if e.code else EXIT_OK
    try:
        report = verify(a.root, a.manifest, a.strict)
    except VerifyError as e:
        if a.format == "json":
            print(json.dumps({"schema_version": 1, "verdict": "unknown", "exit_code": e.exit_code,
                              "errors": [str(e)]}))
        print(f"sm120 vendor verify: {e}", file=sys.stderr)
        return e.exit_code
    if a.format == "json":
        print(json.dumps(report, indent=1))
    else:
        for r in report["files"]:
            if r["status"] != "ok":
                print(f"  {r['status']:<8} {r['path']}" + (f"  {r['detail']}" if r["detail"] else ""))
        for p in report["problems"]:
            print(f"  stamp    {p}")
        print(f"verdict: {report['verdict']} ({report['tag']})")
    return report["exit_code"]


if __name__ == "__main__":
    sys.exit(main())
