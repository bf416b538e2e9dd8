"""tests/mutation_block_scaled.py keeps up with the device layer: every mutant still applies to exactly one spot,
names a kernel the registry builds and GPU tests pytest collects, and states an sm_120a expectation. (The GPU run
and the cubin comparison are recorded in docs/qualification.md.)"""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_every_mutant_applies_and_names_real_kernels_and_tests():
    p = subprocess.run(
        [sys.executable, "tests/mutation_block_scaled.py", "--applies"], cwd=ROOT, capture_output=True, text=True
    )
    assert p.returncode == 0, p.stdout + p.stderr
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    import mutation_block_scaled as mut

    assert p.stdout.count("applies") == len(mut.MUTANTS) >= 11
    for m in mut.MUTANTS:
        assert m.sm120a in ("changes", "equal") and m.tests
        assert mut.spec_named(m.spec).name == m.spec
    nodes = sorted({n for m in mut.MUTANTS for n, _ in m.tests})
    c = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-m", "cuda", *nodes],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert c.returncode == 0 and "no tests ran" not in c.stdout, c.stdout[-3000:] + c.stderr[-2000:]
    # emulation-only mutants are the ones whose sm_120a cubin stays equal
    assert {m.name for m in mut.MUTANTS if m.sm120a == "equal"} == {"emu_sfa_lane", "nvfp4_chunk", "emu_exponents"}
