"""`pypi:NAME[==VERSION]` through the package index the user has, the way pip reaches it.

- Index: --index-url, else PIP_INDEX_URL, else pip's configuration files (global, user, site, PIP_CONFIG_FILE; the
  [global] then [download] section's index-url), else https://pypi.org/simple.
- The Simple API: PEP 691 JSON when the index offers it, else the PEP 503 HTML page; file URLs are resolved against
  the page's URL (caching proxies answer with relative ones); hashes come from the index (`hashes` or `#sha256=`).
  The newest release is the highest PEP 440 version with a file that is not yanked, pre-releases only when
  nothing else exists; a pinned version takes yanked files too, as pip does.
- Wheels are read in place with HTTP range requests when the server honours them: the zip directory and the
  members the comparison needs, nothing else (a 336 MB wheel costs a few MB). Otherwise, and for sdists, the file
  is streamed to an anonymous temporary file (a progress line on a terminal) and checked against the index's
  sha256. A range read cannot check the index's whole-file hash; each member read is checked against its zip
  CRC-32, and `SM120_FULL_DOWNLOAD=1` forces the checked download.
"""
from __future__ import annotations

import configparser
import hashlib
import html.parser
import os
import re
import sys
import tempfile
import urllib.parse
from dataclasses import dataclass

from .errors import CannotCheck, UsageError
from .limits import ARCHIVE_MAX_BYTES
from .versions import is_prerelease, pep440_key

DEFAULT_INDEX = "https://pypi.org/simple"
ACCEPT = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.1"
_FILENAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+!-]{0,200}$")


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pip_config_index() -> str | None:
    """index-url from pip's configuration files, in pip's order (a later file wins)."""
    env_file = os.environ.get("PIP_CONFIG_FILE")
    if env_file == os.devnull:
        return None
    xdg_dirs = os.environ.get("XDG_CONFIG_DIRS", "/etc/xdg").split(os.pathsep)
    files = [os.path.join(d, "pip", "pip.conf") for d in xdg_dirs] + ["/etc/pip.conf"]
    if not (env_file and os.path.exists(env_file)):
        home = os.path.expanduser("~")
        files += [os.path.join(home, ".pip", "pip.conf"),
                  os.path.join(os.environ.get("XDG_CONFIG_HOME", os.path.join(home, ".config")), "pip", "pip.conf")]
    files.append(os.path.join(sys.prefix, "pip.conf"))
    if env_file:
        files.append(env_file)
    found = None
    for path in files:
        cp = configparser.RawConfigParser()
        try:
            cp.read(path, encoding="utf-8")
        except (configparser.Error, UnicodeDecodeError):
            continue
        for section in ("global", "download"):
            for key in ("index-url", "index_url"):
                if cp.has_option(section, key):
                    found = cp.get(section, key).strip()
    return found or None


def index_url(explicit: str | None = None) -> str:
    url = explicit or os.environ.get("PIP_INDEX_URL") or _pip_config_index() or os.environ.get(
        "SM120_PYPI_INDEX") or DEFAULT_INDEX
    if not url.startswith(("http://", "https://", "file://")):
        raise UsageError(f"index URL {url!r}: expected http(s)://...")
    return url.rstrip("/")


@dataclass
class Dist:
    filename: str
    url: str
    version: str
    sha256: str | None
    yanked: bool


def _version_of(project: str, filename: str) -> str | None:
    """The version a wheel or sdist file name carries, or None for files of another project or another kind."""
    norm = normalize(project)
    if filename.endswith(".whl"):
        parts = filename[:-4].split("-")
        return parts[1] if len(parts) >= 5 and normalize(parts[0]) == norm else None
    for ext in (".tar.gz", ".zip", ".tgz"):
        if filename.endswith(ext):
            name, _, version = filename[: -len(ext)].rpartition("-")
            return version if normalize(name) == norm and version else None
    return None


