"""The loopback GitHub fixture and watcher runners shared by the watcher tests and the adversarial suite."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from fake_servers import FakeGitHub
from vendor_helpers import PREFIX, ROOT, commit_all, init_repo, make_fork

sys.path.insert(0, str(ROOT / "tools"))
import watch_downstreams

TOKEN = "ghp_SECRET_token_0123456789"
FAST = ["--retries", "2", "--backoff", "0.01", "--max-wait", "2"]


def remote_fork(tmp: Path, fake: FakeGitHub, repo: str, files: dict[str, bytes]) -> Path:
    path = make_fork(tmp, files, name=repo.replace("/", "__"))
    init_repo(path)
    commit_all(path, "vendor")
    fake.repos[repo] = str(path)
    return path


def config(tmp: Path, *entries: dict) -> Path:
    import yaml

    p = tmp / "downstreams.yaml"
    p.write_text(yaml.safe_dump({"downstreams": list(entries)}))
    return p


def entry(name: str, repo: str, track: str = "latest", ref: str = "main", prefix: str = PREFIX) -> dict:
    return {"name": name, "repo": repo, "ref": ref, "prefix": prefix, "track": track}


def watch(canon: Path, fake: FakeGitHub, cfg: Path, tmp: Path, *extra: str, capsys=None) -> tuple[int, dict, str]:
    report, js = tmp / "report.md", tmp / "report.json"
    code = watch_downstreams.main(
        [
            "--config",
            str(cfg),
            "--repo-root",
            str(canon),
            "--api-url",
            fake.url,
            "--report",
            str(report),
            "--json",
            str(js),
            "--state",
            str(tmp / "state.json"),
            *FAST,
            *extra,
        ]
    )
    out = ""
    if capsys is not None:
        c = capsys.readouterr()
        out = c.out + c.err
    return (
        code,
        json.loads(js.read_text()) if js.exists() else {},
        out + (report.read_text() if report.exists() else ""),
    )
