"""Wheels and sdists are read as an installer places their members, and hostile sizes stay bounded: a 2 GiB member,
a tar bomb, a 1 GB header, a highly compressible member, an oversized download."""

from __future__ import annotations

import io
import json
import struct
import subprocess
import sys
import tarfile
import time
import zipfile
import zlib
from pathlib import Path

import pytest
from vendor_helpers import PREFIX, ROOT, V2, by_path, make_fork, run_cv, run_json

OWN = {"deep_gemm/__init__.py": b"# the package\n"}
MEMORY_CAP = 256 << 20
TIME_CAP = 30.0


def _layer(files=V2) -> dict[str, bytes]:
    return {**OWN, **{f"{PREFIX}/{rel}": data for rel, data in files.items()}}


def _wheel(path: Path, members: dict[str, bytes], raw: list[tuple[str, bytes]] = ()) -> Path:
    """A wheel; `raw` adds members verbatim, duplicates and hostile names included."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns about duplicate names: that is the point
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
            for name, data in members.items():
                z.writestr(name, data)
            for name, data in raw:
                z.writestr(zipfile.ZipInfo(name), data)
    return path


def _check(canon: Path, target: Path, *extra: str) -> tuple[int, dict]:
    return run_json("--repo", str(canon), "--fork", str(target), *extra)


def _measured(canon: Path, target: Path, *extra: str) -> tuple[int, dict, float, int]:
    return _measured_spec(canon, str(target), *extra)


def _measured_spec(canon: Path, target: str, *extra: str) -> tuple[int, dict, float, int]:
    """check_vendor in its own process: (exit code, JSON report, seconds, peak RSS in bytes)."""
    code = (
        "import resource, runpy, sys\n"
        f"sys.argv = ['check_vendor.py'] + {json.dumps(['--repo', str(canon), '--fork', str(target), '--format', 'json', *extra])}\n"
        "try:\n    runpy.run_path(sys.argv[0] if False else %r, run_name='__main__')\n"
        "except SystemExit as e:\n    rc = e.code\n"
        "peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "try:  # VmHWM: this image's own peak (ru_maxrss can carry the forking parent's over exec)\n"
        "    peak = int(next(l for l in open('/proc/self/status') if l.startswith('VmHWM')).split()[1])\n"
        "except (OSError, StopIteration):\n    pass\n"
        "sys.stderr.write('MAXRSS %%d\\n' %% peak)\n"
        "sys.exit(rc)\n"
    ) % str(ROOT / "tools/check_vendor.py")
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    took = time.perf_counter() - t0
    rss = int(p.stderr.rsplit("MAXRSS ", 1)[1].split()[0]) * 1024
    return p.returncode, json.loads(p.stdout), took, rss


# ---------------------------------------------------------------- names, as pip resolves them


def test_a_name_walking_through_dotdot_is_checked_where_pip_puts_it(canon, tmp_path):
    whl = _wheel(
        tmp_path / "w-1.0-py3-none-any.whl",
        _layer(),
        [(f"{PREFIX}/common/../common/sm120_walks.cuh", b"// installed next to the layer\n")],
    )
    code, doc = _check(canon, whl)
    f = by_path(doc)["common/sm120_walks.cuh"]
    assert code == 1 and doc["verdict"] == "drifted" and f["status"] == "extra"
    assert any("installs as deep_gemm/include/deep_gemm/common/sm120_walks.cuh" in n for n in doc["notes"])


@pytest.mark.parametrize(
    "name, why",
    [
        ("../../evil/sm120_x.cuh", "climbs out of the package"),
        (f"{PREFIX}/../../../../sm120_x.cuh", "climbs out of the package"),
        ("/etc/sm120_x.cuh", "absolute"),
        ("C:/Windows/sm120_x.cuh", "drive letter"),
        (f"{PREFIX}\\..\\..\\sm120_x.cuh", "backslash"),
    ],
)
def test_a_name_that_leaves_the_package_is_an_unsafe_member(canon, tmp_path, name, why):
    whl = _wheel(tmp_path / "w-1.0-py3-none-any.whl", _layer(), [(name, b"// planted\n")])
    code, doc = _check(canon, whl)
    f = by_path(doc)[name]
    assert code == 1 and doc["verdict"] == "drifted"
    assert (f["status"], f["diagnosis"]) == ("unsafe", "unsafe-member") and why in f["detail"]
    code, out, _ = run_cv("--repo", str(canon), "--fork", str(whl))
    assert "unsafe   " in out and "verdict: drifted" in out


def test_duplicate_members_are_reported_even_when_the_last_one_matches(canon, tmp_path):
    rel = "common/sm120_tma.cuh"
    raw = [
        (f"{PREFIX}/{rel}", b"// the first copy, which an installer overwrites\n"),
        (f"{PREFIX}/mma/../{rel}", V2[rel]),
    ]
    whl = _wheel(tmp_path / "w-1.0-py3-none-any.whl", {k: v for k, v in _layer().items() if not k.endswith(rel)}, raw)
    code, doc = _check(canon, whl)
    f = by_path(doc)[rel]
    assert code == 1 and (f["status"], f["diagnosis"]) == ("changed", "duplicate-member")
    assert "2 members install to this path" in f["detail"]


def test_a_tar_hardlink_is_a_hardlink(canon, tmp_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        for name, data in _layer().items():
            if name.endswith("sm120_tma.cuh"):
                continue
            info = tarfile.TarInfo(f"pkg-1.0/{name}")
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
        info = tarfile.TarInfo(f"pkg-1.0/{PREFIX}/common/sm120_tma.cuh")
        info.type, info.linkname = tarfile.LNKTYPE, "pkg-1.0/deep_gemm/__init__.py"
        t.addfile(info)
    sdist = tmp_path / "pkg-1.0.tar.gz"
    sdist.write_bytes(buf.getvalue())
    code, doc = _check(canon, sdist)
    f = by_path(doc)["common/sm120_tma.cuh"]
    assert code == 1 and (f["status"], f["diagnosis"]) == ("changed", "hardlink")
    assert "hard link to pkg-1.0/deep_gemm/__init__.py" in f["detail"]


# ---------------------------------------------------------------- sizes


def _zeros_deflate(n_mib: int) -> tuple[bytes, bytes]:
    """(one raw deflate block that decodes to 1 MiB of zeros, an empty final block): n copies of the first then
    the second decode to n MiB of zeros, without compressing them."""
    c = zlib.compressobj(1, zlib.DEFLATED, -15)
    return c.compress(b"\0" * (1 << 20)) + c.flush(zlib.Z_FULL_FLUSH), zlib.compressobj(1, zlib.DEFLATED, -15).flush()


def _bomb_wheel(path: Path, mib: int) -> Path:
    block, tail = _zeros_deflate(mib)

    class Fake:  # hands zipfile the precomputed blocks for each 1 MiB of zeros it is given
        def compress(self, data):
            return block

        def flush(self):
            return tail

    real = zipfile._get_compressor
    zipfile._get_compressor = lambda kind, *a, **k: Fake() if kind == zipfile.ZIP_DEFLATED else real(kind, *a, **k)
    try:
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
            for name, data in _layer().items():
                if not name.endswith("sm120_tma.cuh"):
                    z.writestr(name, data, compress_type=zipfile.ZIP_STORED)
            info = zipfile.ZipInfo(f"{PREFIX}/common/sm120_tma.cuh")
            info.compress_type = zipfile.ZIP_DEFLATED
            with z.open(info, "w", force_zip64=True) as fh:
                chunk = b"\0" * (1 << 20)
                for _ in range(mib):
                    fh.write(chunk)
    finally:
        zipfile._get_compressor = real
    return path


def test_a_2_gib_member_in_a_small_wheel_is_a_bounded_finding(canon, tmp_path):
    whl = _bomb_wheel(tmp_path / "bomb-1.0-py3-none-any.whl", 2048)
    assert whl.stat().st_size < 16 << 20
    code, doc, took, rss = _measured(canon, whl, "--no-diff")
    f = by_path(doc)["common/sm120_tma.cuh"]
    assert code == 1 and (f["status"], f["diagnosis"]) == ("changed", "too-large")
    assert "2,147,483,648 bytes" in f["detail"] and "not read" in f["detail"]
    assert took < TIME_CAP and rss < MEMORY_CAP, (took, rss)


def test_a_highly_compressible_member_over_the_ratio_cap_is_not_read(canon, tmp_path):
    whl = _bomb_wheel(tmp_path / "ratio-1.0-py3-none-any.whl", 16)  # 16 MiB of zeros: under the size cap
    code, doc = _check(canon, whl)
    f = by_path(doc)["common/sm120_tma.cuh"]
    assert code == 1 and f["diagnosis"] == "too-large" and "ratio cap" in f["detail"]


def test_a_tar_bomb_stops_at_the_stream_cap(canon, tmp_path):
    """A .tar.gz whose first member is 2 GiB: the one-pass reader stops before decompressing past its cap."""
    header = tarfile.TarInfo(f"pkg-1.0/{PREFIX}/common/sm120_tma.cuh")
    header.size = 2 << 30
    head = header.tobuf(format=tarfile.GNU_FORMAT)
    block, tail = _zeros_deflate(2048)
    c = zlib.compressobj(1, zlib.DEFLATED, -15)
    body = c.compress(head) + c.flush(zlib.Z_FULL_FLUSH) + block * 2048 + tail
    crc = zlib.crc32(head)
    zeros = b"\0" * (1 << 20)
    for _ in range(2048):
        crc = zlib.crc32(zeros, crc)
    gz = (
        b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
        + body
        + struct.pack("<II", crc, (len(head) + (2 << 30)) % (1 << 32))
    )
    sdist = tmp_path / "bomb-1.0.tar.gz"
    sdist.write_bytes(gz)
    code, doc, took, rss = _measured(canon, sdist)
    assert code == 2 and doc["verdict"] == "unknown" and "uncompressed; not checked" in doc["errors"][0]
    assert took < TIME_CAP and rss < MEMORY_CAP, (took, rss)


def test_a_1_gb_header_is_hashed_streaming_and_not_diffed(canon, tmp_path):
    fork = make_fork(tmp_path, V2)
    big = fork / PREFIX / "impls/sm120_bf16_gemm.cuh"
    with open(big, "r+b") as fh:
        fh.truncate(1 << 30)  # sparse: the test costs no disk, the checker still reads 1 GiB
    code, doc, took, rss = _measured(canon, fork)
    f = by_path(doc)["impls/sm120_bf16_gemm.cuh"]
    assert code == 1 and f["diagnosis"] == "content" and "over the 1 MiB diagnosis cap: no diff" in f["detail"]
    assert f["diff"] is None and len(json.dumps(doc)) < 64 << 10
    assert took < TIME_CAP and rss < MEMORY_CAP, (took, rss)


def test_a_single_long_line_is_cut_in_every_format(canon, tmp_path):
    files = dict(V2)
    files["common/sm120_utils.cuh"] = V2["common/sm120_utils.cuh"] + b"// " + b"x" * 500_000 + b"\n"
    fork = make_fork(tmp_path, files)
    code, doc = run_json("--repo", str(canon), "--fork", str(fork))
    f = by_path(doc)["common/sm120_utils.cuh"]
    assert code == 1 and "more characters" in f["diff"] and len(f["diff"]) < 5000
    code, out, _ = run_cv("--repo", str(canon), "--fork", str(fork), "--format", "markdown")
    assert len(out) < 8000


def test_a_download_over_the_cap_is_not_kept(canon, tmp_path, monkeypatch):
    from fake_servers import FakePyPI

    from vendorkit import pypi

    index = FakePyPI()
    index.start()
    index.ranges = False  # a server without range requests: the wheel is downloaded, under the cap
    try:
        index.add("pkg", "1.0", "pkg-1.0-py3-none-any.whl", _wheel(tmp_path / "x.whl", _layer()).read_bytes())
        monkeypatch.setattr(pypi, "ARCHIVE_MAX_BYTES", 1024)
        code, out, err = run_cv("--repo", str(canon), "--fork", "pypi:pkg==1.0", "--index-url", index.url)
    finally:
        index.stop()
    assert code == 2 and "larger than 1,024 bytes" in err and "not read further" in err


@pytest.mark.parametrize(
    "data",
    [b"\x1f\x8b\x08", b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff\x03\x00", b"PK\x03\x04" + b"\0" * 10],
    ids=["gzip-3", "gzip-empty", "zip-cut"],
)
def test_archives_cut_short_are_exit_2(canon, tmp_path, data):
    """Found by tests/fuzz: tarfile raised TypeError on a gzip header cut after three bytes."""
    target = tmp_path / "cut-1.0.tar.gz"
    target.write_bytes(data)
    code, out, err = run_cv("--repo", str(canon), "--fork", str(target))
    assert code == 2 and "not a readable wheel or sdist" in err and "Traceback" not in err


@pytest.mark.parametrize("kind", [tarfile.XHDTYPE, tarfile.GNUTYPE_LONGNAME], ids=["pax", "gnu-longname"])
def test_an_extended_tar_header_declaring_gigabytes_is_not_read(canon, tmp_path, kind):
    """Found by the red team: a 1.2 KB bzip2 stream (named .tar.gz) whose first header declares a 1.5 GiB pax body;
    tarfile read it whole before any member was seen (2.5 GiB peak, no budget drawn)."""
    import bz2

    size = 1536 << 20
    ti = tarfile.TarInfo("././@PaxHeader" if kind == tarfile.XHDTYPE else "././@LongLink")
    ti.type, ti.size = kind, size
    c = bz2.BZ2Compressor(9)
    parts = [c.compress(ti.tobuf(format=tarfile.USTAR_FORMAT))]
    zeros = b"\0" * (1 << 24)
    parts += [c.compress(zeros) for _ in range(size // len(zeros))]
    parts.append(c.flush())
    bomb = tmp_path / "pkg-1.0.tar.gz"
    bomb.write_bytes(b"".join(parts))
    assert bomb.stat().st_size < 4096
    code, doc, took, rss = _measured(canon, bomb, "--prefix", PREFIX)
    assert code == 2 and "extended header" in doc["errors"][0], doc
    assert rss < 256 << 20 and took < 30, (rss, took)


def _old_gnu_sparse_header(name: str) -> bytes:
    """An old-GNU sparse member header ('S') that says an extension block follows."""
    ti = tarfile.TarInfo(name)
    buf = bytearray(ti.tobuf(format=tarfile.GNU_FORMAT)[:512])
    buf[156:157] = b"S"
    for i in range(4):
        buf[386 + 24 * i : 410 + 24 * i] = b"%011o\0" % 1 * 2
    buf[482] = 1  # "isextended"
    buf[483:495] = b"%011o\0" % 4  # realsize
    buf[148:156] = b" " * 8
    buf[148:156] = b"%06o\0 " % sum(buf)
    return bytes(buf)


def test_an_old_gnu_sparse_member_is_refused_before_its_map_is_read(canon, tmp_path):
    """Found by red team 2: 38 KB of bzip2 holding one sparse header and 900 MiB of extension blocks; tarfile
    collected every block into one list (62 s, 2.7 GB) before the member was seen."""
    ext = bytearray(b"%011o\0" % 1 * 42 + b"\0" * 8)
    ext[504] = 1  # every block says another follows
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    parts = [c.compress(_old_gnu_sparse_header(f"pkg-1.0/{PREFIX}/mma/sm120.cuh"))]
    chunk = bytes(ext) * 2048
    parts += [c.compress(chunk) for _ in range(256)]  # 256 MiB of map
    parts.append(c.flush())
    sdist = tmp_path / "pkg-1.0.tar.gz"
    sdist.write_bytes(b"".join(parts))
    code, doc, took, rss = _measured(canon, sdist, "--prefix", PREFIX)
    assert code == 2 and "GNU sparse file" in doc["errors"][0], doc
    assert rss < 256 << 20 and took < 30, (rss, took)


@pytest.mark.parametrize(
    "headers",
    [
        {"GNU.sparse.major": "1", "GNU.sparse.minor": "0", "GNU.sparse.realsize": "4"},
        {"GNU.sparse.map": "0,1", "GNU.sparse.realsize": "4"},
        {"GNU.sparse.size": "4", "GNU.sparse.numblocks": "1", "GNU.sparse.offset": "0", "GNU.sparse.numbytes": "1"},
    ],
    ids=["1.0", "0.1", "0.0"],
)
def test_a_pax_sparse_member_is_refused(canon, tmp_path, headers):
    """The pax forms of a sparse file: 1.0 reads its map from the member's data, as many blocks as it declares."""
    ti = tarfile.TarInfo(f"pkg-1.0/{PREFIX}/mma/sm120.cuh")
    data = b"99999999999999999\n" + b"1\n" * 200
    ti.size, ti.pax_headers = len(data), dict(headers)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.PAX_FORMAT) as t:
        t.addfile(ti, io.BytesIO(data))
    sdist = tmp_path / "pkg-1.0.tar.gz"
    sdist.write_bytes(buf.getvalue())
    code, doc = _check(canon, sdist, "--prefix", PREFIX)
    assert code == 2 and "GNU sparse file" in doc["errors"][0], doc


