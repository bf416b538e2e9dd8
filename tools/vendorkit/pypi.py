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
import posixpath
import re
import sys
import tempfile
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass

from . import budget, net, pip_select
from .errors import CannotCheck, UsageError
from .limits import ARCHIVE_MAX_BYTES
from .versions import pep440_key

DEFAULT_INDEX = "https://pypi.org/simple"
ACCEPT = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.1"
PAGE_MAX_BYTES = 64 << 20  # a project page (decoded)
_HEX64 = re.compile(r"[0-9a-f]{64}")


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pip_config() -> dict[str, str]:
    """index-url, extra-index-url, find-links and no-index from pip's configuration files, in pip's order (a later
    file wins) and as `pip install` reads them ([global], then [install] over it)."""
    env_file = os.environ.get("PIP_CONFIG_FILE")
    if env_file == os.devnull:
        return {}
    xdg_dirs = os.environ.get("XDG_CONFIG_DIRS", "/etc/xdg").split(os.pathsep)
    files = [os.path.join(d, "pip", "pip.conf") for d in xdg_dirs] + ["/etc/pip.conf"]
    if not (env_file and os.path.exists(env_file)):
        home = os.path.expanduser("~")
        files += [
            os.path.join(home, ".pip", "pip.conf"),
            os.path.join(os.environ.get("XDG_CONFIG_HOME", os.path.join(home, ".config")), "pip", "pip.conf"),
        ]
    files.append(os.path.join(sys.prefix, "pip.conf"))
    if env_file:
        files.append(env_file)
    found: dict[str, str] = {}
    for path in files:
        cp = configparser.RawConfigParser()
        try:
            cp.read(path, encoding="utf-8")
        except (configparser.Error, UnicodeDecodeError, OSError):
            continue
        for section in ("global", "install"):
            for key in ("index-url", "extra-index-url", "find-links", "no-index"):
                for spelled in (key, key.replace("-", "_")):
                    if cp.has_option(section, spelled):
                        found[key] = cp.get(section, spelled).strip()
    return found


def index_urls(explicit: str | None = None) -> list[str]:
    """The places pip reads: --index-url alone when given; else PIP_INDEX_URL, else pip's configuration, else
    SM120_PYPI_INDEX (an index for these tools alone), else PyPI, then the extra indexes pip adds
    (PIP_EXTRA_INDEX_URL, extra-index-url) and its find-links locations (PIP_FIND_LINKS, find-links; written
    `find-links:LOCATION`). http(s) and file: indexes; no-index drops the indexes, as in pip."""
    if explicit:
        urls = [explicit]
    else:
        conf = _pip_config()
        no_index = (os.environ.get("PIP_NO_INDEX") or conf.get("no-index") or "").lower() in ("1", "true", "yes", "on")
        main = (
            os.environ.get("PIP_INDEX_URL")
            or conf.get("index-url")
            or os.environ.get("SM120_PYPI_INDEX")
            or DEFAULT_INDEX
        )
        extra = (os.environ.get("PIP_EXTRA_INDEX_URL") or conf.get("extra-index-url") or "").split()
        links = (os.environ.get("PIP_FIND_LINKS") or conf.get("find-links") or "").split()
        urls = ([] if no_index else [main] + extra) + [f"find-links:{u}" for u in links]
    for url in urls:
        if not url.startswith(("http://", "https://", "file:", "find-links:")):
            raise UsageError(f"index URL {url!r}: expected http(s)://... or file:...")
    return list(dict.fromkeys(u if u.startswith("find-links:") else u.rstrip("/") for u in urls))


def index_url(explicit: str | None = None) -> str:
    """The first index (for callers that name one)."""
    return index_urls(explicit)[0]


@dataclass
class Dist:
    filename: str  # from the URL's path, as pip names a file (never the anchor text or a JSON key)
    url: str
    version: str
    sha256: str | None
    yanked: bool
    integrity: str = "not read"  # after opening: "sha256 verified", "no sha256 from the index", "range reads (...)"
    requires_python: str | None = None
    hashes: dict | None = None  # every hash the index gives that pip could check: {algorithm: hex}
    chosen_for: str = ""  # where pip installs this file's version (vendorkit.pip_select.describe)
    egg: str | None = None  # the link's #egg= fragment, which pip reads an sdist's version from
    url_path: str = ""  # the URL's path, unquoted (pip skips a .zip whose path holds "macosx10")

    @property
    def platforms(self) -> str:
        """The platform tags pip matches a wheel by (`py3-none-any`, `cp312-cp312-manylinux_2_28_x86_64`), or
        `sdist`."""
        if not self.filename.endswith(".whl"):
            return "sdist"
        parts = self.filename[:-4].split("-")
        return "-".join(parts[-3:]) if len(parts) >= 5 else "?"


