"""`python -m deep_gemm_sm120.compat`: print the compat table (docs/deep_gemm_compat.md holds it; a test keeps
it current)."""

from .surface import render

print(render())
