"""`pypi:` is checked as pip installs it: every file of the release (a pure wheel in sync does not hide a drifted
platform wheel), each downloaded and checked against the index's sha256 (a server whose range answers are not its
downloads cannot certify a drifted wheel), and the index's server cannot stall a run or blow up its memory."""
from __future__ import annotations

import io
import time
import zipfile
import zlib

import pytest

from test_archives_and_limits import _measured_spec
from vendor_helpers import PREFIX, V2, run_cv, run_json


def _wheel(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("pkg/__init__.py", b"")
        for rel, data in files.items():
            z.writestr(f"{PREFIX}/{rel}", data)
    return buf.getvalue()


@pytest.fixture()
def index(monkeypatch):
    from fake_downstreams import FakePyPI

    for var in ("PIP_INDEX_URL", "SM120_PYPI_INDEX"):
        monkeypatch.delenv(var, raising=False)
    fake = FakePyPI()
    fake.start()
    yield fake
    fake.stop()


DRIFTED = dict(V2, **{"mma/sm120.cuh": b"// a platform build's own edit\n"})


def test_a_pure_wheel_in_sync_does_not_hide_a_drifted_platform_wheel(canon, index):
    index.add("pkg", "1.0", "pkg-1.0-py3-none-any.whl", _wheel(V2))
    index.add("pkg", "1.0", "pkg-1.0-cp312-cp312-manylinux_2_28_x86_64.whl", _wheel(DRIFTED))
    code, doc = run_json("--repo", str(canon), "--fork", "pypi:pkg==1.0", "--index-url", index.url)
    dists = {d["file"]: d for d in doc["distributions"]}
    assert code == 1 and doc["verdict"] == "drifted"
    assert dists["pkg-1.0-py3-none-any.whl"]["verdict"] == "in-sync"
    assert dists["pkg-1.0-cp312-cp312-manylinux_2_28_x86_64.whl"]["verdict"] == "drifted"
    assert dists["pkg-1.0-cp312-cp312-manylinux_2_28_x86_64.whl"]["platforms"] == "cp312-cp312-manylinux_2_28_x86_64"
    bad = [f for f in doc["files"] if f["status"] != "ok"]
    assert [(f["path"], f["dist"]) for f in bad] == [("mma/sm120.cuh", "pkg-1.0-cp312-cp312-manylinux_2_28_x86_64.whl")]
    code, out, _ = run_cv("--repo", str(canon), "--fork", "pypi:pkg==1.0", "--index-url", index.url)
    assert "(in pkg-1.0-cp312-cp312-manylinux_2_28_x86_64.whl)" in out


def test_range_answers_that_are_not_the_download_cannot_certify(canon, index):
    """The index lists the drifted wheel with its true sha256; ranges serve a pristine one. The default check
    downloads and verifies: drifted. --range-reads says in-sync, and says it is unverified."""
    name = "pkg-1.0-py3-none-any.whl"
    index.add("pkg", "1.0", name, _wheel(DRIFTED))
    index.range_bytes[name] = _wheel(V2)
    code, doc = run_json("--repo", str(canon), "--fork", "pypi:pkg==1.0", "--index-url", index.url)
    assert code == 1 and doc["verdict"] == "drifted" and doc["distributions"][0]["integrity"] == "sha256 verified"
    code, doc = run_json("--repo", str(canon), "--fork", "pypi:pkg==1.0", "--index-url", index.url, "--range-reads")
    assert code == 0 and "unverified" in doc["distributions"][0]["integrity"]
    assert any(n.startswith("unverified:") for n in doc["notes"])


def _gzip_bomb(decoded: int) -> bytes:
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = b" " * (1 << 20)
    out = [z.compress(chunk) for _ in range(decoded >> 20)]
    return b"".join(out) + z.flush()


def test_a_gzip_encoded_index_page_bomb_stops_at_its_cap(canon, index):
    bomb = _gzip_bomb(3 << 30)  # 3 GiB of spaces in about 3 MB
    assert len(bomb) < 4 << 20
    index.page = (bomb, {"Content-Encoding": "gzip", "Content-Type": "text/html"})
    code, doc, took, rss = _measured_spec(canon, "pypi:pkg", "--index-url", index.url)
    assert code == 2 and "larger than" in doc["errors"][0], doc
    assert rss < 256 << 20 and took < 30, (rss, took)


def test_a_page_served_one_byte_at_a_time_hits_the_request_deadline(canon, index):
    index.page = (b"<html>" + b" " * 200, {})
    index.trickle = 0.25  # 50 s for the page
    t0 = time.monotonic()
    code, _, err = run_cv("--repo", str(canon), "--fork", "pypi:pkg", "--index-url", index.url,
                          "--budget", "request_seconds=2")
    assert code == 2 and "seconds for one network request" in err and "--budget request_seconds=N" in err
    assert time.monotonic() - t0 < 10


def test_a_zip_directory_claiming_gigabytes_is_refused_on_range_reads(canon, index):
    import struct

    data = bytearray(_wheel(V2))
    eocd = data.rfind(b"PK\x05\x06")
    struct.pack_into("<I", data, eocd + 12, 1_400_000_000)  # size of the central directory
    struct.pack_into("<I", data, eocd + 16, 0)              # ... starting at offset 0
    index.add("pkg", "1.0", "pkg-1.0-py3-none-any.whl", bytes(data))
    code, doc, took, rss = _measured_spec(canon, "pypi:pkg==1.0", "--index-url", index.url, "--range-reads")
    assert code == 2 and rss < 256 << 20 and took < 30, (doc, rss, took)


@pytest.mark.parametrize("page", [
    b'{"meta": {"api-version": "1.1"}, "files": [{"filename": "pkg-1.0-py3-none-any.whl", "url": "../../files/'
    b'pkg-1.0-py3-none-any.whl", "hashes": ["sha256", "0"]}]}',
    b'{"files": {"not": "a list"}}',
    b'{"files": [1, "x", null, {"filename": 5}]}',
    b"[" * 100_000,
    b'{"files": [{"filename": "pkg-1.0-py3-none-any.whl", "url": "javascript:alert(1)"}]}',
])
def test_malformed_index_pages_never_end_in_a_traceback(canon, index, page):
    index.add("pkg", "1.0", "pkg-1.0-py3-none-any.whl", _wheel(V2))
    index.page = (page, {"Content-Type": "application/vnd.pypi.simple.v1+json"})
    code, out, err = run_cv("--repo", str(canon), "--fork", "pypi:pkg", "--index-url", index.url)
    assert code in (0, 2) and "Traceback" not in err and err.count("\n") <= 1, err
