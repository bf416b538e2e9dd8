"""Where a wheel installer puts each member of a wheel: the tree check_vendor compares is the installed one.

pip's rules (pip/_internal/operations/install/wheel.py; pypa/installer agrees except where noted):
- a member whose first component ends in `.data` is a data member: after normpath its second component names a
  scheme; `purelib` and `platlib` land in site-packages (the same directory in a virtual environment and on
  Debian-style layouts), `headers`, `scripts` and `data` elsewhere; any other scheme, or a data member without
  one, makes pip refuse the wheel. pypa/installer takes only `{name}-{version}.data` as the data directory: a
  member of another `*.data` directory is installed by it at its literal path, by pip through the scheme;
- every other member lands in site-packages at its normpath'd name; a name that leaves site-packages makes pip
  refuse the wheel;
- members are written root ones first, then data ones, each in the archive's order, and a later write replaces
  an earlier one (pip); pypa/installer refuses to overwrite: several members landing on one path are a finding;
- pypa/installer skips members inside a `__pycache__` directory, pip installs them.
Members where the two installers disagree are findings when they land under the vendor root. The layout
assumes purelib and platlib are one directory; where a platform splits them (lib vs lib64), a package spread
over both is imported from whichever comes first on sys.path.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field

SITE_SCHEMES = ("purelib", "platlib")
OTHER_SCHEMES = ("headers", "scripts", "data")


def install_path(name: str) -> tuple[str | None, str | None]:
    """(where an installer puts member `name`, relative to the package root; None) or (None, why it is unsafe)."""
    if "\0" in name:
        return None, "its name holds a NUL byte"
    if "\\" in name:
        return None, "its name holds a backslash, a directory separator on Windows (it would land elsewhere there)"
    if name.startswith("/"):
        return None, "its name is absolute: it would be written outside the package"
    if re.match(r"[A-Za-z]:", name):
        return None, "its name starts with a drive letter: on Windows it would be written outside the package"
    norm = posixpath.normpath(name)
    if norm == ".." or norm.startswith("../"):
        return (
            None,
            "its name climbs out of the package with '..': pip refuses the package, other tools write outside it",
        )
    return (None, None) if norm in (".", "") else (norm, None)


@dataclass
class Layout:
    site: dict[str, list[str]] = field(default_factory=dict)  # site-packages path -> members written there, in order
    elsewhere: list[tuple[str, str, str]] = field(default_factory=list)  # (member, scheme, path in the scheme)
    refused: list[tuple[str, str]] = field(default_factory=list)  # (member, why pip refuses the wheel)
    disputed: list[tuple[str, str, str]] = field(default_factory=list)  # (member, where pip puts it, why)
    notes: list[str] = field(default_factory=list)


def _data_target(name: str) -> tuple[str, str] | str:
    """(scheme, path in it) of a data member, or why pip refuses it."""
    norm = posixpath.normpath(name)
    parts = norm.split("/", 2)
    if len(parts) < 3:
        return "a .data member not under a scheme directory (.data/<scheme>/<path>): pip refuses the wheel"
    _, scheme, sub = parts
    if scheme not in SITE_SCHEMES + OTHER_SCHEMES:
        return f"a .data member under an unknown scheme {scheme!r}: pip refuses the wheel"
    path, unsafe = install_path(sub)
    if unsafe or path is None:
        return unsafe or "an empty path"
    return scheme, path


def lay_out(names: list[str]) -> Layout:
    """The installed layout of a wheel with these member names (in archive order)."""
    out = Layout()
    tops = {n.split("/", 1)[0] for n in names}
    infos = sorted(t for t in tops if t.endswith(".dist-info"))
    own_data = infos[0][: -len(".dist-info")] + ".data" if len(infos) == 1 else None
    if len(infos) != 1:
        out.notes.append(
            f"pip refuses this wheel ({len(infos)} .dist-info directories, one expected); its members "
            f"are checked where pip would put them"
        )
    root: list[str] = []
    data: list[str] = []
    for n in names:
        if n.endswith("/"):
            continue  # a directory entry: nothing is written
        (data if n.split("/", 1)[0].endswith(".data") else root).append(n)
    scripts = [n for n in data if len(n.split("/", 2)) > 2 and n.split("/", 2)[1] == "scripts"]
    order = root + [n for n in data if n not in set(scripts)] + scripts
    for n in order:
        first = n.split("/", 1)[0]
        path: str | None
        if first.endswith(".data"):
            target = _data_target(n)
            if isinstance(target, str):  # why pip refuses it
                out.refused.append((n, target))
                continue
            scheme, path = target
            if scheme not in SITE_SCHEMES:
                if any(e[1:] == (scheme, path) for e in out.elsewhere):
                    out.notes.append(
                        f"pypa/installer refuses this wheel: several members install to {path} in "
                        f"the {scheme} scheme (pip keeps the last; outside site-packages, not checked)"
                    )
                out.elsewhere.append((n, scheme, path))
                continue
            if own_data is not None and first != own_data:
                out.disputed.append(
                    (
                        n,
                        path,
                        f"installers disagree: pip installs it at {path} ({first} taken as a "
                        f"data directory), pypa/installer at {n} (the wheel's data "
                        f"directory is {own_data})",
                    )
                )
        else:
            path, why = install_path(n)
            if why:
                out.refused.append((n, why))
                continue
            if path is None:
                continue
        if "__pycache__" in path.split("/")[:-1]:
            out.disputed.append(
                (
                    n,
                    path,
                    "installers disagree: pip installs a member of a __pycache__ directory, pypa/installer skips it",
                )
            )
        out.site.setdefault(path, []).append(n)
    return out
