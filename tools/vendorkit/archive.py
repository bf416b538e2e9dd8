"""Wheels and sdists as forks: DeepGEMM builds on PyPI (sgl-deep-gemm) carry the SM120 headers inside the
wheel. `--fork` takes a local .whl / .zip / .tar.gz / .tgz, or `pypi:NAME==VERSION` fetched through the index's
JSON API (sha256 checked). Members are listed from the archive's directory and only the ones the comparison
needs are read; nothing is ever extracted to disk, so `..` names or symlinks cannot reach outside (they are
reported, never followed)."""
from __future__ import annotations

import hashlib
import io
import os
import re
import stat
import tarfile
import zipfile
from typing import Iterator

from .errors import CannotCheck, UsageError
from .forkview import ForkFile

ARCHIVE_SUFFIXES = (".whl", ".zip", ".tar.gz", ".tgz")
_PYPI = re.compile(r"^pypi:([A-Za-z0-9][A-Za-z0-9._-]*)(?:==([A-Za-z0-9.+!_-]+))?$")
DEFAULT_INDEX = "https://pypi.org"


def is_archive_spec(spec: str) -> bool:
    return spec.startswith("pypi:") or spec.lower().endswith(ARCHIVE_SUFFIXES)


def _safe_member(name: str) -> bool:
    if not name or name.startswith("/") or "\\" in name or "\0" in name or re.match(r"^[A-Za-z]:", name):
        return False
    return all(p not in ("..",) for p in name.split("/"))


class ArchiveFork:
    digest_kind = "sha256"

    def __init__(self, data: bytes | str, label: str):
        self.label = label
        self.unsafe: list[str] = []       # member names never read ('..', absolute paths)
        self._files: dict[str, ForkFile] = {}
        self._digests: dict[str, str] = {}
        source = data if isinstance(data, str) else io.BytesIO(data)
        try:
            if zipfile.is_zipfile(source):
                self._zip = zipfile.ZipFile(source)
                self._tar = None
                self._list_zip()
            else:
                if not isinstance(source, str):
                    source.seek(0)
                self._zip = None
                self._tar = tarfile.open(fileobj=source if not isinstance(source, str) else None,
                                         name=source if isinstance(source, str) else None, mode="r:*")
                self._list_tar()
        except (zipfile.BadZipFile, tarfile.TarError, EOFError, OSError) as e:
            raise CannotCheck(f"{label}: not a readable wheel or sdist ({e})") from None

    def _add(self, name: str, f: ForkFile) -> None:
        if not _safe_member(name):
            self.unsafe.append(name)
            return
        self._files[name.rstrip("/")] = f

    def _list_zip(self) -> None:
        for info in self._zip.infolist():
            if info.is_dir():
                continue
            mode = (info.external_attr >> 16) & 0xFFFF
            if stat.S_ISLNK(mode):
                target = self._zip.read(info).decode("utf-8", "replace") if _safe_member(info.filename) else ""
                self._add(info.filename, ForkFile(info.filename, "symlink", "120000", len(target), target,
                                                  escapes=_escapes(info.filename, target)))
            else:
                exe = "100755" if mode & stat.S_IXUSR else "100644"
                self._add(info.filename, ForkFile(info.filename, "file", exe, info.file_size))

    def _list_tar(self) -> None:
        for m in self._tar.getmembers():
            if m.isdir():
                continue
            if m.issym() or m.islnk():
                self._add(m.name, ForkFile(m.name, "symlink", "120000", len(m.linkname), m.linkname,
                                           escapes=_escapes(m.name, m.linkname)))
            elif m.isfile():
                self._add(m.name, ForkFile(m.name, "file", "100755" if m.mode & 0o100 else "100644", m.size))
            else:
                self._add(m.name, ForkFile(m.name, "other", "", 0))

    def list_under(self, prefix: str) -> tuple[dict[str, ForkFile], list[str]]:
        pre = f"{prefix}/" if prefix else ""
        return {p[len(pre):]: f for p, f in self._files.items() if p.startswith(pre)}, []

    def iter_paths(self) -> Iterator[str]:
        return iter(list(self._files))

    def _member_bytes(self, name: str) -> bytes:
        try:
            if self._zip is not None:
                return self._zip.read(name)
            fh = self._tar.extractfile(name)
            return fh.read() if fh is not None else b""
        except (zipfile.BadZipFile, tarfile.TarError, EOFError, OSError, KeyError) as e:
            raise CannotCheck(f"{self.label}: cannot read {name} ({e})") from None

    def digest_of(self, f: ForkFile) -> str:
        if f.path not in self._digests:
            data = os.fsencode(f.target or "") if f.kind == "symlink" else self._member_bytes(f.path)
            self._digests[f.path] = hashlib.sha256(data).hexdigest()
        return self._digests[f.path]

    def read(self, f: ForkFile) -> bytes | None:
        return os.fsencode(f.target or "") if f.kind == "symlink" else self._member_bytes(f.path)

    fetch = read


