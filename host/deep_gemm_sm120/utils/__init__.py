"""`deep_gemm.utils` on deep_gemm_sm120, a package like DeepGEMM 2.8.1's: `layout` (TMA and contiguous-layout
alignment, MN-major scale layouts), `math` (reference FP8 / FP4 casts with DeepGEMM's results), `nvfp4`, `dist`
and `mlopart` (refusing or answering "unavailable" by name where SM120 has no counterpart). Its top level
re-exports `layout` and `math` and two `dist` names, as DeepGEMM's does."""

from __future__ import annotations

from . import dist, layout, math, mlopart, nvfp4
from .dist import init_dist, uneven_all_gather
from .layout import *  # noqa: F403 - deep_gemm.utils re-exports its submodules' names
from .layout import __all__ as _layout_all
from .math import *  # noqa: F403 - deep_gemm.utils re-exports its submodules' names
from .math import __all__ as _math_all

__all__ = ["init_dist", "uneven_all_gather", "dist", "layout", "math", "mlopart", "nvfp4"]
__all__.extend(_layout_all)
__all__.extend(_math_all)
