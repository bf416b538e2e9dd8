"""Every kernel that reads indices from device memory stays inside its buffers on any values of them, and gives
the documented result (docs/untrusted_indices.md): CUDA-graph replays after the index tensors were corrupted in
place (tests/untrusted_indices.py; the same cases run under compute-sanitizer memcheck in the families' drivers)."""

from __future__ import annotations

import pytest
from gpu_helpers import requires_cuda
from untrusted_indices import CASES

pytestmark = [pytest.mark.cuda, pytest.mark.emulation, requires_cuda]


@pytest.mark.parametrize("label,case", CASES, ids=[label for label, _ in CASES])
def test_untrusted_indices(sm120_or_emulation, label, case):
    case()
