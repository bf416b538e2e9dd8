"""Opt-in `import deep_gemm` for deep_gemm_sm120 (stdlib only; runs at interpreter start via a .pth line).

DG_SM120_AS_DEEP_GEMM=1      `import deep_gemm` gives deep_gemm_sm120.compat when no DeepGEMM is present: neither a
                             top-level `deep_gemm` (DeepGEMM, sgl-deep-gemm) nor a serving stack's bundled copy
                             (vLLM's vllm/third_party/deep_gemm, which vLLM imports when `import deep_gemm` fails)
DG_SM120_AS_DEEP_GEMM=force  ours in every case (shadows both, for this process only)
unset / 0                    nothing happens: this module only reads the variable

`python -m _deep_gemm_sm120_hook` says which DeepGEMM `import deep_gemm` gives in this environment, and why.

Serving stacks (vLLM, SGLang) import `deep_gemm` by name; this lets them reach our kernels without a patch.
`deep_gemm_sm120.compat.install()` does the same from code. See docs/deep_gemm_compat.md.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import os
import sys
import types

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


# serving stacks that bundle a DeepGEMM and import it when `import deep_gemm` fails: package -> its copy's folder
BUNDLED = {"vllm": ("third_party", "deep_gemm")}


def _other_finders() -> list:
    # by marker, not class: `python -m` runs a second copy of this module beside the one the .pth imported
    return [f for f in sys.meta_path if not getattr(f, "dg_sm120_finder", False) and getattr(f, "find_spec", None)]


def present() -> str | None:
    """Where a DeepGEMM other than ours is: 'deep_gemm at PATH' (top level) or 'vllm.third_party.deep_gemm at PATH'
    (bundled), else None. Looks at specs and folders only: nothing is imported (vLLM is not)."""
    for f in _other_finders():
        spec = f.find_spec(ALIAS, None)
        if spec is not None:
            return f"{ALIAS} at {spec.origin or list(spec.submodule_search_locations or [])}"
    for package, rel in BUNDLED.items():
        for f in _other_finders():
            spec = f.find_spec(package, None)
            for root in (spec.submodule_search_locations or []) if spec is not None else []:
                init = os.path.join(root, *rel, "__init__.py")
                if os.path.isfile(init):
                    return f"{package}.{'.'.join(rel)} at {os.path.dirname(init)}"
    return None


def explain(value: str | None = None) -> str:
    """One line: which DeepGEMM `import deep_gemm` resolves to under the variable's value, and why."""
    raw = os.environ.get(ENV) if value is None else value
    m, other = mode(raw), present()
    # the variable as the user wrote it (=0, =yes, ...), not as it was read
    said = f"{ENV} is unset" if raw is None or not raw.strip() else f"{ENV}={raw.strip()}"
    if m is None:
        return f"{said}: `import deep_gemm` is not ours" + (
            f"; the DeepGEMM present is {other}" if other else "; no DeepGEMM is present"
        )
    if m == "force":
        return f"{said}: `import deep_gemm` gives deep_gemm_sm120" + (f" (shadowing {other})" if other else "")
    if other:
        return f"{said}: `import deep_gemm` is not ours: a DeepGEMM is present ({other}); use =force to take over"
    return f"{said}: `import deep_gemm` gives deep_gemm_sm120 (no other DeepGEMM is present)"


class DeepGemmFinder(importlib.abc.MetaPathFinder):
    dg_sm120_finder = True

    def __init__(self, force: bool):
        self.force = force
        self._real: bool | None = None

    def _real_deep_gemm_installed(self) -> bool:
        if self._real is None:
            self._real = present() is not None
        return self._real

    def find_spec(self, fullname, path, target=None):
        if fullname != ALIAS and not fullname.startswith(ALIAS + "."):
            return None
        if not self.force and self._real_deep_gemm_installed():
            return None  # never shadow a real DeepGEMM unless asked
        target_name = _target(fullname)
        if target_name is None:
            return None
        return importlib.util.spec_from_loader(fullname, _AliasLoader(target_name), is_package=fullname == ALIAS)


def _target(fullname: str) -> str | None:
    """The module `deep_gemm[.x[.y]]` stands for: deep_gemm_sm120.compat for `deep_gemm`, then, one level at a
    time, the module its parent binds under that name (compat's `utils` is deep_gemm_sm120.utils itself) or
    the parent's submodule of that name."""
    if fullname == ALIAS:
        return TARGET
    parent, _, leaf = fullname.rpartition(".")
    parent_target = _target(parent)
    if parent_target is None:
        return None
    bound = getattr(importlib.import_module(parent_target), leaf, None)
    if isinstance(bound, types.ModuleType):
        return bound.__name__
    name = f"{parent_target}.{leaf}"
    return name if importlib.util.find_spec(name) is not None else None


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


if __name__ == "__main__":
    print(explain())
else:
    _from_environment()
