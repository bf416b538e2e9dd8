"""The steps docs/vendoring.md gives forks, run verbatim, and the documented synopsis against the parser."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import yaml
from vendor_helpers import ROOT, run_cv

DOC = (ROOT / "docs/vendoring.md").read_text()
PREFIX = "deep_gemm/include/deep_gemm"


def _section(title: str) -> str:
    start = DOC.index(title)
    nxt = DOC.find("\n#", start + len(title))
    return DOC[start : nxt if nxt != -1 else len(DOC)]


def _blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, re.S)


@pytest.fixture()
def deepgemm(tmp_path) -> tuple[Path, str]:
    """A DeepGEMM-like fork holding the release the recipe names, and that tag."""
    from vendorkit.canonical import CanonicalStore
    from vendorkit.manifest import ManifestSet

    steps = yaml.safe_load(_blocks(_section("### In a fork's own CI"), "yaml")[0])
    tag = re.search(r"--tag (v\d+\.\d+\.\d+)", steps[1]["run"]).group(1)
    ms = ManifestSet.load_dir(str(ROOT / "vendor_manifests"))
    assert tag == ms.latest.tag, "docs/vendoring.md's CI recipe should name the latest release"
    fork = tmp_path / "DeepGEMM"
    store = CanonicalStore(str(ROOT))
    for rel, data in {
        "setup.py": b"# DeepGEMM\n",
        f"{PREFIX}/common/utils.cuh": b"// DeepGEMM's own\n",
        f"{PREFIX}/impls/sm90_bf16_gemm.cuh": b"// DeepGEMM's own\n",
    }.items():
        (fork / rel).parent.mkdir(parents=True, exist_ok=True)
        (fork / rel).write_bytes(data)
    for e in ms.by_tag[tag].files:
        p = fork / PREFIX / e.path
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(store.get(e))
    return fork, tag


def _actions_env(tmp_path: Path) -> dict:
    """What a GitHub Actions run step sees, minus PyYAML (the recipe installs nothing)."""
    bin_dir, shadow = tmp_path / "bin", tmp_path / "shadow"
    bin_dir.mkdir(exist_ok=True)
    shadow.mkdir(exist_ok=True)
    if not (bin_dir / "python").exists():
        (bin_dir / "python").symlink_to(sys.executable)
    (shadow / "yaml.py").write_text("raise ImportError('PyYAML is not installed here')\n")
    return {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(shadow),
        "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
        "HOME": str(tmp_path),
    }


def _run_step(command: str, cwd: Path, env: dict) -> tuple[int, str]:
    summary = Path(env["GITHUB_STEP_SUMMARY"])
    summary.write_text("")
    p = subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
    )
    assert "Traceback" not in p.stderr, p.stderr
    return p.returncode, summary.read_text()


def test_fork_ci_recipe_verbatim(deepgemm, tmp_path):
    fork, tag = deepgemm
    steps = yaml.safe_load(_blocks(_section("### In a fork's own CI"), "yaml")[0])
    checkout = steps[0]["with"]
    assert steps[0]["uses"].startswith("actions/checkout@") and checkout["ref"] == "main"
    # actions/checkout of this repository at main into the fork's workspace
    dest = fork / checkout["path"]
    for part in ("tools", "vendor_manifests", "device_layer"):
        shutil.copytree(ROOT / part, dest / part, ignore=shutil.ignore_patterns("__pycache__"))
    env = _actions_env(tmp_path)
    run = steps[1]["run"]

    code, summary = _run_step(run, fork, env)
    assert code == 0 and "**Verdict: in-sync**" in summary and f"against {tag}" in summary

    target = fork / PREFIX / "impls/sm120_bf16_gemm.cuh"
    target.write_bytes(target.read_bytes() + b"// local edit\n")
    code, summary = _run_step(run, fork, env)
    assert code == 1 and "**Verdict: drifted**" in summary and "| changed | `impls/sm120_bf16_gemm.cuh` |" in summary

    shutil.copytree(fork / PREFIX, fork / "third_party/copy")  # now the prefix is ambiguous: exit 3, summary says why
    code, summary = _run_step(run, fork, env)
    assert code == 3 and "could not check" in summary and "ambiguous prefix" in summary


def test_vendored_verifier_recipe_verbatim(deepgemm, tmp_path):
    fork, tag = deepgemm
    code, out, err = run_cv("--fork", str(fork), "--tag", tag, "--sync")
    assert code == 0, out + err
    block = _blocks(_section("### In a fork's own CI"), "yaml")[1]
    run = yaml.safe_load(block)[0]["run"]
    env = _actions_env(tmp_path)
    code, _ = _run_step(run, fork, env)
    assert code == 0
    (fork / PREFIX / "common/sm120_arch.cuh").write_bytes(b"// edited\n")
    code, _ = _run_step(run, fork, env)
    assert code == 1


def test_documented_synopsis_is_the_tools_and_lists_every_flag():
    from vendorkit import cli

    block = _blocks(_section("## Synopsis"), "text")[0]
    assert block.strip() == "\n".join(line[2:] for line in cli.SYNOPSIS.splitlines()[1:]).strip()
    assert "usage: usage:" not in cli._check_parser().format_help()
    flags = set()
    for parser in (
        cli._check_parser(),
        cli._pin_parser(),
        cli._release_parser(),
        cli._sign_parser(),
        cli._rotate_parser(),
    ):
        for action in parser._actions:
            flags.update(o for o in action.option_strings if o.startswith("--") and o != "--help")
    table = _section("## Synopsis")
    missing = sorted(f for f in flags if f"`{f}" not in table)
    assert missing == [], f"flags missing from the synopsis table in docs/vendoring.md: {missing}"


def test_documented_statuses_and_verdicts_are_the_tools():
    from vendorkit.compare import STATUSES

    statuses = _section("### Per-file statuses")
    assert [s for s in STATUSES if f"| `{s}` |" not in statuses] == []
    verdicts = _section("### Verdicts and exit codes")
    for v in ("in-sync", "stale", "drifted", "not-vendored", "unknown"):
        assert f"| `{v}` |" in verdicts
    assert "`schema_version: 2`" in DOC


def test_fake_servers_serves_from_the_command_line(tmp_path):
    from vendor_helpers import commit_all, init_repo

    repo = init_repo(tmp_path / "repo")
    (repo / "a.txt").write_text("a\n")
    commit_all(repo, "a")
    whl = tmp_path / "pkg-1.0-py3-none-any.whl"
    whl.write_bytes(b"PK\x05\x06" + b"\0" * 18)  # an empty zip
    p = subprocess.Popen(
        [sys.executable, str(ROOT / "tests/fake_servers.py"), "--repo", f"org/r={repo}", "--wheel", f"pkg==1.0={whl}"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        gh_url = p.stdout.readline().split()[-1]
        index_url = p.stdout.readline().split()[-1]
        assert gh_url.startswith("http://127.0.0.1:") and index_url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(f"{gh_url}/repos/org/r/commits/HEAD", timeout=10) as r:
            assert len(json.load(r)["sha"]) == 40
        req = urllib.request.Request(f"{index_url}/pkg/", headers={"Accept": "application/vnd.pypi.simple.v1+json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            assert json.load(r)["files"][0]["filename"] == "pkg-1.0-py3-none-any.whl"
    finally:
        p.terminate()
        p.wait(timeout=10)
