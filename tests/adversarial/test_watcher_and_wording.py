"""The watcher's smaller promises and the report's wording, as issue 24 found them broken."""

from __future__ import annotations

import io
import zipfile

from fake_servers import FakePyPI
from vendor_helpers import PREFIX, V2, by_path, commit_all, make_fork, run_json, write_tree
from watch_helpers import config, entry, remote_fork, watch

ISSUES = ["--issues", "--repo", "us/deep_gemm_sm120"]


def _wheel(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("pkg/__init__.py", b"")
        for rel, data in files.items():
            z.writestr(f"{PREFIX}/{rel}", data)
    return buf.getvalue()


def test_a_new_commit_with_the_same_findings_edits_nothing(canon, gh, tmp_path):
    files = dict(V2, **{"common/sm120_tma.cuh": b"// hotfix\n"})
    fork = remote_fork(tmp_path, gh, "org/fork", files)
    cfg = config(tmp_path, entry("fork", "org/fork"))
    watch(canon, gh, cfg, tmp_path, *ISSUES)
    store = gh.issues["us/deep_gemm_sm120"]
    first = store[0]["body"]
    write_tree(fork, {"README.md": b"an unrelated change\n"})
    commit_all(fork, "unrelated")
    gh.log.clear()
    code, doc, _ = watch(canon, gh, cfg, tmp_path, *ISSUES)
    assert code == 1 and gh.writes() == [] and doc["downstreams"][0]["issue"] == "unchanged #1"
    assert store[0]["body"] == first


def test_pypi_issue_closes_with_the_package_and_version(canon, gh, tmp_path):
    index = FakePyPI()
    index.start()
    try:
        index.add("pkg", "1.0", "pkg-1.0-py3-none-any.whl", _wheel(dict(V2, **{"mma/sm120.cuh": b"// edit\n"})))
        cfg = config(tmp_path, {"name": "pkg", "pypi": "pkg", "track": "latest"})
        watch(canon, gh, cfg, tmp_path, *ISSUES, "--index-url", index.url)
        index.add("pkg", "1.1", "pkg-1.1-py3-none-any.whl", _wheel(V2))
        code, doc, _ = watch(canon, gh, cfg, tmp_path, *ISSUES, "--index-url", index.url)
    finally:
        index.stop()
    assert code == 0 and gh.issues["us/deep_gemm_sm120"][0]["state"] == "closed"
    comment = gh.comments[-1][2]
    assert "None" not in comment and "`pkg==1.1 (PyPI)`" in comment and "back in sync" in comment


def test_a_not_vendored_issue_does_not_say_it_vendors_the_layer(canon, gh, tmp_path):
    own = {rel: b"// another project's SM120 header " + rel.encode() * 30 + b"\n" for rel in V2}
    remote_fork(tmp_path, gh, "org/own", own)
    cfg = config(tmp_path, entry("own", "org/own"))
    code, doc, _ = watch(canon, gh, cfg, tmp_path, *ISSUES)
    body = gh.issues["us/deep_gemm_sm120"][0]["body"]
    assert code == 1 and doc["downstreams"][0]["report"]["verdict"] == "not-vendored"
    opening = body.splitlines()[2]
    assert "vendors the SM120 device layer" not in opening and "none of them equals a file" in opening


def test_a_one_line_edit_is_never_100_percent_similar(canon, tmp_path):
    big = b"".join(b"// line %d of a long header\n" % i for i in range(363))
    canon_files = dict(V2)
    edited = big.replace(b"// line 200 of", b"// LINE 200 of")
    files = dict(canon_files, **{"common/sm120_tma.cuh": V2["common/sm120_tma.cuh"] + edited})
    code, doc = run_json("--repo", str(canon), "--fork", str(make_fork(tmp_path, files)))
    f = by_path(doc)["common/sm120_tma.cuh"]
    assert code == 1 and "100 %" not in f["detail"] and f["similarity"] < 1.0
    assert "0 of 3 lines removed or changed, 363 added" in f["detail"]
    from vendorkit.diagnose import percent, similarity

    s = similarity(big, edited)
    assert percent(s.ratio) == "99.7" and "1 of 363 lines removed or changed, 1 added" in s.describe()
