"""Every reader, fed malformed input through the real command line (its own process, budgets and address-space cap
applied): a documented exit code and a one-line reason, never a traceback, a segfault or a hang."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from vendor_helpers import PREFIX, ROOT, V2, commit_all, init_repo, make_fork, run_cv

CLI = str(ROOT / "tools" / "check_vendor.py")


def _cli(*argv: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, CLI, *argv], capture_output=True, text=True, timeout=120, cwd=cwd)


def _assert_clean(p: subprocess.CompletedProcess, codes=(1, 2, 3)) -> None:
    assert p.returncode in codes, (p.returncode, p.stdout[-2000:], p.stderr[-2000:])
    assert "Traceback" not in p.stderr + p.stdout and p.stderr.count("\n") <= 1, p.stderr[-2000:]


def _synced(canon: Path, tmp_path: Path) -> Path:
    fork = make_fork(tmp_path, V2)
    assert run_cv("--repo", str(canon), "--fork", str(fork), "--sync")[0] == 0
    return fork


def test_a_stamp_of_200000_brackets(canon, tmp_path):
    fork = _synced(canon, tmp_path)
    (fork / PREFIX / ".sm120-vendor.json").write_bytes(b"[" * 200_000)
    p = _cli("--repo", str(canon), "--fork", str(fork))
    _assert_clean(p, (1,))
    assert "invalid-stamp" in p.stdout
    _assert_clean(_cli("pin", "--repo", str(canon), "--fork", str(fork), "mma/sm120.cuh", "--reason", "x"), (3,))
    v = subprocess.run(
        [sys.executable, str(fork / PREFIX / ".sm120-vendor-verify.py")], capture_output=True, text=True, timeout=60
    )
    _assert_clean(v, (1,))


def test_corrupt_deflate_data_in_a_member(canon, tmp_path):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for rel, data in V2.items():
            z.writestr(f"{PREFIX}/{rel}", data * 50)
    data = bytearray(buf.getvalue())
    first = data.find(b"PK\x03\x04")
    name_len = int.from_bytes(data[first + 26 : first + 28], "little")
    start = first + 30 + name_len
    data[start + 2 : start + 12] = b"\xff" * 10  # the member's deflate stream, broken
    whl = tmp_path / "bad-1.0-py3-none-any.whl"
    whl.write_bytes(bytes(data))
    p = _cli("--repo", str(canon), "--fork", str(whl))
    _assert_clean(p, (1, 2))


@pytest.mark.parametrize(
    "text",
    [
        "[" * 100_000,
        "- " * 100_000 + "x",
        "a:\n" + "  " * 20_000 + "b: 1\n",
        "schema: 1\ntag: v9.9.9\nsize: " + "9" * 5000 + "\n",
    ],
    ids=["flow", "block-sequence", "indented", "huge-int"],
)  # short ids: PYTEST_CURRENT_TEST
def test_yaml_nested_deep_or_with_huge_numbers(canon, tmp_path, text):
    """libyaml's C loader overflows its stack (a segfault) on the first; int() refuses 5,000 digits."""
    doc = tmp_path / "v9.9.9.yaml"
    doc.write_text(text)
    p = _cli("import-manifest", str(doc), "--upstream", "probe", "--repo", str(canon))
    _assert_clean(p, (3,))


def test_a_manifest_with_a_5000_digit_size(canon, tmp_path):
    text = (canon / "vendor_manifests" / "v0.2.0.yaml").read_text()
    line = next(ln for ln in text.splitlines() if "size: " in ln)
    size = line.split("size: ")[1].split(",")[0]
    bad = text.replace(line, line.replace(f"size: {size},", f"size: {'9' * 5000},"))
    (tmp_path / "v0.2.0.yaml").write_text(bad)
    p = _cli("import-manifest", str(tmp_path / "v0.2.0.yaml"), "--upstream", "probe", "--repo", str(canon))
    _assert_clean(p, (3,))


