"""Environment variables, read when they are used (each cache lookup, compile, toolchain search), never copied
at import: serving stacks set DeepGEMM's variables after `import deep_gemm`, and that must still count.

Each setting has our name and DeepGEMM's names; ours wins when both are set. Stdlib only."""

from __future__ import annotations

import os

# setting -> (ours, DeepGEMM's ...)
CACHE_DIR = ("DG_SM120_JIT_CACHE_DIR", "DG_JIT_CACHE_DIR")
NVCC = ("DG_SM120_NVCC", "DG_JIT_NVCC_COMPILER")
DEBUG = ("DG_SM120_JIT_DEBUG", "DG_JIT_DEBUG", "DG_JIT_PRINT_COMPILER_COMMAND", "DG_JIT_PTXAS_VERBOSE")

# DeepGEMM's cache directory holds its own entries too: ours go to a subdirectory of it
DEEPGEMM_CACHE_SUBDIR = "deep_gemm_sm120"


def get(names: tuple[str, ...]) -> tuple[str, str] | None:
    """(name, value) of the first of `names` that is set and non-empty now, else None."""
    for name in names:
        value = os.environ.get(name, "")
        if value:
            return name, value
    return None


def flag(names: tuple[str, ...]) -> bool:
    """Any of `names` set to something other than 0 / false / empty."""
    return any(os.environ.get(n, "0").strip().lower() not in ("", "0", "false", "no", "off") for n in names)


def cache_dir() -> str:
    found = get(CACHE_DIR)
    if found is None:
        return os.path.join(os.path.expanduser("~"), ".cache", "deep_gemm_sm120")
    name, value = found
    return value if name == CACHE_DIR[0] else os.path.join(value, DEEPGEMM_CACHE_SUBDIR)


def nvcc() -> str:
    found = get(NVCC)
    return found[1] if found else ""
