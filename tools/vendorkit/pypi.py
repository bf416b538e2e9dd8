"""`pypi:NAME[==VERSION]` through the package index the user has, the way pip reaches it: every file of the release.

- Index: --index-url, else PIP_INDEX_URL, else pip's configuration files (global, user, site, PIP_CONFIG_FILE; the
  [global] then [download] section's index-url), else SM120_PYPI_INDEX (an index for these tools alone), else
  https://pypi.org/simple.
- The Simple API: PEP 691 JSON when the index offers it, else the PEP 503 HTML page; file URLs are resolved against
  the page's URL (caching proxies answer with relative ones); hashes come from the index (`hashes` or `#sha256=`).
  The newest release is the highest PEP 440 version with a file that is not yanked, pre-releases only when
  nothing else exists; a pinned version takes yanked files too, as pip does.
- A release is every file the index lists for that version (each wheel, each sdist): pip installs a different one
  on each platform, so each is checked, each named in the report with its platform tags. Each is downloaded
  (streamed to an anonymous temporary file, one at a time) and its sha256 checked against the index's before
  it is read; a file the index gives no sha256 for is read and labelled unverified.
- `ranges=True` (`--range-reads`) reads wheels in place with HTTP range requests instead (the zip directory and
  the members compared: a 336 MB wheel costs a few MB). Nothing then proves the bytes read are the file's, so
  such a check is labelled unverified in every report; it is never the default.
All HTTP goes through vendorkit.net: total deadlines, size caps, bounded decoding, the run budget.
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
from typing import Iterator

from . import net
from .errors import CannotCheck, UsageError
from .limits import ARCHIVE_MAX_BYTES
from .versions import is_prerelease, pep440_key

DEFAULT_INDEX = "https://pypi.org/simple"
ACCEPT = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.1"
PAGE_MAX_BYTES = 64 << 20   # a project page (decoded)
_FILENAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+!-]{0,200}")
_HEX64 = re.compile(r"[0-9a-f]{64}")


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
        except (configparser.Error, UnicodeDecodeError, OSError):
            continue
        for section in ("global", "download"):
            for key in ("index-url", "index_url"):
                if cp.has_option(section, key):
                    found = cp.get(section, key).strip()
    return found or None


def index_url(explicit: str | None = None) -> str:
    url = explicit or os.environ.get("PIP_INDEX_URL") or _pip_config_index() or os.environ.get(
        "SM120_PYPI_INDEX") or DEFAULT_INDEX
    if not url.startswith(("http://", "https://")):
        raise UsageError(f"index URL {url!r}: expected http(s)://...")
    return url.rstrip("/")


@dataclass
class Dist:
    filename: str
    url: str
    version: str
    sha256: str | None
    yanked: bool
    integrity: str = "not read"   # after opening: "sha256 verified", "no sha256 from the index", "range reads (...)"

    @property
    def platforms(self) -> str:
        """The platform tags pip matches a wheel by (`py3-none-any`, `cp312-cp312-manylinux_2_28_x86_64`), or
        `sdist`."""
        if not self.filename.endswith(".whl"):
            return "sdist"
        parts = self.filename[:-4].split("-")
        return "-".join(parts[-3:]) if len(parts) >= 5 else "?"


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


def _json_entries(doc) -> list[tuple]:
    """(filename, url, sha256, yanked) of a PEP 691 page; entries of the wrong shape are skipped."""
    files = doc.get("files") if isinstance(doc, dict) else None
    if not isinstance(files, list):
        raise ValueError("no files list")
    out = []
    for f in files:
        if not isinstance(f, dict):
            continue
        hashes = f.get("hashes")
        sha = hashes.get("sha256") if isinstance(hashes, dict) else None
        out.append((f.get("filename"), f.get("url"), sha, bool(f.get("yanked"))))
    return out


def project_files(name: str, index: str, session=None) -> list[Dist]:
    """Every file of `name` the index lists (PEP 691 JSON, else PEP 503 HTML), URLs resolved against the page."""
    import requests

    http = _session(session)
    page = f"{index}/{normalize(name)}/"
    try:
        r = net.request(http, "GET", page, headers={"Accept": ACCEPT}, cap=PAGE_MAX_BYTES,
                        what=f"pypi:{name}: the index page")
    except requests.RequestException as e:
        raise CannotCheck(f"pypi:{name}: {type(e).__name__} on {page}") from None
    if r.status_code == 404:
        raise CannotCheck(f"pypi:{name}: not on the index (404 from {index})")
    if r.status_code != 200:
        raise CannotCheck(f"pypi:{name}: the index answered {r.status_code} for {page}")
    base = r.url or page
    if "json" in r.headers.get("Content-Type", ""):
        try:
            entries = _json_entries(r.json())
        except (ValueError, KeyError, TypeError, AttributeError):
            raise CannotCheck(f"pypi:{name}: the index's JSON page is not the Simple API (PEP 691)") from None
    else:
        parser = _Links()
        try:
            parser.feed(r.text)
            parser.close()
        except (AssertionError, ValueError, RecursionError):  # html.parser on crafted markup
            raise CannotCheck(f"pypi:{name}: the index's HTML page cannot be parsed") from None
        entries = []
        for href, text, yanked in parser.links:
            frag = urllib.parse.urlsplit(href).fragment
            sha = frag.split("=", 1)[1] if frag.startswith("sha256=") else None
            entries.append((text or urllib.parse.unquote(href.split("#")[0].rsplit("/", 1)[-1]), href, sha, yanked))
    out: list[Dist] = []
    for filename, href, sha, yanked in entries:
        if not isinstance(filename, str) or not _FILENAME.fullmatch(filename) or not isinstance(href, str):
            continue
        version = _version_of(name, filename)
        if version is None:
            continue
        try:
            url = urllib.parse.urljoin(base, href).split("#")[0]
        except ValueError:
            continue
        if not url.startswith(("http://", "https://")):
            continue
        if sha is not None and not (isinstance(sha, str) and _HEX64.fullmatch(sha)):
            sha = None
        out.append(Dist(filename, url, version, sha, yanked))
    return out


def release(name: str, version: str | None, index: str, session=None) -> tuple[str, list[Dist]]:
    """(version, every file of it) of NAME==VERSION, or of the newest release."""
    files = project_files(name, index, session)
    if version is not None:
        want = pep440_key(version)
        chosen = [f for f in files if want is not None and pep440_key(f.version) == want]
        if not chosen:
            raise CannotCheck(f"pypi:{name}=={version}: not on the index (it lists no such version)")
        return chosen[0].version, sorted(chosen, key=lambda d: d.filename)
    live = [f for f in files if not f.yanked and pep440_key(f.version) is not None]
    final = [f for f in live if not is_prerelease(f.version)]
    pool = final or live
    if not pool:
        raise CannotCheck(f"pypi:{name}: the index lists no installable release")
    newest = max(pool, key=lambda f: pep440_key(f.version)).version
    return newest, sorted((f for f in pool if f.version == newest), key=lambda d: d.filename)


class RangeFile:
    """A read-only, seekable view of a remote file through HTTP range requests, in cached blocks, so that zipfile
    reads the directory and the members it needs without the rest. `transferred` counts the bytes received.
    Unverified: nothing proves the ranges are the bytes a download would give."""

    BLOCK = 256 << 10
    KEEP = 64  # blocks cached (16 MiB)
    MAX_READ = 64 << 20  # one read() (zipfile reads a central directory in one: a crafted one claims gigabytes)

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
        pos = {0: offset, 1: self.pos + offset, 2: self.size + offset}[whence]
        if pos < 0:
            raise OSError("negative seek")
        self.pos = pos
        return self.pos

    def _block(self, i: int) -> bytes:
        if i not in self._blocks:
            import requests

            lo, hi = i * self.BLOCK, min(self.size, (i + 1) * self.BLOCK) - 1
            try:
                r = net.request(self.http, "GET", self.url, headers={"Range": f"bytes={lo}-{hi}"},
                                cap=self.BLOCK, what=f"bytes {lo}-{hi} of {self.url}", decode=False)
            except requests.RequestException as e:
                raise OSError(f"range request {lo}-{hi}: {type(e).__name__}") from None
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
        if end - self.pos > self.MAX_READ:
            raise OSError(f"a read of {end - self.pos:,} bytes at offset {self.pos:,}, over the "
                          f"{self.MAX_READ >> 20} MiB one range read takes (a crafted zip directory?)")
        out = []
        while self.pos < end:
            i = self.pos // self.BLOCK
            block = self._block(i)
            off = self.pos - i * self.BLOCK
            take = block[off: off + end - self.pos]
            if not take:
                break
            out.append(take)
            self.pos += len(take)
        return b"".join(out)

    def close(self) -> None:
        self._blocks.clear()


def _probe_ranges(http, url: str):
    """A RangeFile when the server says it serves byte ranges of `url` (a HEAD request, as pip's lazy wheel
    asks), else None; nothing of the file is transferred here."""
    try:
        r = net.request(http, "HEAD", url, cap=0, what=f"HEAD {url}")
    except Exception:  # noqa: BLE001 - any failure here means "no ranges"; the download reports real errors
        return None
    size = r.headers.get("Content-Length", "")
    if r.status_code != 200 or r.headers.get("Accept-Ranges", "").lower() != "bytes" or not size.isdigit() \
            or len(size) > 15:
        return None
    return RangeFile(http, r.url or url, int(size))


class _HashingSink:
    """Where a download goes: a file, hashed on the way, with a progress line on a terminal."""

    def __init__(self, out, filename: str):
        self.out, self.h = out, hashlib.sha256()
        self.tty, self.filename, self.n = sys.stderr.isatty(), filename, 0

    def write(self, data: bytes) -> None:
        self.h.update(data)
        self.out.write(data)
        self.n += len(data)
        if self.tty:
            sys.stderr.write(f"\rdownloading {self.filename}: {self.n / 1e6:.1f} MB")


def download(dist: Dist, label: str, session=None):
    """The whole file, streamed to an anonymous temporary file (at most ARCHIVE_MAX_BYTES), checked against the
    index's sha256 when it gives one; a progress line on stderr when it is a terminal."""
    import requests

    http = _session(session)
    out = tempfile.TemporaryFile()
    sink = _HashingSink(out, dist.filename)
    try:
        r = net.request(http, "GET", dist.url, cap=ARCHIVE_MAX_BYTES, what=f"{label}: the download",
                        sink=sink, decode=False)
        if sink.tty:
            sys.stderr.write("\n")
        if r.status_code != 200:
            raise CannotCheck(f"{label}: download answered {r.status_code}")
    except requests.RequestException as e:
        out.close()
        raise CannotCheck(f"{label}: download failed ({type(e).__name__})") from None
    except BaseException:
        out.close()
        raise
    if dist.sha256 and sink.h.hexdigest() != dist.sha256:
        out.close()
        raise CannotCheck(f"{label}: the downloaded file does not match the index's sha256 (truncated or "
                          f"replaced in transit?)")
    dist.integrity = "sha256 verified" if dist.sha256 else "no sha256 from the index (unverified)"
    out.seek(0)
    return out


