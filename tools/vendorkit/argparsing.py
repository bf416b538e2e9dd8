"""One exit-code contract for every tool here: a usage error exits 3 (argparse alone would exit 2, which the
drift tools document as "could not check")."""

from __future__ import annotations

import argparse

from .errors import UsageError


class UsageParser(argparse.ArgumentParser):
    def error(self, message: str):
        raise UsageError(f"{message} (see --help)")

    def exit(self, status: int = 0, message: str | None = None):
        if status:  # argparse's own failures (e.g. a bad --version action); --help exits 0 as usual
            raise UsageError((message or "").strip() or f"argument parsing failed ({status})")
        super().exit(status, message)
