"""Which files of a project pip installs, platform by platform: the files a `pypi:` check must check.

pip does not install "the newest release": on each interpreter and platform it takes the best file it can use.
A release whose only wheels are for another platform, or whose `Requires-Python` excludes the interpreter,
is skipped there and an older one installed instead. So the check takes pip's choice for each of a set of
common environments (CPython 3.8 to 3.14 on glibc Linux x86-64 and aarch64, musl Linux x86-64, macOS arm64 and
x86-64, Windows amd64 and win32) and checks every file of every version chosen somewhere, naming where.

pip's rules, as pip 23-25 apply them (pip/_internal/index/package_finder.py, models/wheel.py):
- a wheel's name, version, build tag and tag triples come from its file name (a `_` in the version is a `-`);
  it is a candidate where one of its tags is supported (interpreter, ABI, platform, below);
- an sdist (.tar.gz, .tgz, .tar, .zip, .tar.bz2, .tbz, .tar.xz, .txz, .tlz, .tar.lz, .tar.lzma) is a
  candidate everywhere; its version is what follows the first `-` whose prefix is the project's name, less a
  trailing `-pyX.Y` that restricts it to that Python;
- `Requires-Python` must admit the interpreter (an invalid specifier is ignored);
- among candidates: a pinned version keeps only that version; pre-releases only when nothing else is left;
  files that are not yanked are preferred to yanked ones; then the highest version.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .versions import is_prerelease, pep440_key

PYTHONS = tuple(range(8, 15))  # CPython 3.8 .. 3.14
PLATFORMS = ("linux-x86_64", "linux-aarch64", "linux-musl-x86_64", "macos-arm64", "macos-x86_64", "win-amd64",
             "win32")
SDIST_EXTENSIONS = (".tar.gz", ".tgz", ".tar", ".zip", ".tar.bz2", ".tbz", ".tar.xz", ".txz", ".tlz", ".tar.lz",
                    ".tar.lzma")
_WHEEL = re.compile(r"(?P<name>[^\s-]+?)-(?P<ver>[^\s-]*?)(?:-(?P<build>\d[^-]*?))?-(?P<py>[^\s-]+?)-(?P<abi>[^\s-]+?)"
                    r"-(?P<plat>[^\s-]+?)\.whl")
_PY_SUFFIX = re.compile(r"-py([123]\.?[0-9]?)\Z")
_PLATFORM_TAGS = {
    "linux-x86_64": re.compile(r"linux_x86_64|manylinux(?:1|2010|2014|_\d+_\d+)_x86_64"),
    "linux-aarch64": re.compile(r"linux_aarch64|manylinux(?:2014|_\d+_\d+)_aarch64"),
    "linux-musl-x86_64": re.compile(r"linux_x86_64|musllinux_\d+_\d+_x86_64"),
    "macos-arm64": re.compile(r"macosx_\d+_\d+_(?:arm64|universal2)"),
    "macos-x86_64": re.compile(r"macosx_\d+_\d+_(?:x86_64|intel|universal|universal2|fat64|fat3)"),
    "win-amd64": re.compile(r"win_amd64"),
    "win32": re.compile(r"win32"),
}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class FileInfo:
    """What pip reads from a file name: the project, the version, and (wheels) the tag triples."""
    project: str
    version: str
    tags: tuple[tuple[str, str, str], ...] | None   # None: an sdist
    py_only: str | None = None                      # an sdist's -pyX.Y suffix


def parse_filename(filename: str, project: str) -> FileInfo | None:
    """pip's reading of a file name, or None when pip would not take it as a file of `project`."""
    want = canonical(project)
    if filename.endswith(".whl"):
        m = _WHEEL.fullmatch(filename)
        if not m or canonical(m.group("name").replace("_", "-")) != want:
            return None
        tags = tuple((py, abi, plat) for py in m.group("py").split(".") for abi in m.group("abi").split(".")
                     for plat in m.group("plat").split("."))
        return FileInfo(want, m.group("ver").replace("_", "-"), tags)
    ext = next((e for e in SDIST_EXTENSIONS if filename.lower().endswith(e)), None)
    if ext is None:
        return None
    stem = filename[: -len(ext)]
    for i, c in enumerate(stem):  # the first '-' whose prefix is the project's name
        if c == "-" and canonical(stem[:i]) == want:
            version = stem[i + 1:]
            if not version:
                return None
            m = _PY_SUFFIX.search(version)
            if m:
                return FileInfo(want, version[: m.start()], None, m.group(1))
            return FileInfo(want, version, None)
    return None


