#!/usr/bin/env python3
"""Scheduled drift watcher for the forks listed in .github/downstreams.yaml.

    python tools/watch_downstreams.py [--config .github/downstreams.yaml] [--report report.md] [--json report.json]
                                      [--issues --repo OWNER/NAME] [--dry-run] [--state state.json]
                                      [--api-url URL] [--index-url URL]

Each GitHub fork costs one conditional commit lookup and one conditional recursive tree read (both free of
quota when unchanged, thanks to the ETags kept in --state). Each PyPI package costs one index page and one
sha256-checked download per file of its newest (or pinned) release. Token: GITHUB_TOKEN (never printed, never
sent to the index). Each downstream is checked in a child process under resource limits (address space, CPU
time, open files, file size, wall time): one that cannot be checked is `unknown` and the run goes on.
--dry-run prints the issue actions --issues would take and writes nothing but the requested reports.
Exit: 1 if any downstream is drifted, stale or does not vendor the layer, else 2 if any could not be checked,
else 0; 3 on bad configuration.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from vendorkit.argparsing import UsageParser
from vendorkit.errors import VendorError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main(argv=None) -> int:
    ap = UsageParser(prog="watch_downstreams.py", description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=os.path.join(ROOT, ".github", "downstreams.yaml"))
    ap.add_argument("--repo-root", default=ROOT, help="canonical checkout holding vendor_manifests/")
    ap.add_argument("--report", help="write the markdown report here")
    ap.add_argument("--json", help="write the JSON report here")
    ap.add_argument("--issues", action="store_true", help="maintain one issue per downstream in --repo")
    ap.add_argument("--repo", default=os.environ.get("GITHUB_REPOSITORY"), help="OWNER/NAME for --issues")
    ap.add_argument(
        "--dry-run", action="store_true", help="show the issue actions without writing issues or the --state file"
    )
    ap.add_argument("--state", help="ETag cache file (kept between runs)")
    ap.add_argument("--api-url", default=os.environ.get("GITHUB_API_URL"))
    ap.add_argument(
        "--index-url",
        default=None,
        help="package index for PyPI downstreams, a Simple API URL (default: PIP_INDEX_URL, else pip's "
        "configuration, else SM120_PYPI_INDEX, else https://pypi.org/simple)",
    )
    ap.add_argument(
        "--budget",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="one limit of each downstream's budget (repeatable; check_vendor.py --help lists the keys)",
    )
    ap.add_argument(
        "--child-seconds",
        type=float,
        default=1800.0,
        help="wall-clock limit of one downstream's check (its child process is stopped after it)",
    )
    ap.add_argument("--max-wait", type=float, default=60.0, help="longest rate-limit wait in seconds")
    ap.add_argument("--retries", type=int, default=3, help="retries after a 5xx or connection error")
    ap.add_argument("--backoff", type=float, default=1.0, help="first retry delay in seconds (doubles)")
    try:
        a = ap.parse_args(argv)
    except VendorError as e:
        print(f"watch_downstreams: error: {e}", file=sys.stderr)
        return e.exit_code
    token = os.environ.get("GITHUB_TOKEN")
    scrub = (lambda s: s.replace(token, "***")) if token else (lambda s: s)
    try:
        from vendorkit import inert, watch
        from vendorkit.github import EtagStore, GitHubClient
        from vendorkit.manifest import MANIFEST_DIR, ManifestSet

        ms = ManifestSet.load_dir(os.path.join(a.repo_root, MANIFEST_DIR))
        if not ms.manifests:
            raise VendorError("no release manifests: nothing to compare forks with")
        downstreams = watch.load_config(a.config, ms, a.repo_root)
        manifests = watch.manifests_loader(ms, a.repo_root)
        if a.issues and not a.repo:
            raise VendorError("--issues needs --repo OWNER/NAME (or GITHUB_REPOSITORY)")
        etags = EtagStore.load(a.state)
        client = GitHubClient(a.api_url, token, etags, max_wait=a.max_wait, max_retries=a.retries, backoff=a.backoff)
        from vendorkit import budget, isolate

        limits = budget.parse_limits(a.budget)
        child = isolate.ChildLimits(
            memory=limits.memory, cpu_seconds=int(a.child_seconds), wall_seconds=a.child_seconds
        )
        results = [
            watch.check_isolated(client, manifests(ds.lineage), ds, a.repo_root, a.index_url, a.budget, child)
            for ds in downstreams
        ]
        if a.issues or a.dry_run:
            try:
                watch.reconcile_issues(client, a.repo if (a.issues or a.repo) else None, results, ms, dry_run=a.dry_run)
            except VendorError as e:
                print(scrub(f"watch_downstreams: issue update failed: {e}"), file=sys.stderr)
                for r in results:
                    r.issue_action = "not updated"
        if not a.dry_run:
            etags.save()
        md = watch.summary_markdown(results, scrub)
        if a.report:
            with open(a.report, "w", encoding="utf-8") as fh:
                fh.write(md)
        if a.json:
            with open(a.json, "w", encoding="utf-8") as fh:
                fh.write(watch.summary_json(results, scrub))
        for r in results:
            rep = r.report
            line = (
                f"{r.downstream.name:<24} {rep.verdict:<8} {rep.tag}  requests {r.requests} "
                f"({r.counted} counted)  issue {r.issue_action}"
            )
            if rep.errors:
                line += "  reason: " + "; ".join(rep.errors)
            print(scrub(inert.text(line)))  # reasons may quote a downstream's file names
        return watch.exit_code(results)
    except VendorError as e:
        print(scrub(f"watch_downstreams: error: {e}").encode("ascii", "backslashreplace").decode(), file=sys.stderr)
        if a.json:  # the report's exit_code is always the process's
            with open(a.json, "w", encoding="utf-8") as fh:
                json.dump(
                    {"schema_version": 1, "exit_code": e.exit_code, "errors": [scrub(str(e))], "downstreams": []},
                    fh,
                    indent=2,
                )
        return e.exit_code


if __name__ == "__main__":
    sys.exit(main())
