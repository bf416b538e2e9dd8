"""Upstream lineages (issue 26): import another canonical source's manifests, check trees against them, sync from
them when their bytes are at hand, and say per file which release of which lineage it is."""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import pytest
from vendor_helpers import (
    PREFIX,
    V2,
    by_path,
    commit_all,
    git,
    init_repo,
    make_canonical,
    make_fork,
    run_cv,
    run_json,
    write_tree,
)

ROOT_UP = "deep_gemm/include/deep_gemm"
# an upstream's two releases: one file changes, one is added; `layout/sparse.cuh` breaks our naming rule on purpose
U1 = {
    "common/sm120_utils.cuh": b"// upstream utils v1\n",
    "impls/sm120_gemm.cuh": b"// upstream gemm v1\n",
    "layout/sparse.cuh": b"// upstream layout v1\n",
}
U2 = dict(U1, **{"impls/sm120_gemm.cuh": b"// upstream gemm v2\n", "impls/sm120_new.cuh": b"// upstream new v2\n"})


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def vendor_json(tag: str, files: dict[str, bytes]) -> str:
    return json.dumps(
        {
            "upstream": "someone/DeepGEMM-sm120",
            "tag": tag,
            "files": {f"{ROOT_UP}/{p}": sha(b) for p, b in sorted(files.items())},
        },
        indent=2,
    )


@pytest.fixture(scope="module")
def upstream(tmp_path_factory) -> Path:
    """The upstream's own git repository: v0.1.0 and v0.2.0 tagged, a VENDOR-sm120.json at each."""
    repo = init_repo(tmp_path_factory.mktemp("up") / "DeepGEMM-sm120")
    for tag, files in (("v0.1.0", U1), ("v0.2.0", U2)):
        write_tree(repo / ROOT_UP, files)
        (repo / "VENDOR-sm120.json").write_text(vendor_json(tag, files))
        commit_all(repo, tag)
        git(repo, "tag", tag)
    return repo


@pytest.fixture(scope="module")
def canon(tmp_path_factory, upstream) -> Path:
    """Our canonical repo with the upstream imported from its VENDOR-sm120.json history (hashes only)."""
    repo = make_canonical(tmp_path_factory.mktemp("canon"))
    for tag in ("v0.1.0", "v0.2.0"):
        f = repo.parent / f"vendor-{tag}.json"
        f.write_text(git(upstream, "show", f"{tag}:VENDOR-sm120.json"))
        code, out, err = run_cv(
            "import-manifest", str(f), "--upstream", "up", "--repo", str(repo), "--date", "2026-12-01"
        )
        assert code == 0, err
    commit_all(repo, "import upstream lineage")
    return repo


def fork_of(tmp: Path, files: dict[str, bytes], name="fork") -> Path:
    fork = tmp / name
    write_tree(fork, {"setup.py": b"# fork's own\n", f"{ROOT_UP}/common/utils.cuh": b"// fork's own\n"})
    write_tree(fork / ROOT_UP, files)
    return fork


# ---------------------------------------------------------------- import


def test_import_stores_an_immutable_hashes_only_manifest(canon, tmp_path):
    m = json.loads((canon / "vendor_manifests/upstreams/up/v0.2.0.json").read_text())
    assert m["lineage"] == "up" and m["tag"] == "v0.2.0" and m["root"] == ROOT_UP
    assert {f["path"]: f["sha256"] for f in m["files"]} == {p: sha(b) for p, b in U2.items()}
    assert all(set(f) == {"path", "sha256"} for f in m["files"])  # hashes only: no blob ids, sizes or modes
    f = tmp_path / "again.json"
    f.write_text(vendor_json("v0.2.0", U2))
    code, _, err = run_cv("import-manifest", str(f), "--upstream", "up", "--repo", str(canon))
    assert code == 3 and "never change" in err
    code, doc = run_json("--repo", str(canon))  # the self-check validates imported manifests
    assert code == 0 and any("upstream lineage up: 2 manifest(s), v0.1.0, v0.2.0" in n for n in doc["notes"])


@pytest.mark.parametrize(
    "bad, message",
    [
        ('{"tag": "v1.0.0"}', "expected a VENDOR-sm120.json object"),
        ('{"tag": "v1.0.0", "files": {"../x.cuh": "' + "0" * 64 + '"}}', "unsafe path"),
        ('{"tag": "v1.0.0", "files": {"a/sm120_x.cuh": "nothex"}}', "not a sha256"),
        ('{"tag": "nightly build", "files": {"a/sm120_x.cuh": "' + "0" * 64 + '"}}', "not a version"),
    ],
)
def test_import_refuses_malformed_input(canon, tmp_path, bad, message):
    f = tmp_path / "v.json"
    f.write_text(bad)
    code, _, err = run_cv("import-manifest", str(f), "--upstream", "other", "--repo", str(canon))
    assert code == 3 and message in err and not (canon / "vendor_manifests/upstreams/other").exists()


