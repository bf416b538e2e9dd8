"""A cached call walks few modules: `deep_gemm.fp8_gemm_nt` with packed scales and a signature already seen
enters only the modules docs/host_design.md names (the family's api.py, keywords.py, launch.py, arch.py,
core/tma.py). A tracing hook records every function of ours the call enters."""

from __future__ import annotations

import os
import sys

import pytest
import torch
from gpu_helpers import poison_like, requires_cuda

from deep_gemm_sm120.selftest.workloads.block_scaled import fp8_operands

pytestmark = [pytest.mark.cuda, pytest.mark.emulation, requires_cuda]
DOCUMENTED = {"families/fp8_fp4_gemm_1d1d/api.py", "keywords.py", "launch.py", "arch.py", "core/tma.py"}


def _modules_entered(fn) -> set[str]:
    import deep_gemm_sm120

    root = os.path.dirname(deep_gemm_sm120.__file__) + os.sep
    seen: set[str] = set()

    def hook(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.startswith(root):
            seen.add(os.path.relpath(frame.f_code.co_filename, root).replace(os.sep, "/"))

    sys.setprofile(hook)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return seen


def test_a_cached_fp8_call_enters_only_the_documented_modules(sm120_or_emulation):
    import deep_gemm_sm120 as dg
    import deep_gemm_sm120.compat as deep_gemm  # what `import deep_gemm` gives (tests/test_compat_cpu.py)

    m, n, k = 64, 256, 512
    (a, sfa), (b, sfb), _ = fp8_operands(m, n, k, torch.Generator(device="cuda").manual_seed(3))
    recipe = (1, 128, 128)
    pa = dg.transform_sf_into_required_layout(sfa, m, k, recipe, is_sfa=True)
    pb = dg.transform_sf_into_required_layout(sfb, n, k, recipe)
    d1, d2 = poison_like(torch.empty(m, n, device="cuda")), poison_like(torch.empty(m, n, device="cuda"))
    deep_gemm.fp8_gemm_nt((a, pa), (b, pb), d1, recipe=recipe)  # first call: checks, plan, JIT
    entered = _modules_entered(lambda: deep_gemm.fp8_gemm_nt((a, pa), (b, pb), d2, recipe=recipe))
    torch.cuda.synchronize()
    assert torch.equal(d1, d2)
    assert "families/fp8_fp4_gemm_1d1d/api.py" in entered  # the hook saw the call at all
    assert entered <= DOCUMENTED, f"a cached call also enters {sorted(entered - DOCUMENTED)}"
