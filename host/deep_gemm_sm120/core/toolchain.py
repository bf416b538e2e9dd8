"""Finding CUDA toolchains (nvcc, nvdisasm) and the nvcc command for one kernel translation unit.

One home for the JIT (which uses the first suitable nvcc) and the compile gate (which checks every toolchain
it finds). Looks, in order, at $DG_SM120_NVCC, $CUDA_HOME / $CUDA_PATH, PATH, /usr/local/cuda and the CUDA
wheels (`nvidia-cuda-nvcc`, `nvidia-cuda-nvdisasm`: site-packages/nvidia/cu13/bin) of this interpreter.
"""

from __future__ import annotations

import os
import re
import shutil
import site
import subprocess
import sys
from dataclasses import dataclass
from functools import cache

NVCC_ENV = "DG_SM120_NVCC"
NVDISASM_ENV = "DG_SM120_NVDISASM"
MIN_VERSION = (13, 0)
# Every kernel translation unit (JIT and gate alike) compiles with these.
BASE_FLAGS = ("-std=c++17", "-O3", "--expt-relaxed-constexpr", "-Xptxas", "-v")


@dataclass(frozen=True)
class Toolchain:
    nvcc: str
    version: str  # e.g. "13.0.88"
    nvdisasm: str | None  # None: SASS cannot be read with this toolchain

    @property
    def major_minor(self) -> tuple[int, int]:
        major, minor = self.version.split(".")[:2]
        return int(major), int(minor)


def _site_dirs() -> list[str]:
    dirs = list(sys.path)
    try:
        dirs += site.getsitepackages() + [site.getusersitepackages()]
    except AttributeError:  # virtualenv's old site module
        pass
    seen, out = set(), []
    for d in dirs:
        if d and d not in seen:
            seen.add(d)
            out.append(d)
    return out


def _wheel_bin(tool: str) -> list[str]:
    return [os.path.join(d, "nvidia", "cu13", "bin", tool) for d in _site_dirs()]


def _executable(path: str) -> bool:
    return bool(path) and os.path.isfile(path) and os.access(path, os.X_OK)


def nvcc_candidates() -> list[str]:
    from . import envvars

    out = [envvars.nvcc()]  # $DG_SM120_NVCC, else DeepGEMM's $DG_JIT_NVCC_COMPILER, read now
    out += [os.path.join(os.environ[v], "bin", "nvcc") for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    out += [shutil.which("nvcc") or "", "/usr/local/cuda/bin/nvcc", *_wheel_bin("nvcc")]
    return [c for c in out if c]


@cache
def nvcc_version(path: str) -> str | None:
    """ "13.0.88" from `nvcc --version`, or None if it is not a working nvcc."""
    try:
        p = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"release \d+\.\d+, V(\d+\.\d+\.\d+)", p.stdout)
    return m.group(1) if p.returncode == 0 and m else None


def find_nvdisasm(nvcc: str | None = None) -> str | None:
    """nvdisasm for SASS checks: $DG_SM120_NVDISASM, beside `nvcc`, on PATH, or from the CUDA wheels.
    Any CUDA >= 12.8 nvdisasm reads sm_120 cubins; the one beside nvcc is preferred."""
    cands = [os.environ.get(NVDISASM_ENV, "")]
    if nvcc:
        cands.append(os.path.join(os.path.dirname(nvcc), "nvdisasm"))
    cands += [shutil.which("nvdisasm") or "", "/usr/local/cuda/bin/nvdisasm", *_wheel_bin("nvdisasm")]
    return next((c for c in cands if _executable(c)), None)


def nvdisasm_hint(version: str | None = None) -> str:
    pin = f"=={version}" if version else ""
    return (
        f"nvdisasm not found: install it with `python -m pip install nvidia-cuda-nvdisasm{pin}`, point "
        f"{NVDISASM_ENV} at one, or build a whole pinned toolchain with `bash tools/toolchain_venv.sh VERSION DIR`"
    )


def toolchain_at(nvcc: str) -> Toolchain | None:
    real = os.path.realpath(nvcc)
    version = nvcc_version(real)
    return Toolchain(real, version, find_nvdisasm(real)) if version else None


def discover(explicit: tuple[str, ...] = ()) -> list[Toolchain]:
    """The toolchains at `explicit` nvcc paths, else every distinct CUDA version found (compile gate)."""
    out: list[Toolchain] = []
    for c in explicit or nvcc_candidates():
        if not _executable(c):
            continue
        tc = toolchain_at(c)
        if tc is not None and all(t.version != tc.version for t in out):
            out.append(tc)
    return out


def find_toolchain() -> Toolchain:
    """The first CUDA >= 13.0 toolchain in search order (JIT). RuntimeError saying how to get one otherwise.
    Memoized per value of the nvcc variables, so setting one later (as serving stacks do) takes effect."""
    from . import envvars

    return _find_toolchain(envvars.nvcc(), os.environ.get("CUDA_HOME", ""), os.environ.get("CUDA_PATH", ""))


@cache
def _find_toolchain(nvcc_env: str, cuda_home: str, cuda_path: str) -> Toolchain:
    older = []
    for c in nvcc_candidates():
        if not _executable(c):
            continue
        tc = toolchain_at(c)
        if tc is None:
            continue
        if tc.major_minor >= MIN_VERSION:
            return tc
        older.append(f"{c} (CUDA {tc.version})")
    found = f"; found only {', '.join(older)}" if older else ""
    raise RuntimeError(
        f"no CUDA >= 13.0 nvcc found{found}: install a CUDA 13 toolkit or the nvidia-cuda-nvcc "
        f"wheels (see SM120_FACTS / README), or set {NVCC_ENV}"
    )


def gencode(target: str) -> list[str]:
    """`-gencode` (never `--gpu-architecture` alone, reported to lose block scaling on sm_120)."""
    arch = target[len("sm_") :]
    return ["-gencode", f"arch=compute_{arch},code=sm_{arch}"]


def compile_command(
    nvcc: str, src: str, out: str, target: str, include_dir: str | None, extra: tuple[str, ...] = ()
) -> list[str]:
    inc = [f"-I{include_dir}"] if include_dir else []
    return [nvcc, "-cubin", *BASE_FLAGS, *gencode(target), *inc, *extra, "-o", out, src]
