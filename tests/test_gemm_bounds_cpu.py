"""benchmarks/gemm_bounds.py edits a copy of the BF16 kernel by exact anchors: every variant must still apply to
the kernel as committed (a kernel change that breaks one fails here, not on the GPU machine), and the edits must
touch only the copy."""

from __future__ import annotations

import hashlib
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))
import gemm_bounds


def _sha(path: str) -> str:
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


@pytest.mark.parametrize("variant", sorted(gemm_bounds.EDITS))
def test_every_variant_applies_to_the_committed_sources(tmp_path, variant):
    edits = gemm_bounds.EDITS[variant]
    files = {rel for rel, _, _ in edits} | {gemm_bounds.KERNEL}
    originals = {rel: os.path.join(gemm_bounds.ROOT, "device_layer", rel) for rel in files}
    before = {rel: _sha(p) for rel, p in originals.items()}
    tree = gemm_bounds.edited_tree(variant, str(tmp_path))
    assert {rel: _sha(p) for rel, p in originals.items()} == before  # the repository's sources are untouched
    for rel, path in originals.items():
        edited = open(os.path.join(tree, rel), encoding="utf-8").read()
        touched = any(r == rel for r, _, _ in edits)
        assert (edited == open(path, encoding="utf-8").read()) == (not touched), rel
    for rel, anchor, repl in edits:
        edited = open(os.path.join(tree, rel), encoding="utf-8").read()
        assert anchor not in edited or anchor in repl


def test_parse_config():
    assert gemm_bounds.parse_config("128x256x32s4") == (128, 256, 32, 4, 2, 4)
    assert gemm_bounds.parse_config("256x128x32s4") == (256, 128, 32, 4, 4, 2)
    assert gemm_bounds.parse_config("128x128x64s3w4x2") == (128, 128, 64, 3, 4, 2)


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import compile_gate as gate


@pytest.mark.compile_gate
@pytest.mark.skipif(not gate.discover_toolchains([]), reason="no CUDA toolchain")
@pytest.mark.parametrize("variant", sorted(set(gemm_bounds.EDITS) - {"base"}))
def test_every_variant_compiles(tmp_path, variant):
    """An anchor that still matches can leave code that no longer builds; the variant's tree compiles for the
    target the benchmark runs on (the H200's sm_90a) with the BF16 family's first instantiation."""
    tree = gemm_bounds.edited_tree(variant, str(tmp_path))
    job = gate.kernel_jobs(quick=True, families=("bf16_gemm",))[0]
    r = gate.check_kernel(gate.discover_toolchains([])[0], job, "sm_90a", include_dir=tree)
    assert r.verdict != "compile-error", r.problems
