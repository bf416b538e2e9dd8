"""Wheels and sdists as forks: DeepGEMM builds on PyPI (sgl-deep-gemm, vllm) carry the SM120 headers inside the
package. `--fork` takes a local .whl / .zip / .tar.gz / .tgz, or `pypi:NAME[==VERSION]` (vendorkit.pypi: every
file of the release, each downloaded and checked against the index's sha256).

A wheel is seen as installed: the site-packages tree pip writes from it (vendorkit.wheel_layout: root members
and `*.data/purelib|platlib/` members land in site-packages, later writes replace earlier ones, members pip
would refuse or place differently from pypa/installer are findings). An sdist is its source tree. Member names
are normalized the way the installer resolves them (`a/b/../c` lands at `a/c`); a name that leaves the package
is an `unsafe-member` finding, as are several members that install to one path. Nothing is extracted; link
members are reported, never followed. Zip members are streamed on demand; a tar is read once, front to back,
hashing members as they pass. Every member listed and every byte read or decompressed is drawn from the run
budget (vendorkit.budget); a member over the size or ratio cap is a `too-large` finding, never read.
"""

from __future__ import annotations

import bz2
import hashlib
import lzma
import os
import re
import stat
import struct
import tarfile
import zipfile
import zlib
from collections.abc import Iterator
from typing import BinaryIO

from . import budget, wheel_layout
from .errors import CannotCheck, UsageError
from .forkview import ForkFile, link_escapes
from .limits import ARCHIVE_MAX_BYTES, DIAGNOSE_MAX_BYTES, MEMBER_MAX_BYTES, MEMBER_MAX_RATIO, RATIO_FLOOR_BYTES
from .manifest import is_our_name

ARCHIVE_SUFFIXES = (
    ".whl",
    ".zip",
    ".tar.gz",
    ".tgz",
    ".tar",
    ".tar.bz2",
    ".tbz",
    ".tar.xz",
    ".txz",
    ".tlz",
    ".tar.lz",
    ".tar.lzma",
)  # what pip installs from
_PYPI = re.compile(r"pypi:([A-Za-z0-9][A-Za-z0-9._-]*)(?:==([A-Za-z0-9.+!_-]+))?")
_KEEP_BYTES = 64 << 20  # tar: small members kept for diagnosis, in total
# what zipfile and tarfile raise on damaged or crafted archives: zlib.error on corrupt deflate data, TypeError on
# a gzip header cut after 3 bytes (found by tests/fuzz), struct.error on short records, ...
_READ_ERRORS = (
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    tarfile.TarError,
    EOFError,
    OSError,
    ValueError,
    NotImplementedError,
    zlib.error,
    KeyError,
    RuntimeError,
    IndexError,
    struct.error,
    OverflowError,
    TypeError,
    AttributeError,
    lzma.LZMAError,
)


XZ_MEMLIMIT = 128 << 20  # an xz stream's decoder memory: preset 9 (xz -9e) needs 65 MiB; a header may declare GiBs
EXTENDED_HEADER_MAX = 1 << 20  # a pax or GNU long-name header's body: the longest name a budget allows fits


class _HeaderTooLarge(tarfile.TarError):
    pass


class _BoundedTarInfo(tarfile.TarInfo):
    """tarfile reads a pax or GNU long-name header's whole body into memory before any member is seen (a 1 KB
    bzip2 stream can declare 1.5 GiB): refuse a body over EXTENDED_HEADER_MAX first, and draw every header from
    the run budget."""

    def _proc_member(self, tarfile_):
        if self.type in (
            tarfile.GNUTYPE_LONGNAME,
            tarfile.GNUTYPE_LONGLINK,
            tarfile.XHDTYPE,
            tarfile.XGLTYPE,
            tarfile.SOLARIS_XHDTYPE,
        ):
            if self.size > EXTENDED_HEADER_MAX:
                raise _HeaderTooLarge(
                    f"an extended header of {self.size:,} bytes, over the {EXTENDED_HEADER_MAX:,}-byte cap (not read)"
                )
            budget.current().take(self.size, "tar extended headers")
        return super()._proc_member(tarfile_)

    # A sparse member's map is read whole, block after block, before the member is seen (38 KB of bzip2 held
    # 900 MiB of old-GNU extension blocks); pip's sdists never hold sparse files, so one is refused, unread.
    def _refuse_sparse(self, *_):
        raise _HeaderTooLarge(f"{self.name or 'a member'} is a GNU sparse file (its sparse map is not read)")

    _proc_sparse = _proc_gnusparse_00 = _proc_gnusparse_01 = _proc_gnusparse_10 = _refuse_sparse


