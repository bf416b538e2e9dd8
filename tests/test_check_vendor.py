"""check_vendor against real git repositories: statuses, diagnoses, verdicts, exit codes, JSON."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from vendor_helpers import PREFIX, ROOT, V1, V2, by_path, git, make_canonical, make_fork, run_cv, run_json, write_tree


@pytest.fixture(scope="module")
def canon(tmp_path_factory) -> Path:
    return make_canonical(tmp_path_factory.mktemp("canon"))


def check(canon: Path, fork: Path, *extra: str) -> tuple[int, dict]:
    return run_json("--repo", str(canon), "--fork", str(fork), *extra)


def test_in_sync_with_detected_prefix(canon, tmp_path):
    fork = make_fork(tmp_path, V2)
    code, doc = check(canon, fork)
    assert code == 0
    assert doc["schema_version"] == 2
    assert doc["verdict"] == "in-sync" and doc["exit_code"] == 0
    assert doc["prefix"] == PREFIX and doc["tag"] == "v0.2.0" and doc["digest"] == "sha256"
    assert doc["counts"] == {"ok": len(V2)}
    # the fork's own files under the prefix are not ours and are never reported
    assert "common/utils.cuh" not in by_path(doc)


def test_missing_file(canon, tmp_path):
    fork = make_fork(tmp_path, V2)
    (fork / PREFIX / "scheduler/sm120_gemm.cuh").unlink()
    code, doc = check(canon, fork)
    assert code == 1 and doc["verdict"] == "drifted"
    f = by_path(doc)["scheduler/sm120_gemm.cuh"]
    assert f["status"] == "missing" and f["fork_path"] == f"{PREFIX}/scheduler/sm120_gemm.cuh"


def test_content_edit_has_diff(canon, tmp_path):
    files = dict(V2)
    files["common/sm120_tma.cuh"] = V2["common/sm120_tma.cuh"].replace(b"int x;", b"int x; int hotfix;")
    fork = make_fork(tmp_path, files)
    code, doc = check(canon, fork)
    assert code == 1
    f = by_path(doc)["common/sm120_tma.cuh"]
    assert (f["status"], f["diagnosis"]) == ("changed", "content")
    assert "-struct Tma { int x; };" in f["diff"] and "+struct Tma { int x; int hotfix; };" in f["diff"]
    assert f["expected"] != f["actual"]
    code, out, _ = run_cv("--repo", str(canon), "--fork", str(fork))
    assert "changed  common/sm120_tma.cuh  [content]" in out and "verdict: drifted" in out


@pytest.mark.parametrize(
    "mutate, diagnosis",
    [
        (lambda b: b.replace(b"\n", b"\r\n"), "eol-only"),
        (lambda b: b"\xef\xbb\xbf" + b, "bom-only"),
        (lambda b: b.replace(b"\n", b"  \t\n", 1), "whitespace-only"),
        (lambda b: b"\xef\xbb\xbf" + b.replace(b"\n", b"\r\n"), "whitespace-only"),
    ],
)
def test_cosmetic_diagnoses(canon, tmp_path, mutate, diagnosis):
    files = dict(V2)
    files["common/sm120_utils.cuh"] = mutate(V2["common/sm120_utils.cuh"])
    code, doc = check(canon, make_fork(tmp_path, files))
    f = by_path(doc)["common/sm120_utils.cuh"]
    assert code == 1 and f["status"] == "changed" and f["diagnosis"] == diagnosis
    assert f["diff"] is None


def test_executable_bit_is_mode(canon, tmp_path):
    fork = make_fork(tmp_path, V2)
    os.chmod(fork / PREFIX / "mma/sm120.cuh", 0o755)
    code, doc = check(canon, fork)
    f = by_path(doc)["mma/sm120.cuh"]
    assert code == 1 and f["status"] == "mode" and "100755" in f["detail"]


def test_symlink_outside_fork_is_reported_not_followed(canon, tmp_path):
    fork = make_fork(tmp_path, V2)
    outside = tmp_path / "outside.cuh"
    outside.write_bytes(V2["common/sm120_tma.cuh"])  # identical bytes: following it would say "ok"
    target = fork / PREFIX / "common/sm120_tma.cuh"
    target.unlink()
    target.symlink_to(outside)
    code, doc = check(canon, fork)
    f = by_path(doc)["common/sm120_tma.cuh"]
    assert code == 1 and f["status"] == "changed" and f["diagnosis"] == "symlink"
    assert "outside the fork" in f["detail"] and str(outside) in f["detail"]


def test_symlinked_directory_not_followed(canon, tmp_path):
    fork = make_fork(tmp_path, V2)
    real = tmp_path / "elsewhere_common"
    (fork / PREFIX / "common").rename(real)
    (fork / PREFIX / "common").symlink_to(real, target_is_directory=True)
    code, doc = check(canon, fork, "--prefix", PREFIX)
    f = by_path(doc)["common/sm120_tma.cuh"]
    assert code == 1 and f["status"] == "missing" and "symlinked directory" in f["detail"]


def test_moved_file_is_renamed(canon, tmp_path):
    fork = make_fork(tmp_path, V2)
    (fork / PREFIX / "scheduler/sm120_gemm.cuh").rename(fork / PREFIX / "impls/sm120_gemm_scheduler.cuh")
    code, doc = check(canon, fork)
    f = by_path(doc)["scheduler/sm120_gemm.cuh"]
    assert code == 1 and f["status"] == "renamed"
    assert f["fork_path"] == f"{PREFIX}/impls/sm120_gemm_scheduler.cuh"
    assert "impls/sm120_gemm_scheduler.cuh" not in by_path(doc)  # consumed, not also "extra"


def test_unexpected_sm120_file_is_extra(canon, tmp_path):
    files = dict(V2, **{"impls/sm120_local_hack.cuh": b"// ours-looking\n"})
    code, doc = check(canon, make_fork(tmp_path, files))
    f = by_path(doc)["impls/sm120_local_hack.cuh"]
    assert code == 1 and doc["verdict"] == "drifted" and f["status"] == "extra"
    assert "no release ships it" in f["detail"]


def test_identical_to_older_tag_is_stale(canon, tmp_path):
    fork = make_fork(tmp_path, V1)
    code, doc = check(canon, fork)
    assert code == 1 and doc["verdict"] == "stale" and doc["stale_tag"] == "v0.1.0"
    files = by_path(doc)
    assert files["impls/sm120_bf16_gemm.cuh"]["diagnosis"] == "matches v0.1.0 (older)"
    assert files["impls/sm120_old_kernel.cuh"]["status"] == "extra"
    assert "shipped by v0.1.0" in files["impls/sm120_old_kernel.cuh"]["detail"]
    assert files["scheduler/sm120_gemm.cuh"]["status"] == "missing"
    # and it is in sync with the tag it came from
    code, doc = check(canon, fork, "--tag", "v0.1.0")
    assert code == 0 and doc["verdict"] == "in-sync"


def test_mixed_tags_is_drifted(canon, tmp_path):
    files = dict(V2)
    files["impls/sm120_bf16_gemm.cuh"] = V1["impls/sm120_bf16_gemm.cuh"]
    code, doc = check(canon, make_fork(tmp_path, files))
    assert code == 1 and doc["verdict"] == "drifted" and doc["stale_tag"] is None
    assert by_path(doc)["impls/sm120_bf16_gemm.cuh"]["diagnosis"] == "matches v0.1.0 (older)"


def test_ambiguous_prefix_exit_3(canon, tmp_path):
    fork = make_fork(tmp_path, V2)
    write_tree(fork / "third_party/sm120_copy", V2)
    code, out, err = run_cv("--repo", str(canon), "--fork", str(fork))
    assert code == 3
    assert "ambiguous prefix" in err and PREFIX in err and "third_party/sm120_copy" in err
    code, doc = check(canon, fork, "--prefix", "third_party/sm120_copy")
    assert code == 0 and doc["prefix"] == "third_party/sm120_copy"


def test_no_prefix_found_exit_3(canon, tmp_path):
    fork = tmp_path / "empty"
    fork.mkdir()
    code, _, err = run_cv("--repo", str(canon), "--fork", str(fork))
    assert code == 3 and "--prefix" in err


def test_unknown_tag_exit_3(canon, tmp_path):
    code, _, err = run_cv("--repo", str(canon), "--fork", str(make_fork(tmp_path, V2)), "--tag", "v9.9.9")
    assert code == 3 and "unknown tag v9.9.9" in err and "v0.1.0, v0.2.0" in err
    code, doc = check(canon, tmp_path / "fork", "--tag", "latest")
    assert code == 3 and doc["verdict"] == "unknown" and "malformed version" in doc["errors"][0]


def test_missing_fork_path_exit_2(canon, tmp_path):
    code, out, err = run_cv("--repo", str(canon), "--fork", str(tmp_path / "nope"))
    assert code == 2 and err.count("\n") == 1 and "does not exist" in err and "Traceback" not in err


def test_unreadable_file_exit_2(canon, tmp_path, monkeypatch):
    from vendorkit.safefs import ForkRoot

    fork = make_fork(tmp_path, V2)
    real = ForkRoot.open_read

    def deny(self, rel):  # tests run as root, where chmod 000 does not stop a read
        if rel.endswith("sm120_tma.cuh"):
            raise PermissionError(13, "Permission denied")
        return real(self, rel)

    monkeypatch.setattr(ForkRoot, "open_read", deny)
    code, doc = check(canon, fork)
    assert code == 2 and doc["verdict"] == "unknown"
    f = by_path(doc)["common/sm120_tma.cuh"]
    assert f["status"] == "error" and "Permission denied" in f["detail"]


def _canon_copy(canon: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "canon_copy"
    subprocess.run(["git", "clone", "-q", str(canon), str(dst)], check=True)
    return dst


def _bad_manifest(repo: Path, text: str) -> None:
    (repo / "vendor_manifests/v0.3.0.yaml").write_text(text)


def test_dotdot_path_in_manifest_exit_3(canon, tmp_path):
    from vendorkit.hashing import tree_sha256

    repo = _canon_copy(canon, tmp_path)
    sha = "a" * 64
    ts = tree_sha256([("../evil.cuh", sha)])
    _bad_manifest(
        repo,
        f"schema: 1\ntag: v0.3.0\nroot: device_layer\ncreated: 2026-12-03\n"
        f'requires: {{cuda: ">=13.0", targets: [sm_120a]}}\ntree_sha256: "{ts}"\nfiles:\n'
        f'  - {{path: "../evil.cuh", sha256: "{sha}", git_blob_sha1: "{"b" * 40}", size: 1, mode: "100644"}}\n',
    )
    for argv in ([], ["--fork", str(make_fork(tmp_path, V2))]):
        code, _, err = run_cv("--repo", str(repo), *argv)
        assert code == 3 and "unsafe path '../evil.cuh'" in err


def test_absolute_path_in_manifest_exit_3(canon, tmp_path):
    repo = _canon_copy(canon, tmp_path)
    text = (
        (repo / "vendor_manifests/v0.2.0.yaml")
        .read_text()
        .replace('path: "common/sm120_tma.cuh"', 'path: "/etc/sm120_tma.cuh"')
        .replace("v0.2.0", "v0.3.0")
    )
    _bad_manifest(repo, text)
    code, _, err = run_cv("--repo", str(repo))
    assert code == 3 and "unsafe absolute path" in err


def test_malformed_yaml_exit_3(canon, tmp_path):
    repo = _canon_copy(canon, tmp_path)
    _bad_manifest(repo, "schema: 1\ntag: [unclosed\n")
    code, out, err = run_cv("--repo", str(repo))
    assert code == 3 and "malformed YAML" in err and "Traceback" not in err


def test_tampered_digest_exit_3(canon, tmp_path):
    repo = _canon_copy(canon, tmp_path)
    text = (repo / "vendor_manifests/v0.2.0.yaml").read_text()
    _bad_manifest(repo, text.replace("v0.2.0", "v0.3.0").replace("size: ", "size: 1", 1))
    code, out, err = run_cv("--repo", str(repo))
    # size alone is not in the tree digest: the manifest parses, and a manifest no `release` wrote is not
    # chained; make the digest lie instead
    assert code == 1 and "not chained yet: v0.3.0" in out + err
    first_sha = text.split('sha256: "')[1][:64]
    _bad_manifest(repo, text.replace("v0.2.0", "v0.3.0").replace(first_sha, "0" * 64))
    code, _, err = run_cv("--repo", str(repo))
    assert code == 3 and "tree_sha256 does not match" in err


def test_sync_stale_fork_to_latest_and_dry_run(canon, tmp_path):
    fork = make_fork(tmp_path, V1)
    own = {p: p.read_bytes() for p in fork.rglob("*") if p.is_file() and "sm120" not in p.name}
    (fork / PREFIX / "impls/sm120_mine.cuh").write_bytes(b"// a fork-local sm120-named file\n")
    before = {p: p.read_bytes() for p in fork.rglob("*") if p.is_file()}

    code, out, _ = run_cv("--repo", str(canon), "--fork", str(fork), "--sync", "--dry-run")
    assert code == 1
    assert "write    deep_gemm/include/deep_gemm/impls/sm120_bf16_gemm.cuh" in out
    assert "write    deep_gemm/include/deep_gemm/scheduler/sm120_gemm.cuh" in out
    assert "delete   deep_gemm/include/deep_gemm/impls/sm120_old_kernel.cuh" in out
    assert "keep     deep_gemm/include/deep_gemm/impls/sm120_mine.cuh" in out
    assert {p: p.read_bytes() for p in fork.rglob("*") if p.is_file()} == before  # nothing written

    code, out, _ = run_cv("--repo", str(canon), "--fork", str(fork), "--sync")
    assert not (fork / PREFIX / "impls/sm120_old_kernel.cuh").exists()
    assert (fork / PREFIX / "impls/sm120_mine.cuh").exists()  # never touched
    for rel, data in V2.items():
        assert (fork / PREFIX / rel).read_bytes() == data
    for p, data in own.items():
        assert p.read_bytes() == data
    # re-verified against the stamp --sync wrote: the fork's own file is foreign, not drift (unless --strict)
    assert code == 0 and "foreign  impls/sm120_mine.cuh" in out and "verdict: in-sync" in out
    assert (fork / PREFIX / ".sm120-vendor.json").is_file() and (fork / PREFIX / ".sm120-vendor-verify.py").is_file()
    code, doc = check(canon, fork, "--strict")
    assert code == 1 and by_path(doc)["impls/sm120_mine.cuh"]["status"] == "foreign"
    (fork / PREFIX / "impls/sm120_mine.cuh").unlink()
    code, doc = check(canon, fork)
    assert code == 0 and doc["verdict"] == "in-sync" and doc["stamp"]["tag"] == "v0.2.0"
    # with a stamp every file it does not own is foreign, the fork's own non-sm120 headers included
    assert {p for p, f in by_path(doc).items() if f["status"] == "foreign"} == {
        "common/utils.cuh",
        "impls/sm90_fp8_gemm_1d1d.cuh",
    }
    assert not list(fork.rglob(".sm120-sync-*"))


def test_sync_restores_mode_and_cosmetic_changes(canon, tmp_path):
    files = dict(V2)
    files["common/sm120_utils.cuh"] = V2["common/sm120_utils.cuh"].replace(b"\n", b"\r\n")
    fork = make_fork(tmp_path, files)
    os.chmod(fork / PREFIX / "mma/sm120.cuh", 0o755)
    # CRLF bytes equal no release and no stamp owns them: they are the fork's, so --sync refuses
    code, out, _ = run_cv("--repo", str(canon), "--fork", str(fork), "--sync")
    assert code == 1 and "refuse   deep_gemm/include/deep_gemm/common/sm120_utils.cuh" in out
    assert out.count("deep_gemm/include/deep_gemm/common/sm120_utils.cuh") == 1  # listed once, with its reason
    assert "nothing was written" in out and "--force" in out and "pin" in out
    assert (fork / PREFIX / "common/sm120_utils.cuh").read_bytes() == files["common/sm120_utils.cuh"]
    assert os.stat(fork / PREFIX / "mma/sm120.cuh").st_mode & 0o111
    code, out, _ = run_cv("--repo", str(canon), "--fork", str(fork), "--sync", "--force")
    assert code == 0 and "verdict: in-sync" in out
    assert "chmod    deep_gemm/include/deep_gemm/mma/sm120.cuh" in out
    assert not os.stat(fork / PREFIX / "mma/sm120.cuh").st_mode & 0o111
    backups = list((fork / ".sm120-sync-backup").rglob("sm120_utils.cuh"))
    assert len(backups) == 1 and backups[0].read_bytes() == files["common/sm120_utils.cuh"]
    code, doc = check(canon, fork)  # the backup never makes the prefix ambiguous or counts as drift
    assert code == 0 and doc["prefix"] == PREFIX


def test_sync_fresh_fork_needs_prefix(canon, tmp_path):
    fork = tmp_path / "fresh"
    fork.mkdir()
    code, _, err = run_cv("--repo", str(canon), "--fork", str(fork), "--sync")
    assert code == 3 and "--prefix" in err
    code, out, _ = run_cv("--repo", str(canon), "--fork", str(fork), "--sync", "--prefix", "csrc/sm120")
    assert code == 0 and (fork / "csrc/sm120/mma/sm120.cuh").read_bytes() == V2["mma/sm120.cuh"]


def test_markdown_and_text_formats(canon, tmp_path):
    fork = make_fork(tmp_path, V1)
    code, out, _ = run_cv("--repo", str(canon), "--fork", str(fork), "--format", "markdown")
    assert code == 1
    assert "**Verdict: stale (identical to `v0.1.0`)**" in out
    assert "| missing | `scheduler/sm120_gemm.cuh` |" in out
    code, out, _ = run_cv("--repo", str(canon), "--fork", str(fork))
    assert out.rstrip().splitlines()[-1].startswith("verdict: stale (identical to v0.1.0)")


def test_git_blob_ids_match_git_hash_object(canon):
    from vendorkit.manifest import ManifestSet

    m = ManifestSet.load_dir(str(canon / "vendor_manifests")).by_tag["v0.1.0"]
    assert len(m.files) == len(V1)
    for e in m.files:
        data = V1[e.path]
        p = canon / "blob.tmp"
        p.write_bytes(data)
        assert git(canon, "hash-object", str(p)).strip() == e.git_blob_sha1
        assert e.size == len(data)
        p.unlink()


def _no_yaml_env(tmp_path) -> dict:
    shadow = tmp_path / "shadow"
    shadow.mkdir(exist_ok=True)
    (shadow / "yaml.py").write_text("raise ImportError('no yaml here')\n")
    return {**os.environ, "PYTHONPATH": str(shadow)}


def test_readme_command_runs_without_pyyaml(tmp_path):
    """A fresh machine: `python tools/check_vendor.py` needs only the standard library."""
    p = subprocess.run(
        [sys.executable, str(ROOT / "tools/check_vendor.py")],
        env=_no_yaml_env(tmp_path),
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0, p.stderr
    assert "verdict: released" in p.stdout or "verdict: unreleased" in p.stdout


def test_watcher_without_pyyaml_says_how_to_install(tmp_path):
    p = subprocess.run(
        [sys.executable, str(ROOT / "tools/watch_downstreams.py")],
        env=_no_yaml_env(tmp_path),
        capture_output=True,
        text=True,
    )
    assert p.returncode == 3
    assert "pip install pyyaml" in p.stderr and "Traceback" not in p.stderr


def test_strict_reader_equals_pyyaml_on_every_manifest():
    import yaml

    from vendorkit import manifest_text

    for path in sorted((ROOT / "vendor_manifests").glob("*.yaml")):
        text = path.read_text()
        general = yaml.safe_load(text)
        general["created"] = general["created"].isoformat()
        assert manifest_text.parse(text, path.name) == general, path.name


def test_strict_reader_refuses_other_layouts(tmp_path):
    from vendorkit import manifest_text
    from vendorkit.errors import ManifestError

    text = (ROOT / "vendor_manifests/v0.1.0.yaml").read_text()
    for bad in (
        text.replace("files:\n", "files: !!python/object:os.system\n"),
        text.replace("  - {path:", "  - {evil: 1, path:", 1),
        text + "tag: v9.9.9\n",
        "schema: 1\ntag: [unclosed\n",
    ):
        with pytest.raises(ManifestError):
            manifest_text.parse(bad, "x.yaml")


def test_cli_usage_errors_exit_3(canon):
    for argv in (["--bogus"], ["--dry-run"], ["--tag", "v0.1.0", "--latest"], ["--sync"]):
        code, _, err = run_cv("--repo", str(canon), *argv)
        assert code == 3, argv
        assert "Traceback" not in err


def test_matches_names_a_newer_release_as_newer(canon, tmp_path):
    code, doc = check(canon, make_fork(tmp_path, V2), "--tag", "v0.1.0")
    f = by_path(doc)["impls/sm120_bf16_gemm.cuh"]
    assert code == 1 and f["diagnosis"] == "matches v0.2.0 (newer)" and "newer than v0.1.0" in f["detail"]


def test_ok_files_are_not_drift_in_json(canon, tmp_path):
    code, doc = check(canon, make_fork(tmp_path, V2))
    assert code == 0 and {f["drift"] for f in doc["files"]} == {False}


def test_repo_that_is_not_a_checkout_is_a_usage_error(tmp_path):
    code, out, err = run_cv("--repo", str(tmp_path / "nonexistent"))
    assert code == 3 and "not a deep_gemm_sm120 checkout" in err


def test_a_checkout_of_this_repository_inside_the_fork_is_skipped_only_when_it_is_the_one_running(canon, tmp_path):
    """The fork-CI recipe clones this repository to .sm120/ inside the fork and runs it from there: that checkout
    is skipped because it is the one running (--repo), never because of what the fork holds. Another checkout run
    on the same fork sees two copies: ambiguous (exit 3, both named) until --prefix says which."""
    import shutil

    fork = make_fork(tmp_path, V2)
    shutil.copytree(canon, fork / ".sm120")
    code, doc = check(fork / ".sm120", fork)
    assert code == 0 and doc["prefix"] == PREFIX
    code, _, err = run_cv("--repo", str(canon), "--fork", str(fork))
    assert code == 3 and "ambiguous prefix" in err and ".sm120/device_layer" in err and PREFIX in err
    code, doc = check(canon, fork, "--prefix", PREFIX)
    assert code == 0


def test_a_planted_vendor_manifests_never_hides_a_copy(canon, tmp_path):
    """A drifted copy laid out like this repository (device_layer/ beside a planted vendor_manifests/) and a
    pristine decoy at the usual prefix: the detection does not take the fork's word that the first is "a checkout
    of deep_gemm_sm120", so the prefix is ambiguous instead of the decoy certified."""
    fork = make_fork(tmp_path, V2)
    write_tree(fork / "third_party/device_layer", dict(V2, **{"mma/sm120.cuh": b"// the bytes the build uses\n"}))
    write_tree(fork / "third_party/vendor_manifests", {"v0.2.0.yaml": b"# planted\n"})
    code, _, err = run_cv("--repo", str(canon), "--fork", str(fork))
    assert code == 3 and "ambiguous prefix" in err and "third_party/device_layer" in err
    code, doc = check(canon, fork, "--prefix", "third_party/device_layer")
    assert code == 1 and doc["verdict"] == "drifted"


def test_fake_servers_bad_arguments_exit_3():
    p = subprocess.run(
        [sys.executable, str(ROOT / "tests/fake_servers.py"), "--repo", "nonsense"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert p.returncode == 3 and "expected OWNER/NAME=PATH" in p.stderr


def test_first_sync_into_a_directory_of_the_forks_own_headers(canon, tmp_path):
    """DeepGEMM's include directory holds its own headers and no SM120 file yet: that is a first vendoring
    (everything missing, --sync writes it), not a fork with SM120 headers of its own."""
    fork = make_fork(tmp_path, {})
    code, doc = check(canon, fork, "--prefix", PREFIX)
    assert code == 1 and doc["verdict"] == "drifted" and {f["status"] for f in doc["files"]} == {"missing"}
    code, out, err = run_cv("--repo", str(canon), "--fork", str(fork), "--prefix", PREFIX, "--sync")
    assert code == 0, out + err
    assert (fork / PREFIX / "common/utils.cuh").read_bytes() == b"// fork's own header\n"
