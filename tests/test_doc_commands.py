"""Every shell command in README.md and docs/*.md runs as written, or says next to it why CI cannot run it.

A command is the text of a ```bash block (continuation lines and here-documents joined). It either carries a
trailing comment starting with `network:`, `GPU:` or `not in CI` (the reason), or this test runs it exactly as
written with bash, from a copy of this checkout, next to a DeepGEMM-like fork at `../DeepGEMM` vendoring the latest
release and a wheel at `dist/...`, in the order the documents give. README's test command is what .ci/run runs.
Placeholders (`<org>`) must be quoted so a paste cannot turn them into redirections.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from vendor_helpers import ROOT, write_tree

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
REASON = re.compile(r"#\s*(network|GPU|not in CI)\b")
# what would reach a server (a URL recorded as a patch's --upstream does not)
NETWORK = re.compile(
    r"\bpypi:|\bgithub:|git push|git clone|\bcurl\b|\bwget\b|pip install|GITHUB_TOKEN|"
    r"--(api|index)-url\s+\S*https?://"
)
TEST_COMMAND_DOC = "README.md"
# exit codes other than 0 that a documented command is expected to give in the sandbox, by a part of its text
EXPECTED = {"--tag v0.1.0": {1}, "--tag v0.2.0": {1}, "dist/sgl_deep_gemm": {1}}
PREFIX = "deep_gemm/include/deep_gemm"


@dataclass
class Command:
    doc: str
    line: int
    text: str

    @property
    def reason(self) -> str | None:
        """The marker of a command CI cannot run (on its command lines, not in a here-document's body)."""
        lines = self.text.split("\n")
        m = REASON.search(lines[0] if re.search(r"<<-?'?\w+'?", lines[0]) else self.text)
        return m.group(1) if m else None


def commands(path: Path) -> list[Command]:
    out: list[Command] = []
    lines = path.read_text().splitlines()
    i, in_block = 0, False
    while i < len(lines):
        line = lines[i]
        if not in_block:
            in_block = bool(re.match(r"^\s*```(bash|sh|shell)\s*$", line))
            i += 1
            continue
        if line.strip().startswith("```"):
            in_block = False
            i += 1
            continue
        if not line.strip() or line.lstrip().startswith("#"):
            i += 1
            continue
        start, text = i + 1, line
        while text.rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
            text += "\n" + lines[i]
        heredoc = re.search(r"<<-?'?(\w+)'?", text)
        if heredoc:
            while i + 1 < len(lines) and lines[i + 1].strip() != heredoc.group(1):
                i += 1
                text += "\n" + lines[i]
            i += 1
            text += "\n" + lines[i]
        out.append(Command(str(path.relative_to(ROOT)), start, text))
        i += 1
    return out


ALL = [c for doc in DOCS for c in commands(doc)]
# README's test command is run by .ci/run (checked below), not from inside the test suite it starts
RUN = [c for c in ALL if c.reason is None and not (c.doc == TEST_COMMAND_DOC and "-m pytest" in c.text)]


def test_every_command_runs_here_or_says_why_not():
    assert len(ALL) > 30
    for c in ALL:
        bare = re.sub(r"'[^']*'|\"[^\"]*\"|<<-?'?\w+'?", "", c.text.split(" #")[0])
        assert not re.search(r"<[A-Za-z]", bare), f"{c.doc}:{c.line}: quote the placeholder: {c.text!r}"
    for c in RUN:  # the tests never reach the internet: such a command must be marked
        assert not NETWORK.search(c.text), f"{c.doc}:{c.line}: mark it `# network: ...`: {c.text!r}"
    test_command = [c for c in ALL if c.doc == TEST_COMMAND_DOC and "-m pytest" in c.text]
    assert len(test_command) == 1
    assert test_command[0].text in (ROOT / ".ci/run").read_text(), "README's test command is what .ci/run runs"


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory) -> Path:
    """A copy of this checkout (history included) at work/deep_gemm_sm120, a fork at work/DeepGEMM vendoring the
    latest release (synced: stamp and verifier), and a wheel of another project's SM120 headers under dist/."""
    work = tmp_path_factory.mktemp("docs")
    clone = work / "deep_gemm_sm120"
    shutil.copytree(
        ROOT,
        clone,
        symlinks=True,
        ignore=shutil.ignore_patterns(
            "__pycache__", ".pytest_cache", "build", "*.egg-info", "dist", ".devwheels", "compile_gate_out"
        ),
    )
    fork = work / "DeepGEMM"
    write_tree(fork, {"setup.py": b"# DeepGEMM's own\n", f"{PREFIX}/common/utils.cuh": b"// DeepGEMM's own\n"})
    p = subprocess.run(
        [sys.executable, str(clone / "tools/check_vendor.py"), "--fork", str(fork), "--prefix", PREFIX, "--sync"],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    (clone / "dist").mkdir()
    with zipfile.ZipFile(clone / "dist/sgl_deep_gemm-0.2.5-py3-none-manylinux2014_x86_64.whl", "w") as z:
        z.writestr(f"{PREFIX}/impls/sm120_bf16_gemm.cuh", b"// another project's SM120 header\n" * 20)
        z.writestr("deep_gemm/__init__.py", b"")
    return clone


def _setup(c: Command, clone: Path) -> None:
    """What a reader has done before the command: a pin needs an edit to pin."""
    if " pin " in c.text:
        target = clone.parent / "DeepGEMM" / PREFIX / "impls/sm120_bf16_gemm.cuh"
        if b"reviewed local edit" not in target.read_bytes():
            target.write_bytes(target.read_bytes() + b"// a reviewed local edit\n")


def _env(clone: Path) -> dict:
    bindir = clone.parent / "bin"
    bindir.mkdir(exist_ok=True)
    py = bindir / "python"
    if not py.exists():
        # a wrapper, not a symlink: a symlinked venv interpreter outside its venv finds no pyvenv.cfg and runs as
        # the base interpreter, without the venv's packages
        py.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
        py.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "DG_SM120_AS"))}
    env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"
    return env


