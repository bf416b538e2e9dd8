"""The files a `pypi:` check reads are the ones pip installs, platform by platform. Each case serves a page where
pip (23 to 25, on some common interpreter and platform) downloads a drifted file while a naive reading would pick
another; the check must read, and flag, the drifted one. Cases from the second red team, checked there against
pip itself on Python 3.10 to 3.13."""

from __future__ import annotations

import hashlib
import io
import zipfile

import pytest
from vendor_helpers import PREFIX, V2, run_json

DRIFTED = dict(V2, **{"mma/sm120.cuh": b"// a release's own edit\n"})


def _wheel(files) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for rel, data in files.items():
            z.writestr(f"{PREFIX}/{rel}", data)
    return buf.getvalue()


def _sdist(files, top: str) -> bytes:
    from test_vendor_archives import layer, sdist_bytes

    return sdist_bytes(layer(files), top=top)


GOOD, EVIL = _wheel(V2), _wheel(DRIFTED)


def _a(path: str, data: bytes, **attrs) -> str:
    extra = "".join(f' {k.replace("_", "-")}="{v}"' for k, v in attrs.items())
    sha = hashlib.sha256(data).hexdigest()
    return f'<a href="/raw/{path}#sha256={sha}"{extra}>{path.rsplit("/", 1)[-1]}</a><br>\n'


