"""Argument parsing and orchestration for tools/check_vendor.py."""

from __future__ import annotations

import argparse
import json
import os
import sys

from . import budget, inert
from .argparsing import UsageParser as _Parser
from .errors import EXIT_CANNOT_CHECK, EXIT_USAGE, CannotCheck, UsageError, VendorError

FORMATS = ("text", "json", "markdown")


def _default_repo() -> str:
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


SYNOPSIS = """
  check_vendor.py [--repo DIR]                                   self-check this checkout (no --fork)
  check_vendor.py --fork PATH|git:DIR@REF|github:OWNER/REPO@REF|WHEEL|SDIST|pypi:NAME[==VERSION]
                  [--prefix DIR] [--tag vX.Y.Z | --latest] [--format text|json|markdown]
                  [--strict] [--no-diff] [--diff-lines N | --full-diffs] [-v] [--api-url URL] [--index-url URL]
                  [--sync [--dry-run] [--force] [--drop-patches] [--repin]] [--require-signed] [--range-reads]
                  [--upstream NAME [--bytes-from SOURCE]] [--budget KEY=VALUE ...]
  check_vendor.py pin --fork PATH FILE --reason TEXT [--upstream URL] [--prefix DIR] [--lineage NAME]
  check_vendor.py release vX.Y.Z [--date YYYY-MM-DD] [--sign-key PATH]
  check_vendor.py sign vX.Y.Z --key PATH
  check_vendor.py rotate --key OLD --new-key NEW.pub --from YYYY-MM-DD [--principal NAME]
  check_vendor.py import-manifest (VENDOR.json | MANIFEST.yaml | SOURCE | --from-git DIR@REF) --upstream NAME
                  [--prefix DIR] [--tag TAG] [--all-files] [--origin TEXT] [--date YYYY-MM-DD]
  check_vendor.py provenance SOURCE [SOURCE ...] [--prefix DIR] [--format text|json|markdown] [--range-reads]
  (every command that reads a source takes --budget KEY=VALUE; keys: bytes, entries, name, depth, seconds,
   request_seconds, memory)"""


def _add_budget(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--budget",
        action="append",
        metavar="KEY=VALUE",
        default=[],
        help="raise or lower one limit of the run's budget (repeatable): " + budget.describe_limits(),
    )


def _add_ranges(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--range-reads",
        action="store_true",
        help="pypi: read wheels in place with HTTP range requests instead of downloading them; the "
        "index's sha256 is then not checked, and the report says so (unverified)",
    )


def _check_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="check_vendor.py",
        usage=SYNOPSIS,
        description=(
            "Verify that a fork's copy of device_layer/ is byte-identical to a release (or, with no --fork, "
            "self-check this checkout). Exit: 0 in-sync, 1 stale/drifted/not-vendored, 2 could not check, "
            "3 usage/config."
        ),
    )
    p.add_argument("--fork", help="local path, github:OWNER/REPO@REF, a wheel or sdist, or pypi:NAME==VERSION")
    p.add_argument("--prefix", help="where the fork keeps the device layer (auto-detected when omitted)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--tag", help="release to check against (default: latest)")
    g.add_argument("--latest", action="store_true", help="check against the latest release (default)")
    p.add_argument("--format", choices=FORMATS, default="text")
    p.add_argument("--strict", action="store_true", help="files the stamp does not own (foreign) are drift")
    p.add_argument("--sync", action="store_true", help="write the tag's files into the fork, then re-verify")
    p.add_argument("--dry-run", action="store_true", help="with --sync: print the actions only")
    p.add_argument(
        "--force",
        action="store_true",
        help="with --sync: overwrite the fork's own edits too, after copying them to .sm120-sync-backup/<time>/",
    )
    p.add_argument("--drop-patches", action="store_true", help="with --sync: replace files carrying pinned patches")
    p.add_argument(
        "--require-signed",
        action="store_true",
        help="an unsigned release (or one whose signature cannot be checked) is drift, also without a pinned signer",
    )
    p.add_argument(
        "--repin",
        action="store_true",
        help="with --sync: pin the release afresh (trust on first use) when it does not extend the stamp's pin; "
        "only after checking the new signer or history out of band",
    )
    p.add_argument("--no-diff", action="store_true", help="skip content diagnosis and diffs")
    p.add_argument(
        "--diff-lines",
        type=int,
        default=None,
        metavar="N",
        help="lines of each diff to show, in every format (default 200)",
    )
    p.add_argument(
        "--full-diffs", action="store_true", help="show whole diffs (files over the 1 MiB diagnosis cap still get none)"
    )
    p.add_argument(
        "--diff",
        action="store_true",
        help="accepted for compatibility: changed files of github: forks are now always diagnosed from their contents",
    )
    p.add_argument("--verbose", "-v", action="store_true", help="list ok files too (text format)")
    p.add_argument("--repo", default=_default_repo(), help="canonical checkout (default: this script's)")
    p.add_argument("--api-url", default=None, help="GitHub API base URL for github: forks")
    p.add_argument("--index-url", default=None, help="package index for pypi: forks (default: pip's, see docs)")
    p.add_argument(
        "--upstream",
        metavar="NAME",
        default=None,
        help="compare with an imported upstream lineage instead of our releases",
    )
    p.add_argument(
        "--bytes-from",
        metavar="SOURCE",
        default=None,
        help="with --upstream: a source holding the lineage's bytes, for --sync and diffs (checkout, git:DIR@REF, ...)",
    )
    _add_ranges(p)
    _add_budget(p)
    return p


