"""--sync: bring a local fork to a tag without losing anything the fork wrote.

It overwrites only files whose bytes equal some release (stale copies) or that the stamp owns (an unpinned edit
of an owned file is copied to the backup directory first);
deletes only files an older release shipped with exactly those bytes (or renamed copies of a release file);
and refuses anything else (a local edit, a pinned patch, a fork that does not vendor this layer), naming the
files and how to proceed: --force (after a backup copy outside the vendor root) or pinning the edit as a patch.
After writing it records the stamp and the offline verifier in the vendor root. Every write is atomic."""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from typing import Callable

from .compare import Report
from .errors import CannotCheck
from .forkview import LocalFork
from .hashing import sha256_bytes
from .manifest import FileEntry, Manifest, ManifestSet
from .stamp import BACKUP_DIR, STAMP, VERIFIER, VERIFIER_SOURCE, stamp_text


@dataclass
class Action:
    verb: str        # write | chmod | delete | keep | refuse
    path: str        # fork-relative path
    why: str
    backup: bool = False   # --force: copy the fork's bytes aside first


def plan(report: Report, ms: ManifestSet, tag: Manifest, force: bool = False,
         drop_patches: bool = False) -> list[Action]:
    acts: list[Action] = []
    prefix = report.prefix or ""
    join = (lambda rel: f"{prefix}/{rel}") if prefix else (lambda rel: rel)
    pinned = {p["path"] for p in (report.stamp or {}).get("patches", [])}
    not_vendored = report.verdict == "not-vendored"
    for f in report.files:
        path = join(f.path)
        if f.status == "missing":
            acts.append(Action("write", path, "missing"))
        elif f.status == "renamed":
            acts.append(Action("write", path, f"missing; {f.detail}"))
            acts.append(Action("delete", f.fork_path, f"renamed copy of {f.path} (same bytes as the release)"))
        elif f.status == "changed" and f.path == STAMP:
            acts.append(Action("write", path, f"stamp: {f.detail}"))
        elif f.status == "changed":
            released = (f.diagnosis or "").startswith("matches v")
            why = "changed" + (f" ({f.diagnosis})" if f.diagnosis else "")
            if released and not not_vendored:
                acts.append(Action("write", path, why + ": a released version, nothing of the fork's is lost"))
            elif f.path in pinned and drop_patches:
                acts.append(Action("write", path, "pinned patch dropped (--drop-patches)", backup=True))
            elif f.path in pinned:
                acts.append(Action("refuse", path, f"{why}: a pinned patch made for another release; re-apply "
                                                   f"and re-pin it, or pass --drop-patches"))
            elif f.path in report.owned and not not_vendored:
                acts.append(Action("write", path, why + ": owned by the stamp; the edit is backed up first",
                                   backup=True))
            elif force:
                acts.append(Action("write", path, why + " (--force)", backup=True))
            else:
                acts.append(Action("refuse", path, why + ": the fork's own bytes"))
        elif f.status == "patched":
            if drop_patches:
                acts.append(Action("write", path, "pinned patch dropped (--drop-patches)", backup=True))
            else:
                acts.append(Action("keep", path, f"pinned patch ({f.detail})"))
        elif f.status == "mode":
            acts.append(Action("chmod", path, f.detail or "mode"))
        elif f.status == "extra":
            owners = ms.releases_with(f.path, f.actual or "", report.digest_kind)
            dropped = [m.tag for m in ms.manifests if f.path in m.by_path]
            if owners and not not_vendored:
                acts.append(Action("delete", path, f"shipped by {owners[-1]}, dropped in {tag.tag}"))
            elif dropped:
                acts.append(Action("keep", path, "a release shipped this path but the fork edited it"))
            else:
                acts.append(Action("keep", path, "no release owns it"))
        elif f.status == "foreign":
            acts.append(Action("keep", path, "foreign: the stamp does not own it"))
    if not_vendored and not force:
        acts = [a for a in acts if a.verb in ("keep", "refuse")] + [
            Action("refuse", prefix or ".", "the fork does not vendor this layer (no file equals a release): "
                                            "syncing would replace its own headers")]
    return acts


def refusals(acts: list[Action]) -> list[Action]:
    return [a for a in acts if a.verb == "refuse"]


