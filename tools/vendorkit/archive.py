"""Wheels and sdists as forks: DeepGEMM builds on PyPI (sgl-deep-gemm) carry the SM120 headers inside the
package. `--fork` takes a local .whl / .zip / .tar.gz / .tgz, or `pypi:NAME==VERSION` fetched through the index's
Simple API (vendorkit.pypi: range-read in place, or streamed to a temporary file and sha256-checked).

Members are read as an installer would place them: each name is normalized the way pip resolves it
(`a/b/../c` lands at `a/c`) and checked at that path; a name that leaves the package (`..` above the root, an
absolute or drive-letter name, a backslash, a NUL) is an `unsafe-member` finding, as are several members that
install to one path. Nothing is extracted; link members are reported (`symlink`, `hardlink`), never followed.
Zip members are streamed on demand; a tar is read once, front to back, hashing members as they pass. Sizes and
compression ratios are capped (vendorkit.limits): a member over a cap is a `too-large` finding, never read.
"""
from __future__ import annotations

import hashlib
import os
import posixpath
import re
import stat
import tarfile
import zipfile
from typing import BinaryIO, Iterator

from .errors import CannotCheck, UsageError
from .forkview import ForkFile, link_escapes
from .limits import (ARCHIVE_MAX_BYTES, DIAGNOSE_MAX_BYTES, MEMBER_MAX_BYTES, MEMBER_MAX_RATIO,
                     RATIO_FLOOR_BYTES)
from .manifest import is_our_name

ARCHIVE_SUFFIXES = (".whl", ".zip", ".tar.gz", ".tgz")
_PYPI = re.compile(r"^pypi:([A-Za-z0-9][A-Za-z0-9._-]*)(?:==([A-Za-z0-9.+!_-]+))?$")
_KEEP_BYTES = 64 << 20  # tar: small members kept for diagnosis, in total


def is_archive_spec(spec: str) -> bool:
    return spec.startswith("pypi:") or spec.lower().endswith(ARCHIVE_SUFFIXES)


def install_path(name: str) -> tuple[str | None, str | None]:
    """(where an installer puts member `name`, relative to the package root; None) or (None, why it is unsafe)."""
    if "\0" in name:
        return None, "its name holds a NUL byte"
    if "\\" in name:
        return None, "its name holds a backslash, a directory separator on Windows (it would land elsewhere there)"
    if name.startswith("/"):
        return None, "its name is absolute: it would be written outside the package"
    if re.match(r"^[A-Za-z]:", name):
        return None, "its name starts with a drive letter: on Windows it would be written outside the package"
    norm = posixpath.normpath(name)
    if norm == ".." or norm.startswith("../"):
        return None, "its name climbs out of the package with '..': pip refuses the package, other tools write " \
                     "outside it"
    return (None, None) if norm in (".", "") else (norm, None)


def _interesting(path: str) -> bool:
    """Members whose bytes a diagnosis may need: device-layer-named files and the stamp / verifier."""
    return is_our_name(path) or path.rsplit("/", 1)[-1] in (".sm120-vendor.json", ".sm120-vendor-verify.py")


