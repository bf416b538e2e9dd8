"""Opt-in `import deep_gemm` for deep_gemm_sm120 (stdlib only; runs at interpreter start via a .pth line).

DG_SM120_AS_DEEP_GEMM=1      `import deep_gemm` gives deep_gemm_sm120.compat when no real DeepGEMM is installed
DG_SM120_AS_DEEP_GEMM=force  ... even when one is (ours shadows it, for this process only)
unset / 0                    nothing happens: this module only reads the variable

Serving stacks (vLLM, SGLang) import `deep_gemm` by name; this lets them reach our kernels without a patch.
`deep_gemm_sm120.compat.install()` does the same from code. See docs/deep_gemm_compat.md.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import os
import sys

ENV = "DG_SM120_AS_DEEP_GEMM"
ALIAS = "deep_gemm"
TARGET = "deep_gemm_sm120.compat"


def mode(value: str | None = None) -> str | None:
    """'fallback', 'force' or None from the variable's value (or the environment)."""
    v = (os.environ.get(ENV, "") if value is None else value).strip().lower()
    if v in ("force",):
        return "force"
    if v in ("1", "true", "yes", "on", "fallback"):
        return "fallback"
    return None


class _AliasLoader(importlib.abc.Loader):
    """Loads `deep_gemm[.x]` as the already-importable `deep_gemm_sm120.compat[.x]` module object."""

    def __init__(self, target: str):
        self.target = target

    def create_module(self, spec):
        return importlib.import_module(self.target)

    def exec_module(self, module) -> None:  # the target module is already executed
        pass


class DeepGemmFinder(importlib.abc.MetaPathFinder):
    def __init__(self, force: bool):
        self.force = force
        self._real: bool | None = None

    def _real_deep_gemm_installed(self) -> bool:
        if self._real is None:
            others = [f for f in sys.meta_path if not isinstance(f, DeepGemmFinder)]
            self._real = any(getattr(f, "find_spec", None) and f.find_spec(ALIAS, None) is not None for f in others)
        return self._real

    def find_spec(self, fullname, path, target=None):
        if fullname != ALIAS and not fullname.startswith(ALIAS + "."):
            return None
        if not self.force and self._real_deep_gemm_installed():
            return None  # never shadow a real DeepGEMM unless asked
        target_name = TARGET + fullname[len(ALIAS):]
        if importlib.util.find_spec(target_name) is None:
            return None
        return importlib.util.spec_from_loader(fullname, _AliasLoader(target_name),
                                               is_package=fullname == ALIAS)


def install(force: bool = False) -> DeepGemmFinder:
    """Put the finder first on sys.meta_path (once); returns it."""
    for f in sys.meta_path:
        if isinstance(f, DeepGemmFinder):
            f.force = f.force or force
            return f
    finder = DeepGemmFinder(force)
    sys.meta_path.insert(0, finder)
    return finder


def _from_environment() -> None:
    m = mode()
    if m is not None:
        install(force=m == "force")


_from_environment()
