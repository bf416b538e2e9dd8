"""The timing harness every GPU benchmark shares (imports torch and the package, never tests/):

- `start(description)`: the common command line (--quick, --json), the package on sys.path, DG_SM120_EMULATE=1
  off SM120 (so numbers there describe that GPU through the emulation, never SM120 silicon), a device line.
- `bench(fn, iters)`: median seconds per call of CUDA-graph replays, so host launch cost stays out of kernel times.
- `Rotation`: enough copies of a call's inputs that consecutive calls do not find them in L2.
- `finish(run, payload)`: the JSON file, with the device, whether MMAs were emulated, commit and command.

A family's benchmark is `benchmarks/bench_<name>.py`, named by its declaration's `benchmarks` entry
(`python tools/family_plan.py benchmarks` lists them; tools/qualify_h200.sh runs them)."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
T = TypeVar("T")


@dataclass
class Run:
    args: argparse.Namespace
    device: str
    capability: tuple[int, int]
    emulated: bool
    argv: list[str] = field(default_factory=lambda: list(sys.argv))


def start(
    description: str | None = None,
    extra: Callable[[argparse.ArgumentParser], None] | None = None,
    argv: Sequence[str] | None = None,
    need_gpu: Callable[[argparse.Namespace], bool] = lambda args: True,
) -> Run:
    """Parse the common flags (plus `extra`'s), put host/ first on sys.path and select the emulation path off
    SM120. Must run before deep_gemm_sm120 is imported: the emulation switch is read at import. Without a GPU,
    exits 2 unless `need_gpu(args)` says these flags run on the CPU."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--quick", action="store_true", help="fewer shapes and iterations")
    ap.add_argument("--json", metavar="PATH", help="write the results (and the run's identity) here")
    if extra:
        extra(ap)
    args = ap.parse_args(argv)
    # host/: the package, with the workloads the tests, benchmarks and self-test share (selftest/workloads/)
    path = os.path.join(ROOT, "host")
    if path not in sys.path:
        sys.path.insert(0, path)
    if need_gpu(args) and not torch.cuda.is_available():
        ap.exit(2, f"{ap.prog}: needs a CUDA GPU (none found)\n")
    if not torch.cuda.is_available():
        return Run(args, "none", (0, 0), False)
    cap = torch.cuda.get_device_capability()
    emulated = cap[0] != 12
    if emulated:
        os.environ["DG_SM120_EMULATE"] = "1"
    run = Run(args, torch.cuda.get_device_name(), cap, emulated)
    print(
        f"device: {run.device} (capability {cap[0]}.{cap[1]}, "
        f"{torch.cuda.get_device_properties(0).multi_processor_count} SMs)"
        + ("; SM120 MMAs emulated: times describe this GPU, not SM120" if emulated else ""),
        flush=True,
    )
    return run


def bench(fn: Callable[[], Any], iters: int, warmup: int = 3, replays: int = 5) -> float:
    """Median seconds per call: `iters` calls captured into one CUDA graph, the graph replayed `replays` times."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(iters):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    samples = []
    for _ in range(replays):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        samples.append(begin.elapsed_time(end) / iters)
    del graph
    return statistics.median(samples) / 1e3


def bench_eager(fn: Callable[[], Any], iters: int, warmup: int = 2) -> float:
    """Median seconds per call, each call between two CUDA events, no graph: for work a graph cannot capture
    (host reads of device values, host-built index tensors)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(iters):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        samples.append(begin.elapsed_time(end))
    return statistics.median(samples) / 1e3


def copies_for(bytes_per_call: int, l2_bytes: int | None = None, limit: int = 16) -> int:
    """How many input sets make `limit`-bounded rotation cover three times the L2 cache."""
    from deep_gemm_sm120.core.arith import ceil_div  # after start(): it imports the package

    if l2_bytes is None:
        l2_bytes = torch.cuda.get_device_properties(0).L2_cache_size
    return max(1, min(limit, ceil_div(3 * l2_bytes, max(1, bytes_per_call))))


class Rotation(Generic[T]):
    """Input sets handed out in turn: `make(i)` builds set i; `next()` is captured into graphs as plain Python,
    so each captured call reads a different set."""

    def __init__(
        self, make: Callable[[int], T], bytes_per_call: int, l2_bytes: int | None = None, limit: int = 16
    ) -> None:
        self.sets = [make(i) for i in range(copies_for(bytes_per_call, l2_bytes, limit))]
        self._i = -1

    def __len__(self) -> int:
        return len(self.sets)

    def next(self) -> T:
        self._i = (self._i + 1) % len(self.sets)
        return self.sets[self._i]


def _commit() -> str | None:
    try:
        out = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0 or not out.stdout.strip():
        return None
    dirty = subprocess.run(
        ["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True, timeout=10
    ).stdout.strip()
    return out.stdout.strip() + ("-dirty" if dirty else "")


def identity(run: Run) -> dict:
    return {
        "device": run.device,
        "capability": list(run.capability),
        "emulated": run.emulated,
        "commit": _commit(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(["python", *run.argv]),
    }


def finish(run: Run, payload: dict) -> int:
    """Write `payload` plus the run's identity to --json (when given); the exit status of a benchmark."""
    if run.args.json:  # whole or not at all: a reader (the qualification kit) never sees half a file
        tmp = f"{run.args.json}.tmp"
        with open(tmp, "w") as fh:
            json.dump({**identity(run), **payload}, fh, indent=1)
        os.replace(tmp, run.args.json)
    return 0
