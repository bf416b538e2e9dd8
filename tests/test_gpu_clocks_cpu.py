"""The benchmark's clock / power sampler (benchmarks/gpu_clocks.py) against a fake nvidia-smi: parsing, the
median, the clock-event reason bits, and the error when nothing was sampled. No GPU needed."""

from __future__ import annotations

import os
import stat
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))
import gpu_clocks


def _fake_smi(tmp_path, monkeypatch, lines: list[str]) -> None:
    script = tmp_path / "nvidia-smi"
    body = "\n".join(f"echo '{ln}'; sleep 0.02" for ln in lines)
    script.write_text(f"#!/bin/sh\nsleep 0.6\n{body}\nsleep 5\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")


def test_sustained_reports_median_clock_power_and_reasons(tmp_path, monkeypatch):
    _fake_smi(
        tmp_path,
        monkeypatch,
        [
            "1980, 480.5, 700.00, 0x0000000000000000",
            "1695, 691.0, 700.00, 0x0000000000000004",
            "1710, 689.0, 700.00, 0x0000000000000004",
            "[N/A], [N/A], 700.00, 0x0",
        ],
    )
    calls = []
    r = gpu_clocks.sustained(lambda: calls.append(1), seconds=1.0, sync=lambda: None)
    assert r["samples"] == 3  # the [N/A] row is skipped
    assert r["clock_mhz"] == 1710 and r["power_w"] == 689.0 and r["power_limit_w"] == 700.0
    assert r["reasons"] == ["sw_power_cap"]
    assert r["calls_per_s"] > 0 and len(calls) >= 11


def test_no_samples_is_an_error(tmp_path, monkeypatch):
    _fake_smi(tmp_path, monkeypatch, [])
    with pytest.raises(RuntimeError, match="no samples"):
        gpu_clocks.sustained(lambda: None, seconds=0.2, sync=lambda: None)


def test_reason_bits_decode():
    assert gpu_clocks._decode(0) == ["none"]
    assert gpu_clocks._decode(0x4 | 0x40) == ["sw_power_cap", "hw_thermal"]
