"""DeepGEMM's Python surface (`import deep_gemm`) on deep_gemm_sm120's kernels.

Serving stacks call DeepGEMM by module and symbol name; this module has those names, argument orders and
keywords (as sgl-deep-gemm 0.2.5 and DeepGEMM main declare them). The names a kernel family answers for are
declared with the family (`Family.names`) and bound here as the very objects the package root exports
(`deep_gemm.X is deep_gemm_sm120.X`); this module adds only the names no family provides (utilities, runtime
controls, cuBLAS stand-ins) and the refusals of names with no SM120 kernel. Each name is implemented, aliased,
or raises NotImplementedError saying what is missing; every keyword is honoured, accepted with a documented
meaning, or refused by name. The table: docs/deep_gemm_compat.md (generated from compat/surface.py).

Reach it as `deep_gemm` without patching a stack: set DG_SM120_AS_DEEP_GEMM=1 (a real DeepGEMM, if installed,
still wins) or =force, or call `deep_gemm_sm120.compat.install()`. DeepGEMM's DG_JIT_* variables are honoured when
they are used, not only at import (core/envvars.py).
"""

from __future__ import annotations

import torch

from .. import NAMES as _FAMILY_NAMES
from .. import epilogue, testing, utils  # noqa: F401 - deep_gemm.epilogue, .testing, .utils
from .. import launch as _launch
from ..core.names import NOT_PROVIDED, NOT_YET, OUT_OF_SCOPE
from ..core.registry import registry
from ..device import get_num_sms, set_num_sms  # noqa: F401 - DeepGEMM names
from ..scale_layout import transform_sf_into_required_layout  # noqa: F401 - DeepGEMM name
from ..testing import calc_diff  # noqa: F401 - DeepGEMM name
from ..utils import *  # noqa: F403 - deep_gemm re-exports its utils at top level
from .refusals import declared_refusal
from .surface import GENERIC as _GENERIC

# The DeepGEMM API level this surface follows: names, positional orders and keywords of DeepGEMM 2.8.1 (the copy
# vLLM 0.33 bundles), plus sgl-deep-gemm 0.2.5's extra names. `__implementation__` says whose kernels run.
__version__ = "2.8.1"
__implementation__ = "deep_gemm_sm120"


def install(force: bool = False):
    """Make `import deep_gemm` give this module, from code (the environment switch does it at start-up).
    A real DeepGEMM that is installed keeps the name unless force=True."""
    import _deep_gemm_sm120_hook

    return _deep_gemm_sm120_hook.install(force=force)


# the families' DeepGEMM names: the package root's objects
globals().update({n: _FAMILY_NAMES[n] for n, (_, decl) in registry().names.items() if decl.deepgemm})


# ---------------------------------------------------------------- cuBLAS(Lt) names, through torch


def _cublas(layout: str):
    name = f"cublaslt_gemm_{layout}"

    def gemm(a, b, d, c=None):
        """d = a' @ b' (+ c) through torch (cuBLAS): fp32 accumulation, for comparisons."""
        lhs = a.T if layout[0] == "t" else a
        rhs = b if layout[1] == "n" else b.T
        out = torch.matmul(lhs.float(), rhs.float()) if d.dtype == torch.float32 else torch.matmul(lhs, rhs)
        if c is not None:
            out = out + c
        d.copy_(out)

    gemm.__name__ = gemm.__qualname__ = name
    return gemm


cublaslt_gemm_nt, cublaslt_gemm_nn, cublaslt_gemm_tn, cublaslt_gemm_tt = (
    _cublas(lay) for lay in ("nt", "nn", "tn", "tt")
)


def cublaslt_nvfp4_gemm_nt(a, b, d, c=None):
    raise NotImplementedError("cublaslt_nvfp4_gemm_nt is not provided; fp8_fp4_gemm_nt runs NVFP4 on SM120 kernels")


def batched_syrk(a, d):
    raise NotImplementedError("batched_syrk is not provided by deep_gemm_sm120 (no SM120 kernel)")


def batched_symm(a, b, d):
    raise NotImplementedError("batched_symm is not provided by deep_gemm_sm120 (no SM120 kernel)")


# ---------------------------------------------------------------- modules and names with no SM120 kernel

from . import legacy, locality_domain, mega  # noqa: E402, F401 - DeepGEMM's submodules, as attributes
from .locality_domain import (  # noqa: E402, F401 - DeepGEMM names
    destroy_localizer,
    is_localization_available,
    is_localized,
)


def _bind_refusals() -> None:
    """Every name the compat table declares as not provided / out of scope / not yet, and that has no callable
    with DeepGEMM's signature above, refuses with the table's reason (compat/surface.py is the one list)."""
    for e in _GENERIC:
        if e.status in (NOT_PROVIDED, OUT_OF_SCOPE, NOT_YET) and e.name not in globals():
            globals()[e.name] = declared_refusal(e.name)


_bind_refusals()


# ---------------------------------------------------------------- runtime controls

get_pdl, set_pdl = _launch.get_pdl, _launch.set_pdl
get_compile_mode, set_compile_mode = _launch.get_compile_mode, _launch.set_compile_mode
_settings = {"deterministic": True, "tc_util": None, "block_size_multiple_of": None, "ignore_compile_dims": False}


def use_deterministic_algorithms(flag: bool = True) -> None:
    """Every deep_gemm_sm120 kernel is deterministic already (split-K adds its slices in a fixed order)."""
    _settings["deterministic"] = bool(flag)


def get_deterministic_algorithms() -> bool:
    return True


def set_tc_util(value) -> None:
    """An SM100 tensor-core utilisation knob: recorded, no effect on SM120."""
    _settings["tc_util"] = value


def get_tc_util():
    return _settings["tc_util"]


def set_block_size_multiple_of(value) -> None:
    """A DeepGEMM tile constraint: recorded; our heuristics choose tiles (results never depend on it)."""
    _settings["block_size_multiple_of"] = value


def set_ignore_compile_dims(value) -> None:
    _settings["ignore_compile_dims"] = bool(value)


def shutdown() -> None:
    """Nothing to release before interpreter exit (kernels live in the primary context)."""


_MODULES = ("utils", "testing", "epilogue", "legacy", "locality_domain", "mega")
__all__ = [
    n
    for n in dir()
    if not n.startswith("_")
    and n
    not in (
        "annotations",
        "torch",
        "registry",
        "surface",
        "refusals",
        "declared_refusal",
        "NOT_PROVIDED",
        "NOT_YET",
        "OUT_OF_SCOPE",
        *_MODULES,
    )
]
__all__ += list(_MODULES)
