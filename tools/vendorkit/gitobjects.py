"""A git repository read as data: refs, loose objects, packs, trees, commits and tags, parsed here.

`git:DIR@REF` names a repository the run does not trust. Running git on it would let the repository's own
configuration run programs (a promisor remote's `uploadpack` on a lazy fetch, `core.fsmonitor`, hooks, filter
and textconv drivers, `include.path`, ...) and would let `refs/replace/` show other bytes than a checkout writes.
So no git process ever touches such a repository: this module reads the object database itself. It never reads
the repository's configuration, never fetches, never follows `objects/info/alternates` or a `.git` file to
another directory, and never applies replace refs or grafts. Every object read is checked against its id
(sha1 over "<type> <size>\\0<content>"), so a pack or index that lies is an error, not a view.

Every file is opened through safefs (no link is followed inside the repository); every byte read or inflated is
drawn from the run budget; declared sizes are checked against the caller's cap before anything is inflated, and
inflation is bounded by the declared size; delta chains are resolved iteratively with a depth cap.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import struct
import zlib
from dataclasses import dataclass
from typing import BinaryIO, NoReturn

from . import budget
from .errors import CannotCheck, UsageError
from .safefs import ForkRoot, NotRegular, UnsafePath

TYPES = {1: "commit", 2: "tree", 3: "blob", 4: "tag"}
OFS_DELTA, REF_DELTA = 6, 7
MAX_DELTA_CHAIN = 10_000  # git itself caps --depth at 4095
MAX_REF_DELTA = 64  # deltas whose base is named by id, nested (a cycle of them is an error, not a hang)
MAX_SYMREF = 8
MAX_PEEL = 16
READ = 1 << 16
_HEX = re.compile(r"[0-9a-f]{4,40}")
_REF_BAD = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]|\.\.|@\{|//|/\.|\.lock(?:/|\Z)|\A\.|/\Z|\A/")


class GitFormatError(CannotCheck):
    """The repository's files are not what git writes (corrupt, truncated, or crafted)."""


def _cannot(msg: str) -> NoReturn:
    raise GitFormatError(msg)


def locate_git_dir(path: str) -> str:
    """The git directory of a work tree or a bare repository at `path` (CannotCheck otherwise). A `.git` file
    (a linked work tree or a submodule) is not followed: it names another directory."""
    dot = os.path.join(path, ".git")
    try:
        st = os.lstat(dot)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise CannotCheck(f"cannot read {dot}: {e.strerror or e}") from None
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            return dot
        if stat.S_ISREG(st.st_mode):
            raise CannotCheck(
                f"{dot} is a file (a linked work tree or a submodule, pointing elsewhere): pass the "
                f"repository that holds the objects"
            )
        raise CannotCheck(f"{dot} is a symlink or not a directory (not followed)")
    if all(os.path.exists(os.path.join(path, p)) for p in ("HEAD", "objects", "refs")):
        return path  # a bare repository
    raise CannotCheck(f"{path} is not a git repository (no .git directory)")


@dataclass
class _Pack:
    name: str  # objects/pack/pack-<hash> (no suffix)
    count: int
    version: int  # index version: 1 or 2
    fanout: tuple
    idx: BinaryIO  # open file of the .idx
    pack: BinaryIO  # open file of the .pack
    pack_size: int


