"""--sync: bring a local fork to a tag. Writes atomically, deletes only release-owned files."""
from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from typing import Callable

from .compare import Report
from .errors import CannotCheck
from .forkview import LocalFork
from .hashing import sha256_bytes
from .manifest import FileEntry, Manifest, ManifestSet


@dataclass
class Action:
    verb: str        # write | chmod | delete | keep
    path: str        # fork-relative path
    why: str


def plan(report: Report, ms: ManifestSet, tag: Manifest) -> list[Action]:
    acts: list[Action] = []
    prefix = report.prefix or ""
    join = (lambda rel: f"{prefix}/{rel}") if prefix else (lambda rel: rel)
    for f in report.files:
        if f.status in ("missing", "changed", "renamed"):
            why = f.status + (f" ({f.diagnosis})" if f.diagnosis else "")
            acts.append(Action("write", join(f.path), why))
        elif f.status == "mode":
            acts.append(Action("chmod", join(f.path), f.detail or "mode"))
        elif f.status == "extra":
            owners = ms.releases_with(f.path, f.actual or "", report.digest_kind)
            dropped = [m.tag for m in ms.manifests if f.path in m.by_path]
            if owners:
                acts.append(Action("delete", join(f.path), f"shipped by {owners[-1]}, dropped in {tag.tag}"))
            elif dropped:
                acts.append(Action("keep", join(f.path), "a release shipped this path but the fork edited it"))
            else:
                acts.append(Action("keep", join(f.path), "no release owns it"))
    return acts


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


def apply(acts: list[Action], fork: LocalFork, tag: Manifest, prefix: str,
          canonical: Callable[[FileEntry], bytes | None], log: Callable[[str], None]) -> None:
    for a in acts:
        dest = os.path.join(fork.root, *a.path.split("/"))
        rel = a.path[len(prefix) + 1:] if prefix else a.path
        if a.verb == "keep":
            log(f"  keep     {a.path}  ({a.why})")
            continue
        if not _inside(fork.real_root, os.path.dirname(dest)):
            raise CannotCheck(f"refusing to touch {a.path}: its directory resolves outside the fork")
        if a.verb == "write":
            entry = tag.by_path[rel]
            data = canonical(entry)
            if data is None or sha256_bytes(data) != entry.sha256:
                raise CannotCheck(f"canonical bytes of {rel} ({tag.tag}) are not available in this checkout")
            if os.path.islink(dest) or os.path.isdir(dest):
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