def _release_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="check_vendor.py release",
        description="Write vendor_manifests/vX.Y.Z.yaml from the committed device_layer/.",
    )
    p.add_argument("version", help="new release tag, vMAJOR.MINOR.PATCH")
    p.add_argument("--repo", default=_default_repo())
    p.add_argument("--date", default=None, help="created date (YYYY-MM-DD); default today (UTC)")
    p.add_argument(
        "--sign-key",
        default=None,
        metavar="PATH",
        help="an ed25519 OpenSSH private key: also write vendor_manifests/signatures/vX.Y.Z.yaml.sig",
    )
    return p


def _sign_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="check_vendor.py sign",
        description=(
            "Sign a released manifest's exact bytes (ssh-keygen -Y sign, namespace deep_gemm_sm120-release) into "
            "vendor_manifests/signatures/vX.Y.Z.yaml.sig; the release workflow runs it for every tag."
        ),
    )
    p.add_argument("version", help="a released tag, vMAJOR.MINOR.PATCH")
    p.add_argument("--key", required=True, metavar="PATH", help="the ed25519 OpenSSH private key (never committed)")
    p.add_argument("--repo", default=_default_repo())
    return p


def _rotate_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="check_vendor.py rotate",
        description=(
            "Rotate the release key: write a statement signed by the old key that the new key signs releases "
            "created from --from on (vendor_manifests/rotations/), and update allowed_signers to match."
        ),
    )
    p.add_argument("--key", required=True, metavar="PATH", help="the old ed25519 OpenSSH private key")
    p.add_argument("--new-key", required=True, metavar="PUB", help="the new key's public key file (KEY.pub)")
    p.add_argument("--from", dest="start", required=True, metavar="YYYY-MM-DD", help="first release date it signs")
    p.add_argument("--principal", default="releases@deep_gemm_sm120", help="the signer's name in allowed_signers")
    p.add_argument("--repo", default=_default_repo())
    return p


def _pin_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="check_vendor.py pin",
        description=(
            "Record a reviewed local edit of a vendored file in the fork's stamp: from then on its exact bytes "
            "report `patched` (exit 0) instead of drift, until the release changes the file."
        ),
    )
    p.add_argument("file", help="the file, relative to the vendor root (or to the fork)")
    p.add_argument("--fork", required=True, help="local fork path")
    p.add_argument("--prefix", help="vendor root inside the fork (auto-detected when omitted)")
    p.add_argument("--reason", required=True, help="why the fork carries this edit")
    p.add_argument("--upstream", default=None, help="URL of the upstream issue or pull request")
    p.add_argument(
        "--lineage",
        default=None,
        metavar="NAME",
        help="the fork vendors an imported upstream lineage (its stamp names it)",
    )
    p.add_argument("--repo", default=_default_repo())
    _add_budget(p)
    return p


