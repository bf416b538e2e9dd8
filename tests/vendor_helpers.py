"""Real git repositories for check_vendor tests: a canonical repo with releases, and forks of it."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

from vendorkit.cli import main as cv_main

PREFIX = "deep_gemm/include/deep_gemm"

V1 = {
    "common/sm120_tma.cuh": b"#pragma once\n// tma v1\nstruct Tma { int x; };\n",
    "common/sm120_utils.cuh": b"#pragma once\ninline int add(int a, int b) { return a + b; }\n",
    "mma/sm120.cuh": b'#pragma once\n#include "../common/sm120_utils.cuh"\n// mma atoms\n',
    "impls/sm120_bf16_gemm.cuh": b'#pragma once\n#include "../mma/sm120.cuh"\nvoid gemm_v1();\n',
    "impls/sm120_old_kernel.cuh": b"#pragma once\nvoid old_kernel();\n",
}
# v0.2.0 edits one file, drops one, adds one
V2 = dict(V1)
V2["impls/sm120_bf16_gemm.cuh"] = b'#pragma once\n#include "../mma/sm120.cuh"\nvoid gemm_v2(int stages);\n'
del V2["impls/sm120_old_kernel.cuh"]
V2["scheduler/sm120_gemm.cuh"] = b"#pragma once\nstruct Scheduler { int tile; };\n"


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    p = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, env=env)
    assert p.returncode == 0, f"git {args}: {p.stderr}"
    return p.stdout


def init_repo(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.name", "Test")
    git(path, "config", "user.email", "test@example.invalid")
    git(path, "config", "core.autocrlf", "false")
    return path


def write_tree(base: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        p = base / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)


def commit_all(repo: Path, msg: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", msg)
    return git(repo, "rev-parse", "HEAD").strip()


def run_cv(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = cv_main(list(argv))
    return code, out.getvalue(), err.getvalue()


def run_json(*argv: str) -> tuple[int, dict]:
    code, out, err = run_cv(*argv, "--format", "json")
    return code, json.loads(out)


def make_canonical(tmp: Path) -> Path:
    """Canonical repo with releases v0.1.0 (V1) and v0.2.0 (V2), both committed."""
    repo = init_repo(tmp / "canon")
    write_tree(repo / "device_layer", V1)
    commit_all(repo, "device layer v1")
    code, out, err = run_cv("release", "v0.1.0", "--repo", str(repo), "--date", "2026-12-01")
    assert code == 0, err
    commit_all(repo, "release v0.1.0")
    shutil.rmtree(repo / "device_layer")
    write_tree(repo / "device_layer", V2)
    commit_all(repo, "device layer v2")
    code, out, err = run_cv("release", "v0.2.0", "--repo", str(repo), "--date", "2026-12-02")
    assert code == 0, err
    commit_all(repo, "release v0.2.0")
    return repo


def make_fork(tmp: Path, files: dict[str, bytes], name: str = "fork", prefix: str = PREFIX) -> Path:
    """A directory laid out like a DeepGEMM fork, with its own non-vendored files beside ours."""
    fork = tmp / name
    write_tree(
        fork,
        {
            "setup.py": b"# fork's own\n",
            f"{prefix}/common/utils.cuh": b"// fork's own header\n",
            f"{prefix}/impls/sm90_fp8_gemm_1d1d.cuh": b"// fork's own kernel\n",
        },
    )
    write_tree(fork / prefix, files)
    return fork


def ssh_key(tmp: Path, name: str) -> tuple[Path, str]:
    """A throwaway ed25519 key pair made at test time (never committed): (private key path, public key line)."""
    path = tmp / "keys" / name
    path.parent.mkdir(exist_ok=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(path)], check=True)
    return path, (path.parent / f"{name}.pub").read_text().strip()


def by_path(doc: dict) -> dict[str, dict]:
    return {f["path"]: f for f in doc["files"]}


_AUDIT: list[list[str]] = []


def _audit_hook(event: str, args) -> None:
    if _AUDIT and event == "open" and isinstance(args[0], (str, bytes)):
        _AUDIT[-1].append(os.path.realpath(os.fsdecode(args[0])))


sys.addaudithook(_audit_hook)  # cannot be removed; records only inside opened_paths()


class opened_paths:
    """Every path this process opens inside the block (Python's "open" audit event), resolved."""

    def __enter__(self) -> list[str]:
        _AUDIT.append([])
        return _AUDIT[-1]

    def __exit__(self, *exc) -> None:
        _AUDIT.pop()
