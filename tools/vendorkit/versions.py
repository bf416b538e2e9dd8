"""Release tags are `vMAJOR.MINOR.PATCH` and compare as integer tuples, never as strings."""
from __future__ import annotations

import re

from .errors import UsageError

_TAG = re.compile(r"^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$")


def parse_tag(tag: str) -> tuple[int, int, int]:
    m = _TAG.match(tag)
    if not m:
        raise UsageError(f"malformed version {tag!r}: expected vMAJOR.MINOR.PATCH, e.g. v0.1.0")
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def is_tag(tag: str) -> bool:
    return bool(_TAG.match(tag))


_LOOSE = re.compile(r"^v?(\d+(?:\.\d+)*)(?:[.-]?(a|b|rc|post|dev)(\d*))?$")
_PHASE = {"dev": 0, "a": 1, "b": 2, "rc": 3, None: 4, "post": 5}


def sort_key(tag: str) -> tuple:
    """An ordering for release tags of any lineage: ours (vX.Y.Z) and upstreams' (`v0.1.4`, `2.8.1`, `1.0rc1`,
    `2.0.post1`). Numbers compare as numbers; a tag of another shape sorts before every version, by its text."""
    m = _LOOSE.match(tag)
    if not m:
        return (0, (), 0, 0, tag)
    nums = tuple(int(x) for x in m.group(1).split("."))
    nums = nums + (0,) * (4 - len(nums)) if len(nums) < 4 else nums
    return (1, nums, _PHASE[m.group(2)], int(m.group(3) or 0), tag)


def is_lineage_tag(tag: str) -> bool:
    """Tags an imported lineage may use: a version (`v0.1.4`, `2.8.1`, `1.0rc1`) and nothing a path could abuse."""
    return bool(_LOOSE.match(tag)) and len(tag) <= 64
