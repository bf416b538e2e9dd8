#!/usr/bin/env python3
"""Loopback stand-ins for the servers downstream checks talk to: try the watcher and `check_vendor --fork`
without the internet (the tests use the same classes).

    python tests/fake_servers.py --repo OWNER/NAME=PATH/TO/GIT/CHECKOUT ... \
                                     [--wheel NAME==VERSION=PATH/TO/FILE.whl ...] [--token T]

prints the two base URLs and serves until Ctrl-C. Then, e.g.:

    python tools/watch_downstreams.py --api-url GITHUB_URL --index-url PYPI_URL --config my.yaml --dry-run
    python tools/check_vendor.py --fork github:OWNER/NAME@main --api-url GITHUB_URL

FakeGitHub serves the REST endpoints the tools use: commits/{ref}, git/trees/{sha}[?recursive=1] (with
optional truncation), git/blobs/{sha}, and issues list (paginated) / create / edit / comment, with object ids
from git itself. Knobs simulate ETag 304s, rate limits, retry-after, transient 5xx and required tokens; every
request is logged so tests can count calls and writes. FakePyPI serves a Simple API index (PEP 691 JSON and
PEP 503 HTML project pages with relative file URLs, like a caching proxy) and the files (with HTTP ranges),
with knobs for 404 / 500 answers, HTML-only pages, yanked files, no ranges and truncated downloads.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse


class FakeGitHub:
    def __init__(self, token: str | None = None):
        self.repos: dict[str, str] = {}  # "owner/name" -> path of a git checkout
        self.issues: dict[str, list[dict]] = {}  # "owner/name" -> issues
        self.comments: list[tuple[str, int, str]] = []
        self.log: list[dict] = []
        self.token = token
        self.truncate_over: int | None = None  # recursive trees with more entries come back truncated
        self.fail_5xx = 0  # the next N requests answer 502
        self.retry_after_once: float | None = None
        self.rate_limited_for: float | None = None  # answer 403 remaining=0 with reset this far ahead
        self.remaining = 5000
        self.lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> str:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # keep test output clean
                pass

            def _handle(self, method: str):
                fake._dispatch(self, method)

            def do_GET(self):
                self._handle("GET")

            def do_POST(self):
                self._handle("POST")

            def do_PATCH(self):
                self._handle("PATCH")

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def stop(self) -> None:
        if self._server:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    # ------------------------------------------------------------------ helpers
    def git(self, repo: str, *args: str) -> str:
        p = subprocess.run(["git", "-C", self.repos[repo], *args], capture_output=True, text=True)
        if p.returncode != 0:
            raise KeyError(p.stderr.strip())
        return p.stdout

    def counted(self) -> int:
        return sum(1 for r in self.log if r["status"] != 304)

    def writes(self) -> list[dict]:
        return [r for r in self.log if r["method"] != "GET"]

    # ------------------------------------------------------------------ dispatch
    def _record(self, h, status: int) -> None:
        """Log the request before its response goes out: a client that has its answer must find it counted."""
        entry = dict(h.dg_entry, status=status)
        with self.lock:
            self.log.append(entry)

    def _send(self, h, status: int, body=None, headers: dict | None = None) -> None:
        data = b"" if body is None else json.dumps(body).encode()
        self._record(h, status)
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        with self.lock:
            if status != 304:
                self.remaining = max(0, self.remaining - 1)
            h.send_header("x-ratelimit-remaining", str(self.remaining))
        h.send_header("x-ratelimit-reset", str(int(time.time()) + 3600))
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        if data:
            h.wfile.write(data)

    def _dispatch(self, h, method: str) -> None:
        url = urlparse(h.path)
        q = {k: v[0] for k, v in parse_qs(url.query).items()}
        entry = {"method": method, "path": url.path, "query": q, "auth": h.headers.get("Authorization")}
        length = int(h.headers.get("Content-Length") or 0)
        payload = json.loads(h.rfile.read(length)) if length else None
        h.dg_entry = entry
        self._route(h, method, url.path, q, payload)

    def _route(self, h, method, path, q, payload) -> int:
        if self.token and h.headers.get("Authorization") != f"Bearer {self.token}":
            self._send(h, 401, {"message": "Bad credentials"})
            return 401
        if self.fail_5xx > 0:
            self.fail_5xx -= 1
            self._send(h, 502, {"message": "Bad gateway"})
            return 502
        if self.retry_after_once is not None:
            wait, self.retry_after_once = self.retry_after_once, None
            self._send(h, 429, {"message": "slow down"}, {"retry-after": str(wait)})
            return 429
        if self.rate_limited_for is not None:
            h_reset = str(int(time.time() + self.rate_limited_for))
            self.remaining = 0
            self._record(h, 403)
            h.send_response(403)
            body = json.dumps({"message": "API rate limit exceeded"}).encode()
            h.send_header("Content-Length", str(len(body)))
            h.send_header("x-ratelimit-remaining", "0")
            h.send_header("x-ratelimit-reset", h_reset)
            h.end_headers()
            h.wfile.write(body)
            return 403
        m = re.match(r"^/repos/([^/]+/[^/]+)/(.*)$", path)
        if not m:
            self._send(h, 404, {"message": "Not Found"})
            return 404
        repo, rest = m.groups()
        try:
            if rest.startswith("issues"):
                return self._issues(h, method, repo, rest, q, payload)
            if repo not in self.repos:
                raise KeyError(repo)
            if method == "GET" and rest.startswith("commits/"):
                return self._commit(h, repo, rest[len("commits/") :])
            if method == "GET" and rest.startswith("git/trees/"):
                return self._tree(h, repo, rest[len("git/trees/") :], q.get("recursive") == "1")
            if method == "GET" and rest.startswith("git/blobs/"):
                sha = rest[len("git/blobs/") :]
                data = subprocess.run(
                    ["git", "-C", self.repos[repo], "cat-file", "blob", sha], capture_output=True
                ).stdout
                self._send(
                    h,
                    200,
                    {"sha": sha, "size": len(data), "encoding": "base64", "content": base64.b64encode(data).decode()},
                )
                return 200
        except KeyError:
            self._send(h, 404, {"message": "Not Found"})
            return 404
        self._send(h, 404, {"message": "Not Found"})
        return 404

    def _etag_or_304(self, h, etag: str) -> bool:
        if h.headers.get("If-None-Match") == etag:
            self._send(h, 304, None, {"ETag": etag})
            return True
        return False

    def _commit(self, h, repo: str, ref: str) -> int:
        sha = self.git(repo, "rev-parse", "--verify", f"{ref}^{{commit}}").strip()
        tree = self.git(repo, "rev-parse", f"{sha}^{{tree}}").strip()
        etag = f'"c-{sha}"'
        if self._etag_or_304(h, etag):
            return 304
        self._send(
            h,
            200,
            {
                "sha": sha,
                "commit": {"tree": {"sha": tree}, "message": "m"},
                "files": [{"filename": "x", "patch": "lots of text" * 50}],
            },
            {"ETag": etag},
        )
        return 200

    def _tree(self, h, repo: str, sha: str, recursive: bool) -> int:
        args = (
            ["ls-tree", "-l", "--full-tree", sha]
            if not recursive
            else ["ls-tree", "-r", "-t", "-l", "--full-tree", sha]
        )
        out = self.git(repo, *args)
        entries = []
        for line in out.splitlines():
            meta, p = line.split("\t", 1)
            mode, typ, obj, size = meta.split()
            e = {"path": p, "mode": mode, "type": typ, "sha": obj}
            if typ == "blob":
                e["size"] = int(size)
            entries.append(e)
        truncated = bool(recursive and self.truncate_over is not None and len(entries) > self.truncate_over)
        if truncated:
            entries = entries[: self.truncate_over]
        etag = f'"t-{sha}-{int(recursive)}-{int(truncated)}"'
        if self._etag_or_304(h, etag):
            return 304
        self._send(h, 200, {"sha": sha, "tree": entries, "truncated": truncated}, {"ETag": etag})
        return 200

    def _issues(self, h, method, repo, rest, q, payload) -> int:
        store = self.issues.setdefault(repo, [])
        if method == "GET" and rest == "issues":
            labels = set(filter(None, q.get("labels", "").split(",")))
            state = q.get("state", "open")
            sel = [
                i
                for i in store
                if labels <= {lb["name"] for lb in i["labels"]} and (state == "all" or i["state"] == state)
            ]
            sel.sort(key=lambda i: -i["number"])
            per, page = int(q.get("per_page", 30)), int(q.get("page", 1))
            chunk = sel[(page - 1) * per : page * per]
            headers = {}
            if page * per < len(sel):
                host = h.headers.get("Host")
                nq = dict(q, page=str(page + 1))
                headers["Link"] = (
                    f"<http://{host}/repos/{repo}/issues?"
                    + "&".join(f"{k}={v}" for k, v in nq.items())
                    + '>; rel="next"'
                )
            self._send(h, 200, chunk, headers)
            return 200
        if method == "POST" and rest == "issues":
            issue = {
                "number": len(store) + 1,
                "title": payload["title"],
                "body": payload.get("body", ""),
                "state": "open",
                "labels": [{"name": n} for n in payload.get("labels", [])],
            }
            store.append(issue)
            self._send(h, 201, issue)
            return 201
        m = re.match(r"^issues/(\d+)(/comments)?$", rest)
        if m:
            n = int(m.group(1))
            issue = next((i for i in store if i["number"] == n), None)
            if issue is None:
                self._send(h, 404, {"message": "Not Found"})
                return 404
            if method == "POST" and m.group(2):
                self.comments.append((repo, n, payload["body"]))
                self._send(h, 201, {"id": len(self.comments), "body": payload["body"]})
                return 201
            if method == "PATCH":
                for k in ("title", "body", "state"):
                    if k in payload:
                        issue[k] = payload[k]
                self._send(h, 200, issue)
                return 200
        self._send(h, 404, {"message": "Not Found"})
        return 404


YANKED = ' data-yanked=""'  # as PyPI writes it (pip ignores a bare data-yanked, which has no value)


class FakePyPI:
    """A package index speaking the Simple API (PEP 691 JSON and PEP 503 HTML, relative file URLs like a caching
    proxy's) for files the caller supplies (name -> version -> [(filename, bytes)]). Files honour HTTP range
    requests unless `ranges` is off; `served` counts the file bytes sent. `url` is the index URL pip takes."""

    def __init__(self):
        self.packages: dict[str, dict[str, list[tuple[str, bytes]]]] = {}
        self.log: list[str] = []
        self.status: int | None = None  # answer every index page with this status (404, 500 ...)
        self.truncate_files = False  # serve half of each file (the index's sha256 then disagrees)
        self.json_api = True  # offer PEP 691 JSON; False: HTML pages only
        self.ranges = True  # honour Range requests on files
        self.yanked: set[str] = set()  # file names listed as yanked
        self.range_bytes: dict[str, bytes] = {}  # file name -> other bytes served to HEAD and Range requests
        self.raw: dict[str, bytes] = {}  # any URL path (unquoted, e.g. "/raw/x/pkg-1.0.zip") -> its bytes
        self.page: tuple[bytes, dict] | None = None  # serve every project page as these raw bytes and headers
        self.trickle: float | None = None  # send project pages one byte every this many seconds
        self.served = 0
        self._server: ThreadingHTTPServer | None = None
        self.root = self.url = ""

    def add(self, name: str, version: str, filename: str, data: bytes) -> None:
        self.packages.setdefault(name, {}).setdefault(version, []).append((filename, data))

    def start(self) -> str:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                fake._get(self)

            def do_HEAD(self):
                fake._get(self, head=True)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self.root = f"http://127.0.0.1:{self._server.server_address[1]}"
        self.url = f"{self.root}/simple"
        return self.url

    def stop(self) -> None:
        if self._server:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def _reply(self, h, status: int, data: bytes, ctype: str = "application/json", headers=()) -> None:
        h.send_response(status)
        h.send_header("Content-Type", ctype)
        h.send_header("Content-Length", str(len(data)))
        for k, v in headers:
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(data)

    def _project(self, normalized: str):
        for name, versions in self.packages.items():
            if re.sub(r"[-_.]+", "-", name).lower() == normalized:
                return name, versions
        return None, None

    def _get(self, h, head: bool = False) -> None:
        path = urlparse(h.path).path
        self.log.append(path)
        m = re.match(r"^/simple/([^/]+)/$", path)
        if m and self.page is not None:
            body, headers = self.page
            h.send_response(200)
            for k, v in {"Content-Type": "text/html", "Content-Length": str(len(body)), **headers}.items():
                h.send_header(k, v)
            h.end_headers()
            try:
                if self.trickle is None:
                    h.wfile.write(body)
                for i in range(len(body) if self.trickle is not None else 0):
                    h.wfile.write(body[i : i + 1])
                    h.wfile.flush()
                    time.sleep(self.trickle)
            except OSError:  # the client gave up
                pass
            return
        if m:
            if self.status is not None:
                self._reply(h, self.status, b"configured failure", "text/plain")
                return
            name, versions = self._project(m.group(1))
            if versions is None:
                self._reply(h, 404, b"Not Found", "text/plain")
                return
            files = [(fn, hashlib.sha256(data).hexdigest()) for v in versions.values() for fn, data in v]
            if self.json_api and "application/vnd.pypi.simple.v1+json" in h.headers.get("Accept", ""):
                doc = {
                    "meta": {"api-version": "1.1"},
                    "name": m.group(1),
                    "files": [
                        {
                            "filename": fn,
                            "url": f"../../files/{fn}",
                            "hashes": {"sha256": sha},
                            "yanked": fn in self.yanked,
                        }
                        for fn, sha in files
                    ],
                }
                self._reply(h, 200, json.dumps(doc).encode(), "application/vnd.pypi.simple.v1+json")
            else:
                links = "".join(
                    f'<a href="../../files/{fn}#sha256={sha}"{YANKED if fn in self.yanked else ""}>{fn}</a><br/>\n'
                    for fn, sha in files
                )
                self._reply(h, 200, f"<!DOCTYPE html><html><body>\n{links}</body></html>".encode(), "text/html")
            return
        from urllib.parse import unquote

        for key in (path, unquote(path), unquote(unquote(path))):
            if key in self.raw:
                self._file(h, self.raw[key], head)
                return
        m = re.match(r"^/files/([^/]+)$", path)
        if m:
            for versions in self.packages.values():
                for files in versions.values():
                    for fn, data in files:
                        if fn == m.group(1):
                            if fn in self.range_bytes and (head or h.headers.get("Range")):
                                data = self.range_bytes[fn]  # a server whose ranges are not its downloads
                            self._file(h, data[: len(data) // 2] if self.truncate_files else data, head)
                            return
        self._reply(h, 404, b"Not Found", "text/plain")

    def _file(self, h, data: bytes, head: bool = False) -> None:
        if head:
            h.send_response(200)
            h.send_header("Content-Type", "application/octet-stream")
            h.send_header("Content-Length", str(len(data)))
            if self.ranges:
                h.send_header("Accept-Ranges", "bytes")
            h.end_headers()
            return
        rng = re.match(r"^bytes=(\d*)-(\d*)$", h.headers.get("Range", ""))
        if self.ranges and rng and (rng.group(1) or rng.group(2)):
            lo, hi = rng.groups()
            if lo == "":
                lo, hi = max(0, len(data) - int(hi)), len(data) - 1
            else:
                lo, hi = int(lo), min(int(hi) if hi else len(data) - 1, len(data) - 1)
            part = data[lo : hi + 1]
            self.served += len(part)
            self._reply(
                h,
                206,
                part,
                "application/octet-stream",
                [("Content-Range", f"bytes {lo}-{hi}/{len(data)}"), ("Accept-Ranges", "bytes")],
            )
            return
        self.served += len(data)
        self._reply(h, 200, data, "application/octet-stream")


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))
    from vendorkit.argparsing import UsageParser
    from vendorkit.errors import UsageError

    ap = UsageParser(prog="fake_servers.py", description=__doc__.splitlines()[0])
    ap.add_argument(
        "--repo",
        action="append",
        default=[],
        metavar="OWNER/NAME=PATH",
        help="serve the git checkout at PATH as OWNER/NAME",
    )
    ap.add_argument(
        "--wheel",
        action="append",
        default=[],
        metavar="NAME==VERSION=FILE",
        help="serve FILE (a wheel or sdist) as release VERSION of NAME",
    )
    ap.add_argument("--token", default=None, help="require this bearer token from GitHub clients")
    try:
        return _serve(ap, argv)
    except UsageError as e:  # exit 3 on bad arguments, like every tool here
        print(f"fake_servers: error: {e}", file=sys.stderr)
        return 3


def _serve(ap, argv) -> int:
    a = ap.parse_args(argv)
    gh, index = FakeGitHub(token=a.token), FakePyPI()
    for spec in a.repo:
        name, _, path = spec.partition("=")
        if not re.match(r"^[^/]+/[^/]+$", name) or not os.path.isdir(path):
            ap.error(f"--repo {spec!r}: expected OWNER/NAME=PATH to a git checkout")
        gh.repos[name] = os.path.abspath(path)
    for spec in a.wheel:
        m = re.match(r"^([^=]+)==([^=]+)=(.+)$", spec)
        if not m or not os.path.isfile(m.group(3)):
            ap.error(f"--wheel {spec!r}: expected NAME==VERSION=FILE")
        with open(m.group(3), "rb") as fh:
            index.add(m.group(1), m.group(2), os.path.basename(m.group(3)), fh.read())
    print(f"github api: {gh.start()}\npypi index: {index.start()}\n(Ctrl-C stops)", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    gh.stop()
    index.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