class Repository:
    """The object database and refs of one repository, read without git."""

    def __init__(self, path: str):
        self.path = os.path.abspath(path)
        self.git_dir = locate_git_dir(self.path)
        try:
            self.fs = ForkRoot(self.git_dir)
        except OSError as e:
            raise CannotCheck(f"cannot open {self.git_dir}: {e.strerror or e}") from None
        self.budget = budget.current()
        if self._exists("objects/info/alternates") and self._read("objects/info/alternates", 1 << 16).strip():
            raise CannotCheck(
                f"{self.path} borrows objects from another repository (objects/info/alternates), "
                f"which is not followed: pass a repository that holds its own objects "
                f"(git repack -a -d there)"
            )
        self._packs: list[_Pack] | None = None
        self._cache: dict[str, tuple[str, bytes]] = {}
        self._cache_bytes = 0

    def close(self) -> None:
        for p in self._packs or []:
            p.idx.close()
            p.pack.close()
        self._packs = []
        self.fs.close()

    # ------------------------------------------------------------ files of the git directory
    def _exists(self, rel: str) -> bool:
        try:
            return self.fs.lstat(rel) is not None
        except UnsafePath:
            return False

    def _open(self, rel: str):
        try:
            return self.fs.open_read(rel)
        except (UnsafePath, NotRegular) as e:
            raise CannotCheck(f"{self.git_dir}/{rel}: {e} (not followed)") from None

    def _read(self, rel: str, limit: int) -> bytes:
        try:
            data = self.fs.read_bytes(rel, limit)
        except OverflowError:
            raise CannotCheck(f"{self.git_dir}/{rel} is larger than {limit:,} bytes (not read)") from None
        except (UnsafePath, NotRegular) as e:
            raise CannotCheck(f"{self.git_dir}/{rel}: {e} (not followed)") from None
        self.budget.take(len(data), rel)
        return data

    # ------------------------------------------------------------ refs
    def _packed_refs(self) -> dict[str, str]:
        if not hasattr(self, "_packed"):
            self._packed = {}
            try:
                text = self._read("packed-refs", 64 << 20)
            except FileNotFoundError:
                text = b""
            for line in text.decode("utf-8", "replace").splitlines():
                if not line or line[0] in "#^":
                    continue
                oid, _, name = line.partition(" ")
                if re.fullmatch(r"[0-9a-f]{40}", oid) and name:
                    self._packed[name] = oid
        return self._packed

    def _ref(self, name: str, depth: int = 0) -> str | None:
        """The object id a ref name holds (symbolic refs followed), or None when there is no such ref."""
        if depth > MAX_SYMREF:
            _cannot(f"ref {name}: symbolic refs nested more than {MAX_SYMREF} deep")
        if name != "HEAD" and (not name.startswith("refs/") or _REF_BAD.search(name)):
            return None
        try:
            raw = self._read(name, 4096).decode("utf-8", "replace").strip()
        except FileNotFoundError:
            return self._packed_refs().get(name)
        except CannotCheck:
            if self.fs.is_dir(name):
                return None
            raise
        if raw.startswith("ref: "):
            return self._ref(raw[5:].strip(), depth + 1)
        if re.fullmatch(r"[0-9a-f]{40}", raw):
            return raw
        if re.fullmatch(r"[0-9a-f]{64}", raw):
            raise CannotCheck(f"{self.path} is a SHA-256 repository, which is not read")
        _cannot(f"ref {name} holds {raw[:60]!r}, not an object id")

    def resolve(self, spec: str) -> str:
        """The commit a branch, tag, `HEAD`, full ref name or (abbreviated) commit id names, annotated tags
        peeled. Revision expressions (`~`, `^`, `@{...}`) are refused: name the commit."""
        if not spec or re.search(r"[\x00-\x20~^:?*\[\\]|@\{|\.\.", spec):
            raise UsageError(f"bad ref {spec!r}: expected a branch, tag, full ref name or commit id")
        oid = None
        if spec == "HEAD" or spec.startswith("refs/"):
            oid = self._ref(spec)
        else:
            for cand in (
                f"refs/{spec}",
                f"refs/tags/{spec}",
                f"refs/heads/{spec}",
                f"refs/remotes/{spec}",
                f"refs/remotes/{spec}/HEAD",
            ):
                oid = self._ref(cand)
                if oid is not None:
                    break
        if oid is None and _HEX.fullmatch(spec):
            oid = self._expand(spec)
        if oid is None:
            if self._exists("reftable"):
                raise CannotCheck(f"{self.path} keeps its refs in a reftable, which is not read: pass a commit id")
            raise CannotCheck(f"no such ref {spec!r} in {self.path}")
        return self.peel(oid)

    def peel(self, oid: str) -> str:
        """Annotated tags followed to the commit they name."""
        for _ in range(MAX_PEEL):
            kind, data = self.read(oid, 1 << 20)
            if kind == "commit":
                return oid
            if kind != "tag":
                raise CannotCheck(f"{oid} is a {kind}, not a commit")
            m = re.match(rb"object ([0-9a-f]{40})\n", data)
            if not m:
                _cannot(f"tag {oid} names no object")
            oid = m.group(1).decode()
        _cannot(f"tag {oid}: tags nested more than {MAX_PEEL} deep")

    def commit_tree(self, commit: str) -> str:
        kind, data = self.read(commit, 1 << 20)
        m = re.match(rb"tree ([0-9a-f]{40})\n", data)
        if kind != "commit" or not m:
            _cannot(f"commit {commit} names no tree")
        return m.group(1).decode()

    # ------------------------------------------------------------ locating objects
    def _loose_name(self, oid: str) -> str:
        return f"objects/{oid[:2]}/{oid[2:]}"

    def packs(self) -> list[_Pack]:
        if self._packs is None:
            self._packs = []
            try:
                names = sorted(
                    n for n, st in self.fs.list_dir("objects/pack") if n.endswith(".idx") and stat.S_ISREG(st.st_mode)
                )
            except (FileNotFoundError, UnsafePath):
                names = []
            for n in names:
                base = f"objects/pack/{n[:-4]}"
                if self._exists(base + ".pack"):
                    self._packs.append(self._open_pack(base))
        return self._packs

    def _open_pack(self, base: str) -> _Pack:
        idx = self._open(base + ".idx")
        head = idx.read(8)
        if head[:4] == b"\xfftOc":
            version = struct.unpack(">I", head[4:8])[0]
            if version != 2:
                _cannot(f"{base}.idx: index version {version} is not read")
            fan = idx.read(1024)
        else:
            version = 1
            fan = head + idx.read(1016)
        if len(fan) != 1024:
            _cannot(f"{base}.idx: truncated")
        fanout = struct.unpack(">256I", fan)
        if any(a > b for a, b in zip(fanout, fanout[1:])):
            _cannot(f"{base}.idx: fan-out table is not sorted")
        pack = self._open(base + ".pack")
        pack_size = os.fstat(pack.fileno()).st_size
        hdr = pack.read(12)
        if len(hdr) != 12 or hdr[:4] != b"PACK" or struct.unpack(">I", hdr[4:8])[0] not in (2, 3):
            _cannot(f"{base}.pack: not a pack file")
        if struct.unpack(">I", hdr[8:12])[0] != fanout[255]:
            _cannot(f"{base}.pack: its object count disagrees with its index")
        self.budget.entry(base, 1)
        return _Pack(base, fanout[255], version, fanout, idx, pack, pack_size)

    def _idx_oid(self, p: _Pack, i: int) -> bytes:
        if p.version == 2:
            p.idx.seek(8 + 1024 + 20 * i)
            return p.idx.read(20)
        p.idx.seek(1024 + 24 * i + 4)
        return p.idx.read(20)

    def _idx_offset(self, p: _Pack, i: int) -> int:
        if p.version == 1:
            p.idx.seek(1024 + 24 * i)
            return struct.unpack(">I", p.idx.read(4))[0]
        p.idx.seek(8 + 1024 + 24 * p.count + 4 * i)
        off = struct.unpack(">I", p.idx.read(4))[0]
        if off & 0x80000000:
            p.idx.seek(8 + 1024 + 28 * p.count + 8 * (off & 0x7FFFFFFF))
            raw = p.idx.read(8)
            if len(raw) != 8:
                _cannot(f"{p.name}.idx: truncated large-offset table")
            off = struct.unpack(">Q", raw)[0]
        return off

    def _find_in_pack(self, p: _Pack, want: bytes) -> int | None:
        lo = p.fanout[want[0] - 1] if want[0] else 0
        hi = p.fanout[want[0]]
        while lo < hi:
            mid = (lo + hi) // 2
            got = self._idx_oid(p, mid)
            if len(got) != 20:
                _cannot(f"{p.name}.idx: truncated")
            if got == want:
                off = self._idx_offset(p, mid)
                if not 12 <= off < p.pack_size:
                    _cannot(f"{p.name}.idx: offset of {want.hex()} lies outside the pack")
                return off
            if got < want:
                lo = mid + 1
            else:
                hi = mid
        return None

    def _expand(self, prefix: str) -> str | None:
        """The one object id starting with `prefix` (None when none; CannotCheck when ambiguous)."""
        if len(prefix) == 40:
            return prefix if self._has(prefix) else None
        found: set[str] = set()
        try:
            for name, _ in self.fs.list_dir(f"objects/{prefix[:2]}"):
                if (prefix[:2] + name).startswith(prefix) and len(name) == 38:
                    found.add(prefix[:2] + name)
        except (FileNotFoundError, UnsafePath):
            pass
        for p in self.packs():
            first = int(prefix[:2], 16)
            lo, hi = (p.fanout[first - 1] if first else 0), p.fanout[first]
            for i in range(lo, hi):
                self.budget.entry(p.name)
                h = self._idx_oid(p, i).hex()
                if h.startswith(prefix):
                    found.add(h)
        if len(found) > 1:
            raise UsageError(f"commit id {prefix} is ambiguous in {self.path}: give more digits")
        return next(iter(found), None)

    def _has(self, oid: str) -> bool:
        if self._exists(self._loose_name(oid)):
            return True
        want = bytes.fromhex(oid)
        return any(self._find_in_pack(p, want) is not None for p in self.packs())

    # ------------------------------------------------------------ reading objects
    def header(self, oid: str, _depth: int = 0) -> tuple[str, int]:
        """(type, size) of an object, inflating only its first bytes (no delta is applied)."""
        if oid in self._cache:
            cached_kind, cached = self._cache[oid]
            return cached_kind, len(cached)
        if _depth > MAX_REF_DELTA:
            _cannot(f"object {oid}: deltas against objects named by id nest more than {MAX_REF_DELTA} deep")
        loose = self._loose_name(oid)
        if self._exists(loose):
            with self._open(loose) as fh:
                z = zlib.decompressobj()
                got = b""
                while b"\0" not in got and len(got) < 64:
                    chunk = fh.read(256)
                    if not chunk:
                        break
                    self.budget.take(len(chunk), loose)
                    try:
                        got += z.decompress(chunk, 64 - len(got))
                    except zlib.error as e:
                        _cannot(f"{loose}: corrupt ({e})")
            return self._parse_loose_header(got, oid)[:2]
        want = bytes.fromhex(oid)
        for p in self.packs():
            off = self._find_in_pack(p, want)
            if off is None:
                continue
            kind, size, base, data_off = self._pack_entry(p, off)
            if kind in TYPES:
                return TYPES[kind], size
            # a delta: the size of its result is the second number of the delta data; its type is its base's
            head = self._inflate(p, data_off, 32, f"{oid} (delta header)", exact=False)
            _, pos = _varint(head, 0, oid)
            result, _ = _varint(head, pos, oid)
            return self._base_kind(p, off, _depth), result
        raise self._missing(oid)

    def _base_kind(self, p: _Pack, off: int, depth: int) -> str:
        """The type of the object a delta chain starting at `off` ends in."""
        for _ in range(MAX_DELTA_CHAIN):
            kind, _, base, _ = self._pack_entry(p, off)
            if kind in TYPES:
                return TYPES[kind]
            if kind == OFS_DELTA:
                assert isinstance(base, int)  # _pack_entry: an OFS_DELTA's base is its offset
                off = base
            else:
                assert isinstance(base, str)  # _pack_entry: a REF_DELTA's base is its object id
                return self.header(base, depth + 1)[0]
        _cannot(f"{p.name}: a delta chain longer than {MAX_DELTA_CHAIN}")

    def _missing(self, oid: str) -> CannotCheck:
        promisor = any(self._exists(p.name + ".promisor") for p in self.packs())
        why = " (a partial clone: its missing objects are never fetched here)" if promisor else ""
        return CannotCheck(f"object {oid} is not in {self.path}{why}")

    def read(self, oid: str, cap: int, want: str | None = None, _depth: int = 0) -> tuple[str, bytes]:
        """(type, content) of an object whose size is at most `cap` bytes; CannotCheck over it, when it is
        missing, or when its content does not hash to its id."""
        hit = self._cache.get(oid)
        if hit is not None:
            return hit
        if _depth > MAX_REF_DELTA:
            _cannot(f"object {oid}: deltas against objects named by id nest more than {MAX_REF_DELTA} deep")
        loose = self._loose_name(oid)
        if self._exists(loose):
            kind, data = self._read_loose(loose, oid, cap)
        else:
            kind, data = self._read_packed(oid, cap, _depth)
        h = hashlib.sha1(f"{kind} {len(data)}\0".encode())
        h.update(data)
        if h.hexdigest() != oid:
            _cannot(f"object {oid} does not hash to its id (a corrupt or forged object database)")
        if want is not None and kind != want:
            _cannot(f"{oid} is a {kind}, expected a {want}")
        if kind != "blob" and len(data) <= (1 << 20):  # trees and commits are read again while listing
            self._remember(oid, kind, data)
        return kind, data

    def _remember(self, oid: str, kind: str, data: bytes) -> None:
        if self._cache_bytes + len(data) > (32 << 20):
            self._cache.clear()
            self._cache_bytes = 0
        self._cache[oid] = (kind, data)
        self._cache_bytes += len(data)

    @staticmethod
    def _parse_loose_header(got: bytes, oid: str) -> tuple[str, int, int]:
        nul = got.find(b"\0")
        m = re.fullmatch(rb"(blob|tree|commit|tag) (0|[1-9][0-9]{0,17})", got[:nul]) if nul > 0 else None
        if not m:
            _cannot(f"loose object {oid}: bad header")
        return m.group(1).decode(), int(m.group(2)), nul + 1

    def _read_loose(self, rel: str, oid: str, cap: int) -> tuple[str, bytes]:
        with self._open(rel) as fh:
            z = zlib.decompressobj()
            out = bytearray()
            kind = size = None
            while True:
                chunk = fh.read(READ)
                if not chunk:
                    break
                self.budget.take(len(chunk), rel)
                buf = chunk
                while buf:
                    limit = READ if size is None else size + 1 - len(out)
                    try:
                        piece = z.decompress(buf, max(limit, 1))
                    except zlib.error as e:
                        _cannot(f"{rel}: corrupt ({e})")
                    buf = z.unconsumed_tail
                    self.budget.take(len(piece), rel)
                    out += piece
                    if size is None and b"\0" in out:
                        kind, size, start = self._parse_loose_header(bytes(out[:64]), oid)
                        if size > cap:
                            raise CannotCheck(f"object {oid} has {size:,} bytes, over the {cap:,}-byte cap (not read)")
                        del out[:start]
                    elif size is None and len(out) > 64:
                        _cannot(f"loose object {oid}: bad header")
                    if size is not None and len(out) > size:
                        _cannot(f"loose object {oid}: more bytes than its header says")
                    if not piece:
                        break
                if z.eof:
                    break
        if kind is None or size is None or len(out) != size:  # (kind and size are read together)
            _cannot(f"loose object {oid}: truncated")
        return kind, bytes(out)

    def _pack_entry(self, p: _Pack, off: int) -> tuple[int, int, int | str | None, int]:
        """(type code, size, base (offset for OFS_DELTA, oid for REF_DELTA, else None), offset of the data)."""
        p.pack.seek(off)
        head = p.pack.read(32)
        if not head:
            _cannot(f"{p.name}.pack: truncated at {off}")
        c = head[0]
        kind, size, shift, i = (c >> 4) & 7, c & 15, 4, 1
        while c & 0x80:
            if i >= len(head) or shift > 60:
                _cannot(f"{p.name}.pack: bad object header at {off}")
            c = head[i]
            size |= (c & 0x7F) << shift
            shift, i = shift + 7, i + 1
        base: int | str | None = None
        if kind == OFS_DELTA:
            if i >= len(head):
                _cannot(f"{p.name}.pack: bad delta offset at {off}")
            c = head[i]
            rel = c & 0x7F
            i += 1
            while c & 0x80:
                if i >= len(head) or rel > (1 << 56):
                    _cannot(f"{p.name}.pack: bad delta offset at {off}")
                c = head[i]
                rel = ((rel + 1) << 7) | (c & 0x7F)
                i += 1
            base = off - rel
            if not 12 <= base < off:
                _cannot(f"{p.name}.pack: a delta at {off} names a base outside the pack")
        elif kind == REF_DELTA:
            if len(head) < i + 20:
                _cannot(f"{p.name}.pack: truncated at {off}")
            base = head[i : i + 20].hex()
            i += 20
        elif kind not in TYPES:
            _cannot(f"{p.name}.pack: unknown object type {kind} at {off}")
        return kind, size, base, off + i

    def _inflate(self, p: _Pack, off: int, size: int, what: str, exact: bool = True) -> bytes:
        """The inflated bytes of the zlib stream at `off`: exactly `size` of them (exact), or at most `size`."""
        p.pack.seek(off)
        z = zlib.decompressobj()
        out = bytearray()
        while len(out) < size or (exact and not z.eof):
            chunk = p.pack.read(READ)
            if not chunk:
                break
            self.budget.take(len(chunk), what)
            buf = chunk
            while buf and len(out) <= size:
                try:
                    piece = z.decompress(buf, size + 1 - len(out))
                except zlib.error as e:
                    _cannot(f"{p.name}.pack: corrupt object {what} ({e})")
                buf = z.unconsumed_tail
                self.budget.take(len(piece), what)
                out += piece
                if not piece or z.eof:
                    break
            if z.eof or len(out) > size:
                break
        if len(out) > size or (exact and len(out) != size):
            _cannot(f"{p.name}.pack: object {what} does not inflate to the {size:,} bytes its header says")
        return bytes(out)

    def _read_packed(self, oid: str, cap: int, depth: int) -> tuple[str, bytes]:
        want = bytes.fromhex(oid)
        for p in self.packs():
            off = self._find_in_pack(p, want)
            if off is not None:
                return self._resolve_at(p, off, oid, cap, depth)
        raise self._missing(oid)

    def _resolve_at(self, p: _Pack, off: int, oid: str, cap: int, depth: int) -> tuple[str, bytes]:
        chain: list[tuple[int, int]] = []  # (data offset, delta size) from the object down to its base
        base_obj: tuple[str, bytes] | None = None
        for _ in range(MAX_DELTA_CHAIN):
            kind, size, base, data_off = self._pack_entry(p, off)
            if kind in TYPES:
                if size > cap:
                    raise CannotCheck(f"object {oid} has {size:,} bytes, over the {cap:,}-byte cap (not read)")
                base_obj = (TYPES[kind], self._inflate(p, data_off, size, oid))
                break
            if size > cap + (1 << 20):
                raise CannotCheck(f"object {oid}: a delta of {size:,} bytes, over the cap (not read)")
            chain.append((data_off, size))
            if kind == OFS_DELTA:
                assert isinstance(base, int)  # _pack_entry: an OFS_DELTA's base is its offset
                off = base
            else:  # the base is named by id: anywhere in the repository (a thin pack's, or a loose object)
                assert isinstance(base, str)  # _pack_entry: a REF_DELTA's base is its object id
                base_obj = self.read(base, cap, _depth=depth + 1)
                break
        else:
            _cannot(f"{p.name}: a delta chain longer than {MAX_DELTA_CHAIN}")
        base_kind, data = base_obj
        self.budget.hold(len(data), oid)
        try:
            for data_off, size in reversed(chain):
                delta = self._inflate(p, data_off, size, oid)
                data = _apply_delta(data, delta, cap, oid)
        finally:
            self.budget.release(len(base_obj[1]))
        return base_kind, data

    # ------------------------------------------------------------ trees
    def tree_entries(self, tree: str) -> list[tuple[str, str, str]]:
        """(mode, name, oid) of one tree, in stored order."""
        _, data = self.read(tree, 64 << 20, want="tree")
        out, i, n = [], 0, len(data)
        while i < n:
            sp = data.find(b" ", i, i + 8)
            nul = data.find(b"\0", sp + 1) if sp > 0 else -1
            if sp < 0 or nul < 0 or nul + 21 > n or not re.fullmatch(rb"[0-7]{5,6}", data[i:sp]):
                _cannot(f"tree {tree}: malformed entry at byte {i}")
            name = os.fsdecode(data[sp + 1 : nul])
            if not name:
                _cannot(f"tree {tree}: an entry with an empty name")
            out.append((data[i:sp].decode(), name, data[nul + 1 : nul + 21].hex()))
            i = nul + 21
        return out

    def walk(self, tree: str):
        """(path, mode, oid, problem) of every non-tree entry below `tree`, and of every tree entry with a
        problem, paths joined with '/', depth first. `problem` says why a checkout would refuse or misplace the
        entry (a name holding '/', '.', '..' or '.git', a name listed twice in one tree), else None. A directory
        listed twice is also walked, as a checkout merges the copies. Every entry is drawn from the run budget (entries,
        name length, depth)."""
        stack = [("", tree)]
        while stack:
            base, oid = stack.pop()
            seen: set[str] = set()
            for mode, name, child in self.tree_entries(oid):
                path = f"{base}/{name}" if base else name
                self.budget.entry(path)
                self.budget.path(path)
                problem, twice = None, False
                if "/" in name or name in (".", "..") or name.rstrip(". ").lower() == ".git":
                    problem = f"tree {oid} holds an entry named {name!r}, which a checkout refuses"
                elif name in seen:
                    problem, twice = f"tree {oid} lists {name!r} twice", True
                seen.add(name)
                if mode == "40000" and (problem is None or twice):
                    stack.append((path, child))  # a checkout merges a twice-listed directory: so does the walk
                if mode != "40000" or problem is not None:
                    yield path, mode, child, problem


