"""DeepGEMM's name for the hyper-connection pre-norm GEMM (its Entry is in __init__.py's declaration)."""
from __future__ import annotations

from . import api as _hc


def tf32_hc_prenorm_gemm(a, b, d, sqr_sum, num_splits=None):
    _hc.tf32_hc_prenorm_gemm(a, b, d, sqr_sum, num_splits)