class ArchiveFork:
    digest_kind = "sha256"

    def __init__(self, source: str | BinaryIO, label: str):
        self.label = label
        self.notes: list[str] = []
        self._unsafe: list[tuple[str, str]] = []     # (raw member name, why)
        self._files: dict[str, ForkFile] = {}
        self._members: dict[str, object] = {}        # path -> ZipInfo (zip only)
        self._digests: dict[str, str] = {}
        self._bytes: dict[str, bytes] = {}           # tar: small interesting members
        self._read_total = 0
        self._zip = None
        try:
            if zipfile.is_zipfile(source):
                self._zip = zipfile.ZipFile(source)
                self._list_zip()
            else:
                if hasattr(source, "seek"):
                    source.seek(0)
                self._read_tar(source)
        except (zipfile.BadZipFile, zipfile.LargeZipFile, tarfile.TarError, EOFError, OSError, ValueError,
                NotImplementedError) as e:
            raise CannotCheck(f"{label}: not a readable wheel or sdist ({type(e).__name__}: {e})") from None

    # ------------------------------------------------------------ listing
    def _add(self, raw: str, f: ForkFile) -> str | None:
        path, unsafe = install_path(raw)
        if unsafe:
            self._unsafe.append((raw, unsafe))
            return None
        if path is None:
            return None
        if path != raw.rstrip("/"):
            self.notes.append(f"member {raw!r} installs as {path} (its name is normalized; checked there)")
        f.path = path
        old = self._files.get(path)
        if old is not None:
            count = int((old.duplicate or "1 ").split()[0]) + 1
            f.duplicate = f"{count} members install to this path (an installer keeps the last one; checked: the last)"
        self._files[path] = f
        return path

    def _size_cap(self, size: int, compressed: int | None) -> str | None:
        if size > MEMBER_MAX_BYTES:
            return f"a member of {size:,} bytes, over the {MEMBER_MAX_BYTES >> 20} MiB member cap (not read)"
        if compressed is not None and size > RATIO_FLOOR_BYTES and size > MEMBER_MAX_RATIO * max(compressed, 1):
            return (f"a member of {size:,} bytes compressed {size // max(compressed, 1):,}:1, over the "
                    f"{MEMBER_MAX_RATIO}:1 ratio cap (not read)")
        return None

    def _list_zip(self) -> None:
        for info in self._zip.infolist():
            if info.is_dir():
                continue
            mode = (info.external_attr >> 16) & 0xFFFF
            cap = self._size_cap(info.file_size, info.compress_size)
            if stat.S_ISLNK(mode):
                target = "" if cap or info.file_size > 4096 else self._zip_read(info).decode("utf-8", "replace")
                f = ForkFile(info.filename, "symlink", "120000", len(target), target,
                             escapes=link_escapes(info.filename, target))
            else:
                exe = "100755" if mode & stat.S_IXUSR else "100644"
                f = ForkFile(info.filename, "file", exe, info.file_size, too_large=cap)
            path = self._add(info.filename, f)
            if path is not None:
                self._members[path] = info

    def _zip_read(self, info, limit: int | None = None) -> bytes:
        with self._zip.open(info) as fh:
            data = fh.read(limit + 1 if limit is not None else -1)
        self._count(len(data))
        return data

    def _count(self, n: int) -> None:
        self._read_total += n
        if self._read_total > ARCHIVE_MAX_BYTES:
            raise CannotCheck(f"{self.label}: more than {ARCHIVE_MAX_BYTES >> 20} MiB decompressed; not checked "
                              f"further")

    def _read_tar(self, source) -> None:
        """One pass: list every member, hash the regular ones under the caps, keep small interesting ones."""
        kwargs = {"fileobj": source} if hasattr(source, "read") else {"name": source}
        kept = 0
        with tarfile.open(mode="r|*", **kwargs) as tar:
            for m in tar:
                if m.offset_data + max(m.size, 0) > ARCHIVE_MAX_BYTES:
                    raise CannotCheck(f"{self.label}: the tar stream runs past {ARCHIVE_MAX_BYTES >> 20} MiB "
                                      f"uncompressed; not checked")
                if m.isdir():
                    continue
                if m.issym() or m.islnk():
                    kind = "symlink" if m.issym() else "hardlink"
                    f = ForkFile(m.name, kind, "120000" if m.issym() else "", len(m.linkname), m.linkname,
                                 escapes=link_escapes(m.name, m.linkname) if m.issym() else False)
                elif m.isfile():
                    f = ForkFile(m.name, "file", "100755" if m.mode & 0o100 else "100644", m.size,
                                 too_large=self._size_cap(m.size, None))
                else:
                    f = ForkFile(m.name, "other", "", 0)
                path = self._add(m.name, f)
                if path is None or f.kind != "file" or f.too_large:
                    continue
                fh = tar.extractfile(m)
                h, keep = hashlib.sha256(), _interesting(path) and m.size <= DIAGNOSE_MAX_BYTES and \
                    kept + m.size <= _KEEP_BYTES
                chunks = []
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    h.update(chunk)
                    if keep:
                        chunks.append(chunk)
                self._digests[path] = h.hexdigest()
                if keep:
                    self._bytes[path] = b"".join(chunks)
                    kept += m.size

    def findings(self, prefix: str) -> list:
        """unsafe-member findings (anywhere in the package: an installer would act on them)."""
        from .compare import FileResult

        return [FileResult(raw, "unsafe", diagnosis="unsafe-member", detail=why, fork_path=raw)
                for raw, why in self._unsafe]

    def list_under(self, prefix: str) -> tuple[dict[str, ForkFile], dict[str, str]]:
        pre = f"{prefix}/" if prefix else ""
        return {p[len(pre):]: f for p, f in self._files.items() if p.startswith(pre)}, {}

    def iter_paths(self) -> Iterator[str]:
        return iter(list(self._files))

    # ------------------------------------------------------------ contents
    def _open_member(self, f: ForkFile):
        """A stream of a zip member's bytes (never beyond its declared size: zipfile stops there)."""
        try:
            return self._zip.open(self._members[f.path])
        except (zipfile.BadZipFile, OSError, KeyError, NotImplementedError) as e:
            raise CannotCheck(f"{self.label}: cannot read {f.path} ({e})") from None

    def digest_of(self, f: ForkFile) -> str:
        if f.kind == "symlink":
            return hashlib.sha256(os.fsencode(f.target or "")).hexdigest()
        if f.path not in self._digests:
            if self._zip is None or f.too_large:
                raise CannotCheck(f"{self.label}: {f.path} was not read")
            h = hashlib.sha256()
            try:
                with self._open_member(f) as fh:
                    for chunk in iter(lambda: fh.read(1 << 20), b""):
                        self._count(len(chunk))
                        h.update(chunk)
            except (zipfile.BadZipFile, OSError, EOFError) as e:
                raise CannotCheck(f"{self.label}: cannot read {f.path} ({e})") from None
            self._digests[f.path] = h.hexdigest()
        return self._digests[f.path]

    def read(self, f: ForkFile, limit: int | None = None) -> bytes | None:
        if f.kind == "symlink":
            return os.fsencode(f.target or "")
        if f.too_large or f.kind != "file" or (limit is not None and f.size > limit):
            return None
        if self._zip is None:
            return self._bytes.get(f.path)
        try:
            with self._open_member(f) as fh:
                data = fh.read(f.size + 1)
        except (zipfile.BadZipFile, OSError, EOFError) as e:
            raise CannotCheck(f"{self.label}: cannot read {f.path} ({e})") from None
        self._count(len(data))
        return data

    fetch = read


def open_archive_fork(spec: str, index_url: str | None = None, session=None) -> ArchiveFork:
    """A local wheel or sdist, or `pypi:NAME[==VERSION]` through the user's package index (vendorkit.pypi)."""
    if spec.startswith("pypi:"):
        from . import pypi

        m = _PYPI.match(spec)
        if not m:
            raise UsageError(f"bad package spec {spec!r}: expected pypi:NAME[==VERSION]")
        name, version = m.groups()
        version, dist = pypi.release(name, version, pypi.index_url(index_url), session)
        label = f"pypi:{name}=={version} ({dist.filename})"
        fork = ArchiveFork(pypi.open_dist(dist, label, session), label)
        fork.dist = dist
        return fork
    if not os.path.isfile(spec):
        raise CannotCheck(f"fork archive {spec} does not exist")
    return ArchiveFork(os.path.abspath(spec), os.path.abspath(spec))
