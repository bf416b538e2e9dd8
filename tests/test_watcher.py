"""The drift watcher and github: forks against a GitHub-compatible server on 127.0.0.1 backed by real git repos."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from vendor_helpers import PREFIX, ROOT, V1, V2, by_path, commit_all, make_canonical, run_cv, run_json, write_tree
from watch_helpers import TOKEN, config, entry, remote_fork, watch, watch_downstreams


@pytest.fixture(scope="module")
def canon(tmp_path_factory) -> Path:
    return make_canonical(tmp_path_factory.mktemp("canon"))


def verdicts(doc: dict) -> dict[str, str]:
    return {d["name"]: d["report"]["verdict"] for d in doc["downstreams"]}


def statuses(doc: dict, name: str) -> dict[str, str]:
    d = next(x for x in doc["downstreams"] if x["name"] == name)
    return {f["path"]: f["status"] for f in d["report"]["files"]}


def test_in_sync_stale_and_drifted(canon, gh, tmp_path, capsys):
    remote_fork(tmp_path, gh, "org/insync", V2)
    remote_fork(tmp_path, gh, "org/stale", V1)
    drifted = dict(V2)
    drifted["common/sm120_tma.cuh"] = b"// local hotfix\n"
    del drifted["mma/sm120.cuh"]
    drifted["impls/sm120_local.cuh"] = b"// added downstream\n"
    drifted["impls/sm120_moved_scheduler.cuh"] = drifted.pop("scheduler/sm120_gemm.cuh")
    remote_fork(tmp_path, gh, "org/drifted", drifted)
    cfg = config(tmp_path, entry("a", "org/insync"), entry("b", "org/stale"), entry("c", "org/drifted"))
    code, doc, text = watch(canon, gh, cfg, tmp_path, capsys=capsys)
    assert code == 1
    assert verdicts(doc) == {"a": "in-sync", "b": "stale", "c": "drifted"}
    assert next(d for d in doc["downstreams"] if d["name"] == "b")["report"]["stale_tag"] == "v0.1.0"
    st = statuses(doc, "c")
    assert st["common/sm120_tma.cuh"] == "changed" and st["mma/sm120.cuh"] == "missing"
    assert st["impls/sm120_local.cuh"] == "extra" and st["scheduler/sm120_gemm.cuh"] == "renamed"
    for d in doc["downstreams"]:  # one commit lookup + one tree read per fork
        assert d["requests"] == 2 and d["report"]["digest"] == "git_blob_sha1"
    assert TOKEN not in text and all(r["auth"] == f"Bearer {TOKEN}" for r in gh.log)
    # no blob downloads without a diff request
    assert not [r for r in gh.log if "/git/blobs/" in r["path"]]


def test_unchanged_fork_costs_no_quota_on_rerun(canon, gh, tmp_path):
    remote_fork(tmp_path, gh, "org/insync", V2)
    cfg = config(tmp_path, entry("a", "org/insync"))
    assert watch(canon, gh, cfg, tmp_path)[0] == 0
    before = gh.counted()
    code, doc, _ = watch(canon, gh, cfg, tmp_path)
    assert code == 0 and gh.counted() == before  # both answers were 304
    d = doc["downstreams"][0]
    assert d["requests"] == 2 and d["counted_requests"] == 0


@pytest.mark.parametrize("fault", ["down", "404", "rate-limited"])
def test_faults_are_unknown_never_drift(canon, gh, tmp_path, fault, capsys):
    remote_fork(tmp_path, gh, "org/insync", V2)
    cfg = config(tmp_path, entry("a", "org/insync" if fault != "404" else "org/missing"))
    if fault == "down":
        gh.stop()
    if fault == "rate-limited":
        gh.rate_limited_for = 3600  # far past --max-wait
    code, doc, text = watch(canon, gh, cfg, tmp_path, capsys=capsys)
    assert code == 2 and verdicts(doc) == {"a": "unknown"}
    reason = doc["downstreams"][0]["report"]["errors"][0]
    assert {"down": "network error", "404": "not found", "rate-limited": "rate limited"}[fault] in reason
    assert TOKEN not in text


def test_transient_5xx_and_retry_after_are_retried(canon, gh, tmp_path):
    remote_fork(tmp_path, gh, "org/insync", V2)
    cfg = config(tmp_path, entry("a", "org/insync"))
    gh.fail_5xx = 2
    code, doc, _ = watch(canon, gh, cfg, tmp_path)
    assert code == 0 and [r["status"] for r in gh.log[:3]] == [502, 502, 200]
    gh.log.clear()
    gh.retry_after_once = 0
    code, doc, _ = watch(canon, gh, cfg, tmp_path)
    assert code == 0 and gh.log[0]["status"] == 429


def test_truncated_tree_walks_only_the_prefix(canon, gh, tmp_path):
    files = dict(V2)
    files["common/sm120_tma.cuh"] = b"// edited\n"
    fork = remote_fork(tmp_path, gh, "org/big", files)
    write_tree(fork, {f"docs/page_{i}.md": b"x" for i in range(40)})
    commit_all(fork, "lots of files")
    gh.truncate_over = 10
    cfg = config(tmp_path, entry("a", "org/big"))
    code, doc, _ = watch(canon, gh, cfg, tmp_path)
    assert code == 1 and verdicts(doc) == {"a": "drifted"}
    st = statuses(doc, "a")
    assert st["common/sm120_tma.cuh"] == "changed" and sum(v == "ok" for v in st.values()) == len(V2) - 1
    walked = [r["path"] for r in gh.log if "/git/trees/" in r["path"]]
    assert len(walked) >= 4  # root (truncated), then deep_gemm -> include -> deep_gemm, then the prefix subtree


def test_issue_lifecycle(canon, gh, tmp_path):
    fork = remote_fork(tmp_path, gh, "org/fork", V2)
    cfg = config(tmp_path, entry("fork", "org/fork"))
    issues = ["--issues", "--repo", "us/deep_gemm_sm120"]
    # in sync: nothing to file
    assert watch(canon, gh, cfg, tmp_path, *issues)[0] == 0
    assert not gh.issues.get("us/deep_gemm_sm120")
    # drift: one issue, labelled, found by its hidden marker
    (fork / PREFIX / "common/sm120_tma.cuh").write_bytes(b"// hotfix\n")
    commit_all(fork, "hotfix")
    code, doc, _ = watch(canon, gh, cfg, tmp_path, *issues)
    store = gh.issues["us/deep_gemm_sm120"]
    assert code == 1 and len(store) == 1 and store[0]["labels"] == [{"name": "vendor-drift"}]
    assert "<!-- deep_gemm_sm120:vendor-drift name=fork -->" in store[0]["body"]
    assert "common/sm120_tma.cuh" in store[0]["body"] and doc["downstreams"][0]["issue"] == "created #1"
    # identical re-run: no write calls at all
    gh.log.clear()
    code, doc, _ = watch(canon, gh, cfg, tmp_path, *issues)
    assert code == 1 and gh.writes() == [] and doc["downstreams"][0]["issue"] == "unchanged #1"
    # findings change: the same issue is edited in place
    (fork / PREFIX / "mma/sm120.cuh").unlink()
    commit_all(fork, "drop a file")
    gh.log.clear()
    watch(canon, gh, cfg, tmp_path, *issues)
    assert len(store) == 1 and "mma/sm120.cuh" in store[0]["body"]
    assert [w["method"] for w in gh.writes()] == ["PATCH"]
    # back in sync: a short comment, then closed
    shutil.rmtree(fork / PREFIX)
    write_tree(fork / PREFIX, V2)
    write_tree(fork, {f"{PREFIX}/common/utils.cuh": b"// fork's own header\n"})
    commit_all(fork, "resync")
    code, doc, _ = watch(canon, gh, cfg, tmp_path, *issues)
    assert code == 0 and store[0]["state"] == "closed" and "back in sync" in gh.comments[-1][2]
    # drifts again: the same issue is reopened, not duplicated
    (fork / PREFIX / "common/sm120_tma.cuh").write_bytes(b"// hotfix again\n")
    commit_all(fork, "hotfix again")
    watch(canon, gh, cfg, tmp_path, *issues)
    assert len(store) == 1 and store[0]["state"] == "open"


def test_issue_found_across_pages_and_body_limit(canon, gh, tmp_path):
    store = gh.issues.setdefault("us/repo", [])
    for i in range(150):  # other downstreams' issues fill page 1
        store.append(
            {
                "number": i + 1,
                "title": "t",
                "body": f"<!-- deep_gemm_sm120:vendor-drift name=other{i} -->",
                "state": "open",
                "labels": [{"name": "vendor-drift"}],
            }
        )
    store[0]["body"] = "<!-- deep_gemm_sm120:vendor-drift name=huge -->\nold"  # ours is the oldest: last page
    files = dict(V2, **{f"impls/sm120_extra_{i:05d}_{'x' * 40}.cuh": b"// extra\n" for i in range(1500)})
    remote_fork(tmp_path, gh, "org/huge", files)
    cfg = config(tmp_path, entry("huge", "org/huge"))
    code, doc, _ = watch(canon, gh, cfg, tmp_path, "--issues", "--repo", "us/repo")
    assert code == 1 and doc["downstreams"][0]["issue"] == "updated #1" and len(store) == 150
    assert len(store[0]["body"]) <= 65536 and store[0]["body"].rstrip().endswith("artifact.")
    assert len([r for r in gh.log if r["path"].endswith("/issues") and r["method"] == "GET"]) == 2


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"surprise": 1}, "unknown keys ['surprise']"),
        ({"repo": "not a repo"}, "is not OWNER/NAME"),
        ({"track": "v9.9.9"}, "not a released tag"),
        ({"track": "newest"}, "track must be `latest`"),
        ({"prefix": "../escape"}, "unsafe path"),
    ],
)
def test_config_validation_exit_3(canon, gh, tmp_path, capsys, bad, message):
    cfg = config(tmp_path, dict(entry("a", "org/x"), **bad))
    code = watch_downstreams.main(["--config", str(cfg), "--repo-root", str(canon), "--api-url", gh.url])
    assert code == 3 and message in capsys.readouterr().err


def test_shipped_downstreams_config_is_valid():
    from vendorkit.manifest import ManifestSet
    from vendorkit.watch import load_config

    ms = ManifestSet.load_dir(str(ROOT / "vendor_manifests"))
    ds = load_config(str(ROOT / ".github/downstreams.yaml"), ms, str(ROOT))
    forks = [d for d in ds if d.repo]
    assert {(d.repo, d.ref) for d in forks} == {
        ("deepseek-ai/DeepGEMM", "main"),
        ("deepseek-ai/DeepGEMM", "nv_dev"),
        ("vllm-project/DeepGEMM", "dev"),
    }
    assert all(d.prefix == "deep_gemm/include/deep_gemm" for d in forks)
    # the real downstreams vendor lucifer1004/DeepGEMM-sm120's headers: they are watched against that lineage
    assert {d.lineage for d in ds} == {"deepgemm-sm120"}


def test_check_vendor_github_fork(canon, gh, tmp_path, capsys):
    files = dict(V2)
    files["common/sm120_utils.cuh"] = V2["common/sm120_utils.cuh"].replace(b"\n", b"\r\n")
    remote_fork(tmp_path, gh, "org/f", files)
    base = ["--repo", str(canon), "--fork", "github:org/f@main", "--api-url", gh.url, "--format", "json"]
    code, out, err = run_cv(*base)
    doc = json.loads(out)
    f = {x["path"]: x for x in doc["files"]}["common/sm120_utils.cuh"]
    assert code == 1 and doc["verdict"] == "drifted" and doc["prefix"] == PREFIX
    assert f["status"] == "changed" and f["diagnosis"] == "eol-only"  # diagnosed from the blob
    code, out, err = run_cv(*base, "--diff")
    f = {x["path"]: x for x in json.loads(out)["files"]}["common/sm120_utils.cuh"]
    assert code == 1 and f["diagnosis"] == "eol-only"
    # a content edit is diffed against this checkout's bytes, no flag needed
    files["mma/sm120.cuh"] = V2["mma/sm120.cuh"] + b"// remote edit\n"
    remote_fork(tmp_path / "g", gh, "org/g", files)
    code, out, err = run_cv(*base[:3], "github:org/g@main", *base[4:])
    f = {x["path"]: x for x in json.loads(out)["files"]}["mma/sm120.cuh"]
    assert code == 1 and f["diagnosis"] == "content" and "+// remote edit" in f["diff"]
    code, out, err = run_cv("--repo", str(canon), "--fork", "github:org/nope@main", "--api-url", gh.url)
    assert code == 2 and "not found" in err and TOKEN not in out + err
    code, out, err = run_cv("--repo", str(canon), "--fork", "github:bad", "--api-url", gh.url)
    assert code == 3


def test_a_github_fork_is_seen_as_a_checkout_writes_it(canon, gh, tmp_path):
    """Found by the red team: github: compared tree blob ids and never looked at .gitattributes, so a fork whose
    attributes make every clone write CRLF was in sync for the watcher (and caught as git:)."""
    fork = remote_fork(tmp_path, gh, "org/crlf", V2)
    (fork / ".gitattributes").write_text("*.cuh text eol=crlf\nsm120_gemm.cuh -text\n")
    commit_all(fork, "attributes")
    code, doc = run_json(
        "--repo", str(canon), "--fork", "github:org/crlf@main", "--api-url", gh.url, "--prefix", PREFIX
    )
    files = {f["path"]: f for f in doc["files"]}
    assert code == 1 and files["mma/sm120.cuh"]["diagnosis"] in ("eol-only", "whitespace-only")
    assert files["scheduler/sm120_gemm.cuh"]["status"] == "ok"
    code, doc = run_json("--repo", str(canon), "--fork", f"git:{fork}@main", "--prefix", PREFIX)
    assert code == 1 and {f["path"]: f for f in doc["files"]}["mma/sm120.cuh"]["status"] == "changed"


@pytest.mark.parametrize("where", ["", "deep_gemm", "deep_gemm/include"])
def test_a_truncated_listing_still_reads_the_attributes_on_the_way_to_the_prefix(canon, gh, tmp_path, where):
    """Found by red team 2: after a truncated recursive listing the walk root -> prefix skipped the .gitattributes
    of each level it passed, so a fork whose clones write CRLF was in sync when its tree was large."""
    fork = remote_fork(tmp_path, gh, "org/big", V2)
    write_tree(fork, {f"deep_gemm/aaa/f{i:03d}.txt": b"x" for i in range(40)})
    (fork / where / ".gitattributes").write_text("*.cuh text eol=crlf\n")
    commit_all(fork, "attributes past the truncation point")
    args = ("--repo", str(canon), "--fork", "github:org/big@main", "--api-url", gh.url, "--prefix", PREFIX)
    full_code, full = run_json(*args)
    gh.truncate_over = 10
    code, doc = run_json(*args)
    assert any("/git/trees/" in r["path"] and "recursive" not in r["query"] for r in gh.log)  # it walked
    assert code == full_code == 1
    assert by_path(doc)["mma/sm120.cuh"] == by_path(full)["mma/sm120.cuh"]
    assert by_path(doc)["mma/sm120.cuh"]["status"] == "changed"
