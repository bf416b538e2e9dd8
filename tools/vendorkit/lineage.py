"""Upstream lineages: immutable manifests of other canonical sources of SM120 headers (for example
lucifer1004/DeepGEMM-sm120, whose `VENDOR-sm120.json` the real downstreams were synced against), stored as
`vendor_manifests/upstreams/NAME/TAG.json` and compared with exactly like our releases.

A lineage manifest is data, hashes only:
    {"schema": 1, "lineage": NAME, "tag": TAG, "root": <the upstream's vendor root>, "origin": <where the hashes
     came from>, "imported": YYYY-MM-DD, "tree_sha256": <as ours>,
     "files": [{"path": <relative to root>, "sha256": <hex>, "git_blob_sha1"?, "size"?, "mode"?}, ...]}
Blob ids, sizes and modes are there when the import read a tree (git, github:, an archive), absent when it read a
`VENDOR-sm120.json`. JSON, so that reading one needs only the standard library.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import posixpath
import re

from .errors import ManifestError, UsageError
from .hashing import tree_sha256
from .manifest import MANIFEST_DIR, MODES, FileEntry, Manifest, ManifestSet, check_release_path, check_safe_path
from .versions import is_lineage_tag

UPSTREAMS = "upstreams"
SCHEMA = 1
_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_HEX40 = re.compile(r"[0-9a-f]{40}")
_KEYS = {"schema", "lineage", "tag", "root", "origin", "imported", "tree_sha256", "files"}
_FILE_KEYS = {"path", "sha256"}
_FILE_OPTIONAL = {"git_blob_sha1", "size", "mode"}
# directories a vendored layer is made of: a common root stops above them (a single file's path cannot say)
_LAYER_DIRS = {"common", "impls", "mma", "scheduler", "layout", "tile", "epilogue"}


def check_name(name: object) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise UsageError(f"lineage name {name!r}: use lowercase letters, digits, '.', '_' and '-' (a directory name)")
    return name


def lineage_dir(repo_root: str, name: str) -> str:
    return os.path.join(repo_root, MANIFEST_DIR, UPSTREAMS, check_name(name))


def names(repo_root: str) -> list[str]:
    base = os.path.join(repo_root, MANIFEST_DIR, UPSTREAMS)
    try:
        return sorted(n for n in os.listdir(base) if _NAME.fullmatch(n) and os.path.isdir(os.path.join(base, n)))
    except FileNotFoundError:
        return []


def parse(text: str, where: str, expect_lineage: str | None = None, expect_tag: str | None = None) -> Manifest:
    try:
        raw = json.loads(text)
    except ValueError as e:
        raise ManifestError(f"{where}: not valid JSON ({e})") from None
    if not isinstance(raw, dict) or set(raw) != _KEYS:
        got = set(raw) if isinstance(raw, dict) else set()
        raise ManifestError(
            f"{where}: a lineage manifest has exactly the keys {sorted(_KEYS)} "
            f"(missing {sorted(_KEYS - got)}, unknown {sorted(got - _KEYS)})"
        )
    if raw["schema"] != SCHEMA:
        raise ManifestError(f"{where}: unsupported schema {raw['schema']!r}")
    for key in ("lineage", "tag", "root", "origin", "imported", "tree_sha256"):
        if not isinstance(raw[key], str):
            raise ManifestError(f"{where}: {key} must be a string")
    if not _NAME.fullmatch(raw["lineage"]) or (expect_lineage and raw["lineage"] != expect_lineage):
        raise ManifestError(f"{where}: lineage {raw['lineage']!r} does not match its directory")
    if not is_lineage_tag(raw["tag"]) or (expect_tag and raw["tag"] != expect_tag):
        raise ManifestError(f"{where}: tag {raw['tag']!r} is not a version or does not match the file name")
    if raw["root"]:
        check_safe_path(raw["root"], f"{where}: root")
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", raw["imported"]):
        raise ManifestError(f"{where}: imported must be a YYYY-MM-DD date")
    if not isinstance(raw["files"], list) or not raw["files"]:
        raise ManifestError(f"{where}: files must be a non-empty list")
    files = []
    for i, f in enumerate(raw["files"]):
        w = f"{where}: files[{i}]"
        if not isinstance(f, dict) or not _FILE_KEYS <= set(f) <= _FILE_KEYS | _FILE_OPTIONAL:
            raise ManifestError(f"{w}: expected {{path, sha256}} and optionally git_blob_sha1, size, mode")
        path = check_release_path(f["path"], w)
        if not isinstance(f["sha256"], str) or not _HEX64.fullmatch(f["sha256"]):
            raise ManifestError(f"{w} ({path}): sha256 must be 64 lowercase hex digits")
        blob, size, mode = f.get("git_blob_sha1"), f.get("size"), f.get("mode")
        if blob is not None and not (isinstance(blob, str) and _HEX40.fullmatch(blob)):
            raise ManifestError(f"{w} ({path}): git_blob_sha1 must be 40 lowercase hex digits")
        if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size < 0):
            raise ManifestError(f"{w} ({path}): size must be a non-negative integer")
        if mode is not None and mode not in MODES:
            raise ManifestError(f"{w} ({path}): mode must be one of {', '.join(MODES)}")
        files.append(FileEntry(path, f["sha256"], blob, size, mode))
    paths = [f.path for f in files]
    if paths != sorted(paths) or len(set(paths)) != len(paths):
        raise ManifestError(f"{where}: file paths must be unique and sorted")
    if raw["tree_sha256"] != tree_sha256((f.path, f.sha256) for f in files):
        raise ManifestError(f"{where}: tree_sha256 does not match the listed files")
    return Manifest(
        tag=raw["tag"],
        created=raw["imported"],
        tree_sha256=raw["tree_sha256"],
        files=files,
        requires={},
        root=raw["root"],
        source=where,
        lineage=raw["lineage"],
        origin=raw["origin"],
    )


def dump(m: Manifest) -> str:
    files = []
    for e in m.files:
        d: dict[str, str | int] = {"path": e.path, "sha256": e.sha256}
        if e.git_blob_sha1:
            d["git_blob_sha1"] = e.git_blob_sha1
        if e.size is not None:
            d["size"] = e.size
        if e.mode:
            d["mode"] = e.mode
        files.append(d)
    doc = {
        "schema": SCHEMA,
        "lineage": m.lineage,
        "tag": m.tag,
        "root": m.root,
        "origin": m.origin,
        "imported": m.created,
        "tree_sha256": m.tree_sha256,
        "files": files,
    }
    return json.dumps(doc, indent=1) + "\n"


def load(repo_root: str, name: str) -> ManifestSet:
    d = lineage_dir(repo_root, name)
    if not os.path.isdir(d):
        known = ", ".join(names(repo_root)) or "none"
        raise UsageError(
            f"unknown upstream lineage {name!r}: imported lineages are {known} "
            f"(python tools/check_vendor.py import-manifest ... --upstream NAME)"
        )
    out = []
    for fn in sorted(os.listdir(d)):
        if not fn.endswith(".json"):
            continue
        where = f"{MANIFEST_DIR}/{UPSTREAMS}/{name}/{fn}"
        with open(os.path.join(d, fn), encoding="utf-8") as fh:
            out.append(parse(fh.read(), where, name, fn[: -len(".json")]))
    if not out:
        raise UsageError(f"upstream lineage {name!r} has no manifests")
    return ManifestSet(out, lineage=name)


def detect_root(paths: list[str]) -> str:
    """The vendor root of a path list: their longest common directory, stopped above the layer's own
    directories (common/, impls/, ...), so that a list of `.../deep_gemm/common/x.cuh` files keeps `common/`."""
    dirs = [p.split("/")[:-1] for p in paths]
    common = []
    for parts in zip(*dirs):
        if len(set(parts)) != 1 or parts[0] in _LAYER_DIRS:
            break
        common.append(parts[0])
    return "/".join(common)


def build(
    name: str, tag: str, root: str, origin: str, entries: list[FileEntry], imported: str | None = None
) -> Manifest:
    check_name(name)
    if not is_lineage_tag(tag):
        raise UsageError(f"tag {tag!r} is not a version (v0.1.4, 2.8.1, 1.0rc1, ...)")
    if not entries:
        raise UsageError("nothing to import: no files under the vendor root")
    entries = sorted(entries, key=lambda e: e.path)
    for e in entries:
        check_safe_path(e.path, "imported path")
    return Manifest(
        tag=tag,
        created=imported or _dt.datetime.now(_dt.timezone.utc).date().isoformat(),
        tree_sha256=tree_sha256((e.path, e.sha256) for e in entries),
        files=entries,
        requires={},
        root=root,
        lineage=name,
        origin=origin,
    )


def from_vendor_json(text: str, where: str, prefix: str | None) -> tuple[str, str, str, list[FileEntry]]:
    """(tag, root, origin, entries) of a `VENDOR-sm120.json`: {"upstream", "tag", "files": {path: sha256}}."""
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise UsageError(f"{where}: not JSON ({e})") from None
    files = doc.get("files") if isinstance(doc, dict) else None
    if not isinstance(files, dict) or not files or not isinstance(doc.get("tag"), str):
        raise UsageError(f"{where}: expected a VENDOR-sm120.json object {{upstream, tag, files: {{path: sha256}}}}")
    for path, sha in files.items():
        check_safe_path(path, where)
        if not isinstance(sha, str) or not _HEX64.fullmatch(sha):
            raise UsageError(f"{where}: {path}: not a sha256")
    root = prefix.strip("/") if prefix is not None else detect_root(list(files))
    pre = f"{root}/" if root else ""
    outside = [p for p in files if not p.startswith(pre)]
    if outside:
        raise UsageError(f"{where}: {outside[0]} is not under the vendor root {root or '.'}")
    entries = [FileEntry(posixpath.relpath(p, root) if root else p, sha, None, None, None) for p, sha in files.items()]
    upstream = doc.get("upstream") if isinstance(doc.get("upstream"), str) else "?"
    return doc["tag"], root, f"VENDOR-sm120.json of {upstream} (its tag {doc['tag']})", entries


def write(repo_root: str, m: Manifest) -> str:
    """Store an imported manifest; never over an existing one (imported manifests are immutable like releases)."""
    d = lineage_dir(repo_root, check_name(m.lineage))  # (an imported manifest's; ours have none)
    dest = os.path.join(d, f"{m.tag}.json")
    if os.path.exists(dest):
        raise UsageError(f"{os.path.relpath(dest, repo_root)} already exists: imported manifests never change")
    text = dump(m)
    parse(text, dest, m.lineage, m.tag)  # what we write must read back
    os.makedirs(d, exist_ok=True)
    tmp = dest + f".tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, dest)
    return dest


def import_source(
    spec: str,
    name: str,
    prefix: str | None,
    tag: str | None,
    date: str | None,
    api_url: str | None = None,
    index_url: str | None = None,
    all_files: bool = False,
) -> Manifest:
    """The lineage manifest `import-manifest` stores for `spec`: a VENDOR-sm120.json, one of our manifests, or a
    tree source (files named like the layer, `sm120_*`, under --prefix; every file there with all_files)."""
    check_name(name)
    if os.path.isfile(spec) and spec.endswith(".json"):
        with open(spec, encoding="utf-8") as fh:
            vtag, root, origin, entries = from_vendor_json(fh.read(), spec, prefix)
        return build(name, tag or vtag, root, origin, entries, date)
    if os.path.isfile(spec) and spec.endswith((".yaml", ".yml")):
        from .manifest import parse_manifest

        with open(spec, encoding="utf-8") as fh:
            m = parse_manifest(fh.read(), spec)
        return build(
            name,
            tag or m.tag,
            m.root,
            f"deep_gemm_sm120-format manifest {os.path.basename(spec)} (its tag {m.tag})",
            m.files,
            date,
        )
    if prefix is None or tag is None:
        raise UsageError("importing from a tree needs --prefix (the upstream's vendor root) and --tag")
    from .hashing import git_blob_sha1, sha256_bytes
    from .limits import DIAGNOSE_MAX_BYTES
    from .manifest import is_our_name
    from .sources import open_source

    view = open_source(spec, api_url, index_url, single=True)
    root = prefix.strip("/")
    listing, blocked = view.list_under(root)
    if blocked:
        raise UsageError(f"{spec}: {next(iter(blocked.values()))} (not followed): cannot import through it")
    entries = []
    for rel, f in sorted(listing.items()):
        if f.kind != "file" or not (all_files or is_our_name(rel)):
            continue
        data = view.fetch(f, DIAGNOSE_MAX_BYTES * 16)
        if data is None:
            raise UsageError(f"{spec}: {rel} could not be read (too large or not fetchable)")
        entries.append(FileEntry(rel, sha256_bytes(data), git_blob_sha1(data), len(data), f.mode))
    label = getattr(view, "commit", None) or getattr(view, "commit_sha", None)
    return build(name, tag, root, f"tree of {view.label}" + (f" at commit {label}" if label else ""), entries, date)
