#!/usr/bin/env python3
"""`check_vendor.py provenance` speed and transfer (issue 26's targets).

    python benchmarks/bench_provenance.py [--runs 5]                      # local: three archives, 30 files each
    python benchmarks/bench_provenance.py --remote pypi:vllm==0.33.0      # bytes a remote wheel costs (network)

Local: builds a throw-away canonical checkout with one upstream lineage (two releases of 30 headers) and three
wheels / sdists vendoring a mix of them, then times complete CLI runs (interpreter start-up included) over all
three sources; target under 1 s. Remote: reads the release's wheels through the package index with range requests
(the --range-reads path, unverified) and prints
its size and the bytes actually transferred; target under 10 MB for vLLM's 336 MB wheel.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from cli_timing import median_runtime

CLI = ROOT / "tools" / "check_vendor.py"
VROOT = "deep_gemm/include/deep_gemm"


def _headers(version: int) -> dict[str, bytes]:
    dirs = ["common", "impls", "mma", "scheduler", "layout"]
    return {
        f"{dirs[i % 5]}/sm120_file_{i:02d}.cuh": (
            f"#pragma once\n// file {i} v{version if i % 3 == 0 else 1}\n" + "// body\n" * 400
        ).encode()
        for i in range(30)
    }


def _setup(tmp: Path) -> list[str]:
    canon = tmp / "canon"  # the manifests are all provenance reads
    shutil.copytree(ROOT / "vendor_manifests", canon / "vendor_manifests")
    for v in (1, 2):
        f = tmp / f"v{v}.json"
        f.write_text(
            json.dumps(
                {
                    "upstream": "bench/upstream",
                    "tag": f"v0.{v}.0",
                    "files": {f"{VROOT}/{p}": hashlib.sha256(b).hexdigest() for p, b in _headers(v).items()},
                }
            )
        )
        subprocess.run(
            [sys.executable, str(CLI), "import-manifest", str(f), "--upstream", "bench", "--repo", str(canon)],
            check=True,
            capture_output=True,
        )
    sources = []
    for i, files in enumerate([_headers(1), _headers(2), {**_headers(2), "impls/sm120_file_03.cuh": b"// local\n"}]):
        if i == 1:
            path = tmp / f"pkg{i}-1.0.tar.gz"
            with tarfile.open(path, "w:gz") as t:
                for p, b in files.items():
                    info = tarfile.TarInfo(f"pkg{i}-1.0/{VROOT}/{p}")
                    info.size = len(b)
                    t.addfile(info, io.BytesIO(b))
        else:
            path = tmp / f"pkg{i}-1.0-py3-none-any.whl"
            with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
                for p, b in files.items():
                    z.writestr(f"{VROOT}/{p}", b)
                z.writestr("pkg/_C.so", os.urandom(4 << 20))
        sources.append(str(path))
    return [str(canon), *sources]


def local(runs: int) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        canon, *sources = _setup(Path(tmp))
        cmd = [sys.executable, str(CLI), "provenance", *sources, "--repo", canon]
        median = median_runtime(cmd, runs, ok=(0, 1))
        if median is None:
            return 1
        print(
            f"provenance over 3 local archives (30 vendored files each, 2 lineages): median "
            f"{median * 1000:.0f} ms over {runs} runs (target < 1000 ms)"
        )
    return 0


def remote(spec: str) -> int:
    sys.path.insert(0, str(ROOT / "tools"))
    from vendorkit import provenance, pypi

    files: list[pypi.RangeFile] = []
    real = pypi.RangeFile.__init__

    def spy(self, *a, **k):
        real(self, *a, **k)
        files.append(self)

    pypi.RangeFile.__init__ = spy
    t0 = time.perf_counter()
    result = provenance.run(str(ROOT), [spec], ranges=True)  # the labelled, unverified fast path
    took = time.perf_counter() - t0
    if not files:
        print(f"{spec}: the index does not serve byte ranges; the whole files were downloaded")
        return 0
    for f, src in zip(files, result.sources):
        print(
            f"{src.label}: {f.size / 1e6:.1f} MB wheel, {f.transferred / 1e6:.2f} MB transferred by range "
            f"requests, {len(src.files)} vendored files (target < 10 MB)"
        )
    print(f"{spec}: {len(result.sources)} file(s), {took:.1f} s")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--remote", metavar="pypi:NAME==VERSION", help="measure the transfer of a remote wheel")
    a = ap.parse_args()
    return remote(a.remote) if a.remote else local(a.runs)


if __name__ == "__main__":
    sys.exit(main())
