"""Downstream drift watcher: config, remote checks (GitHub forks and PyPI packages), one self-maintaining
issue per downstream, reports."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shlex
from dataclasses import dataclass, field
from typing import Any, Protocol

from . import forktrust, inert, yamlio
from .compare import Comparator, Report
from .errors import CannotCheck, UsageError
from .github import GitHubClient
from .manifest import ManifestSet, check_safe_path
from .remote import REPO_NAME, RemoteFork
from .render import to_markdown
from .versions import is_lineage_tag, is_tag

LABEL = "vendor-drift"
BODY_LIMIT = 65536
_GITHUB_KEYS, _GITHUB_OPTIONAL = {"name", "repo", "ref", "prefix", "track"}, {"lineage"}
_PYPI_KEYS, _PYPI_OPTIONAL = {"name", "pypi", "track"}, {"version", "prefix", "lineage"}
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_PACKAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_VERSION = re.compile(r"[A-Za-z0-9.+!_-]+")
FAILING_VERDICTS = ("drifted", "stale", "not-vendored", "untrusted")
WATCH_SCHEMA_VERSION = 3  # 3: a PyPI downstream lists every file of its release (files); reports: check_vendor's 2


@dataclass(frozen=True)
class Downstream:
    name: str
    repo: str | None  # OWNER/NAME of a GitHub fork, or None for a PyPI package
    ref: str | None
    prefix: str | None  # None: auto-detected (PyPI packages only)
    track: str  # "latest" or a release tag
    package: str | None = None  # PyPI project name
    version: str | None = None  # pinned package version; None: the newest release on each run
    lineage: str | None = None  # the upstream lineage it vendors (vendor_manifests/upstreams/NAME); None: ours

    @property
    def source(self) -> str:
        if self.package:
            return f"pypi:{self.package}" + (f"=={self.version}" if self.version else "")
        return f"github:{self.repo}@{self.ref}"


def _check_entry(d: dict, where: str, manifests) -> None:
    if "pypi" in d:
        unknown, missing = set(d) - _PYPI_KEYS - _PYPI_OPTIONAL, _PYPI_KEYS - set(d)
    else:
        unknown, missing = set(d) - _GITHUB_KEYS - _GITHUB_OPTIONAL, _GITHUB_KEYS - set(d)
    if unknown or missing:
        raise UsageError(
            f"{where}: unknown keys {sorted(unknown)}, missing keys {sorted(missing)} (a GitHub "
            f"fork has {sorted(_GITHUB_KEYS)} and optionally {sorted(_GITHUB_OPTIONAL)}; a PyPI "
            f"package has {sorted(_PYPI_KEYS)} and optionally {sorted(_PYPI_OPTIONAL)})"
        )
    if not all(isinstance(v, str) and v for v in d.values()):
        raise UsageError(f"{where}: every value must be a non-empty string")
    if "pypi" in d:
        if not _PACKAGE.fullmatch(d["pypi"]):
            raise UsageError(f"{where}: pypi {d['pypi']!r} is not a package name")
        if "version" in d and not _VERSION.fullmatch(d["version"]):
            raise UsageError(f"{where}: version {d['version']!r} is not a version")
    elif not REPO_NAME.fullmatch(d["repo"]):
        raise UsageError(f"{where}: repo {d['repo']!r} is not OWNER/NAME")
    ms = manifests(d.get("lineage"))
    if d["track"] != "latest":
        if not (is_tag(d["track"]) or (ms.lineage and is_lineage_tag(d["track"]))):
            raise UsageError(f"{where}: track must be `latest` or a release tag, got {d['track']!r}")
        if d["track"] not in ms.by_tag:
            raise UsageError(f"{where}: track {d['track']} is not a released tag of {ms.name}")
    if "prefix" in d:
        try:
            check_safe_path(d["prefix"], where)
        except Exception as e:  # ManifestError -> configuration error here
            raise UsageError(str(e)) from None


def manifests_loader(ms: ManifestSet, repo_root: str | None):
    """lineage name (None: ours) -> its ManifestSet, each loaded once."""
    cache: dict[str | None, ManifestSet] = {None: ms}

    def get(name: str | None) -> ManifestSet:
        if name is not None and name not in cache:  # (None, ours, is always there)
            from . import lineage

            if repo_root is None:
                raise UsageError(f"lineage {name!r}: no repository to load upstream lineages from")
            cache[name] = lineage.load(repo_root, name)
        return cache[name]

    return get


def load_config(path: str, ms: ManifestSet, repo_root: str | None = None) -> list[Downstream]:
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
        _check_entry(d, where, manifests_loader(ms, repo_root))
        if not _NAME.fullmatch(d["name"]) or d["name"] in names:
            raise UsageError(f"{where}: name {d['name']!r} must be unique and use letters, digits, . _ -")
        names.add(d["name"])
        prefix = d["prefix"].strip("/") if "prefix" in d else None
        out.append(
            Downstream(
                d["name"],
                d.get("repo"),
                d.get("ref"),
                prefix,
                d["track"],
                d.get("pypi"),
                d.get("version"),
                d.get("lineage"),
            )
        )
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
    ms: ManifestSet | None = None  # the lineage the downstream is compared with
    provenance: list[tuple[str, list[str]]] = field(default_factory=list)  # (file, releases with its bytes)


def check_one(
    client: GitHubClient, ms: ManifestSet, ds: Downstream, index_url: str | None = None, index=None
) -> ForkResult:
    """`ms`: the downstream's lineage; `index` (vendorkit.provenance.Index): every known release of every
    lineage, to say which one each vendored file matches."""
    res = _check_package(ms, ds, index_url) if ds.package else _check_fork(client, ms, ds)
    res.ms = ms
    if index is not None:
        kind = res.report.digest_kind
        res.provenance = [
            (f.path, index.matches(f.path, f.actual, kind))
            for f in res.report.files
            if f.actual and f.status not in ("foreign", "unsafe") and index.named_like(f.path)
        ]
    return res


def _check_fork(client: GitHubClient, ms: ManifestSet, ds: Downstream) -> ForkResult:
    # a GitHub fork's entry names its repo, ref and prefix (_check_entry requires all three)
    assert ds.repo is not None and ds.ref is not None and ds.prefix is not None
    before_req, before_304 = client.counters.requests, client.counters.not_modified
    tag = ms.resolve(None if ds.track == "latest" else ds.track)
    owner, repo = ds.repo.split("/")
    # a lineage without git blob ids is compared by sha256: each compared blob is fetched (and cached)
    view_kind = "git_blob_sha1" if ms.has_blob_ids else "sha256"
    report = Report(
        mode="fork", target=ds.source, tag=tag.tag, prefix=ds.prefix, digest_kind=view_kind, lineage=ms.lineage
    )
    res = ForkResult(ds, report)
    try:
        view = RemoteFork(client, owner, repo, ds.ref, sha256=not ms.has_blob_ids)
        res.commit = view.commit_sha
        Comparator(view, ms, tag, ds.prefix, canonical=None, want_diff=False).run(report)
        forktrust.apply(report, ms, tag)
    except CannotCheck as e:
        report.verdict = "unknown"
        report.errors.append(client.scrub(str(e)))
    res.requests = client.counters.requests - before_req
    res.counted = res.requests - (client.counters.not_modified - before_304)
    return res


def _check_package(ms: ManifestSet, ds: Downstream, index_url: str | None) -> ForkResult:
    """The newest release of a PyPI package (or its pinned version), every file of it: one index page, then one
    sha256-checked download per file, so a new release is checked on the first run after it appears."""
    import hashlib as _hashlib

    from .archive import open_archive_fork
    from .distributions import check_release

    tag = ms.resolve(None if ds.track == "latest" else ds.track)
    report = Report(
        mode="fork", target=ds.source, tag=tag.tag, prefix=ds.prefix, digest_kind="sha256", lineage=ms.lineage
    )
    res = ForkResult(ds, report)
    try:
        spec = f"pypi:{ds.package}" + (f"=={ds.version}" if ds.version else "")
        view = open_archive_fork(spec, index_url)
        res.requests = 1 + len(view.dists)
        shas = _hashlib.sha256("".join(f"{d.filename}:{d.sha256}\n" for d in view.dists).encode()).hexdigest()
        res.commit = f"{view.version}:{shas[:12]}"
        res.extra = {"version": view.version, "files": [d.filename for d in view.dists]}
        report = check_release(view, ms, tag, ds.prefix, canonical=None, want_diff=False)
        res.report = report = forktrust.apply(report, ms, tag)
    except (CannotCheck, UsageError) as e:  # no layer found in the package: it cannot be checked as configured
        report.verdict = "unknown"
        report.errors.append(str(e))
    res.counted = res.requests
    return res


def child_check(p: dict) -> dict:
    """One downstream's check, in a child process (vendorkit.isolate): the answer the parent rebuilds a
    ForkResult from."""
    from . import budget
    from .github import EtagStore
    from .provenance import load_index
    from .render import to_json

    root = p["repo_root"]
    ms = ManifestSet.load_dir(os.path.join(root, "vendor_manifests"))
    ds = Downstream(**p["downstream"])
    etags = EtagStore(None, dict(p["etags"]))
    client = GitHubClient(
        p["api_url"],
        os.environ.get("GITHUB_TOKEN"),
        etags,
        max_wait=p["max_wait"],
        max_retries=p["retries"],
        backoff=p["backoff"],
    )
    with budget.use(budget.Budget(budget.parse_limits(p["budget"]))):
        res = check_one(client, manifests_loader(ms, root)(ds.lineage), ds, p["index_url"], load_index(root))
    return {
        "report": json.loads(to_json(res.report, None)),
        "owned": sorted(res.report.owned),
        "commit": res.commit,
        "requests": res.requests,
        "counted": res.counted,
        "extra": res.extra,
        "provenance": res.provenance,
        "etags": {k: v for k, v in etags.entries.items() if p["etags"].get(k) != v},
    }


def check_isolated(
    client: GitHubClient,
    ms: ManifestSet,
    ds: Downstream,
    repo_root: str,
    index_url: str | None = None,
    budget_specs: list[str] | None = None,
    limits=None,
) -> ForkResult:
    """check_one in a child process under resource limits: whatever the downstream does to the reader ends the
    child only, and is this downstream's `unknown`."""
    from . import isolate

    mine = f"/repos/{ds.repo}/" if ds.repo else None
    payload = {
        "downstream": dataclasses.asdict(ds),
        "repo_root": repo_root,
        "api_url": client.api,
        "index_url": index_url,
        "max_wait": client.max_wait,
        "retries": client.max_retries,
        "backoff": client.backoff,
        "budget": list(budget_specs or []),
        "etags": {
            k: v for k, v in client.etags.entries.items() if k.startswith("blob-sha256:") or (mine and mine in k)
        },
    }
    try:
        ans = isolate.run("vendorkit.watch.child_check", payload, limits or isolate.ChildLimits())
    except isolate.ChildFailed as e:
        ans = {"failed": f"the check {e}"}
    if "failed" in ans:
        tag = ms.resolve(None if ds.track == "latest" else ds.track)
        report = Report(
            mode="fork",
            target=ds.source,
            tag=tag.tag,
            prefix=ds.prefix,
            digest_kind="sha256",
            lineage=ms.lineage,
            verdict="unknown",
            errors=[client.scrub(str(ans["failed"]))],
        )
        return ForkResult(ds, report, ms=ms)
    client.etags.entries.update(ans["etags"])
    res = ForkResult(
        ds,
        Report.from_dict(ans["report"], ans["owned"]),
        commit=ans["commit"],
        requests=ans["requests"],
        counted=ans["counted"],
        extra=ans["extra"],
        ms=ms,
        provenance=[(p, list(m)) for p, m in ans["provenance"]],
    )
    return res