class _Inflating:
    """A tar stream's bytes from a gzip, bzip2 or xz file (or a plain tar), produced in bounded steps: tarfile's own
    decompression inflates a whole read at once (1.5 GiB of zeros fit in a 16 KB bzip2 read), so the archive is
    decompressed here, at most STEP bytes per call, every byte read or produced drawn from the run budget and at
    most ARCHIVE_MAX_BYTES in all. Concatenated members (gzip, bzip2) are read one after the other."""

    STEP = 1 << 20

    def __init__(self, raw, label: str):
        self.raw, self.label, self.total, self.buf, self.off = raw, label, 0, b"", 0
        self.pending = self._raw(6)
        magic = self.pending
        self.zlib = magic[:2] == b"\x1f\x8b"
        self.new = (
            (lambda: zlib.decompressobj(16 + zlib.MAX_WBITS))
            if self.zlib
            else bz2.BZ2Decompressor
            if magic[:3] == b"BZh"
            else (lambda: lzma.LZMADecompressor(memlimit=XZ_MEMLIMIT))
            if magic[:6] == b"\xfd7zXZ\x00"
            else None
        )
        self.d = self.new() if self.new else None

    def _raw(self, n: int) -> bytes:
        data = self.raw.read(n)
        budget.current().take(len(data), self.label)
        return data

    def _buffered(self) -> bool:
        """Whether the decompressor still holds input it has not turned into output."""
        d = self.d
        if isinstance(d, (bz2.BZ2Decompressor, lzma.LZMADecompressor)):
            return not d.needs_input
        assert d is not None  # _more() returns before asking, for a plain tar
        return bool(d.unconsumed_tail)  # zlib: what decompress() left over past max_length

    def _more(self) -> bytes:
        """The next decoded piece, at most STEP bytes (b"" at the end)."""
        while True:
            if self.d is None:  # a plain tar
                data, self.pending = self.pending or self._raw(1 << 16), b""
                return data
            if self.d.eof:
                self.pending = self.d.unused_data + self.pending
                if not self.pending:
                    self.pending = self._raw(1 << 16)
                    if not self.pending:
                        return b""
                assert self.new is not None  # self.d was made by self.new (it stays None without one)
                self.d = self.new()
            if not self.pending and not self._buffered():
                self.pending = self._raw(1 << 16)
                if not self.pending:
                    return b""  # cut short: tarfile reports the truncated stream
            data, self.pending = self.pending, b""
            d = self.d
            try:
                if isinstance(d, (bz2.BZ2Decompressor, lzma.LZMADecompressor)):
                    out = d.decompress(data, self.STEP)
                else:  # zlib hands back what it did not consume: it is fed again, first
                    out = d.decompress(d.unconsumed_tail + data, self.STEP)
            except lzma.LZMAError as e:  # a header declaring a dictionary over the memlimit, or damage
                raise CannotCheck(
                    f"{self.label}: the xz stream is not read ({e}; its decoder may use at most "
                    f"{XZ_MEMLIMIT >> 20} MiB)"
                ) from None
            if out:
                return out

    def read(self, n: int = -1) -> bytes:
        out, want = [], n
        while want != 0:
            if self.off >= len(self.buf):
                self.buf, self.off = self._more(), 0
                if not self.buf:
                    break
                self.total += len(self.buf)
                if self.total > ARCHIVE_MAX_BYTES:
                    raise CannotCheck(
                        f"{self.label}: the tar stream runs past {ARCHIVE_MAX_BYTES >> 20} MiB "
                        f"uncompressed; not checked"
                    )
                if self.d is not None:
                    budget.current().take(len(self.buf), self.label)
            take = len(self.buf) - self.off if want < 0 else min(want, len(self.buf) - self.off)
            out.append(self.buf[self.off : self.off + take])
            self.off += take
            want = want - take if want > 0 else want
        return b"".join(out)


def is_archive_spec(spec: str) -> bool:
    return spec.startswith("pypi:") or spec.lower().endswith(ARCHIVE_SUFFIXES)


