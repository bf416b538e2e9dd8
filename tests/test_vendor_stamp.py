"""The vendored stamp: owned vs foreign files, tampered stamps, pinned patches, safe --sync, the offline verifier."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from vendor_helpers import PREFIX, ROOT, V1, V2, by_path, make_canonical, make_fork, opened_paths, run_cv, run_json

STAMP = ".sm120-vendor.json"
VERIFY = ".sm120-vendor-verify.py"


@pytest.fixture(scope="module")
def canon(tmp_path_factory) -> Path:
    return make_canonical(tmp_path_factory.mktemp("canon"))


def check(canon: Path, fork: Path, *extra: str) -> tuple[int, dict]:
    return run_json("--repo", str(canon), "--fork", str(fork), *extra)


def synced(canon: Path, tmp_path: Path, files: dict[str, bytes] = V2, *extra: str) -> Path:
    fork = make_fork(tmp_path, files)
    code, out, err = run_cv("--repo", str(canon), "--fork", str(fork), "--sync", *extra)
    assert code == 0, out + err
    return fork


def stamp_of(fork: Path) -> dict:
    return json.loads((fork / PREFIX / STAMP).read_text())


def write_stamp(fork: Path, doc: dict, fix_tree: bool = True) -> None:
    sys.path.insert(0, str(ROOT / "tools"))
    import sm120_vendor_verify as v

    if fix_tree:  # an attacker recomputes the digest so that the stamp is self-consistent
        doc["tree_sha256"] = v.tree_sha256((f["path"], f["sha256"]) for f in doc["files"] if v.safe_relative(f["path"]))
    (fork / PREFIX / STAMP).write_text(json.dumps(doc))


def sha(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def verify(fork: Path, *args: str, manifest: Path | None = None) -> subprocess.CompletedProcess:
    """The vendored verifier, run the way a fork's CI runs it: isolated interpreter, no site packages."""
    cmd = [sys.executable, "-I", str(fork / PREFIX / VERIFY), *args]
    if manifest is not None:
        cmd += ["--manifest", str(manifest)]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=fork)


# ---------------------------------------------------------------- the stamp --sync writes


def test_sync_writes_stamp_of_every_owned_file(canon, tmp_path):
    fork = synced(canon, tmp_path)
    doc = stamp_of(fork)
    assert doc["schema"] == 1 and doc["tag"] == "v0.2.0" and doc["patches"] == []
    assert {f["path"]: f["sha256"] for f in doc["files"]} == {p: sha(b) for p, b in V2.items()}
    manifest = (canon / "vendor_manifests/v0.2.0.yaml").read_text()
    assert f'tree_sha256: "{doc["tree_sha256"]}"' in manifest or f"tree_sha256: {doc['tree_sha256']}" in manifest
    assert doc["verifier"]["sha256"] == sha((fork / PREFIX / VERIFY).read_bytes())
    assert os.access(fork / PREFIX / VERIFY, os.X_OK)
    # the verifier generated for v0.2.0: the template with the release's digests baked in
    from vendorkit import verifier_gen
    from vendorkit.manifest import ManifestSet

    release = ManifestSet.load_dir(str(canon / "vendor_manifests")).by_tag["v0.2.0"]
    assert (fork / PREFIX / VERIFY).read_bytes() == verifier_gen.build(release)
    code, doc = check(canon, fork)
    pin = {"tag": "v0.2.0", "manifest_sha256": sha(manifest.encode()), "chain_length": 2, "signer": None}
    pin["chain_head"] = release.chain[1] if release.chain else None
    assert code == 0 and doc["stamp"] == {"tag": "v0.2.0", "owned": len(V2), "patches": [], "problems": [], "pin": pin}
    assert doc["trust"]["status"] == "unsigned" and not doc["trust"]["finding"]
    # the verifier is an owned file like the headers; the stamp is never a status of its own unless invalid
    assert STAMP not in by_path(doc) and by_path(doc)[VERIFY]["status"] == "ok"


