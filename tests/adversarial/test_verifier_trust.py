"""The offline verifier cannot be swapped or fooled through the stamp: check_vendor compares it with the bytes the
release ships, and the verifier carries the release's digests itself."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import fsaudit
import pytest
from vendor_helpers import PREFIX, ROOT, V1, V2, by_path, make_fork, run_cv, run_json

STAMP = ".sm120-vendor.json"
VERIFY = ".sm120-vendor-verify.py"


def _synced(canon: Path, tmp_path: Path, files=V2, *extra: str) -> Path:
    fork = make_fork(tmp_path, files)
    code, out, err = run_cv("--repo", str(canon), "--fork", str(fork), "--sync", *extra)
    assert code == 0, out + err
    return fork


def _verify(fork: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-I", str(fork / PREFIX / VERIFY), *args], capture_output=True, text=True, cwd=fork, timeout=60
    )


def _release(canon: Path, tag: str):
    from vendorkit.manifest import ManifestSet

    return ManifestSet.load_dir(str(canon / "vendor_manifests")).by_tag[tag]


def test_vendored_verifier_is_self_contained_and_carries_the_release(canon, tmp_path):
    fork = _synced(canon, tmp_path)
    text = (fork / PREFIX / VERIFY).read_text()
    assert "from vendorkit" not in text and "import vendorkit" not in text
    baked = json.loads(next(ln for ln in text.splitlines() if ln.startswith("_RELEASE = "))[len("_RELEASE = ") :])
    rel = _release(canon, "v0.2.0")
    assert rel.chain is not None and rel.text is not None
    assert baked == {
        "tag": "v0.2.0",
        "tree_sha256": rel.tree_sha256,
        "files": {e.path: e.sha256 for e in rel.files},
        "manifest": (canon / "vendor_manifests" / "v0.2.0.yaml").read_text(),
        "chain_length": 2,
        "chain_head": rel.chain[1],
    }
    p = _verify(fork)
    assert p.returncode == 0 and "verdict: in-sync (v0.2.0)" in p.stdout


def test_a_swapped_verifier_is_drift_for_check_vendor(canon, tmp_path):
    fork = _synced(canon, tmp_path)
    (fork / PREFIX / "mma/sm120.cuh").write_bytes(b"// drifted\n")
    (fork / PREFIX / VERIFY).write_text("print('verdict: in-sync'); raise SystemExit(0)\n")
    assert _verify(fork).returncode == 0  # what a swapped verifier does; the fork's CI alone cannot tell
    code, doc = run_json("--repo", str(canon), "--fork", str(fork))
    f = by_path(doc)[VERIFY]
    assert code == 1 and f["status"] == "changed" and "not the verifier --sync writes for v0.2.0" in f["detail"]
    # --sync puts the release's verifier back, keeping the swapped one in the backup
    code, out, err = run_cv("--repo", str(canon), "--fork", str(fork), "--sync")
    assert code == 0, out + err
    assert (fork / PREFIX / VERIFY).read_bytes() == __import__("vendorkit.verifier_gen").verifier_gen.build(
        _release(canon, "v0.2.0")
    )
    assert [b.read_text() for b in (fork / ".sm120-sync-backup").rglob(VERIFY)] == [
        "print('verdict: in-sync'); raise SystemExit(0)\n"
    ]


def test_a_stamp_forged_to_bless_drift_is_caught_offline(canon, tmp_path):
    import sm120_vendor_verify as v

    fork = _synced(canon, tmp_path)
    drifted = b"// drifted bytes the forged stamp vouches for\n"
    (fork / PREFIX / "mma/sm120.cuh").write_bytes(drifted)
    doc = json.loads((fork / PREFIX / STAMP).read_text())
    for f in doc["files"]:
        if f["path"] == "mma/sm120.cuh":
            f["sha256"] = hashlib.sha256(drifted).hexdigest()
    doc["tree_sha256"] = v.tree_sha256((f["path"], f["sha256"]) for f in doc["files"])  # self-consistent
    (fork / PREFIX / STAMP).write_text(json.dumps(doc))
    p = _verify(fork)  # no --manifest needed: the verifier knows the release's digest of mma/sm120.cuh
    assert p.returncode == 1 and "changed  mma/sm120.cuh" in p.stdout
    assert "stamp hash of mma/sm120.cuh is not the released one" in p.stdout
    code, doc = run_json("--repo", str(canon), "--fork", str(fork))
    assert code == 1 and by_path(doc)[STAMP]["diagnosis"] == "invalid-stamp"


def test_a_stamp_linked_outside_is_not_read(canon, tmp_path):
    fork = _synced(canon, tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / STAMP).write_bytes((fork / PREFIX / STAMP).read_bytes())
    (fork / PREFIX / STAMP).unlink()
    (fork / PREFIX / STAMP).symlink_to(outside / STAMP)
    with fsaudit.OutsideWatch(str(outside)) as events:
        p = _verify(fork)
        code, doc = run_json("--repo", str(canon), "--fork", str(fork))
    assert events == []
    assert p.returncode == 1 and f"{STAMP} is a symlink (not followed)" in p.stdout
    assert code == 1 and "is a symlink to" in by_path(doc)[STAMP]["detail"]


def test_an_oversized_stamp_is_not_read(canon, tmp_path):
    fork = _synced(canon, tmp_path)
    (fork / PREFIX / STAMP).write_bytes(b"{" + b" " * (2 << 20) + b"}")
    p = _verify(fork)
    assert p.returncode == 1 and "larger than" in p.stdout
    code, doc = run_json("--repo", str(canon), "--fork", str(fork))
    assert code == 1 and "larger than 1 MiB" in by_path(doc)[STAMP]["detail"]


def test_a_forged_patch_is_shown_as_a_patch_never_as_ok(canon, tmp_path):
    """A stamp can declare a patch (that is what pin writes); it is the fork's declaration, listed with its
    reason in every output, never hidden as ok (docs/vendoring.md, trust model)."""
    import sm120_vendor_verify as v

    fork = _synced(canon, tmp_path)
    edited = b"// a declared local patch\n"
    (fork / PREFIX / "mma/sm120.cuh").write_bytes(edited)
    doc = json.loads((fork / PREFIX / STAMP).read_text())
    base = next(f["sha256"] for f in doc["files"] if f["path"] == "mma/sm120.cuh")
    doc["patches"] = [
        {
            "path": "mma/sm120.cuh",
            "base_sha256": base,
            "patched_sha256": hashlib.sha256(edited).hexdigest(),
            "reason": "declared in the stamp",
        }
    ]
    (fork / PREFIX / STAMP).write_text(json.dumps(doc))
    p = _verify(fork)
    assert p.returncode == 0 and "patched  mma/sm120.cuh  declared in the stamp" in p.stdout
    assert v.validate(doc) == []


def test_a_verifier_of_another_release_or_an_older_tool(canon, tmp_path, monkeypatch):
    from vendorkit import verifier_gen

    fork = _synced(canon, tmp_path)
    (fork / PREFIX / VERIFY).write_bytes(verifier_gen.build(_release(canon, "v0.1.0")))
    code, doc = run_json("--repo", str(canon), "--fork", str(fork))
    f = by_path(doc)[VERIFY]
    assert code == 1 and (f["status"], f["diagnosis"]) == ("changed", "matches v0.1.0 (older)")
    old = b"#!/usr/bin/env python3\n# the unbaked verifier an earlier check_vendor wrote\n"
    monkeypatch.setitem(verifier_gen.LEGACY, hashlib.sha256(old).hexdigest(), "check_vendor of a test")
    (fork / PREFIX / VERIFY).write_bytes(old)
    code, doc = run_json("--repo", str(canon), "--fork", str(fork))
    f = by_path(doc)[VERIFY]
    assert code == 1 and f["diagnosis"] == "older-verifier" and "trusts any stamp" in f["detail"]
    code, out, _ = run_cv("--repo", str(canon), "--fork", str(fork), "--sync")
    assert code == 0 and not (fork / ".sm120-sync-backup").exists()  # our own bytes: replaced without a backup


def test_legacy_verifier_digests_are_the_ones_git_history_holds():
    """verifier_gen.LEGACY lists every version of the template an earlier check_vendor wrote unbaked."""
    from vendorkit import verifier_gen

    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the template's history is not here (the digests are checked in CI)")
    log = subprocess.run(
        ["git", "-C", str(ROOT), "log", "--format=%H", "--", "tools/sm120_vendor_verify.py"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    unbaked = []
    for commit in log:
        data = subprocess.run(
            ["git", "-C", str(ROOT), "show", f"{commit}:tools/sm120_vendor_verify.py"], capture_output=True, check=True
        ).stdout
        if b"_RELEASE = None" not in data:
            unbaked.append(hashlib.sha256(data).hexdigest())
    assert unbaked and set(unbaked) == set(verifier_gen.LEGACY)


def test_manifest_of_another_release_is_a_finding(canon, tmp_path):
    fork = _synced(canon, tmp_path)
    p = _verify(fork, "--manifest", str(canon / "vendor_manifests/v0.1.0.yaml"))
    assert p.returncode == 1 and "is not the release this verifier checks" in p.stdout
    p = _verify(fork, "--manifest", str(canon / "vendor_manifests/v0.2.0.yaml"))
    assert p.returncode == 0


def test_stale_fork_with_its_own_verifier_is_still_stale(canon, tmp_path):
    fork = _synced(canon, tmp_path, V1, "--tag", "v0.1.0")
    code, doc = run_json("--repo", str(canon), "--fork", str(fork))
    assert code == 1 and doc["verdict"] == "stale" and doc["stale_tag"] == "v0.1.0"
    assert by_path(doc)[VERIFY]["status"] == "ok"  # the verifier of the stamp's release


# ---------------------------------------------------------------- the verifier stands alone

PLANTED = ["hashlib", "json", "re", "argparse", "unicodedata", "__future__", "html", "stat", "errno"]


@pytest.mark.parametrize("how", ["beside", "cwd", "through-a-link", "linked-vendor-root"])
def test_modules_planted_beside_the_verifier_are_never_imported(canon, tmp_path, how):
    """A fork plants stand-ins for the modules the verifier imports, each one forging an in-sync verdict; the
    fork's files have drifted. Run as a fork's CI would (no -I), the verifier still says drifted. (Environment
    variables such as PYTHONPATH are the caller's: what they name is imported before any script runs.)"""
    import os

    fork = _synced(canon, tmp_path)
    (fork / PREFIX / "mma/sm120.cuh").write_bytes(b"// drifted\n")
    marker = tmp_path / "IMPORTED"
    forge = (
        f"open({str(marker)!r}, 'a').write(__name__ + '\\n')\n"
        "import sys\nprint('verdict: in-sync (v0.2.0)'); sys.exit(0)\n"
    )
    where = fork / PREFIX if how != "cwd" else fork
    for name in PLANTED:
        (where / f"{name}.py").write_text(forge)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    script = fork / PREFIX / VERIFY
    if how == "through-a-link":  # run by a path through a symlink (macOS /tmp, a linked home or workspace)
        os.symlink(tmp_path, tmp_path.parent / f"{tmp_path.name}-link")
        script = tmp_path.parent / f"{tmp_path.name}-link" / fork.relative_to(tmp_path) / PREFIX / VERIFY
    elif how == "linked-vendor-root":  # the fork links its vendor root's parent elsewhere in its own tree
        os.symlink(fork / PREFIX, fork / "alias")
        script = fork / "alias" / VERIFY
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=fork, env=env, timeout=60)
    assert p.returncode == 1 and "verdict: drifted" in p.stdout and not marker.exists(), (p.stdout, p.stderr)