def _version_of(project: str, filename: str) -> str | None:
    """The version pip reads from a wheel or sdist file name, or None for files pip would not take as the
    project's (vendorkit.pip_select)."""
    info = pip_select.parse_filename(filename, project)
    return info.version if info is not None else None


class _Links(html.parser.HTMLParser):
    """pip's reading of a PEP 503 page: every anchor's attributes, and the first <base href>."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.anchors: list[dict] = []
        self.base: str | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "base" and self.base is None:
            href = next((v for k, v in attrs if k == "href"), None)
            if href is not None:
                self.base = href
        elif tag == "a":
            self.anchors.append(dict(attrs))


def _session(session=None):
    if session is not None:
        return session
    try:
        import requests
    except ImportError:
        raise UsageError("pypi: sources need requests: python -m pip install requests") from None
    return requests.Session()


_HASHES = ("sha512", "sha384", "sha256", "sha224", "sha1", "md5")  # pip's, in pip's order
_FRAGMENT_HASH = re.compile(r"[#&](" + "|".join(_HASHES) + r")=([^&]*)")
_EGG = re.compile(r"[#&]egg=([^&]*)")


def _json_entries(doc) -> list[tuple]:
    """(url, hashes, yanked, requires-python) of each file of a PEP 691 page, read as pip reads them: the URL names
    the file; `yanked` counts when truthy; entries of the wrong shape are skipped."""
    files = doc.get("files") if isinstance(doc, dict) else None
    if not isinstance(files, list):
        raise ValueError("no files list")
    out = []
    for f in files:
        if not isinstance(f, dict) or not isinstance(f.get("url"), str):
            continue
        hashes = f.get("hashes") if isinstance(f.get("hashes"), dict) else {}
        rp = f.get("requires-python")
        out.append((f["url"], hashes, bool(f.get("yanked")), rp if isinstance(rp, str) else None))
    return out


def _html_entries(parser: _Links) -> list[tuple]:
    """(href, hashes, yanked, requires-python) of each anchor, read as pip reads them: the href names the file
    (anchor text is ignored); a bare `data-yanked` attribute has no value, which pip does not count as yanked;
    hashes come from the URL's fragment."""
    out = []
    for a in parser.anchors:
        href = a.get("href")
        if not href:
            continue
        m = _FRAGMENT_HASH.search(href)
        hashes = {m.group(1): m.group(2)} if m else {}
        out.append((href, hashes, a.get("data-yanked") is not None, a.get("data-requires-python")))
    return out


def _media(ctype: str) -> str:
    ctype = ctype.lower()
    if ctype.startswith("application/vnd.pypi.simple.v1+json"):
        return "json"
    if ctype.startswith(("text/html", "application/vnd.pypi.simple.v1+html")):
        return "html"
    return ""


def _local(url: str) -> str:
    import urllib.request

    return urllib.request.url2pathname(urllib.parse.urlsplit(url).path) if url.startswith("file:") else url


def _local_page(path: str, url: str) -> net.Response | None:
    """A file: index page as pip reads one: a directory's index.html (None when there is none)."""
    from requests.structures import CaseInsensitiveDict

    if os.path.isdir(path):
        path, url = os.path.join(path, "index.html"), urllib.parse.urljoin(url.rstrip("/") + "/", "index.html")
    try:
        with open(path, "rb") as fh:
            data = fh.read(PAGE_MAX_BYTES + 1)
    except OSError:
        return None
    if len(data) > PAGE_MAX_BYTES:
        raise CannotCheck(f"{path}: an index page larger than {PAGE_MAX_BYTES:,} bytes; not read further")
    return net.Response(200, CaseInsensitiveDict({"Content-Type": "text/html"}), url, data, len(data))