def open_dist(dist: Dist, label: str, session=None, ranges: bool = False):
    """A seekable file object of the distribution: downloaded and checked (the default), or read in place with
    range requests when `ranges` and the server offers them (wheels only; labelled unverified)."""
    http = _session(session)
    if ranges and dist.filename.endswith(".whl"):
        remote = _probe_ranges(http, dist.url)
        if remote is not None:
            dist.integrity = "range reads (unverified: the index's sha256 is not checked)"
            return remote
    return download(dist, label, http)


class ReleaseView:
    """Every file of one release of a project on an index. `parts()` opens them one at a time (each as an
    ArchiveFork: a wheel as installed, an sdist as its source tree) and closes each after use."""

    def __init__(self, name: str, version: str | None, index: str, session=None, ranges: bool = False):
        self.name, self.index, self.ranges = name, index, ranges
        self.http = _session(session)
        self.version, self.dists = release(name, version, index, self.http)
        self.label = f"pypi:{name}=={self.version}"
        self.digest_kind = "sha256"

    def part_label(self, d: Dist) -> str:
        return f"{self.label} ({d.filename})"

    def open(self, d: Dist):
        from .archive import ArchiveFork

        label = self.part_label(d)
        fh = open_dist(d, label, self.http, self.ranges)
        try:
            return ArchiveFork(fh, label, wheel=d.filename.endswith(".whl"))
        except BaseException:
            fh.close()
            raise

    def parts(self) -> Iterator[tuple[Dist, object]]:
        for d in self.dists:
            view = self.open(d)
            try:
                yield d, view
            finally:
                view.close()

    def single(self):
        """The one file of a release that has exactly one (for sources that must be one tree)."""
        if len(self.dists) != 1:
            names = ", ".join(d.filename for d in self.dists)
            raise UsageError(f"{self.label} has {len(self.dists)} files ({names}): name one, e.g. download it "
                             f"and pass the wheel's path")
        return self.open(self.dists[0])