def marker(ds: Downstream) -> str:
    return f"<!-- deep_gemm_sm120:vendor-drift name={ds.name} -->"


def _where(res: ForkResult) -> str:
    ds = res.downstream
    if ds.package:
        return f"{ds.package}=={res.extra.get('version', ds.version or '?')} (PyPI)"
    return f"{ds.repo}@{ds.ref}"


def issue_title(res: ForkResult) -> str:
    r = res.report
    if r.verdict == "stale":
        ms = res.ms
        label = (lambda t: ms.label(t)) if ms is not None else (lambda t: t)
        return f"Vendored SM120 device layer is stale in {_where(res)} ({label(r.stale_tag)}, latest {label(r.tag)})"
    if r.verdict == "not-vendored":
        return f"{_where(res)} does not vendor the SM120 device layer"
    if r.verdict == "untrusted":
        status = (r.trust or {}).get("status", "untrusted")
        return f"Vendored SM120 device layer in {_where(res)} pins a release our history does not extend ({status})"
    return f"Vendored SM120 device layer drifted in {_where(res)}"


def how_to_fix(res: ForkResult, ms: ManifestSet) -> list[str]:
    """A --sync recommendation only when --sync would lose nothing; otherwise the files that need a decision."""
    from . import sync

    ds, r = res.downstream, res.report
    ms = res.ms or ms
    if r.verdict == "not-vendored":
        return [
            "None of its device-layer-named files equals a file of any release: it carries SM120 headers of "
            "its own, so there is no `--sync` recommendation. If it is meant to vendor this layer, review "
            "its headers against the release first.",
            "",
        ]
    assert r.tag is not None  # a downstream is checked against a release (check_one)
    tag = ms.by_tag[r.tag]
    refused = sync.refusals(sync.plan(r, ms, tag))
    checkout = "the source checkout this package is built from" if ds.package else "a local checkout of the fork"
    if ds.package:
        name = ds.package
    else:
        assert ds.repo is not None  # a GitHub fork's entry names its repo (_check_entry)
        name = ds.repo.split("/")[1]
    prefix = f" --prefix {shlex.quote(r.prefix)}" if r.prefix else ""  # a package's prefix is read from it: quoted
    upstream = f" --upstream {ms.lineage}" if ms.lineage else ""
    if ms.lineage and not ms.has_blob_ids:
        upstream += " --bytes-from SOURCE_WITH_ITS_BYTES"
    cmd = f"python tools/check_vendor.py --fork PATH/TO/{name}{prefix}{upstream} --tag {r.tag} --sync --dry-run"
    if refused:
        return (
            [
                f"`--sync` would refuse {len(refused)} file(s) that hold the fork's own bytes, so it is not "
                f"recommended as is:",
                "",
            ]
            + [f"- {inert.md_code(a.path, False)}" for a in refused]
            + [
                "",
                f"In {checkout}, review each: pin a reviewed edit (`python tools/check_vendor.py pin --fork PATH "
                f"FILE --reason TEXT`) or overwrite it with `--sync --force` (which keeps a backup copy); "
                f"{inert.md_code(cmd, False)} lists the plan.",
                "",
            ]
        )
    lines = [f"To fix it from {checkout}:", "", *inert.md_fence(f"{cmd}   # then without --dry-run", "bash"), ""]
    if ds.package:
        lines += ["then publish a new release of the package.", ""]
    return lines


