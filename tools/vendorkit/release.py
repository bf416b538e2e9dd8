"""`check_vendor.py release vX.Y.Z`: write a manifest from the committed device_layer/."""

from __future__ import annotations

import datetime as _dt
import os
import re
import tempfile

from . import chain, signing
from .errors import UsageError
from .gitrepo import GitRepo
from .hashing import git_blob_sha1, sha256_bytes
from .manifest import MANIFEST_DIR, ROOT, FileEntry, ManifestSet, build_manifest, dump_manifest, is_our_name
from .versions import parse_tag, sort_key


def committed_entries(git: GitRepo, rev: str = "HEAD") -> list[FileEntry]:
    """FileEntry for every blob under device_layer/ at `rev`, hashed from git's own bytes."""
    tree = [t for t in git.ls_tree(rev, ROOT) if t.kind == "blob"]
    blobs = git.cat_blobs([t.oid for t in tree])
    out = []
    for t in tree:
        data = blobs[t.oid]
        if git_blob_sha1(data) != t.oid:  # guards our blob-id computation against git's
            raise UsageError(f"internal: blob id mismatch for {t.path}")
        out.append(FileEntry(t.path[len(ROOT) + 1 :], sha256_bytes(data), t.oid, len(data), t.mode))
    return out


def release(repo_root: str, tag: str, created: str | None = None, sign_key: str | None = None) -> list[str]:
    """Write the manifest, append its chain line and, given a key, sign it; the paths written."""
    parse_tag(tag)  # vMAJOR.MINOR.PATCH only
    version = sort_key(tag)
    git = GitRepo(repo_root)
    if not git.is_repo():
        raise UsageError(f"{repo_root} is not a git checkout: a release is cut from committed files")
    dirty = git.status(ROOT)
    if dirty:
        shown = "; ".join(dirty[:10]) + (" ..." if len(dirty) > 10 else "")
        raise UsageError(f"refusing to release: {ROOT}/ has uncommitted changes: {shown}")
    mdir = os.path.join(repo_root, MANIFEST_DIR)
    dest = os.path.join(mdir, f"{tag}.yaml")
    if os.path.exists(dest):
        raise UsageError(
            f"refusing to release: {MANIFEST_DIR}/{tag}.yaml already exists (released manifests never change)"
        )
    ms = ManifestSet.load_dir(mdir)
    if ms.latest is not None and version <= ms.latest.version:
        raise UsageError(f"refusing to release {tag}: it is not greater than the latest release {ms.latest.tag}")
    entries = committed_entries(git)
    if not entries:
        raise UsageError(f"refusing to release: {ROOT}/ is empty at HEAD")
    misnamed = [e.path for e in entries if not is_our_name(e.path)]
    if misnamed:
        raise UsageError(f"refusing to release: files not named sm120_*: {', '.join(misnamed)}")
    if ms.latest is not None and {(e.path, e.sha256, e.mode) for e in entries} == {
        (e.path, e.sha256, e.mode) for e in ms.latest.files
    }:
        raise UsageError(f"refusing to release {tag}: {ROOT}/ is identical to {ms.latest.tag}")
    created = created or _dt.datetime.now(_dt.timezone.utc).date().isoformat()
    _check_date(created, "--date")
    if ms.latest is not None and created < ms.latest.created:
        raise UsageError(f"refusing to release {tag} dated {created}: {ms.latest.tag} is dated {ms.latest.created}")
    text = dump_manifest(build_manifest(tag, created, entries))
    os.makedirs(mdir, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=mdir, prefix=".release-")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, dest)
    chain.append(mdir, tag)
    written = [dest, os.path.join(mdir, chain.CHAIN_NAME)]
    if sign_key is not None:
        written.append(sign_release(repo_root, tag, sign_key))
    return written


