"""Argument parsing and orchestration for tools/check_vendor.py."""
from __future__ import annotations

import argparse
import json
import os
import sys

from .argparsing import UsageParser as _Parser
from .errors import EXIT_CANNOT_CHECK, EXIT_USAGE, UsageError, VendorError

FORMATS = ("text", "json", "markdown")


def _default_repo() -> str:
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _check_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="check_vendor.py", description=(
        "Verify that a fork's copy of device_layer/ is byte-identical to a release (or, with no --fork, "
        "self-check this checkout). Exit: 0 in-sync, 1 stale/drifted, 2 could not check, 3 usage/config. "
        "Also: `check_vendor.py release vX.Y.Z` writes a new release manifest."))
    p.add_argument("--fork", help="local path, or github:OWNER/REPO@REF")
    p.add_argument("--prefix", help="where the fork keeps the device layer (auto-detected when omitted)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--tag", help="release to check against (default: latest)")
    g.add_argument("--latest", action="store_true", help="check against the latest release (default)")
    p.add_argument("--format", choices=FORMATS, default="text")
    p.add_argument("--sync", action="store_true", help="write the tag's files into the fork, then re-verify")
    p.add_argument("--dry-run", action="store_true", help="with --sync: print the actions only")
    p.add_argument("--no-diff", action="store_true", help="skip content diagnosis and diffs")
    p.add_argument("--diff", action="store_true",
                   help="github: forks: download changed files to diagnose and diff them (off by default)")
    p.add_argument("--verbose", "-v", action="store_true", help="list ok files too (text format)")
    p.add_argument("--repo", default=_default_repo(), help="canonical checkout (default: this script's)")
    p.add_argument("--api-url", default=None, help="GitHub API base URL for github: forks")
    return p


def _release_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="check_vendor.py release",
                description="Write vendor_manifests/vX.Y.Z.yaml from the committed device_layer/.")
    p.add_argument("version", help="new release tag, vMAJOR.MINOR.PATCH")
    p.add_argument("--repo", default=_default_repo())
    p.add_argument("--date", default=None, help="created date (YYYY-MM-DD); default today (UTC)")
    return p


def _emit(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def _run_release(argv: list[str]) -> int:
    from .release import release

    a = _release_parser().parse_args(argv)
    dest = release(a.repo, a.version, a.date)
    rel = os.path.relpath(dest, a.repo)
    _emit(f"wrote {rel}\nnext: git add {rel} && git commit -m 'release {a.version}' && git tag {a.version}\n")
    return 0


def _open_fork(a):
    if a.fork.startswith("github:"):
        try:
            from .remote import open_remote_fork
        except ImportError:
            raise UsageError("github: forks need the remote transport (tools/vendorkit/remote.py)") from None
        return open_remote_fork(a.fork, api_url=a.api_url, want_blobs=a.diff and not a.no_diff)
    from .forkview import LocalFork

    return LocalFork(a.fork)


def _run_check(argv: list[str]) -> int:
    a = _check_parser().parse_args(argv)
    if a.dry_run and not a.sync:
        raise UsageError("--dry-run goes with --sync")
    from .canonical import CanonicalStore
    from .manifest import MANIFEST_DIR, ManifestSet
    from .render import render

    ms = ManifestSet.load_dir(os.path.join(a.repo, MANIFEST_DIR))
    if a.fork is None:
        if a.sync or a.prefix:
            raise UsageError("--sync and --prefix need --fork")
        if a.tag:
            ms.resolve(a.tag)  # unknown tags are still a usage error
        from .selfcheck import self_check

        report = self_check(a.repo, ms)
        _emit(render(report, a.format, a.verbose))
        return report.exit_code

    from .compare import Comparator, Report, detect_prefix

    tag = ms.resolve(a.tag)
    view = _open_fork(a)
    if a.prefix is not None:
        prefix = a.prefix.strip("/")
        from .manifest import check_safe_path
        from .errors import ManifestError

        if prefix:
            try:
                check_safe_path(prefix, "--prefix")
            except ManifestError as e:
                raise UsageError(str(e)) from None
    else:
        prefix = detect_prefix(view.iter_paths(), ms.all_paths())
    store = CanonicalStore(a.repo)

    def compare():
        rep = Report(mode="fork", target=view.label, tag=tag.tag, prefix=prefix, digest_kind=view.digest_kind)
        return Comparator(view, ms, tag, prefix, canonical=store.get, want_diff=not a.no_diff).run(rep)

    report = compare()
    if a.sync:
        from .forkview import LocalFork
        from . import sync

        if not isinstance(view, LocalFork):
            raise UsageError("--sync works on local forks only")
        actions = sync.plan(report, ms, tag)
        out = _emit if a.format == "text" else sys.stderr.write  # keep stdout parseable

        def emit(line: str) -> None:
            out(line + "\n")

        emit(f"sync {'(dry run) ' if a.dry_run else ''}{view.label} -> {tag.tag}:")
        if not actions:
            emit("  nothing to do")
        if a.dry_run:
            for act in actions:
                emit(f"  {act.verb:<8} {act.path}  ({act.why})")
        else:
            sync.apply(actions, view, tag, prefix, store.get, emit)
            view = LocalFork(view.root)
            report = compare()
    _emit(render(report, a.format, a.verbose))
    return report.exit_code


def _fail(code: int, message: str, want_json: bool) -> int:
    """Report a failure on stderr, and as a JSON report when JSON was asked for: its exit_code is ours."""
    if want_json:
        _emit(json.dumps({"schema_version": 1, "verdict": "unknown", "exit_code": code, "errors": [message]},
                         indent=2) + "\n")
    sys.stderr.write(f"check_vendor: {'error' if code == EXIT_USAGE else 'cannot check'}: {message}\n")
    return code


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    want_json = "--format=json" in argv or any(
        x == "--format" and i + 1 < len(argv) and argv[i + 1] == "json" for i, x in enumerate(argv))
    try:
        if argv and argv[0] == "release":
            return _run_release(argv[1:])
        return _run_check(argv)
    except VendorError as e:
        return _fail(e.exit_code, str(e), want_json)
    except KeyboardInterrupt:
        return _fail(EXIT_CANNOT_CHECK, "interrupted", want_json)
    except OSError as e:  # anything the views did not already classify
        return _fail(EXIT_CANNOT_CHECK, str(e), want_json)
