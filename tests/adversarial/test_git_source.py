"""`git:DIR@REF` is read as data, as a checkout of the ref writes it: a hostile repository's configuration never runs
a program (promisor remotes, uploadpack, fsmonitor, hooks, filters, textconv, include.path, protocol allows),
replace refs never change the view, attributes are resolved (eol) or refused (filter, ident, encodings), and a
broken object database is exit 2 with a reason, never a traceback."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from vendor_helpers import PREFIX, V2, by_path, commit_all, git, init_repo, run_cv, run_json, write_tree

MARK = "PWNED"


def _repo(tmp: Path, files=V2, name: str = "fork") -> Path:
    repo = init_repo(tmp / name)
    write_tree(repo, {"setup.py": b"# the fork\n", **{f"{PREFIX}/{k}": v for k, v in files.items()}})
    commit_all(repo, "vendor v0.2.0")
    return repo


def _hostile_config(repo: Path, marker: Path, remote: Path) -> None:
    """Every configuration key that makes git run a program, each running `touch marker`."""
    cmd = f"touch {marker}"
    hooks = repo / ".git" / "evil-hooks"
    hooks.mkdir()
    for hook in ("post-checkout", "pre-command", "reference-transaction", "post-index-change"):
        (hooks / hook).write_text(f"#!/bin/sh\n{cmd}\n")
        (hooks / hook).chmod(0o755)
    (repo / ".git" / "included.config").write_text(f"[core]\n\tpager = {cmd}\n")
    with open(repo / ".git" / "config", "a") as fh:
        fh.write(f"""[core]