def _escapes(name: str, target: str) -> bool:
    if target.startswith("/"):
        return True
    depth = len(name.split("/")) - 1
    for part in target.split("/"):
        depth += -1 if part == ".." else (0 if part in ("", ".") else 1)
        if depth < 0:
            return True
    return False


def _pick(files: list[dict]) -> dict:
    """A wheel if the release has one (a platform-independent one first), else the sdist."""
    wheels = [f for f in files if f.get("packagetype") == "bdist_wheel" or f.get("filename", "").endswith(".whl")]
    wheels.sort(key=lambda f: (not f["filename"].endswith("-none-any.whl"), "x86_64" not in f["filename"],
                               f["filename"]))
    sdists = [f for f in files if f.get("filename", "").endswith((".tar.gz", ".zip", ".tgz"))]
    if wheels:
        return wheels[0]
    if sdists:
        return sdists[0]
    raise CannotCheck("the release has no wheel or sdist to check")


def pypi_release(name: str, version: str | None, index_url: str | None, session=None) -> tuple[str, dict, list]:
    """(version, the chosen file's JSON entry, all files) of NAME==VERSION (the latest when version is None)."""
    try:
        import requests
    except ImportError:
        raise UsageError("pypi: forks need requests: python -m pip install requests") from None
    http = session or requests
    base = (index_url or os.environ.get("SM120_PYPI_INDEX") or DEFAULT_INDEX).rstrip("/")
    url = f"{base}/pypi/{name}/{version}/json" if version else f"{base}/pypi/{name}/json"
    try:
        r = http.get(url, timeout=30)
    except requests.RequestException as e:
        raise CannotCheck(f"pypi:{name}: {e}") from None
    if r.status_code == 404:
        raise CannotCheck(f"pypi:{name}{'==' + version if version else ''}: not on the index (404)")
    if r.status_code != 200:
        raise CannotCheck(f"pypi:{name}: the index answered {r.status_code}")
    try:
        doc = r.json()
        files = doc["urls"]
        version = doc["info"]["version"]
    except (ValueError, KeyError, TypeError):
        raise CannotCheck(f"pypi:{name}: the index's JSON is not the PyPI JSON API") from None
    return version, _pick(files), files


def download(entry: dict, label: str, session=None) -> bytes:
    import requests

    http = session or requests
    try:
        r = http.get(entry["url"], timeout=120)
    except requests.RequestException as e:
        raise CannotCheck(f"{label}: download failed ({e})") from None
    if r.status_code != 200:
        raise CannotCheck(f"{label}: download answered {r.status_code}")
    want = (entry.get("digests") or {}).get("sha256")
    if want and hashlib.sha256(r.content).hexdigest() != want:
        raise CannotCheck(f"{label}: the downloaded file does not match the index's sha256 (truncated?)")
    return r.content


def open_archive_fork(spec: str, index_url: str | None = None, session=None) -> ArchiveFork:
    m = _PYPI.match(spec)
    if spec.startswith("pypi:"):
        if not m:
            raise UsageError(f"bad package spec {spec!r}: expected pypi:NAME==VERSION")
        name, version = m.groups()
        version, entry, _ = pypi_release(name, version, index_url, session)
        label = f"pypi:{name}=={version} ({entry['filename']})"
        return ArchiveFork(download(entry, label, session), label)
    if not os.path.isfile(spec):
        raise CannotCheck(f"fork archive {spec} does not exist")
    return ArchiveFork(os.path.abspath(spec), os.path.abspath(spec))

