"""--sync: bring a local fork to a tag without losing anything the fork wrote, all or nothing.

plan()      decides per file from the comparison report: overwrite only bytes some release shipped or files the
            stamp owns (an unpinned edit of an owned file is backed up first); delete only files an older release
            shipped with exactly those bytes (or renamed copies of a release file); refuse anything else, naming
            the files and the ways on. It also plans the verifier and the stamp.
preflight() checks the whole plan against the fork before anything is written: every directory on every
            target's way and the backup directory (no link is followed, so any link there is a refusal), every
            target's type, and that it still holds the bytes the comparison saw; it loads every byte to write.
            --dry-run prints exactly this checked plan; a plan with a refusal writes nothing.
apply()     carries the plan out as one journaled transaction (vendorkit.transaction): each replaced or deleted
            entry is first renamed aside in its own directory and checked again; a failure at any step (disk
            full, a file changed meanwhile) or a signal undoes every step in reverse, and a killed process's
            journal lets the next --sync restore the fork: it ends as it was or as the release, never in between.
All file system access goes through safefs.ForkRoot.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass

from . import transaction, verifier_gen
from .compare import Report
from .errors import CannotCheck
from .forkview import LocalFork
from .hashing import sha256_bytes
from .manifest import FileEntry, Manifest, ManifestSet
from .safefs import ForkRoot, UnsafePath
from .stamp import BACKUP_DIR, STAMP, VERIFIER, stamp_text
from .transaction import ABSENT, OTHER, state


@dataclass
class Action:
    verb: str  # write | chmod | delete | keep | refuse
    path: str  # fork-relative path
    why: str
    backup: bool = False  # copy the fork's bytes to the backup directory first
    expect: str | None = None  # what the comparison saw there (ABSENT, OTHER or a sha256); None: not known
    mode: str = "100644"  # write / chmod: the git mode to leave
    data: bytes | None = None  # write: the bytes (loaded by preflight for release files)
    entry: FileEntry | None = None
    backup_unless: frozenset = frozenset()  # no backup when the old bytes have one of these sha256 digests


def plan(
    report: Report,
    ms: ManifestSet,
    tag: Manifest,
    force: bool = False,
    drop_patches: bool = False,
    pin: dict | None = None,
) -> list[Action]:
    acts: list[Action] = []
    prefix = report.prefix or ""
    join = (lambda rel: f"{prefix}/{rel}") if prefix else (lambda rel: rel)
    patches = (report.stamp or {}).get("patches", []) if report.owned else []
    pinned = {p["path"]: p for p in patches}
    not_vendored = report.verdict == "not-vendored"
    for f in report.files:
        path = join(f.path)
        entry = tag.by_path.get(f.path)
        here = f.actual if f.actual is not None and report.digest_kind == "sha256" else None
        if f.path == STAMP:
            continue  # planned below, with the verifier
        if f.path == VERIFIER:
            continue  # planned below
        if f.status == "missing":
            acts.append(Action("write", path, "missing", expect=ABSENT, entry=entry))
        elif f.status == "renamed":
            assert f.fork_path is not None  # a renamed file's result says where its copy is (compare)
            acts.append(Action("write", path, f"missing; {f.detail}", expect=ABSENT, entry=entry))
            acts.append(
                Action(
                    "delete",
                    f.fork_path,
                    f"renamed copy of {f.path} (same bytes as the release)",
                    expect=f.actual if report.digest_kind == "sha256" else None,
                )
            )
        elif f.status == "changed":
            released = (f.diagnosis or "").startswith("matches ")
            why = "changed" + (f" ({f.diagnosis})" if f.diagnosis else "")
            if released and not not_vendored:
                acts.append(
                    Action(
                        "write",
                        path,
                        why + ": a released version, nothing of the fork's is lost",
                        expect=here,
                        entry=entry,
                    )
                )
            elif f.path in pinned and drop_patches:
                acts.append(
                    Action(
                        "write", path, "pinned patch dropped (--drop-patches)", backup=True, expect=here, entry=entry
                    )
                )
            elif f.path in pinned:
                again = entry is not None and pinned[f.path]["base_sha256"] == entry.sha256
                acts.append(
                    Action(
                        "refuse",
                        path,
                        f"{why}: edited again after it was pinned; pin it again, or pass --drop-patches"
                        if again
                        else f"{why}: pinned against another release's bytes, and {tag.tag} changes the "
                        f"file; re-apply the edit and pin it again, or pass --drop-patches",
                    )
                )
            elif f.path in report.owned and not not_vendored:
                acts.append(
                    Action(
                        "write",
                        path,
                        why + ": owned by the stamp; the edit is backed up first",
                        backup=True,
                        expect=here,
                        entry=entry,
                    )
                )
            elif force:
                acts.append(Action("write", path, why + " (--force)", backup=True, expect=here, entry=entry))
            else:
                acts.append(Action("refuse", path, why + ": the fork's own bytes"))
        elif f.status == "patched":
            if drop_patches:
                acts.append(
                    Action(
                        "write", path, "pinned patch dropped (--drop-patches)", backup=True, expect=here, entry=entry
                    )
                )
            else:
                acts.append(Action("keep", path, f"pinned patch ({f.detail})"))
        elif f.status == "mode":
            acts.append(
                Action(
                    "chmod",
                    path,
                    f.detail or "mode",
                    expect=here,
                    mode=entry.mode if entry and entry.mode else "100644",
                )
            )
        elif f.status == "extra":
            owners = ms.releases_with(f.path, f.actual or "", report.digest_kind)
            dropped = [m.tag for m in ms.manifests if f.path in m.by_path]
            if owners and not not_vendored:
                acts.append(Action("delete", path, f"shipped by {owners[-1]}, dropped in {tag.tag}", expect=here))
            elif dropped:
                acts.append(Action("keep", path, "a release shipped this path but the fork edited it"))
            else:
                acts.append(Action("keep", path, "no release owns it"))
        elif f.status == "foreign":
            acts.append(Action("keep", path, "foreign: the stamp does not own it"))
        elif f.status in ("error",):
            acts.append(Action("refuse", path, f"could not be read: {f.detail}"))
    if not_vendored and not force:
        return [a for a in acts if a.verb in ("keep", "refuse")] + [
            Action(
                "refuse",
                prefix or ".",
                "the fork does not vendor this layer (no file equals a release): syncing would replace its own headers",
            )
        ]
    written = {a.path for a in acts if a.verb == "write"}
    kept = [
        p
        for p in patches
        if join(p["path"]) not in written
        and p["path"] in tag.by_path
        and tag.by_path[p["path"]].sha256 == p.get("base_sha256")
    ]
    stamp_bad = any(f.path == STAMP for f in report.files)
    # the verifier's old bytes are backed up unless they are a verifier some check_vendor wrote
    known = {verifier_gen.digest(m, "sha256") for m in ms.manifests} | set(verifier_gen.LEGACY)
    known |= {
        f.actual
        for f in report.files
        if f.path == VERIFIER and f.diagnosis == "older-verifier" and f.actual and report.digest_kind == "sha256"
    }
    acts.append(
        Action(
            "write",
            join(VERIFIER),
            f"the offline verifier for {tag.tag}",
            backup=True,
            mode="100755",
            data=verifier_gen.build(tag),
            backup_unless=frozenset(known),
        )
    )
    acts.append(
        Action("write", join(STAMP), f"stamp for {tag.tag}", backup=stamp_bad, data=stamp_text(tag, kept, pin).encode())
    )
    return acts


def refusals(acts: list[Action]) -> list[Action]:
    return [a for a in acts if a.verb == "refuse"]


def how_to_proceed(fork_label: str, refused: list[Action], has_stamp: bool) -> list[str]:
    """After a plan with refusals (already printed, each `refuse` line with its reason): only the ways on that
    would get past them."""
    lines = [f"nothing was written ({len(refused)} refused). To proceed:"]
    whys = " ".join(a.why for a in refused)
    if "pinned" in whys:
        lines.append(
            "  a pinned file: pin the current bytes again (python tools/check_vendor.py pin --fork "
            f"{fork_label} PATH --reason TEXT), or replace it with --sync --drop-patches"
        )
    if "the fork's own bytes" in whys and "does not vendor" not in whys:  # nothing to pin in a foreign layer
        if has_stamp:
            lines.append(
                f"  keep a reviewed edit:  python tools/check_vendor.py pin --fork {fork_label} PATH "
                "--reason TEXT [--upstream URL]"
            )
        else:
            lines.append(
                "  keep a reviewed edit: pinning needs the stamp --sync writes, so run --sync --force "
                "(it backs the edit up), re-apply it and pin it: python tools/check_vendor.py pin "
                f"--fork {fork_label} PATH --reason TEXT"
            )
    if "the fork's own bytes" in whys or "does not vendor" in whys:
        lead = "or overwrite" if len(lines) > 1 else "overwrite"
        lines.append(f"  {lead}:  --sync --force (copies the fork's bytes to {BACKUP_DIR}/<time>/ first)")
    if "not followed" in whys or "where a file belongs" in whys or "changed while" in whys:
        lines.append(
            "  a link or a directory in the way: replace it with a real directory (or remove it) in the "
            "fork and run again; --sync never writes through a link"
        )
    return lines


# ---------------------------------------------------------------- preflight: the whole plan, checked


def _backup_root(fs: ForkRoot) -> str:
    when = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    name, n = f"{BACKUP_DIR}/{when}", 1
    while fs.lstat(name) is not None:
        n += 1
        name = f"{BACKUP_DIR}/{when}-{n}"
    return name


def preflight(
    acts: list[Action], fork: LocalFork, tag: Manifest, canonical: Callable[[FileEntry], bytes | None]
) -> tuple[list[Action], str | None]:
    """(the plan with every unsafe step turned into a refusal and every byte to write loaded, the backup
    directory it would use). CannotCheck when release bytes are unavailable or a file changed since the
    comparison read it."""
    fs = fork.fs
    out: list[Action] = []
    backup_root = None
    for a in acts:
        if a.verb in ("keep", "refuse"):
            out.append(a)
            continue
        parent = a.path.rpartition("/")[0]
        bad = fs.check_dir(parent)
        if bad is not None:
            out.append(Action("refuse", a.path, f"cannot {a.verb}: {bad.component} is {bad.why} (not followed)"))
            continue
        try:
            now = state(fs, a.path)
        except (UnsafePath, OSError) as e:
            out.append(Action("refuse", a.path, f"cannot {a.verb}: {e} (not followed)"))
            continue
        st = fs.lstat(a.path)
        if st is not None and stat.S_ISDIR(st.st_mode):
            out.append(Action("refuse", a.path, f"cannot {a.verb}: a directory where a file belongs"))
            continue
        if a.expect is not None and now != a.expect:
            raise CannotCheck(f"{a.path} changed while it was being checked; nothing was written, run again")
        if a.verb == "delete" and now == ABSENT:
            raise CannotCheck(f"{a.path} disappeared while it was being checked; nothing was written, run again")
        a.expect = now
        if a.verb == "write" and a.data is None:
            assert a.entry is not None  # plan() gives each write of released bytes (no data of its own) its entry
            data = canonical(a.entry)
            if data is None or sha256_bytes(data) != a.entry.sha256:
                why = getattr(getattr(canonical, "__self__", None), "why_missing", lambda: "")()
                raise CannotCheck(
                    f"the released bytes of {a.path} ({tag.label}) are not available "
                    f"{'in this checkout' if not why else ''}; nothing was written" + (f" ({why})" if why else "")
                )
            a.data, a.mode = data, a.entry.mode or "100644"
        if (
            a.verb == "write"
            and a.data is not None  # (loaded just above)
            and now == sha256_bytes(a.data)
            and (st is None or _mode(st) == a.mode)
        ):
            out.append(Action("keep", a.path, "already " + ("the stamp" if a.path.endswith(STAMP) else "up to date")))
            continue
        if a.backup and (now in (ABSENT, OTHER) or now in a.backup_unless):  # a FIFO or device holds no bytes
            a.backup = False
        if a.backup:
            if backup_root is None:
                bad = fs.check_dir(BACKUP_DIR)
                if bad is not None:
                    out.append(
                        Action("refuse", a.path, f"cannot back it up: {bad.component} is {bad.why} (not followed)")
                    )
                    continue
                backup_root = _backup_root(fs)
        out.append(a)
    return out, backup_root


def _mode(st: os.stat_result) -> str:
    if stat.S_ISLNK(st.st_mode):
        return "120000"
    return "100755" if st.st_mode & stat.S_IXUSR else "100644"


# ---------------------------------------------------------------- apply: a transaction


def apply(
    acts: list[Action],
    fork: LocalFork,
    prefix: str,
    backup_root: str | None,
    log: Callable[[str], None],
    header: dict | None = None,
) -> None:
    """Carry out a preflighted plan with no refusals as one journaled transaction (vendorkit.transaction). On any
    failure or signal every step is undone and CannotCheck says what happened (and, should undoing fail too,
    what is left where)."""
    assert not refusals(acts), "apply() needs a plan without refusals"
    fs = fork.fs
    done: list[str] = []
    current: list[Action] = []

    def steps(tx: transaction.Transaction) -> None:
        for a in acts:
            current[:] = [a]
            if a.verb == "keep":
                done.append(f"  keep     {a.path}  ({a.why})")
                continue
            backup_to = f"{backup_root}/{a.path}" if a.backup and backup_root else None
            if a.verb == "write":
                assert a.data is not None  # preflight() loads the bytes of every write it keeps
                tx.write(a.path, a.data, a.mode, a.expect, backup_to)
                if backup_to:
                    done.append(f"  backup   {a.path} -> {backup_to}")
            elif a.verb == "chmod":
                tx.chmod(a.path, a.mode, a.expect)
            elif a.verb == "delete":
                tx.delete(a.path, a.expect)
            done.append(f"  {a.verb:<8} {a.path}  ({a.why})")

    try:
        left = transaction.run(fs, header or {}, steps)
    except transaction._Failed as e:
        a = current[0] if current else None
        where = f" at {a.verb} {a.path}" if a is not None else ""
        raise CannotCheck(f"sync failed{where}: {e}; every change was undone (the fork is as it was)") from None
    for line in done:
        log(line)
    for aside in left:
        log(f"  note     could not remove {aside} (the old bytes of a replaced file); delete it by hand")
    _prune_empty_dirs(fs, prefix, [a.path for a in acts if a.verb == "delete"])


def _prune_empty_dirs(fs: ForkRoot, prefix: str, deleted: list[str]) -> None:
    """Remove directories below the vendor root that a delete left empty (best effort)."""
    for path in deleted:
        parent = path.rpartition("/")[0]
        while parent and parent != prefix and (not prefix or parent.startswith(prefix + "/")):
            try:
                if fs.list_dir(parent):
                    break
                fs.rmdir(parent)
            except (OSError, UnsafePath):
                break
            parent = parent.rpartition("/")[0]
