"""--sync is all or nothing: the dry run prints the plan the real run carries out; a failure at any step (disk
full, a file changed by someone else meanwhile) leaves the fork exactly as it was."""

from __future__ import annotations

import errno

import pytest
from fsaudit import snapshot
from vendor_helpers import PREFIX, V1, V2, make_fork, run_cv


def _stale_fork(tmp_path):
    """A v0.1.0 copy with an owned-style mix: writes, a delete, a chmod, the stamp and the verifier to write."""
    fork = make_fork(tmp_path, V1)
    (fork / PREFIX / "mma/sm120.cuh").chmod(0o755)
    return fork


def _plan(out: str) -> list[tuple[str, str]]:
    """(verb, path) of each plan line, from a dry run's or a real run's output (backup lines left out)."""
    verbs = {"write", "delete", "chmod", "keep", "refuse"}
    return [tuple(ln.split()[:2]) for ln in out.splitlines() if ln.startswith("  ") and ln.split()[0] in verbs]


def test_dry_run_plan_is_the_real_plan(canon, tmp_path):
    fork = _stale_fork(tmp_path)
    base = ["--repo", str(canon), "--fork", str(fork), "--sync"]
    _, dry, _ = run_cv(*base, "--dry-run")
    code, real, err = run_cv(*base)
    assert code == 0, real + err
    assert _plan(dry) == _plan(real)
    verbs = {v for v, _ in _plan(real)}
    assert {"write", "delete", "chmod"} <= verbs


@pytest.mark.parametrize("fail_at", [1, 2, 3, -1])  # the first, second and third write, and the stamp (last)
def test_disk_full_midway_undoes_everything(canon, tmp_path, monkeypatch, fail_at):
    from vendorkit.safefs import ForkRoot

    fork = _stale_fork(tmp_path)
    (fork / PREFIX / "impls/sm120_mine.cuh").write_bytes(b"// the fork's own file, never touched\n")
    before = snapshot(fork)
    _, dry, _ = run_cv("--repo", str(canon), "--fork", str(fork), "--sync", "--dry-run")
    writes = [p for v, p in _plan(dry) if v == "write"]
    target = writes[fail_at if fail_at < 0 else fail_at - 1]
    real = ForkRoot.write_atomic

    def full(self, rel, data, mode=0o644):
        if rel == target:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, rel, data, mode)

    monkeypatch.setattr(ForkRoot, "write_atomic", full)
    code, out, err = run_cv("--repo", str(canon), "--fork", str(fork), "--sync")
    assert code == 2 and "No space left on device" in err and "every change was undone" in err
    assert f"sync failed at write {target}" in err
    assert snapshot(fork) == before  # bytes, modes, links, directories: as it was, no temp or undo files left


def test_a_file_changed_during_the_sync_undoes_everything(canon, tmp_path, monkeypatch):
    from vendorkit.safefs import ForkRoot

    fork = _stale_fork(tmp_path)
    _, dry, _ = run_cv("--repo", str(canon), "--fork", str(fork), "--sync", "--dry-run")
    deleted = next(p for v, p in _plan(dry) if v == "delete")
    late = fork / deleted  # planned after the first write; edited by someone else while that write happens
    real = ForkRoot.write_atomic
    calls = []

    def racing(self, rel, data, mode=0o644):
        calls.append(rel)
        if len(calls) == 1:
            late.write_bytes(b"// written by another process during the sync\n")
        return real(self, rel, data, mode)

    monkeypatch.setattr(ForkRoot, "write_atomic", racing)
    before = snapshot(fork)
    code, out, err = run_cv("--repo", str(canon), "--fork", str(fork), "--sync")
    after = snapshot(fork)
    assert code == 2 and "changed during the sync" in err and "every change was undone" in err
    # everything is as it was, except the other process's edit, which is kept
    assert after.pop(deleted) == ("file", before[deleted][1], b"// written by another process during the sync\n")
    before.pop(deleted)
    assert after == before


def test_a_rerun_of_an_in_sync_fork_writes_nothing(canon, tmp_path):
    fork = make_fork(tmp_path, V2)
    assert run_cv("--repo", str(canon), "--fork", str(fork), "--sync")[0] == 0
    before = snapshot(fork)
    code, out, _ = run_cv("--repo", str(canon), "--fork", str(fork), "--sync")
    assert code == 0 and snapshot(fork) == before
    assert {v for v, _ in _plan(out)} <= {"keep"}


def test_released_bytes_missing_from_the_checkout_stop_before_any_write(canon, tmp_path, monkeypatch):
    from vendorkit.canonical import CanonicalStore

    fork = _stale_fork(tmp_path)
    before = snapshot(fork)
    real = CanonicalStore.get
    monkeypatch.setattr(
        CanonicalStore, "get", lambda self, e: None if e.path.startswith("scheduler/") else real(self, e)
    )
    code, _, err = run_cv("--repo", str(canon), "--fork", str(fork), "--sync")
    assert code == 2 and "not available in this checkout; nothing was written" in err
    assert snapshot(fork) == before


def test_a_failure_after_a_backup_removes_the_backup_too(canon, tmp_path, monkeypatch):
    from vendorkit.safefs import ForkRoot

    fork = make_fork(tmp_path, V2)
    assert run_cv("--repo", str(canon), "--fork", str(fork), "--sync")[0] == 0
    (fork / PREFIX / "mma/sm120.cuh").write_bytes(b"// an owned edit: backed up before it is replaced\n")
    (fork / PREFIX / "scheduler/sm120_gemm.cuh").unlink()
    before = snapshot(fork)
    real = ForkRoot.write_atomic

    def full(self, rel, data, mode=0o644):
        if rel.endswith("scheduler/sm120_gemm.cuh"):  # planned after the backed-up write
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, rel, data, mode)

    monkeypatch.setattr(ForkRoot, "write_atomic", full)
    code, _, err = run_cv("--repo", str(canon), "--fork", str(fork), "--sync")
    assert code == 2 and "every change was undone" in err
    assert snapshot(fork) == before and not (fork / ".sm120-sync-backup").exists()


def test_a_journal_key_that_vanishes_as_it_is_made_stops_the_sync_before_any_write(canon, tmp_path, monkeypatch):
    """Another process removing the state directory between the key's creation and its read: a clear error, exit
    2, and the fork untouched (before, the MAC of the first record failed with a TypeError)."""
    import vendorkit.transaction as transaction

    fork = _stale_fork(tmp_path)
    before = snapshot(fork)
    monkeypatch.setattr(transaction, "journal_key", lambda create=False: None)
    code, out, err = run_cv("--repo", str(canon), "--fork", str(fork), "--sync")
    assert code == 2 and "journal key" in err and "Traceback" not in err, out + err
    assert snapshot(fork) == before
