"""How --sync changes a fork: one transaction, all or nothing, even when the process is killed.

Every step is first written to a journal (`.sm120-sync-journal` at the fork root, one JSON line per step,
flushed and fsynced before the step runs), so whatever stops the process, the journal names every step that
may have run. Each entry a step replaces or deletes is renamed aside in its own directory first; new files
land through a temporary file and a rename. Undoing a step is idempotent and checks before it acts (a file is
removed only if it holds the bytes the step wrote; an aside is renamed back only if it is still there), so an
undo can itself be interrupted and run again.

- A failure (disk full, a file changed by someone else) or SIGINT / SIGTERM / SIGHUP during the steps: every
  step is undone in reverse (further signals wait until it is done), the journal is removed, exit 2.
- `kill -9` (or a power cut): the journal stays. A plain check of the fork then exits 2 and says so; the next
  `--sync` first restores the fork from the journal (or, when the journal reached its commit record, finishes
  dropping the asides), then plans and syncs as usual.
- After the commit record the asides are removed and the journal is deleted: the fork is the release.

A journal file is fork content like any other, and a fork can commit one. So a journal is honoured only when
this user's check_vendor wrote it for this fork: every record carries an HMAC chained over the records before it,
keyed by a secret kept outside any fork (`$SM120_STATE_DIR`, else `$XDG_STATE_HOME/deep_gemm_sm120`, else
`~/.local/state/deep_gemm_sm120`: `sync-journal.key`, 0600), and the header names the fork's real path.
Journals are named `.sm120-sync-journal-<random>` at the fork root; one that does not verify is not ours: it is
never replayed and never blocks a check or a sync. Even a verified journal is replayed only record by record as
this module writes them (known operations, safe paths, its own aside names), never through a link.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import re
import signal
import stat
import threading
import time
from collections.abc import Callable

from .errors import CannotCheck
from .safefs import ForkRoot, UnsafePath, safe_relative

JOURNAL = ".sm120-sync-journal"  # the name's prefix: each journal is JOURNAL-<12 hex digits>
JOURNAL_MAX_BYTES = 16 << 20
_JOURNAL_NAME = re.compile(r"\.sm120-sync-journal-[0-9a-f]{12}")
KEY_NAME = "sync-journal.key"
ABSENT, OTHER = "absent", "other"  # entry states besides a sha256 (of a file's bytes or a link's target)
_ASIDE = re.compile(r"(?:.*/)?\.sm120-undo-[0-9a-f]{12}")
_HEX64 = re.compile(r"[0-9a-f]{64}")
SIGNALS = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n))


class Changed(Exception):
    """An entry no longer holds what the plan saw: the sync is undone."""


class Interrupted(Exception):
    """A signal asked the process to stop during the steps: the sync is undone."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(f"interrupted by {signal.Signals(signum).name}")


def state(fs: ForkRoot, rel: str) -> str:
    """ABSENT, OTHER, or the sha256 of a regular file's bytes / a link's target (what FileResult.actual holds)."""
    st = fs.lstat(rel)
    if st is None:
        return ABSENT
    if stat.S_ISLNK(st.st_mode):
        return hashlib.sha256(os.fsencode(fs.readlink(rel))).hexdigest()
    if stat.S_ISREG(st.st_mode):
        h = hashlib.sha256()
        with fs.open_read(rel) as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        return h.hexdigest()
    return OTHER


# ---------------------------------------------------------------- the journal


def state_dir() -> str:
    env = os.environ.get("SM120_STATE_DIR")
    if env:
        return env
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "deep_gemm_sm120")


