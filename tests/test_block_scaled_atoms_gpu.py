"""The block-scaled MMA atoms alone, through the self-test's scale probe (selftest/atoms.py), on this GPU.

Every case of the probe's table (both encodings, every tile / thread-id and byte-id pair the kernels issue) runs on
random registers with a different scale in every lane and byte, on decode inputs that name the lane and byte
each row's and column's scale came from, and on the special scale encodings. On sm_90 this validates the
emulation's arithmetic and its use of the documented mapping; on SM120 silicon the same test checks the mapping
itself. Under DG_SM120_EMULATE_SELECTORS=ignored (emulation only) the emulated MMA reads every non-zero selector
as 0: the selector encoding must then be reported wrong, with that reading named, and the replicated one right."""

from __future__ import annotations

import pytest
import torch
from gpu_helpers import requires_cuda

from deep_gemm_sm120.core import encoding as enc
from deep_gemm_sm120.services.scale_probe import ATOM_KINDS

pytestmark = [pytest.mark.cuda, pytest.mark.emulation, requires_cuda]


def _run(kind: str):
    from deep_gemm_sm120.arch import target_for_device
    from deep_gemm_sm120.selftest.atoms import run_atoms

    index = torch.cuda.current_device()
    (res,) = run_atoms(index, target_for_device(index), kinds=[kind])
    return res


def _ignored(cap) -> bool:
    return cap[0] != 12 and enc.emulated_reading() == "ignored"


@pytest.mark.parametrize("kind", list(ATOM_KINDS))
def test_every_case_reads_its_scales_where_the_kernels_put_them(sm120_or_emulation, kind):
    res = _run(kind)
    assert res.table_ok, "the probe's case table differs from services/scale_probe.cases()"
    for c in res.cases:
        nonzero = c.case.encoding == enc.SELECTORS and any((c.case.i % 2, c.case.j % 4, c.case.byte_a, c.case.byte_b))
        if _ignored(sm120_or_emulation) and nonzero:
            assert c.verdict == "wrong" and c.matches == "selectors-as-zero" and c.misreads, c.as_dict()
        else:
            assert c.verdict == "ok", c.as_dict()
    assert res.passes(enc.REPLICATED)
    assert res.passes(enc.SELECTORS) != _ignored(sm120_or_emulation)
    for s in res.specials:  # the defined results of docs/block_scaled.md, both encodings
        assert s.verdict in ("ok", "info"), s.as_dict()
        if s.name == "ue4m3_sign" and sm120_or_emulation[0] != 12:
            assert s.observed.startswith("sign ignored"), s.as_dict()
