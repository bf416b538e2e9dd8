"""Downstream drift watcher: config, remote checks, one self-maintaining issue per fork, reports."""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field

from . import yamlio
from .compare import Comparator, Report
from .errors import CannotCheck, UsageError
from .github import GitHubClient
from .manifest import ManifestSet, check_safe_path
from .remote import REPO_NAME, RemoteFork
from .render import to_markdown
from .versions import is_tag

LABEL = "vendor-drift"
BODY_LIMIT = 65536
_KEYS = {"name", "repo", "ref", "prefix", "track"}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass(frozen=True)
class Downstream:
    name: str
    repo: str
    ref: str
    prefix: str
    track: str  # "latest" or a release tag


def load_config(path: str, ms: ManifestSet) -> list[Downstream]:
    try:
        with open(path, encoding="utf-8") as fh:
            raw = yamlio.safe_load(fh.read())
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror}") from None
    except yamlio.yaml_error_types() as e:
        raise UsageError(f"{path}: malformed YAML ({str(e).splitlines()[0]})") from None
    items = raw.get("downstreams") if isinstance(raw, dict) else None
    if not isinstance(raw, dict) or set(raw) != {"downstreams"} or not isinstance(items, list) or not items:
        raise UsageError(f"{path}: expected a mapping with one key, `downstreams`, holding a non-empty list")
    out, names = [], set()
    for i, d in enumerate(items):
        where = f"{path}: downstreams[{i}]"
        if not isinstance(d, dict):
            raise UsageError(f"{where}: expected a mapping")
        if set(d) != _KEYS:
            raise UsageError(f"{where}: unknown keys {sorted(set(d) - _KEYS)}, missing keys {sorted(_KEYS - set(d))}")
        if not all(isinstance(d[k], str) and d[k] for k in _KEYS):
            raise UsageError(f"{where}: every value must be a non-empty string")
        if not _NAME.match(d["name"]) or d["name"] in names:
            raise UsageError(f"{where}: name {d['name']!r} must be unique and use letters, digits, . _ -")
        if not REPO_NAME.match(d["repo"]):
            raise UsageError(f"{where}: repo {d['repo']!r} is not OWNER/NAME")
        if d["track"] != "latest":
            if not is_tag(d["track"]):
                raise UsageError(f"{where}: track must be `latest` or a release tag, got {d['track']!r}")
            if d["track"] not in ms.by_tag:
                raise UsageError(f"{where}: track {d['track']} is not a released tag")
        try:
            check_safe_path(d["prefix"], where)
        except Exception as e:  # ManifestError -> configuration error here
            raise UsageError(str(e)) from None
        names.add(d["name"])
        out.append(Downstream(d["name"], d["repo"], d["ref"], d["prefix"].strip("/"), d["track"]))
    return out


@dataclass
class ForkResult:
    downstream: Downstream
    report: Report
    commit: str | None = None
    requests: int = 0
    counted: int = 0
    issue_action: str = "-"
    extra: dict = field(default_factory=dict)


def check_one(client: GitHubClient, ms: ManifestSet, ds: Downstream) -> ForkResult:
    before_req, before_304 = client.counters.requests, client.counters.not_modified
    tag = ms.resolve(None if ds.track == "latest" else ds.track)
    owner, repo = ds.repo.split("/")
    report = Report(mode="fork", target=f"github:{ds.repo}@{ds.ref}", tag=tag.tag, prefix=ds.prefix,
                    digest_kind="git_blob_sha1")
    res = ForkResult(ds, report)
    try:
        view = RemoteFork(client, owner, repo, ds.ref)
        res.commit = view.commit_sha
        Comparator(view, ms, tag, ds.prefix, canonical=None, want_diff=False).run(report)
    except CannotCheck as e:
        report.verdict = "unknown"
        report.errors.append(client.scrub(str(e)))
    res.requests = client.counters.requests - before_req
    res.counted = res.requests - (client.counters.not_modified - before_304)
    return res


def marker(ds: Downstream) -> str:
    return f"<!-- deep_gemm_sm120:vendor-drift name={ds.name} -->"


def issue_title(res: ForkResult) -> str:
    r = res.report
    if r.verdict == "stale":
        return f"Vendored SM120 device layer is stale in {res.downstream.repo} ({r.stale_tag}, latest {r.tag})"
    return f"Vendored SM120 device layer drifted in {res.downstream.repo}@{res.downstream.ref}"