def findings_digest(r: Report) -> str:
    """A digest of what the issue reports (verdict, tag, prefix, each file's status and digests), not of where it
    was read: a new commit of the downstream with the same findings leaves the issue as it is."""
    facts = [
        r.verdict,
        r.tag,
        r.prefix,
        r.stale_tag,
        sorted(r.notes),
        (r.stamp or {}).get("tag"),
        [(f.path, f.status, f.diagnosis, f.detail, f.expected, f.actual, f.fork_path) for f in r.files],
    ]
    return hashlib.sha256(json.dumps(facts, sort_keys=True, default=str).encode()).hexdigest()[:32]


def _findings_line(body: str | None) -> str | None:
    lines = (body or "").split("\n", 2)
    return lines[1] if len(lines) > 1 and lines[1].startswith("<!-- findings ") else None


def provenance_section(res: ForkResult) -> list[str]:
    """Which known release (of any lineage) has each vendored file's bytes; files no release has stand out."""
    if not res.provenance:
        return []
    c = inert.md_code
    from .provenance import _compact

    rows = [f"| {c(path)} | {c(_compact(m)) if m else '**none**'} |" for path, m in res.provenance]
    none = sum(1 for _, m in res.provenance if not m)
    return [
        "#### Which release each vendored file matches",
        "",
        f"{len(res.provenance) - none} of {len(res.provenance)} files equal a file of a known release "
        f"(ours or an imported upstream lineage); {none} match none.",
        "",
        "| file | releases with these bytes |",
        "|---|---|",
        *rows,
        "",
    ]


