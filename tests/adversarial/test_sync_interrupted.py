"""--sync is all or nothing even when the process is stopped: SIGINT, SIGTERM or SIGHUP at any step undoes every
change; `kill -9` between any two steps leaves a journal from which the next --sync restores the fork (and a
plain check refuses to certify a fork in that state)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from fsaudit import snapshot
from vendor_helpers import PREFIX, ROOT, V1, make_fork, run_cv, run_json

JOURNAL = ".sm120-sync-journal"


def _journals(fork: Path) -> list[Path]:
    return sorted(fork.glob(JOURNAL + "-*"))


def _fork(tmp: Path) -> Path:
    """A v0.1.0 copy with a chmod to undo and one of the fork's own edits (--force backs it up): every kind of step
    (mkdir, aside, write, backup, chmod, delete) happens."""
    fork = make_fork(tmp, V1, name="template")
    (fork / PREFIX / "mma/sm120.cuh").chmod(0o755)
    (fork / PREFIX / "common/sm120_tma.cuh").write_bytes(b"// the fork's own edit\n")
    return fork


def _copy(template: Path, tmp: Path, name: str) -> Path:
    dst = tmp / name
    shutil.copytree(template, dst, symlinks=True)
    return dst


def _normal(snap: dict) -> dict:
    """A snapshot with the backup directory's time stamp taken out (it names the moment of the sync)."""
    return {
        (
            "BACKUP" + k[k.index("/", len(".sm120-sync-backup/")) :]
            if k.startswith(".sm120-sync-backup/") and k.count("/") > 1
            else ("BACKUP" if k.startswith(".sm120-sync-backup/") else k)
        ): v
        for k, v in snap.items()
    }


CHILD = """
import os, signal, sys
sys.path.insert(0, {tools!r})
from vendorkit import transaction
count, at, sig = [0], {at}, {sig}
record, remove = transaction.Journal.record, transaction.Journal.remove
def counted(self, **step):
    record(self, **step)
    count[0] += 1
    if count[0] == at:
        os.kill(os.getpid(), sig)
def removing(self):
    if at == -1:
        os.kill(os.getpid(), sig)
    remove(self)
transaction.Journal.record, transaction.Journal.remove = counted, removing
from vendorkit.cli import main
code = main({argv!r})
sys.stderr.write("RECORDS %d\\n" % count[0])
sys.exit(code)
"""


def _sync_child(canon: Path, fork: Path, at: int, sig: int) -> subprocess.CompletedProcess:
    argv = ["--repo", str(canon), "--fork", str(fork), "--sync", "--force"]
    code = CHILD.format(tools=str(ROOT / "tools"), at=at, sig=int(sig), argv=argv)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def plan(canon, tmp_path_factory):
    """(template fork, its snapshot, the synced snapshot, number of journal records of a whole sync)."""
    tmp = tmp_path_factory.mktemp("plan")
    template = _fork(tmp)
    ref = _copy(template, tmp, "ref")
    p = _sync_child(canon, ref, 0, signal.SIGKILL)
    assert p.returncode == 0, p.stderr
    records = int(p.stderr.rsplit("RECORDS ", 1)[1].split()[0])
    assert records > 10
    return template, snapshot(template), _normal(snapshot(ref)), records


def test_kill_9_between_any_two_steps_is_restored_by_the_next_sync(canon, plan, tmp_path):
    from vendorkit import transaction
    from vendorkit.safefs import ForkRoot

    template, before, after, records = plan
    for at in [*range(1, records + 1), -1]:  # after each journal record (before its step), and before the end
        fork = _copy(template, tmp_path, f"k{at}")
        p = _sync_child(canon, fork, at, signal.SIGKILL)
        assert p.returncode == -signal.SIGKILL, (at, p.stderr)
        assert len(_journals(fork)) == 1, at
        code, _, err = run_cv("--repo", str(canon), "--fork", str(fork))
        assert code == 2 and "interrupted --sync" in err, (at, err)
        committed = any(
            json.loads(ln).get("op") == "commit" for ln in _journals(fork)[0].read_text().splitlines() if ln.strip()
        )
        with ForkRoot(str(fork)) as fs:
            lines = transaction.recover(fs)
        assert lines and not _journals(fork)
        now = snapshot(fork)
        if committed:  # the commit record was written: the fork is the release, the asides are gone
            assert _normal(now) == after, at
        else:
            assert now == before, at  # bytes, modes, links, directories: as it was, no temp or undo file left
        code, out, err = run_cv("--repo", str(canon), "--fork", str(fork), "--sync", "--force")
        assert code == 0, (at, out, err)
        assert not any(".sm120-undo-" in k or ".sm120-tmp-" in k for k in snapshot(fork)), at


