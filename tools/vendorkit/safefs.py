"""The one way the vendoring tools touch a fork's files (check, --sync, pin, the offline verifier).

A fork is hostile input. Every fork-relative path is resolved one component at a time from the fork root and
no symbolic link is ever followed on the way or at the end: a link, or a file where a directory belongs, is
an UnsafePath the caller reports, never a route out of the root. On POSIX the walk goes through directory file
descriptors (openat-style, O_NOFOLLOW), which also holds if the tree is changed while we work; without
dir_fd support each component is lstat-checked first (best effort against concurrent changes).

Standard library only and no package imports: tools/sm120_vendor_verify.py inlines this file into the
verifier that --sync writes into forks.
"""
from __future__ import annotations

import errno
import os
import stat

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)  # a FIFO planted at a released path must not block the open
_BINARY = getattr(os, "O_BINARY", 0)
HAVE_DIRFD = (bool(_NOFOLLOW) and os.scandir in os.supports_fd
              and {os.open, os.stat, os.mkdir, os.unlink, os.rmdir, os.rename, os.readlink, os.symlink}
              <= os.supports_dir_fd)
_CACHE = 64  # directory descriptors kept open between calls


def path_parts(path) -> list[str] | None:
    """The components of a safe relative POSIX path, or None: no absolute or drive-letter path, no empty, '.'
    or '..' component, no backslash or NUL (names mean the same on every platform)."""
    if not isinstance(path, str) or not path or path[0] == "/" or "\\" in path or "\0" in path:
        return None
    if len(path) > 1 and path[1] == ":" and path[0].isalpha():
        return None
    parts = path.split("/")
    return None if any(p in ("", ".", "..") for p in parts) else parts


def safe_relative(path) -> bool:
    return path_parts(path) is not None


class UnsafePath(Exception):
    """Resolving `rel` met something that is not followed: a symlink, or a non-directory where a directory
    belongs. `component` is the fork-relative path where that happened."""

    def __init__(self, rel: str, component: str, why: str):
        self.rel, self.component, self.why = rel, component, why
        super().__init__(f"{component} is {why} (not followed)")


class TooDeep(OSError):
    """A walk went deeper than it was allowed to."""


class NotRegular(OSError):
    """A path that is not a regular file where one was to be read (FIFO, device, socket, directory, link)."""


class _Dir:
    __slots__ = ("fd", "path")

    def __init__(self, fd, path: str):
        self.fd, self.path = fd, path

    def at(self, name: str) -> str:
        """The name to pass together with dir_fd=self.fd (a full path when descriptors are not used)."""
        return name if self.fd is not None else os.path.join(self.path, name)


