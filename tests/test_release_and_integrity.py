"""`release` refusals and the rule that a released manifest equals device_layer/ at its commit."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from vendor_helpers import ROOT, V1, commit_all, init_repo, make_canonical, run_cv, run_json, write_tree


@pytest.fixture()
def canon(tmp_path) -> Path:
    return make_canonical(tmp_path)


def test_release_writes_parseable_manifest(tmp_path):
    from vendorkit.hashing import tree_sha256
    from vendorkit.manifest import ManifestSet

    repo = init_repo(tmp_path / "r")
    write_tree(repo / "device_layer", V1)
    (repo / "device_layer/impls/sm120_bf16_gemm.cuh").chmod(0o755)
    commit_all(repo, "v1")
    code, out, err = run_cv("release", "v0.1.0", "--repo", str(repo), "--date", "2026-12-01")
    assert code == 0 and "wrote vendor_manifests/v0.1.0.yaml" in out
    text = (repo / "vendor_manifests/v0.1.0.yaml").read_text()
    assert text.startswith("schema: 1\ntag: v0.1.0\nroot: device_layer\ncreated: 2026-12-01\n")
    assert 'requires: {cuda: ">=13.0", targets: [sm_120a, sm_120f, sm_121a]}' in text
    m = ManifestSet.load_dir(str(repo / "vendor_manifests")).by_tag["v0.1.0"]
    assert [f.path for f in m.files] == sorted(V1)
    assert m.by_path["impls/sm120_bf16_gemm.cuh"].mode == "100755"
    assert m.by_path["mma/sm120.cuh"].mode == "100644"
    assert m.tree_sha256 == tree_sha256((f.path, f.sha256) for f in m.files)


def test_release_refuses_dirty_device_layer(canon):
    (canon / "device_layer/common/sm120_tma.cuh").write_bytes(b"// dirty\n")
    code, _, err = run_cv("release", "v0.3.0", "--repo", str(canon))
    assert code == 3 and "uncommitted changes" in err
    subprocess.run(["git", "-C", str(canon), "checkout", "--", "device_layer"], check=True)
    (canon / "device_layer/common/sm120_new.cuh").write_bytes(b"// untracked\n")
    code, _, err = run_cv("release", "v0.3.0", "--repo", str(canon))
    assert code == 3 and "sm120_new.cuh" in err


def test_release_refuses_existing_and_non_increasing(canon):
    (canon / "device_layer/common/sm120_tma.cuh").write_bytes(b"// v3\n")
    commit_all(canon, "change")
    code, _, err = run_cv("release", "v0.2.0", "--repo", str(canon))
    assert code == 3 and "already exists" in err
    code, _, err = run_cv("release", "v0.1.9", "--repo", str(canon))
    assert code == 3 and "not greater than the latest release v0.2.0" in err
    # versions compare numerically: v0.2.10 > v0.2.9 > v0.2.0
    assert run_cv("release", "v0.2.9", "--repo", str(canon))[0] == 0
    commit_all(canon, "release v0.2.9")
    (canon / "device_layer/common/sm120_tma.cuh").write_bytes(b"// v4\n")
    commit_all(canon, "change again")
    assert run_cv("release", "v0.2.10", "--repo", str(canon))[0] == 0


@pytest.mark.parametrize("bad", ["0.3.0", "v0.3", "v0.3.0-rc1", "v01.3.0", "latest", "v0.3.0 "])
def test_release_refuses_malformed_versions(canon, bad):
    code, _, err = run_cv("release", bad, "--repo", str(canon))
    assert code == 3 and "malformed version" in err


def test_release_refuses_unchanged_tree_and_bad_names(canon):
    code, _, err = run_cv("release", "v0.3.0", "--repo", str(canon))
    assert code == 3 and "identical to v0.2.0" in err
    (canon / "device_layer/common/helpers.cuh").write_bytes(b"// not sm120_*\n")
    commit_all(canon, "misnamed")
    code, _, err = run_cv("release", "v0.3.0", "--repo", str(canon))
    assert code == 3 and "not named sm120_*" in err and "common/helpers.cuh" in err


def test_self_check_clean_and_unreleased_changes(canon):
    code, doc = run_json("--repo", str(canon))
    assert code == 0 and doc["verdict"] == "released" and doc["tag"] == "v0.2.0"
    (canon / "device_layer/common/sm120_tma.cuh").write_bytes(b"// work in progress\n")
    (canon / "device_layer/impls/sm120_next.cuh").write_bytes(b"// new kernel\n")
    code, doc = run_json("--repo", str(canon))
    assert code == 0 and doc["verdict"] == "unreleased"
    st = {f["path"]: (f["status"], f["detail"]) for f in doc["files"] if f["status"] != "ok"}
    assert st["common/sm120_tma.cuh"][0] == "changed" and "since v0.2.0" in st["common/sm120_tma.cuh"][1]
    assert st["impls/sm120_next.cuh"][0] == "extra"
    assert any("2 unreleased change(s)" in n for n in doc["notes"])


def test_editing_a_released_manifest_is_caught(canon):
    p = canon / "vendor_manifests/v0.1.0.yaml"
    p.write_text(p.read_text().replace("created: 2026-12-01", "created: 2026-12-09"))
    code, doc = run_json("--repo", str(canon))
    assert code == 1 and doc["verdict"] == "invalid"
    assert any("v0.1.0.yaml was edited after release" in e for e in doc["errors"])
    commit_all(canon, "sneaky edit")  # committing the edit does not help
    code, doc = run_json("--repo", str(canon))
    assert code == 1 and any("edited after release" in e for e in doc["errors"])


def test_manifest_committed_with_other_device_layer_is_caught(canon):
    (canon / "device_layer/common/sm120_tma.cuh").write_bytes(b"// v3\n")
    commit_all(canon, "change")
    assert run_cv("release", "v0.3.0", "--repo", str(canon))[0] == 0
    # the device layer moves on in the same commit that adds the manifest
    (canon / "device_layer/common/sm120_tma.cuh").write_bytes(b"// v3 plus an unreleased fix\n")
    commit_all(canon, "release v0.3.0 (with a stray edit)")
    code, doc = run_json("--repo", str(canon))
    assert code == 1 and doc["verdict"] == "invalid"
    assert any("does not match device_layer/ at commit" in e and "common/sm120_tma.cuh" in e for e in doc["errors"])


def test_uncommitted_manifest_is_a_draft(canon):
    (canon / "device_layer/common/sm120_tma.cuh").write_bytes(b"// v3\n")
    commit_all(canon, "change")
    assert run_cv("release", "v0.3.0", "--repo", str(canon))[0] == 0
    code, doc = run_json("--repo", str(canon))
    assert code == 0 and doc["verdict"] == "released" and doc["tag"] == "v0.3.0"
    assert any("not committed yet" in n for n in doc["notes"])


def test_this_repository_manifests_match_history():
    """The real rule, on this checkout: every released manifest equals its commit's device_layer/."""
    from vendorkit.gitrepo import GitRepo

    if not GitRepo(str(ROOT)).is_repo():
        pytest.skip(
            "not a git checkout (a release tarball or a ZIP download): the history cannot be read here; "
            "CI clones with full history and runs this"
        )
    from vendorkit.gitrepo import GitRepo
    from vendorkit.manifest import ManifestSet
    from vendorkit.selfcheck import history_problems, lineage_problems

    ms = ManifestSet.load_dir(str(ROOT / "vendor_manifests"))
    problems, _ = history_problems(str(ROOT), ms)
    assert problems == []
    problems, notes = lineage_problems(str(ROOT), GitRepo(str(ROOT)))
    assert problems == [] and any("upstream lineage deepgemm-sm120: 6 manifest(s)" in n for n in notes)
    code, doc = run_json("--repo", str(ROOT))
    assert code == 0, doc["errors"]
    assert doc["verdict"] in ("released", "unreleased")