def test_python_files_beside_the_verifier_are_drift_for_check_vendor(canon, tmp_path):
    fork = _synced(canon, tmp_path)
    assert run_cv("--repo", str(canon), "--fork", str(fork))[0] == 0
    for rel in (
        "hashlib.py",
        "_json.cpython-311-x86_64-linux-gnu.so",
        "__pycache__/re.cpython-311.pyc",
        "evil.pth",
        "json/__init__.py",
    ):
        (fork / PREFIX / rel).parent.mkdir(parents=True, exist_ok=True)
        (fork / PREFIX / rel).write_bytes(b"print('planted')\n")
    (fork / PREFIX / "common" / "helper.py").write_bytes(b"# a fork's own script, not importable by the verifier\n")
    code, doc = run_json("--repo", str(canon), "--fork", str(fork))
    flagged = {f["path"] for f in doc["files"] if f["diagnosis"] == "beside-verifier"}
    assert code == 1 and doc["verdict"] == "drifted"
    assert flagged == {
        "hashlib.py",
        "_json.cpython-311-x86_64-linux-gnu.so",
        "__pycache__/re.cpython-311.pyc",
        "evil.pth",
        "json/__init__.py",
    }
    assert by_path(doc)["common/helper.py"]["status"] == "foreign"


def test_the_verifier_checks_modes_as_check_vendor_does(canon, tmp_path):
    fork = _synced(canon, tmp_path)
    target = fork / PREFIX / "common/sm120_tma.cuh"
    target.chmod(0o755)
    p = _verify(fork)
    assert p.returncode == 1 and "mode     common/sm120_tma.cuh  mode 100755, the release's 100644" in p.stdout
    code, doc = run_json("--repo", str(canon), "--fork", str(fork))
    assert code == 1 and by_path(doc)["common/sm120_tma.cuh"]["status"] == "mode"
    target.chmod(0o644)
    assert _verify(fork).returncode == 0