def _find_links(name: str, location: str, session) -> list[Dist]:
    """pip's find-links: a local directory's archives, a local file, or an HTML page of links."""
    path = _local(location)
    if location.startswith(("http://", "https://")):
        return _page_files(name, location, location, session)
    if os.path.isdir(path):
        import urllib.request

        out = []
        for fn in sorted(os.listdir(path)):
            version = _version_of(name, fn)
            if version is not None and os.path.isfile(os.path.join(path, fn)):
                full = os.path.join(os.path.abspath(path), fn)
                out.append(
                    Dist(
                        fn, "file:" + urllib.request.pathname2url(full), version, None, False, hashes={}, url_path=full
                    )
                )
        return out
    return _page_files(name, location, location, session) if os.path.isfile(path) else []


def project_files(name: str, index: str, session=None) -> list[Dist]:
    """Every file of `name` an index (or a find-links location) lists, read as pip reads the page."""
    if index.startswith("find-links:"):
        return _find_links(name, index[len("find-links:") :], session)
    return _page_files(name, index, f"{index}/{normalize(name)}/", session)


def _page_files(name: str, index: str, page: str, session) -> list[Dist]:
    import requests

    if page.startswith("file:") or not page.startswith(("http://", "https://")):
        r = _local_page(_local(page), page if page.startswith("file:") else "file:" + os.path.abspath(page))
        if r is None:
            return []
    else:
        http = _session(session)
        try:
            r = net.request(
                http, "GET", page, headers={"Accept": ACCEPT}, cap=PAGE_MAX_BYTES, what=f"pypi:{name}: the index page"
            )
        except requests.RequestException as e:
            raise CannotCheck(f"pypi:{name}: {type(e).__name__} on {page}") from None
    if r.status_code == 404:
        return []
    if r.status_code != 200:
        raise CannotCheck(f"pypi:{name}: the index answered {r.status_code} for {page}")
    base = r.url or page
    media = _media(r.headers.get("Content-Type", ""))
    if media == "json":
        try:
            entries = _json_entries(r.json())
        except (ValueError, KeyError, TypeError, AttributeError):
            raise CannotCheck(f"pypi:{name}: the index's JSON page is not the Simple API (PEP 691)") from None
    elif media == "html":
        parser = _Links()
        try:
            parser.feed(r.text)
            parser.close()
        except (AssertionError, ValueError, RecursionError):  # html.parser on crafted markup
            raise CannotCheck(f"pypi:{name}: the index's HTML page cannot be parsed") from None
        entries = _html_entries(parser)
        if parser.base:
            try:
                base = urllib.parse.urljoin(base, parser.base)
            except ValueError:
                pass
    else:
        raise CannotCheck(
            f"pypi:{name}: the index answered Content-Type {r.headers.get('Content-Type')!r}, "
            f"which pip does not read as an index page"
        )
    out: list[Dist] = []
    for href, hashes, yanked, rp in entries:
        try:
            url = urllib.parse.urljoin(base, href)
            parts = urllib.parse.urlsplit(url)
        except ValueError:
            continue
        local_page = not page.startswith(("http://", "https://"))
        if parts.scheme not in ("http", "https") and not (parts.scheme == "file" and local_page):
            continue  # a remote page never sends pip to a local file
        # pip's Link.filename: the URL's path unquoted, its last segment, unquoted once more
        path = urllib.parse.unquote(parts.path)
        filename = urllib.parse.unquote(posixpath.basename(path.rstrip("/")))
        egg = _EGG.search(href)
        info = pip_select.parse_filename(filename, name, egg.group(1) if egg else None, path)
        if not filename or info is None or pep440_key(info.version) is None:
            continue
        given = {k: str(v).lower() for k, v in hashes.items() if k in _HASHES and isinstance(v, str)}
        sha = given.get("sha256") if _HEX64.fullmatch(given.get("sha256", "")) else None
        out.append(
            Dist(
                filename,
                url.split("#")[0],
                info.version,
                sha,
                yanked,
                requires_python=rp,
                hashes=given,
                egg=egg.group(1) if egg else None,
                url_path=path,
            )
        )
    return out