def _tag_ok(py: str, abi: str, plat: str, minor: int, platform: str) -> bool:
    if plat != "any" and not _PLATFORM_TAGS[platform].fullmatch(plat):
        return False
    m = re.fullmatch(r"(cp|py)3(\d*)", py)
    if not m:
        return False
    kind, k = m.group(1), int(m.group(2)) if m.group(2) else None
    if kind == "py":
        return abi == "none" and (k is None or k <= minor)
    if k == minor:
        return abi in (f"cp3{minor}", "abi3", "none")
    return abi == "abi3" and k is not None and 2 <= k < minor


def compatible(info: FileInfo, requires_python: str | None, minor: int, platform: str) -> bool:
    """Whether pip on CPython 3.`minor`, `platform`, takes this file as a candidate."""
    if info.tags is not None and not any(_tag_ok(*t, minor, platform) for t in info.tags):
        return False
    if info.py_only is not None and info.py_only.replace(".", "") != f"3{minor}":
        return False
    return requires_python_ok(requires_python, minor)


# ---------------------------------------------------------------- Requires-Python

_SPEC = re.compile(r"\s*(~=|===|==|!=|<=|>=|<|>)\s*([^\s,;]+)\s*")


def requires_python_ok(spec: str | None, minor: int) -> bool:
    """Whether some CPython 3.`minor`.x satisfies `spec` (a specifier pip cannot read is ignored, as pip does)."""
    if not spec or not isinstance(spec, str):
        return True
    clauses = []
    for part in spec.split(","):
        m = _SPEC.fullmatch(part)
        if not m:
            return True  # InvalidSpecifier: pip ignores the file's Requires-Python
        clauses.append((m.group(1), m.group(2)))
    return any(all(_clause(op, v, (3, minor, micro)) for op, v in clauses) for micro in (0, 99))


def _release(v: str) -> tuple[int, ...] | None:
    k = pep440_key(v)
    return None if k is None else k[1]


def _clause(op: str, value: str, py: tuple[int, int, int]) -> bool:
    if op == "===":
        return value == ".".join(map(str, py))
    if value.endswith(".*") and op in ("==", "!="):
        rel = _release(value[:-2])
        if rel is None:
            return True
        hit = (py + (0,) * max(0, len(rel) - 3))[: len(rel)] == rel
        return hit if op == "==" else not hit
    rel = _release(value)
    if rel is None:
        return True
    n = max(len(rel), 3)
    a, b = py + (0,) * (n - 3), rel + (0,) * (n - len(rel))
    if op == "~=":
        return len(rel) >= 2 and a >= b and a[: len(rel) - 1] == rel[:-1]
    return {"==": a == b, "!=": a != b, "<=": a <= b, ">=": a >= b, "<": a < b, ">": a > b}[op]


# ---------------------------------------------------------------- pip's choice

def choose(files: list, project: str, pinned: str | None) -> dict[tuple, list[str]]:
    """{PEP 440 key of a version pip installs somewhere: the environments that install it}. `files` have
    `.filename`, `.yanked`, `.requires_python`."""
    want = pep440_key(pinned) if pinned is not None else None
    infos = [(f, parse_filename(f.filename, project)) for f in files]
    infos = [(f, i) for f, i in infos if i is not None and pep440_key(i.version) is not None]
    if want is not None:
        infos = [(f, i) for f, i in infos if pep440_key(i.version) == want]
    chosen: dict[tuple, list[str]] = {}
    for platform in PLATFORMS:
        for minor in PYTHONS:
            cands = [(f, i) for f, i in infos if compatible(i, f.requires_python, minor, platform)]
            if not cands:
                continue
            finals = [(f, i) for f, i in cands if not is_prerelease(i.version)]
            pool = finals if finals and not (pinned and is_prerelease(pinned)) else cands
            live = [(f, i) for f, i in pool if not f.yanked]
            pool = live or pool
            best = max(pep440_key(i.version) for _, i in pool)
            chosen.setdefault(best, []).append(f"{platform} py3.{minor}")
    return chosen


def describe(envs: list[str]) -> str:
    """'linux-x86_64 py3.8-3.14, win32 py3.8-3.9' for a list of `platform py3.N` names."""
    by: dict[str, list[int]] = {}
    for e in envs:
        plat, py = e.split(" ")
        by.setdefault(plat, []).append(int(py.split(".")[1]))
    out = []
    for plat, minors in by.items():
        lo, hi = min(minors), max(minors)
        out.append(f"{plat} py3.{lo}" + (f"-3.{hi}" if hi != lo else ""))
    return ", ".join(out)
