"""The watcher checks each downstream in a child process under resource limits: whatever one downstream makes the
reader do ends that child only; it is `unknown` with a one-line reason and the run goes on for the rest."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from vendor_helpers import PREFIX, V2
from watch_helpers import config, entry, remote_fork, watch

HERE = str(Path(__file__).resolve().parent)
posix_only = pytest.mark.skipif(os.name != "posix", reason="resource limits are POSIX rlimits")


def _run(fn: str, **limits):
    from vendorkit import isolate

    lim = isolate.ChildLimits(**{"memory": 1 << 30, "cpu_seconds": 5, "wall_seconds": 20.0, **limits})
    return isolate.run(f"isolation_probes.{fn}", {"x": 1}, lim, path=(HERE,))


def test_an_answer_comes_back_as_data():
    assert _run("fine") == {"echo": {"x": 1}}
    assert _run("fails") == {"failed": "RecursionError: nested too deeply"}


@posix_only
@pytest.mark.parametrize(
    "fn, why",
    [
        ("hog", "Cannot allocate memory"),  # the address-space limit: an allocation fails in the child
        ("spin", "over its CPU limit"),
        ("crash", "crashed (segmentation fault)"),
        ("chatter", "answered more than"),
        ("sleep", "still running after"),
        ("files", "OSError"),  # open files: EMFILE in the child
        ("disk", "File too large"),  # the file size limit: EFBIG (Python ignores SIGXFSZ)
    ],
)
def test_a_misbehaving_check_ends_its_child_only(fn, why):
    from vendorkit import isolate

    t0 = time.monotonic()
    try:
        ans = _run(fn, wall_seconds=4.0, cpu_seconds=2, answer_bytes=16 << 20, file_bytes=64 << 20)
        reason = ans.get("failed", "")
    except isolate.ChildFailed as e:
        reason = str(e)
    assert why in reason, reason
    assert time.monotonic() - t0 < 15


def test_one_hostile_downstream_is_unknown_and_the_run_goes_on(canon, gh, tmp_path):
    """A fork whose stamp is 200,000 '[' (a RecursionError in a naive reader) next to a fork that is fine, and a
    package index that trickles its page forever (stopped by the child's wall-clock limit)."""
    from fake_servers import FakePyPI

    files = dict(V2)
    remote_fork(tmp_path / "a", gh, "org/deep", files)
    hostile = remote_fork(tmp_path / "b", gh, "org/hostile", files)
    (hostile / PREFIX / ".sm120-vendor.json").write_bytes(b"[" * 200_000)
    from vendor_helpers import commit_all

    commit_all(hostile, "a deep stamp")
    index = FakePyPI()
    index.start()
    index.page = (b"<html>" + b" " * 10_000, {})
    index.trickle = 0.5
    try:
        cfg = config(
            tmp_path,
            entry("fine", "org/deep"),
            entry("hostile", "org/hostile"),
            {"name": "slow", "pypi": "slow-pkg", "track": "latest"},
        )
        t0 = time.monotonic()
        code, doc, out = watch(canon, gh, cfg, tmp_path, "--index-url", index.url, "--child-seconds", "6")
        took = time.monotonic() - t0
    finally:
        index.stop()
    verdicts = {d["name"]: d["report"]["verdict"] for d in doc["downstreams"]}
    assert verdicts == {"fine": "in-sync", "hostile": "drifted", "slow": "unknown"}, verdicts
    slow = next(d for d in doc["downstreams"] if d["name"] == "slow")
    assert "still running after 6 s" in slow["report"]["errors"][0]
    hostile_files = {
        f["path"]: f for f in next(d for d in doc["downstreams"] if d["name"] == "hostile")["report"]["files"]
    }
    assert hostile_files[".sm120-vendor.json"]["diagnosis"] == "invalid-stamp"
    assert code == 1 and took < 60
    json.dumps(doc)