def _template_at(commit: str, where: Path) -> str | None:
    """The inlined verifier template check_vendor of `commit` wrote (its own tools/, run in a child), or None
    when that commit had no baked template."""
    out = where / commit
    out.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "tools"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(out)], input=archive.stdout, check=True)
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); from vendorkit import verifier_gen as v\n"
        "sys.stdout.write(v._template())\n"
    )
    p = subprocess.run([sys.executable, "-c", code, str(out / "tools")], capture_output=True, text=True)
    return p.stdout if p.returncode == 0 and "_RELEASE = None\n" in p.stdout else None


def test_a_verifier_written_by_an_earlier_baked_template_is_an_older_verifier(canon, tmp_path):
    """The template of 2026-12-01 (6416b30) baked the release in but imported from its own directory: a fork
    carrying one is told to re-sync, and --sync replaces it without a backup (its bytes are ours)."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the old template's files are not here (checked in CI)")
    old = _template_at("6416b30", tmp_path / "old")
    rel = _release(canon, "v0.2.0")
    baked = json.dumps(
        {"tag": rel.tag, "tree_sha256": rel.tree_sha256, "files": {e.path: e.sha256 for e in rel.files}}, sort_keys=True
    )
    fork = _synced(canon, tmp_path)
    (fork / PREFIX / VERIFY).write_text(old.replace("_RELEASE = None\n", f"_RELEASE = {baked}\n"))
    code, doc = run_json("--repo", str(canon), "--fork", str(fork))
    f = by_path(doc)[VERIFY]
    assert code == 1 and f["diagnosis"] == "older-verifier" and "6416b30" in f["detail"]
    code, out, _ = run_cv("--repo", str(canon), "--fork", str(fork), "--sync")
    assert code == 0 and not (fork / ".sm120-sync-backup").exists()


def test_every_earlier_baked_template_is_known(tmp_path):
    """LEGACY_TEMPLATES holds the template every commit since the first baked verifier (c464b40) wrote, but the
    current one: a fork synced by any check_vendor of main is recognised."""
    from vendorkit import verifier_gen

    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout (checked in CI)")
    sources = ["tools/sm120_vendor_verify.py", "tools/vendorkit/verifier_gen.py"] + [
        f"tools/vendorkit/{n}.py" for n in verifier_gen.INLINED
    ]
    log = subprocess.run(
        ["git", "-C", str(ROOT), "log", "--format=%h", "c464b40^..HEAD", "--", *sources],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    current = verifier_gen.template_digest(verifier_gen._template())
    seen = {verifier_gen.template_digest(t) for c in log if (t := _template_at(c, tmp_path))}
    assert seen - {current} <= set(verifier_gen.LEGACY_TEMPLATES), seen - {current} - set(verifier_gen.LEGACY_TEMPLATES)
    assert set(verifier_gen.LEGACY_TEMPLATES) <= seen