def _varint(data: bytes, pos: int, what: str) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if pos >= len(data) or shift > 63:
            _cannot(f"object {what}: malformed delta")
        c = data[pos]
        value |= (c & 0x7F) << shift
        pos, shift = pos + 1, shift + 7
        if not c & 0x80:
            return value, pos


def _apply_delta(base: bytes, delta: bytes, cap: int, what: str) -> bytes:
    src_size, pos = _varint(delta, 0, what)
    dst_size, pos = _varint(delta, pos, what)
    if src_size != len(base):
        _cannot(f"object {what}: a delta against a base of another size")
    if dst_size > cap:
        raise CannotCheck(f"object {what} has {dst_size:,} bytes, over the {cap:,}-byte cap (not read)")
    out = bytearray()
    n = len(delta)
    while pos < n:
        c = delta[pos]
        pos += 1
        if c & 0x80:  # copy from the base
            off = size = 0
            for bit in range(4):
                if c & (1 << bit):
                    if pos >= n:
                        _cannot(f"object {what}: truncated delta")
                    off |= delta[pos] << (8 * bit)
                    pos += 1
            for bit in range(3):
                if c & (0x10 << bit):
                    if pos >= n:
                        _cannot(f"object {what}: truncated delta")
                    size |= delta[pos] << (8 * bit)
                    pos += 1
            size = size or 0x10000
            if off + size > len(base):
                _cannot(f"object {what}: a delta copies past its base")
            out += base[off : off + size]
        elif c:  # insert the next c bytes
            if pos + c > n:
                _cannot(f"object {what}: truncated delta")
            out += delta[pos : pos + c]
            pos += c
        else:
            _cannot(f"object {what}: a delta with a reserved opcode")
        if len(out) > dst_size:
            _cannot(f"object {what}: a delta longer than it says")
    if len(out) != dst_size:
        _cannot(f"object {what}: a delta shorter than it says")
    return bytes(out)