def test_import_from_a_git_ref_github_and_a_wheel_carries_full_entries(canon, upstream, tmp_path):
    import shutil

    from fake_servers import FakeGitHub

    repo = tmp_path / "canon"
    shutil.copytree(canon, repo)
    code, out, err = run_cv(
        "import-manifest",
        "--from-git",
        f"{upstream}@v0.2.0",
        "--upstream",
        "gitup",
        "--prefix",
        ROOT_UP,
        "--tag",
        "v0.2.0",
        "--all-files",
        "--repo",
        str(repo),
    )
    assert code == 0, err
    m = json.loads((repo / "vendor_manifests/upstreams/gitup/v0.2.0.json").read_text())
    blob = git(upstream, "rev-parse", f"v0.2.0:{ROOT_UP}/impls/sm120_gemm.cuh").strip()
    entry = next(f for f in m["files"] if f["path"] == "impls/sm120_gemm.cuh")
    assert entry == {
        "path": "impls/sm120_gemm.cuh",
        "sha256": sha(U2["impls/sm120_gemm.cuh"]),
        "git_blob_sha1": blob,
        "size": len(U2["impls/sm120_gemm.cuh"]),
        "mode": "100644",
    }
    assert "at commit" in m["origin"] and len(m["files"]) == len(U2)
    gh = FakeGitHub()
    url = gh.start()
    try:
        gh.repos["someone/DeepGEMM-sm120"] = str(upstream)
        code, _, err = run_cv(
            "import-manifest",
            "github:someone/DeepGEMM-sm120@v0.1.0",
            "--upstream",
            "ghup",
            "--prefix",
            ROOT_UP,
            "--tag",
            "v0.1.0",
            "--api-url",
            url,
            "--repo",
            str(repo),
        )
    finally:
        gh.stop()
    assert code == 0, err
    m = json.loads((repo / "vendor_manifests/upstreams/ghup/v0.1.0.json").read_text())
    assert [f["path"] for f in m["files"]] == ["common/sm120_utils.cuh", "impls/sm120_gemm.cuh"]  # sm120_* only
    whl = tmp_path / "pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as z:
        for p, b in U2.items():
            z.writestr(f"{ROOT_UP}/{p}", b)
    code, _, err = run_cv(
        "import-manifest", str(whl), "--upstream", "whlup", "--prefix", ROOT_UP, "--tag", "1.0", "--repo", str(repo)
    )
    assert code == 0, err
    code, _, err = run_cv("import-manifest", str(whl), "--upstream", "whlup2", "--repo", str(repo))
    assert code == 3 and "--prefix" in err and "--tag" in err


# ---------------------------------------------------------------- checking against a lineage


def test_a_fork_checked_against_the_lineage(canon, tmp_path):
    code, doc = run_json("--repo", str(canon), "--fork", str(fork_of(tmp_path, U2)), "--upstream", "up")
    assert code == 0 and doc["verdict"] == "in-sync" and doc["lineage"] == "up" and doc["tag"] == "v0.2.0"
    assert doc["prefix"] == ROOT_UP and by_path(doc)["layout/sparse.cuh"]["status"] == "ok"
    code, doc = run_json("--repo", str(canon), "--fork", str(fork_of(tmp_path, U1, "stale")), "--upstream", "up")
    f = by_path(doc)["impls/sm120_gemm.cuh"]
    assert code == 1 and doc["verdict"] == "stale" and doc["stale_tag"] == "v0.1.0"
    assert f["diagnosis"] == "matches up@v0.1.0 (older)" and by_path(doc)["impls/sm120_new.cuh"]["status"] == "missing"
    mixed = dict(U2, **{"layout/sparse.cuh": b"// a local edit\n"})
    code, out, _ = run_cv("--repo", str(canon), "--fork", str(fork_of(tmp_path, mixed, "mixed")), "--upstream", "up")
    assert code == 1 and "against up@v0.2.0 (upstream lineage)" in out and "changed  layout/sparse.cuh" in out
    code, _, err = run_cv("--repo", str(canon), "--fork", str(fork_of(tmp_path, U2, "x")), "--upstream", "nope")
    assert code == 3 and "unknown upstream lineage 'nope'" in err
    # the same tree against our releases: it does not vendor our layer
    code, doc = run_json("--repo", str(canon), "--fork", str(fork_of(tmp_path, U2, "ours")), "--prefix", ROOT_UP)
    assert code == 1 and doc["verdict"] == "not-vendored"


