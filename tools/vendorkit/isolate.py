"""Run one piece of hostile-input work in a child process under resource limits, and get its answer back as data.

The drift watcher checks each downstream this way: whatever one downstream makes the reader do (exhaust memory,
spin, open files, crash the interpreter, hit a bug), it ends that child only. The parent sees an exit status or
a JSON answer and turns anything but an answer into `unknown` for that downstream; the run goes on.

Limits (POSIX, set in the child before it runs anything): address space (the budget's memory), CPU seconds, open
files, and the size of any file it writes (temporary downloads included); the parent adds a wall-clock timeout
and a cap on the answer's size. Elsewhere the child runs without rlimits, under the timeout and the cap alone.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

from .limits import ARCHIVE_MAX_BYTES

TOOLS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ANSWER_MAX_BYTES = 64 << 20


@dataclass(frozen=True)
class ChildLimits:
    memory: int = 3 << 30
    cpu_seconds: int = 900
    wall_seconds: float = 1800.0
    open_files: int = 256
    file_bytes: int = ARCHIVE_MAX_BYTES + (64 << 20)
    answer_bytes: int = ANSWER_MAX_BYTES


class ChildFailed(Exception):
    """The child ended without an answer; the message says how (a signal, a limit, a timeout, bad output)."""


def _set_limits(lim: ChildLimits):
    def apply() -> None:  # runs in the child between fork and exec
        import resource

        for what, value in (
            (resource.RLIMIT_AS, lim.memory),
            (resource.RLIMIT_CPU, lim.cpu_seconds),
            (resource.RLIMIT_NOFILE, lim.open_files),
            (resource.RLIMIT_FSIZE, lim.file_bytes),
        ):
            soft, hard = resource.getrlimit(what)
            want = value if hard == resource.RLIM_INFINITY else min(value, hard)
            try:
                resource.setrlimit(what, (want, hard))
            except (ValueError, OSError):
                pass
        os.setpgrp() if hasattr(os, "setpgrp") else None

    return apply


def _describe_end(code: int, lim: ChildLimits) -> str:
    if code < 0:
        sig = -code
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
        hint = {
            signal.SIGKILL: "killed (the memory limit, or the timeout)",
            signal.SIGXCPU: f"over its CPU limit ({lim.cpu_seconds} s)",
            getattr(signal, "SIGXFSZ", -1): f"over its file size limit ({lim.file_bytes:,} bytes)",
            signal.SIGSEGV: "crashed (segmentation fault)",
        }.get(sig, "ended by a signal")
        return f"{hint}: {name}"
    return f"exited with status {code} and no answer"


def run(function: str, payload: dict, lim: ChildLimits | None = None, path: tuple[str, ...] = ()) -> dict:
    """`function(payload) -> dict` (a dotted name: `vendorkit.watch.child_check`) in a child process; its dict
    back. `path`: directories the child looks for the function's module in, before tools/. ChildFailed when the
    child ends without an answer. `lim`: default ChildLimits()."""
    lim = lim if lim is not None else ChildLimits()
    module, _, fn = function.rpartition(".")
    boot = (
        "import importlib, json, sys\n"
        f"sys.path[:0] = {[*path, TOOLS]!r}\n"
        f"f = getattr(importlib.import_module({module!r}), {fn!r})\n"
        "from vendorkit.isolate import answer\n"
        "answer(f, json.loads(sys.stdin.buffer.read()))\n"
    )
    kwargs = {}
    if os.name == "posix":
        kwargs["preexec_fn"] = _set_limits(lim)
    proc = subprocess.Popen(
        [sys.executable, "-c", boot], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, **kwargs
    )
    assert proc.stdin is not None and proc.stdout is not None  # both are PIPEs: Popen made them
    try:
        proc.stdin.write(json.dumps(payload).encode())
        proc.stdin.close()
    except OSError:
        pass
    out = bytearray()
    deadline = time.monotonic() + lim.wall_seconds
    why = None
    if os.name == "posix":
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                why = f"still running after {lim.wall_seconds:g} s (stopped)"
                break
            if not sel.select(timeout=min(left, 1.0)):
                continue
            chunk = os.read(proc.stdout.fileno(), 1 << 16)
            if not chunk:
                break
            out += chunk
            if len(out) > lim.answer_bytes:
                why = f"answered more than {lim.answer_bytes:,} bytes (stopped)"
                break
        sel.close()
    else:  # pragma: no cover - Windows: no select on pipes
        try:
            data, _ = proc.communicate(timeout=lim.wall_seconds)
            out += data[: lim.answer_bytes + 1]
        except subprocess.TimeoutExpired:
            why = f"still running after {lim.wall_seconds:g} s (stopped)"
    if why is not None:
        _kill(proc)
        raise ChildFailed(why)
    proc.stdout.close()
    code = proc.wait()
    if code != 0:
        raise ChildFailed(_describe_end(code, lim))
    try:
        doc = json.loads(bytes(out))
    except (ValueError, RecursionError):
        raise ChildFailed("answered something that is not JSON") from None
    if not isinstance(doc, dict) or "answer" not in doc:
        raise ChildFailed("answered without an answer")
    return doc["answer"]


def _kill(proc: subprocess.Popen) -> None:
    try:
        if os.name == "posix":
            os.killpg(proc.pid, signal.SIGKILL)
        else:  # pragma: no cover
            proc.kill()
    except (ProcessLookupError, PermissionError, OSError):
        proc.kill()
    proc.wait()


def answer(fn, payload: dict) -> None:
    """The child's side: run `fn(payload)` and print {"answer": its dict}, or {"answer": {"failed": why}} when it
    raised."""
    try:
        result = fn(payload)
    except BaseException as e:
        sys.stdout.write(json.dumps({"answer": {"failed": f"{type(e).__name__}: {e}"}}))
        sys.stdout.flush()
        raise SystemExit(0) from None
    sys.stdout.write(json.dumps({"answer": result}))
    sys.stdout.flush()
