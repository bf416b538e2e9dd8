import os
import sys
import tempfile
from pathlib import Path

import pytest

_HERE = Path(__file__).resolve().parent
# check_vendor --sync keeps its journal key in a per-user state directory: the tests use one of their own
os.environ.setdefault("SM120_STATE_DIR", tempfile.mkdtemp(prefix="sm120-state-"))
sys.path.insert(0, str(_HERE))
# Source checkouts (and the H200 qualification run) import the package from host/ directly.
sys.path.insert(0, str(_HERE.parent / "host"))


@pytest.fixture(autouse=True)
def _fresh_device_targets():
    """Each test reads DG_SM120_EMULATE afresh (the package fixes a device's target at its first call); nothing
    is imported for tests that never load the package."""
    arch = sys.modules.get("deep_gemm_sm120.arch")
    if arch is not None:
        arch.reset_targets()
    yield
    arch = sys.modules.get("deep_gemm_sm120.arch")
    if arch is not None:
        arch.reset_targets()


def pytest_runtest_setup(item):
    """requires_sm120: skip unless the GPU is SM120 (12.x). Checked when the test runs, so collection never
    touches CUDA; without a GPU nothing is initialized."""
    if item.get_closest_marker("requires_sm120") is None:
        return
    import pytest
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs SM120 silicon; no CUDA GPU here")
    cap = torch.cuda.get_device_capability()
    if cap[0] != 12:
        pytest.skip(f"needs SM120 silicon (compute capability 12.x); this GPU is {cap[0]}.{cap[1]}")


@pytest.fixture()
def index(monkeypatch):
    """A PyPI-style index on 127.0.0.1 (tests/fake_servers.py), with this machine's pip environment and
    configuration out of the way."""
    from fake_servers import FakePyPI

    for var in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX", "SM120_PYPI_INDEX"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    fake = FakePyPI()
    fake.start()
    yield fake
    fake.stop()


@pytest.fixture()
def sm120_or_emulation(monkeypatch):
    """Run SM120 kernels: natively on 12.x, else through the sm_90 emulation (DG_SM120_EMULATE=1)."""
    import torch

    cap = torch.cuda.get_device_capability()
    if cap[0] != 12:
        monkeypatch.setenv("DG_SM120_EMULATE", "1")
    return cap


@pytest.fixture()
def gh(monkeypatch):
    """A GitHub API on 127.0.0.1 (tests/fake_servers.py) with the watcher's token set and the workflow's
    variables out of the way."""
    from fake_servers import FakeGitHub
    from watch_helpers import TOKEN

    fake = FakeGitHub(token=TOKEN)
    url = fake.start()
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    for var in ("GITHUB_REPOSITORY", "GITHUB_RUN_ID", "GITHUB_API_URL"):
        monkeypatch.delenv(var, raising=False)
    fake.url = url
    yield fake
    fake.stop()