\trepositoryformatversion = 1
\tfsmonitor = {cmd}
\thooksPath = {hooks}
\tsshCommand = {cmd}
\taskPass = {cmd}
\tattributesFile = {repo / ".git" / "evil-attributes"}
[remote "origin"]
\turl = file://{remote}
\tpromisor = true
\tpartialclonefilter = blob:none
\tuploadpack = {cmd}; git-upload-pack
[extensions]
\tpartialClone = origin
[filter "evil"]
\tsmudge = {cmd}
\tclean = {cmd}
\tprocess = {cmd}
\trequired = true
[diff "evil"]
\ttextconv = {cmd}
[include]
\tpath = {repo / ".git" / "included.config"}
[protocol]
\tallow = always
""")


@pytest.fixture()
def no_git_on_forks(monkeypatch):
    """Fail any process started with a fork path in its arguments or as its directory."""
    started: list = []
    real = subprocess.Popen.__init__

    def recording(self, args, *a, **kw):
        started.append((list(args) if not isinstance(args, str) else [args], kw.get("cwd")))
        return real(self, args, *a, **kw)

    monkeypatch.setattr(subprocess.Popen, "__init__", recording)
    return started


def _touched(started, root: Path) -> list:
    return [s for s in started if any(str(root) in str(x) for x in s[0]) or (s[1] and str(root) in str(s[1]))]


def test_a_hostile_repository_configuration_never_runs_anything(canon, tmp_path, no_git_on_forks):
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    repo = _repo(tmp_path)
    (repo / ".gitattributes").write_text("*.cuh diff=evil\n")
    commit_all(repo, "attributes")
    marker = tmp_path / MARK
    _hostile_config(repo, marker, remote)
    (repo / ".git" / "info").mkdir(exist_ok=True)
    (repo / ".git" / "info" / "attributes").write_text("setup.py diff=evil\n")
    blob = git(repo, "rev-parse", f"HEAD:{PREFIX}/common/sm120_tma.cuh").strip()
    no_git_on_forks.clear()  # what the test itself ran to build the repository

    code, doc = run_json("--repo", str(canon), "--fork", f"git:{repo}@main")
    assert code == 0 and doc["verdict"] == "in-sync", doc
    for argv in (
        ["provenance", f"git:{repo}@main"],
        [
            "import-manifest",
            "--from-git",
            f"{repo}@main",
            "--upstream",
            "probe",
            "--prefix",
            PREFIX,
            "--tag",
            "v1.0.0",
            "--repo",
            str(tmp_path / "nowhere"),
        ],
    ):
        run_cv(*argv)
    assert not marker.exists() and not _touched(no_git_on_forks, repo)

    # now a tree naming a blob the repository does not have: git would fetch it from the promisor remote
    (repo / ".git" / "objects" / blob[:2] / blob[2:]).unlink()
    code, out, err = run_cv("--repo", str(canon), "--fork", f"git:{repo}@main")
    assert code == 2 and f"object {blob} is not in" in err and "Traceback" not in err
    assert not marker.exists() and not _touched(no_git_on_forks, repo)

    # the attack is real: git itself runs the promisor's uploadpack for the same read
    env = {**os.environ, "HOME": str(tmp_path), "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["git", "-C", str(repo), "ls-tree", "-r", "-l", "HEAD"], capture_output=True, env=env)
    assert marker.exists()


def test_replace_refs_do_not_change_what_is_checked(canon, tmp_path):
    drifted = dict(V2, **{"mma/sm120.cuh": V2["mma/sm120.cuh"] + b"// a fork's edit\n"})
    repo = _repo(tmp_path, drifted)
    (tmp_path / "pristine").write_bytes(V2["mma/sm120.cuh"])
    good = git(repo, "hash-object", "-w", str(tmp_path / "pristine")).strip()
    bad = git(repo, "rev-parse", f"HEAD:{PREFIX}/mma/sm120.cuh").strip()
    git(repo, "replace", bad, good)  # git's own readers now show the released bytes for the drifted blob
    shown = git(repo, "show", f"HEAD:{PREFIX}/mma/sm120.cuh")
    assert shown.encode() == V2["mma/sm120.cuh"]
    code, doc = run_json("--repo", str(canon), "--fork", f"git:{repo}@main")
    f = by_path(doc)["mma/sm120.cuh"]
    assert code == 1 and f["status"] == "changed" and f["diagnosis"] == "content"


ATTRIBUTE_SETS = [
    {"": "*.cuh text eol=crlf\n"},
    {"": "* text=auto eol=crlf\n"},
    {"": "*.cuh eol=crlf\n*.cuh -text\n"},
    {"": "[attr]win text eol=crlf\n/deep_gemm/**/sm120_*.cuh win\n"},
    {"": "*.cuh crlf\n", PREFIX: "*.cuh eol=crlf\nmma/* -text\n"},
    {"": "*.cuh binary\n"},
    {"": "common/*.cuh eol=crlf\n"},  # a slash anchors the pattern at the root: matches nothing here
    {PREFIX + "/common": "sm120_t?a.cuh eol=crlf\n"},
]


@pytest.mark.parametrize("attrs", ATTRIBUTE_SETS, ids=[str(i) for i in range(len(ATTRIBUTE_SETS))])
def test_line_endings_are_the_checkouts(canon, tmp_path, attrs):
    files = dict(V2)
    files["impls/sm120_bf16_gemm.cuh"] = files["impls/sm120_bf16_gemm.cuh"].replace(b"\n", b"\r\n", 1)  # a CR
    repo = _repo(tmp_path, files)
    for d, text in attrs.items():  # one file stays as it is in every set, so the fork still vendors the layer
        (repo / d / ".gitattributes").write_text(text + "sm120_gemm.cuh -text\n")
    commit_all(repo, "attributes")
    clone = _clone(repo, tmp_path)
    code, doc = run_json("--repo", str(canon), "--fork", f"git:{repo}@main", "--prefix", PREFIX)
    files_seen = by_path(doc)
    from vendorkit.gitref import GitRefFork

    view = GitRefFork(str(repo), "main")
    listing, _ = view.list_under(PREFIX)
    for rel, f in listing.items():
        assert view.read(f) == (clone / PREFIX / rel).read_bytes(), rel  # the view is the checkout, byte for byte
    converted = [rel for rel in V2 if (clone / PREFIX / rel).read_bytes() != files[rel]]
    for rel in V2:
        want = "changed" if rel in converted or files[rel] != V2[rel] else "ok"
        assert files_seen[rel]["status"] == want, (rel, files_seen[rel])
    for rel in converted:
        assert files_seen[rel]["diagnosis"] in ("eol-only", "whitespace-only"), files_seen[rel]
    assert code == 1


def test_a_filter_driver_makes_the_checkout_the_cloners_and_is_refused_as_drift(canon, tmp_path):
    repo = _repo(tmp_path)
    _commit_attributes(repo, "*.cuh filter=evil\n")
    marker = tmp_path / MARK
    git(repo, "config", "filter.evil.smudge", f"touch {marker}")  # the fork's config: never read
    code, doc = run_json("--repo", str(canon), "--fork", f"git:{repo}@main")
    rows = [f for f in doc["files"] if f["path"].endswith(".cuh")]
    assert code == 1 and doc["verdict"] == "drifted" and not marker.exists()
    assert rows and all(
        f["status"] == "changed" and f["diagnosis"] == "checkout-attributes" and "filter driver 'evil'" in f["detail"]
        for f in rows
    ), rows


@pytest.mark.parametrize("attr", ["*.cuh ident", "*.cuh working-tree-encoding=UTF-16LE"])
def test_ident_and_encodings_give_the_bytes_a_clone_writes(canon, tmp_path, attr):
    files = {k: v + b"// $Id$\n" if "ident" in attr else v for k, v in V2.items()}
    repo = _repo(tmp_path, files)
    _commit_attributes(repo, attr + "\n")
    _assert_view_is_a_clones(repo, tmp_path)
    code, doc = run_json("--repo", str(canon), "--fork", f"git:{repo}@main")
    assert code == 1 and all(f["status"] == "changed" for f in doc["files"] if f["path"].endswith(".cuh"))


def _commit_attributes(repo: Path, text: str) -> None:
    """Commit a root .gitattributes alone: the files' blobs stay as committed."""
    (repo / ".gitattributes").write_bytes(text.encode())
    git(repo, "add", ".gitattributes")
    git(repo, "commit", "-q", "-m", "attributes")


