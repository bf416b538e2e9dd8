"""Shared pieces of the adversarial suite: a canonical repo, hostile-fork builders, a tree snapshot, and the
outside-access audit every layout runs under."""
from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from vendor_helpers import make_canonical  # noqa: E402


@pytest.fixture(scope="package")
def canon(tmp_path_factory) -> Path:
    return make_canonical(tmp_path_factory.mktemp("canon"))


def snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under root (links not followed): type, permission bits, bytes or link target."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            rel = os.path.relpath(p, root)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISREG(st.st_mode):
                with open(p, "rb") as fh:
                    out[rel] = ("file", st.st_mode & 0o7777, fh.read())
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir",)
            else:
                out[rel] = ("other", stat.S_IFMT(st.st_mode))
    return out
