"""vendorkit.safefs, the one module through which every tool touches a fork: with directory descriptors (POSIX)
and with the lstat-per-component fallback used where dir_fd is missing."""

from __future__ import annotations

import os

import pytest

from vendorkit import safefs
from vendorkit.safefs import ForkRoot, NotRegular, UnsafePath

MODES = [pytest.param(True, id="dirfd"), pytest.param(False, id="lstat-fallback")]


@pytest.fixture()
def tree(tmp_path):
    root, out = tmp_path / "fork", tmp_path / "outside"
    (root / "a/b").mkdir(parents=True)
    (root / "a/b/f.txt").write_bytes(b"inside\n")
    out.mkdir()
    (out / "secret.txt").write_bytes(b"outside\n")
    (root / "a/link").symlink_to(out, target_is_directory=True)
    (root / "a/flink").symlink_to(out / "secret.txt")
    (root / "a/file").write_bytes(b"a file, not a directory\n")
    os.mkfifo(root / "a/fifo")
    return root, out


@pytest.mark.parametrize("dirfd", MODES)
def test_reads_never_follow_a_link(tree, dirfd):
    root, out = tree
    with ForkRoot(str(root), dirfd) as fs:
        assert fs.read_bytes("a/b/f.txt") == b"inside\n"
        with pytest.raises(UnsafePath) as e:
            fs.read_bytes("a/link/secret.txt")
        assert (e.value.component, e.value.why) == ("a/link", "a symlink")
        with pytest.raises(UnsafePath) as e:
            fs.lstat("a/file/x")
        assert e.value.why == "not a directory"
        for rel in ("a/flink", "a/fifo"):  # a link or a FIFO where a file is read: refused, never blocks
            with pytest.raises(NotRegular):
                fs.open_read(rel)
        assert fs.readlink("a/flink") == str(out / "secret.txt")
        assert fs.lstat("a/missing") is None
        assert [p for p, _ in fs.walk("")] == ["a/fifo", "a/file", "a/flink", "a/link", "a/b/f.txt"]
        with pytest.raises(OverflowError):
            fs.read_bytes("a/b/f.txt", limit=3)
        for bad in ("../x", "a/../b", "/etc/passwd", "a//b", "a/./b"):
            with pytest.raises(ValueError):
                fs.lstat(bad)


@pytest.mark.parametrize("dirfd", MODES)
def test_writes_replace_links_and_refuse_linked_directories(tree, dirfd):
    root, out = tree
    with ForkRoot(str(root), dirfd) as fs:
        fs.write_atomic("a/flink", b"new\n", 0o644)  # replaces the link entry itself
        assert not (root / "a/flink").is_symlink() and (root / "a/flink").read_bytes() == b"new\n"
        assert (out / "secret.txt").read_bytes() == b"outside\n"
        with pytest.raises(UnsafePath):
            fs.make_dirs("a/link/sub")
        with pytest.raises(UnsafePath):
            fs.write_atomic("a/link/planted.txt", b"x", 0o644)
        assert fs.check_dir("a/link/sub").component == "a/link" and fs.check_dir("a/new/dir") is None
        assert fs.make_dirs("a/new/dir") == ["a/new", "a/new/dir"]
        fs.write_atomic("a/new/dir/g.txt", b"g\n", 0o755)
        assert os.stat(root / "a/new/dir/g.txt").st_mode & 0o777 == 0o755
        fs.rename("a/new/dir/g.txt", "a/new/g.txt")
        fs.unlink("a/new/g.txt")
        fs.rmdir("a/new/dir")
        fs.chmod("a/b/f.txt", 0o600)
        assert os.stat(root / "a/b/f.txt").st_mode & 0o777 == 0o600
        with pytest.raises(NotRegular):
            fs.chmod("a/fifo", 0o600)
    assert sorted(p.name for p in out.iterdir()) == ["secret.txt"]


def test_descriptor_cache_stays_bounded(tmp_path):
    if not safefs.HAVE_DIRFD:
        pytest.skip("no dir_fd on this platform: the fallback holds no descriptors")
    for i in range(300):
        (tmp_path / f"d{i}").mkdir()
        (tmp_path / f"d{i}/f").write_bytes(b"x")
    before = len(os.listdir("/proc/self/fd"))
    with ForkRoot(str(tmp_path)) as fs:
        for i in range(300):
            fs.read_bytes(f"d{i}/f")
        assert len(os.listdir("/proc/self/fd")) - before <= safefs._CACHE + 2
    assert len(os.listdir("/proc/self/fd")) == before