def test_foreign_file_is_not_drift_unless_strict(canon, tmp_path):
    fork = synced(canon, tmp_path)
    (fork / PREFIX / "impls/sm120_fork_kernel.cuh").write_bytes(b"// the fork's own SM120 kernel\n")
    code, doc = check(canon, fork)
    f = by_path(doc)["impls/sm120_fork_kernel.cuh"]
    assert code == 0 and doc["verdict"] == "in-sync" and f["status"] == "foreign" and f["drift"] is False
    code, doc = check(canon, fork, "--strict")
    assert code == 1 and doc["verdict"] == "drifted" and by_path(doc)["impls/sm120_fork_kernel.cuh"]["drift"]
    code, out, _ = run_cv("--repo", str(canon), "--fork", str(fork), "--format", "markdown")
    assert "| foreign | `impls/sm120_fork_kernel.cuh` |" in out


def test_foreign_file_shadowing_a_released_path_is_drift(canon, tmp_path):
    fork = synced(canon, tmp_path)
    # v0.1.0 shipped impls/sm120_old_kernel.cuh; a file there that the stamp does not own shadows it
    (fork / PREFIX / "impls/sm120_old_kernel.cuh").write_bytes(b"// something else\n")
    code, doc = check(canon, fork)
    f = by_path(doc)["impls/sm120_old_kernel.cuh"]
    assert code == 1 and f["status"] == "extra" and "shadows a released file" in f["detail"]


def test_no_stamp_behaves_as_before(canon, tmp_path):
    fork = make_fork(tmp_path, V2)
    (fork / PREFIX / "impls/sm120_fork_kernel.cuh").write_bytes(b"// the fork's own\n")
    code, doc = check(canon, fork)
    assert code == 1 and doc["stamp"] is None and by_path(doc)["impls/sm120_fork_kernel.cuh"]["status"] == "extra"


# ---------------------------------------------------------------- tampered stamps


def test_stamp_edited_to_bless_a_drifted_file(canon, tmp_path):
    fork = synced(canon, tmp_path)
    target = fork / PREFIX / "common/sm120_tma.cuh"
    target.write_bytes(b"// sneaky edit\n")
    doc = stamp_of(fork)
    for f in doc["files"]:
        if f["path"] == "common/sm120_tma.cuh":
            f["sha256"] = sha(target.read_bytes())
    write_stamp(fork, doc)
    code, rep = check(canon, fork)
    files = by_path(rep)
    assert code == 1 and rep["verdict"] == "drifted"
    assert files[STAMP]["diagnosis"] == "invalid-stamp" and "not the released one" in files[STAMP]["detail"]
    assert files["common/sm120_tma.cuh"]["status"] == "changed"  # the manifest, not the stamp, is the truth
    # the offline verifier catches it too once it is given the release manifest
    p = verify(fork, manifest=canon / "vendor_manifests/v0.2.0.yaml")
    assert p.returncode == 1 and "not the released one" in p.stdout


def test_stamp_hand_edit_breaks_its_own_digest(canon, tmp_path):
    fork = synced(canon, tmp_path)
    doc = stamp_of(fork)
    doc["files"][0]["sha256"] = "0" * 64
    write_stamp(fork, doc, fix_tree=False)
    p = verify(fork)  # no manifest needed for this one
    assert p.returncode == 1 and "does not match its own file list" in p.stdout


@pytest.mark.parametrize("evil", ["../../setup.py", "/etc/passwd", "common/../../../outside.cuh", "C:/x.cuh"])
def test_stamp_listing_a_path_outside_the_vendor_root(canon, tmp_path, evil):
    fork = synced(canon, tmp_path)
    outside = tmp_path / "outside.cuh"
    outside.write_bytes(b"// outside the fork\n")
    doc = stamp_of(fork)
    doc["files"].append({"path": evil, "sha256": sha(b"x")})
    write_stamp(fork, doc)
    with opened_paths() as seen:
        code, rep = check(canon, fork)
    assert code == 1 and rep["verdict"] == "drifted"
    assert any("unsafe path" in p for p in rep["stamp"]["problems"])
    assert by_path(rep)[STAMP]["diagnosis"] == "invalid-stamp"
    real_fork, real_canon = os.path.realpath(fork), os.path.realpath(canon)
    read = [p for p in seen if not p.startswith((real_fork, real_canon, sys.prefix, sys.base_prefix, str(ROOT)))]
    assert read == [], read
    p = verify(fork)
    assert p.returncode == 1 and "unsafe path" in p.stdout


