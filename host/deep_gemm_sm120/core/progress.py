"""Progress for long compile runs (precompile, the compile gate): one self-overwriting line on a terminal,
silence otherwise (logs and CI stay clean). Stdlib only."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """`enabled`: True / False force it; None: a line per item on a terminal, and with `milestones` also off a
    terminal, but only every tenth of the work (or minute), so that a log shows a long run is alive."""

    def __init__(
        self,
        total: int,
        label: str,
        enabled: bool | None = None,
        stream: TextIO | None = None,
        milestones: bool = False,
    ):
        self.stream = stream or sys.stderr
        self._tty = self.stream.isatty()
        self.enabled = (self._tty or milestones) if enabled is None else enabled
        self._sparse = enabled is None and not self._tty
        self.total, self.label, self.done = total, label, 0
        self.t0 = self._last = time.perf_counter()

    def step(self, item: str) -> None:
        self.done += 1
        if not self.enabled:
            return
        now = time.perf_counter()
        tenth = max(1, self.total // 10)
        if self._sparse and self.done % tenth and self.done != self.total and now - self._last < 60:
            return
        self._last = now
        elapsed = now - self.t0
        eta = elapsed / self.done * (self.total - self.done)
        line = f"{self.label}: {self.done}/{self.total} ({elapsed:.0f} s, ~{eta:.0f} s left) {item}"
        if self._tty:  # rewrite one line; clip so it never wraps
            self.stream.write("\r\033[K" + line[:160])
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self._tty:
            self.stream.write("\n")
            self.stream.flush()