class ForkRoot:
    """A directory tree addressed by fork-relative POSIX paths ("" is the root itself). The root path is the
    caller's choice and may itself be a link; nothing below it is followed."""

    def __init__(self, root: str, use_dirfd: bool | None = None):
        use_dirfd = HAVE_DIRFD if use_dirfd is None else use_dirfd
        self.path = os.path.abspath(root)
        if not os.path.isdir(self.path):
            raise NotADirectoryError(errno.ENOTDIR, "not a directory", root)
        self._fd = use_dirfd
        self._dirs: dict[str, int] = {}
        self._root = _Dir(os.open(self.path, os.O_RDONLY | _DIRECTORY | _CLOEXEC) if use_dirfd else None,
                          self.path)

    # ------------------------------------------------------------ lifetime
    def close(self) -> None:
        for fd in self._dirs.values():
            os.close(fd)
        self._dirs.clear()
        if self._root.fd is not None:
            os.close(self._root.fd)
            self._root.fd = None
            self._fd = False

    def __enter__(self) -> "ForkRoot":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except OSError:
            pass

    # ------------------------------------------------------------ resolution
    @staticmethod
    def _split(rel: str) -> list[str]:
        if rel == "":
            return []
        parts = rel.split("/")
        if any(p in ("", ".", "..") or "\0" in p for p in parts):
            raise ValueError(f"not a fork-relative path: {rel!r}")
        return parts

    def _classify(self, d: _Dir, name: str, rel: str, where: str) -> None:
        """Raise the UnsafePath (or FileNotFoundError) that explains why `name` is not a directory."""
        st = os.stat(d.at(name), dir_fd=d.fd, follow_symlinks=False)  # FileNotFoundError propagates
        if stat.S_ISLNK(st.st_mode):
            raise UnsafePath(rel, where, "a symlink")
        if not stat.S_ISDIR(st.st_mode):
            raise UnsafePath(rel, where, "not a directory")

    def _dir(self, parts: list[str], rel: str, create: list[str] | None = None) -> _Dir:
        """The directory `parts` (every component checked). `create`: make missing components and append their
        fork-relative paths to the list."""
        if self._fd and parts:
            fd = self._dirs.get("/".join(parts))
            if fd is not None:  # the common case: a sibling of the last file read
                return _Dir(fd, os.path.join(self.path, *parts))
        d = self._root
        for i, name in enumerate(parts):
            where = "/".join(parts[: i + 1])
            if self._fd and where in self._dirs:
                d = _Dir(self._dirs[where], os.path.join(d.path, name))
                continue
            nxt = self._enter(d, name, rel, where, create)
            if self._fd:
                self._dirs[where] = nxt.fd
            d = nxt
        return d

    def _trim(self) -> None:
        """Bound the descriptor cache. Called first thing in each public method, never during a resolution, so
        no descriptor an operation holds is closed under it."""
        if len(self._dirs) > _CACHE:
            for k in list(self._dirs)[: len(self._dirs) - _CACHE // 2]:
                os.close(self._dirs.pop(k))

    def _enter(self, d: _Dir, name: str, rel: str, where: str, create: list[str] | None) -> _Dir:
        path = os.path.join(d.path, name)
        for attempt in (0, 1):
            try:
                if self._fd:
                    fd = os.open(name, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC, dir_fd=d.fd)
                    return _Dir(fd, path)
                self._classify(d, name, rel, where)
                return _Dir(None, path)
            except FileNotFoundError:
                if create is None or attempt:
                    raise
                os.mkdir(d.at(name), 0o755, dir_fd=d.fd)
                create.append(where)
            except OSError as e:
                if e.errno not in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                    raise
                self._classify(d, name, rel, where)
                raise
        raise AssertionError("unreachable")

    def _parent(self, rel: str, create: list[str] | None = None) -> tuple[_Dir, str]:
        parts = self._split(rel)
        if not parts:
            raise ValueError("the fork root itself is not a file")
        return self._dir(parts[:-1], rel, create), parts[-1]

    def _forget(self, rel: str) -> None:
        for k in [k for k in self._dirs if k == rel or k.startswith(rel + "/")]:
            os.close(self._dirs.pop(k))

    # ------------------------------------------------------------ reading
    def lstat(self, rel: str) -> os.stat_result | None:
        """The entry itself (a link is not followed); None when it does not exist. UnsafePath when a parent
        component is a link or a file."""
        self._trim()
        try:
            if rel == "":
                return os.stat(self.path)
            d, name = self._parent(rel)
            return os.stat(d.at(name), dir_fd=d.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def is_dir(self, rel: str) -> bool:
        st = self.lstat(rel)
        return st is not None and stat.S_ISDIR(st.st_mode)

    def check_dir(self, rel: str) -> UnsafePath | None:
        """Why the directory `rel` could not be used or created without following a link, else None."""
        self._trim()
        try:
            self._dir(self._split(rel), rel)
        except UnsafePath as e:
            return e
        except FileNotFoundError:
            pass  # missing components would be created
        return None

    def open_read(self, rel: str):
        """A binary file object for the regular file `rel`. NotRegular for links, FIFOs, devices, directories."""
        self._trim()
        d, name = self._parent(rel)
        if not self._fd:
            st = os.stat(d.at(name), follow_symlinks=False)
            if not stat.S_ISREG(st.st_mode):
                raise NotRegular(errno.EINVAL, "not a regular file", rel)
        try:
            fd = os.open(d.at(name), os.O_RDONLY | _NOFOLLOW | _NONBLOCK | _CLOEXEC | _BINARY, dir_fd=d.fd)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise NotRegular(errno.ELOOP, "a symlink", rel) from None
            raise
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise NotRegular(errno.EINVAL, "not a regular file", rel)
        return os.fdopen(fd, "rb")

    def read_bytes(self, rel: str, limit: int | None = None) -> bytes:
        """The whole file; OverflowError when it is larger than `limit` bytes (nothing beyond is read)."""
        with self.open_read(rel) as fh:
            data = fh.read() if limit is None else fh.read(limit + 1)
        if limit is not None and len(data) > limit:
            raise OverflowError(f"{rel} is larger than {limit} bytes")
        return data

    def readlink(self, rel: str) -> str:
        self._trim()
        d, name = self._parent(rel)
        return os.readlink(d.at(name), dir_fd=d.fd)

    def list_dir(self, rel: str = "") -> list[tuple[str, os.stat_result]]:
        """(name, lstat) of each entry of directory `rel`, sorted by name."""
        self._trim()
        d = self._dir(self._split(rel), rel)
        out = []
        with os.scandir(d.fd if d.fd is not None else d.path) as it:
            for e in it:
                try:
                    out.append((e.name, e.stat(follow_symlinks=False)))
                except FileNotFoundError:  # removed while listing
                    continue
        return sorted(out)

    def walk(self, rel: str = "", skip=None, max_depth: int | None = None):
        """(fork-relative path, lstat) of every non-directory entry under directory `rel`, depth first in name
        order. Links (to directories too) are entries, never descended; `skip(path)` prunes directories.
        TooDeep past `max_depth` components (a tree of thousands of nested directories costs no more)."""
        stack = [rel]
        while stack:
            cur = stack.pop()
            below = []
            for name, st in self.list_dir(cur):
                path = f"{cur}/{name}" if cur else name
                if max_depth is not None and path.count("/") >= max_depth:
                    raise TooDeep(errno.ELOOP, f"more than {max_depth} directories deep", path[:200])
                if stat.S_ISDIR(st.st_mode):
                    if skip is None or not skip(path):
                        below.append(path)
                else:
                    yield path, st
            stack.extend(reversed(below))

    # ------------------------------------------------------------ writing
    def make_dirs(self, rel: str) -> list[str]:
        """Create the missing components of directory `rel`; the fork-relative paths created, outermost first."""
        self._trim()
        created: list[str] = []
        self._dir(self._split(rel), rel, created)
        return created

    def write_atomic(self, rel: str, data, mode: int = 0o644) -> None:
        """Replace the entry `rel` (a link is replaced, not followed) by a file holding `data` (bytes, or a binary
        file object copied in chunks): a temporary file in the same directory, fsync, chmod, rename. The parent
        directory must exist."""
        self._trim()
        d, name = self._parent(rel)
        tmp = f".sm120-tmp-{os.getpid()}-{os.urandom(4).hex()}"
        fd = os.open(d.at(tmp), os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC | _BINARY, 0o600,
                     dir_fd=d.fd)
        try:
            with os.fdopen(fd, "wb") as fh:
                if hasattr(data, "read"):
                    for chunk in iter(lambda: data.read(1 << 20), b""):
                        fh.write(chunk)
                else:
                    fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
                if hasattr(os, "fchmod"):
                    os.fchmod(fh.fileno(), mode)
            if not hasattr(os, "fchmod"):
                os.chmod(d.at(tmp), mode)
            os.replace(d.at(tmp), d.at(name), src_dir_fd=d.fd, dst_dir_fd=d.fd)
        except BaseException:
            try:
                os.unlink(d.at(tmp), dir_fd=d.fd)
            except OSError:
                pass
            raise

    def create_exclusive(self, rel: str, mode: int = 0o644):
        """A new file `rel` opened for binary writing (FileExistsError when anything is there, a link included).
        The parent directory must exist."""
        self._trim()
        d, name = self._parent(rel)
        fd = os.open(d.at(name), os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC | _BINARY, mode,
                     dir_fd=d.fd)
        return os.fdopen(fd, "wb")

    def symlink(self, target: str, rel: str) -> None:
        self._trim()
        d, name = self._parent(rel)
        os.symlink(target, d.at(name), dir_fd=d.fd)

    def rename(self, src: str, dst: str) -> None:
        """Rename an entry (not followed) to another fork-relative path; the destination's parent must exist."""
        self._trim()
        sd, sname = self._parent(src)
        dd, dname = self._parent(dst)
        os.replace(sd.at(sname), dd.at(dname), src_dir_fd=sd.fd, dst_dir_fd=dd.fd)

    def unlink(self, rel: str) -> None:
        self._trim()
        d, name = self._parent(rel)
        os.unlink(d.at(name), dir_fd=d.fd)

    def rmdir(self, rel: str) -> None:
        self._trim()
        d, name = self._parent(rel)
        self._forget(rel)
        os.rmdir(d.at(name), dir_fd=d.fd)

    def chmod(self, rel: str, mode: int) -> None:
        """chmod of the regular file `rel` through a no-follow descriptor."""
        with self.open_read(rel) as fh:
            if hasattr(os, "fchmod"):
                os.fchmod(fh.fileno(), mode)
                return
        d, name = self._parent(rel)
        os.chmod(d.at(name), mode)