def test_latest_release_verifies_in_a_deepgemm_layout(tmp_path):
    """The real release, vendored the way DeepGEMM forks do, is in sync; one edit makes it drift."""
    from vendorkit.canonical import CanonicalStore
    from vendorkit.manifest import ManifestSet

    ms = ManifestSet.load_dir(str(ROOT / "vendor_manifests"))
    tag = ms.latest
    assert tag is not None, "no release yet"
    store = CanonicalStore(str(ROOT))
    fork = tmp_path / "DeepGEMM"
    prefix = fork / "deep_gemm/include/deep_gemm"
    write_tree(
        fork,
        {
            "deep_gemm/include/deep_gemm/common/utils.cuh": b"// DeepGEMM's own\n",
            "deep_gemm/include/deep_gemm/impls/sm90_bf16_gemm.cuh": b"// DeepGEMM's own\n",
            "csrc/python_api.cpp": b"// DeepGEMM's own\n",
        },
    )
    for e in tag.files:
        data = store.get(e)
        assert data is not None, e.path
        write_tree(prefix, {e.path: data})
    code, doc = run_json("--repo", str(ROOT), "--fork", str(fork))
    assert code == 0 and doc["verdict"] == "in-sync" and doc["prefix"] == "deep_gemm/include/deep_gemm"
    assert doc["counts"] == {"ok": len(tag.files)}
    target = prefix / "impls/sm120_bf16_gemm.cuh"
    target.write_bytes(target.read_bytes().replace(b"kStages", b"kStagez", 1))
    code, doc = run_json("--repo", str(ROOT), "--fork", str(fork))
    assert code == 1 and {f["path"]: f["diagnosis"] for f in doc["files"]}["impls/sm120_bf16_gemm.cuh"] == "content"


