"""One budget per run: every reader of a fork, archive, git repository or index draws from it.

A fork is hostile input, so no reader trusts a size, a count or a pace the input announces. Instead of a cap per
reader and per case, a run carries one Budget: bytes read and decompressed, entries (archive members, tree
entries, directory entries), the length and depth of one path, wall time, and memory. A reader that would go past
a limit raises BudgetExceeded, a CannotCheck (exit 2) that names the budget and how to raise it; a run can never
do more than its budget, whatever it is fed.

Memory is held to the budget two ways: readers stream and account for the buffers they keep (`hold`), and the
command-line entry points cap the process's address space at the memory budget (`cap_address_space`), so an
allocation the accounting did not foresee fails as MemoryError (exit 2), never as the machine's out-of-memory
killer.

The limits are set with `--budget KEY=VALUE` (sizes take K, M, G suffixes; seconds a plain number); the keys and
their defaults are in docs/vendoring.md ("Limits") and `describe_limits()`.
"""

from __future__ import annotations

import contextlib
import re
import time
from dataclasses import dataclass, field, fields

from .errors import CannotCheck, UsageError

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


@dataclass(frozen=True)
class Limits:
    bytes: int = 8 << 30  # bytes read from sources plus bytes decompressed, over the whole run
    entries: int = 300_000  # archive members, git tree entries, directory entries listed
    name: int = 4096  # characters in one fork-relative path
    depth: int = 128  # components in one fork-relative path
    seconds: float = 900.0  # wall time of the run
    request_seconds: float = 300.0  # one network request, its whole body included
    memory: int = 3 << 30  # address space of the process (entry points) and buffers held

    DESCRIBE = {
        "bytes": "bytes read and decompressed",
        "entries": "entries listed (archive members, git tree entries, directory entries)",
        "name": "characters in one path",
        "depth": "components in one path",
        "seconds": "seconds of wall time",
        "request_seconds": "seconds for one network request",
        "memory": "bytes of memory",
    }


def describe_limits() -> str:
    """One line per budget key, for --help and the docs."""
    d = Limits()
    return "; ".join(
        f"{f.name} ({Limits.DESCRIBE[f.name]}, default {_show(f.name, getattr(d, f.name))})" for f in fields(Limits)
    )


def _show(key: str, value) -> str:
    if key in ("seconds", "request_seconds"):
        return f"{value:g}"
    if key in ("bytes", "memory") and value % (1 << 20) == 0:
        return f"{value >> 30}G" if value % (1 << 30) == 0 else f"{value >> 20}M"
    return str(value)


def parse_limits(specs: list[str] | None, base: Limits | None = None) -> Limits:
    """Limits from `KEY=VALUE` strings (UsageError on an unknown key or a bad value)."""
    values = {f.name: getattr(base or Limits(), f.name) for f in fields(Limits)}
    for spec in specs or []:
        key, sep, raw = spec.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in values:
            raise UsageError(f"--budget {spec!r}: expected KEY=VALUE with KEY one of {', '.join(values)}")
        m = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)([KMGT]?)i?B?", raw.strip(), re.I)
        if not m:
            raise UsageError(f"--budget {spec!r}: {raw!r} is not a number (sizes take K, M, G suffixes)")
        number = float(m.group(1)) * _UNITS[m.group(2).upper()]
        if number <= 0:
            raise UsageError(f"--budget {spec!r}: must be positive")
        values[key] = number if key in ("seconds", "request_seconds") else int(number)
    return Limits(**values)


class BudgetExceeded(CannotCheck):
    """A reader would go past the run's budget (exit 2); `key` is the budget it hit."""

    def __init__(self, key: str, detail: str):
        self.key = key
        super().__init__(f"budget exhausted: {Limits.DESCRIBE[key]} ({detail}); a larger budget: --budget {key}=N")


@dataclass
class Budget:
    limits: Limits = field(default_factory=Limits)
    started: float = field(default_factory=time.monotonic)
    read: int = 0
    entries: int = 0
    held: int = 0

    # ------------------------------------------------------------ drawing
    def take(self, n: int, what: str = "") -> None:
        """Account for `n` bytes read or produced by decompression."""
        self.read += n
        if self.read > self.limits.bytes:
            raise BudgetExceeded("bytes", f"over {_show('bytes', self.limits.bytes)}" + (f" at {what}" if what else ""))
        self.check_time(what)

    def entry(self, what: str = "", n: int = 1) -> None:
        self.entries += n
        if self.entries > self.limits.entries:
            raise BudgetExceeded("entries", f"over {self.limits.entries:,}" + (f" at {what}" if what else ""))

    def path(self, path: str) -> None:
        """A path's length and depth are within the budget (called for every path a reader lists)."""
        if len(path) > self.limits.name:
            raise BudgetExceeded("name", f"a path of {len(path):,} characters, over {self.limits.name:,}")
        depth = path.count("/") + 1
        if depth > self.limits.depth:
            raise BudgetExceeded("depth", f"a path {depth:,} components deep, over {self.limits.depth:,}")

    def hold(self, n: int, what: str = "") -> None:
        """Account for `n` bytes kept in memory (release() when they are dropped)."""
        self.held += n
        if self.held > self.limits.memory:
            raise BudgetExceeded("memory", f"{self.held:,} bytes held" + (f" for {what}" if what else ""))

    def release(self, n: int) -> None:
        self.held = max(0, self.held - n)

    # ------------------------------------------------------------ time
    @property
    def deadline(self) -> float:
        return self.started + self.limits.seconds

    def check_time(self, what: str = "") -> None:
        if time.monotonic() > self.deadline:
            raise BudgetExceeded("seconds", f"over {self.limits.seconds:g} s" + (f" at {what}" if what else ""))

    def request_deadline(self) -> tuple[float, str]:
        """(monotonic deadline of one network request, the budget key that sets it)."""
        own = time.monotonic() + self.limits.request_seconds
        return (own, "request_seconds") if own < self.deadline else (self.deadline, "seconds")


_current: Budget | None = None


def current() -> Budget:
    """The run's budget (a default one when no run set it: library use)."""
    global _current
    if _current is None:
        _current = Budget()
    return _current


@contextlib.contextmanager
def use(b: Budget):
    """Make `b` the budget every reader draws from, for the duration of a run."""
    global _current
    before, _current = _current, b
    try:
        yield b
    finally:
        _current = before


def cap_address_space(limit: int) -> None:
    """Cap this process's address space at `limit` bytes (POSIX; a no-op elsewhere or when already lower)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    want = limit if hard == resource.RLIM_INFINITY else min(limit, hard)
    if soft == resource.RLIM_INFINITY or soft > want:
        try:
            resource.setrlimit(resource.RLIMIT_AS, (want, hard))
        except (ValueError, OSError):  # pragma: no cover - a sandbox that forbids it
            pass