def test_sync_from_a_lineage_needs_its_bytes(canon, upstream, tmp_path):
    fork = fork_of(tmp_path, U1)
    base = ["--repo", str(canon), "--fork", str(fork), "--upstream", "up", "--sync"]
    code, _, err = run_cv(*base)
    assert code == 2 and "hashes only" in err and "--bytes-from" in err
    assert (fork / ROOT_UP / "impls/sm120_gemm.cuh").read_bytes() == U1["impls/sm120_gemm.cuh"]
    code, out, err = run_cv(*base, "--bytes-from", f"git:{upstream}@v0.2.0")
    assert code == 0, out + err
    assert all((fork / ROOT_UP / p).read_bytes() == b for p, b in U2.items())
    stamp = json.loads((fork / ROOT_UP / ".sm120-vendor.json").read_text())
    assert stamp["lineage"] == "up" and stamp["tag"] == "v0.2.0"
    import subprocess
    import sys

    p = subprocess.run(
        [sys.executable, "-I", str(fork / ROOT_UP / ".sm120-vendor-verify.py")], capture_output=True, text=True
    )
    assert p.returncode == 0 and "verdict: in-sync (up@v0.2.0)" in p.stdout
    code, doc = run_json("--repo", str(canon), "--fork", str(fork), "--upstream", "up")
    assert code == 0 and doc["stamp"]["tag"] == "v0.2.0"
    # checked against our releases, the stamp names another lineage: it is not trusted
    code, doc = run_json("--repo", str(canon), "--fork", str(fork), "--prefix", ROOT_UP)
    assert (
        code == 1
        and "written for up's releases, checked against deep_gemm_sm120's"
        in by_path(doc)[".sm120-vendor.json"]["detail"]
    )


def test_a_github_fork_against_a_hashes_only_lineage(canon, upstream, tmp_path):
    from fake_servers import FakeGitHub

    gh = FakeGitHub()
    url = gh.start()
    try:
        gh.repos["org/fork"] = str(upstream)
        code, doc = run_json(
            "--repo", str(canon), "--fork", "github:org/fork@v0.1.0", "--upstream", "up", "--api-url", url
        )
        blobs = [r for r in gh.log if "/git/blobs/" in r["path"]]
    finally:
        gh.stop()
    assert code == 1 and doc["verdict"] == "stale" and doc["digest"] == "sha256"
    assert len(blobs) == len(U1)  # the lineage has no blob ids: each compared file is fetched once


# ---------------------------------------------------------------- provenance


def test_provenance_across_sources_and_lineages(canon, upstream, tmp_path):
    mixed = dict(U1, **{"impls/sm120_gemm.cuh": U2["impls/sm120_gemm.cuh"], "impls/sm120_local.cuh": b"// own\n"})
    a = fork_of(tmp_path, mixed, "a")
    whl = tmp_path / "pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as z:
        for p, b in U2.items():
            z.writestr(f"{ROOT_UP}/{p}", b)
    ours = make_fork(tmp_path, V2, name="ours")
    specs = [str(a), str(whl), f"git:{upstream}@v0.1.0", str(ours)]
    code, out, err = run_cv("provenance", *specs, "--repo", str(canon), "--format", "json")
    doc = json.loads(out)
    assert code == 1 and doc["schema_version"] == 1 and [s["source"] for s in doc["sources"]] == specs
    files = {s["source"]: {f["path"]: f for f in s["files"]} for s in doc["sources"]}
    assert files[str(a)]["impls/sm120_gemm.cuh"]["matches"] == ["up@v0.2.0"]
    assert files[str(a)]["common/sm120_utils.cuh"]["matches"] == ["up@v0.1.0", "up@v0.2.0"]
    assert files[str(a)]["impls/sm120_local.cuh"]["matches"] == []
    assert files[str(a)]["impls/sm120_local.cuh"]["sha256"] == sha(b"// own\n")
    assert all(f["matches"] for f in files[str(whl)].values())
    assert files[f"git:{upstream}@v0.1.0"]["layout/sparse.cuh"]["matches"] == ["up@v0.1.0", "up@v0.2.0"]
    assert files[str(ours)]["mma/sm120.cuh"]["matches"] == ["deep_gemm_sm120@v0.1.0", "deep_gemm_sm120@v0.2.0"]
    code, out, _ = run_cv("provenance", *specs[1:], "--repo", str(canon))
    assert code == 0 and "up@v0.1.0,v0.2.0" in out and "[3]" in out
    code, out, err = run_cv("provenance", str(tmp_path / "missing-dir"), "--repo", str(canon))
    assert code == 2
    code, _, err = run_cv("provenance", "--repo", str(canon))
    assert code == 3


# ---------------------------------------------------------------- the watcher, against a lineage


