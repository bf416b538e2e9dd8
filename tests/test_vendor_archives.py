"""Wheels and sdists as downstreams: local archives, `pypi:` through a loopback index, the watcher's PyPI
entries, and archives built to attack the reader."""

from __future__ import annotations

import io
import json
import os
import stat
import tarfile
import zipfile
from pathlib import Path

import pytest
import watch_downstreams
from fake_servers import FakeGitHub
from vendor_helpers import PREFIX, ROOT, V1, V2, by_path, make_canonical, opened_paths, run_cv, run_json

OWN = {"deep_gemm/__init__.py": b"# the package\n", f"{PREFIX}/common/utils.cuh": b"// its own header\n"}


@pytest.fixture(scope="module")
def canon(tmp_path_factory) -> Path:
    return make_canonical(tmp_path_factory.mktemp("canon"))


def layer(files: dict[str, bytes], root: str = PREFIX) -> dict[str, bytes]:
    return {**OWN, **{f"{root}/{rel}": data for rel, data in files.items()}}


def wheel_bytes(members: dict[str, bytes], symlinks: dict[str, str] | None = None) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            z.writestr(name, data)
        for name, target in (symlinks or {}).items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            z.writestr(info, target)
        z.writestr("sgl_deep_gemm-1.0.dist-info/RECORD", b"")
    return buf.getvalue()


