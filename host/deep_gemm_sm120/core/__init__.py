"""Torch-free declarations shared by the host package and tools/ (stdlib only).

tools/compile_gate.py loads this package and `families/` by file path, without importing `deep_gemm_sm120`
(which needs torch), so nothing under core/ or a family's `__init__.py` may import torch or a third-party
package. tests/test_registry_cpu.py enforces that by loading them with torch and yaml blocked.
"""
