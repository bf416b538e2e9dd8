"""A release made of several files (a `pypi:` project's wheels and sdists), checked file by file into one report.

pip installs a different file of the same release on each platform, so a release is in sync only when every one
of its files is: each is compared on its own (its own vendor root, detected inside it), its findings are listed
under its file name (`dist`), and the report's `distributions` says what each file is (platform tags), how its
bytes were verified, and its verdict. The release's verdict: `in-sync` when every file is; `stale` when every
file is the same older release; `not-vendored` when none vendors the layer; otherwise `drifted` when any file
drifted, else `unknown`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .compare import AmbiguousPrefix, Comparator, Report, detect_prefix
from .errors import CannotCheck, UsageError

if TYPE_CHECKING:
    from .pypi import Dist


def _verdict(reports: list[Report]) -> tuple[str, str | None]:
    verdicts = {r.verdict for r in reports}
    if verdicts == {"in-sync"}:
        return "in-sync", None
    if verdicts == {"stale"} and len({r.stale_tag for r in reports}) == 1:
        return "stale", reports[0].stale_tag
    if verdicts == {"not-vendored"}:
        return "not-vendored", None
    if verdicts & {"drifted", "stale", "not-vendored"}:
        return "drifted", None
    return "unknown", None


def check_release(
    view, ms, tag, prefix: str | None, canonical=None, want_diff: bool = True, strict: bool = False
) -> Report:
    """One report for every file of `view` (a vendorkit.pypi.ReleaseView)."""
    parts: list[tuple[Dist, Report]] = []
    found: dict[str, str] = {}
    pending = []
    for dist, part in view.parts():
        rep = Report(
            mode="fork",
            target=view.part_label(dist),
            tag=tag.tag,
            prefix=prefix,
            digest_kind="sha256",
            lineage=ms.lineage,
        )
        try:
            pre = prefix if prefix is not None else detect_prefix(part.iter_paths(), ms.all_paths())
        except AmbiguousPrefix as e:  # two copies in one file: which one is installed is not ours to guess
            raise UsageError(f"{dist.filename}: {e}") from None
        except UsageError as e:  # no layer in this file: compared at the root the other files use, if any
            pending.append((dist, rep, str(e)))
            continue
        found[dist.filename] = pre
        rep.prefix = pre
        parts.append(
            (dist, Comparator(part, ms, tag, pre, canonical=canonical, want_diff=want_diff, strict=strict).run(rep))
        )
    if pending:
        roots = set(found.values())
        if len(roots) != 1:
            raise UsageError(
                f"{view.label}: " + pending[0][2]
                if not roots
                else f"{view.label}: its files keep the layer under different roots "
                f"({', '.join(sorted(roots))}) and {pending[0][0].filename} under none: pass --prefix"
            )
        root = next(iter(roots))
        for dist, _, _ in pending:  # opened again: parts() closed it
            part = view.open(dist)
            try:
                rep = Report(
                    mode="fork",
                    target=view.part_label(dist),
                    tag=tag.tag,
                    prefix=root,
                    digest_kind="sha256",
                    lineage=ms.lineage,
                )
                parts.append(
                    (
                        dist,
                        Comparator(part, ms, tag, root, canonical=canonical, want_diff=want_diff, strict=strict).run(
                            rep
                        ),
                    )
                )
            finally:
                part.close()
        parts.sort(key=lambda p: p[0].filename)
    return merge(view.label, tag, ms, parts)


def merge(label: str, tag, ms, parts: list[tuple[Dist, Report]]) -> Report:
    if not parts:
        raise CannotCheck(f"{label}: the release has no files to check")
    roots = {r.prefix for _, r in parts}
    what = parts[0][0].filename if len(parts) == 1 else f"{len(parts)} files"
    out = Report(
        mode="fork",
        target=f"{label} ({what})",
        tag=tag.tag,
        prefix=next(iter(roots)) if len(roots) == 1 else None,
        digest_kind="sha256",
        lineage=ms.lineage,
    )
    out.distributions = []
    for dist, r in parts:
        for f in r.files:
            f.dist = dist.filename
            out.files.append(f)
        out.notes += [f"{dist.filename}: {n}" for n in r.notes]
        out.errors += [f"{dist.filename}: {e}" for e in r.errors]
        if r.stamp is not None and out.stamp is None:
            out.stamp = r.stamp
        out.distributions.append(
            {
                "file": dist.filename,
                "version": dist.version,
                "platforms": dist.platforms,
                "chosen_for": dist.chosen_for,
                "sha256": dist.sha256,
                "integrity": dist.integrity,
                "prefix": r.prefix,
                "verdict": r.verdict,
                "stale_tag": r.stale_tag,
                "counts": r.counts(),
            }
        )
    if any("unverified" in d["integrity"] for d in out.distributions):
        out.notes.append(
            "unverified: some files were read without checking the index's sha256 (see "
            "distributions); the verdict holds for the bytes read, which nothing proves are the files "
            "pip installs"
        )
    out.files.sort(key=lambda f: (f.path, f.dist or "", f.status))
    out.verdict, out.stale_tag = _verdict([r for _, r in parts])
    return out