@pytest.mark.parametrize("garbage", [b"{not json", b'{"schema": 99}', b'{"schema": 1, "tag": "v0.2.0"}', b"\xff\xfe"])
def test_unreadable_stamp_is_a_finding_not_a_crash(canon, tmp_path, garbage):
    fork = synced(canon, tmp_path)
    (fork / PREFIX / STAMP).write_bytes(garbage)
    code, out, err = run_cv("--repo", str(canon), "--fork", str(fork))
    assert code == 1 and "invalid-stamp" in out and "Traceback" not in err
    p = verify(fork)  # the verifier knows the release itself: a broken stamp is a finding, the files still checked
    assert p.returncode == 1 and "  stamp    " in p.stdout and "Traceback" not in p.stderr
    # --sync rewrites a broken stamp (it only ever describes what --sync wrote)
    code, out, _ = run_cv("--repo", str(canon), "--fork", str(fork), "--sync")
    assert code == 0 and stamp_of(fork)["tag"] == "v0.2.0"


def test_stamp_naming_an_unreleased_tag(canon, tmp_path):
    fork = synced(canon, tmp_path)
    doc = stamp_of(fork)
    doc["tag"] = "v9.9.9"
    write_stamp(fork, doc)
    code, rep = check(canon, fork)
    assert code == 1 and any("not a release" in p for p in rep["stamp"]["problems"])


# ---------------------------------------------------------------- pinned patches


def _pin(canon, fork, rel="common/sm120_tma.cuh", edit=b"struct Tma { int x; int fix; };\n", **kw):
    target = fork / PREFIX / rel
    target.write_bytes(target.read_bytes() + edit)
    args = ["pin", "--repo", str(canon), "--fork", str(fork), rel, "--reason", kw.get("reason", "hotfix for #42")]
    if kw.get("upstream"):
        args += ["--upstream", kw["upstream"]]
    code, out, err = run_cv(*args)
    assert code == 0, err
    return target


def test_pinned_patch_reports_patched_in_every_format(canon, tmp_path):
    fork = synced(canon, tmp_path)
    target = _pin(canon, fork, upstream="https://github.com/org/deep_gemm_sm120/issues/42")
    code, doc = check(canon, fork)
    f = by_path(doc)["common/sm120_tma.cuh"]
    assert code == 0 and doc["verdict"] == "in-sync" and f["status"] == "patched"
    assert f["patch"]["reason"] == "hotfix for #42" and f["patch"]["base_sha256"] == sha(V2["common/sm120_tma.cuh"])
    assert f["patch"]["patched_sha256"] == sha(target.read_bytes())
    code, out, _ = run_cv("--repo", str(canon), "--fork", str(fork))
    assert code == 0 and "patched  common/sm120_tma.cuh  [pinned patch]  hotfix for #42 (https://" in out
    assert "1 pinned patch" in out
    code, out, _ = run_cv("--repo", str(canon), "--fork", str(fork), "--format", "markdown")
    assert "| patched | `common/sm120_tma.cuh` | `pinned patch` | `hotfix for #42" in out
    p = verify(fork, manifest=canon / "vendor_manifests/v0.2.0.yaml")
    assert p.returncode == 0 and "patched  common/sm120_tma.cuh  hotfix for #42" in p.stdout
    # any further edit is drift again
    target.write_bytes(target.read_bytes() + b"// and more\n")
    code, doc = check(canon, fork)
    assert code == 1 and by_path(doc)["common/sm120_tma.cuh"]["status"] == "changed"
    assert verify(fork).returncode == 1


