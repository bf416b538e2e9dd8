"""Every kind of source the tools read, behind one call: a directory, `git:DIR@REF`, `github:OWNER/REPO@REF`, a
wheel or sdist, `pypi:NAME[==VERSION]`. Each comes back as a fork view (vendorkit.forkview's protocol)."""

from __future__ import annotations


def open_source(
    spec: str,
    api_url: str | None = None,
    index_url: str | None = None,
    sha256: bool = False,
    ranges: bool = False,
    single: bool = False,
):
    """The view of `spec`. `sha256`: a github: source hands out sha256 digests (one blob request per file
    compared) instead of git blob ids, for lineages imported from hashes only. A `pypi:` release is every file of
    it (a vendorkit.pypi.ReleaseView), read with range requests when `ranges`; `single`: the one file of a release
    that must have exactly one (a source of bytes, an import)."""
    if spec.startswith("github:"):
        from .remote import open_remote_fork

        return open_remote_fork(spec, api_url=api_url, sha256=sha256)
    from .gitref import GitRefFork, is_git_spec, parse_spec

    if is_git_spec(spec):
        return GitRefFork(*parse_spec(spec))
    from .archive import is_archive_spec, open_archive_fork

    if is_archive_spec(spec):
        view = open_archive_fork(spec, index_url=index_url, ranges=ranges)
        return view.single() if single and hasattr(view, "single") else view
    from .forkview import LocalFork

    return LocalFork(spec)
