"""`pypi:` is checked as pip installs it: every file of the release (a pure wheel in sync does not hide a drifted
platform wheel), each downloaded and checked against the index's sha256 (a server whose range answers are not its
downloads cannot certify a drifted wheel), and the index's server cannot stall a run or blow up its memory."""

from __future__ import annotations

import io
import os
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
    code, _, err = run_cv(
        "--repo", str(canon), "--fork", "pypi:pkg", "--index-url", index.url, "--budget", "request_seconds=2"
    )
    assert code == 2 and "seconds for one network request" in err and "--budget request_seconds=N" in err
    assert time.monotonic() - t0 < 10


def test_a_zip_directory_claiming_gigabytes_is_refused_on_range_reads(canon, index):
    import struct

    data = bytearray(_wheel(V2))
    eocd = data.rfind(b"PK\x05\x06")
    struct.pack_into("<I", data, eocd + 12, 1_400_000_000)  # size of the central directory
    struct.pack_into("<I", data, eocd + 16, 0)  # ... starting at offset 0
    index.add("pkg", "1.0", "pkg-1.0-py3-none-any.whl", bytes(data))
    code, doc, took, rss = _measured_spec(canon, "pypi:pkg==1.0", "--index-url", index.url, "--range-reads")
    assert code == 2 and rss < 256 << 20 and took < 30, (doc, rss, took)


@pytest.mark.parametrize(
    "page",
    [
        b'{"meta": {"api-version": "1.1"}, "files": [{"filename": "pkg-1.0-py3-none-any.whl", "url": "../../files/'
        b'pkg-1.0-py3-none-any.whl", "hashes": ["sha256", "0"]}]}',
        b'{"files": {"not": "a list"}}',
        b'{"files": [1, "x", null, {"filename": 5}]}',
        b"[" * 100_000,
        b'{"files": [{"filename": "pkg-1.0-py3-none-any.whl", "url": "javascript:alert(1)"}]}',
    ],
)
def test_malformed_index_pages_never_end_in_a_traceback(canon, index, page):
    index.add("pkg", "1.0", "pkg-1.0-py3-none-any.whl", _wheel(V2))
    index.page = (page, {"Content-Type": "application/vnd.pypi.simple.v1+json"})
    code, out, err = run_cv("--repo", str(canon), "--fork", "pypi:pkg", "--index-url", index.url)
    assert code in (0, 2) and "Traceback" not in err and err.count("\n") <= 1, err


# ---------------------------------------------------------------- which files pip installs (the red team's A-series)


def _page(index, anchors: list[str], base: str = "") -> None:
    body = "<!DOCTYPE html><html><head>" + base + "</head><body>" + "".join(anchors) + "</body></html>"
    index.page = (body.encode(), {"Content-Type": "text/html"})