def _emit(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def _run_release(argv: list[str]) -> int:
    from .release import release

    a = _release_parser().parse_args(argv)
    written = [os.path.relpath(p, a.repo) for p in release(a.repo, a.version, a.date, a.sign_key)]
    _emit(
        "".join(f"wrote {rel}\n" for rel in written)
        + f"next: git add {' '.join(written)} && git commit -m 'release {a.version}' && git tag {a.version} && "
        f"git push origin HEAD {a.version}\n"
    )
    return 0


def _run_sign(argv: list[str]) -> int:
    from .release import sign_release

    a = _sign_parser().parse_args(argv)
    rel = os.path.relpath(sign_release(a.repo, a.version, a.key), a.repo)
    _emit(f"wrote {rel}\nnext: git add {rel} && git commit -m 'sign {a.version}'\n")
    return 0


def _run_rotate(argv: list[str]) -> int:
    from .release import rotate

    a = _rotate_parser().parse_args(argv)
    written = [os.path.relpath(p, a.repo) for p in rotate(a.repo, a.key, a.new_key, a.start, a.principal)]
    _emit("".join(f"wrote {rel}\n" for rel in written) + f"next: git add {' '.join(written)} && git commit\n")
    return 0


def _manifests(a):
    """Our releases, or the upstream lineage --upstream names."""
    from .manifest import MANIFEST_DIR, ManifestSet

    if getattr(a, "upstream", None):
        from . import lineage

        return lineage.load(a.repo, a.upstream)
    return ManifestSet.load_dir(os.path.join(a.repo, MANIFEST_DIR))


def _canonical(a, ms):
    """Where released bytes come from: this checkout for our releases; --bytes-from for a lineage (whose
    manifests hold hashes only)."""
    from .canonical import CanonicalStore, SourceStore

    if getattr(a, "bytes_from", None):
        from .sources import open_source

        if "://" not in a.bytes_from and ":" not in a.bytes_from.split("/", 1)[0] and not os.path.exists(a.bytes_from):
            raise CannotCheck(f"--bytes-from {a.bytes_from}: no such file or directory")
        return SourceStore(open_source(a.bytes_from, a.api_url, a.index_url, single=True), ms)
    if ms.lineage is not None:
        return SourceStore(None, ms)
    return CanonicalStore(a.repo)


def _own_checkout(a, view) -> tuple[str, ...]:
    """Fork-relative location of this canonical checkout when it lives inside a local fork (the CI recipe
    clones it to .sm120/): its device_layer/ must not count as a vendored copy."""
    root = getattr(view, "root", None)
    if root is None:
        return ()
    repo = os.path.realpath(a.repo)
    base = os.path.realpath(root)
    if repo.startswith(base + os.sep):
        return (os.path.relpath(repo, base).replace(os.sep, "/"),)
    return ()


def _given_prefix(a) -> str | None:
    """--prefix, checked (None when not given)."""
    from .errors import ManifestError
    from .manifest import check_safe_path

    if a.prefix is None:
        return None
    prefix = a.prefix.strip("/")
    if prefix:
        try:
            check_safe_path(prefix, "--prefix")
        except ManifestError as e:
            raise UsageError(str(e)) from None
    return prefix


def _resolve_prefix(a, view, ms) -> str:
    from .compare import detect_prefix

    prefix = _given_prefix(a)
    if prefix is None:
        return detect_prefix(view.iter_paths(), ms.all_paths(), ignore=_own_checkout(a, view))
    return prefix


def _run_check(argv: list[str]) -> int:
    a = _check_parser().parse_args(argv)
    if a.dry_run and not a.sync:
        raise UsageError("--dry-run goes with --sync")
    if (a.force or a.drop_patches or a.repin) and not a.sync:
        raise UsageError("--force, --drop-patches and --repin go with --sync")
    if a.diff_lines is not None and a.diff_lines < 0:
        raise UsageError("--diff-lines must be >= 0")
    from .diagnose import DEFAULT_DIFF_LINES
    from .render import render

    if a.full_diffs and a.diff_lines is not None:
        raise UsageError("--full-diffs and --diff-lines exclude each other")
    diff_lines = None if a.full_diffs else DEFAULT_DIFF_LINES if a.diff_lines is None else a.diff_lines
    if not os.path.isdir(os.path.join(a.repo, "vendor_manifests")) or not os.path.isdir(
        os.path.join(a.repo, "device_layer")
    ):
        raise UsageError(f"--repo {a.repo}: not a deep_gemm_sm120 checkout (no device_layer/ and vendor_manifests/)")
    if a.bytes_from and not a.upstream:
        raise UsageError(
            "--bytes-from goes with --upstream NAME (a lineage imported from hashes only); our own "
            "releases' bytes come from this checkout"
        )
    ms = _manifests(a)
    if a.fork is None:
        if a.sync or a.prefix or a.upstream or a.bytes_from or a.range_reads:
            raise UsageError("--sync, --prefix, --upstream, --bytes-from and --range-reads need --fork")
        if a.tag:
            ms.resolve(a.tag)  # unknown tags are still a usage error
        from .selfcheck import self_check

        report = self_check(a.repo, ms)
        _emit(render(report, a.format, a.verbose, diff_lines))
        return report.exit_code

    from .compare import Comparator, Report
    from .sources import open_source

    tag = ms.resolve(a.tag)
    if a.range_reads and not a.fork.startswith("pypi:"):
        raise UsageError("--range-reads goes with a pypi: fork")
    if a.sync and (
        a.fork.startswith(("pypi:", "github:", "git:")) or a.fork.lower().endswith((".whl", ".zip", ".tar.gz", ".tgz"))
    ):
        raise UsageError("--sync works on local forks only")
    view = open_source(a.fork, a.api_url, a.index_url, sha256=not ms.has_blob_ids, ranges=a.range_reads)
    store = _canonical(a, ms)
    if hasattr(view, "parts"):  # a pypi: release: every file of it
        from .distributions import check_release

        report = check_release(
            view, ms, tag, _given_prefix(a), canonical=store.get, want_diff=not a.no_diff, strict=a.strict
        )
        report = _with_trust(a, ms, tag, report)
        _emit(render(report, a.format, a.verbose, diff_lines))
        return report.exit_code
    with _locked(a, view):
        view = _journal_first(a, view)
        prefix = _resolve_prefix(a, view, ms)
        own = _own_checkout(a, view)

        def compare(v=view):
            rep = Report(
                mode="fork", target=v.label, tag=tag.tag, prefix=prefix, digest_kind=v.digest_kind, lineage=ms.lineage
            )
            return Comparator(
                v, ms, tag, prefix, canonical=store.get, want_diff=not a.no_diff, strict=a.strict, ignore=own
            ).run(rep)

        report = compare()
        if a.sync:
            report = _sync(a, view, ms, tag, prefix, store, compare, report)
        if report.trust is None:
            report = _with_trust(a, ms, tag, report)
    _emit(render(report, a.format, a.verbose, diff_lines))
    return report.exit_code


def _with_trust(a, ms, tag, report):
    from . import forktrust

    return forktrust.apply(report, ms, tag, a.require_signed)


def _locked(a, view):
    """A local fork is locked for the whole run (vendorkit.transaction.fork_lock): a --sync alone, checks
    together."""
    import contextlib

    from . import transaction
    from .forkview import LocalFork

    if not isinstance(view, LocalFork):
        return contextlib.nullcontext()
    return transaction.fork_lock(view.fs, exclusive=bool(a.sync and not a.dry_run))


def _journal_first(a, view):
    """A local fork an interrupted --sync left between two states (its journal at the fork root): --sync restores
    it first (the view of the restored fork is returned); anything else cannot check it (exit 2)."""
    from . import transaction
    from .forkview import LocalFork

    if not isinstance(view, LocalFork):
        return view
    left = transaction.pending(view.fs)
    if not left:
        return view
    if not a.sync or a.dry_run:
        raise CannotCheck(
            f"an interrupted --sync left {left[0]} at the fork root: the fork may be between two "
            f"releases; run --sync (without --dry-run) to restore it first"
        )
    out = _emit if a.format == "text" else sys.stderr.write
    for line in transaction.recover(view.fs) or []:
        out(inert.text(line) + "\n")
    view.fs.close()
    return LocalFork(view.root)


def _sync(a, view, ms, tag, prefix, store, compare, report):
    """Plan, check the whole plan, then (unless --dry-run or refused) apply it as one transaction and re-verify.
    Returns the report to print."""
    from . import sync
    from .forkview import LocalFork

    if not isinstance(view, LocalFork):
        raise UsageError("--sync works on local forks only")
    if report.verdict == "unknown":
        raise CannotCheck(
            "cannot sync a fork that could not be checked: "
            + "; ".join(f"{f.path}: {f.detail}" for f in report.files if f.status == "error")
            or "; ".join(report.errors)
        )
    out = _emit if a.format == "text" else sys.stderr.write  # keep stdout parseable

    def emit(line: str) -> None:
        out(inert.text(line) + "\n")

    from . import forktrust

    old_pin = (report.stamp or {}).get("pin")
    t = forktrust.evaluate(ms, tag, old_pin, a.require_signed)
    if t is not None and (t.finding or t.blocking) and a.repin and old_pin is not None:
        emit(f"repin {tag.tag}: {t.status} against the old pin ({t.detail}); pinning it afresh (--repin)")
        t = forktrust.evaluate(ms, tag, None, a.require_signed)
        if t is not None and not (t.finding or t.blocking) and old_pin.get("signer") and t.signer is None:
            emit(f"  note: {tag.tag} is unsigned: the new pin names no signer, so later checks verify no signature")
    if t is not None and (t.finding or t.blocking):
        emit(f"sync {view.label} -> {tag.tag}: refused, nothing written")
        emit(f"  refuse   {tag.tag}  ({t.status}: {t.detail})")
        if old_pin is not None and not a.repin:
            why = (
                "the release comes before what the fork pinned; to move the fork back on purpose"
                if t.status == "rollback"
                else "the release does not extend what the fork pinned; if you checked the new signer or history "
                "out of band"
            )
            emit(f"  {why}, pass --repin")
        return forktrust.settle(report, t, old_pin)
    actions = sync.plan(report, ms, tag, force=a.force, drop_patches=a.drop_patches, pin=forktrust.pin_for(tag, t))
    actions, backup_root = sync.preflight(actions, view, tag, store.get)
    emit(f"sync {'(dry run) ' if a.dry_run else ''}{view.label} -> {tag.tag}:")
    refused = sync.refusals(actions)
    if a.dry_run or refused:
        for act in actions:
            emit(f"  {act.verb:<8} {act.path}  ({act.why})" + ("  [backup first]" if act.backup else ""))
        if refused:
            for line in sync.how_to_proceed(a.fork, refused, bool(report.owned)):
                emit(line)
        return forktrust.settle(report, t, old_pin)
    sync.apply(actions, view, prefix, backup_root, emit, header={"tag": tag.label, "prefix": prefix})
    view.fs.close()
    view = LocalFork(view.root)
    return compare(view)


def _run_pin(argv: list[str]) -> int:
    from .forkview import LocalFork
    from .hashing import sha256_stream
    from .limits import STAMP_MAX_BYTES
    from .manifest import MANIFEST_DIR, ManifestSet
    from .safefs import NotRegular, UnsafePath
    from .stamp import STAMP, read_stamp, verifier

    a = _pin_parser().parse_args(argv)
    ms = ManifestSet.load_dir(os.path.join(a.repo, MANIFEST_DIR))
    if a.lineage:
        from . import lineage

        ms = lineage.load(a.repo, a.lineage)
    view = LocalFork(a.fork)
    prefix = _resolve_prefix(a, view, ms)
    rel = a.file.replace(os.sep, "/")
    if prefix and rel.startswith(prefix + "/"):
        rel = rel[len(prefix) + 1 :]
    fs = view.fs
    stamp_rel = f"{prefix}/{STAMP}" if prefix else STAMP
    try:
        info = read_stamp(fs.read_bytes(stamp_rel, STAMP_MAX_BYTES), ms, stamp_rel)
    except FileNotFoundError:
        raise UsageError(f"no {STAMP} under {prefix or '.'}: run --sync first, then pin edits") from None
    except (NotRegular, UnsafePath, OverflowError) as e:
        raise UsageError(f"{stamp_rel} cannot be used ({e}): run --sync to rewrite it, then pin") from None
    if info.problems:
        raise UsageError("the stamp is not trustworthy: " + "; ".join(info.problems))
    if rel not in info.owned:
        raise UsageError(f"{rel} is not a file the stamp owns (a release file under {prefix or '.'})")
    path = f"{prefix}/{rel}" if prefix else rel
    try:
        with fs.open_read(path) as fh:
            actual = sha256_stream(fh)
    except FileNotFoundError:
        raise UsageError(f"{path} does not exist: nothing to pin") from None
    except (NotRegular, UnsafePath) as e:
        raise UsageError(f"{path} cannot be pinned: {e}") from None
    except OSError as e:
        raise CannotCheck(f"cannot read {path}: {e.strerror or e}") from None
    if actual == info.owned[rel]:
        raise UsageError(f"{rel} equals the release: nothing to pin")
    doc = info.doc
    patches = [p for p in doc["patches"] if p["path"] != rel]
    entry = {"path": rel, "base_sha256": info.owned[rel], "patched_sha256": actual, "reason": a.reason}
    if a.upstream:
        entry["upstream"] = a.upstream
    patches.append(entry)
    text = verifier.make_stamp(
        doc["tag"], info.owned, patches, (doc.get("verifier") or {}).get("sha256"), doc.get("lineage"), doc.get("pin")
    )
    try:
        fs.write_atomic(stamp_rel, text.encode(), 0o644)
    except (OSError, UnsafePath) as e:
        raise CannotCheck(f"cannot write {stamp_rel}: {e}") from None
    _emit(inert.text(f"pinned {rel} ({actual[:12]}) in {stamp_rel}: {a.reason}") + "\n")
    return 0


def _import_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="check_vendor.py import-manifest",
        description=(
            "Store the manifest of another canonical source as an immutable release of an upstream lineage "
            "(vendor_manifests/upstreams/NAME/TAG.json): from a VENDOR-sm120.json, one of our manifests, or a "
            "tree (a directory, git:DIR@REF, github:OWNER/REPO@REF, a wheel or sdist; --prefix and --tag needed)."
        ),
    )
    p.add_argument("source", nargs="?", help="VENDOR-sm120.json, vX.Y.Z.yaml, or a source as --fork takes")
    p.add_argument("--from-git", metavar="DIR@REF", help="a ref of a local git repository (same as git:DIR@REF)")
    p.add_argument("--upstream", metavar="NAME", required=True, help="the lineage's name (a directory name)")
    p.add_argument("--prefix", help="the upstream's vendor root (detected from a VENDOR-sm120.json's paths)")
    p.add_argument("--tag", help="the release's tag (a VENDOR-sm120.json or manifest names its own)")
    p.add_argument(
        "--origin",
        default=None,
        help="where the hashes come from, recorded in the manifest instead "
        "of the default description (for a file: its repository, commit "
        "and path)",
    )
    p.add_argument(
        "--all-files",
        action="store_true",
        help="from a tree: every file under --prefix (default: the sm120_*-named ones)",
    )
    p.add_argument("--date", default=None, help="imported date (YYYY-MM-DD); default today (UTC)")
    p.add_argument("--repo", default=_default_repo())
    p.add_argument("--api-url", default=None, help="GitHub API base URL for github: sources")
    p.add_argument("--index-url", default=None, help="package index for pypi: sources")
    _add_budget(p)
    return p


