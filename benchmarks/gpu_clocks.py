#!/usr/bin/env python3
"""SM clock, board power and clock-event reasons of GPU 0 while a workload runs sustained (issue 13).

The same-run `mma.sync` ceiling (mma_ceiling.py) keeps its operands in registers: it draws far less power than a
GEMM that also streams operands through L2 and shared memory, so it runs at a higher clock. Where a GEMM meets the
board's power limit, its clock, not its instruction stream, caps its share of that ceiling. This module samples
`nvidia-smi` every 50 ms while a workload repeats for a few seconds, so a benchmark can report both.

    from gpu_clocks import sustained
    r = sustained(lambda: kernel(), seconds=2.0)   # {"calls_per_s", "clock_mhz", "power_w", "reasons", ...}
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import threading
import time
from collections.abc import Callable

import torch

QUERY = "clocks.sm,power.draw,power.limit,clocks_event_reasons.active"
# clocks_event_reasons bits (nvidia-smi --help-query-gpu): the ones a sustained kernel can raise
REASONS = {
    0x1: "idle",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "hw_power_brake",
}


def available() -> bool:
    return shutil.which("nvidia-smi") is not None


def _decode(mask: int) -> list[str]:
    return [name for bit, name in REASONS.items() if mask & bit] or ["none"]


def sustained(
    fn: Callable[[], None], seconds: float = 2.0, device: int = 0, sync: Callable[[], None] | None = None
) -> dict:
    """Repeat `fn` (batches of 10 calls, then a synchronize) for `seconds`; median clock and power over the
    samples taken meanwhile, the clock-event reasons seen, and the calls per second achieved."""
    if not available():
        raise RuntimeError("nvidia-smi is not on PATH: no clock or power readings")
    sync = sync or torch.cuda.synchronize
    proc = subprocess.Popen(
        ["nvidia-smi", "-i", str(device), f"--query-gpu={QUERY}", "--format=csv,noheader,nounits", "-lms", "50"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    rows: list[str] = []
    recording = threading.Event()

    def reader() -> None:
        for line in proc.stdout:
            if recording.is_set():
                rows.append(line.strip())

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    fn()
    sync()
    time.sleep(0.2)  # let the sampler start before the window opens
    calls, t0 = 0, time.perf_counter()
    recording.set()
    while time.perf_counter() - t0 < seconds:
        for _ in range(10):
            fn()
        sync()
        calls += 10
    elapsed = time.perf_counter() - t0
    recording.clear()
    proc.terminate()
    proc.wait()
    clocks, power, mask, limit = [], [], 0, 0.0
    for row in rows:
        fields = [f.strip() for f in row.split(",")]
        try:
            clocks.append(float(fields[0]))
            power.append(float(fields[1]))
            limit = float(fields[2])
            mask |= int(fields[3], 16)
        except (ValueError, IndexError):
            continue  # "[N/A]" fields on some boards
    if not clocks:
        raise RuntimeError("nvidia-smi returned no samples during the window")
    return {
        "calls_per_s": calls / elapsed,
        "clock_mhz": statistics.median(clocks),
        "power_w": statistics.median(power),
        "power_limit_w": limit,
        "reasons": _decode(mask),
        "samples": len(clocks),
    }


if __name__ == "__main__":
    x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    r = sustained(lambda: x @ x)
    print(
        f"torch bf16 8192^3: {r['calls_per_s'] * 2 * 8192**3 / 1e12:.0f} TFLOP/s at {r['clock_mhz']:.0f} MHz, "
        f"{r['power_w']:.0f} / {r['power_limit_w']:.0f} W, reasons {r['reasons']}"
    )
