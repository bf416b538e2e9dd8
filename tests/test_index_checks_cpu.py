"""The index-check switch (checks.index_checks): DG_SM120_INDEX_CHECKS=0, read at the first check, or
set_index_checks(False) skips the host checks that read index values; on by default."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture()
def fresh_switch(monkeypatch):
    from deep_gemm_sm120 import checks

    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)  # a CPU build has no streams

    saved = checks._INDEX_CHECKS.value
    checks._INDEX_CHECKS.value = None  # unread: the next check reads the environment
    yield checks
    checks._INDEX_CHECKS.value = saved


def _bad_layout() -> torch.Tensor:
    layout = torch.zeros(256, dtype=torch.int32)
    layout[0] = 9  # no such group: the layout check rejects it
    return layout


@pytest.mark.parametrize("value, on", [(None, True), ("1", True), ("0", False), ("false", False), ("off", False)])
def test_the_environment_sets_the_default(fresh_switch, monkeypatch, value, on):
    import deep_gemm_sm120 as dg

    if value is None:
        monkeypatch.delenv("DG_SM120_INDEX_CHECKS", raising=False)
    else:
        monkeypatch.setenv("DG_SM120_INDEX_CHECKS", value)
    assert dg.get_index_checks() is on
    if on:  # check_layout=None follows the switch
        with pytest.raises(ValueError, match="grouped_layout"):
            fresh_switch.maybe_check_contiguous_layout(None, _bad_layout(), 256, 2, False)
    else:
        fresh_switch.maybe_check_contiguous_layout(None, _bad_layout(), 256, 2, False)
    with pytest.raises(ValueError, match="grouped_layout"):  # an explicit check_layout=True always checks
        fresh_switch.maybe_check_contiguous_layout(True, _bad_layout(), 256, 2, False)


def test_set_index_checks_overrides_and_takes_only_a_bool(fresh_switch, monkeypatch):
    import deep_gemm_sm120 as dg

    monkeypatch.setenv("DG_SM120_INDEX_CHECKS", "1")
    dg.set_index_checks(False)
    assert dg.get_index_checks() is False
    fresh_switch.maybe_check_contiguous_layout(None, _bad_layout(), 256, 2, False)
    dg.set_index_checks(True)
    assert dg.get_index_checks() is True
    for bad in (0, 1, "0", None):
        with pytest.raises(TypeError, match="set_index_checks takes a bool"):
            dg.set_index_checks(bad)