def _run_import(argv: list[str]) -> int:
    from . import lineage

    a = _import_parser().parse_args(argv)
    if bool(a.source) == bool(a.from_git):
        raise UsageError("give one source: a file, a source spec, or --from-git DIR@REF")
    spec = f"git:{a.from_git}" if a.from_git else a.source
    m = lineage.import_source(spec, a.upstream, a.prefix, a.tag, a.date, a.api_url, a.index_url, a.all_files)
    if a.origin:
        m.origin = a.origin
    dest = lineage.write(a.repo, m)
    _emit(
        f"wrote {os.path.relpath(dest, a.repo)}: {m.label}, {len(m.files)} files under "
        f"{inert.text(m.root or '.')} ({inert.text(m.origin)})\n"
    )
    return 0


def _provenance_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="check_vendor.py provenance",
        description=(
            "For each vendored file of each source, which known releases (ours and every imported upstream "
            "lineage) have exactly those bytes. Exit: 0 every file matches a release, 1 some file matches none, "
            "2 a source could not be read, 3 usage error."
        ),
    )
    p.add_argument(
        "sources",
        nargs="+",
        metavar="SOURCE",
        help="directories, git:DIR@REF, github:OWNER/REPO@REF, wheels, sdists, pypi:NAME[==VERSION]",
    )
    p.add_argument("--prefix", help="the vendor root in every source (detected per source when omitted)")
    p.add_argument("--format", choices=FORMATS, default="text")
    p.add_argument("--repo", default=_default_repo())
    p.add_argument("--api-url", default=None)
    p.add_argument("--index-url", default=None)
    _add_ranges(p)
    _add_budget(p)
    return p