def how_to_proceed(fork_label: str, refused: list[Action]) -> list[str]:
    return [f"  refused  {a.path}  ({a.why})" for a in refused] + [
        "nothing was written. To proceed, either",
        f"  pin a reviewed edit:  python tools/check_vendor.py pin --fork {fork_label} PATH --reason TEXT "
        "[--upstream URL]",
        f"  or overwrite:         --sync --force (copies the fork's bytes to {BACKUP_DIR}/<time>/ first)"
        + ("; --drop-patches replaces pinned patches" if any("pinned patch" in a.why for a in refused) else "")]


def _inside(root_real: str, path: str) -> bool:
    real = os.path.realpath(path)
    return real == root_real or real.startswith(root_real + os.sep)


def _atomic_write(dest: str, data: bytes, mode: str) -> None:
    parent = os.path.dirname(dest)
    os.makedirs(parent, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=parent, prefix=".sm120-sync-")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o755 if mode == "100755" else 0o644)
        os.replace(tmp, dest)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _backup(fork: LocalFork, path: str, stamp_time: str, log: Callable[[str], None]) -> None:
    src = os.path.join(fork.root, *path.split("/"))
    if not os.path.lexists(src):
        return
    dst = os.path.join(fork.root, BACKUP_DIR, stamp_time, *path.split("/"))
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    shutil.copy2(src, dst, follow_symlinks=False)
    log(f"  backup   {path} -> {os.path.relpath(dst, fork.root)}")


def apply(acts: list[Action], fork: LocalFork, tag: Manifest, prefix: str,
          canonical: Callable[[FileEntry], bytes | None], log: Callable[[str], None],
          patches: list[dict] | None = None) -> None:
    """Carry out a plan with no refusals, then write the stamp and the verifier into the vendor root."""
    assert not refusals(acts), "apply() needs a plan without refusals"
    when = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    for a in acts:
        dest = os.path.join(fork.root, *a.path.split("/"))
        rel = a.path[len(prefix) + 1:] if prefix else a.path
        if a.verb == "keep":
            log(f"  keep     {a.path}  ({a.why})")
            continue
        if not _inside(fork.real_root, os.path.dirname(dest)):
            raise CannotCheck(f"refusing to touch {a.path}: its directory resolves outside the fork")
        if a.backup:
            _backup(fork, a.path, when, log)
        if a.verb == "write" and rel == STAMP:
            continue  # rewritten below
        if a.verb == "write":
            entry = tag.by_path[rel]
            data = canonical(entry)
            if data is None or sha256_bytes(data) != entry.sha256:
                raise CannotCheck(f"canonical bytes of {rel} ({tag.tag}) are not available in this checkout")
            if os.path.isdir(dest) and not os.path.islink(dest):
                raise CannotCheck(f"refusing to replace directory {a.path}")
            if entry.mode == "120000":
                tmp = dest + ".sm120-sync-link"
                os.symlink(os.fsdecode(data), tmp)
                os.replace(tmp, dest)
            else:
                _atomic_write(dest, data, entry.mode)
            log(f"  write    {a.path}  ({a.why})")
        elif a.verb == "chmod":
            entry = tag.by_path[rel]
            os.chmod(dest, 0o755 if entry.mode == "100755" else 0o644)
            log(f"  chmod    {a.path}  ({a.why})")
        elif a.verb == "delete":
            os.unlink(dest)
            log(f"  delete   {a.path}  ({a.why})")
            parent = os.path.dirname(dest)
            stop = os.path.join(fork.root, *prefix.split("/")) if prefix else fork.root
            while parent != stop and parent.startswith(stop) and not os.listdir(parent):
                os.rmdir(parent)
                parent = os.path.dirname(parent)
    root = os.path.join(fork.root, *prefix.split("/")) if prefix else fork.root
    if not _inside(fork.real_root, root):
        raise CannotCheck("refusing to write the stamp: the vendor root resolves outside the fork")
    with open(VERIFIER_SOURCE, "rb") as fh:
        _atomic_write(os.path.join(root, VERIFIER), fh.read(), "100755")
    _atomic_write(os.path.join(root, STAMP), stamp_text(tag, patches).encode(), "100644")
    log(f"  stamp    {os.path.join(prefix, STAMP) if prefix else STAMP} ({tag.tag}; verifier {VERIFIER})")
