"""Which files of a project pip installs, platform by platform: the files a `pypi:` check must check.

pip does not install "the newest release": on each interpreter and platform it takes the best file it can use.
A release whose only wheels are for another platform (or need a newer glibc or macOS), or whose
`Requires-Python` excludes the interpreter, is skipped there and an older one installed instead. So the check
takes pip's choice in each of a set of common environments and checks every file of every version chosen
somewhere, naming where:
- CPython 3.8 to 3.14, and the free-threaded 3.13t and 3.14t builds;
- glibc Linux x86-64 and aarch64 at glibc 2.17, 2.28, 2.31, 2.35, 2.39; musl Linux x86-64 at musl 1.1 and 1.2;
- macOS arm64 at 11 to 15, x86-64 at 10.15 to 15; Windows amd64 and win32.
Every micro release counts: a `Requires-Python` that admits 3.12.1 admits "3.12".

pip's rules, as pip 23-25 apply them (pip/_internal/index/package_finder.py, models/wheel.py, packaging.tags):
- a wheel's name, version, build tag and tag triples come from its file name (a `_` in the version is a `-`;
  tags compare lower-cased); it is a candidate where one of its tags is among the interpreter's supported ones:
  `cp3M-{cp3M,abi3,none}-PLAT`, `cp3K-abi3-PLAT` (2 <= K < M), `py3*-none-PLAT`, `cp3M-none-any`,
  `py3*-none-any` (`py3*`: py3M, py3, py3M-1 .. py30); a free-threaded build has `cp3Mt` and no abi3;
- an sdist (.tar.gz, .tgz, .tar, .zip, .tar.bz2, .tbz, .tar.xz, .txz, .tlz, .tar.lz, .tar.lzma; case matters)
  is a candidate everywhere, except a .zip whose URL path holds `macosx10`; its version is what follows the first
  `-` whose prefix is the project's name (of the link's `#egg=` fragment when it has one), less a trailing
  `-pyX.Y` that restricts it to that Python;
- `Requires-Python` must admit the interpreter (an invalid specifier is ignored);
- among candidates: a pinned version keeps that version (a public one also matches its local versions, PEP 440);
  pre-releases only when nothing else is left; files that are not yanked before yanked ones; the highest version.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .versions import is_prerelease, pep440_key

PYTHONS = tuple((m, False) for m in range(8, 15)) + ((13, True), (14, True))  # (minor, free-threaded)
GLIBC = ((2, 17), (2, 28), (2, 31), (2, 35), (2, 39))
MUSL = ((1, 1), (1, 2))
MACOS_ARM = ((11, 0), (12, 0), (13, 0), (14, 0), (15, 0))
MACOS_X86 = ((10, 15),) + MACOS_ARM
PLATFORMS = tuple([f"linux-x86_64 glibc{a}.{b}" for a, b in GLIBC] + [f"linux-aarch64 glibc{a}.{b}" for a, b in GLIBC]
                  + [f"linux-x86_64 musl{a}.{b}" for a, b in MUSL] + [f"macos-arm64 {a}.{b}" for a, b in MACOS_ARM]
                  + [f"macos-x86_64 {a}.{b}" for a, b in MACOS_X86] + ["win-amd64", "win32"])
SDIST_EXTENSIONS = (".tar.gz", ".tgz", ".tar", ".zip", ".tar.bz2", ".tbz", ".tar.xz", ".txz", ".tlz", ".tar.lz",
                    ".tar.lzma")
_WHEEL = re.compile(r"(?P<name>[^\s-]+?)-(?P<ver>[^\s-]*?)(?:-(?P<build>\d[^-]*?))?-(?P<py>[^\s-]+?)-(?P<abi>[^\s-]+?)"
                    r"-(?P<plat>[^\s-]+?)\.whl")
_PY_SUFFIX = re.compile(r"-py([123]\.?[0-9]?)\Z")
_LEGACY_MANYLINUX = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}
_MAC_ARCHES = {"arm64": {"arm64", "universal2"},
               "x86_64": {"x86_64", "intel", "fat64", "fat32", "universal2", "universal"}}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class FileInfo:
    """What pip reads from a file name: the project, the version, and (wheels) the tag triples."""
    project: str
    version: str
    tags: tuple[tuple[str, str, str], ...] | None   # None: an sdist
    py_only: str | None = None                      # an sdist's -pyX.Y suffix


def parse_filename(filename: str, project: str, egg: str | None = None, url_path: str = "") -> FileInfo | None:
    """pip's reading of a file name (and of a link's `#egg=` fragment and URL path), or None when pip would not
    take it as a file of `project`."""
    want = canonical(project)
    if filename.endswith(".whl"):
        m = _WHEEL.fullmatch(filename)
        if not m or canonical(m.group("name").replace("_", "-")) != want:
            return None
        tags = tuple((py.lower(), abi.lower(), plat.lower()) for py in m.group("py").split(".")
                     for abi in m.group("abi").split(".") for plat in m.group("plat").split("."))
        return FileInfo(want, m.group("ver").replace("_", "-"), tags)
    ext = next((e for e in SDIST_EXTENSIONS if filename.endswith(e)), None)
    if ext is None or (ext == ".zip" and "macosx10" in url_path):
        return None
    stem = egg if egg is not None else filename[: -len(ext)]
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


def _platform_ok(plat: str, platform: str) -> bool:
    if plat == "any":
        return True
    family, _, level = platform.partition(" ")
    if family in ("win-amd64", "win32"):
        return plat == ("win_amd64" if family == "win-amd64" else "win32")
    if family.startswith("linux-"):
        arch = family.split("-", 1)[1]
        if level.startswith("musl"):
            have = tuple(int(x) for x in level[4:].split("."))
            m = re.fullmatch(r"musllinux_(\d+)_(\d+)_" + re.escape(arch), plat)
            return plat == f"linux_{arch}" or bool(m and (int(m.group(1)), int(m.group(2))) <= have)
        have = tuple(int(x) for x in level[5:].split("."))
        if plat == f"linux_{arch}":
            return True
        m = re.fullmatch(r"(manylinux1|manylinux2010|manylinux2014)_" + re.escape(arch), plat)
        if m:
            return _LEGACY_MANYLINUX[m.group(1)] <= have and not (arch == "aarch64" and m.group(1) != "manylinux2014")
        m = re.fullmatch(r"manylinux_(\d+)_(\d+)_" + re.escape(arch), plat)
        return bool(m and (int(m.group(1)), int(m.group(2))) <= have)
    if family.startswith("macos-"):
        arch = family.split("-", 1)[1]
        have = tuple(int(x) for x in level.split("."))
        m = re.fullmatch(r"macosx_(\d+)_(\d+)_(\w+)", plat)
        if not m or m.group(3) not in _MAC_ARCHES[arch]:
            return False
        need = (int(m.group(1)), int(m.group(2)))
        return need <= have if need[0] < 11 else (need[0], 0) <= have  # from 11 on, minor releases all match
    return False


def _tag_ok(py: str, abi: str, plat: str, minor: int, threaded: bool, platform: str) -> bool:
    """Whether (py, abi, plat) is among the tags pip supports on CPython 3.`minor` (free-threaded or not)."""
    if not _platform_ok(plat, platform):
        return False
    m = re.fullmatch(r"(cp|py)3(\d*)", py)
    if not m:
        return False
    kind, k = m.group(1), int(m.group(2)) if m.group(2) else None
    own = f"cp3{minor}" + ("t" if threaded else "")
    if kind == "py":
        return abi == "none" and (k is None or k <= minor)
    if plat == "any":
        return k == minor and abi == "none"
    if k == minor:
        return abi in (own, "none") or (abi == "abi3" and not threaded)
    return abi == "abi3" and not threaded and k is not None and 2 <= k < minor


def compatible(info: FileInfo, requires_python: str | None, minor: int, threaded: bool, platform: str) -> bool:
    """Whether pip on CPython 3.`minor`, `platform`, takes this file as a candidate."""
    if info.tags is not None and not any(_tag_ok(*t, minor, threaded, platform) for t in info.tags):
        return False
    if info.py_only is not None and info.py_only.replace(".", "") != f"3{minor}":
        return False
    return requires_python_ok(requires_python, minor)


# ---------------------------------------------------------------- Requires-Python (PEP 440 specifiers)

_OP = re.compile(r"(~=|===|==|!=|<=|>=|<|>)\s*(\S+)")


def _clauses(spec: str) -> list[tuple[str, str]] | None:
    """The clauses of a specifier set as packaging reads one (empty items dropped), or None when it is invalid."""
    out = []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        m = _OP.fullmatch(part)
        if not m:
            return None
        op, v = m.groups()
        if op == "===":
            out.append((op, v))
            continue
        wild = v.endswith(".*")
        base = v[:-2] if wild else v
        key = pep440_key(base)
        if key is None or base != base.strip() or (wild and op not in ("==", "!=")) or (
                "+" in base and op not in ("==", "!=")) or (wild and "+" in base):
            return None
        if op == "~=" and len(_release(base) or ()) < 2:  # "~=3" is invalid: at least two release numbers
            return None
        out.append((op, v))
    return out


def requires_python_ok(spec: str | None, minor: int) -> bool:
    """Whether some CPython 3.`minor`.x satisfies `spec` (an invalid specifier is ignored, as pip ignores it)."""
    if not spec or not isinstance(spec, str):
        return True
    clauses = _clauses(spec)
    if clauses is None:
        return True
    return any(all(_clause(op, v, (3, minor, micro)) for op, v in clauses) for micro in range(0, 64))


def _release(v: str) -> tuple[int, ...] | None:
    """The release numbers as written (`3.0` is (3, 0): `~=` needs them unnormalized)."""
    m = re.match(r"\s*v?(?:\d+!)?(\d+(?:\.\d+)*)", v)
    return tuple(int(x) for x in m.group(1).split(".")) if m else None


def _clause(op: str, value: str, py: tuple[int, int, int]) -> bool:
    if op == "===":
        return value == ".".join(map(str, py))
    if value.endswith(".*"):
        rel = _release(value[:-2]) or ()
        hit = (py + (0,) * max(0, len(rel) - 3))[: len(rel)] == rel
        return hit if op == "==" else not hit
    rel = _release(value) or (0,)
    n = max(len(rel), 3)
    a, b = py + (0,) * (n - 3), rel + (0,) * (n - len(rel))
    if op == "~=":
        return a >= b and a[: len(rel) - 1] == rel[:-1]
    return {"==": a == b, "!=": a != b, "<=": a <= b, ">=": a >= b, "<": a < b, ">": a > b}[op]


# ---------------------------------------------------------------- pip's choice

def pinned_match(version: str, pinned: str) -> bool:
    """PEP 440 `==pinned`: a public version also matches the same version with any local label."""
    a, b = pep440_key(version), pep440_key(pinned)
    if a is None or b is None:
        return False
    return a == b or ("+" not in pinned and a[:5] == b[:5])


def choose(files: list, project: str, pinned: str | None) -> dict[tuple, list[str]]:
    """{PEP 440 key of a version pip installs somewhere: the environments that install it}. `files` have
    `.filename`, `.yanked`, `.requires_python`, `.egg`, `.url`."""
    infos = [(f, parse_filename(f.filename, project, getattr(f, "egg", None), getattr(f, "url_path", "")))
             for f in files]
    infos = [(f, i) for f, i in infos if i is not None and pep440_key(i.version) is not None]
    if pinned is not None:
        infos = [(f, i) for f, i in infos if pinned_match(i.version, pinned)]
    chosen: dict[tuple, list[str]] = {}
    for platform in PLATFORMS:
        for minor, threaded in PYTHONS:
            cands = [(f, i) for f, i in infos if compatible(i, f.requires_python, minor, threaded, platform)]
            if not cands:
                continue
            finals = [(f, i) for f, i in cands if not is_prerelease(i.version)]
            pool = finals if finals and not (pinned and is_prerelease(pinned)) else cands
            live = [(f, i) for f, i in pool if not f.yanked]
            pool = live or pool
            best = max(pep440_key(i.version) for _, i in pool)
            chosen.setdefault(best, []).append(f"{platform}|py3.{minor}{'t' if threaded else ''}")
    return chosen


def _family(platform: str) -> tuple[str, str]:
    family, _, level = platform.partition(" ")
    if level.startswith("musl"):
        return family.replace("linux-", "linux-musl-"), level[4:]
    return family, level[5:] if level.startswith("glibc") else level


def describe(envs: list[str]) -> str:
    """Where pip installs a version, compactly: 'linux-x86_64 (glibc 2.28+), win32 (py3.11)' style, from a list
    of `platform|py3.N` names; families and Pythons left unqualified are all of them."""
    levels: dict[str, set] = {}
    pythons: dict[str, set] = {}
    for e in envs:
        plat, py = e.split("|")
        fam, level = _family(plat)
        levels.setdefault(fam, set()).add(level)
        pythons.setdefault(fam, set()).add(py)
    all_levels: dict[str, set] = {}
    for plat in PLATFORMS:
        fam, level = _family(plat)
        all_levels.setdefault(fam, set()).add(level)
    all_py = {f"py3.{m}{'t' if t else ''}" for m, t in PYTHONS}

    def pys(got: set) -> str:
        plain = sorted(int(p[4:]) for p in got if not p.endswith("t"))
        span = (f"py3.{plain[0]}" + (f"-3.{plain[-1]}" if plain[-1] != plain[0] else "")) if plain else ""
        return ", ".join([x for x in [span] if x] + sorted(p[2:] for p in got if p.endswith("t")))

    parts = []
    for fam in levels:
        lv = levels[fam]
        word = "musl " if "musl" in fam else "glibc " if fam.startswith("linux") else "macOS " \
            if fam.startswith("macos") else ""
        low = min(lv, key=lambda v: tuple(int(x) for x in v.split(".")) if v else ())
        where = fam if lv == all_levels[fam] or lv == {""} else f"{fam} {word}{low}+" if _upward(
            lv, all_levels[fam]) else f"{fam} {word}{', '.join(sorted(lv))}"
        parts.append(where if pythons[fam] == all_py else f"{where} ({pys(pythons[fam])})")
    return ", ".join(parts)


def _upward(got: set, every: set) -> bool:
    """Whether `got` is every level from its lowest on (a wheel needing glibc 2.28 or newer)."""
    key = (lambda v: tuple(int(x) for x in v.split(".")))
    low = min(got, key=key)
    return got == {v for v in every if key(v) >= key(low)}