def test_the_commands_python_is_this_interpreter(tmp_path):
    """`python` in a documented command is the interpreter running the tests, venv included."""
    (tmp_path / "clone").mkdir()
    env = _env(tmp_path / "clone")
    p = subprocess.run(
        ["bash", "-c", "python -c 'import sys; print(sys.prefix)'"], env=env, capture_output=True, text=True
    )
    assert p.stdout.strip() == sys.prefix, p.stdout + p.stderr


def test_documented_commands_run_as_written(sandbox):
    assert len(RUN) >= 12
    env = _env(sandbox)
    for c in RUN:
        _setup(c, sandbox)
        p = subprocess.run(["bash", "-c", c.text], cwd=sandbox, env=env, capture_output=True, text=True, timeout=900)
        allowed = next((codes for part, codes in EXPECTED.items() if part in c.text), {0})
        assert p.returncode in allowed, (
            f"{c.doc}:{c.line}: `{c.text}` exited {p.returncode}:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}"
        )
        assert "Traceback" not in p.stderr, f"{c.doc}:{c.line}: {p.stderr[-2000:]}"
    # README's compile-gate line wrote its report: the smoke slice covers every family on every target
    doc = json.loads((sandbox / "gate-smoke.json").read_text())
    from test_compile_gate import check_smoke

    check_smoke(doc)


def test_docs_name_only_files_in_this_repository():
    """Every markdown link and every backticked repository path in README.md and docs/ exists here; nothing
    points outside the checkout (a newcomer has only the repository)."""
    from test_family_contract_cpu import worked_example

    tops = (
        "tools/",
        "tests/",
        "docs/",
        "host/",
        "device_layer/",
        "benchmarks/",
        "vendor_manifests/",
        ".github/",
        ".ci/",
    )
    created = set(worked_example())  # the files adding_a_family.md's worked example has the reader write
    for doc in DOCS:
        text = doc.read_text()
        for m in re.finditer(r"\]\(([^)\s#]+)(#[^)]*)?\)", text):
            target = m.group(1)
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            path = (doc.parent / target).resolve()
            assert path.exists() and ROOT in path.parents, f"{doc.name}: link to {target}"
        for m in re.finditer(r"`([^`\s]+)`", text):
            name = m.group(1).rstrip(".,:;")
            assert "shared/" not in name, f"{doc.name}: names {name}, outside the repository"
            if name in created and doc.name == "adding_a_family.md":
                continue
            if name.startswith(tops) and not re.search(r"[<>*{}]|X\.Y|NAME|TAG|\.\.\.", name):
                assert (ROOT / name.split("::")[0].split(":")[0]).exists(), f"{doc.name}: names {name}"


def test_host_design_names_only_paths_that_exist():
    """docs/host_design.md describes the code as it is: every file or folder it names (in the table, the text and
    the call-flow picture) exists, from the repository root or the package root."""
    text = (ROOT / "docs/host_design.md").read_text()
    package = ROOT / "host" / "deep_gemm_sm120"
    names = set(re.findall(r"[\w./-]+/(?:[\w.-]+\.(?:py|md|toml|cuh|sh))|[\w./-]+/(?=[\s`)|,])", text))
    assert len(names) > 20
    for name in names:
        name = name.strip("./") if name.startswith("./") else name
        assert (ROOT / name).exists() or (package / name).exists(), f"docs/host_design.md names {name}"


def test_the_docs_agree_on_what_the_tools_need_and_what_ci_runs():
    """Two contradictions a newcomer found: the tools' own docstrings said PyYAML is required where vendoring.md
    (and the no-yaml tests) say the standard library is enough; ci.md said the test job runs the quick compile
    gate, which README marks as not in it."""
    for path in ("tools/check_vendor.py", "tools/vendorkit/__init__.py", "docs/vendoring.md"):
        text = (ROOT / path).read_text()
        assert "PyYAML is used when installed" in text, path
        assert not re.search(r"standard library and PyYAML|PyYAML (is )?required", text), path
    readme_not_in_ci = [c.text for c in commands(ROOT / "README.md") if "not in CI's test job" in c.text]
    assert any("--quick" in t for t in readme_not_in_ci)
    tests_row = next(ln for ln in (ROOT / "docs/ci.md").read_text().splitlines() if ln.startswith("| `tests` |"))
    assert "quick" not in tests_row and "--smoke" in tests_row, tests_row
