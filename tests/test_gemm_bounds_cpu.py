"""benchmarks/gemm_bounds.py edits a copy of the BF16 kernel by exact anchors: every variant must still apply to
the kernel as committed (a kernel change that breaks one fails here, not on the GPU machine), and the edits must
touch only the copy."""
from __future__ import annotations

import hashlib
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))
import gemm_bounds  # noqa: E402


def _sha(path: str) -> str:
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


@pytest.mark.parametrize("variant", sorted(gemm_bounds.EDITS))
def test_every_variant_applies_to_the_committed_kernel(tmp_path, variant):
    original = os.path.join(gemm_bounds.ROOT, "device_layer", gemm_bounds.KERNEL)
    before = _sha(original)
    tree = gemm_bounds.edited_tree(variant, str(tmp_path))
    edited = open(os.path.join(tree, gemm_bounds.KERNEL), encoding="utf-8").read()
    assert _sha(original) == before  # the repository's kernel is untouched
    assert (edited == open(original, encoding="utf-8").read()) == (variant == "base")
    for anchor, repl in gemm_bounds.EDITS[variant]:
        assert anchor not in edited or anchor in repl


def test_parse_config():
    assert gemm_bounds.parse_config("128x256x32s4") == (128, 256, 32, 4, 2, 4)
    assert gemm_bounds.parse_config("256x128x32s4") == (256, 128, 32, 4, 4, 2)
    assert gemm_bounds.parse_config("128x128x64s3w4x2") == (128, 128, 64, 3, 4, 2)
