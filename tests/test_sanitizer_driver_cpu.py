"""The shared prologue and case runner of the compute-sanitizer drivers (tests/sanitizer_driver.py), on the CPU."""

from __future__ import annotations

import os
import sys

import pytest
import sanitizer_driver as sd


def test_prepare_paths_and_emulation_switch(monkeypatch):
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in (sd.HERE, os.path.join(sd.HERE, "..", "host"))])
    monkeypatch.delenv("DG_SM120_EMULATE", raising=False)
    sd.prepare(capability=(12, 0))
    assert "DG_SM120_EMULATE" not in os.environ
    assert sys.path[:2] == [sd.HERE, os.path.join(sd.HERE, "..", "host")]  # tests first, then the package
    sd.prepare(capability=(9, 0))
    assert os.environ["DG_SM120_EMULATE"] == "1"
    assert sys.path.count(sd.HERE) == 1  # idempotent


def test_run_cases_reports_each_case_and_the_exit_status(capsys):
    def bad():
        raise AssertionError("diff too large")

    assert sd.run_cases([("a", lambda: None), ("b", lambda: None)], []) == 0
    assert sd.run_cases([("a", lambda: None), ("b", bad)], []) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[-2:] == ["sanitize case a: ok", "sanitize case b: FAIL diff too large"]


def test_cases_are_selected_by_label_substrings(capsys, monkeypatch):
    ran: list[str] = []
    cases = [(label, lambda label=label: ran.append(label)) for label in ("b2 c32", "overlap c32", "gdr varlen")]
    assert sd.run_cases(cases, ["overlap", "gdr "]) == 0
    assert ran == ["overlap c32", "gdr varlen"]
    monkeypatch.setattr(sys, "argv", ["sanitize_x.py", "b2"])  # a driver's default: its arguments
    assert sd.run_cases(cases) == 0 and ran[-1] == "b2 c32" and len(ran) == 3
    with pytest.raises(SystemExit, match="overlpa.*gdr varlen"):  # a typo must not pass as an empty run
        sd.run_cases(cases, ["overlpa"])