def issue_body(res: ForkResult, ms: ManifestSet, report_url: str | None = None) -> str:
    """Deterministic for identical findings (no timestamps). Line 1 is the marker, line 2 the findings digest."""
    ds, r = res.downstream, res.report
    ms = res.ms or ms
    c = inert.md_code
    if ds.package:
        files = res.extra.get("files") or []
        what = f"{c(_where(res), False)} (file{'s' if len(files) != 1 else ''} {', '.join(c(f, False) for f in files)})"
    else:
        what = f"{c(f'{ds.repo}@{ds.ref}', False)} (findings as of commit {c(res.commit, False)})"
    if r.verdict == "not-vendored":
        opening = (
            f"{what} carries SM120 device-layer headers under {c(r.prefix or '.', False)}, but none of them "
            f"equals a file of any deep_gemm_sm120 release (checked against {c(r.tag, False)})."
        )
    else:
        assert r.tag is not None  # a downstream is checked against a release (check_one)
        opening = (
            f"{what} vendors the SM120 device layer under {c(r.prefix or '.', False)} and tracks "
            f"{c(ds.track, False)} (= {c(ms.label(r.tag), False)})."
        )
    head = [
        marker(ds),
        f"<!-- findings {findings_digest(r)} -->",
        opening,
        "",
        *how_to_fix(res, ms),
        *provenance_section(res),
        "This issue is maintained by `tools/watch_downstreams.py`: it is edited in place when the findings "
        "change (not on every new commit) and closed when the downstream is back in sync.",
        "",
    ]
    body = "\n".join(head) + to_markdown(r)
    if len(body) > BODY_LIMIT:
        pointer = (
            "\n\n…truncated: the full report is "
            + (f"at {report_url}" if report_url else "in the drift-watch run's artifact")
            + ".\n"
        )
        # cut at a line end: every code span lies within one line, so none is left open
        body = body[: body.rfind("\n", 0, BODY_LIMIT - len(pointer))] + pointer
    return body