def test_watcher_issue_says_which_upstream_tag_each_file_matches(canon, upstream, tmp_path, monkeypatch):
    from watch_helpers import TOKEN, FakeGitHub, config, watch

    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    gh = FakeGitHub(token=TOKEN)
    gh.url = gh.start()
    try:
        fork = tmp_path / "downstream"
        write_tree(
            fork / ROOT_UP,
            dict(
                U1,
                **{
                    "impls/sm120_gemm.cuh": U2["impls/sm120_gemm.cuh"],
                    "common/sm120_utils.cuh": b"// edited downstream\n",
                },
            ),
        )
        init_repo(fork)
        commit_all(fork, "vendor")
        gh.repos["org/downstream"] = str(fork)
        cfg = config(
            tmp_path,
            {
                "name": "ds",
                "repo": "org/downstream",
                "ref": "main",
                "prefix": ROOT_UP,
                "track": "latest",
                "lineage": "up",
            },
        )
        code, doc, _ = watch(canon, gh, cfg, tmp_path, "--issues", "--repo", "us/sm120")
        gh.log.clear()
        code2, _, _ = watch(canon, gh, cfg, tmp_path, "--issues", "--repo", "us/sm120")
    finally:
        gh.stop()
    d = doc["downstreams"][0]
    assert code == 1 and d["report"]["lineage"] == "up" and d["report"]["digest"] == "sha256"
    body = gh.issues["us/sm120"][0]["body"]
    assert "tracks `latest` (= `up@v0.2.0`)" in body and "--upstream up --bytes-from" in body
    assert "| `impls/sm120_gemm.cuh` | `up@v0.2.0` |" in body
    assert "| `layout/sparse.cuh` | `up@v0.1.0,v0.2.0` |" in body
    assert "| `common/sm120_utils.cuh` | **none** |" in body
    # the second run: blob ids already resolved to sha256 (state file), nothing fetched again
    assert code2 == 1 and not [r for r in gh.log if "/git/blobs/" in r["path"]]


def test_the_documented_worked_example(canon, tmp_path):
    """docs/vendoring.md's worked example on a wheel with vLLM 0.33.0's layout, built from synthetic bytes (CI has
    no network): provenance finds the vendor root under vllm/third_party/ and names the lineage's tags."""
    import shutil

    repo = tmp_path / "canon"
    shutil.copytree(canon, repo)
    v = tmp_path / "VENDOR-sm120.json"  # a stand-in lineage under the documented name
    v.write_text(vendor_json("v0.1.5", U2))
    assert run_cv("import-manifest", str(v), "--upstream", "deepgemm-sm120", "--repo", str(repo))[0] == 0
    whl = tmp_path / "vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(whl, "w") as z:
        z.writestr("vllm/__init__.py", b"")
        for p, b in U2.items():
            z.writestr(
                f"vllm/third_party/deep_gemm/include/deep_gemm/{p}",
                b if p != "impls/sm120_gemm.cuh" else b"// vLLM's own edit\n",
            )
    code, out, _ = run_cv("provenance", str(whl), "--repo", str(repo))
    assert code == 1 and "(vendor root vllm/third_party/deep_gemm/include/deep_gemm)" in out
    assert "  impls/sm120_gemm.cuh" in out and "NONE" in out and "deepgemm-sm120@v0.1.5" in out
    assert out.rstrip().endswith("exit 1: 1 file(s) match no known release")
    doc = (Path(__file__).resolve().parents[1] / "docs/vendoring.md").read_text()
    assert "python tools/check_vendor.py provenance pypi:vllm==0.33.0" in doc
    code, d = run_json("--repo", str(repo), "--fork", str(whl), "--upstream", "deepgemm-sm120")
    assert code == 1 and by_path(d)["impls/sm120_gemm.cuh"]["diagnosis"] == "content"


def test_import_of_our_own_manifest_format(canon, tmp_path):
    import shutil

    repo = tmp_path / "canon"
    shutil.copytree(canon, repo)
    code, out, err = run_cv(
        "import-manifest", str(repo / "vendor_manifests/v0.1.0.yaml"), "--upstream", "mirror", "--repo", str(repo)
    )
    assert code == 0, err
    m = json.loads((repo / "vendor_manifests/upstreams/mirror/v0.1.0.json").read_text())
    assert m["root"] == "device_layer" and all({"git_blob_sha1", "size", "mode"} <= set(f) for f in m["files"])
    code, doc = run_json(
        "--repo",
        str(repo),
        "--fork",
        str(make_fork(tmp_path, __import__("vendor_helpers").V1)),
        "--upstream",
        "mirror",
        "--prefix",
        PREFIX,
    )
    assert code == 0 and doc["verdict"] == "in-sync" and doc["digest"] == "sha256"
