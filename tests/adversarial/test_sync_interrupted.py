"""--sync is all or nothing even when the process is stopped: SIGINT, SIGTERM or SIGHUP at any step undoes every
change; `kill -9` between any two steps leaves a journal from which the next --sync restores the fork (and a
plain check refuses to certify a fork in that state)."""
from __future__ import annotations

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
    return {("BACKUP" + k[k.index("/", len(".sm120-sync-backup/")):] if k.startswith(".sm120-sync-backup/") and
             k.count("/") > 1 else ("BACKUP" if k.startswith(".sm120-sync-backup/") else k)): v
            for k, v in snap.items()}


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
        assert (fork / JOURNAL).exists(), at
        code, _, err = run_cv("--repo", str(canon), "--fork", str(fork))
        assert code == 2 and "interrupted --sync" in err, (at, err)
        committed = any(json.loads(ln).get("op") == "commit" for ln in (fork / JOURNAL).read_text().splitlines()
                        if ln.strip())
        with ForkRoot(str(fork)) as fs:
            lines = transaction.recover(fs)
        assert lines and not (fork / JOURNAL).exists()
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
    assert code == 2 and "without --dry-run" in err and (fork / JOURNAL).exists()
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
        assert snapshot(fork) == before and not (fork / JOURNAL).exists(), at


@pytest.mark.parametrize("journal", [
    b"not json\n",
    b'{"journal": 1, "pid": 1}\n{"op": "aside", "path": "a", "aside": "../../etc/passwd"}\n',
    b'{"journal": 1, "pid": 1}\n{"op": "write", "path": "/etc/passwd", "sha256": "' + b"0" * 64 + b'"}\n',
    b'{"journal": 1, "pid": 1}\n{"op": "rm", "path": "x"}\n',
])
def test_a_planted_journal_is_never_replayed(canon, tmp_path, journal):
    fork = make_fork(tmp_path, V1)
    (fork / JOURNAL).write_bytes(journal)
    before = snapshot(fork)
    code, _, err = run_cv("--repo", str(canon), "--fork", str(fork), "--sync")
    assert code == 2 and "not replayed" in err and snapshot(fork) == before


def test_a_journal_that_is_a_link_is_not_followed(canon, tmp_path):
    outside = tmp_path / "outside.json"
    outside.write_text('{"journal": 1, "pid": 1}\n')
    fork = make_fork(tmp_path, V1)
    os.symlink(outside, fork / JOURNAL)
    code, _, err = run_cv("--repo", str(canon), "--fork", str(fork), "--sync")
    assert code == 2 and "not replayed" in err and outside.read_text() == '{"journal": 1, "pid": 1}\n'
    code, doc = run_json("--repo", str(canon), "--fork", str(fork))
    assert code == 2
