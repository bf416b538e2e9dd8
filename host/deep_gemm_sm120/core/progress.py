"""Progress for long compile runs (precompile, the compile gate): one self-overwriting line on a terminal,
silence otherwise (logs and CI stay clean). Stdlib only."""
from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(self, total: int, label: str, enabled: bool | None = None, stream: TextIO | None = None):
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.total, self.label, self.done = total, label, 0
        self.t0 = time.perf_counter()
        self._tty = self.stream.isatty()

    def step(self, item: str) -> None:
        self.done += 1
        if not self.enabled:
            return
        elapsed = time.perf_counter() - self.t0
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
