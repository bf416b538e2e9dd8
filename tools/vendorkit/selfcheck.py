"""Self-check of the canonical checkout and the manifest-history integrity rule.

Integrity: every manifest equals device_layer/ at the commit that added it, and the manifest file
itself is byte-identical to what that commit added. Together these make a released manifest
impossible to edit, or to write from uncommitted files, without the check failing.
"""

from __future__ import annotations

import os

from . import chain, signing
from .compare import FileResult, Report
from .errors import CannotCheck
from .gitrepo import GitRepo
from .hashing import git_blob_sha1, sha256_bytes
from .manifest import MANIFEST_DIR, ROOT, ManifestSet, is_our_name
from .release import committed_entries


def history_problems(repo_root: str, ms: ManifestSet) -> tuple[list[str], list[str]]:
    """(problems, notes) for each manifest against the commit that added it."""
    git = GitRepo(repo_root)
    problems: list[str] = []
    notes: list[str] = []
    for m in ms.manifests:
        rel = f"{MANIFEST_DIR}/{m.tag}.yaml"
        added = git.first_commit_adding(rel)
        if added is None:
            if git.is_shallow():
                raise CannotCheck(f"{rel}: history unavailable in a shallow clone (fetch with full depth)")
            notes.append(f"{rel} is not committed yet (draft release)")
            continue
        at_add = git.show(added, rel)
        with open(os.path.join(repo_root, rel), "rb") as fh:
            now = fh.read()
        if at_add != now:
            problems.append(f"{rel} was edited after release (differs from commit {added[:12]})")
        want = {(e.path, e.sha256, e.git_blob_sha1, e.size, e.mode) for e in m.files}
        have = {(e.path, e.sha256, e.git_blob_sha1, e.size, e.mode) for e in committed_entries(git, added)}
        if want != have:
            diff = sorted({p[0] for p in want ^ have})
            problems.append(
                f"{rel} does not match {ROOT}/ at commit {added[:12]} that added it "
                f"(differs at: {', '.join(diff[:8])}{' ...' if len(diff) > 8 else ''})"
            )
    return problems, notes


def lineage_problems(repo_root: str, git: GitRepo | None) -> tuple[list[str], list[str]]:
    """(problems, notes) for the imported upstream manifests: each loads (vendorkit.lineage validates it) and,
    in a git checkout, is byte-identical to what the commit that added it added (imported manifests never
    change, like releases)."""
    from . import lineage
    from .errors import VendorError

    problems: list[str] = []
    notes: list[str] = []
    for name in lineage.names(repo_root):
        try:
            ms = lineage.load(repo_root, name)
        except VendorError as e:
            problems.append(str(e))
            continue
        notes.append(
            f"upstream lineage {name}: {len(ms.manifests)} manifest(s), {', '.join(m.tag for m in ms.manifests)}"
        )
        if git is None:
            continue
        for m in ms.manifests:
            rel = m.source
            assert rel is not None  # lineage.load reads each manifest from its file (source: that file)
            added = git.first_commit_adding(rel)
            if added is None:
                notes.append(f"{rel} is not committed yet (a new import)")
                continue
            with open(os.path.join(repo_root, rel), "rb") as fh:
                if git.show(added, rel) != fh.read():
                    problems.append(f"{rel} was edited after it was imported (differs from commit {added[:12]})")
    return problems, notes


def _working_tree(repo_root: str) -> dict[str, tuple[str, str, str]]:
    """path -> (sha256, blob id, mode) for device_layer/ as it is on disk."""
    base = os.path.join(repo_root, ROOT)
    out = {}
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames.sort()
        for name in filenames:
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, base).replace(os.sep, "/")
            if os.path.islink(p):
                data, mode = os.fsencode(os.readlink(p)), "120000"
            else:
                with open(p, "rb") as fh:
                    data = fh.read()
                mode = "100755" if os.stat(p).st_mode & 0o100 else "100644"
            out[rel] = (sha256_bytes(data), git_blob_sha1(data), mode)
    return out


def chain_history_problems(git: GitRepo) -> list[str]:
    """chain.txt only ever grew: each committed version is a prefix of every later one and of the file as it is
    (a line rewritten or removed in a commit would pass the link check if every later line were redone too)."""
    rel = f"{MANIFEST_DIR}/{chain.CHAIN_NAME}"
    try:
        with open(os.path.join(git.root, rel), "rb") as fh:
            now = fh.read(chain.MAX_BYTES + 1)
    except FileNotFoundError:
        return []
    before = b""
    for commit in git.commits_touching(rel):
        data = git.show(commit, rel)
        if data is None:  # deleted in that commit
            return [f"{rel} was deleted in commit {commit[:12]} (the chain is append-only)"]
        if not data.startswith(before):
            return [f"{rel} was rewritten in commit {commit[:12]}, not appended to (the chain is append-only)"]
        before = data
    if not now.startswith(before):
        return [f"{rel} differs from its last commit other than by appended lines (the chain is append-only)"]
    return []


