"""Kernel-level audit of "nothing outside the fork is touched": inotify watches on every directory of the
outside tree report any open, read, listing, write, chmod, create, rename or delete there, whoever does it and
through whatever path (a symlink included). Linux only; Python's audit hook adds path-based opens."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import stat
import struct
import sys
from pathlib import Path

IN_ALL = 0x00000FFF  # access, modify, attrib, close (both), open, moved from/to, create, delete, delete_self, move_self
IN_NONBLOCK = os.O_NONBLOCK
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)

NAMES = {
    0x1: "access",
    0x2: "modify",
    0x4: "attrib",
    0x8: "close-write",
    0x10: "close",
    0x20: "open",
    0x40: "moved-from",
    0x80: "moved-to",
    0x100: "create",
    0x200: "delete",
    0x400: "delete-self",
    0x800: "move-self",
}


def available() -> bool:
    return sys.platform.startswith("linux") and hasattr(_libc, "inotify_init1")


class OutsideWatch:
    """with OutsideWatch(dir) as events: ...  -> events lists (path, what) for everything that touched dir's tree."""

    def __init__(self, *roots: str):
        self.roots = roots
        self.events: list[tuple[str, str]] = []

    def __enter__(self) -> list[tuple[str, str]]:
        self.fd = _libc.inotify_init1(IN_NONBLOCK)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        self.wd: dict[int, str] = {}
        dirs = [d for root in self.roots for d, _, _ in os.walk(root)]  # listed before any watch exists
        for d in dirs:
            wd = _libc.inotify_add_watch(self.fd, os.fsencode(d), IN_ALL)
            if wd < 0:
                raise OSError(ctypes.get_errno(), f"inotify_add_watch {d}")
            self.wd[wd] = d
        self._drain()  # nothing before this point counts
        self.events.clear()
        return self.events

    def __exit__(self, *exc) -> None:
        try:
            self._drain()
        finally:
            os.close(self.fd)

    def _drain(self) -> None:
        while True:
            try:
                buf = os.read(self.fd, 65536)
            except BlockingIOError:
                return
            pos = 0
            while pos < len(buf):
                wd, mask, _, n = struct.unpack_from("iIII", buf, pos)
                name = buf[pos + 16 : pos + 16 + n].rstrip(b"\0").decode(errors="replace")
                pos += 16 + n
                if mask & 0x8000:  # IN_IGNORED: the watch went away
                    continue
                what = ",".join(v for k, v in NAMES.items() if mask & k)
                self.events.append((os.path.join(self.wd.get(wd, "?"), name), what))


def snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under root (links not followed): type, permission bits, bytes or link target."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            rel = os.path.relpath(p, root)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISREG(st.st_mode):
                with open(p, "rb") as fh:
                    out[rel] = ("file", st.st_mode & 0o7777, fh.read())
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir",)
            else:
                out[rel] = ("other", stat.S_IFMT(st.st_mode))
    return out