def test_the_next_sync_recovers_by_itself(canon, plan, tmp_path):
    template, before, after, records = plan
    fork = _copy(template, tmp_path, "auto")
    assert _sync_child(canon, fork, records // 2, signal.SIGKILL).returncode == -signal.SIGKILL
    code, out, err = run_cv("--repo", str(canon), "--fork", str(fork), "--sync", "--dry-run")
    assert code == 2 and "without --dry-run" in err and _journals(fork)
    code, out, err = run_cv("--repo", str(canon), "--fork", str(fork), "--sync", "--force")
    assert code == 0 and "recover  an interrupted sync" in out and "undone" in out, out + err
    assert _normal(snapshot(fork)) == after


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_a_signal_at_any_step_undoes_everything(canon, plan, tmp_path, sig):
    template, before, after, records = plan
    for at in (1, 2, records // 2, records - 2):
        fork = _copy(template, tmp_path, f"{sig.name}{at}")
        p = _sync_child(canon, fork, at, sig)
        assert p.returncode == 2, (at, p.stderr)
        assert f"interrupted by {sig.name}" in p.stderr and "every change was undone" in p.stderr, p.stderr
        assert snapshot(fork) == before and not _journals(fork), at


def _planted(records: list[dict]) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in records)


@pytest.mark.parametrize(
    "journal",
    [
        b"not json\n",
        _planted(
            [
                {"journal": 2, "pid": 1, "fork": "/", "mac": "0" * 64},
                {"op": "aside", "path": "a", "aside": "../../etc/passwd", "mac": "0" * 64},
            ]
        ),
        # well-formed records, as a killed sync would leave them, aimed at files the sync never touches: the
        # repository's metadata, the fork's own setup.py, a script's mode
        _planted(
            [
                {"journal": 1, "pid": 1},
                {"op": "write", "path": ".git/HEAD", "sha256": hashlib.sha256(b"ref: refs/heads/main\n").hexdigest()},
                {"op": "write", "path": "setup.py", "sha256": hashlib.sha256(b"# fork's own\n").hexdigest()},
                {"op": "chmod", "path": "build.sh", "old": 0o755},
            ]
        ),
    ],
    ids=["garbage", "unsafe", "well-formed"],
)
def test_a_planted_journal_is_never_replayed_and_blocks_nothing(canon, tmp_path, journal):
    from vendor_helpers import commit_all, init_repo

    fork = make_fork(tmp_path, V1)
    (fork / "build.sh").write_bytes(b"#!/bin/sh\n")
    (fork / (JOURNAL + "-0123456789ab")).write_bytes(journal)
    init_repo(fork)
    commit_all(fork, "a fork that committed a journal")
    head = (fork / ".git" / "HEAD").read_bytes()
    code, doc = run_json("--repo", str(canon), "--fork", str(fork))
    assert code == 1 and doc["verdict"] == "stale"  # the journal is not ours: the check goes on
    code, out, err = run_cv("--repo", str(canon), "--fork", str(fork), "--sync")
    assert code == 0 and "recover" not in out, out + err
    assert (fork / ".git" / "HEAD").read_bytes() == head and (fork / "setup.py").read_bytes() == b"# fork's own\n"
    assert (fork / "build.sh").stat().st_mode & 0o777 == 0o644
    assert (fork / (JOURNAL + "-0123456789ab")).read_bytes() == journal  # left as it was


def test_a_journal_of_this_user_for_another_fork_is_not_replayed(canon, plan, tmp_path):
    template, before, after, records = plan
    fork = _copy(template, tmp_path, "a")
    assert _sync_child(canon, fork, records // 2, signal.SIGKILL).returncode == -signal.SIGKILL
    moved = tmp_path / "moved"
    shutil.move(str(fork), moved)  # the journal names the fork it was written for
    code, _, err = run_cv("--repo", str(canon), "--fork", str(moved))
    assert code != 2 or "interrupted --sync" not in err


def test_a_journal_that_is_a_link_is_not_followed(canon, tmp_path):
    outside = tmp_path / "outside.json"
    outside.write_text('{"journal": 2, "pid": 1}\n')
    fork = make_fork(tmp_path, V1)
    os.symlink(outside, fork / (JOURNAL + "-0123456789ab"))
    code, out, err = run_cv("--repo", str(canon), "--fork", str(fork), "--sync")
    assert code == 0 and outside.read_text() == '{"journal": 2, "pid": 1}\n'


PAUSED = """
import os, sys, time
sys.path.insert(0, {tools!r})
from vendorkit import transaction
record = transaction.Journal.record
def paused(self, **step):
    record(self, **step)
    if len(self.records) == 2:  # the first step is logged: stand in for a slow disk until the test says go
        open({ready!r}, "w").close()
        while not os.path.exists({go!r}):
            time.sleep(0.02)
transaction.Journal.record = paused
from vendorkit.cli import main
sys.exit(main({argv!r}))
"""


def test_a_second_sync_never_replays_a_running_syncs_journal(canon, tmp_path, plan):
    """Found by red team 2: a second --sync while the first was still running "recovered" its live journal; the
    first then undid its own steps over the second's files, and the fork ended at neither release."""
    template, _, synced, _ = plan
    fork = _copy(template, tmp_path, "fork")
    ready, go = tmp_path / "ready", tmp_path / "go"
    argv = ["--repo", str(canon), "--fork", str(fork), "--sync", "--force"]
    code = PAUSED.format(tools=str(ROOT / "tools"), ready=str(ready), go=str(go), argv=argv)
    first = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(3000):
            if ready.exists() or first.poll() is not None:
                break
            subprocess.run(["sleep", "0.02"])
        assert ready.exists(), first.communicate()
        assert len(_journals(fork)) == 1
        code, _, err = run_cv("--repo", str(canon), "--fork", str(fork), "--sync", "--force")
        assert code == 2 and f"another check_vendor run is syncing or checking this fork (pid {first.pid})" in err
        code, _, err = run_cv("--repo", str(canon), "--fork", str(fork))
        assert code == 2 and f"a --sync of this fork is running (pid {first.pid})" in err, err
        assert len(_journals(fork)) == 1  # neither touched the running sync's journal
        go.touch()
        out, err = first.communicate(timeout=120)
    finally:
        go.touch()
        first.wait(timeout=120)
    assert first.returncode == 0, err
    assert _normal(snapshot(fork)) == synced and not _journals(fork)
    assert run_cv("--repo", str(canon), "--fork", str(fork))[0] == 0
