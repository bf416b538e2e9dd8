"""The adversarial suite's shared canonical repository (helpers: tests/vendor_helpers.py, fsaudit.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from vendor_helpers import make_canonical


@pytest.fixture(scope="package")
def canon(tmp_path_factory) -> Path:
    return make_canonical(tmp_path_factory.mktemp("canon"))