def run_url() -> str | None:
    env = os.environ
    if env.get("GITHUB_SERVER_URL") and env.get("GITHUB_REPOSITORY") and env.get("GITHUB_RUN_ID"):
        return f"{env['GITHUB_SERVER_URL']}/{env['GITHUB_REPOSITORY']}/actions/runs/{env['GITHUB_RUN_ID']}"
    return None


def reconcile_issues(
    client: GitHubClient, repo: str | None, results: list[ForkResult], ms: ManifestSet, dry_run: bool = False
) -> None:
    """Create, edit, reopen or close one issue per downstream; no write when nothing changed. dry_run: only
    record what would be done (reading the existing issues when `repo` is given)."""
    if repo is not None and not REPO_NAME.fullmatch(repo):
        raise UsageError(f"--repo {repo!r} is not OWNER/NAME")
    issues = (
        []
        if repo is None
        else [
            i
            for i in client.paginate(f"/repos/{repo}/issues", {"labels": LABEL, "state": "all"})
            if "pull_request" not in i
        ]
    )
    url = run_url()
    writer: _IssueWriter = _DryRun() if dry_run else client
    for res in results:
        mk = marker(res.downstream)
        # the marker must be the body's first line: a fork cannot plant it through a file name shown further down
        mine = sorted(
            (i for i in issues if (i.get("body") or "").split("\n", 1)[0].strip() == mk),
            key=lambda i: (i.get("state") != "open", -int(i["number"])),
        )
        current = mine[0] if mine else None
        verdict = res.report.verdict
        if verdict in FAILING_VERDICTS:
            title, body = issue_title(res), issue_body(res, ms, url)
            if current is None:
                _, made, _ = writer.request(
                    "POST", f"/repos/{repo}/issues", body={"title": title, "body": body, "labels": [LABEL]}
                )
                res.issue_action = f"created #{made['number']}"
            elif current["state"] != "open":
                writer.request(
                    "PATCH",
                    f"/repos/{repo}/issues/{current['number']}",
                    body={"state": "open", "title": title, "body": body},
                )
                res.issue_action = f"reopened #{current['number']}"
            elif _findings_line(current.get("body")) != _findings_line(body) or current.get("title") != title:
                writer.request(
                    "PATCH", f"/repos/{repo}/issues/{current['number']}", body={"title": title, "body": body}
                )
                res.issue_action = f"updated #{current['number']}"
            else:
                res.issue_action = f"unchanged #{current['number']}"
        elif verdict == "in-sync":
            if current is not None and current["state"] == "open":
                n = current["number"]
                writer.request(
                    "POST",
                    f"/repos/{repo}/issues/{n}/comments",
                    body={
                        "body": f"{inert.md_code(_where(res), False)} ("
                        f"{'version' if res.downstream.package else 'commit'} "
                        f"{inert.md_code(res.commit, False)}) is back in sync with "
                        f"{inert.md_code(res.report.tag, False)}. Closing."
                    },
                )
                writer.request("PATCH", f"/repos/{repo}/issues/{n}", body={"state": "closed"})
                res.issue_action = f"closed #{n}"
        else:
            res.issue_action = f"untouched #{current['number']}" if current else "-"
        if dry_run:
            verb, _, num = res.issue_action.partition(" ")
            would = {
                "created": "would create an issue",
                "reopened": f"would reopen {num}",
                "updated": f"would update {num}",
                "closed": f"would close {num}",
            }
            res.issue_action = would.get(verb, res.issue_action)


