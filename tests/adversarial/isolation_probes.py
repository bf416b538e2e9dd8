"""Functions that misbehave, run by vendorkit.isolate in a child process (tests/adversarial/test_isolation.py)."""

from __future__ import annotations

import ctypes
import sys
import time


def fine(payload: dict) -> dict:
    return {"echo": payload}


def hog(payload: dict) -> dict:
    """Address space without touching it (no CPU time spent): the limit, not the clock, must stop it."""
    import mmap

    blocks = []
    while True:
        blocks.append(mmap.mmap(-1, 256 << 20))


def spin(payload: dict) -> dict:
    x = 0
    while True:
        x += 1


def crash(payload: dict) -> dict:
    ctypes.string_at(0)
    return {}


def chatter(payload: dict) -> dict:
    sys.stdout.write("x" * (80 << 20))
    sys.stdout.flush()
    return {}


def sleep(payload: dict) -> dict:
    time.sleep(600)
    return {}


def files(payload: dict) -> dict:
    held = [open(__file__) for _ in range(100000)]
    return {"held": len(held)}


def disk(payload: dict) -> dict:
    import tempfile

    with tempfile.TemporaryFile() as fh:
        for _ in range(1 << 16):
            fh.write(b"\0" * (1 << 20))
    return {}


def fails(payload: dict) -> dict:
    raise RecursionError("nested too deeply")