install_path = wheel_layout.install_path


def _other_name(info) -> str | None:
    """The member's other name, when zipfile in another Python version reads another one: the header's name and an
    Info-ZIP Unicode Path extra field (0x7075; version 1, a CRC-32 of the header's name) that Python 3.12 and
    later take instead. None when there is no such field or it names the same."""
    header = info.orig_filename.split("\0", 1)[0].replace(os.sep, "/")
    extra, pos, found = info.extra, 0, None
    while pos + 4 <= len(extra):
        tp, ln = struct.unpack("<HH", extra[pos : pos + 4])
        data = extra[pos + 4 : pos + 4 + ln]
        if tp == 0x7075 and len(data) >= 5:
            version, crc = struct.unpack("<BL", data[:5])
            raw = info.orig_filename.encode("utf-8" if info.flag_bits & 0x800 else "cp437", "replace")
            if version == 1 and crc == zlib.crc32(raw):
                try:
                    found = data[5:].decode("utf-8").split("\0", 1)[0].replace(os.sep, "/") or None
                except UnicodeDecodeError:
                    found = None
        pos += 4 + ln
    names = {header, found} - {None}
    others = names - {info.filename}
    return next(iter(others)) if others else None


def _duplicate(seen: dict[str, int], path: str) -> str | None:
    """Count one more member landing at `path` in a source tree; the finding's detail from the second on."""
    seen[path] = seen.get(path, 0) + 1
    if seen[path] == 1:
        return None
    return f"{seen[path]} members install to this path (an installer keeps the last one; checked: the last)"


def _interesting(path: str) -> bool:
    """Members whose bytes a diagnosis may need: device-layer-named files and the stamp / verifier."""
    return is_our_name(path) or path.rsplit("/", 1)[-1] in (".sm120-vendor.json", ".sm120-vendor-verify.py")


