#!/usr/bin/env python3
"""Offline verifier of a vendored deep_gemm_sm120 device layer (standard library only, one file).

`check_vendor.py --sync` writes this file, generated for the release it syncs, and `.sm120-vendor.json` (the
stamp) into the fork's vendor root. The file carries that release's per-file sha256 digests itself (`_RELEASE`
below), so it recognises the release's bytes without trusting the stamp: a stamp edited to bless other bytes,
a stamp that is a symlink, or a missing stamp is a finding. The stamp contributes only the fork's pinned patches
(reported as `patched`, with their reason), and those only when it agrees with the release. In the fork's CI:

    python deep_gemm/include/deep_gemm/.sm120-vendor-verify.py [--manifest vX.Y.Z.yaml] [--chain chain.txt]
        [--require-signed] [--skip-signature] [--strict] [--format text|json]

checks each released file (`ok`, `patched`, `changed`, `mode`, `missing`), lists files the release does not ship
(`foreign`; drift only with --strict) and, given a release manifest, checks that it is the release this file
carries. Its trust line says whether the stamp pins this release, whether the pinned signature verifies over the
manifest text carried here (ssh-keygen), and, given the latest release chain, whether that chain extends the pin
(`rollback`, `history-rewritten`). Nothing below the vendor root is followed: links are reported, never read
through. What this proves, and what only check_vendor against a manifest proves, is in deep_gemm_sm120's
docs/vendoring.md.
Exit: 0 in sync, 1 drifted, 2 could not read the files, 3 usage error or unreadable manifest.

Run as a script, it first isolates itself as `python -I` would (below, before any import that could be looked
up on sys.path): its own directory, PYTHONPATH and the user's site-packages leave sys.path, so a `hashlib.py`
(or any module) placed beside it in the fork is never imported.

deep_gemm_sm120's tools/check_vendor.py imports the template of this file for its stamp handling (one
implementation); the template reads the two modules below from tools/vendorkit/, the vendored copy inlines them.
"""
import sys  # built in: never looked up on sys.path (nor is os, frozen since Python 3.11 and loaded at start-up)


