"""Hostile fork layouts: no command (check in every format, --sync --dry-run, --sync, --sync --force, pin, the
offline verifier) may open, list, write, chmod, rename or remove anything outside the fork. Each layout runs every
command under a kernel-level audit (inotify on the outside tree) and a snapshot of the outside tree; refused syncs
must also leave the fork exactly as it was."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import fsaudit
import pytest
from fsaudit import snapshot
from vendor_helpers import PREFIX, V2, make_fork, run_cv

STAMP = ".sm120-vendor.json"
VERIFY = ".sm120-vendor-verify.py"
EDIT = b"#pragma once\n// an outside file the fork points at\n"

pytestmark = pytest.mark.skipif(not fsaudit.available(), reason="the file-access audit needs Linux inotify")


def _synced(canon: Path, tmp_path: Path) -> Path:
    fork = make_fork(tmp_path, V2)
    code, out, err = run_cv("--repo", str(canon), "--fork", str(fork), "--sync")
    assert code == 0, out + err
    return fork


def _outside(tmp_path: Path) -> Path:
    """A directory next to the fork holding what a hostile link points at: the release's own bytes (following
    a link would make a check pass) and a stamp that blesses everything."""
    out = tmp_path / "outside"
    for rel, data in V2.items():
        (out / "layer" / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / "layer" / rel).write_bytes(data)
    (out / "edited.cuh").write_bytes(EDIT)
    (out / "backups").mkdir()
    (out / "verify.py").write_text("print('verdict: in-sync'); raise SystemExit(0)\n")
    return out


# each layout: (needs a synced fork, mutate(fork, outside) -> extra argv)
def _backup_dir_link(fork, out):
    (fork / PREFIX / "mma/sm120.cuh").write_bytes(b"// an unpinned edit of an owned file\n")
    (fork / ".sm120-sync-backup").symlink_to(out / "backups", target_is_directory=True)


def _prefix_parent_link(fork, out):
    (out / "deep_gemm/include").mkdir(parents=True)
    shutil.move(str(out / "layer"), str(out / "deep_gemm/include/deep_gemm"))
    shutil.rmtree(fork / "deep_gemm")
    (fork / "deep_gemm").symlink_to(out / "deep_gemm", target_is_directory=True)


def _subdir_link(fork, out):
    shutil.rmtree(fork / PREFIX / "common")
    (fork / PREFIX / "common").symlink_to(out / "layer/common", target_is_directory=True)


def _vendor_root_link(fork, out):
    shutil.rmtree(fork / PREFIX)
    (fork / PREFIX).symlink_to(out / "layer", target_is_directory=True)


def _owned_file_link(fork, out):
    target = fork / PREFIX / "common/sm120_tma.cuh"
    target.unlink()
    target.symlink_to(out / "edited.cuh")


def _released_bytes_link(fork, out):
    target = fork / PREFIX / "scheduler/sm120_gemm.cuh"
    target.unlink()
    target.symlink_to(out / "layer/scheduler/sm120_gemm.cuh")


def _stamp_link(fork, out):
    stamp = fork / PREFIX / STAMP
    (out / "stamp.json").write_bytes(stamp.read_bytes())
    stamp.unlink()
    stamp.symlink_to(out / "stamp.json")
    (fork / PREFIX / "mma/sm120.cuh").write_bytes(b"// drifted behind a linked stamp\n")


def _verifier_link(fork, out):
    v = fork / PREFIX / VERIFY
    v.unlink()
    v.symlink_to(out / "verify.py")


def _sibling_link_inside(fork, out):  # a link that stays inside the fork is still a link: not followed
    shutil.move(str(fork / PREFIX / "impls"), str(fork / "impls_real"))
    (fork / PREFIX / "impls").symlink_to("../../../impls_real", target_is_directory=True)


def _fifo_at_released_path(fork, out):
    p = fork / PREFIX / "common/sm120_utils.cuh"
    p.unlink()
    os.mkfifo(p)


def _dir_at_released_path(fork, out):
    p = fork / PREFIX / "mma/sm120.cuh"
    p.unlink()
    p.mkdir()
    (p / "x.cuh").write_bytes(b"// a directory where a header belongs\n")


def _hardlinked_owned_file(fork, out):
    p = fork / PREFIX / "common/sm120_tma.cuh"
    p.unlink()
    os.link(out / "edited.cuh", p)  # the same inode as a file outside: --sync must replace the entry, not write it


LAYOUTS = {
    "backup-dir-link": (True, _backup_dir_link),
    "prefix-parent-link": (False, _prefix_parent_link),
    "subdir-link": (False, _subdir_link),
    "vendor-root-link": (False, _vendor_root_link),
    "owned-file-link": (True, _owned_file_link),
    "released-bytes-link": (False, _released_bytes_link),
    "stamp-link": (True, _stamp_link),
    "verifier-link": (True, _verifier_link),
    "sibling-link-inside": (False, _sibling_link_inside),
    "fifo-at-released-path": (False, _fifo_at_released_path),
    "dir-at-released-path": (True, _dir_at_released_path),
    "hardlinked-owned-file": (True, _hardlinked_owned_file),
}


def _commands(canon: Path, fork: Path) -> list[list[str]]:
    base = ["--repo", str(canon), "--fork", str(fork), "--prefix", PREFIX]
    return [
        base,
        base + ["--format", "json"],
        base + ["--format", "markdown"],
        base + ["--sync", "--dry-run"],
        base + ["--sync"],
        base + ["--sync", "--force"],
        ["pin", "--repo", str(canon), "--fork", str(fork), "--prefix", PREFIX, "common/sm120_tma.cuh", "--reason", "x"],
    ]


@pytest.mark.parametrize("dirfd", [True, False], ids=["dirfd", "lstat-fallback"])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_nothing_outside_the_fork_is_touched(canon, tmp_path, layout, dirfd, monkeypatch):
    from vendorkit import safefs

    monkeypatch.setattr(safefs, "HAVE_DIRFD", dirfd)  # the fallback for platforms without dir_fd, same layouts
    synced, mutate = LAYOUTS[layout]
    fork = _synced(canon, tmp_path) if synced else make_fork(tmp_path, V2)
    out = _outside(tmp_path)
    mutate(fork, out)
    outside_before = snapshot(out)
    codes = []
    for argv in _commands(canon, fork):
        before = snapshot(fork)
        with fsaudit.OutsideWatch(str(out)) as events:
            code, stdout, stderr = run_cv(*argv)
        assert events == [], f"{layout}: {argv[4:] or argv[:1]} touched {events}"
        assert "Traceback" not in stderr and code in (0, 1, 2, 3), (argv, code, stderr)
        if "--sync" in argv and ("refused" in stdout or code in (2, 3) or "--dry-run" in argv):
            assert snapshot(fork) == before, f"{layout}: a refused or dry-run sync changed the fork"
        codes.append(code)
    verifier = fork / PREFIX / VERIFY
    if verifier.is_file() and not verifier.is_symlink():  # the vendored verifier, run as a fork's CI runs it
        with fsaudit.OutsideWatch(str(out)) as events:
            p = subprocess.run([sys.executable, "-I", str(verifier)], capture_output=True, text=True, timeout=60)
        assert events == [] and "Traceback" not in p.stderr, (events, p.stderr)
    assert snapshot(out) == outside_before
    # the first check never calls a hostile layout in sync (the hardlink and the fork's own link included)
    assert codes[0] != 0, f"{layout}: checked in-sync"


def test_backup_dir_link_refuses_the_sync_before_any_write(canon, tmp_path):
    fork = _synced(canon, tmp_path)
    out = _outside(tmp_path)
    _backup_dir_link(fork, out)
    (fork / PREFIX / "scheduler/sm120_gemm.cuh").unlink()  # a plain write that sorts before the edited file
    before = snapshot(fork)
    code, stdout, _ = run_cv("--repo", str(canon), "--fork", str(fork), "--sync")
    assert code == 1 and "cannot back it up: .sm120-sync-backup is a symlink" in stdout
    assert "nothing was written" in stdout and snapshot(fork) == before
    assert list((out / "backups").iterdir()) == []


def test_subdir_link_dry_run_prints_the_refusals_the_real_run_makes(canon, tmp_path):
    fork = make_fork(tmp_path, V2)
    out = _outside(tmp_path)
    _subdir_link(fork, out)
    base = ["--repo", str(canon), "--fork", str(fork), "--prefix", PREFIX, "--sync"]
    _, dry, _ = run_cv(*base, "--dry-run")
    code, real, _ = run_cv(*base)
    plan = lambda s: [ln.strip() for ln in s.splitlines() if ln.startswith("  ")]
    assert code == 1 and plan(dry) == plan(real)
    assert (
        "refuse   deep_gemm/include/deep_gemm/common/sm120_tma.cuh  (cannot write: "
        "deep_gemm/include/deep_gemm/common is a symlink (not followed))" in dry
    )
    writes = [ln.split()[1] for ln in plan(dry) if ln.startswith("write ")]
    assert writes == [f"{PREFIX}/{VERIFY}", f"{PREFIX}/{STAMP}"]  # planned, and refused with the rest


def test_pin_refuses_a_linked_owned_file(canon, tmp_path):
    fork = _synced(canon, tmp_path)
    out = _outside(tmp_path)
    _owned_file_link(fork, out)
    stamp = (fork / PREFIX / STAMP).read_bytes()
    code, _, err = run_cv("pin", "--repo", str(canon), "--fork", str(fork), "common/sm120_tma.cuh", "--reason", "x")
    assert code == 3 and "a symlink" in err and (fork / PREFIX / STAMP).read_bytes() == stamp


def test_prefix_through_a_link_reads_nothing_and_says_why(canon, tmp_path):
    fork = make_fork(tmp_path, V2)
    out = _outside(tmp_path)
    _prefix_parent_link(fork, out)
    code, stdout, _ = run_cv("--repo", str(canon), "--fork", str(fork), "--prefix", PREFIX, "--format", "json")
    doc = json.loads(stdout)
    assert code == 1 and {f["status"] for f in doc["files"]} == {"missing"}
    assert all("deep_gemm is a symlink (not followed)" in f["detail"] for f in doc["files"])


def test_sync_replaces_a_hardlinked_entry_without_writing_the_shared_inode(canon, tmp_path):
    fork = _synced(canon, tmp_path)
    out = _outside(tmp_path)
    _hardlinked_owned_file(fork, out)
    code, stdout, _ = run_cv("--repo", str(canon), "--fork", str(fork), "--sync")
    assert code == 0 and (out / "edited.cuh").read_bytes() == EDIT
    assert (fork / PREFIX / "common/sm120_tma.cuh").read_bytes() == V2["common/sm120_tma.cuh"]
    assert os.stat(fork / PREFIX / "common/sm120_tma.cuh").st_ino != os.stat(out / "edited.cuh").st_ino
