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