def test_a_git_tree_entry_naming_a_missing_object(canon, tmp_path):
    fork = make_fork(tmp_path, V2)
    init_repo(fork)
    commit_all(fork, "v2")
    from vendor_helpers import git

    tree = git(fork, "rev-parse", f"HEAD:{PREFIX}/mma").strip()
    (fork / ".git" / "objects" / tree[:2] / tree[2:]).unlink()
    for argv in (
        ["--fork", f"git:{fork}@main"],
        ["provenance", f"git:{fork}@main"],
        ["import-manifest", "--from-git", f"{fork}@main", "--upstream", "probe", "--prefix", PREFIX, "--tag", "v1.0.0"],
    ):
        p = _cli(*argv, "--repo", str(canon))
        _assert_clean(p, (2,))
        assert f"object {tree} is not in" in p.stderr + p.stdout


def test_deep_directories_cost_a_bounded_time(canon, tmp_path):
    import time

    fork = make_fork(tmp_path, V2)
    deep = fork / PREFIX
    (deep / "pit").mkdir()
    fd = os.open(deep / "pit", os.O_RDONLY)
    for _ in range(3000):  # 3,000 nested empty directories (made relative to the last: the path is too long)
        os.mkdir("x", dir_fd=fd)
        nxt = os.open("x", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = nxt
    os.close(fd)
    try:
        t0 = time.monotonic()
        p = _cli("--repo", str(canon), "--fork", str(fork), "--prefix", PREFIX)
        assert time.monotonic() - t0 < 20
        _assert_clean(p, (2,))
        assert "components deep" in p.stderr
    finally:
        _remove_chain(deep / "pit")


def _remove_chain(top: Path) -> None:
    """rmdir a chain of nested `x` directories bottom up (shutil.rmtree recurses once per level)."""
    fds = [os.open(top, os.O_RDONLY)]
    while True:
        try:
            fds.append(os.open("x", os.O_RDONLY, dir_fd=fds[-1]))
        except FileNotFoundError:
            break
    os.close(fds.pop())
    while fds:
        fd = fds.pop()
        os.rmdir("x", dir_fd=fd)
        os.close(fd)


def test_a_huge_sparse_foreign_file_is_not_hashed(canon, tmp_path):
    import time

    fork = _synced(canon, tmp_path)
    with open(fork / PREFIX / "big.bin", "wb") as fh:  # sparse: 16 GiB apparent, nothing on disk
        fh.truncate(16 << 30)
    t0 = time.monotonic()
    p = _cli("--repo", str(canon), "--fork", str(fork), "--format", "json")
    _assert_clean(p, (0,))
    doc = json.loads(p.stdout)
    big = next(f for f in doc["files"] if f["path"] == "big.bin")
    assert big["status"] == "foreign" and big["actual"] is None and time.monotonic() - t0 < 10


def test_similarity_of_a_1_mib_file_of_interleaved_blank_lines_is_bounded(canon, tmp_path):
    import time

    fork = make_fork(tmp_path, V2)
    (fork / PREFIX / "mma/sm120.cuh").write_bytes(b"".join(b"x%d\n\n" % i for i in range(120_000))[: 1 << 20])
    t0 = time.monotonic()
    p = _cli("--repo", str(canon), "--fork", str(fork), "--format", "json")
    _assert_clean(p, (1,))
    assert time.monotonic() - t0 < 15


def test_the_diff_of_two_1_mib_files_of_interleaved_blank_lines_is_bounded():
    import time

    from vendorkit import diagnose

    canon = b"".join(b"x%d\n\n" % i for i in range(100_000))[: 1 << 20]
    fork = b"".join(b"y%d\n\n" % i for i in range(100_000))[: 1 << 20]
    t0 = time.monotonic()
    with pytest.raises(diagnose.OverWorkCap):
        diagnose.similarity(canon, fork)
    assert time.monotonic() - t0 < 5
