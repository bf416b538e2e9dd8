"""`pypi:` sources through a Simple API index on 127.0.0.1, as pip reaches one: JSON or HTML pages, relative
file URLs, yanked and pre-release files, the index from pip's environment and configuration, range reads."""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path

import pytest
from vendor_helpers import PREFIX, V1, V2, make_canonical, run_cv, run_json


@pytest.fixture(scope="module")
def canon(tmp_path_factory) -> Path:
    return make_canonical(tmp_path_factory.mktemp("canon"))


def wheel(files: dict[str, bytes], pad: int = 0) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("pkg/__init__.py", b"")
        if pad:  # a big member the check never needs (think of vLLM's compiled extensions)
            z.writestr("pkg/_C.so", os.urandom(pad), compress_type=zipfile.ZIP_STORED)
        for rel, data in files.items():
            z.writestr(f"{PREFIX}/{rel}", data)
    return buf.getvalue()


@pytest.mark.parametrize("json_api", [True, False], ids=["pep691-json", "pep503-html"])
def test_newest_release_through_the_simple_api(canon, index, json_api):
    index.json_api = json_api
    index.add("sgl-deep-gemm", "1.0", "sgl_deep_gemm-1.0-py3-none-any.whl", wheel(V1))
    index.add("sgl-deep-gemm", "1.1", "sgl_deep_gemm-1.1-py3-none-any.whl", wheel(V2))
    index.add("sgl-deep-gemm", "1.2rc1", "sgl_deep_gemm-1.2rc1-py3-none-any.whl", wheel(V1))  # pre-release
    index.add("sgl-deep-gemm", "1.3", "sgl_deep_gemm-1.3-py3-none-any.whl", wheel(V1))  # yanked
    index.yanked.add("sgl_deep_gemm-1.3-py3-none-any.whl")
    code, doc = run_json("--repo", str(canon), "--fork", "pypi:sgl_deep_gemm", "--index-url", index.url)
    assert code == 0 and doc["target"] == "pypi:sgl_deep_gemm==1.1 (sgl_deep_gemm-1.1-py3-none-any.whl)"
    assert "/simple/sgl-deep-gemm/" in index.log  # the normalized project name, as pip asks
    code, doc = run_json("--repo", str(canon), "--fork", "pypi:sgl-deep-gemm==1.0", "--index-url", index.url)
    assert code == 1 and doc["verdict"] == "stale"
    code, doc = run_json("--repo", str(canon), "--fork", "pypi:sgl-deep-gemm==1.3", "--index-url", index.url)
    assert "==1.3" in doc["target"]  # a pinned version takes a yanked file, as pip does


def test_the_index_comes_from_pip_when_not_given(canon, index, monkeypatch, tmp_path):
    index.add("pkg", "1.0", "pkg-1.0-py3-none-any.whl", wheel(V2))
    monkeypatch.setenv("PIP_INDEX_URL", index.url)
    assert run_cv("--repo", str(canon), "--fork", "pypi:pkg")[0] == 0
    monkeypatch.delenv("PIP_INDEX_URL")
    conf = tmp_path / "pip.conf"
    conf.write_text(f"[global]\nindex-url = {index.url}\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    assert run_cv("--repo", str(canon), "--fork", "pypi:pkg")[0] == 0


def test_a_big_wheel_is_downloaded_and_checked_unless_range_reads_are_asked_for(canon, index):
    data = wheel(V2, pad=48 << 20)
    index.add("big", "1.0", "big-1.0-cp312-cp312-manylinux_2_28_x86_64.whl", data)
    code, doc = run_json("--repo", str(canon), "--fork", "pypi:big", "--index-url", index.url)
    assert code == 0 and doc["verdict"] == "in-sync" and index.served == len(data)  # the whole file, verified
    assert doc["distributions"][0]["integrity"] == "sha256 verified"
    index.served = 0
    code, doc = run_json("--repo", str(canon), "--fork", "pypi:big", "--index-url", index.url, "--range-reads")
    assert code == 0 and doc["verdict"] == "in-sync"
    assert index.served < 2 << 20, index.served  # the zip directory and five headers, not 48 MB
    assert "unverified" in doc["distributions"][0]["integrity"] and any("unverified" in n for n in doc["notes"])
    code, out, _ = run_cv("--repo", str(canon), "--fork", "pypi:big", "--index-url", index.url, "--range-reads")
    assert "range reads (unverified" in out
    index.served, index.ranges = 0, False  # a server without ranges: --range-reads falls back to the download
    code, doc = run_json("--repo", str(canon), "--fork", "pypi:big", "--index-url", index.url, "--range-reads")
    assert code == 0 and index.served == len(data) and doc["distributions"][0]["integrity"] == "sha256 verified"


def test_index_urls_that_are_not_http_are_usage_errors(canon, index):
    code, _, err = run_cv("--repo", str(canon), "--fork", "pypi:pkg", "--index-url", "ftp://x/simple")
    assert code == 3 and "expected http(s)" in err