def chain_and_signatures(repo_root: str, ms: ManifestSet) -> tuple[list[str], list[str]]:
    """(problems, notes): the release chain holds every manifest's exact bytes in order, and each release's
    signature is good, by an allowed key valid on its date, not revoked; releases without one are listed."""
    mdir = os.path.join(repo_root, MANIFEST_DIR)
    tags = [m.tag for m in ms.manifests]
    problems = chain.problems(mdir, tags)
    notes = []
    git = GitRepo(repo_root)
    if git.is_repo():
        problems += chain_history_problems(git)
    links = [] if problems else chain.read(mdir) or []
    if links:
        notes.append(f"chain: {len(links)} release(s) linked, {links[-1].tag} at {links[-1].position[:16]}")
    unsigned, unchecked = [], []
    for m in ms.manifests:
        with open(os.path.join(mdir, f"{m.tag}.yaml"), "rb") as fh:
            data = fh.read()
        v = signing.verify(
            data,
            signing.signature_path(mdir, m.tag),
            os.path.join(mdir, signing.ALLOWED),
            os.path.join(mdir, signing.REVOKED),
            m.created,
        )
        if v.status == signing.UNSIGNED:
            unsigned.append(m.tag)
        elif v.status == signing.COULD_NOT_CHECK:
            unchecked.append(m.tag)
        elif v.status != signing.OK:
            problems.append(f"{MANIFEST_DIR}/{signing.SIG_DIR}/{m.tag}.yaml.sig: {v.status}: {v.detail}")
    for before, after in zip(ms.manifests, ms.manifests[1:]):
        if after.created < before.created:  # a backdated release could be signed by a key rotated out since
            problems.append(
                f"{MANIFEST_DIR}/{after.tag}.yaml is dated {after.created}, before {before.tag} ({before.created})"
            )
    from . import forktrust, trust

    good, found = forktrust.rotations(mdir)
    problems += found
    for _, old, new, start in good:
        notes.append(f"key rotation: {trust.fingerprint(old)} -> {trust.fingerprint(new)} from {start}")
    signed = len(tags) - len(unsigned) - len(unchecked)
    notes.append(f"signatures: {signed} of {len(tags)} release(s) signed and verified")
    if unsigned:
        notes.append("unsigned: " + ", ".join(unsigned))
    if unchecked:
        notes.append("signature not checked (no ssh-keygen): " + ", ".join(unchecked))
    return problems, notes


def self_check(repo_root: str, ms: ManifestSet) -> Report:
    latest = ms.latest
    r = Report(mode="self", target=repo_root, tag=latest.tag if latest else None, prefix=ROOT, digest_kind="sha256")
    r.notes.append(f"{len(ms.manifests)} manifest(s) validated: " + (", ".join(m.tag for m in ms.manifests) or "none"))
    git = GitRepo(repo_root)
    if git.is_repo():
        problems, notes = history_problems(repo_root, ms)
        r.errors.extend(problems)
        r.notes.extend(notes)
    else:
        r.notes.append("not a git checkout: manifest history not verified")
    problems, notes = lineage_problems(repo_root, git if git.is_repo() else None)
    r.errors.extend(problems)
    r.notes.extend(notes)
    problems, notes = chain_and_signatures(repo_root, ms)
    r.errors.extend(problems)
    r.notes.extend(notes)
    tree = _working_tree(repo_root)
    misnamed = sorted(p for p in tree if not is_our_name(p))
    r.errors.extend(f"{ROOT}/{p} breaks the naming rule (sm120_*)" for p in misnamed)
    released = latest.by_path if latest else {}
    for path in sorted(set(tree) | set(released)):
        e, have = released.get(path), tree.get(path)
        if e is None:
            assert have is not None  # a path the release does not have is the tree's
            r.files.append(
                FileResult(
                    path,
                    "extra",
                    detail="unreleased: new since " + (latest.tag if latest else "the first release"),
                    actual=have[0],
                )
            )
            continue
        assert latest is not None  # e is a file of the latest release
        if have is None:
            r.files.append(
                FileResult(path, "missing", detail=f"unreleased: removed since {latest.tag}", expected=e.sha256)
            )
        elif have[0] != e.sha256:
            r.files.append(
                FileResult(
                    path,
                    "changed",
                    diagnosis="unreleased",
                    detail=f"changed since {latest.tag}",
                    expected=e.sha256,
                    actual=have[0],
                )
            )
        elif have[2] != e.mode:
            r.files.append(
                FileResult(path, "mode", detail=f"mode {have[2]}, released {e.mode}", expected=e.sha256, actual=have[0])
            )
        else:
            r.files.append(FileResult(path, "ok", expected=e.sha256, actual=have[0]))
    if r.errors:
        r.verdict = "invalid"
    elif all(f.status == "ok" for f in r.files) and latest is not None:
        r.verdict = "released"
    else:
        r.verdict = "unreleased"
        n = sum(f.status != "ok" for f in r.files)
        r.notes.append(
            f"{n} unreleased change(s) in {ROOT}/ since " + (latest.tag if latest else "the start (no release yet)")
        )
    return r