def test_patch_whose_base_is_not_the_manifest_hash(canon, tmp_path):
    fork = synced(canon, tmp_path)
    target = _pin(canon, fork)
    doc = stamp_of(fork)
    doc["patches"][0]["base_sha256"] = sha(b"some other base")
    write_stamp(fork, doc)
    code, rep = check(canon, fork)
    assert code == 1 and any("base that is not the released hash" in p for p in rep["stamp"]["problems"])
    assert by_path(rep)["common/sm120_tma.cuh"]["status"] == "changed"
    assert target.exists()
    p = verify(fork)
    assert p.returncode == 1 and "base that is not the released hash" in p.stdout
    # a patch entry that does not apply is never carried into the stamp the next --sync writes
    target.write_bytes(V2["common/sm120_tma.cuh"])
    code, out, _ = run_cv("--repo", str(canon), "--fork", str(fork), "--sync")
    assert code == 0 and stamp_of(fork)["patches"] == []


def test_pin_refuses_what_it_cannot_vouch_for(canon, tmp_path):
    fork = make_fork(tmp_path, V2)
    code, _, err = run_cv("pin", "--repo", str(canon), "--fork", str(fork), "common/sm120_tma.cuh", "--reason", "x")
    assert code == 3 and "run --sync first" in err
    fork = synced(canon, tmp_path / "b")
    code, _, err = run_cv("pin", "--repo", str(canon), "--fork", str(fork), "common/sm120_tma.cuh", "--reason", "x")
    assert code == 3 and "nothing to pin" in err
    (fork / PREFIX / "common/utils.cuh").write_bytes(b"// edited\n")
    code, _, err = run_cv("pin", "--repo", str(canon), "--fork", str(fork), "common/utils.cuh", "--reason", "x")
    assert code == 3 and "not a file the stamp owns" in err


def test_sync_keeps_a_pinned_patch_and_refuses_over_one_unless_dropped(canon, tmp_path):
    fork = synced(canon, tmp_path, V1, "--tag", "v0.1.0")
    target = _pin(canon, fork, rel="impls/sm120_bf16_gemm.cuh", edit=b"// local fix\n")
    patched = target.read_bytes()
    # same tag: the patch is kept
    code, out, _ = run_cv("--repo", str(canon), "--fork", str(fork), "--sync", "--tag", "v0.1.0")
    assert code == 0 and "keep     deep_gemm/include/deep_gemm/impls/sm120_bf16_gemm.cuh" in out
    assert target.read_bytes() == patched and len(stamp_of(fork)["patches"]) == 1
    # v0.2.0 changes the file: the patch was made for another base, so --sync refuses and writes nothing
    before = {p: p.read_bytes() for p in fork.rglob("*") if p.is_file()}
    code, out, _ = run_cv("--repo", str(canon), "--fork", str(fork), "--sync")
    assert code == 1 and "refuse   deep_gemm/include/deep_gemm/impls/sm120_bf16_gemm.cuh" in out
    assert "--drop-patches" in out and "nothing was written" in out
    assert {p: p.read_bytes() for p in fork.rglob("*") if p.is_file()} == before
    code, out, _ = run_cv("--repo", str(canon), "--fork", str(fork), "--sync", "--drop-patches")
    assert code == 0 and target.read_bytes() == V2["impls/sm120_bf16_gemm.cuh"]
    assert stamp_of(fork)["tag"] == "v0.2.0" and stamp_of(fork)["patches"] == []
    backups = list((fork / ".sm120-sync-backup").rglob("sm120_bf16_gemm.cuh"))
    assert [b.read_bytes() for b in backups] == [patched]


# ---------------------------------------------------------------- --sync never loses the fork's bytes


def test_sync_overwrites_an_owned_edit_only_after_a_backup(canon, tmp_path):
    fork = synced(canon, tmp_path)
    target = fork / PREFIX / "mma/sm120.cuh"
    target.write_bytes(b"// unpinned local edit\n")
    code, out, _ = run_cv("--repo", str(canon), "--fork", str(fork), "--sync", "--dry-run")
    assert code == 1 and "owned by the stamp" in out and "[backup first]" in out
    code, out, _ = run_cv("--repo", str(canon), "--fork", str(fork), "--sync")
    assert code == 0 and target.read_bytes() == V2["mma/sm120.cuh"]
    assert [b.read_bytes() for b in (fork / ".sm120-sync-backup").rglob("sm120.cuh")] == [b"// unpinned local edit\n"]