def _isolate() -> None:
    """`-I` semantics applied from inside: drop the script's directory, PYTHONPATH and user site-packages from
    sys.path (the fork controls the first two). Entries are compared by their real paths: Python puts the
    script's real directory first (a path through a symlink names another one), and a PYTHONPATH entry may be a
    link to it too."""
    if sys.flags.isolated:
        return
    import os

    def real(p: str) -> str:
        return os.path.realpath(p or os.curdir)

    drop = {real("")}
    if sys.argv and sys.argv[0]:
        drop |= {real(os.path.dirname(os.path.abspath(sys.argv[0]))), os.path.dirname(real(sys.argv[0]))}
    if not sys.flags.ignore_environment:
        drop |= {real(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p}
    user = getattr(sys.modules.get("site"), "USER_SITE", None)
    if user:
        drop.add(real(user))
    sys.path[:] = [p for p in sys.path if p and real(p) not in drop]
    sys.path_importer_cache.clear()


if __name__ == "__main__":
    _isolate()

import argparse  # noqa: E402 - after the isolation above, on purpose
import hashlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import stat  # noqa: E402

# >>> inline vendorkit.safefs
from vendorkit.safefs import ForkRoot, NotRegular, UnsafePath, safe_relative  # noqa: E402
# <<< inline vendorkit.safefs
# >>> inline vendorkit.inert
from vendorkit import inert  # noqa: E402
# <<< inline vendorkit.inert
# >>> inline vendorkit.trust
from vendorkit import trust  # noqa: E402
# <<< inline vendorkit.trust

STAMP = ".sm120-vendor.json"
VERIFIER = ".sm120-vendor-verify.py"
BACKUP_DIR = ".sm120-sync-backup"  # where --sync copies a fork's bytes before overwriting them
STAMP_SCHEMA = 1
STAMP_MAX_BYTES = 1 << 20  # a larger stamp is not read (a finding)
MAX_DEPTH = 128  # directories deeper below the vendor root than this: exit 2 (a walk of them would not end soon)
EXIT_OK, EXIT_DRIFT, EXIT_CANNOT_CHECK, EXIT_USAGE = 0, 1, 2, 3
_HEX64 = re.compile(r"[0-9a-f]{64}")
# The release this copy verifies: {"tag", "tree_sha256", "files": {path: sha256}, "modes": {path: mode}} (modes:
# the files whose git mode is not 100644) and, for a chained release, "manifest" (its manifest's exact text),
# "chain_length" and "chain_head" (its place in the release chain); check_vendor --sync writes it.
_RELEASE = None


class VerifyError(Exception):
    def __init__(self, message: str, exit_code: int = EXIT_USAGE):
        super().__init__(message)
        self.exit_code = exit_code


# ---------------------------------------------------------------- shared helpers

def sha256_stream(fh) -> str:
    h = hashlib.sha256()
    for chunk in iter(lambda: fh.read(1 << 20), b""):
        h.update(chunk)
    return h.hexdigest()


def tree_sha256(entries) -> str:
    """sha256 over "<sha256>  <path>\\n" in path order (the manifests' tree_sha256)."""
    h = hashlib.sha256()
    for path, digest in sorted(entries):
        h.update(f"{digest}  {path}\n".encode())
    return h.hexdigest()


# ---------------------------------------------------------------- the manifest format (strict reader)

# a bare value ends in a non-space, so the trailing \s* has one way to match (no quadratic backtracking)
_SCALAR = re.compile(r'(schema|tag|root|created|tree_sha256): (?:"([^"\\]*)"|([^"{}\[\],#\s](?:[^{}\[\],#]*[^{}\[\],#\s])?))\s*')
_REQUIRES = re.compile(r'requires: \{cuda: "([^"\\]*)", targets: \[([A-Za-z0-9_, ]*)\]\}\s*')
_FILE = re.compile(r'  - \{path: "([^"\\]*)", sha256: "([^"\\]*)", git_blob_sha1: "([^"\\]*)", '
                   r'size: (\d{1,15}), mode: "([^"\\]*)"\}\s*')


def parse_manifest_text(text: str, where: str) -> dict:
    """The mapping PyYAML's safe loader gives for a manifest check_vendor wrote (dates stay strings). Strict:
    any other layout raises VerifyError (check_vendor then suggests installing PyYAML)."""
    out: dict = {}
    files = None
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if files is not None and line.startswith("  - "):
            m = _FILE.fullmatch(line)
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
        m = _SCALAR.fullmatch(line) or _REQUIRES.fullmatch(line)
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
    except RecursionError:
        raise VerifyError(f"{where}: not a stamp (JSON nested too deeply)") from None
    if not isinstance(doc, dict) or doc.get("schema") != STAMP_SCHEMA:
        raise VerifyError(f"{where}: expected a schema {STAMP_SCHEMA} stamp object")
    for key, kind in (("tag", str), ("tree_sha256", str), ("files", list), ("patches", list)):
        if not isinstance(doc.get(key), kind):
            raise VerifyError(f"{where}: '{key}' must be a {kind.__name__}")
    for i, f in enumerate(doc["files"]):
        if not isinstance(f, dict) or not isinstance(f.get("path"), str) or not isinstance(f.get("sha256"), str):
            raise VerifyError(f"{where}: files[{i}] must be {{path, sha256}}")
    if "lineage" in doc and not (isinstance(doc["lineage"], str) and safe_relative(doc["lineage"])
                                 and "/" not in doc["lineage"]):
        raise VerifyError(f"{where}: 'lineage' must be an upstream lineage's name")
    v = doc.get("verifier")
    if v is not None and not (isinstance(v, dict) and v.get("path") == VERIFIER and isinstance(v.get("sha256"), str)
                              and _HEX64.fullmatch(v["sha256"])):
        raise VerifyError(f"{where}: 'verifier' must be {{path: {VERIFIER}, sha256}}")
    if "pin" in doc:
        _check_pin_shape(doc["pin"], where)
    for i, p in enumerate(doc["patches"]):
        if not isinstance(p, dict) or not all(isinstance(p.get(k), str) for k in
                                              ("path", "base_sha256", "patched_sha256", "reason")):
            raise VerifyError(f"{where}: patches[{i}] must be {{path, base_sha256, patched_sha256, reason, "
                              f"upstream?}}")
    return doc


def _check_pin_shape(pin, where: str) -> None:
    """The pin --sync records: {tag, manifest_sha256, chain_length, chain_head, signer: null | {principal, key},
    signature: null | armored SSHSIG}; VerifyError (the stamp cannot be used) for any other shape."""
    ok = (isinstance(pin, dict) and set(pin) == PIN_KEYS and isinstance(pin["tag"], str)
          and trust.tag_key(pin["tag"]) is not None
          and isinstance(pin["manifest_sha256"], str) and _HEX64.fullmatch(pin["manifest_sha256"])
          and isinstance(pin["chain_head"], str) and _HEX64.fullmatch(pin["chain_head"])
          and type(pin["chain_length"]) is int and 1 <= pin["chain_length"] <= 1 << 20)
    signer, sig = (pin.get("signer"), pin.get("signature")) if isinstance(pin, dict) else (None, None)
    if ok and signer is not None:
        ok = (isinstance(signer, dict) and set(signer) == {"principal", "key"} and isinstance(signer["principal"], str)
              and isinstance(signer["key"], str) and isinstance(sig, str) and sig.isascii()
              and len(sig) <= trust.SIG_MAX_BYTES)
        try:
            ok = ok and bool(trust.key_blob(signer["key"]))
        except trust.TrustError:
            ok = False
    elif ok:
        ok = sig is None
    if not ok:
        raise VerifyError(f"{where}: 'pin' must be {{tag, manifest_sha256, chain_length, chain_head, signer, "
                          f"signature}} as --sync writes it")


def make_stamp(tag: str, files: dict[str, str], patches: list[dict] | None = None,
               verifier_sha256: str | None = None, lineage: str | None = None, pin: dict | None = None) -> str:
    """The stamp --sync writes: files = {path: sha256} of the release files it owns (sorted); `lineage` names an
    upstream lineage's release (absent for deep_gemm_sm120's own); `pin` the release's place in the chain and
    its signer, which later checks hold the releases they are shown to (docs/vendoring.md, "Forks pin")."""
    doc = {"schema": STAMP_SCHEMA, "tool": "deep_gemm_sm120 tools/check_vendor.py", "tag": tag,
           "tree_sha256": tree_sha256(files.items()),
           "files": [{"path": p, "sha256": s} for p, s in sorted(files.items())],
           "patches": sorted(patches or [], key=lambda p: p["path"])}
    if verifier_sha256:
        doc["verifier"] = {"path": VERIFIER, "sha256": verifier_sha256}
    if lineage:
        doc["lineage"] = lineage
    if pin is not None:
        doc["pin"] = pin
    return json.dumps(doc, indent=1) + "\n"


STAMP_KEYS = {"schema", "tool", "tag", "tree_sha256", "files", "patches", "verifier", "lineage", "pin"}
PIN_KEYS = {"tag", "manifest_sha256", "chain_length", "chain_head", "signer", "signature"}
FILE_KEYS = {"path", "sha256"}
PATCH_KEYS = {"path", "base_sha256", "patched_sha256", "reason", "upstream"}


def validate(doc: dict, manifest_files: dict[str, str] | None = None, manifest_tree: str | None = None,
             manifest_tag: str | None = None) -> list[str]:
    """Findings that make the stamp itself untrustworthy (each one is drift): keys --sync does not write, unsafe
    paths, a tree digest that does not add up, and, given the release manifest of its tag, paths or hashes that
    disagree with it, and patches whose base is not the released hash."""
    problems = []
    extra = sorted(set(doc) - STAMP_KEYS) + sorted({k for f in doc["files"] for k in f} - FILE_KEYS) + \
        sorted({k for p in doc["patches"] for k in p} - PATCH_KEYS)
    if extra:
        problems.append(f"stamp has keys --sync never writes: {', '.join(repr(k) for k in extra[:8])}")
    if doc.get("pin") is not None and doc["pin"]["tag"] != doc["tag"]:
        problems.append(f"stamp pins {doc['pin']['tag']} but names {doc['tag']}")
    if any(not isinstance(p.get("upstream", ""), str) for p in doc["patches"]):
        problems.append("a patch's upstream is not a string")
    files = {}
    for f in doc["files"]:
        if not safe_relative(f["path"]):
            problems.append(f"stamp lists an unsafe path {f['path']!r} (outside the vendor root); it is not read")
            continue
        if not _HEX64.fullmatch(f["sha256"]):
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

def release_from_manifest(path: str) -> dict:
    """{"tag", "tree_sha256", "files": {path: sha256}} of a release manifest file (read as a plain file: the
    manifest is the caller's, not the fork's)."""
    try:
        with open(path, encoding="utf-8") as fh:
            m = parse_manifest_text(fh.read(), path)
    except UnicodeDecodeError:
        raise VerifyError(f"{path}: not UTF-8 text") from None
    except OSError as e:
        raise VerifyError(f"cannot read {path}: {e.strerror or e}") from None
    files = {f["path"]: f["sha256"] for f in m.get("files", [])}
    if not files or not isinstance(m.get("tag"), str) or tree_sha256(files.items()) != m.get("tree_sha256"):
        raise VerifyError(f"{path}: not a release manifest (no files, or a tree digest that does not add up)")
    out = {"tag": m["tag"], "tree_sha256": m["tree_sha256"], "files": files}
    modes = {f["path"]: f["mode"] for f in m["files"] if f.get("mode") not in (None, "100644")}
    if modes:
        out["modes"] = modes
    return out


def _read_stamp(fs: ForkRoot) -> tuple[dict | None, str | None]:
    """(stamp document, None) or (None, why it cannot be used). Never follows a link, never reads past the cap."""
    try:
        raw = fs.read_bytes(STAMP, STAMP_MAX_BYTES)
    except FileNotFoundError:
        return None, f"no {STAMP}: pinned patches cannot be recognised"
    except NotRegular as e:
        return None, f"{STAMP} is {e.strerror} (not followed)"
    except OverflowError:
        return None, f"{STAMP} is larger than {STAMP_MAX_BYTES} bytes (not read)"
    except OSError as e:
        raise VerifyError(f"cannot read {STAMP}: {e.strerror or e}", EXIT_CANNOT_CHECK) from None
    try:
        return parse_stamp(raw.decode("utf-8"), STAMP), None
    except UnicodeDecodeError:
        return None, f"{STAMP} is not UTF-8 text"
    except VerifyError as e:
        return None, str(e)


def _file_status(fs: ForkRoot, path: str, sha: str, stamp: dict | None, mode: str = "100644") -> dict:
    def result(status: str, detail: str | None = None) -> dict:
        return {"path": path, "status": status, "detail": detail}

    try:
        with fs.open_read(path) as fh:
            actual = sha256_stream(fh)
            have = "100755" if os.fstat(fh.fileno()).st_mode & stat.S_IXUSR else "100644"
    except UnsafePath as e:
        return result("changed", f"under {e.component}, {e.why} (not followed)")
    except FileNotFoundError:
        return result("missing", "the release ships it; not on disk")
    except NotRegular as e:
        return result("changed", f"{e.strerror} (not followed)")
    except OSError as e:
        raise VerifyError(f"cannot read {path}: {e.strerror or e}", EXIT_CANNOT_CHECK) from None
    if actual == sha:
        return result("ok") if have == mode else result("mode", f"mode {have}, the release's {mode}")
    p = patch_for(stamp, path, actual, sha) if stamp is not None else None
    if p is not None:
        return result("patched", p["reason"] + (f" ({p['upstream']})" if p.get("upstream") else ""))
    return result("changed", "bytes differ from the release")


def _name(doc: dict) -> str:
    """How a release is named: `v0.7.3`, or `NAME@v0.1.4` for an upstream lineage's."""
    return f"{doc['lineage']}@{doc['tag']}" if doc.get("lineage") else doc["tag"]


def read_chain(path: str) -> list:
    """The release chain file a caller passes (`--chain`, e.g. the latest vendor_manifests/chain.txt), checked as
    a chain (exit 3 when it is not one)."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(trust.CHAIN_MAX_BYTES + 1)
    except OSError as e:
        raise VerifyError(f"cannot read {path}: {e.strerror or e}") from None
    try:
        return trust.chain_links(data, path)
    except trust.TrustError as e:
        raise VerifyError(str(e)) from None


def release_trust(release: dict, stamp: dict | None, links: list | None = None, check_signature: bool = True,
                  require_signed: bool = False) -> tuple[dict, list[str]]:
    """(trust, problems): whether the release this copy carries is the one the stamp pinned, signed by the pinned
    signer (ssh-keygen checks the signature the stamp holds over the manifest text baked in here), and, given the
    latest chain, whether that chain extends the pin. trust = {status, detail, signer}; status is trusted,
    unsigned, bad-signature, unknown-signer, revoked-signer, rollback, history-rewritten or could-not-check."""
    def out(status: str, detail: str, signer: str | None = None) -> dict:
        return {"status": status, "detail": detail, "signer": signer}

    if "chain_head" not in release:
        if links is not None:
            raise VerifyError("--chain needs the verifier --sync writes (it carries the release's place in the chain)")
        return out(trust.UNSIGNED, "this verifier carries no place in the release chain (written before it, or "
                                   "unbaked): re-run --sync"), (
            ["unsigned: no chained release (--require-signed)"] if require_signed else [])
    text = release["manifest"].encode("utf-8")
    want = {"tag": release["tag"], "manifest_sha256": hashlib.sha256(text).hexdigest(),
            "chain_length": release["chain_length"], "chain_head": release["chain_head"]}
    parsed = parse_manifest_text(release["manifest"], "the baked manifest")
    if {f["path"]: f["sha256"] for f in parsed.get("files", [])} != release["files"]:
        return out(trust.BAD_SIGNATURE, "the baked manifest does not list the baked digests (edited)"), [
            "the verifier's baked release is not one manifest (edited by hand?)"]
    pin = (stamp or {}).get("pin")
    if pin is None or {k: pin[k] for k in want} != want:
        return out(trust.HISTORY_REWRITTEN, "the stamp pins no release or another one than this verifier carries"), [
            "the stamp's pin is not the release this verifier carries"]
    problems = []
    if links is not None:
        found = trust.check_pin(pin, links, release["tag"], want["manifest_sha256"])
        if found is not None:
            return out(*found), [f"{found[0]}: {found[1]}"]
    signer = pin["signer"]
    if signer is None:
        result = out(trust.UNSIGNED, "the release was not signed when it was vendored")
        return result, (["unsigned: the release was not signed (--require-signed)"] if require_signed else [])
    who = f"{signer['principal']} ({trust.fingerprint(trust.key_blob(signer['key']))})"
    if not check_signature:
        return out(trust.COULD_NOT_CHECK, "signature not checked (--skip-signature)", who), problems
    status, detail = trust.verify_with_key(text, pin["signature"].encode("ascii", "replace"),
                                           trust.key_blob(signer["key"]), trust.RELEASE_NAMESPACE)
    if status == trust.COULD_NOT_CHECK:
        raise VerifyError(f"cannot check the release signature: {detail}; pass --skip-signature to check the "
                          f"files alone", EXIT_CANNOT_CHECK)
    if status != trust.TRUSTED:
        problems.append(f"{status}: {detail}")
    return out(status, detail, who), problems


def verify(root: str, release: dict | None = None, manifest_path: str | None = None, strict: bool = False,
           chain_path: str | None = None, check_signature: bool = True, require_signed: bool = False) -> dict:
    """{verdict, exit_code, tag, files: [{path, status, detail}], problems, trust} for the vendor root `root`."""
    release = release or _RELEASE
    given = release_from_manifest(manifest_path) if manifest_path else None
    if release is None:
        if given is None:
            raise VerifyError("this copy of the verifier carries no release: pass --manifest vX.Y.Z.yaml")
        release = given
    problems = []
    links = read_chain(chain_path) if chain_path else None
    if given is not None and {k: given.get(k) for k in ("tag", "tree_sha256", "files", "modes")} != {
            k: release.get(k) for k in ("tag", "tree_sha256", "files", "modes")}:
        problems.append(f"the manifest given ({given['tag']}) is not the release this verifier checks "
                        f"({release['tag']}); re-run --sync, or pass the manifest of {release['tag']}")
    try:
        fs = ForkRoot(root)
    except OSError as e:
        raise VerifyError(f"cannot open the vendor root {root}: {e.strerror or e}", EXIT_CANNOT_CHECK) from None
    with fs:
        stamp, why = _read_stamp(fs)
        pinned = stamp
        if stamp is not None:
            found = validate(stamp, release["files"], release["tree_sha256"], release["tag"])
            if stamp.get("lineage") != release.get("lineage"):
                found.append(f"stamp written for {_name(stamp)}, this verifier checks {_name(release)}")
            if found:
                problems += found
                stamp = None  # an untrustworthy stamp pins nothing
        else:
            problems.append(why)
        if release.get("lineage"):
            trusted = {"status": trust.UNSIGNED, "detail": "an upstream lineage's release (not signed by us)",
                       "signer": None}
            if require_signed:
                problems.append("unsigned: an upstream lineage's release (--require-signed)")
            if links is not None:
                raise VerifyError("--chain checks deep_gemm_sm120's own releases; this copy carries a lineage's")
        else:
            trusted, found = release_trust(release, pinned, links, check_signature,
                                           require_signed)
            problems += found
        modes = release.get("modes") or {}
        results = [_file_status(fs, path, sha, stamp, modes.get(path, "100644"))
                   for path, sha in sorted(release["files"].items())]
        want = (stamp or {}).get("verifier", {}).get("sha256") if stamp else None
        if want:
            mine = _file_status(fs, VERIFIER, want, None, "100755")
            if mine["status"] != "ok":
                mine["detail"] = "not the verifier --sync wrote (edited or replaced)"
                results.append(mine)
        try:
            for rel, _ in fs.walk("", skip=lambda p: p == BACKUP_DIR or p.rsplit("/", 1)[-1] == ".git",
                                  max_depth=MAX_DEPTH):
                if rel in release["files"] or rel in (STAMP, VERIFIER):
                    continue
                results.append({"path": rel, "status": "foreign", "detail": "not part of the release"
                                + ("; --strict counts it as drift" if strict else "")})
        except (OSError, UnsafePath) as e:
            raise VerifyError(f"cannot list {root}: {e}", EXIT_CANNOT_CHECK) from None
    bad = [r for r in results if r["status"] in ("changed", "missing", "mode")
           or (strict and r["status"] == "foreign")]
    verdict = "drifted" if problems or bad else "in-sync"
    return {"schema_version": 2, "tag": _name(release), "verdict": verdict,
            "exit_code": EXIT_DRIFT if verdict == "drifted" else EXIT_OK, "problems": problems, "files": results,
            "trust": trusted}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=VERIFIER, description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=os.path.dirname(os.path.abspath(__file__)), help="the vendor root")
    ap.add_argument("--manifest", help="deep_gemm_sm120 release manifest (vX.Y.Z.yaml): check it is the release "
                                       "this verifier carries (required for a copy that carries none)")
    ap.add_argument("--strict", action="store_true", help="files the release does not ship are drift")
    ap.add_argument("--chain", help="the latest release chain (deep_gemm_sm120's vendor_manifests/chain.txt): check "
                                    "it extends the release the stamp pinned (rollback, history-rewritten)")
    ap.add_argument("--require-signed", action="store_true", help="an unsigned release is drift")
    ap.add_argument("--skip-signature", action="store_true",
                    help="do not run ssh-keygen on the pinned signature (reported could-not-check)")
    ap.add_argument("--format", choices=("text", "json"), default="text")
    try:
        a = ap.parse_args(argv)
    except SystemExit as e:  # argparse: usage errors exit 3 here, like every deep_gemm_sm120 tool
        return EXIT_USAGE if e.code else EXIT_OK
    try:
        report = verify(a.root, None, a.manifest, a.strict, a.chain, not a.skip_signature, a.require_signed)
    except VerifyError as e:
        if a.format == "json":
            print(json.dumps(inert.json_safe({"schema_version": 2, "verdict": "unknown",
                                              "exit_code": e.exit_code, "errors": [str(e)]})))
        print(f"sm120 vendor verify: {inert.text(e)}", file=sys.stderr)
        return e.exit_code
    if a.format == "json":
        print(json.dumps(inert.json_safe(report), indent=1))
    else:
        for r in report["files"]:
            if r["status"] != "ok":
                print(f"  {r['status']:<8} {inert.text(r['path'])}" + (f"  {inert.text(r['detail'])}"
                                                                       if r["detail"] else ""))
        for p in report["problems"]:
            print(f"  stamp    {inert.text(p)}")
        t = report["trust"]
        print(f"trust: {t['status']}: {inert.text(t['detail'])}")
        print(f"verdict: {report['verdict']} ({report['tag']})")
    return report["exit_code"]


if __name__ == "__main__":
    sys.exit(main())