class ArchiveFork:
    digest_kind = "sha256"

    def __init__(self, source: str | BinaryIO, label: str, wheel: bool | None = None):
        """`wheel`: read as an installed wheel (default: when the label or path ends in .whl)."""
        self.label = label
        self.notes: list[str] = []
        self.wheel = label.lower().endswith(".whl") if wheel is None else wheel
        self._unsafe: list[tuple[str, str]] = []  # (raw member name, why)
        self._disputed: list[tuple[str, str, str]] = []  # (raw member name, where pip puts it, why)
        self._files: dict[str, ForkFile] = {}
        self._members: dict[str, zipfile.ZipInfo] = {}  # path -> ZipInfo (zip only)
        self._digests: dict[str, str] = {}
        self._bytes: dict[str, bytes] = {}  # tar: small interesting members
        self._zip: zipfile.ZipFile | None = None
        self._source = source if hasattr(source, "close") else None
        self.budget = budget.current()
        try:
            if zipfile.is_zipfile(source):
                self._zip = zipfile.ZipFile(source)
                self._list_zip()
            else:
                if hasattr(source, "seek"):
                    source.seek(0)
                self._read_tar(source)
        except CannotCheck:
            raise
        except _READ_ERRORS as e:
            raise CannotCheck(f"{label}: not a readable wheel or sdist ({type(e).__name__}: {e})") from None
        except RecursionError:
            raise CannotCheck(f"{label}: not a readable wheel or sdist (nested too deeply)") from None

    def close(self) -> None:
        if self._zip is not None:
            self._zip.close()
        if self._source is not None:
            self._source.close()

    # ------------------------------------------------------------ listing
    def _add(self, path: str, raw: str, f: ForkFile, duplicate: str | None = None) -> None:
        if path != raw.rstrip("/"):
            self.notes.append(f"member {raw!r} installs as {path} (checked there)")
        f.path = path
        f.duplicate = duplicate
        self._files[path] = f

    def _size_cap(self, size: int, compressed: int | None) -> str | None:
        if size > MEMBER_MAX_BYTES:
            return f"a member of {size:,} bytes, over the {MEMBER_MAX_BYTES >> 20} MiB member cap (not read)"
        if compressed is not None and size > RATIO_FLOOR_BYTES and size > MEMBER_MAX_RATIO * max(compressed, 1):
            return (
                f"a member of {size:,} bytes compressed {size // max(compressed, 1):,}:1, over the "
                f"{MEMBER_MAX_RATIO}:1 ratio cap (not read)"
            )
        return None

    def _zip_file(self, info, name: str) -> ForkFile:
        mode = (info.external_attr >> 16) & 0xFFFF
        cap = self._size_cap(info.file_size, info.compress_size)
        if stat.S_ISLNK(mode):  # pip and pypa/installer write the link's text as the file's bytes, never a link
            target = "" if cap or info.file_size > 4096 else self._zip_read(info, 4096).decode("utf-8", "replace")
            return ForkFile(name, "symlink", "120000", len(target), target, escapes=link_escapes(name, target))
        exe = bool(mode and stat.S_ISREG(mode) and mode & 0o111)  # pip's zip_item_is_executable
        return ForkFile(name, "file", "100755" if exe else "100644", info.file_size, too_large=cap)

    def _zipfile(self) -> zipfile.ZipFile:
        """The zip being read: its listing and members are read only when the fork is one."""
        assert self._zip is not None  # callers: _list_zip, once it is open; reads, which return first for a tar
        return self._zip

    def _list_zip(self) -> None:
        infos = self._zipfile().infolist()
        for info in infos:
            self.budget.entry(self.label)
            self.budget.path(info.filename)
            other = _other_name(info)
            if other is not None:
                self._disputed.append(
                    (
                        info.filename,
                        other,
                        (
                            f"zipfile reads this member's name differently by Python version: {info.filename!r} here, "
                            f"{other!r} elsewhere (an Info-ZIP Unicode Path field, which Python 3.12 and later honour): "
                            f"where pip installs it depends on the Python running pip"
                        ),
                    )
                )
        if self.wheel:
            layout = wheel_layout.lay_out([i.filename for i in infos])
            self.notes += layout.notes
            self._unsafe += layout.refused
            self._disputed += layout.disputed
            last = {i.filename: i for i in infos}  # zipfile's getinfo(), which pip reads each member through
            for path, names in layout.site.items():
                info = last[names[-1]]
                dup = None
                if len(names) > 1:
                    dup = (
                        f"{len(names)} members install to this path ({', '.join(names)}): pip keeps the last "
                        f"one (checked), pypa/installer refuses the wheel"
                    )
                self._add(path, names[-1], self._zip_file(info, names[-1]), dup)
                self._members[path] = info
            return
        seen: dict[str, int] = {}
        for info in infos:
            if info.is_dir():
                continue
            where, unsafe = install_path(info.filename)
            if unsafe:
                self._unsafe.append((info.filename, unsafe))
                continue
            if where is None:
                continue
            self._add(where, info.filename, self._zip_file(info, info.filename), _duplicate(seen, where))
            self._members[where] = info

    def _zip_read(self, info, limit: int | None = None) -> bytes:
        with self._zipfile().open(info) as fh:
            data = fh.read(limit + 1 if limit is not None else -1)
        self.budget.take(len(data), self.label)
        return data

    def _read_tar(self, source) -> None:
        """One pass: list every member, hash the regular ones under the caps, keep small interesting ones."""
        own = None if hasattr(source, "read") else open(source, "rb")
        kept = 0
        seen: dict[str, int] = {}
        try:
            self._tar_members(_Inflating(own or source, self.label), kept, seen)
        finally:
            if own is not None:
                own.close()

    def _tar_members(self, stream, kept: int, seen: dict[str, int]) -> None:
        with tarfile.open(mode="r|", fileobj=stream, tarinfo=_BoundedTarInfo) as tar:
            for m in tar:
                self.budget.entry(self.label)
                self.budget.path(m.name)
                if m.offset_data + max(m.size, 0) > ARCHIVE_MAX_BYTES:  # reaching what follows inflates it all
                    raise CannotCheck(
                        f"{self.label}: the tar stream runs past {ARCHIVE_MAX_BYTES >> 20} MiB "
                        f"uncompressed; not checked"
                    )
                self.budget.take(512 + len(m.name) + len(m.linkname), self.label)  # the header blocks
                self.budget.check_time(self.label)
                if m.isdir():
                    continue
                if m.issym() or m.islnk():
                    kind = "symlink" if m.issym() else "hardlink"
                    f = ForkFile(
                        m.name,
                        kind,
                        "120000" if m.issym() else "",
                        len(m.linkname),
                        m.linkname,
                        escapes=link_escapes(m.name, m.linkname) if m.issym() else False,
                    )
                elif m.isfile():
                    f = ForkFile(
                        m.name,
                        "file",
                        "100755" if m.mode & 0o100 else "100644",
                        m.size,
                        too_large=self._size_cap(m.size, None),
                    )
                else:
                    f = ForkFile(m.name, "other", "", 0)
                path, unsafe = install_path(m.name)
                if unsafe:
                    self._unsafe.append((m.name, unsafe))
                    continue
                if path is None:
                    continue
                self._add(path, m.name, f, _duplicate(seen, path))
                if f.kind != "file" or f.too_large:
                    self.budget.take(max(m.size, 0), self.label)  # skipped, but inflated to reach the next member
                    continue
                fh = tar.extractfile(m)
                assert fh is not None  # m.isfile() (f.kind == "file"): tarfile gives every regular member a reader
                h, keep = (
                    hashlib.sha256(),
                    _interesting(path) and m.size <= DIAGNOSE_MAX_BYTES and kept + m.size <= _KEEP_BYTES,
                )
                chunks = []
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    self.budget.take(len(chunk), self.label)
                    h.update(chunk)
                    if keep:
                        chunks.append(chunk)
                self._digests[path] = h.hexdigest()
                if keep:
                    self._bytes[path] = b"".join(chunks)
                    kept += m.size

    def findings(self, prefix: str) -> list:
        """unsafe-member findings: names an installer refuses (anywhere in the package: it would act on them),
        and members the installers place differently (where they land under the vendor root)."""
        from .compare import FileResult

        pre = f"{prefix}/" if prefix else ""
        out = [
            FileResult(raw, "unsafe", diagnosis="unsafe-member", detail=why, fork_path=raw) for raw, why in self._unsafe
        ]
        out += [
            FileResult(raw, "unsafe", diagnosis="unsafe-member", detail=why, fork_path=raw)
            for raw, where, why in self._disputed
            if any(n.startswith(pre) or is_our_name(n) for n in (where, raw))
        ]
        return out

    def list_under(self, prefix: str) -> tuple[dict[str, ForkFile], dict[str, str]]:
        pre = f"{prefix}/" if prefix else ""
        return {p[len(pre) :]: f for p, f in self._files.items() if p.startswith(pre)}, {}

    def iter_paths(self) -> Iterator[str]:
        return iter(list(self._files))

    # ------------------------------------------------------------ contents
    def _open_member(self, f: ForkFile):
        """A stream of a zip member's bytes (never beyond its declared size: zipfile stops there)."""
        try:
            return self._zipfile().open(self._members[f.path])
        except _READ_ERRORS as e:
            raise CannotCheck(f"{self.label}: cannot read {f.path} ({type(e).__name__}: {e})") from None

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
                        self.budget.take(len(chunk), self.label)
                        h.update(chunk)
            except _READ_ERRORS as e:
                raise CannotCheck(f"{self.label}: cannot read {f.path} ({type(e).__name__}: {e})") from None
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
        except _READ_ERRORS as e:
            raise CannotCheck(f"{self.label}: cannot read {f.path} ({type(e).__name__}: {e})") from None
        self.budget.take(len(data), self.label)
        return data

    fetch = read


def parse_pypi_spec(spec: str) -> tuple[str, str | None]:
    m = _PYPI.fullmatch(spec)
    if not m:
        raise UsageError(f"bad package spec {spec!r}: expected pypi:NAME[==VERSION]")
    return m.group(1), m.group(2)


def open_archive_fork(spec: str, index_url: str | None = None, session=None, ranges: bool = False):
    """A local wheel or sdist (an ArchiveFork), or `pypi:NAME[==VERSION]`: every file of the release through the
    user's package index (a vendorkit.pypi.ReleaseView)."""
    if spec.startswith("pypi:"):
        from . import pypi

        name, version = parse_pypi_spec(spec)
        return pypi.ReleaseView(name, version, pypi.index_urls(index_url), session, ranges=ranges)
    if not os.path.isfile(spec):
        raise CannotCheck(f"fork archive {spec} does not exist")
    path = os.path.abspath(spec)
    return ArchiveFork(path, path, wheel=path.lower().endswith(".whl"))