def test_sync_refuses_fork_written_files_and_says_how_to_proceed(canon, tmp_path):
    files = dict(V1)
    files["common/sm120_tma.cuh"] = b"#pragma once\n// the fork's own TMA helpers\nstruct Tma { int y; };\n"
    fork = make_fork(tmp_path, files)
    before = {p: p.read_bytes() for p in fork.rglob("*") if p.is_file()}
    code, out, _ = run_cv("--repo", str(canon), "--fork", str(fork), "--sync", "--dry-run")
    assert code == 1 and "refuse   deep_gemm/include/deep_gemm/common/sm120_tma.cuh" in out
    assert "write    deep_gemm/include/deep_gemm/impls/sm120_bf16_gemm.cuh" in out  # stale copy: safe
    code, out, _ = run_cv("--repo", str(canon), "--fork", str(fork), "--sync")
    assert code == 1 and "nothing was written" in out and "check_vendor.py pin" in out and "--force" in out
    assert {p: p.read_bytes() for p in fork.rglob("*") if p.is_file()} == before


def test_sync_deletes_a_renamed_copy(canon, tmp_path):
    fork = make_fork(tmp_path, V2)
    (fork / PREFIX / "scheduler/sm120_gemm.cuh").rename(fork / PREFIX / "impls/sm120_sched_copy.cuh")
    code, out, _ = run_cv("--repo", str(canon), "--fork", str(fork), "--sync", "--dry-run")
    assert "write    deep_gemm/include/deep_gemm/scheduler/sm120_gemm.cuh" in out
    assert "delete   deep_gemm/include/deep_gemm/impls/sm120_sched_copy.cuh" in out
    code, out, _ = run_cv("--repo", str(canon), "--fork", str(fork), "--sync")
    assert code == 0 and not (fork / PREFIX / "impls/sm120_sched_copy.cuh").exists()


def test_fork_that_does_not_vendor_this_layer(canon, tmp_path):
    own = {rel: b"#pragma once\n// another project's SM120 header\n" + rel.encode() * 40 + b"\n" for rel in V2}
    fork = make_fork(tmp_path, own)
    code, doc = check(canon, fork)
    assert code == 1 and doc["verdict"] == "not-vendored"
    assert all(f["diff"] is None for f in doc["files"])
    assert "does not vendor this layer" in doc["notes"][0]
    code, out, _ = run_cv("--repo", str(canon), "--fork", str(fork))
    assert len(out.splitlines()) < 3 * len(V2) and "verdict: not-vendored" in out
    before = {p: p.read_bytes() for p in fork.rglob("*") if p.is_file()}
    code, out, _ = run_cv("--repo", str(canon), "--fork", str(fork), "--sync")
    assert code == 1 and "does not vendor this layer" in out
    assert {p: p.read_bytes() for p in fork.rglob("*") if p.is_file()} == before


# ---------------------------------------------------------------- readable diffs


def test_replaced_file_gets_a_ratio_not_a_diff(canon, tmp_path):
    files = dict(V2)
    files["impls/sm120_bf16_gemm.cuh"] = b"".join(b"// unrelated line %d\n" % i for i in range(300))
    code, doc = check(canon, make_fork(tmp_path, files))
    f = by_path(doc)["impls/sm120_bf16_gemm.cuh"]
    assert code == 1 and f["diagnosis"] == "replaced" and f["diff"] is None
    assert f["similarity"] < 0.35 and re.fullmatch(r"replaced by an unrelated file \(\d+ % similar\)", f["detail"])