def sdist_bytes(members: dict[str, bytes], symlinks: dict[str, str] | None = None, top: str = "pkg-1.0") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        for name, data in members.items():
            info = tarfile.TarInfo(f"{top}/{name}" if top else name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
        for name, target in (symlinks or {}).items():
            info = tarfile.TarInfo(f"{top}/{name}" if top else name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            t.addfile(info)
    return buf.getvalue()


def check(canon: Path, spec: str, *extra: str) -> tuple[int, dict]:
    return run_json("--repo", str(canon), "--fork", spec, *extra)


# ---------------------------------------------------------------- local archives


def test_wheel_in_sync_stale_and_drifted(canon, tmp_path):
    whl = tmp_path / "sgl_deep_gemm-1.0-py3-none-any.whl"
    whl.write_bytes(wheel_bytes(layer(V2)))
    code, doc = check(canon, str(whl))
    assert code == 0 and doc["verdict"] == "in-sync" and doc["prefix"] == PREFIX and doc["digest"] == "sha256"
    whl.write_bytes(wheel_bytes(layer(V1)))
    code, doc = check(canon, str(whl))
    assert code == 1 and doc["verdict"] == "stale" and doc["stale_tag"] == "v0.1.0"
    edited = dict(V2, **{"common/sm120_utils.cuh": V2["common/sm120_utils.cuh"].replace(b"\n", b"\r\n")})
    whl.write_bytes(wheel_bytes(layer(edited)))
    code, doc = check(canon, str(whl))
    assert code == 1 and by_path(doc)["common/sm120_utils.cuh"]["diagnosis"] == "eol-only"
    code, _, err = run_cv("--repo", str(canon), "--fork", str(whl), "--sync")
    assert code == 3 and "local forks only" in err


def test_sdist_prefix_is_detected_under_its_top_directory(canon, tmp_path):
    sdist = tmp_path / "sgl_deep_gemm-1.0.tar.gz"
    sdist.write_bytes(sdist_bytes(layer(V2), top="sgl_deep_gemm-1.0"))
    code, doc = check(canon, str(sdist))
    assert code == 0 and doc["prefix"] == f"sgl_deep_gemm-1.0/{PREFIX}"


def test_wheel_check_reads_only_the_members_it_needs(canon, tmp_path, monkeypatch):
    from vendorkit import archive

    members = layer(V2)
    members["deep_gemm/_C.so"] = os.urandom(1 << 20)
    members.update({f"deep_gemm/include/cute/file_{i}.hpp": b"x" * 100 for i in range(200)})
    whl = tmp_path / "big-1.0-py3-none-any.whl"
    whl.write_bytes(wheel_bytes(members))
    read: list[str] = []
    real = archive.ArchiveFork._open_member

    def spy(self, f):
        read.append(f.path)
        return real(self, f)

    monkeypatch.setattr(archive.ArchiveFork, "_open_member", spy)
    code, doc = check(canon, str(whl))
    assert code == 0
    assert sorted(read) == sorted(f"{PREFIX}/{rel}" for rel in V2)  # the layer's files and nothing else


@pytest.mark.parametrize("kind", ["wheel", "sdist"])
def test_archive_with_dotdot_names_and_symlinks(canon, tmp_path, kind):
    secret = tmp_path / "secret.cuh"
    secret.write_bytes(V2["common/sm120_tma.cuh"])  # identical bytes: following the link would say "ok"
    members = layer({k: v for k, v in V2.items() if k != "common/sm120_tma.cuh"})
    members["../../evil/sm120_escape.cuh"] = b"// climbs out\n"
    links = {f"{PREFIX}/common/sm120_tma.cuh": str(secret), f"{PREFIX}/mma/sm120_rel.cuh": "../../../../../etc/passwd"}
    if kind == "wheel":
        path = tmp_path / "evil-1.0-py3-none-any.whl"
        path.write_bytes(wheel_bytes(members, links))
    else:
        path = tmp_path / "evil-1.0.tar.gz"
        members = {f"pkg-1.0/{k}" if not k.startswith("..") else k: v for k, v in members.items()}
        links = {f"pkg-1.0/{k}": v for k, v in links.items()}
        path.write_bytes(sdist_bytes(members, links, top=""))
    before = sorted(p for p in tmp_path.rglob("*"))
    with opened_paths() as seen:
        code, doc = check(canon, str(path))
    assert code == 1 and doc["verdict"] == "drifted"
    f = by_path(doc)["common/sm120_tma.cuh"]
    assert f["status"] == "changed" and f["diagnosis"] == "symlink" and "outside the fork" in f["detail"]
    # the '..' member is a finding (pip refuses such a wheel), never read
    esc = by_path(doc)["../../evil/sm120_escape.cuh"]
    assert (esc["status"], esc["diagnosis"]) == ("unsafe", "unsafe-member") and esc["actual"] is None
    assert str(secret) not in seen and "/etc/passwd" not in seen
    assert sorted(p for p in tmp_path.rglob("*")) == before  # nothing extracted


@pytest.mark.parametrize("cut", [0.5, 0.9])
def test_truncated_wheel_exits_2(canon, tmp_path, cut):
    data = wheel_bytes(layer(V2))
    whl = tmp_path / "cut-1.0-py3-none-any.whl"
    whl.write_bytes(data[: int(len(data) * cut)])
    code, out, err = run_cv("--repo", str(canon), "--fork", str(whl), "--format", "json")
    assert code == 2 and json.loads(out)["exit_code"] == 2 and "Traceback" not in err


def test_missing_archive_exits_2(canon, tmp_path):
    code, _, err = run_cv("--repo", str(canon), "--fork", str(tmp_path / "nope-1.0-py3-none-any.whl"))
    assert code == 2 and "does not exist" in err


# ---------------------------------------------------------------- pypi: through a loopback index


def test_pypi_fork_pinned_and_newest(canon, index):
    index.add("sgl-deep-gemm", "1.0", "sgl_deep_gemm-1.0-py3-none-any.whl", wheel_bytes(layer(V1)))
    index.add("sgl-deep-gemm", "1.1", "sgl_deep_gemm-1.1.tar.gz", sdist_bytes(layer(V2), top="sgl_deep_gemm-1.1"))
    index.add("sgl-deep-gemm", "1.1", "sgl_deep_gemm-1.1-py3-none-any.whl", wheel_bytes(layer(V2)))
    code, doc = check(canon, "pypi:sgl-deep-gemm==1.0", "--index-url", index.url)
    assert (
        code == 1
        and doc["verdict"] == "stale"
        and doc["target"] == "pypi:sgl-deep-gemm==1.0 (sgl_deep_gemm-1.0-py3-none-any.whl)"
    )
    code, doc = check(canon, "pypi:sgl-deep-gemm", "--index-url", index.url)
    assert code == 0 and doc["target"] == "pypi:sgl-deep-gemm==1.1 (2 files)"  # the wheel and the sdist
    dists = {d["file"]: d for d in doc["distributions"]}
    assert set(dists) == {"sgl_deep_gemm-1.1.tar.gz", "sgl_deep_gemm-1.1-py3-none-any.whl"}
    assert all(d["verdict"] == "in-sync" and d["integrity"] == "sha256 verified" for d in dists.values())
    assert dists["sgl_deep_gemm-1.1.tar.gz"]["prefix"] == f"sgl_deep_gemm-1.1/{PREFIX}"
    assert dists["sgl_deep_gemm-1.1-py3-none-any.whl"]["platforms"] == "py3-none-any"
    code, _, err = run_cv("--repo", str(canon), "--fork", "pypi:bad name", "--index-url", index.url)
    assert code == 3


@pytest.mark.parametrize(
    "fault, message",
    [
        ("404", "not on the index"),
        ("500", "answered 500"),
        ("truncated", "does not match the index's sha256"),
        ("truncated-ranges", "not a readable wheel"),
        ("unknown-version", "lists no such version"),
    ],
)
def test_pypi_faults_exit_2(canon, index, fault, message):
    index.add("pkg", "1.0", "pkg-1.0-py3-none-any.whl", wheel_bytes(layer(V2)))
    spec = "pypi:pkg==1.0"
    if fault in ("404", "500"):
        index.status = int(fault)
    elif fault.startswith("truncated"):
        index.truncate_files = True
        index.ranges = fault.endswith("ranges")  # without ranges the download is checked against the index
    else:
        spec = "pypi:pkg==9.9"
    ranges = ["--range-reads"] if fault == "truncated-ranges" else []
    code, out, err = run_cv("--repo", str(canon), "--fork", spec, "--index-url", index.url, "--format", "json", *ranges)
    assert code == 2 and json.loads(out)["verdict"] == "unknown" and message in err and "Traceback" not in err


# ---------------------------------------------------------------- the watcher's PyPI downstreams


def _config(tmp_path: Path, *entries: dict) -> Path:
    import yaml

    p = tmp_path / "downstreams.yaml"
    p.write_text(yaml.safe_dump({"downstreams": list(entries)}))
    return p


def _watch(canon, tmp_path, cfg, index, gh, *extra):
    js = tmp_path / "report.json"
    code = watch_downstreams.main(
        [
            "--config",
            str(cfg),
            "--repo-root",
            str(canon),
            "--api-url",
            gh.url,
            "--index-url",
            index.url,
            "--json",
            str(js),
            "--retries",
            "0",
            *extra,
        ]
    )
    return code, json.loads(js.read_text())


@pytest.fixture()
def gh(monkeypatch):
    fake = FakeGitHub()
    fake.url = fake.start()
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    yield fake
    fake.stop()


def test_watcher_checks_each_new_package_release(canon, tmp_path, index, gh):
    cfg = _config(tmp_path, {"name": "sgl", "pypi": "sgl-deep-gemm", "track": "latest"})
    index.add("sgl-deep-gemm", "1.0", "sgl_deep_gemm-1.0-py3-none-any.whl", wheel_bytes(layer(V2)))
    code, doc = _watch(canon, tmp_path, cfg, index, gh)
    d = doc["downstreams"][0]
    assert code == 0 and doc["schema_version"] == 3 and d["version"] == "1.0" and d["source"] == "pypi:sgl-deep-gemm"
    assert d["files"] == ["sgl_deep_gemm-1.0-py3-none-any.whl"]
    assert d["report"]["verdict"] == "in-sync" and d["report"]["prefix"] == PREFIX
    # a new release appears: the next run checks it
    edited = dict(V2, **{"common/sm120_tma.cuh": b"// a packaging-time edit\n"})
    index.add("sgl-deep-gemm", "1.1", "sgl_deep_gemm-1.1-py3-none-any.whl", wheel_bytes(layer(edited)))
    code, doc = _watch(canon, tmp_path, cfg, index, gh, "--issues", "--repo", "us/sm120")
    d = doc["downstreams"][0]
    assert code == 1 and d["version"] == "1.1" and d["report"]["verdict"] == "drifted"
    issue = gh.issues["us/sm120"][0]
    assert "sgl-deep-gemm==1.1 (PyPI)" in issue["title"]
    # the edit is the package's own bytes: no --sync recommendation, the file is named instead
    assert "would refuse 1 file" in issue["body"] and "sm120_tma.cuh" in issue["body"]
    assert "then without --dry-run" not in issue["body"]
    # a pinned version is not moved by new releases
    cfg = _config(
        tmp_path, {"name": "sgl", "pypi": "sgl-deep-gemm", "version": "1.0", "track": "latest", "prefix": PREFIX}
    )
    code, doc = _watch(canon, tmp_path, cfg, index, gh)
    assert code == 0 and doc["downstreams"][0]["version"] == "1.0"


def test_watcher_stale_package_gets_a_sync_recommendation(canon, tmp_path, index, gh):
    cfg = _config(tmp_path, {"name": "sgl", "pypi": "sgl-deep-gemm", "track": "latest"})
    index.add("sgl-deep-gemm", "1.0", "sgl_deep_gemm-1.0-py3-none-any.whl", wheel_bytes(layer(V1)))
    code, doc = _watch(canon, tmp_path, cfg, index, gh, "--issues", "--repo", "us/sm120")
    body = gh.issues["us/sm120"][0]["body"]
    assert code == 1 and "--sync --dry-run   # then without --dry-run" in body
    assert "source checkout this package is built from" in body and "publish a new release" in body


def test_watcher_not_vendored_and_dry_run(canon, tmp_path, index, gh):
    own = {rel: b"// another project's header " + rel.encode() * 30 + b"\n" for rel in V2}
    index.add("other", "2.0", "other-2.0-py3-none-any.whl", wheel_bytes(layer(own)))
    cfg = _config(tmp_path, {"name": "other", "pypi": "other", "track": "latest"})
    code, doc = _watch(canon, tmp_path, cfg, index, gh, "--issues", "--repo", "us/sm120", "--dry-run")
    d = doc["downstreams"][0]
    assert code == 1 and d["report"]["verdict"] == "not-vendored" and d["issue"] == "would create an issue"
    assert gh.writes() == [] and not gh.issues.get("us/sm120")
    code, doc = _watch(canon, tmp_path, cfg, index, gh, "--issues", "--repo", "us/sm120")
    issue = gh.issues["us/sm120"][0]
    assert "does not vendor" in issue["title"] and "no `--sync` recommendation" in issue["body"]
    assert "@@" not in issue["body"]


@pytest.mark.parametrize("status", [404, 500])
def test_watcher_index_faults_are_unknown(canon, tmp_path, index, gh, status):
    index.add("sgl-deep-gemm", "1.0", "sgl_deep_gemm-1.0-py3-none-any.whl", wheel_bytes(layer(V2)))
    index.status = status
    cfg = _config(tmp_path, {"name": "sgl", "pypi": "sgl-deep-gemm", "track": "latest"})
    code, doc = _watch(canon, tmp_path, cfg, index, gh)
    assert code == 2 and doc["downstreams"][0]["report"]["verdict"] == "unknown"


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"pypi": "sgl", "ref": "main"}, "unknown keys ['ref']"),
        ({"pypi": "bad name"}, "is not a package name"),
        ({"pypi": "sgl", "version": "1.0 beta"}, "is not a version"),
        ({"pypi": "sgl", "prefix": "../x"}, "unsafe path"),
    ],
)
def test_pypi_config_validation_exit_3(canon, tmp_path, capsys, bad, message):
    cfg = _config(tmp_path, dict({"name": "x", "track": "latest"}, **bad))
    code = watch_downstreams.main(["--config", str(cfg), "--repo-root", str(canon)])
    assert code == 3 and message in capsys.readouterr().err


def test_shipped_config_watches_sgl_deep_gemm():
    from vendorkit.manifest import ManifestSet
    from vendorkit.watch import load_config

    ds = load_config(
        str(ROOT / ".github/downstreams.yaml"), ManifestSet.load_dir(str(ROOT / "vendor_manifests")), str(ROOT)
    )
    assert {d.package for d in ds if d.package} == {"sgl-deep-gemm", "vllm"}
    assert all(d.version is None and d.lineage == "deepgemm-sm120" for d in ds if d.package)