def issue_body(res: ForkResult, report_url: str | None = None) -> str:
    """Deterministic for identical findings (no timestamps), so an unchanged fork causes no edit."""
    ds, r = res.downstream, res.report
    head = [marker(ds),
            f"`{ds.repo}@{ds.ref}` (commit `{res.commit}`) vendors the SM120 device layer under `{ds.prefix}` and "
            f"tracks `{ds.track}` (= `{r.tag}`).", "",
            "To fix it from a local checkout of the fork:", "",
            "```bash",
            f"python tools/check_vendor.py --fork PATH/TO/{ds.repo.split('/')[1]} --prefix {ds.prefix} "
            f"--tag {r.tag} --sync --dry-run   # then without --dry-run",
            "```", "",
            "This issue is maintained by `tools/watch_downstreams.py`: it is edited in place when the findings "
            "change and closed when the fork is back in sync.", ""]
    body = "\n".join(head) + to_markdown(r)
    if len(body) > BODY_LIMIT:
        pointer = "\n\n…truncated: the full report is " + (f"at {report_url}" if report_url else
                                                             "in the drift-watch run's artifact") + ".\n"
        body = body[: BODY_LIMIT - len(pointer)] + pointer
    return body


def run_url() -> str | None:
    env = os.environ
    if env.get("GITHUB_SERVER_URL") and env.get("GITHUB_REPOSITORY") and env.get("GITHUB_RUN_ID"):
        return f"{env['GITHUB_SERVER_URL']}/{env['GITHUB_REPOSITORY']}/actions/runs/{env['GITHUB_RUN_ID']}"
    return None


def reconcile_issues(client: GitHubClient, repo: str, results: list[ForkResult]) -> None:
    """Create, edit, reopen or close one issue per downstream; no write when nothing changed."""
    if not REPO_NAME.match(repo):
        raise UsageError(f"--repo {repo!r} is not OWNER/NAME")
    issues = [i for i in client.paginate(f"/repos/{repo}/issues", {"labels": LABEL, "state": "all"})
              if "pull_request" not in i]
    url = run_url()
    for res in results:
        mk = marker(res.downstream)
        mine = sorted((i for i in issues if mk in (i.get("body") or "")),
                      key=lambda i: (i.get("state") != "open", -int(i["number"])))
        current = mine[0] if mine else None
        verdict = res.report.verdict
        if verdict in ("drifted", "stale"):
            title, body = issue_title(res), issue_body(res, url)
            if current is None:
                _, made, _ = client.request("POST", f"/repos/{repo}/issues",
                                            body={"title": title, "body": body, "labels": [LABEL]})
                res.issue_action = f"created #{made['number']}"
            elif current["state"] != "open":
                client.request("PATCH", f"/repos/{repo}/issues/{current['number']}",
                               body={"state": "open", "title": title, "body": body})
                res.issue_action = f"reopened #{current['number']}"
            elif current.get("body") != body or current.get("title") != title:
                client.request("PATCH", f"/repos/{repo}/issues/{current['number']}",
                               body={"title": title, "body": body})
                res.issue_action = f"updated #{current['number']}"
            else:
                res.issue_action = f"unchanged #{current['number']}"
        elif verdict == "in-sync":
            if current is not None and current["state"] == "open":
                n = current["number"]
                client.request("POST", f"/repos/{repo}/issues/{n}/comments",
                               body={"body": f"`{res.downstream.repo}@{res.downstream.ref}` (commit `{res.commit}`) "
                                             f"is back in sync with `{res.report.tag}`. Closing."})
                client.request("PATCH", f"/repos/{repo}/issues/{n}", body={"state": "closed"})
                res.issue_action = f"closed #{n}"
        else:
            res.issue_action = f"untouched #{current['number']}" if current else "-"


def exit_code(results: list[ForkResult]) -> int:
    verdicts = {r.report.verdict for r in results}
    if verdicts & {"drifted", "stale"}:
        return 1
    if "unknown" in verdicts:
        return 2
    return 0


def summary_markdown(results: list[ForkResult], scrub) -> str:
    lines = ["# Downstream drift report", "",
             "| downstream | repo@ref | commit | tag | verdict | requests (counted) | issue |",
             "|---|---|---|---|---|---|---|"]
    for r in results:
        ds, rep = r.downstream, r.report
        verdict = rep.verdict + (f" ({rep.stale_tag})" if rep.stale_tag else "")
        lines.append(f"| {ds.name} | `{ds.repo}@{ds.ref}` | `{(r.commit or '-')[:12]}` | {rep.tag} | {verdict} | "
                     f"{r.requests} ({r.counted}) | {r.issue_action} |")
    lines.append("")
    for r in results:
        if r.report.verdict != "in-sync":
            lines += [f"## {r.downstream.name}", "", to_markdown(r.report)]
    return scrub("\n".join(lines).rstrip("\n") + "\n")


def summary_json(results: list[ForkResult], scrub) -> str:
    from .render import to_json

    doc = {"schema_version": 1, "exit_code": exit_code(results), "downstreams": [
        {"name": r.downstream.name, "repo": r.downstream.repo, "ref": r.downstream.ref, "commit": r.commit,
         "track": r.downstream.track, "requests": r.requests, "counted_requests": r.counted,
         "issue": r.issue_action, "report": json.loads(to_json(r.report))} for r in results]}
    return scrub(json.dumps(doc, indent=2) + "\n")
