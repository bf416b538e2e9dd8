"""A wheel is checked as installed. The view equals what pypa/installer writes, over generated wheels (.data schemes,
Root-Is-Purelib, executable bits, directories); where installers would disagree or refuse (several members on
one path, another `*.data` directory, `__pycache__`, unknown schemes) the view reports it; shadowing resolves as
pip resolves it (checked against pip itself); case-folding and normalization twins of a released file are drift
in every kind of source."""

from __future__ import annotations

import hashlib
import io
import os
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from vendor_helpers import PREFIX, V2, by_path, make_fork, run_json

installer = pytest.importorskip("installer")  # in the test extras
EXAMPLES = int(os.environ.get("SM120_FUZZ_EXAMPLES", "20"))
DIST = "pkg-1.0"


def _wheel(members: list[tuple[str, bytes, int]], purelib: bool = True, extra_infos: tuple = ()) -> bytes:
    """A wheel of (name, bytes, unix mode) members plus its .dist-info (WHEEL, METADATA, RECORD)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data, mode in members:
            info = zipfile.ZipInfo(name)
            info.external_attr = mode << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
        info_dir = f"{DIST}.dist-info"
        z.writestr(
            f"{info_dir}/WHEEL",
            f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: "
            f"{'true' if purelib else 'false'}\nTag: py3-none-any\n",
        )
        z.writestr(f"{info_dir}/METADATA", "Metadata-Version: 2.1\nName: pkg\nVersion: 1.0\n")
        for d in extra_infos:
            z.writestr(f"{d}/METADATA", "x")
        z.writestr(f"{info_dir}/RECORD", "".join(f"{n},,\n" for n, _, _ in members) + f"{info_dir}/RECORD,,\n")
    return buf.getvalue()


def _installed(whl: Path, tmp: Path) -> dict[str, tuple[str, bool]]:
    """site-packages after pypa/installer: path -> (sha256, executable), RECORD left out (the installer writes
    its own)."""
    from installer import install
    from installer.destinations import SchemeDictionaryDestination
    from installer.sources import WheelFile

    site = tmp / "site"
    schemes = {
        "purelib": str(site),
        "platlib": str(site),
        "headers": str(tmp / "inc"),
        "scripts": str(tmp / "bin"),
        "data": str(tmp / "data"),
    }
    with WheelFile.open(str(whl)) as source:
        install(source, SchemeDictionaryDestination(schemes, sys.executable, "posix"), {})
    out = {}
    for p in site.rglob("*"):
        rel = p.relative_to(site).as_posix()
        if p.is_file() and not rel.endswith(".dist-info/RECORD"):
            out[rel] = (hashlib.sha256(p.read_bytes()).hexdigest(), bool(p.stat().st_mode & stat.S_IXUSR))
    return out


def _view(whl: Path):
    from vendorkit.archive import ArchiveFork

    return ArchiveFork(str(whl), str(whl), wheel=True)


def _seen(view) -> dict[str, tuple[str, bool]]:
    listing, _ = view.list_under("")
    return {
        p: (view.digest_of(f), f.mode == "100755")
        for p, f in listing.items()
        if f.kind == "file" and not p.endswith(".dist-info/RECORD")
    }


LAYER = f"{PREFIX}/common"
TARGETS = [f"{LAYER}/sm120_a.cuh", f"{LAYER}/sm120_b.cuh", "pkg/__init__.py", "pkg/sub/x.py", "pkg/tool.sh"]
PLACES = [
    "",
    f"{DIST}.data/purelib/",
    f"{DIST}.data/platlib/",
    f"{DIST}.data/headers/",
    f"{DIST}.data/data/",
    f"{DIST}.data/scripts/",
]
member = st.tuples(
    st.sampled_from(PLACES),
    st.sampled_from(TARGETS),
    st.binary(max_size=64),
    st.sampled_from([stat.S_IFREG | 0o644, stat.S_IFREG | 0o755, 0o755, 0]),
)


@settings(max_examples=EXAMPLES * 3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(members=st.lists(member, min_size=1, max_size=8), purelib=st.booleans())
def test_the_view_is_what_pypa_installer_installs(tmp_path_factory, members, purelib):
    tmp = tmp_path_factory.mktemp("w")
    whl = tmp / f"{DIST}-py3-none-any.whl"
    rows = [(place + target, data, mode) for place, target, data, mode in members]
    whl.write_bytes(_wheel(rows, purelib))
    view = _view(whl)
    try:
        installed = _installed(whl, tmp)
    except (FileExistsError, installer.exceptions.InstallerError) as e:  # pypa/installer refuses this wheel
        listing, _ = view.list_under("")
        assert (
            any(f.duplicate for f in listing.values())
            or view._unsafe
            or view._disputed
            or any("pypa/installer refuses" in n for n in view.notes)
        ), (rows, e)
        return
    assert _seen(view) == installed, rows
    assert not view._disputed and not any(f.duplicate for f in view.list_under("")[0].values())


def test_a_data_member_shadowing_a_released_header_is_seen_as_pip_installs_it(canon, tmp_path):
    """The root member is the release's; `pkg-1.0.data/purelib/<prefix>/...` overrides it at install time. pip
    writes data members after root ones: its bytes are installed (checked against pip itself), and check_vendor
    reports the installed bytes, not the pristine member, with both members named."""
    rel = "common/sm120_tma.cuh"
    drifted = b"// the override pip installs\n"
    rows = [(f"{PREFIX}/{k}", v, stat.S_IFREG | 0o644) for k, v in V2.items()]
    rows.append((f"{DIST}.data/purelib/{PREFIX}/{rel}", drifted, stat.S_IFREG | 0o644))
    whl = tmp_path / f"{DIST}-py3-none-any.whl"
    whl.write_bytes(_wheel(rows))
    target = tmp_path / "pip-target"
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            "--no-compile",
            "--disable-pip-version-check",
            "--target",
            str(target),
            str(whl),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    assert (target / PREFIX / rel).read_bytes() == drifted  # what pip really installs
    code, doc = run_json("--repo", str(canon), "--fork", str(whl))
    f = by_path(doc)[rel]
    assert code == 1 and f["status"] == "changed" and f["diagnosis"] == "duplicate-member"
    assert f["actual"] == hashlib.sha256(drifted).hexdigest() and f"{DIST}.data/purelib" in f["detail"]


@pytest.mark.parametrize(
    "name, why",
    [
        (f"{DIST}.data/evil/{PREFIX}/common/sm120_tma.cuh", "unknown scheme 'evil'"),
        (f"{DIST}.data/sm120_x.cuh", "not under a scheme directory"),
        (f"other-9.data/purelib/{PREFIX}/common/sm120_tma.cuh", "installers disagree"),
        (f"{PREFIX}/__pycache__/sm120_x.cuh", "__pycache__"),
    ],
)
def test_members_installers_refuse_or_place_differently_are_findings(canon, tmp_path, name, why):
    rows = [(f"{PREFIX}/{k}", v, stat.S_IFREG | 0o644) for k, v in V2.items()]
    rows.append((name, b"// elsewhere\n", stat.S_IFREG | 0o644))
    whl = tmp_path / f"{DIST}-py3-none-any.whl"
    whl.write_bytes(_wheel(rows))
    code, doc = run_json("--repo", str(canon), "--fork", str(whl))
    found = [f for f in doc["files"] if f["status"] == "unsafe" and why in (f["detail"] or "")]
    assert code == 1 and doc["verdict"] == "drifted" and found, doc["files"]


TWINS = ["common/SM120_TMA.cuh", "common/\u017fm120_tma.cuh", "Common/sm120_tma.cuh", "common/sm120_tma.\uff43uh"]


@pytest.mark.parametrize("twin", TWINS)
@pytest.mark.parametrize("kind", ["wheel", "local", "git"])
def test_a_case_or_normalization_twin_of_a_released_file_is_drift(canon, tmp_path, twin, kind):
    """`SM120_TMA.cuh`, a long s, another case of a directory, a fullwidth letter: on a file system that folds
    case or Unicode compatibility (macOS, Windows) each is the released file; so each is drift, everywhere."""
    from vendor_helpers import commit_all, init_repo

    files = dict(V2)
    files[twin] = b"// a twin, replacing or merging with the released file on macOS and Windows\n"
    files["common/sm120_tma_notes.cuh"] = b"// not a twin: another name\n"
    if kind == "wheel":
        target = tmp_path / f"{DIST}-py3-none-any.whl"
        target.write_bytes(_wheel([(f"{PREFIX}/{k}", v, stat.S_IFREG | 0o644) for k, v in files.items()]))
        spec = str(target)
    else:
        fork = make_fork(tmp_path, files)
        spec = str(fork)
        if kind == "git":
            init_repo(fork)
            commit_all(fork, "twins")
            spec = f"git:{fork}@main"
    code, doc = run_json("--repo", str(canon), "--fork", spec, "--prefix", PREFIX)
    got = by_path(doc)
    assert code == 1 and doc["verdict"] == "drifted"
    assert got["common/sm120_tma.cuh"]["diagnosis"] == "case-twin" and twin in got["common/sm120_tma.cuh"]["detail"]
    assert got[twin]["status"] == "extra" and got[twin]["diagnosis"] == "case-twin"
    assert got["common/sm120_tma_notes.cuh"]["diagnosis"] != "case-twin"


def test_a_unicode_path_extra_field_naming_a_released_file_is_drift(canon, tmp_path):
    """Found by the red team: Python 3.12's zipfile (and so pip on 3.12+) names a member by its Info-ZIP Unicode
    Path field, 3.10/3.11's by its header: a harmless `pkg/notes.txt` here is `.../mma/sm120.cuh` there."""
    import struct
    import zlib

    target = f"{PREFIX}/mma/sm120.cuh"
    rows = [(f"{PREFIX}/{k}", v, stat.S_IFREG | 0o644) for k, v in V2.items()]
    buf = io.BytesIO(_wheel(rows))
    with zipfile.ZipFile(buf, "a") as z:
        zi = zipfile.ZipInfo("pkg/notes.txt")
        zi.extra = struct.pack("<HHBL", 0x7075, 5 + len(target), 1, zlib.crc32(b"pkg/notes.txt")) + target.encode()
        z.writestr(zi, b"// the bytes pip on Python 3.12 installs at the released path\n")
    whl = tmp_path / f"{DIST}-py3-none-any.whl"
    whl.write_bytes(buf.getvalue())
    code, doc = run_json("--repo", str(canon), "--fork", str(whl))
    found = [f for f in doc["files"] if f["status"] == "unsafe" and "Unicode Path" in (f["detail"] or "")]
    assert code == 1 and doc["verdict"] == "drifted" and found, doc["files"]


@pytest.mark.parametrize(
    "alias",
    ["mma/sm120.cuh.", "mma/sm120.cuh ", "mma/sm120.cuh::$DATA", "mma/sm120\u200c.cuh"],
    ids=["trailing-dot", "trailing-space", "ntfs-data-stream", "zero-width-non-joiner"],
)
def test_windows_and_hfs_aliases_of_a_released_file_are_drift(canon, tmp_path, alias):
    """Found by the red team: Windows strips trailing dots and spaces and takes `::$DATA` as the file itself; HFS+
    ignores format characters; each is the released file there."""
    rows = [(f"{PREFIX}/{k}", v, stat.S_IFREG | 0o644) for k, v in V2.items()]
    rows.append((f"{PREFIX}/{alias}", b"// replaces the released file on Windows or HFS+\n", stat.S_IFREG | 0o644))
    whl = tmp_path / f"{DIST}-py3-none-any.whl"
    whl.write_bytes(_wheel(rows))
    code, doc = run_json("--repo", str(canon), "--fork", str(whl))
    got = by_path(doc)
    assert code == 1 and got["mma/sm120.cuh"]["diagnosis"] == "case-twin" and got[alias]["diagnosis"] == "case-twin"