def _run_provenance(argv: list[str]) -> int:
    from . import provenance

    a = _provenance_parser().parse_args(argv)
    result = provenance.run(a.repo, a.sources, a.prefix, a.api_url, a.index_url, a.range_reads)
    _emit(provenance.render(result, a.format))
    return result.exit_code


def _fail(code: int, message: str, fmt: str | None) -> int:
    """Report a failure on stderr, and in the requested machine / CI format too: a JSON report's exit_code is
    ours, and a markdown job summary is never empty."""
    if fmt == "json":
        _emit(
            json.dumps(
                inert.json_safe({"schema_version": 2, "verdict": "unknown", "exit_code": code, "errors": [message]}),
                indent=2,
            )
            + "\n"
        )
    elif fmt == "markdown":
        from .render import error_markdown

        _emit(error_markdown(message, code))
    sys.stderr.write(f"check_vendor: {'error' if code == EXIT_USAGE else 'cannot check'}: {inert.text(message)}\n")
    return code


def _requested_format(argv: list[str]) -> str | None:
    for i, x in enumerate(argv):
        if x.startswith("--format="):
            return x.split("=", 1)[1]
        if x == "--format" and i + 1 < len(argv):
            return argv[i + 1]
    return None


def _requested_budget(argv: list[str]) -> list[str]:
    out = []
    for i, x in enumerate(argv):
        if x.startswith("--budget="):
            out.append(x.split("=", 1)[1])
        elif x == "--budget" and i + 1 < len(argv):
            out.append(argv[i + 1])
    return out