def _sha(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


EVIL = _wheel(DRIFTED)
GOOD = _wheel(V2)


def _check(canon, index, spec="pypi:pkg", *extra):
    return run_json("--repo", str(canon), "--fork", spec, "--index-url", index.url, *extra)


@pytest.mark.parametrize(
    "case", ["anchor-text", "query-string", "long-build-tag", "bare-yanked", "content-type-parameter"]
)
def test_files_are_named_and_kept_as_pip_does(canon, index, case):
    """pip names a file from its URL's path (never the anchor text), keeps a URL's query out of the name, takes any
    build tag, does not count a bare `data-yanked` (no value) as yanked, and reads `text/html; ...` as HTML."""
    name = "pkg-2.0-" + ("1" + "x" * 209 + "-" if case == "long-build-tag" else "") + "py3-none-any.whl"
    index.add("pkg", "2.0", name, EVIL)
    index.add("pkg", "1.0", "pkg-1.0-py3-none-any.whl", GOOD)
    good = f'<a href="../../files/pkg-1.0-py3-none-any.whl#sha256={_sha(GOOD)}">pkg-1.0-py3-none-any.whl</a>'
    href = f"../../files/{name}" + ("?x=1" if case == "query-string" else "") + f"#sha256={_sha(EVIL)}"
    text = {"anchor-text": "other-1.0.tar.gz", "query-string": ""}.get(case, name)
    attrs = " data-yanked" if case == "bare-yanked" else ""
    _page(index, [good, f'<a href="{href}"{attrs}>{text}</a>'])
    if case == "content-type-parameter":
        index.page = (index.page[0], {"Content-Type": "text/html; variant=json"})
    code, doc = _check(canon, index)
    assert code == 1 and doc["verdict"] == "drifted" and name in {d["file"] for d in doc["distributions"]}, doc


def test_a_json_page_names_files_by_url(canon, index):
    import json as _json

    index.add("pkg", "2.0", "pkg-2.0-py3-none-any.whl", EVIL)
    doc = {
        "meta": {"api-version": "1.1"},
        "files": [
            {
                "filename": "README.tar.gz",
                "url": "../../files/pkg-2.0-py3-none-any.whl",
                "hashes": {"sha256": _sha(EVIL)},
            }
        ],
    }
    index.page = (_json.dumps(doc).encode(), {"Content-Type": "application/vnd.pypi.simple.v1+json"})
    code, doc = _check(canon, index)
    assert code == 1 and doc["distributions"][0]["file"] == "pkg-2.0-py3-none-any.whl"


@pytest.mark.parametrize(
    "evil, good",
    [
        ("pkg-1.0_1-py3-none-any.whl", "pkg-1.0-py3-none-any.whl"),  # 1.0_1 is 1.0.post1 to pip: newer
        ("pkg-1.0.0-cp312-cp312-manylinux_2_28_x86_64.whl", "pkg-1.0-py3-none-any.whl"),  # 1.0.0 == 1.0
        ("pkg-1.0-2.tar.gz", "pkg-1.0-py3-none-any.whl"),  # an sdist of 1.0.post2
    ],
    ids=["underscore", "equal-versions", "sdist-dash"],
)
def test_versions_are_read_as_pip_reads_them(canon, index, evil, good):
    from test_vendor_archives import layer, sdist_bytes

    data = sdist_bytes(layer(DRIFTED), top="pkg-1.0-2") if evil.endswith(".tar.gz") else EVIL
    index.add("pkg", "x", evil, data)
    index.add("pkg", "1.0", good, GOOD)
    code, doc = _check(canon, index)
    assert code == 1 and evil in {d["file"] for d in doc["distributions"]}, doc


def test_where_the_newest_release_installs_nowhere_pip_falls_back(canon, index):
    """The newest release requires Python 3.99, the next only ships a win32 wheel: pip installs older releases on
    every common platform, and those are checked, each named with where it is installed; the newest is checked
    too, for the Python that would install it."""
    import json as _json

    files = [
        ("pkg-3.0-py3-none-any.whl", GOOD, ">=3.99"),
        ("pkg-2.0-cp311-cp311-win32.whl", EVIL, None),
        ("pkg-1.0-py3-none-any.whl", EVIL, None),
    ]
    for fn, data, _ in files:
        index.add("pkg", "x", fn, data)
    doc = {
        "meta": {"api-version": "1.1"},
        "files": [
            {"filename": fn, "url": f"../../files/{fn}", "hashes": {"sha256": _sha(d)}, "requires-python": rp}
            for fn, d, rp in files
        ],
    }
    index.page = (_json.dumps(doc).encode(), {"Content-Type": "application/vnd.pypi.simple.v1+json"})
    code, doc = _check(canon, index)
    seen = {d["file"]: d for d in doc["distributions"]}
    assert code == 1 and set(seen) == {fn for fn, _, _ in files}, seen
    assert seen["pkg-2.0-cp311-cp311-win32.whl"]["chosen_for"] == "win32 (py3.11)"
    assert seen["pkg-1.0-py3-none-any.whl"]["chosen_for"].startswith("linux-x86_64, linux-aarch64")
    assert seen["pkg-3.0-py3-none-any.whl"]["chosen_for"].endswith("(py3.99+, 3.99t+)")
    assert seen["pkg-3.0-py3-none-any.whl"]["verdict"] == "in-sync"


def test_extra_indexes_pip_reads_are_read(canon, index, monkeypatch):
    from fake_servers import FakePyPI

    other = FakePyPI()
    other.start()
    try:
        index.add("pkg", "1.0", "pkg-1.0-py3-none-any.whl", GOOD)
        other.add("pkg", "2.0", "pkg-2.0-py3-none-any.whl", EVIL)
        monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
        monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
        monkeypatch.setenv("PIP_INDEX_URL", index.url)
        monkeypatch.setenv("PIP_EXTRA_INDEX_URL", other.url)
        code, doc = run_json("--repo", str(canon), "--fork", "pypi:pkg")
        assert code == 1 and doc["distributions"][0]["file"] == "pkg-2.0-py3-none-any.whl"
    finally:
        other.stop()


def test_a_find_links_directory_pip_reads_is_read(canon, index, monkeypatch, tmp_path):
    index.add("pkg", "1.0", "pkg-1.0-py3-none-any.whl", GOOD)
    (tmp_path / "links").mkdir()
    (tmp_path / "links" / "pkg-2.0-py3-none-any.whl").write_bytes(EVIL)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", index.url)
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "links"))
    code, doc = run_json("--repo", str(canon), "--fork", "pypi:pkg")
    assert code == 1 and doc["distributions"][0]["file"] == "pkg-2.0-py3-none-any.whl"


def test_a_base_href_is_resolved_as_pip_resolves_it(canon, index):
    index.add("pkg", "1.0", "pkg-1.0-py3-none-any.whl", EVIL)
    _page(index, ['<a href="pkg-1.0-py3-none-any.whl">pkg-1.0-py3-none-any.whl</a>'], base='<base href="/files/">')
    code, doc = _check(canon, index)
    assert code == 1 and doc["verdict"] == "drifted"


def test_two_copies_in_one_file_of_a_release_are_ambiguous(canon, index):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for rel, data in V2.items():
            z.writestr(f"{PREFIX}/{rel}", data)
            z.writestr(f"pkg/include/deep_gemm/{rel}", DRIFTED[rel])
    index.add("pkg", "1.0", "pkg-1.0-cp311-cp311-manylinux_2_28_x86_64.whl", buf.getvalue())
    index.add("pkg", "1.0", "pkg-1.0-py3-none-any.whl", GOOD)
    code, _, err = run_cv("--repo", str(canon), "--fork", "pypi:pkg==1.0", "--index-url", index.url)
    assert code == 3 and "ambiguous prefix" in err and "manylinux" in err