class _IssueWriter(Protocol):
    """What reconcile_issues writes issues through: the GitHub client, or _DryRun."""

    def request(self, method: str, path: str, *, body: Any = None) -> tuple[int, Any, Any]: ...


class _DryRun:
    """Stands in for the client's writes during --dry-run: nothing is sent."""

    def request(self, method: str, path: str, body=None):
        return 200, {"number": "?"}, {}


def exit_code(results: list[ForkResult]) -> int:
    verdicts = {r.report.verdict for r in results}
    if verdicts & set(FAILING_VERDICTS):
        return 1
    if "unknown" in verdicts:
        return 2
    return 0


def summary_markdown(results: list[ForkResult], scrub) -> str:
    lines = [
        "# Downstream drift report",
        "",
        "| downstream | source | commit / version | tag | verdict | requests (counted) | issue |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        ds, rep = r.downstream, r.report
        verdict = rep.verdict + (f" ({rep.stale_tag})" if rep.stale_tag else "")
        lines.append(
            f"| {ds.name} | {inert.md_code(ds.source)} | {inert.md_code((r.commit or '-')[:20])} | {rep.tag} | {verdict} | "
            f"{r.requests} ({r.counted}) | {r.issue_action} |"
        )
    lines.append("")
    for r in results:
        if r.report.verdict != "in-sync":
            lines += [f"## {r.downstream.name}", "", to_markdown(r.report)]
    return scrub("\n".join(lines).rstrip("\n") + "\n")


def summary_json(results: list[ForkResult], scrub) -> str:
    from .render import to_json

    doc = {
        "schema_version": WATCH_SCHEMA_VERSION,
        "exit_code": exit_code(results),
        "downstreams": [
            {
                "name": r.downstream.name,
                "source": r.downstream.source,
                "repo": r.downstream.repo,
                "ref": r.downstream.ref,
                "package": r.downstream.package,
                "version": r.extra.get("version"),
                "files": r.extra.get("files"),
                "commit": r.commit,
                "track": r.downstream.track,
                "requests": r.requests,
                "counted_requests": r.counted,
                "issue": r.issue_action,
                "report": json.loads(to_json(r.report)),
            }
            for r in results
        ],
    }
    return scrub(json.dumps(inert.json_safe(doc), indent=2) + "\n")
