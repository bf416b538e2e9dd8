"""The released serving stacks' DeepGEMM-facing sources, read from their wheels on the package index pip uses
(range requests: a few MB of a several-hundred-MB wheel), cached by name and version. Nothing of theirs is kept in
this repository: the test reads the files from the cache it fills.

Cache: $DG_SM120_ECOSYSTEM_CACHE, else ~/.cache/deep_gemm_sm120/ecosystem; NAME-VERSION/ holds the members and
a MEMBERS.json written last (a partial fetch is fetched again)."""

from __future__ import annotations

import functools
import json
import os
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PINS = {"vllm": "0.33.0", "sglang": "0.5.23"}
MEMBERS = {
    "vllm": (
        "vllm/utils/deep_gemm.py",
        "vllm/third_party/deep_gemm/__init__.py",
        "vllm/third_party/deep_gemm/_C.py",
        "vllm/third_party/deep_gemm/utils/math.py",
        "vllm/third_party/deep_gemm/utils/nvfp4.py",
    ),
    "sglang": (
        "sglang/srt/layers/deep_gemm_wrapper/__init__.py",
        "sglang/srt/layers/deep_gemm_wrapper/configurer.py",
        "sglang/srt/layers/deep_gemm_wrapper/compile_utils.py",
        "sglang/srt/layers/deep_gemm_wrapper/entrypoint.py",
    ),
}


def cache_root() -> Path:
    return Path(os.environ.get("DG_SM120_ECOSYSTEM_CACHE") or Path.home() / ".cache" / "deep_gemm_sm120" / "ecosystem")


@functools.cache  # one attempt per process: an unreachable index is asked once
def fetch(name: str) -> tuple[Path | None, str]:
    """(folder with the pinned release's members, "") or (None, why not): the index unreachable, the release
    missing, a member missing. Members are checked against their zip CRC-32 as they are read."""
    version = PINS[name]
    where = cache_root() / f"{name}-{version}"
    done = where / "MEMBERS.json"
    if done.is_file() and all((where / m).is_file() for m in MEMBERS[name]):
        return where, ""
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        from vendorkit import pypi
        from vendorkit.errors import CannotCheck, UsageError
    finally:
        sys.path.pop(0)
    try:
        import requests
    except ImportError:
        return None, "requests is not installed"
    index = pypi.index_url()
    try:
        _, dists = pypi.release(name, version, index)
        wheels = sorted(
            (d for d in dists if d.filename.endswith(".whl")),  # the pure one, else the x86-64 one
            key=lambda d: (not d.filename.endswith("-none-any.whl"), "x86_64" not in d.filename),
        )
        if not wheels:
            return None, f"{name}=={version} has no wheel"
        dist = wheels[0]
        # reading a few members of a 300 MB wheel: range reads (unverified), enough for API fixtures
        with zipfile.ZipFile(pypi.open_dist(dist, f"{name}=={version}", ranges=True)) as z:
            listing = set(z.namelist())
            missing = [m for m in MEMBERS[name] if m not in listing]
            if missing:
                return None, f"{dist.filename} has no {missing}"
            where.mkdir(parents=True, exist_ok=True)
            for m in MEMBERS[name]:
                target = where / m
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(z.read(m))
    except (CannotCheck, UsageError, OSError, zipfile.BadZipFile, requests.RequestException) as e:
        return None, f"{name}=={version} from {index}: {type(e).__name__}: {e}"
    done.write_text(json.dumps({"wheel": dist.filename, "index": index, "members": list(MEMBERS[name])}, indent=1))
    return where, ""