def test_latest_release_upgrades_its_predecessor_by_sync(tmp_path):
    """A fork vendoring the previous release moves to the latest with one --sync: files the latest moved or
    dropped are deleted, new ones written, changed ones replaced, and the fork then verifies in sync."""
    from vendorkit.canonical import CanonicalStore
    from vendorkit.manifest import ManifestSet

    ms = ManifestSet.load_dir(str(ROOT / "vendor_manifests"))
    prev, latest = ms.manifests[-2], ms.manifests[-1]
    store = CanonicalStore(str(ROOT))
    fork = tmp_path / "DeepGEMM"
    prefix = fork / "deep_gemm/include/deep_gemm"
    write_tree(fork, {"deep_gemm/include/deep_gemm/common/utils.cuh": b"// DeepGEMM's own\n"})
    old = {e.path: store.get(e) for e in prev.files}
    missing = [t.tag for t in (prev, latest) if any(store.get(e) is None for e in t.files)]
    if missing and not (ROOT / ".git").exists():
        # a release tarball has only the latest bytes (check_vendor says so for such a fork), a tarball of a tree
        # with unreleased device changes not even those; the upgrade needs both releases', which live in git history
        pytest.skip(f"no git history here: {' and '.join(missing)}'s changed files cannot be written")
    assert None not in old.values(), "a checkout with history supplies every released file"
    write_tree(prefix, old)
    code, doc = run_json("--repo", str(ROOT), "--fork", str(fork), "--tag", prev.tag)
    assert code == 0 and doc["verdict"] == "in-sync"
    code, out, err = run_cv("--repo", str(ROOT), "--fork", str(fork), "--tag", latest.tag, "--sync")
    assert code == 0, out + err
    code, doc = run_json("--repo", str(ROOT), "--fork", str(fork), "--tag", latest.tag)
    # + the offline verifier the sync writes; the fork's own header is reported, never touched
    assert code == 0 and doc["verdict"] == "in-sync" and doc["counts"] == {"ok": len(latest.files) + 1, "foreign": 1}
    ours = {p.relative_to(prefix).as_posix() for p in prefix.rglob("sm120*.cuh")}
    assert ours == {e.path for e in latest.files}  # nothing the latest release dropped is left behind
    assert (prefix / "common/utils.cuh").read_bytes() == b"// DeepGEMM's own\n"


def _upgrade_test_in(copy):
    """The upgrade test run by pytest inside a copy of the repository."""
    import subprocess
    import sys

    test = "tests/test_release_and_integrity.py::test_latest_release_upgrades_its_predecessor_by_sync"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", test],
        cwd=copy,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_release_tarball_skips_the_upgrade_test_instead_of_failing(tmp_path):
    """A source tarball has no git history: the upgrade test says why it cannot run there, or runs where the
    tarball's own bytes are every file of both releases (a release that only adds files)."""
    import shutil

    from vendorkit.canonical import CanonicalStore
    from vendorkit.manifest import ManifestSet

    copy = tmp_path / "deep_gemm_sm120-tarball"
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns(".git", "__pycache__", "*.egg-info", "build", "dist"))
    prev, latest = ManifestSet.load_dir(str(copy / "vendor_manifests")).manifests[-2:]
    store = CanonicalStore(str(copy))
    needs_history = any(store.get(e) is None for e in prev.files + latest.files)
    p = _upgrade_test_in(copy)
    if needs_history:
        assert p.returncode == 0 and "1 skipped" in p.stdout and "no git history" in p.stdout, p.stdout + p.stderr
    else:
        assert p.returncode == 0 and "1 passed" in p.stdout, p.stdout + p.stderr


def test_a_tarball_of_a_release_that_changed_a_file_skips_the_upgrade_test(tmp_path):
    """The skip above, forced: a tarball whose tree lacks one of the previous release's bytes (as after any
    release that changes a file in place) says why the upgrade cannot run instead of failing."""
    import shutil

    from vendorkit.manifest import ManifestSet

    copy = tmp_path / "deep_gemm_sm120-tarball"
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns(".git", "__pycache__", "*.egg-info", "build", "dist"))
    prev = ManifestSet.load_dir(str(copy / "vendor_manifests")).manifests[-2]
    edited = copy / "device_layer" / prev.files[0].path
    edited.write_bytes(edited.read_bytes() + b"// changed after the previous release\n")
    p = _upgrade_test_in(copy)
    assert p.returncode == 0 and "1 skipped" in p.stdout and "no git history" in p.stdout, p.stdout + p.stderr