def _dispatch(argv: list[str]) -> int:
    if argv and argv[0] == "release":
        return _run_release(argv[1:])
    if argv and argv[0] == "sign":
        return _run_sign(argv[1:])
    if argv and argv[0] == "rotate":
        return _run_rotate(argv[1:])
    if argv and argv[0] == "pin":
        return _run_pin(argv[1:])
    if argv and argv[0] == "import-manifest":
        return _run_import(argv[1:])
    if argv and argv[0] == "provenance":
        return _run_provenance(argv[1:])
    return _run_check(argv)


def main(argv: list[str] | None = None, standalone: bool = False) -> int:
    """The command line. `standalone`: this process is check_vendor alone (the script), so the memory budget
    caps its address space too."""
    argv = list(sys.argv[1:] if argv is None else argv)
    fmt = _requested_format(argv)
    try:
        limits = budget.parse_limits(_requested_budget(argv))
        if standalone:
            budget.cap_address_space(limits.memory)
        with budget.use(budget.Budget(limits)):
            return _dispatch(argv)
    except VendorError as e:
        return _fail(e.exit_code, str(e), fmt)
    except KeyboardInterrupt:
        return _fail(EXIT_CANNOT_CHECK, "interrupted", fmt)
    except MemoryError:
        return _fail(
            EXIT_CANNOT_CHECK, "budget exhausted: memory (an input needed more than --budget memory allows)", fmt
        )
    except RecursionError:
        return _fail(EXIT_CANNOT_CHECK, "an input is nested too deeply to read", fmt)
    except OSError as e:  # anything the views did not already classify
        return _fail(EXIT_CANNOT_CHECK, str(e) or type(e).__name__, fmt)
    except Exception as e:
        return _fail(
            EXIT_CANNOT_CHECK,
            f"unexpected {type(e).__name__} while checking: {e} (a check_vendor bug: please report it with the input)",
            fmt,
        )