def test_diffs_are_capped_in_every_format_unless_full_diffs(canon, tmp_path):
    files = dict(V2)
    base = V2["common/sm120_utils.cuh"]
    files["common/sm120_utils.cuh"] = base.replace(b"a + b", b"b + a") + b"".join(
        b"inline int f%d();\n" % i for i in range(2)
    )
    big = b"".join(b"// line %d\n" % i for i in range(400))
    files["mma/sm120.cuh"] = V2["mma/sm120.cuh"] + big
    fork = make_fork(tmp_path, files)
    code, doc = check(canon, fork)
    f = by_path(doc)["mma/sm120.cuh"]
    assert f["diagnosis"] == "content" and f["diff"].count("\n") == 200 and 0.0 < f["similarity"] < 1.0
    assert f["diff_truncated"] > 200
    code, doc = check(canon, fork, "--full-diffs")
    f = by_path(doc)["mma/sm120.cuh"]
    assert f["diff"].count("\n") > 400 and f["diff_truncated"] == 0
    code, out, _ = run_cv("--repo", str(canon), "--fork", str(fork), "--diff-lines", "5")
    assert "diff truncated" in out and "(--diff-lines N, --full-diffs)" in out and "+// line 399" not in out
    code, out, _ = run_cv("--repo", str(canon), "--fork", str(fork))
    assert "+// line 150" in out and "+// line 399" not in out  # default cap: 200 lines
    code, out, _ = run_cv("--repo", str(canon), "--fork", str(fork), "--no-diff")
    assert "@@" not in out
    code, out, err = run_cv("--repo", str(canon), "--fork", str(fork), "--diff-lines", "-1")
    assert code == 3


# ---------------------------------------------------------------- the offline verifier


def test_offline_verifier_in_the_forks_ci(canon, tmp_path):
    fork = synced(canon, tmp_path)
    manifest = canon / "vendor_manifests/v0.2.0.yaml"
    p = verify(fork, manifest=manifest)
    assert p.returncode == 0 and "verdict: in-sync (v0.2.0)" in p.stdout
    p = verify(fork, "--format", "json")
    doc = json.loads(p.stdout)
    assert p.returncode == 0 and doc["exit_code"] == 0
    assert {f["path"] for f in doc["files"] if f["status"] == "foreign"} == {
        "common/utils.cuh",
        "impls/sm90_fp8_gemm_1d1d.cuh",
    }
    assert verify(fork, "--strict").returncode == 1
    (fork / PREFIX / "scheduler/sm120_gemm.cuh").unlink()
    p = verify(fork)
    assert p.returncode == 1 and "missing  scheduler/sm120_gemm.cuh" in p.stdout
    assert verify(fork, "--bogus").returncode == 3
    p = verify(fork, manifest=tmp_path / "nope.yaml")
    assert p.returncode == 3 and "cannot read" in p.stderr
    (fork / PREFIX / STAMP).unlink()
    p = verify(fork)  # without the stamp the release's files are still checked; the missing stamp is drift
    assert p.returncode == 1 and "no .sm120-vendor.json" in p.stdout


def test_verifier_notices_its_own_edit(canon, tmp_path):
    fork = synced(canon, tmp_path)
    script = fork / PREFIX / VERIFY
    script.write_text(script.read_text() + "\n# edited\n")
    p = verify(fork)
    assert p.returncode == 1 and "not the verifier --sync wrote" in p.stdout
    code, doc = check(canon, fork)  # and check_vendor compares it with the release's verifier
    f = by_path(doc)[VERIFY]
    assert code == 1 and f["status"] == "changed" and "+# edited" in f["diff"]


def test_refusals_name_the_ways_that_work(canon, tmp_path):
    """A pinned file edited again is a patch of *this* release (re-pin it), and --force would not get past it; a
    fork that does not vendor this layer gets no `pin` advice (it has no stamp to pin in)."""
    fork = synced(canon, tmp_path)
    target = _pin(canon, fork)
    target.write_bytes(target.read_bytes() + b"// edited again\n")
    code, out, _ = run_cv("--repo", str(canon), "--fork", str(fork), "--sync")
    assert code == 1 and "edited again after it was pinned; pin it again, or pass --drop-patches" in out
    assert "--sync --force" not in out and "another release" not in out
    own = {rel: b"#pragma once\n// another project's SM120 header\n" + rel.encode() * 40 + b"\n" for rel in V2}
    other = make_fork(tmp_path / "o", own)
    code, out, _ = run_cv("--repo", str(canon), "--fork", str(other), "--sync")
    assert code == 1 and "does not vendor this layer" in out and "check_vendor.py pin" not in out
    assert "--sync --force" in out
