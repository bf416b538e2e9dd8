"""Release tags are `vMAJOR.MINOR.PATCH` and compare as integer tuples, never as strings."""

from __future__ import annotations

import re

from .errors import UsageError

_TAG = re.compile(r"v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)")


def parse_tag(tag: str) -> tuple[int, int, int]:
    m = _TAG.fullmatch(tag)
    if not m:
        raise UsageError(f"malformed version {tag!r}: expected vMAJOR.MINOR.PATCH, e.g. v0.1.0")
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def is_tag(tag: str) -> bool:
    return bool(_TAG.fullmatch(tag))


_LOOSE = re.compile(r"v?(\d+(?:\.\d+)*)(?:[.-]?(a|b|rc|post|dev)(\d*))?")
_PHASE = {"dev": 0, "a": 1, "b": 2, "rc": 3, None: 4, "post": 5}


def sort_key(tag: str) -> tuple:
    """An ordering for release tags of any lineage: ours (vX.Y.Z) and upstreams' (`v0.1.4`, `2.8.1`, `1.0rc1`,
    `2.0.post1`). Numbers compare as numbers; a tag of another shape sorts before every version, by its text."""
    m = _LOOSE.fullmatch(tag)
    if not m:
        return (0, (), 0, 0, tag)
    nums = tuple(int(x) for x in m.group(1).split("."))
    nums = nums + (0,) * (4 - len(nums)) if len(nums) < 4 else nums
    return (1, nums, _PHASE[m.group(2)], int(m.group(3) or 0), tag)


def is_lineage_tag(tag: str) -> bool:
    """Tags an imported lineage may use: a version (`v0.1.4`, `2.8.1`, `1.0rc1`) and nothing a path could abuse."""
    return bool(_LOOSE.fullmatch(tag)) and len(tag) <= 64


_PEP440 = re.compile(
    r"\s*v?(?:(\d+)!)?(\d+(?:\.\d+)*)(?:[-_.]?(a|alpha|b|beta|c|rc|pre|preview)[-_.]?(\d*))?"
    r"(?:(?:-(\d+))|(?:[-_.]?(post|rev|r)[-_.]?(\d*)))?(?:[-_.]?(dev)[-_.]?(\d*))?"
    r"(?:\+([a-z0-9]+(?:[-_.][a-z0-9]+)*))?\s*",
    re.I,
)
_PRE = {"a": 0, "alpha": 0, "b": 1, "beta": 1, "c": 2, "rc": 2, "pre": 2, "preview": 2}


def pep440_key(version: str) -> tuple | None:
    """A sort key following PEP 440's ordering (epoch, release, pre, post, dev, local), or None for a version
    string PEP 440 does not accept."""
    m = _PEP440.fullmatch(version)
    if not m:
        return None
    epoch, rel, pre_l, pre_n, post_implicit, post_l, post_n, dev_l, dev_n, local = m.groups()
    release = tuple(int(x) for x in rel.split("."))
    while len(release) > 1 and release[-1] == 0:
        release = release[:-1]
    pre = (
        (_PRE[pre_l.lower()], int(pre_n or 0))
        if pre_l
        else ((-1, 0) if dev_l and not post_l and post_implicit is None else (3, 0))
    )
    post = int(post_implicit) if post_implicit is not None else (int(post_n or 0) if post_l else -1)
    dev = int(dev_n or 0) if dev_l else float("inf")
    loc = tuple((0, int(p)) if p.isdigit() else (-1, p) for p in re.split(r"[-_.]", local.lower())) if local else ()
    return (int(epoch or 0), release, pre, post, dev, loc)


def is_prerelease(version: str) -> bool:
    k = pep440_key(version)
    return k is not None and (k[2][0] < 3 or k[4] != float("inf"))