def journal_key(create: bool) -> bytes | None:
    """This user's journal key (made on first use when `create`), or None when there is none."""
    d = state_dir()
    path = os.path.join(d, KEY_NAME)
    try:
        with open(path, "rb") as fh:
            key = fh.read(65)
        if len(key) == 32:
            return key
        raise CannotCheck(f"{path} is not a check_vendor journal key (32 bytes); remove it to make a new one")
    except FileNotFoundError:
        if not create:
            return None
    try:
        os.makedirs(d, mode=0o700, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(os.urandom(32))
    except FileExistsError:
        pass  # made meanwhile by another sync
    except OSError as e:
        raise CannotCheck(
            f"cannot make the journal key {path} ({e.strerror or e}): --sync needs it to journal "
            f"its steps (set SM120_STATE_DIR to a writable directory)"
        ) from None
    return journal_key(create=False)


def _mac(key: bytes, prev: str, rec: dict) -> str:
    body = json.dumps({k: v for k, v in rec.items() if k != "mac"}, sort_keys=True).encode()
    return hmac.new(key, prev.encode() + b"\n" + body, hashlib.sha256).hexdigest()


class Journal:
    """The write-ahead record of one sync's steps, each record MAC-chained to the ones before it."""

    def __init__(self, fs: ForkRoot, header: dict):
        key = journal_key(create=True)
        if key is None:  # made, then gone before it was read back (removed by something else)
            raise CannotCheck(
                f"the journal key {os.path.join(state_dir(), KEY_NAME)} disappeared as it was made: --sync needs "
                f"it to journal its steps"
            )
        self.fs, self.key, self.prev = fs, key, ""
        self.name = f"{JOURNAL}-{os.urandom(6).hex()}"
        self.fh = fs.create_exclusive(self.name, 0o600)
        self.records: list[dict] = []
        self._write({"journal": 2, "pid": os.getpid(), "started": time.time(), "fork": _real(fs), **header})

    def _write(self, rec: dict) -> None:
        rec = {**rec, "mac": _mac(self.key, self.prev, rec)}
        self.prev = rec["mac"]
        self.fh.write(json.dumps(rec, sort_keys=True).encode() + b"\n")
        self.fh.flush()
        os.fsync(self.fh.fileno())

    def record(self, **step) -> None:
        """Log a step before it runs."""
        self._write(step)
        self.records.append(step)

    def remove(self) -> None:
        self.fh.close()
        self.fs.unlink(self.name)


def _real(fs: ForkRoot) -> str:
    return os.path.realpath(fs.path)


def journals(fs: ForkRoot) -> list[str]:
    """The journal-named regular files at the fork root (ours or not: read_journal tells)."""
    try:
        return sorted(n for n, st in fs.list_dir("") if _JOURNAL_NAME.fullmatch(n) and stat.S_ISREG(st.st_mode))
    except (OSError, UnsafePath):
        return []


def read_journal(fs: ForkRoot, name: str) -> tuple[dict, list[dict]] | None:
    """(header, step records) of journal `name` when this user's check_vendor wrote it for this fork (its MAC
    chain verifies), else None: it is then not ours, never replayed."""
    key = journal_key(create=False)
    if key is None:
        return None
    try:
        raw = fs.read_bytes(name, JOURNAL_MAX_BYTES)
    except (OverflowError, OSError, UnsafePath):
        return None
    lines = raw.split(b"\n")
    lines.pop()  # "" after the last complete record, or a record cut short by the kill (its step never ran)
    recs, prev = [], ""
    for ln in lines:
        try:
            r = json.loads(ln)
        except (ValueError, RecursionError):
            return None
        if (
            not isinstance(r, dict)
            or not isinstance(r.get("mac"), str)
            or not hmac.compare_digest(r["mac"], _mac(key, prev, r))
        ):
            return None
        prev = r.pop("mac")
        recs.append(r)
    if (
        not recs
        or recs[0].get("journal") != 2
        or not isinstance(recs[0].get("pid"), int)
        or recs[0].get("fork") != _real(fs)
    ):
        return None
    if not all(_valid(r) for r in recs[1:]):
        raise CannotCheck(
            f"{name} verifies but holds a record this check_vendor never writes: not replayed; "
            f"inspect the fork and remove it by hand"
        )
    return recs[0], recs[1:]


def _pending(fs: ForkRoot) -> list[tuple[str, dict, list[dict]]]:
    """(name, header, step records) of each journal of an interrupted sync of this fork that this user's
    check_vendor wrote."""
    out = []
    for n in journals(fs):
        got = read_journal(fs, n)
        if got is not None:
            out.append((n, *got))
    return out


def pending(fs: ForkRoot) -> list[str]:
    """Journals of interrupted syncs of this fork that this user's check_vendor wrote."""
    return [n for n, _, _ in _pending(fs)]


def _valid(r) -> bool:
    if not isinstance(r, dict) or not isinstance(r.get("op"), str):
        return False
    op, path = r["op"], r.get("path")
    if op == "commit":
        return set(r) == {"op"}
    if not isinstance(path, str) or not safe_relative(path):  # (safe_relative refuses a non-string too)
        return False
    if op == "mkdir":
        return set(r) == {"op", "path"}
    if op == "aside":
        a = r.get("aside")
        return (
            set(r) == {"op", "path", "aside"}
            and isinstance(a, str)
            and safe_relative(a)
            and bool(_ASIDE.fullmatch(a))
            and a.rpartition("/")[0] == path.rpartition("/")[0]
        )
    if op == "write":
        return (
            set(r) == {"op", "path", "sha256"} and isinstance(r["sha256"], str) and bool(_HEX64.fullmatch(r["sha256"]))
        )
    if op == "symlink":
        return set(r) == {"op", "path", "target"} and isinstance(r["target"], str)
    if op == "chmod":
        return set(r) == {"op", "path", "old"} and r["old"] in (0o644, 0o755)
    return False


def undo(fs: ForkRoot, records: list[dict], pid: int) -> list[str]:
    """Undo logged steps, newest first; each check before it acts, so running this twice is harmless. Returns
    what could not be undone (empty: the fork is as it was)."""
    failed = []
    for r in reversed(records):
        op, path = r["op"], r.get("path")
        try:
            if op == "write":
                _drop_tmps(fs, path.rpartition("/")[0], pid)
                if state(fs, path) == r["sha256"]:
                    fs.unlink(path)
            elif op == "symlink":
                st = fs.lstat(path)
                if st is not None and stat.S_ISLNK(st.st_mode) and fs.readlink(path) == r["target"]:
                    fs.unlink(path)
            elif op == "aside":
                if fs.lstat(r["aside"]) is not None:
                    fs.rename(r["aside"], path)
            elif op == "chmod":
                st = fs.lstat(path)
                if st is not None and stat.S_ISREG(st.st_mode):
                    fs.chmod(path, r["old"])
            elif op == "mkdir":
                st = fs.lstat(path)
                if st is not None and stat.S_ISDIR(st.st_mode) and not fs.list_dir(path):
                    fs.rmdir(path)
        except (OSError, UnsafePath) as e:
            failed.append(f"{op} {path}: {getattr(e, 'strerror', None) or e}")
    return failed


def _drop_tmps(fs: ForkRoot, rel_dir: str, pid: int) -> None:
    """Temporary files a killed write_atomic of process `pid` left in `rel_dir`."""
    try:
        names = [n for n, _ in fs.list_dir(rel_dir) if n.startswith(f".sm120-tmp-{pid}-")]
    except (FileNotFoundError, UnsafePath, NotADirectoryError):
        return
    for n in names:
        fs.unlink(f"{rel_dir}/{n}" if rel_dir else n)


def _drop_asides(fs: ForkRoot, records: list[dict]) -> list[str]:
    left = []
    for r in records:
        if r["op"] == "aside" and fs.lstat(r["aside"]) is not None:
            try:
                fs.unlink(r["aside"])
            except OSError:
                left.append(r["aside"])
    return left


def recover(fs: ForkRoot) -> list[str] | None:
    """Finish what killed syncs of this fork left (None when they left nothing): before a journal's commit record,
    undo every step; after it, drop the asides. Lines saying what was done; CannotCheck when an undo step fails
    (the journal then stays for another attempt). Journals that are not ours are left alone."""
    done: list[str] = []
    for name, header, records in _pending(fs):
        done += _recover_one(fs, name, header, records)
    return done or None


def _recover_one(fs: ForkRoot, name: str, header: dict, records: list[dict]) -> list[str]:
    with deferred_signals():
        if any(r["op"] == "commit" for r in records):
            left = _drop_asides(fs, records)
            done = [
                f"  recover  an interrupted sync (pid {header['pid']}) had committed: its "
                f"{sum(r['op'] == 'aside' for r in records)} set-aside entries are dropped"
            ]
            done += [f"  note     could not remove {a}; delete it by hand" for a in left]
        else:
            failed = undo(fs, records, header["pid"])
            if failed:
                raise CannotCheck(
                    f"restoring the fork from {name} failed at: "
                    + "; ".join(failed)
                    + "; the journal is kept, run --sync again once the cause is fixed"
                )
            done = [
                f"  recover  an interrupted sync (pid {header['pid']}): {len(records)} logged step(s) undone; "
                f"the fork is as it was before it"
            ]
        fs.unlink(name)
    return done


# ---------------------------------------------------------------- one sync at a time


@contextlib.contextmanager
def fork_lock(fs: ForkRoot, exclusive: bool):
    """Hold an advisory lock on the fork root for a whole run: exclusive for a --sync (its recovery, plan and
    transaction), shared for a check or a dry run, so no run ever reads or replays a live sync's journal as an
    interrupted one. Never waits: a held lock is CannotCheck. The kernel drops the lock of a killed process, so
    a stale journal never looks live. Where flock does not exist (Windows) runs are not serialized."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    # the directory this run reads (a descriptor of its own on it: the lock outlives a reopened ForkRoot)
    fd = (
        os.dup(fs._root.fd)
        if fs._root.fd is not None
        else os.open(fs.path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
    )
    try:
        try:
            fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
        except BlockingIOError:
            pids = [h["pid"] for h, _ in filter(None, (read_journal(fs, n) for n in journals(fs)))]
            who = f" (pid {', '.join(map(str, pids))})" if pids else ""
            raise CannotCheck(
                f"another check_vendor run is syncing or checking this fork{who}; --sync again when it has finished"
                if exclusive
                else f"a --sync of this fork is running{who}; check again when it has finished"
            ) from None
        yield
    finally:
        os.close(fd)  # closing the only descriptor of this open file releases the lock


# ---------------------------------------------------------------- signals


class _Guard:
    def __init__(self) -> None:
        self.deferred: int | None = None
        self.raising = True

    def handler(self, signum, frame) -> None:
        if self.raising:
            self.raising = False  # a second signal during the undo waits for it
            raise Interrupted(signum)
        self.deferred = self.deferred or signum


@contextlib.contextmanager
def _signals(raising: bool):
    """SIGINT, SIGTERM and SIGHUP raise Interrupted once (raising) or are only remembered, until the block ends;
    the previous handlers come back after it."""
    g = _Guard()
    g.raising = raising
    if threading.current_thread() is not threading.main_thread():  # signal handlers belong to the main thread
        yield g
        return
    before = {s: signal.getsignal(s) for s in SIGNALS}
    for s in SIGNALS:
        signal.signal(s, g.handler)
    try:
        yield g
    finally:
        for s, h in before.items():
            signal.signal(s, h)


def deferred_signals():
    return _signals(raising=False)


# ---------------------------------------------------------------- the transaction


class Transaction:
    """Journaled steps: each replaced or deleted entry is renamed aside in its own directory (and checked against
    the plan), new files and directories are logged before they are made; commit() drops the asides."""

    def __init__(self, fs: ForkRoot, journal: Journal):
        self.fs, self.journal = fs, journal

    def _dirs(self, rel_dir: str) -> None:
        parts = rel_dir.split("/") if rel_dir else []
        for i in range(len(parts)):
            d = "/".join(parts[: i + 1])
            if self.fs.lstat(d) is None:
                self.journal.record(op="mkdir", path=d)
                self.fs.make_dirs(d)

    def _aside(self, rel: str, expect: str | None) -> str | None:
        if self.fs.lstat(rel) is None:
            if expect not in (None, ABSENT):
                raise Changed(f"{rel} disappeared during the sync")
            return None
        parent = rel.rpartition("/")[0]
        aside = (f"{parent}/" if parent else "") + f".sm120-undo-{os.urandom(6).hex()}"
        self.journal.record(op="aside", path=rel, aside=aside)
        self.fs.rename(rel, aside)
        if expect is not None and state(self.fs, aside) != expect:
            raise Changed(f"{rel} changed during the sync")
        return aside

    def _put(self, rel: str, data, mode: str) -> None:
        """A new entry at `rel` (nothing is there): a link, or a file of `data` (bytes or a stream)."""
        if mode == "120000":
            target = os.fsdecode(data)
            self.journal.record(op="symlink", path=rel, target=target)
            self.fs.symlink(target, rel)
            return
        sha = hashlib.sha256(data).hexdigest()
        self.journal.record(op="write", path=rel, sha256=sha)
        self.fs.write_atomic(rel, data, 0o755 if mode == "100755" else 0o644)

    def write(self, rel: str, data: bytes, mode: str, expect: str | None, backup_to: str | None) -> None:
        self._dirs(rel.rpartition("/")[0])
        aside = self._aside(rel, expect)
        if backup_to and aside is not None:
            self._dirs(backup_to.rpartition("/")[0])
            st = self.fs.lstat(aside)
            if st is None:  # set aside a moment ago
                raise Changed(f"{rel} changed during the sync")
            if stat.S_ISLNK(st.st_mode):
                self._put(backup_to, os.fsencode(self.fs.readlink(aside)), "120000")
            else:
                with self.fs.open_read(aside) as fh:
                    old = fh.read()
                self._put(backup_to, old, "100755" if st.st_mode & stat.S_IXUSR else "100644")
        self._put(rel, data, mode)

    def delete(self, rel: str, expect: str | None) -> None:
        self._aside(rel, expect)

    def chmod(self, rel: str, mode: str, expect: str | None) -> None:
        if expect is not None and state(self.fs, rel) != expect:
            raise Changed(f"{rel} changed during the sync")
        st = self.fs.lstat(rel)
        if st is None:
            raise Changed(f"{rel} disappeared during the sync")
        old = st.st_mode & 0o7777
        self.journal.record(op="chmod", path=rel, old=0o755 if old & stat.S_IXUSR else 0o644)
        self.fs.chmod(rel, 0o755 if mode == "100755" else 0o644)

    def commit(self) -> list[str]:
        """Log the commit, drop the asides; returns the ones that could not be removed (harmless, reported)."""
        self.journal.record(op="commit")
        return _drop_asides(self.fs, self.journal.records)


def run(fs: ForkRoot, header: dict, steps: Callable[[Transaction], None]) -> list[str]:
    """Run `steps` as one transaction; asides left behind (could not be removed) are returned. On any failure or
    a signal everything is undone and CannotCheck says what happened."""
    journal = Journal(fs, header)
    tx = Transaction(fs, journal)
    with _signals(raising=True) as guard:
        try:
            steps(tx)
            guard.raising = False  # past this point the sync completes: a signal now waits for the end
            left = tx.commit()
        except (OSError, UnsafePath, Changed, Interrupted) as e:
            guard.raising = False
            failed = undo(fs, journal.records, os.getpid())
            why = getattr(e, "strerror", None) or str(e) or type(e).__name__
            if failed:
                journal.fh.close()
                raise CannotCheck(
                    f"{why}; undoing it failed too, so the fork is between states ({'; '.join(failed)}"
                    f"); {journal.name} is kept: fix the cause and run --sync again to restore it"
                ) from None
            journal.remove()
            raise _Failed(why, e) from None
        except BaseException:  # anything else (an internal error, memory): undone too, then re-raised
            guard.raising = False
            if not undo(fs, journal.records, os.getpid()):
                journal.remove()
            raise
        journal.remove()  # a signal that arrived during the commit waited: the sync is complete
    return left


class _Failed(CannotCheck):
    """A failed, fully undone transaction (its cause is `cause`)."""

    def __init__(self, why: str, cause: BaseException):
        self.cause = cause
        super().__init__(why)