def _clone(repo: Path, tmp_path: Path) -> Path:
    clone = tmp_path / "clone"
    env = {**os.environ, "HOME": str(tmp_path), "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True, env=env)
    return clone


def _assert_view_is_a_clones(repo: Path, tmp_path: Path) -> Path:
    """The git: view of every file under the prefix is, byte for byte, what a fresh clone writes."""
    from vendorkit.gitref import GitRefFork

    clone = _clone(repo, tmp_path)
    view = GitRefFork(str(repo), "main")
    listing, _ = view.list_under(PREFIX)
    for rel, f in listing.items():
        assert view.read(f) == (clone / PREFIX / rel).read_bytes(), rel
    return clone


# Found by the red team: each made an emulation of gitattributes disagree with git (the view now asks git).
ATTRIBUTE_CORNERS = {
    "macro used before its definition": "*.cuh win\n[attr]win text eol=crlf\n",
    "macro redefined after use": "[attr]win -text\n*.cuh win\n[attr]win text eol=crlf\n",
    "POSIX bracket class": "sm120[[:alpha:]]*.cuh text eol=crlf\nsm120.cuh text eol=crlf\n",
    "an invalid attribute name drops the line": "* text eol=crlf\n* -text bad$name\n",
    "a \\x escape in a quoted pattern": '* text eol=crlf\n"\\x2a" -text\n',
    "a rule behind a file-separator character": "* text eol=crlf\n# hidden\x1c* -text\n",
    "a line of 2048 bytes or more is ignored": "* text eol=crlf\n* -text" + " " * 2100 + "\n",
}


@pytest.mark.parametrize("text", list(ATTRIBUTE_CORNERS.values()), ids=list(ATTRIBUTE_CORNERS))
def test_attribute_corners_are_gits(canon, tmp_path, text):
    repo = _repo(tmp_path)
    _commit_attributes(repo, text)
    clone = _assert_view_is_a_clones(repo, tmp_path)
    code, doc = run_json("--repo", str(canon), "--fork", f"git:{repo}@main")
    crlf = any(b"\r\n" in (clone / PREFIX / rel).read_bytes() for rel in V2)
    assert (code == 1) == crlf


def test_a_symlinked_gitattributes_is_read_as_git_reads_it(canon, tmp_path):
    repo = _repo(tmp_path)
    os.symlink("*.cuh text eol=crlf", repo / ".gitattributes")  # git parses the link's text at checkout
    git(repo, "add", ".gitattributes")
    git(repo, "commit", "-q", "-m", "a linked attributes file")
    clone = _clone(repo, tmp_path)
    code, doc = run_json("--repo", str(canon), "--fork", f"git:{repo}@main")
    crlf = b"\r\n" in (clone / PREFIX / "mma/sm120.cuh").read_bytes()
    assert (code == 1) == crlf


def test_the_repositorys_own_info_attributes_is_not_a_clones(canon, tmp_path):
    """A clone has none of $GIT_DIR/info/attributes: only the committed attributes decide."""
    repo = _repo(tmp_path)
    (repo / ".gitattributes").write_text("*.cuh text eol=crlf\n")
    git(repo, "add", ".gitattributes")
    git(repo, "commit", "-q", "-m", "attributes")
    (repo / ".git" / "info").mkdir(exist_ok=True)
    (repo / ".git" / "info" / "attributes").write_text("* -text\n")
    code, doc = run_json("--repo", str(canon), "--fork", f"git:{repo}@main")
    assert code == 1 and by_path(doc)["mma/sm120.cuh"]["status"] == "changed"  # a clone writes CRLF


def _flip_byte(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    path.chmod(0o644)
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "damage", ["missing-tree", "corrupt-loose", "truncated-pack", "corrupt-pack", "bad-ref", "alternates"]
)
def test_a_broken_object_database_is_exit_2_with_a_reason(canon, tmp_path, damage):
    repo = _repo(tmp_path)
    objects = repo / ".git" / "objects"
    if damage == "missing-tree":
        tree = git(repo, "rev-parse", f"HEAD:{PREFIX}/common").strip()
        (objects / tree[:2] / tree[2:]).unlink()
    elif damage == "corrupt-loose":
        blob = git(repo, "rev-parse", f"HEAD:{PREFIX}/mma/sm120.cuh").strip()
        _flip_byte(objects / blob[:2] / blob[2:], 10)
    elif damage in ("truncated-pack", "corrupt-pack"):
        git(repo, "gc", "-q")
        pack = next((objects / "pack").glob("*.pack"))
        pack.chmod(0o644)
        if damage == "truncated-pack":
            pack.write_bytes(pack.read_bytes()[: pack.stat().st_size // 2])
        else:
            _flip_byte(pack, pack.stat().st_size // 2)
    elif damage == "bad-ref":
        (repo / ".git" / "refs" / "heads" / "main").write_text("not an object id\n")
    elif damage == "alternates":
        (objects / "info").mkdir(exist_ok=True)
        (objects / "info" / "alternates").write_text("/etc\n")
    code, out, err = run_cv("--repo", str(canon), "--fork", f"git:{repo}@main")
    assert code == 2 and err.startswith("check_vendor: cannot check: ") and err.count("\n") == 1, err
    assert "Traceback" not in err + out


def test_ref_expressions_and_unknown_refs_are_refused(canon, tmp_path):
    repo = _repo(tmp_path)
    code, _, err = run_cv("--repo", str(canon), "--fork", f"git:{repo}@main~1")
    assert code == 3 and "expected a branch, tag" in err
    code, _, err = run_cv("--repo", str(canon), "--fork", f"git:{repo}@nope")
    assert code == 2 and "no such ref 'nope'" in err
    head = git(repo, "rev-parse", "HEAD").strip()
    git(repo, "tag", "-a", "v1", "-m", "an annotated tag")
    for ref in (head, head[:8], "v1", "refs/tags/v1", "HEAD", "refs/heads/main"):
        assert run_cv("--repo", str(canon), "--fork", f"git:{repo}@{ref}")[0] == 0, ref


def test_one_big_blob_at_sixteen_paths_is_read_once(canon, tmp_path):
    from test_archives_and_limits import _measured_spec

    big = b"\0" * (60 << 20)
    repo = _repo(tmp_path, {**V2, **{f"extra/sm120_big{i}.cuh": big for i in range(16)}})
    assert sum(f.stat().st_size for f in (repo / ".git").rglob("*") if f.is_file()) < 4 << 20
    code, doc, took, rss = _measured_spec(canon, f"git:{repo}@main")
    assert code == 1 and sum(1 for f in doc["files"] if f["path"].startswith("extra/")) == 16
    assert rss < 256 << 20 and took < 30, (rss, took)


def test_a_tree_reusing_one_subtree_is_stopped_by_the_entries_budget(canon, tmp_path):
    """Found by the red team: 4 KB of objects, one subtree reused 100 times per level (2,000,000 paths under the
    prefix); the whole listing was built in memory (811 MB) before the budget stopped it."""
    from test_archives_and_limits import _measured_spec

    repo = init_repo(tmp_path / "fan")
    (tmp_path / "x").write_bytes(b"x\n")
    blob = git(repo, "hash-object", "-w", str(tmp_path / "x")).strip()
    leaf = subprocess.run(
        ["git", "-C", str(repo), "mktree"],
        input="".join(f"100644 blob {blob}\tsm120_f{i:04d}.cuh\n" for i in range(200)),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    t = leaf
    for _ in range(3):
        t = subprocess.run(
            ["git", "-C", str(repo), "mktree"],
            input="".join(f"040000 tree {t}\td{i:03d}\n" for i in range(100)),
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    c = git(repo, "commit-tree", t, "-m", "fan").strip()
    git(repo, "update-ref", "refs/heads/main", c)
    for prefix in (["--prefix", "d000"], []):
        code, doc, took, rss = _measured_spec(canon, f"git:{repo}@main", *prefix)
        assert code == 2 and "budget exhausted: entries" in doc["errors"][0], doc
        assert rss < 256 << 20 and took < 30, (prefix, rss, took)


def _raw_tree(repo: Path, entries: list[tuple[str, str, str]]) -> str:
    """A tree object written as given (duplicates and order unchecked), as a hostile fork can push one."""
    raw = b"".join(m.encode() + b" " + n.encode() + b"\0" + bytes.fromhex(o) for m, n, o in entries)
    return (
        subprocess.run(
            ["git", "-C", str(repo), "hash-object", "-w", "-t", "tree", "--literally", "--stdin"],
            input=raw,
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .strip()
    )


@pytest.mark.parametrize("prefix", [["--prefix", PREFIX], []], ids=["prefix", "detected"])
def test_a_directory_listed_twice_on_the_way_to_the_prefix_is_unsafe(canon, tmp_path, prefix):
    """Found by red team 2: the root listed `deep_gemm` twice, the first copy holding only a .gitattributes. A
    checkout merges the copies, so the attributes apply to the release's files; the --prefix walk followed the
    last copy alone and certified the fork."""
    repo = _repo(tmp_path)
    (tmp_path / "attrs").write_bytes(b"*.cuh text eol=crlf\n")
    attrs = git(repo, "hash-object", "-w", str(tmp_path / "attrs")).strip()
    first = _raw_tree(repo, [("100644", ".gitattributes", attrs)])
    second = git(repo, "rev-parse", "main:deep_gemm").strip()
    setup = git(repo, "rev-parse", "main:setup.py").strip()
    root = _raw_tree(
        repo, [("40000", "deep_gemm", first), ("40000", "deep_gemm", second), ("100644", "setup.py", setup)]
    )
    git(repo, "update-ref", "refs/heads/dup", git(repo, "commit-tree", root, "-m", "dup").strip())
    code, doc = run_json("--repo", str(canon), "--fork", f"git:{repo}@dup", *prefix)
    unsafe = [f for f in doc["files"] if f["status"] == "unsafe"]
    assert code == 1 and doc["verdict"] == "drifted", doc.get("errors")
    assert any(f["path"] == "deep_gemm" and "twice" in f["detail"] for f in unsafe), unsafe
