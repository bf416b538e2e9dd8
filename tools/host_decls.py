"""The host package's torch-free declarations (deep_gemm_sm120/core and the family declarations), loaded by
file path under a private package name: tools/ never imports `deep_gemm_sm120` itself, which needs torch.
Stdlib only, like every tool."""

from __future__ import annotations

import importlib
import os
import sys
import types

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOST_PACKAGE = os.path.join(ROOT, "host", "deep_gemm_sm120")
_NAME = "_dg_sm120_decls"


def load(name: str):
    """`core.registry`, `core.toolchain`, ... of the host package, without running its __init__."""
    if _NAME not in sys.modules:
        pkg = types.ModuleType(_NAME)
        pkg.__path__ = [HOST_PACKAGE]
        sys.modules[_NAME] = pkg
    return importlib.import_module(f"{_NAME}.{name}")


def registry():
    return load("core.registry").registry()