def sign_release(repo_root: str, tag: str, key_path: str) -> str:
    """Sign a released (chained) manifest; refuses to replace a signature (append-only) or sign an unchained one."""
    parse_tag(tag)
    mdir = os.path.join(repo_root, MANIFEST_DIR)
    manifest = os.path.join(mdir, f"{tag}.yaml")
    if not os.path.exists(manifest):
        raise UsageError(f"no release {tag}: {MANIFEST_DIR}/{tag}.yaml does not exist")
    links = {link.tag: link for link in chain.read(mdir) or []}
    if tag not in links or links[tag].manifest_sha256 != chain.manifest_digest(mdir, tag):
        raise UsageError(f"refusing to sign {tag}: {MANIFEST_DIR}/{chain.CHAIN_NAME} does not chain these bytes")
    out = signing.signature_path(mdir, tag)
    if os.path.exists(out):
        raise UsageError(
            f"refusing to sign {tag}: {os.path.relpath(out, repo_root)} exists (signatures are never replaced)"
        )
    try:
        signing.sign(manifest, key_path, out)
    except RuntimeError as e:
        raise UsageError(str(e)) from None
    return out


def _yyyymmdd(date: str) -> str:
    return date.replace("-", "")


def _check_date(date: str, what: str) -> None:
    try:
        ok = len(date) == 10 and _dt.date.fromisoformat(date).isoformat() == date
    except ValueError:
        ok = False
    if not ok:
        raise UsageError(f"{what} {date!r} is not a date (YYYY-MM-DD)")


_PRINCIPAL = re.compile(r"[A-Za-z0-9_.@+-]{1,128}")


def rotate(repo_root: str, old_key_path: str, new_public_path: str, start: str, principal: str) -> list[str]:
    """Rotate the release key: a statement, signed by the old key, that the new key signs releases created on or
    after `start`; allowed_signers then ends the old key's validity the day before and lists the new key from
    that day (a fork that pinned the old key follows the statement, vendorkit.forktrust). The paths written."""
    from . import forktrust, trust

    mdir = os.path.join(repo_root, MANIFEST_DIR)
    _check_date(start, "--from")
    if not _PRINCIPAL.fullmatch(principal):
        raise UsageError(f"--principal {principal!r}: letters, digits and _ . @ + - only (1 to 128)")
    try:
        old = trust.key_blob(signing.public_key(old_key_path))
        with open(new_public_path, encoding="ascii") as fh:
            new = trust.key_blob(fh.read().strip())
        text = trust.rotation_text(principal, old, new, start)
    except (RuntimeError, OSError, UnicodeDecodeError, trust.TrustError) as e:
        raise UsageError(f"cannot rotate: {e}") from None
    allowed_path = os.path.join(mdir, signing.ALLOWED)
    with open(allowed_path, encoding="ascii") as fh:
        lines = fh.read().splitlines(keepends=True)
    listed = [i for i, line in enumerate(lines) if trust.key_line(old).split()[1] in line.split()]
    if not listed:
        raise UsageError(f"cannot rotate: the old key {trust.fingerprint(old)} is not in {signing.ALLOWED}")
    if trust.fingerprint(old) in forktrust.revoked(mdir):
        raise UsageError(f"cannot rotate: {trust.fingerprint(old)} is revoked (a revoked key vouches for nothing)")
    good, _ = forktrust.rotations(mdir)
    if any(o == old for _, o, _, _ in good):
        raise UsageError(f"cannot rotate: {trust.fingerprint(old)} was already rotated (a key rotates once)")
    rdir = os.path.join(mdir, forktrust.ROTATIONS)
    os.makedirs(rdir, exist_ok=True)
    name = f"{start}-{trust.fingerprint(new)[7:19].replace('/', '_').replace('+', '-')}.txt"
    out = os.path.join(rdir, name)
    if os.path.exists(out):
        raise UsageError(f"cannot rotate: {os.path.relpath(out, repo_root)} exists")
    with open(out, "wb") as fh:
        fh.write(text)
    try:
        signing.sign(out, old_key_path, out + ".sig", trust.ROTATION_NAMESPACE)
    except RuntimeError as e:
        os.unlink(out)
        raise UsageError(str(e)) from None
    before = _yyyymmdd(start)
    for i in listed:  # the old key signs nothing created on or after the rotation
        if "valid-before=" not in lines[i]:
            lines[i] = lines[i].replace(' namespaces="', f' valid-before="{before}",namespaces="', 1)
    lines.append(f'{principal} namespaces="{signing.NAMESPACE}",valid-after="{before}" {trust.key_line(new)}\n')
    with open(allowed_path, "w", encoding="ascii") as fh:
        fh.writelines(lines)
    return [out, out + ".sig", allowed_path]