CASES = {
    # a cp-abi3 wheel for "any" platform is supported nowhere: the 2.0 wheel is what pip installs
    "abi3-any": ([("pkg-3.0-cp38-abi3-any.whl", GOOD, {}), ("pkg-2.0-py3-none-any.whl", EVIL, {})], None),
    # tags compare lower-cased
    "upper-case-tags": ([("pkg-3.0-PY3-NONE-ANY.whl", EVIL, {}), ("pkg-2.0-py3-none-any.whl", GOOD, {})], None),
    # an upper-case sdist extension is not an archive pip takes
    "upper-case-extension": ([("pkg-3.0.TAR.GZ", GOOD, {}), ("pkg-2.0-py3-none-any.whl", EVIL, {})], None),
    # a .zip under a macosx10 path is skipped
    "macosx10-zip": ([("macosx10/pkg-3.0.zip", GOOD, {}), ("pkg-2.0-py3-none-any.whl", EVIL, {})], None),
    # %2F in the last segment: pip unquotes the path, then takes the basename
    "percent-2F": ([("x%2Fpkg-3.0-py3-none-any.whl", EVIL, {}), ("pkg-2.0-py3-none-any.whl", GOOD, {})], None),
    # a name quoted twice: pip's Link.filename unquotes twice
    "double-quoted": ([("pkg-3%252E0-py3-none-any.whl", EVIL, {}), ("pkg-2.0-py3-none-any.whl", GOOD, {})], None),
    # only some micro releases satisfy it: 3.12.1 does
    "requires-python-micro": (
        [
            ("pkg-3.0-py3-none-any.whl", EVIL, {"data_requires_python": "&gt;=3.12.1,&lt;3.12.50"}),
            ("pkg-2.0-py3-none-any.whl", GOOD, {}),
        ],
        None,
    ),
    # an invalid specifier is ignored by pip
    "requires-python-invalid": (
        [("pkg-3.0-py3-none-any.whl", EVIL, {"data_requires_python": "~=3"}), ("pkg-2.0-py3-none-any.whl", GOOD, {})],
        None,
    ),
    # a trailing comma is fine for packaging: >=3.99 excludes every Python, pip installs 2.0
    "requires-python-trailing-comma": (
        [
            ("pkg-3.0-py3-none-any.whl", GOOD, {"data_requires_python": "&gt;=3.99,"}),
            ("pkg-2.0-py3-none-any.whl", EVIL, {}),
        ],
        None,
    ),
    # ==1.0 matches 1.0+local (PEP 440)
    "local-version": ([("pkg-1.0+evil-py3-none-any.whl", EVIL, {}), ("pkg-1.0-py3-none-any.whl", GOOD, {})], "1.0"),
    # a wheel needing glibc 2.99 / macOS 99 installs nowhere common: pip falls back to 2.0
    "future-glibc-macos": (
        [
            ("pkg-3.0-py3-none-manylinux_2_99_x86_64.macosx_99_0_arm64.whl", GOOD, {}),
            ("pkg-2.0-py3-none-any.whl", EVIL, {}),
        ],
        None,
    ),
    # macOS x86-64 takes fat32
    "mac-fat32": ([("pkg-3.0-py3-none-macosx_10_9_fat32.whl", EVIL, {}), ("pkg-2.0-py3-none-any.whl", GOOD, {})], None),
    # free-threaded CPython cannot use abi3 wheels: there pip installs 2.0
    "free-threaded": (
        [
            ("pkg-3.0-cp38-abi3-manylinux_2_17_x86_64.macosx_11_0_arm64.win_amd64.win32.whl", GOOD, {}),
            ("pkg-2.0-py3-none-any.whl", EVIL, {}),
        ],
        None,
    ),
    # Platforms and Pythons outside the common set, named by the files themselves: pip there installs 3.0
    "newer-glibc": (
        [("pkg-3.0-cp312-cp312-manylinux_2_41_x86_64.whl", EVIL, {}), ("pkg-2.0-py3-none-any.whl", GOOD, {})],
        None,
    ),
    "another-arch": (
        [("pkg-3.0-py3-none-manylinux_2_17_riscv64.whl", EVIL, {}), ("pkg-2.0-py3-none-any.whl", GOOD, {})],
        None,
    ),
    "windows-arm64": ([("pkg-3.0-py3-none-win_arm64.whl", EVIL, {}), ("pkg-2.0-py3-none-any.whl", GOOD, {})], None),
    "a-platform-of-no-known-family": (
        [("pkg-3.0-py3-none-ios_13_0_arm64_iphoneos.whl", EVIL, {}), ("pkg-2.0-py3-none-any.whl", GOOD, {})],
        None,
    ),
    "a-newer-python-tag": (
        [("pkg-3.0-cp316-cp316-manylinux_2_17_x86_64.whl", EVIL, {}), ("pkg-2.0-py3-none-any.whl", GOOD, {})],
        None,
    ),
    "a-newer-python-required": (
        [
            ("pkg-3.0-py3-none-any.whl", EVIL, {"data_requires_python": "&gt;=3.16"}),
            ("pkg-2.0-py3-none-any.whl", GOOD, {}),
        ],
        None,
    ),
    "an-older-python-only": (
        [
            ("pkg-3.0-py3-none-any.whl", EVIL, {"data_requires_python": "&lt;3.7"}),
            ("pkg-2.0-py3-none-any.whl", GOOD, {}),
        ],
        None,
    ),
    "an-older-macos": (
        [("pkg-1.5-py3-none-macosx_10_9_x86_64.whl", EVIL, {}), ("pkg-2.0-py3-none-macosx_10_14_x86_64.whl", GOOD, {})],
        None,
    ),
    "pypy": (
        [("pkg-3.0-pp310-pypy310_pp73-manylinux_2_17_x86_64.whl", EVIL, {}), ("pkg-2.0-py3-none-any.whl", GOOD, {})],
        None,
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_file_pip_installs_is_checked(canon, index, case):
    from urllib.parse import unquote

    files, pinned = CASES[case]
    for path, data, _ in files:
        index.raw["/raw/" + unquote(unquote(path))] = data
    index.page = (
        ("<html><body>" + "".join(_a(p, d, **a) for p, d, a in files) + "</body></html>").encode(),
        {"Content-Type": "text/html"},
    )
    spec = "pypi:pkg" + (f"=={pinned}" if pinned else "")
    code, doc = run_json("--repo", str(canon), "--fork", spec, "--index-url", index.url)
    assert code == 1 and doc["verdict"] == "drifted", (case, doc.get("errors"), doc.get("distributions"))


def test_an_egg_fragment_gives_an_sdist_its_version(canon, index):
    """pip reads an sdist link's version from its #egg= fragment: pkg-0.1.tar.gz#egg=pkg-9.0 is version 9.0."""
    evil = _sdist(DRIFTED, "pkg-0.1")
    index.raw["/raw/pkg-0.1.tar.gz"] = evil
    index.raw["/raw/pkg-2.0-py3-none-any.whl"] = GOOD
    sha = hashlib.sha256(evil).hexdigest()
    index.page = (
        (
            f'<a href="/raw/pkg-0.1.tar.gz#sha256={sha}&egg=pkg-9.0">pkg-0.1.tar.gz</a>'
            + _a("pkg-2.0-py3-none-any.whl", GOOD)
        ).encode(),
        {"Content-Type": "text/html"},
    )
    code, doc = run_json("--repo", str(canon), "--fork", "pypi:pkg", "--index-url", index.url)
    assert (
        code == 1
        and doc["distributions"][0]["file"] == "pkg-0.1.tar.gz"
        and doc["distributions"][0]["version"] == "9.0"
    )


def test_a_local_find_links_page_may_name_local_files(canon, index, monkeypatch, tmp_path):
    import os
    import urllib.request

    index.add("pkg", "1.0", "pkg-1.0-py3-none-any.whl", GOOD)
    (tmp_path / "pkg-2.0-py3-none-any.whl").write_bytes(EVIL)
    url = "file:" + urllib.request.pathname2url(str(tmp_path / "pkg-2.0-py3-none-any.whl"))
    (tmp_path / "links.html").write_text(f'<a href="{url}">pkg-2.0-py3-none-any.whl</a>')
    for var in ("PIP_EXTRA_INDEX_URL", "PIP_NO_INDEX"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", index.url)
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "links.html"))
    code, doc = run_json("--repo", str(canon), "--fork", "pypi:pkg")
    assert code == 1 and doc["distributions"][0]["file"] == "pkg-2.0-py3-none-any.whl"


def test_where_names_the_platform_and_python_a_file_is_installed_on(canon, index):
    for fn, data in (("pkg-3.0-cp312-cp312-manylinux_2_41_riscv64.whl", EVIL), ("pkg-2.0-py3-none-any.whl", GOOD)):
        index.add("pkg", "x", fn, data)
    code, doc = run_json("--repo", str(canon), "--fork", "pypi:pkg", "--index-url", index.url)
    where = {d["file"]: d["chosen_for"] for d in doc["distributions"]}
    assert (
        code == 1 and where["pkg-3.0-cp312-cp312-manylinux_2_41_riscv64.whl"] == "linux-riscv64 glibc 2.41+ (py3.12)"
    ), where


def test_a_page_naming_thousands_of_platforms_is_refused_before_any_download(canon, index):
    page = "".join(_a(f"pkg-1.0-py3-none-manylinux_2_{n}_x86_64.whl", GOOD) for n in range(3000))
    index.page = (f"<html><body>{page}</body></html>".encode(), {"Content-Type": "text/html"})
    code, doc = run_json("--repo", str(canon), "--fork", "pypi:pkg", "--index-url", index.url)
    assert code == 2 and "environments pip's choice is taken in" in doc["errors"][0], doc
    assert not [p for p in index.log if p.startswith("/raw/")]