class _Links(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.links: list[tuple[str, str, bool]] = []
        self._href: tuple[str, bool] | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            a = dict(attrs)
            self._href, self._text = (a.get("href") or "", "data-yanked" in a), []

    def handle_data(self, data):
        if self._href is not None:
            self._text.append(data)

    def handle_endtag(self, tag):
        if tag == "a" and self._href is not None:
            self.links.append((self._href[0], "".join(self._text).strip(), self._href[1]))
            self._href = None


def _session(session=None):
    if session is not None:
        return session
    try:
        import requests
    except ImportError:
        raise UsageError("pypi: sources need requests: python -m pip install requests") from None
    return requests.Session()


def project_files(name: str, index: str, session=None) -> list[Dist]:
    """Every file of `name` the index lists (PEP 691 JSON, else PEP 503 HTML), URLs resolved against the page."""
    import requests

    http = _session(session)
    page = f"{index}/{normalize(name)}/"
    try:
        r = http.get(page, headers={"Accept": ACCEPT}, timeout=30)
    except requests.RequestException as e:
        raise CannotCheck(f"pypi:{name}: {type(e).__name__} on {page}") from None
    if r.status_code == 404:
        raise CannotCheck(f"pypi:{name}: not on the index (404 from {index})")
    if r.status_code != 200:
        raise CannotCheck(f"pypi:{name}: the index answered {r.status_code} for {page}")
    base = r.url or page
    ctype = r.headers.get("Content-Type", "")
    out: list[Dist] = []
    if "json" in ctype:
        try:
            files = r.json()["files"]
            entries = [(f["filename"], f["url"], (f.get("hashes") or {}).get("sha256"), bool(f.get("yanked")))
                       for f in files]
        except (ValueError, KeyError, TypeError):
            raise CannotCheck(f"pypi:{name}: the index's JSON page is not the Simple API (PEP 691)") from None
    else:
        parser = _Links()
        parser.feed(r.text)
        entries = []
        for href, text, yanked in parser.links:
            frag = urllib.parse.urlsplit(href).fragment
            sha = frag.split("=", 1)[1] if frag.startswith("sha256=") else None
            entries.append((text or urllib.parse.unquote(href.split("#")[0].rsplit("/", 1)[-1]), href, sha, yanked))
    for filename, href, sha, yanked in entries:
        if not isinstance(filename, str) or not _FILENAME.match(filename) or not isinstance(href, str):
            continue
        version = _version_of(name, filename)
        if version is None:
            continue
        url = urllib.parse.urljoin(base, href).split("#")[0]
        if sha is not None and not re.match(r"^[0-9a-f]{64}$", str(sha)):
            sha = None
        out.append(Dist(filename, url, version, sha, yanked))
    return out


def _pick(files: list[Dist]) -> Dist:
    """A wheel if the release has one (a platform-independent one first, then x86-64), else the sdist."""
    wheels = sorted((f for f in files if f.filename.endswith(".whl")),
                    key=lambda f: (not f.filename.endswith("-none-any.whl"), "x86_64" not in f.filename, f.filename))
    sdists = [f for f in files if not f.filename.endswith(".whl")]
    if wheels:
        return wheels[0]
    if sdists:
        return sdists[0]
    raise CannotCheck("the release has no wheel or sdist to check")


def release(name: str, version: str | None, index: str, session=None) -> tuple[str, Dist]:
    """(version, the file to check) of NAME==VERSION, or of the newest release."""
    files = project_files(name, index, session)
    if version is not None:
        want = pep440_key(version)
        chosen = [f for f in files if pep440_key(f.version) == want]
        if not chosen:
            raise CannotCheck(f"pypi:{name}=={version}: not on the index (it lists no such version)")
        return chosen[0].version, _pick(chosen)
    live = [f for f in files if not f.yanked and pep440_key(f.version) is not None]
    final = [f for f in live if not is_prerelease(f.version)]
    pool = final or live
    if not pool:
        raise CannotCheck(f"pypi:{name}: the index lists no installable release")
    newest = max(pool, key=lambda f: pep440_key(f.version)).version
    return newest, _pick([f for f in pool if f.version == newest])


class RangeFile:
    """A read-only, seekable view of a remote file through HTTP range requests, in cached blocks, so that zipfile
    reads the directory and the members it needs without the rest. `transferred` counts the bytes received."""

    BLOCK = 256 << 10
    KEEP = 64  # blocks cached (16 MiB)

    def __init__(self, http, url: str, size: int):
        self.http, self.url, self.size = http, url, size
        self.pos, self.transferred = 0, 0
        self._blocks: dict[int, bytes] = {}

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = {0: offset, 1: self.pos + offset, 2: self.size + offset}[whence]
        return self.pos

    def _block(self, i: int) -> bytes:
        if i not in self._blocks:
            lo, hi = i * self.BLOCK, min(self.size, (i + 1) * self.BLOCK) - 1
            r = self.http.get(self.url, headers={"Range": f"bytes={lo}-{hi}"}, timeout=60)
            if r.status_code != 206 or len(r.content) != hi - lo + 1:
                raise OSError(f"range request {lo}-{hi} answered {r.status_code} ({len(r.content)} bytes)")
            data = r.content
            self.transferred += len(data)
            if len(self._blocks) >= self.KEEP:
                self._blocks.pop(next(iter(self._blocks)))
            self._blocks[i] = data
        return self._blocks[i]

    def read(self, n: int = -1) -> bytes:
        end = self.size if n is None or n < 0 else min(self.size, self.pos + n)
        out = []
        while self.pos < end:
            i = self.pos // self.BLOCK
            block = self._block(i)
            off = self.pos - i * self.BLOCK
            take = block[off: off + end - self.pos]
            out.append(take)
            self.pos += len(take)
        return b"".join(out)

    def close(self) -> None:
        self._blocks.clear()


def _probe_ranges(http, url: str):
    """A RangeFile when the server says it serves byte ranges of `url` (a HEAD request, as pip's lazy wheel
    asks), else None; nothing of the file is transferred here."""
    try:
        r = http.head(url, timeout=60, allow_redirects=True)
    except Exception:  # noqa: BLE001 - any failure here means "no ranges"; the download reports real errors
        return None
    size = r.headers.get("Content-Length", "")
    if r.status_code != 200 or r.headers.get("Accept-Ranges", "").lower() != "bytes" or not size.isdigit():
        return None
    return RangeFile(http, r.url or url, int(size))


def download(dist: Dist, label: str, session=None):
    """The whole file, streamed to an anonymous temporary file (at most ARCHIVE_MAX_BYTES), checked against the
    index's sha256; a progress line on stderr when it is a terminal."""
    import requests

    http = _session(session)
    h = hashlib.sha256()
    out = tempfile.TemporaryFile()
    tty = sys.stderr.isatty()
    try:
        with http.get(dist.url, timeout=120, stream=True) as r:
            if r.status_code != 200:
                raise CannotCheck(f"{label}: download answered {r.status_code}")
            total = int(r.headers.get("Content-Length") or 0)
            for chunk in r.iter_content(1 << 20):
                h.update(chunk)
                out.write(chunk)
                if out.tell() > ARCHIVE_MAX_BYTES:
                    raise CannotCheck(f"{label}: larger than {ARCHIVE_MAX_BYTES >> 20} MiB; not downloaded further")
                if tty:
                    sys.stderr.write(f"\rdownloading {dist.filename}: {out.tell() / 1e6:.1f}"
                                     + (f" / {total / 1e6:.1f}" if total else "") + " MB")
        if tty:
            sys.stderr.write("\n")
    except requests.RequestException as e:
        out.close()
        raise CannotCheck(f"{label}: download failed ({type(e).__name__})") from None
    except BaseException:
        out.close()
        raise
    if dist.sha256 and h.hexdigest() != dist.sha256:
        out.close()
        raise CannotCheck(f"{label}: the downloaded file does not match the index's sha256 (truncated?)")
    out.seek(0)
    return out


def open_dist(dist: Dist, label: str, session=None):
    """A seekable file object of the distribution: range-read in place when possible (wheels), else downloaded."""
    http = _session(session)
    if dist.filename.endswith(".whl") and os.environ.get("SM120_FULL_DOWNLOAD") != "1":
        remote = _probe_ranges(http, dist.url)
        if remote is not None:
            return remote
    return download(dist, label, http)
