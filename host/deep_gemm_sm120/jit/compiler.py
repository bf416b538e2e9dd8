"""Finding nvcc (system toolkit or the CUDA wheels) and compiling one translation unit to a cubin."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from functools import lru_cache

NVCC_ENV = "DG_SM120_NVCC"
BASE_FLAGS = ("-std=c++17", "-O3", "--expt-relaxed-constexpr", "-Xptxas", "-v")


@dataclass(frozen=True)
class Compiler:
    path: str
    version: str  # e.g. "13.0.88"

    @property
    def major_minor(self) -> tuple[int, int]:
        major, minor = self.version.split(".")[:2]
        return int(major), int(minor)


def _candidates() -> list[str]:
    out = [os.environ.get(NVCC_ENV, "")]
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            out.append(os.path.join(os.environ[var], "bin", "nvcc"))
    out += [shutil.which("nvcc") or "", "/usr/local/cuda/bin/nvcc"]
    for p in sys.path:
        out.append(os.path.join(p, "nvidia", "cu13", "bin", "nvcc"))
    return [c for c in out if c]


@lru_cache(maxsize=None)
def compiler_at(path: str) -> Compiler:
    p = subprocess.run([path, "--version"], capture_output=True, text=True)
    m = re.search(r"release \d+\.\d+, V(\d+\.\d+\.\d+)", p.stdout)
    if p.returncode != 0 or not m:
        raise RuntimeError(f"{path} --version did not report a CUDA release")
    return Compiler(path, m.group(1))


@lru_cache(maxsize=None)
def find_compiler() -> Compiler:
    for c in _candidates():
        if os.path.isfile(c) and os.access(c, os.X_OK):
            comp = compiler_at(c)
            if comp.major_minor < (13, 0):
                raise RuntimeError(f"{c} is CUDA {comp.version}; deep_gemm_sm120 needs nvcc >= 13.0")
            return comp
    raise RuntimeError(f"nvcc not found: install a CUDA >= 13.0 toolkit, the nvidia-cuda-nvcc wheel, or set {NVCC_ENV}")


def gencode(target: str) -> list[str]:
    """`-gencode` (never `--gpu-architecture` alone, reported to lose block scaling on sm_120)."""
    arch = target[len("sm_"):]
    return ["-gencode", f"arch=compute_{arch},code=sm_{arch}"]


def compile_flags(target: str, include_dir: str, extra: tuple[str, ...] = ()) -> list[str]:
    return ["-cubin", *BASE_FLAGS, *gencode(target), f"-I{include_dir}", *extra]


def compile_cubin(comp: Compiler, src_path: str, out_path: str, flags: list[str]) -> tuple[list[str], str]:
    """Compile; returns (command, ptxas/nvcc log). Raises RuntimeError with the log on failure."""
    cmd = [comp.path, *flags, "-o", out_path, src_path]
    p = subprocess.run(cmd, capture_output=True, text=True)
    log = (p.stdout + p.stderr).strip()
    if p.returncode != 0:
        raise RuntimeError(f"nvcc failed ({' '.join(cmd)}):\n{log}")
    return cmd, log
