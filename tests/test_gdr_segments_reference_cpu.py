"""The segment-parallel forward of the gated delta rule (selftest/workloads/gdr_segments_reference.py, issue 42's
algebra) against the token-by-token float64 recurrence: every split of a sequence into chunk-aligned segments,
varlen (segments never cross a sequence), GVA, l2norm, initial state, final state."""

from __future__ import annotations

import pytest
import torch

from deep_gemm_sm120.selftest.workloads.gdr_reference import naive_recurrence, relative_l2
from deep_gemm_sm120.selftest.workloads.gdr_segments_reference import segment_bounds, segmented


def _inputs(b, t, h, hv, d, n, seed):
    gen = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64)
    g = -torch.rand(b, t, hv, generator=gen, dtype=torch.float64) * 0.2
    beta = torch.rand(b, t, hv, generator=gen, dtype=torch.float64)
    return r(b, t, h, d) * 0.5, r(b, t, h, d) * 0.5, r(b, t, hv, d), g, beta, r(n, hv, d, d) * 0.1


@pytest.mark.parametrize("segments", [1, 2, 3, 5, 64])
@pytest.mark.parametrize("varlen,l2", [(False, False), (True, True)])
def test_segmented_equals_the_recurrence(segments, varlen, l2):
    t = 150
    cu = torch.tensor([0, 3, 3, 70, t]) if varlen else None
    b, n = (1, 4) if varlen else (2, 2)
    q, k, v, g, beta, h0 = _inputs(b, t, 2, 4, 8, n, seed=segments)
    want, want_final = naive_recurrence(q, k, v, g, beta, 0.4, h0, True, cu_seqlens=cu, use_qk_l2norm_in_kernel=l2)
    got, final = segmented(
        q, k, v, g, beta, 0.4, h0, True, cu_seqlens=cu, use_qk_l2norm_in_kernel=l2, chunk_size=16, segments=segments
    )
    assert relative_l2(got, want) < 1e-10 and relative_l2(final, want_final) < 1e-10


def test_segments_cover_the_sequence_in_whole_chunks():
    for start, end, seg in ((0, 150, 4), (10, 11, 8), (0, 32, 2), (5, 5 + 33, 3), (0, 1000, 7)):
        runs = segment_bounds(start, end, 16, seg)
        assert runs[0][0] == start and runs[-1][1] == end and len(runs) <= seg
        assert all(a < b and (a - start) % 16 == 0 for a, b in runs)
        assert all(x[1] == y[0] for x, y in zip(runs, runs[1:]))


def test_a_wrong_combine_is_seen(monkeypatch):
    """The comparison can fail: a combine that starts every segment from the initial state is caught (with one
    segment it changes nothing, with three it changes every later segment)."""
    from deep_gemm_sm120.selftest.workloads import gdr_segments_reference as ref

    q, k, v, g, beta, h0 = _inputs(1, 96, 1, 1, 8, 1, seed=1)
    want, _ = naive_recurrence(q, k, v, g, beta, initial_state=h0)
    monkeypatch.setattr(ref, "combine", lambda maps, state: ([state] * len(maps), state))
    got1, _ = segmented(q, k, v, g, beta, initial_state=h0, chunk_size=16, segments=1)
    got3, _ = segmented(q, k, v, g, beta, initial_state=h0, chunk_size=16, segments=3)
    assert relative_l2(got1, want) < 1e-10 and relative_l2(got3, want) > 1e-3