def test_an_xz_stream_declaring_a_gigabyte_dictionary_is_not_decoded(canon, tmp_path):
    """Found by red team 2: a 138 KB .tar.xz whose LZMA2 header declares a 1 GiB dictionary took 950 MB."""
    import lzma

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        data = b"0123456789abcdef" * (1 << 20)
        ti = tarfile.TarInfo("pkg-1.0/f.bin")
        ti.size = len(data)
        t.addfile(ti, io.BytesIO(data))
    raw = bytearray(
        lzma.compress(
            buf.getvalue(),
            format=lzma.FORMAT_XZ,
            check=lzma.CHECK_NONE,
            filters=[{"id": lzma.FILTER_LZMA2, "preset": 1, "dict_size": 1 << 20}],
        )
    )
    size = (raw[12] + 1) * 4  # the block header: its filter flags hold the dictionary size byte
    hdr = raw[12 : 12 + size]
    at = hdr.find(b"\x21\x01")
    hdr[at + 2] = 38  # 1 GiB
    hdr[-4:] = struct.pack("<I", zlib.crc32(bytes(hdr[:-4])))
    raw[12 : 12 + size] = hdr
    sdist = tmp_path / "pkg-1.0.tar.xz"
    sdist.write_bytes(bytes(raw))
    code, doc, took, rss = _measured(canon, sdist, "--prefix", PREFIX)
    assert code == 2 and "xz stream is not read" in doc["errors"][0] and "128 MiB" in doc["errors"][0], doc
    assert rss < 256 << 20, rss
