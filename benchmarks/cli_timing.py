"""Timing complete command-line runs, as a user runs them (interpreter start-up included, bytecode cached)."""

from __future__ import annotations

import os
import statistics
import subprocess
import time


def median_runtime(cmd: list[str], runs: int, ok=(0,)) -> float | None:
    """Median wall time of `runs` runs after one warm-up (page cache, bytecode); None (output printed) when a run
    exits with a code outside `ok`. Some images set PYTHONDONTWRITEBYTECODE=1, which would recompile every module on
    every run and time the compiler instead: it is unset here."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    times = []
    for _ in range(runs + 1):
        t0 = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, text=True, env=env)
        times.append(time.perf_counter() - t0)
        if p.returncode not in ok:
            print(p.stdout, p.stderr)
            return None
    return statistics.median(times[1:])
