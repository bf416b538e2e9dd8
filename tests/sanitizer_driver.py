"""What every compute-sanitizer driver (tests/sanitize_<family>.py) shares: the import paths of a plain checkout
and the emulation switch off SM120 (prepare), and running labelled cases to an exit status (run_cases).
The drivers are scripts, so this directory is already sys.path[0] when they import this module."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable

HERE = os.path.dirname(os.path.abspath(__file__))


def prepare(capability: tuple[int, int] | None = None) -> None:
    """host/ (the package) and tests/ (the GPU tests' helpers) on sys.path, tests first; DG_SM120_EMULATE=1 unless
    the GPU is SM120 (12.x), so the sm_90a qualification build runs there."""
    for path in (os.path.join(HERE, "..", "host"), HERE):
        if path not in sys.path:
            sys.path.insert(0, path)
    if capability is None:
        import torch

        capability = torch.cuda.get_device_capability()
    if capability[0] != 12:
        os.environ["DG_SM120_EMULATE"] = "1"


def selected(
    cases: Iterable[tuple[str, Callable[[], object]]], patterns: list[str]
) -> list[tuple[str, Callable[[], object]]]:
    """The cases whose label contains one of patterns (all of them when there are none), so one long sanitizer run
    can be split across calls: `python tests/sanitize_x.py overlap "gdr "`. A pattern matching nothing is an error,
    not an empty (passing) run."""
    cases = list(cases)
    if not patterns:
        return cases
    unmatched = [p for p in patterns if not any(p in label for label, _ in cases)]
    if unmatched:
        raise SystemExit(f"no sanitize case label contains {unmatched}; labels: {[label for label, _ in cases]}")
    return [c for c in cases if any(p in c[0] for p in patterns)]


def run_cases(cases: Iterable[tuple[str, Callable[[], object]]], patterns: list[str] | None = None) -> int:
    """Run each (label, thunk) selected by patterns (default: the command line's arguments); an AssertionError is
    a numerical failure (the sanitizer reports memory errors and races itself). Prints 'sanitize case <label>: ok /
    FAIL ...' (tools/qualify_h200.sh counts them); returns the exit status."""
    failures = 0
    for label, fn in selected(cases, sys.argv[1:] if patterns is None else patterns):
        try:
            fn()
            print(f"sanitize case {label}: ok")
        except AssertionError as e:
            failures += 1
            print(f"sanitize case {label}: FAIL {e}")
    return 1 if failures else 0
