"""What a checkout of a git tree writes, asked of git itself in a sandbox repository this module creates.

A checkout does not always write a blob's bytes: the tree's `.gitattributes` can convert line endings, expand
`$Id$`, re-encode, or name a filter. git's attribute language has many corners (macros resolved over the whole
attribute stack, POSIX bracket classes, lines it ignores, quoting rules, symlinked attribute files), and an
emulation of it was shown to disagree with git. So the question goes to git: the blobs that matter (the files
compared and every `.gitattributes` on their way) are written, as data, into a fresh repository in a temporary
directory with a configuration written here (git's defaults for a fresh clone on Linux: no autocrlf, LF, symlinks,
no hooks, no fsmonitor, no attributes file, no filter drivers, protocols off; system and global configuration
ignored), committed with `git fast-import`, and checked out with `git checkout`. The bytes git writes there are
the view. The fork's repository, its configuration, hooks and object database are never touched by git: only
blob contents, which git parses in every clone anyway. Each git process runs under the run budget's memory and
time. A `filter` attribute is reported: what it does depends on the cloner's configuration.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
import time

from . import budget
from .errors import CannotCheck
from .safefs import ForkRoot, NotRegular, UnsafePath

CONFIG = (
    "core.autocrlf=false",
    "core.eol=lf",
    "core.symlinks=true",
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.attributesFile=/dev/null",
    "core.protectNTFS=true",
    "protocol.allow=never",
    "core.safecrlf=false",
    "advice.detachedHead=false",
    "gc.auto=0",
    "init.defaultBranch=sm120",
)
ATTRS = ("text", "eol", "crlf", "filter", "ident", "working-tree-encoding")


def _env(home: str) -> dict:
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "SYSTEMROOT", "TMPDIR", "TEMP", "TMP")}
    return {
        **keep,
        "HOME": home,
        "XDG_CONFIG_HOME": home,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_ATTR_NOSYSTEM": "1",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_NO_REPLACE_OBJECTS": "1",
        "LC_ALL": "C",
        "GIT_OPTIONAL_LOCKS": "0",
    }


def _quote(path: str) -> str:
    """A path as fast-import takes it: C-quoted, every byte that is not printable ASCII as octal."""
    out = []
    for b in os.fsencode(path):
        c = chr(b)
        out.append("\\" + c if c in '\\"' else c if 0x20 <= b < 0x7F else f"\\{b:03o}")
    return '"' + "".join(out) + '"'


class Sandbox:
    """A throw-away repository holding one commit of the given files."""

    def __init__(self, files: dict[str, tuple[str, bytes]]):
        if shutil.which("git") is None:
            raise CannotCheck(
                "this tree has .gitattributes, and git is needed to know what a checkout of it writes (install git)"
            )
        self.tmp = tempfile.mkdtemp(prefix="sm120-checkout-")
        self.repo = os.path.join(self.tmp, "r")
        self.env = _env(self.tmp)
        try:
            self._git("init", "-q", self.repo, cwd=self.tmp)
            self._fast_import(files)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _git(self, *args: str, cwd: str | None = None, stdin: bytes | None = None) -> bytes:
        b = budget.current()
        left = b.deadline - time.monotonic()
        if left <= 0:
            b.check_time("git checkout")
        cmd = ["git"] + [x for c in CONFIG for x in ("-c", c)] + list(args)
        kw = {}
        if os.name == "posix":
            from .isolate import ChildLimits, _set_limits

            kw["preexec_fn"] = _set_limits(ChildLimits(memory=b.limits.memory, cpu_seconds=int(left) + 1))
        try:
            p = subprocess.run(
                cmd, cwd=cwd or self.repo, input=stdin, env=self.env, capture_output=True, timeout=left, **kw
            )
        except subprocess.TimeoutExpired:
            raise budget.BudgetExceeded("seconds", "while git checked the tree out") from None
        if p.returncode != 0:
            msg = p.stderr.decode("utf-8", "replace").strip().splitlines()
            raise CannotCheck(f"a checkout of this tree fails: git {args[0]}: {msg[-1] if msg else p.returncode}")
        return p.stdout

    def _fast_import(self, files: dict[str, tuple[str, bytes]]) -> None:
        stream = []
        for i, (_path, (_mode, data)) in enumerate(sorted(files.items()), 1):
            stream += [b"blob\nmark :%d\ndata %d\n" % (i, len(data)), data, b"\n"]
        stream.append(b"commit refs/heads/sm120\ncommitter sm120 <sm120@invalid> 0 +0000\ndata 0\n")
        for i, (path, (mode, _data)) in enumerate(sorted(files.items()), 1):
            stream.append(f"M {mode} :{i} {_quote(path)}\n".encode())
        stream.append(b"\n")
        self._git("fast-import", "--quiet", stdin=b"".join(stream))

    def checkout(self) -> None:
        self._git("checkout", "-q", "-f", "sm120")

    def attributes(self, paths: list[str]) -> dict[str, dict[str, str]]:
        """path -> {attribute: value} of the set ones (git check-attr, from the commit's .gitattributes)."""
        self._git("read-tree", "sm120")
        out = self._git(
            "check-attr", "--cached", "-z", "--stdin", *ATTRS, stdin=b"".join(os.fsencode(p) + b"\0" for p in paths)
        )
        parts = out.split(b"\0")
        found: dict[str, dict[str, str]] = {p: {} for p in paths}
        for i in range(0, len(parts) - 2, 3):
            path, attr, value = (os.fsdecode(x) for x in parts[i : i + 3])
            if value != "unspecified" and path in found:
                found[path][attr] = value
        return found

    def read(self, path: str) -> tuple[str, bytes]:
        """("file" | "symlink" | "other", bytes or link text) of what the checkout wrote at `path`."""
        with ForkRoot(self.repo) as fs:
            try:
                st = fs.lstat(path)
            except UnsafePath:
                return "other", b""
            if st is None:
                return "other", b""
            if stat.S_ISLNK(st.st_mode):
                return "symlink", os.fsencode(fs.readlink(path))
            try:
                return "file", fs.read_bytes(path)
            except (NotRegular, OSError):
                return "other", b""


def needs_git(paths) -> list[str]:
    """The .gitattributes files among `paths` (a tree's): a checkout of the tree depends on them."""
    return [p for p in paths if p.rsplit("/", 1)[-1] == ".gitattributes"]


def on_the_way(attr_files: list[str], prefix: str) -> list[str]:
    """The attribute files that can apply below `prefix`: those in its ancestors and inside it."""
    pre = f"{prefix}/" if prefix else ""
    out = []
    for p in attr_files:
        d = p.rpartition("/")[0]
        if p.startswith(pre) or d == "" or pre.startswith(d + "/"):
            out.append(p)
    return out


def checkout_bytes(
    files: dict[str, tuple[str, bytes]], wanted: list[str]
) -> tuple[dict[str, tuple[str, bytes]], dict[str, str]]:
    """({path: (kind, bytes)} a checkout of `files` writes for each wanted path, {path: filter driver} for the
    wanted files that name a filter)."""
    b = budget.current()
    size = sum(len(d) for _, d in files.values())
    b.hold(size, "a checkout")
    try:
        with Sandbox(files) as sb:
            attrs = sb.attributes(wanted)
            sb.checkout()
            out = {p: sb.read(p) for p in wanted}
    finally:
        b.release(size)
    filters = {p: a["filter"] for p, a in attrs.items() if a.get("filter") not in (None, "unset")}
    return out, filters


def attributes_of(attr_files: dict[str, tuple[str, bytes]], paths: list[str]) -> dict[str, dict[str, str]]:
    """{path: {attribute: value}} the given .gitattributes files give `paths` (for sources whose file bytes cost a
    request each: only files with conversion attributes need them)."""
    with Sandbox(attr_files) as sb:
        return sb.attributes(paths)
