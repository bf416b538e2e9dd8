#!/usr/bin/env python3
"""Wall time of `check_vendor.py --fork` on a generated 1,000-file fork, interpreter start-up included.

    python benchmarks/bench_check_vendor.py [--files 1000] [--runs 7]

Builds a throw-away canonical repo (git) with two releases of N headers and a DeepGEMM-like fork
holding the latest one, then times complete CLI runs (subprocess) and prints the median: first without a
stamp, then after --sync wrote one (every file then hashed against the manifest and the stamp, 50 foreign).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from cli_timing import median_runtime

CLI = ROOT / "tools" / "check_vendor.py"


def _git(repo: Path, *args: str) -> None:
    env = {
        **os.environ,
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "b",
        "GIT_AUTHOR_EMAIL": "b@example.invalid",
        "GIT_COMMITTER_NAME": "b",
        "GIT_COMMITTER_EMAIL": "b@example.invalid",
    }
    subprocess.run(["git", "-C", str(repo), *args], check=True, env=env, capture_output=True)


def _files(n: int, version: int) -> dict[str, bytes]:
    dirs = ["common", "mma", "scheduler", "impls", "layout"]
    out = {}
    for i in range(n):
        body = "".join(f"// line {j} of header {i} v{version if i % 10 == 0 else 1}\n" for j in range(60))
        out[f"{dirs[i % len(dirs)]}/sm120_gen_{i:04d}.cuh"] = ("#pragma once\n" + body).encode()
    return out


def _write(base: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        p = base / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=7)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        canon, fork = Path(tmp, "canon"), Path(tmp, "fork")
        canon.mkdir()
        _git(canon, "init", "-q")
        for v in (1, 2):
            _write(canon / "device_layer", _files(a.files, v))
            _git(canon, "add", "-A")
            _git(canon, "commit", "-q", "-m", f"v{v}")
            subprocess.run(
                [sys.executable, str(CLI), "release", f"v0.{v}.0", "--repo", str(canon)],
                check=True,
                capture_output=True,
            )
            _git(canon, "add", "-A")
            _git(canon, "commit", "-q", "-m", f"release v{v}")
        _write(fork / "deep_gemm/include/deep_gemm", _files(a.files, 2))
        _write(fork / "deep_gemm/include/deep_gemm", {f"own/file_{i}.cuh": b"// fork's own\n" for i in range(50)})
        cmd = [sys.executable, str(CLI), "--repo", str(canon), "--fork", str(fork)]
        for case in ("no stamp", "stamped (after --sync)"):
            if case.startswith("stamped"):
                subprocess.run(cmd + ["--sync"], check=True, capture_output=True)
            median = median_runtime(cmd, a.runs)
            if median is None:
                return 1
            print(
                f"check_vendor --fork, {a.files} released files (2 manifests), 50 fork-own files, {case}: "
                f"median {median * 1000:.0f} ms over {a.runs} runs (target <= 500 ms)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