def release(name: str, version: str | None, indexes: list[str] | str, session=None) -> tuple[str, list[Dist]]:
    """(a label for the versions, the files to check): every file of each version pip installs on some common
    platform (vendorkit.pip_select), from every index pip reads; NAME==VERSION keeps that version."""
    indexes = [indexes] if isinstance(indexes, str) else indexes
    files: list[Dist] = []
    seen = set()
    for index in indexes:
        for d in project_files(name, index, session):
            if d.url not in seen:
                seen.add(d.url)
                files.append(d)
    if not files:
        raise CannotCheck(f"pypi:{name}: not on the index ({', '.join(indexes)} list no file of it)")
    if version is not None and pep440_key(version) is None:
        raise UsageError(f"pypi:{name}=={version}: {version!r} is not a PEP 440 version")
    choice = pip_select.choose(files, name, version)
    chosen = choice.versions
    if not chosen:
        if version is not None:
            raise CannotCheck(
                f"pypi:{name}=={version}: not on the index (it lists no such version, or none pip could install)"
            )
        live = [k for k in (pep440_key(f.version) for f in files) if k is not None]
        if not live:
            raise CannotCheck(f"pypi:{name}: the index lists no installable release")
        newest = max(live)  # pip installs none of it on a common platform
        chosen = {newest: ["no common platform"]}
    out: list[Dist] = []
    for key in sorted(chosen, reverse=True):
        for d in sorted((f for f in files if pep440_key(f.version) == key), key=lambda d: d.filename):
            d.chosen_for = (
                choice.where(key)
                if chosen[key] != ["no common platform"]
                else "no common platform (the newest release)"
            )
            out.append(d)
    versions = list(dict.fromkeys(d.version for d in out))
    return (versions[0] if len(versions) == 1 else " and ".join(versions)), out


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
                r = net.request(
                    self.http,
                    "GET",
                    self.url,
                    headers={"Range": f"bytes={lo}-{hi}"},
                    cap=self.BLOCK,
                    what=f"bytes {lo}-{hi} of {self.url}",
                    decode=False,
                )
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
            raise OSError(
                f"a read of {end - self.pos:,} bytes at offset {self.pos:,}, over the "
                f"{self.MAX_READ >> 20} MiB one range read takes (a crafted zip directory?)"
            )
        out = []
        while self.pos < end:
            i = self.pos // self.BLOCK
            block = self._block(i)
            off = self.pos - i * self.BLOCK
            take = block[off : off + end - self.pos]
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
    except Exception:
        return None
    size = r.headers.get("Content-Length", "")
    if (
        r.status_code != 200
        or r.headers.get("Accept-Ranges", "").lower() != "bytes"
        or not size.isdigit()
        or len(size) > 15
    ):
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
        if dist.url.startswith("file:"):  # a file: index or find-links directory: copied, as pip reads it
            with open(_local(dist.url), "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    budget.current().take(len(chunk), label)
                    sink.write(chunk)
                    if sink.n > ARCHIVE_MAX_BYTES:
                        raise CannotCheck(f"{label}: larger than {ARCHIVE_MAX_BYTES:,} bytes; not read further")
        else:
            r = net.request(
                http, "GET", dist.url, cap=ARCHIVE_MAX_BYTES, what=f"{label}: the download", sink=sink, decode=False
            )
            if r.status_code != 200:
                raise CannotCheck(f"{label}: download answered {r.status_code}")
        if sink.tty:
            sys.stderr.write("\n")
    except requests.RequestException as e:
        out.close()
        raise CannotCheck(f"{label}: download failed ({type(e).__name__})") from None
    except OSError as e:
        out.close()
        raise CannotCheck(f"{label}: cannot read {dist.url} ({e.strerror or e})") from None
    except BaseException:
        out.close()
        raise
    given = dict(dist.hashes or ({"sha256": dist.sha256} if dist.sha256 else {}))
    for alg, want in given.items():  # every hash the index gives, as pip would check one of them
        h = sink.h if alg == "sha256" else _rehash(out, alg)
        if h.hexdigest() != want:
            out.close()
            raise CannotCheck(
                f"{label}: the downloaded file does not match the index's {alg} (truncated or replaced in transit?)"
            )
    dist.integrity = (
        "sha256 verified"
        if "sha256" in given
        else (f"{', '.join(sorted(given))} verified" if given else "no hash from the index (unverified)")
    )
    out.seek(0)
    return out


def _rehash(fh, alg: str):
    h = hashlib.new(alg)
    fh.seek(0)
    for chunk in iter(lambda: fh.read(1 << 20), b""):
        h.update(chunk)
    return h


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

    def __init__(self, name: str, version: str | None, indexes, session=None, ranges: bool = False):
        self.name, self.indexes, self.ranges = name, indexes, ranges
        self.http = _session(session)
        self.version, self.dists = release(name, version, indexes, self.http)
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
            raise UsageError(
                f"{self.label} has {len(self.dists)} files ({names}): name one, e.g. download it "
                f"and pass the wheel's path"
            )
        return self.open(self.dists[0])
