"""Which files of a project pip installs, platform by platform: the files a `pypi:` check must check.

pip does not install "the newest release": on each interpreter and platform it takes the best file it can use.
A release whose only wheels are for another platform (or need a newer glibc or macOS), or whose
`Requires-Python` excludes the interpreter, is skipped there and an older one installed instead. So the check
takes pip's choice in every environment that can choose differently and checks every file of every version
chosen somewhere, naming where. The environments are a common set:
- CPython 3.8 to 3.14, and the free-threaded 3.13t and 3.14t builds;
- glibc Linux x86-64 and aarch64 at glibc 2.17, 2.28, 2.31, 2.35, 2.39; musl Linux x86-64 at musl 1.1 and 1.2;
- macOS arm64 at 11 to 15, x86-64 at 10.15 to 15; Windows amd64 and win32;
and, so that no file escapes by naming a platform or a Python outside it, every one the project's files name:
each (architecture, libc or OS) family and level a wheel tag names (`manylinux_2_41_riscv64`, `macosx_10_9_x86_64`,
`win_arm64`; a tag of no known family stands for a platform that supports exactly it), and every CPython minor a
tag or a `Requires-Python` names, with the minors either side of it (free-threaded from 3.13). Which files a
platform or Python supports changes only at the levels and minors some file names, so these environments see
every choice pip can make on CPython: a version pip installs anywhere is a version checked here. A wheel for an
interpreter not modelled (PyPy's `pp310`, ...) has the newest version among the wheels naming it checked.
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

import functools
import re
from dataclasses import dataclass

from .errors import CannotCheck
from .versions import is_prerelease, pep440_key

PYTHONS = tuple((m, False) for m in range(8, 15)) + ((13, True), (14, True))  # (minor, free-threaded)
GLIBC = ((2, 17), (2, 28), (2, 31), (2, 35), (2, 39))
MUSL = ((1, 1), (1, 2))
MACOS_ARM = ((11, 0), (12, 0), (13, 0), (14, 0), (15, 0))
MACOS_X86 = ((10, 15),) + MACOS_ARM
PLATFORMS = tuple(
    [f"linux-x86_64 glibc{a}.{b}" for a, b in GLIBC]
    + [f"linux-aarch64 glibc{a}.{b}" for a, b in GLIBC]
    + [f"linux-x86_64 musl{a}.{b}" for a, b in MUSL]
    + [f"macos-arm64 {a}.{b}" for a, b in MACOS_ARM]
    + [f"macos-x86_64 {a}.{b}" for a, b in MACOS_X86]
    + ["win-amd64", "win32"]
)
SDIST_EXTENSIONS = (
    ".tar.gz",
    ".tgz",
    ".tar",
    ".zip",
    ".tar.bz2",
    ".tbz",
    ".tar.xz",
    ".txz",
    ".tlz",
    ".tar.lz",
    ".tar.lzma",
)
_WHEEL = re.compile(
    r"(?P<name>[^\s-]+?)-(?P<ver>[^\s-]*?)(?:-(?P<build>\d[^-]*?))?-(?P<py>[^\s-]+?)-(?P<abi>[^\s-]+?)"
    r"-(?P<plat>[^\s-]+?)\.whl"
)
_PY_SUFFIX = re.compile(r"-py([123]\.?[0-9]?)\Z")
_LEGACY_MANYLINUX = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}
_MAC_ARCHES = {
    "arm64": {"arm64", "universal2"},
    "x86_64": {"x86_64", "intel", "fat64", "fat32", "universal2", "universal"},
}
_WINDOWS = {"win-amd64": "win_amd64", "win32": "win32", "win-arm64": "win_arm64"}
MAX_ENVIRONMENTS = 4096  # platforms x Pythons: a page naming thousands of levels is refused, not enumerated
MAX_WORK = 4_000_000  # environments x files compared
MAX_MINOR = 200


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class FileInfo:
    """What pip reads from a file name: the project, the version, and (wheels) the tag triples."""

    project: str
    version: str
    tags: tuple[tuple[str, str, str], ...] | None  # None: an sdist
    py_only: str | None = None  # an sdist's -pyX.Y suffix


def parse_filename(filename: str, project: str, egg: str | None = None, url_path: str = "") -> FileInfo | None:
    """pip's reading of a file name (and of a link's `#egg=` fragment and URL path), or None when pip would not
    take it as a file of `project`."""
    want = canonical(project)
    if filename.endswith(".whl"):
        m = _WHEEL.fullmatch(filename)
        if not m or canonical(m.group("name").replace("_", "-")) != want:
            return None
        tags = tuple(
            (py.lower(), abi.lower(), plat.lower())
            for py in m.group("py").split(".")
            for abi in m.group("abi").split(".")
            for plat in m.group("plat").split(".")
        )
        return FileInfo(want, m.group("ver").replace("_", "-"), tags)
    ext = next((e for e in SDIST_EXTENSIONS if filename.endswith(e)), None)
    if ext is None or (ext == ".zip" and "macosx10" in url_path):
        return None
    stem = egg if egg is not None else filename[: -len(ext)]
    for i, c in enumerate(stem):  # the first '-' whose prefix is the project's name
        if c == "-" and canonical(stem[:i]) == want:
            version = stem[i + 1 :]
            if not version:
                return None
            m = _PY_SUFFIX.search(version)
            if m:
                return FileInfo(want, version[: m.start()], None, m.group(1))
            return FileInfo(want, version, None)
    return None


@functools.lru_cache(maxsize=1 << 16)
def _platform_ok(plat: str, platform: str) -> bool:
    if plat == "any":
        return True
    family, _, level = platform.partition(" ")
    if family in _WINDOWS:
        return plat == _WINDOWS[family]
    if family == "tag":  # a platform of no family we know: it supports exactly its own tag
        return plat == level
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
        if m:  # pip maps manylinux1 / 2010 on x86-64 and i686 only, manylinux2014 on every arch
            return _LEGACY_MANYLINUX[m.group(1)] <= have and (
                arch in ("x86_64", "i686") or m.group(1) == "manylinux2014"
            )
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


@functools.lru_cache(maxsize=1 << 16)
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
        if (
            key is None
            or base != base.strip()
            or (wild and op not in ("==", "!="))
            or ("+" in base and op not in ("==", "!="))
            or (wild and "+" in base)
        ):
            return None
        if op == "~=" and len(_release(base) or ()) < 2:  # "~=3" is invalid: at least two release numbers
            return None
        out.append((op, v))
    return out


@functools.lru_cache(maxsize=1 << 14)
def requires_python_ok(spec: str | None, minor: int) -> bool:
    """Whether some CPython 3.`minor`.x satisfies `spec` (an invalid specifier is ignored, as pip ignores it)."""
    if not spec or not isinstance(spec, str):
        return True
    clauses = _clauses(spec)
    if clauses is None:
        return True
    return any(all(_clause(op, v, (3, minor, micro)) for op, v in clauses) for micro in range(0, 64))


def _minors_named(spec: str | None) -> set[int]:
    """The CPython 3 minors a valid `Requires-Python` names (where its verdict can change)."""
    clauses = _clauses(spec) if isinstance(spec, str) and spec else None
    out = set()
    for _, v in clauses or ():
        rel = _release(v.removesuffix(".*"))
        if rel and rel[0] == 3 and len(rel) > 1:
            out.add(min(rel[1], MAX_MINOR))
    return out


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


def _platform_of(plat: str) -> str | None:
    """The lowest platform (as `PLATFORMS` names them) that supports wheel platform tag `plat`; None for `any`."""
    if plat == "any":
        return None
    for family, tag in _WINDOWS.items():
        if plat == tag:
            return family
    m = re.fullmatch(r"manylinux_(\d+)_(\d+)_(\w+)", plat)
    if m:
        return f"linux-{m.group(3)} glibc{int(m.group(1))}.{int(m.group(2))}"
    m = re.fullmatch(r"(manylinux1|manylinux2010|manylinux2014)_(\w+)", plat)
    if m:
        a, b = _LEGACY_MANYLINUX[m.group(1)]
        return f"linux-{m.group(2)} glibc{a}.{b}"
    m = re.fullmatch(r"musllinux_(\d+)_(\d+)_(\w+)", plat)
    if m:
        return f"linux-{m.group(3)} musl{int(m.group(1))}.{int(m.group(2))}"
    m = re.fullmatch(r"linux_(\w+)", plat)
    if m:
        return f"linux-{m.group(1)} glibc0.0"
    m = re.fullmatch(r"macosx_(\d+)_(\d+)_(\w+)", plat)
    if m:
        major, minor = int(m.group(1)), int(m.group(2))
        level = f"{major}.0" if major >= 11 else f"{major}.{minor}"
        arch = "arm64" if m.group(3) == "arm64" else "x86_64" if m.group(3) in _MAC_ARCHES["x86_64"] else None
        return f"macos-{arch} {level}" if arch else f"tag {plat}"
    return f"tag {plat}"


def environments(infos: list) -> tuple[list[str], list[tuple[int, bool]]]:
    """(platforms, Pythons) to take pip's choice in for these (file, FileInfo) pairs: the common set and every
    level and minor the files name (see the module's docstring)."""
    platforms = dict.fromkeys(PLATFORMS)
    minors = {m for m, _ in PYTHONS}
    for f, i in infos:
        for py, _, plat in i.tags or ():
            p = _platform_of(plat)
            if p is not None:
                family, _, level = p.partition(" ")
                if family.startswith("linux-"):  # a family's common levels too, so `where` can say "2.41+"
                    for a, b in MUSL if level.startswith("musl") else GLIBC:
                        platforms.setdefault(f"{family} {level[:4] if level.startswith('musl') else 'glibc'}{a}.{b}")
                platforms.setdefault(p)
                if p.startswith("macos-x86_64") and plat.endswith("_universal2"):
                    platforms.setdefault(p.replace("x86_64", "arm64"))
            m = re.fullmatch(r"(?:cp|py)3(\d+)", py)
            if m:
                minors.add(min(int(m.group(1)), MAX_MINOR))
        if i.py_only is not None and re.fullmatch(r"3\.?\d+", i.py_only):
            minors.add(min(int(i.py_only.replace(".", "")[1:]), MAX_MINOR))
        minors |= _minors_named(getattr(f, "requires_python", None))
    # a verdict on a minor changes only at a minor some file names: that one and its neighbours represent all
    around = sorted({n for m in minors for n in (m - 1, m, m + 1) if 0 <= n <= MAX_MINOR})
    pythons = [(m, False) for m in around] + [(m, True) for m in around if m >= 13]
    if len(platforms) * len(pythons) > MAX_ENVIRONMENTS:
        raise CannotCheck(
            f"the project's files name {len(platforms):,} platforms and {len(pythons)} Pythons, "
            f"over the {MAX_ENVIRONMENTS:,} environments pip's choice is taken in; not checked"
        )
    return list(platforms), pythons


@dataclass
class Choice:
    """pip's choice: {PEP 440 key of a version it installs somewhere: the environments (`platform|py3.N`, or
    `interpreter|TAG` for an interpreter of no kind modelled here) that install it}, and the environments
    considered (for `where`)."""

    versions: dict[tuple, list[str]]
    platforms: list[str]
    pythons: list[tuple[int, bool]]

    def where(self, key: tuple) -> str:
        return describe(self.versions[key], self.platforms, self.pythons)


def _best(cands: list, pinned: str | None) -> tuple:
    """The version pip takes among candidates: finals before pre-releases (unless a pre-release is pinned or
    nothing else is left), files that are not yanked before yanked ones, the highest."""
    finals = [(f, i) for f, i in cands if not is_prerelease(i.version)]
    pool = finals if finals and not (pinned and is_prerelease(pinned)) else cands
    pool = [(f, i) for f, i in pool if not f.yanked] or pool
    return max(_key(i) for _, i in pool)


def _key(info: FileInfo) -> tuple:
    key = pep440_key(info.version)
    assert key is not None  # choose() keeps only the files whose version PEP 440 accepts
    return key


def choose(files: list, project: str, pinned: str | None) -> Choice:
    """pip's choice among `files` (objects with `.filename`, `.yanked`, `.requires_python`, `.egg`, `.url_path`)
    of `project`, in every environment that can choose differently (see the module's docstring)."""
    parsed = [
        (f, parse_filename(f.filename, project, getattr(f, "egg", None), getattr(f, "url_path", ""))) for f in files
    ]
    infos = [(f, i) for f, i in parsed if i is not None and pep440_key(i.version) is not None]
    if pinned is not None:
        infos = [(f, i) for f, i in infos if pinned_match(i.version, pinned)]
    platforms, pythons = environments(infos)
    if len(platforms) * len(pythons) * len(infos) > MAX_WORK:
        raise CannotCheck(
            f"{len(infos):,} files in {len(platforms) * len(pythons):,} environments: over the "
            f"{MAX_WORK:,} comparisons pip's choice is taken with; not checked"
        )
    chosen: dict[tuple, list[str]] = {}
    for platform in platforms:
        for minor, threaded in pythons:
            cands = [(f, i) for f, i in infos if compatible(i, f.requires_python, minor, threaded, platform)]
            if cands:
                chosen.setdefault(_best(cands, pinned), []).append(f"{platform}|py3.{minor}{'t' if threaded else ''}")
    # Interpreters modelled nowhere here (PyPy's pp310, GraalPy, ...): for each one a wheel names, the version
    # it would take among the wheels naming it, conservatively (its pure wheels are chosen above already).
    others: dict[str, list] = {}
    for f, i in infos:
        for py in dict.fromkeys(py for py, _, _ in i.tags or ()):
            if not re.fullmatch(r"(cp|py)\d*", py):
                others.setdefault(py, []).append((f, i))
    for py, cands in sorted(others.items()):
        chosen.setdefault(_best(cands, pinned), []).append(f"interpreter|{py}")
    return Choice(chosen, platforms, pythons)


def _family(platform: str) -> tuple[str, str]:
    family, _, level = platform.partition(" ")
    if level.startswith("musl"):
        return family.replace("linux-", "linux-musl-"), level[4:]
    return family, level[5:] if level.startswith("glibc") else level


def _level_key(v: str) -> tuple:
    return tuple(int(x) for x in v.split(".")) if re.fullmatch(r"\d+(\.\d+)*", v) else (v,)


def describe(envs: list[str], platforms=PLATFORMS, pythons=PYTHONS) -> str:
    """Where pip installs a version, compactly: 'linux-x86_64 (glibc 2.28+), win32 (py3.11)' style, from a list
    of `platform|py3.N` names; families and Pythons left unqualified are all those of `platforms` / `pythons`."""
    levels: dict[str, set] = {}
    got_py: dict[str, set] = {}
    interpreters = sorted(e.split("|", 1)[1] for e in envs if e.startswith("interpreter|"))
    for e in envs:
        if e.startswith("interpreter|"):
            continue
        plat, py = e.split("|")
        fam, level = _family(plat)
        levels.setdefault(fam, set()).add(level)
        got_py.setdefault(fam, set()).add(py)
    all_levels: dict[str, set] = {}
    for plat in platforms:
        fam, level = _family(plat)
        all_levels.setdefault(fam, set()).add(level)
    all_py = {f"py3.{m}{'t' if t else ''}" for m, t in pythons}

    def pys(got: set) -> str:
        """Runs of the Pythons considered (each stands for every minor up to the next one considered)."""
        out = []
        for threaded in (False, True):
            every = sorted(m for m, t in pythons if t == threaded)
            have = {m for m in every if f"py3.{m}{'t' if threaded else ''}" in got}
            t = "t" if threaded else ""
            i = 0
            while i < len(every):
                if every[i] not in have:
                    i += 1
                    continue
                j = i
                while j + 1 < len(every) and every[j + 1] in have:
                    j += 1
                lo, hi = every[i], every[j]
                out.append(
                    f"3.{lo}{t}+"
                    if j == len(every) - 1 and j > i
                    else f"3.{lo}{t}"
                    if lo == hi
                    else f"3.{lo}{t}-3.{hi}{t}"
                )
                i = j + 1
        return "py" + ", ".join(out)

    parts = []
    for fam in levels:
        lv = levels[fam]
        word = (
            "musl "
            if "musl" in fam
            else "glibc "
            if fam.startswith("linux")
            else "macOS "
            if fam.startswith("macos")
            else ""
        )
        low = min(lv, key=_level_key)
        if fam == "tag":
            where = "platform " + ", ".join(sorted(lv))
        elif lv == all_levels[fam] or lv == {""}:
            where = fam
        elif _upward(lv, all_levels[fam]):
            where = f"{fam} {word}{low}+"
        else:
            where = f"{fam} {word}{', '.join(sorted(lv, key=_level_key))}"
        parts.append((where, "" if got_py[fam] == all_py else pys(got_py[fam])))
    groups: dict[str, list[str]] = {}  # families with the same Pythons are named together
    for where, py in parts:
        groups.setdefault(py, []).append(where)
    out = [", ".join(ws) + (f" ({py})" if py else "") for py, ws in groups.items()]
    out += [f"interpreter {t} (not modelled: its newest)" for t in interpreters]
    return ", ".join(out)


def _upward(got: set, every: set) -> bool:
    """Whether `got` is every level from its lowest on (a wheel needing glibc 2.28 or newer)."""
    low = min(got, key=_level_key)
    return got == {v for v in every if _level_key(v) >= _level_key(low)}
