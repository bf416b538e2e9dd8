"""A small GitHub REST client for the drift checks: conditional requests, rate limits, bounded retries.

- The token comes from the caller (GITHUB_TOKEN) and is only ever placed in the Authorization header;
  every message this module produces is scrubbed of it.
- GET requests carry `If-None-Match` when the state file holds an ETag for the URL; a 304 reuses the stored
  body and does not count against the rate limit.
- 5xx and connection errors are retried with exponential backoff; `retry-after` and an exhausted
  `x-ratelimit-remaining` are honoured when the wait fits in `max_wait`, otherwise the call fails with
  `CannotCheck` (the fork becomes `unknown`, never `drifted`).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import net
from .errors import CannotCheck, UsageError

DEFAULT_API = "https://api.github.com"
API_MAX_BYTES = 128 << 20  # one answer, decoded (a 64 MiB blob is 86 MiB of base64 and JSON)
USER_AGENT = "deep_gemm_sm120-check_vendor"


class NotFound(CannotCheck):
    """404: repository, ref or object does not exist (or is not visible to the token)."""


@dataclass
class Counters:
    requests: int = 0  # HTTP requests sent
    not_modified: int = 0  # 304 answers (free of quota)
    writes: int = 0  # POST/PATCH calls

    @property
    def counted(self) -> int:
        return self.requests - self.not_modified


@dataclass
class EtagStore:
    """ETag + body per URL, persisted as JSON between runs (e.g. through an Actions cache)."""

    path: str | None = None
    entries: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def load(cls, path: str | None) -> EtagStore:
        store = cls(path)
        if path and os.path.exists(path):
            try:
                with open(path, encoding="utf-8") as fh:
                    data = json.load(fh)
                if isinstance(data, dict) and isinstance(data.get("etags"), dict):
                    store.entries = data["etags"]
            except (OSError, ValueError):
                store.entries = {}  # a corrupt cache only costs quota
        return store

    def save(self) -> None:
        if not self.path:
            return
        tmp = f"{self.path}.tmp.{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump({"schema_version": 1, "etags": self.entries}, fh)
        os.replace(tmp, self.path)


class GitHubClient:
    def __init__(
        self,
        api_url: str | None = None,
        token: str | None = None,
        etags: EtagStore | None = None,
        max_retries: int = 3,
        max_wait: float = 60.0,
        timeout: float = 30.0,
        backoff: float = 1.0,
        sleep: Callable[[float], None] = time.sleep,
    ):
        try:
            import requests
        except ImportError:
            raise UsageError("github: checks need `requests`: python -m pip install requests") from None
        self._requests = requests
        self.api = (api_url or DEFAULT_API).rstrip("/")
        self._token = token or None
        self.etags = etags or EtagStore()
        self.max_retries = max_retries
        self.max_wait = max_wait
        self.timeout = timeout
        self.backoff = backoff
        self.sleep = sleep
        self.counters = Counters()
        self.session = requests.Session()
        self.session.headers.update(
            {"Accept": "application/vnd.github+json", "User-Agent": USER_AGENT, "X-GitHub-Api-Version": "2022-11-28"}
        )
        if self._token:
            self.session.headers["Authorization"] = f"Bearer {self._token}"

    def scrub(self, text: str) -> str:
        return text.replace(self._token, "***") if self._token else text

    def _url(self, path: str) -> str:
        return path if path.startswith(("http://", "https://")) else f"{self.api}{path}"

    def _wait_for(self, resp) -> float | None:
        """Seconds to wait before retrying a throttled answer, or None if it is not throttling."""
        h = resp.headers
        if resp.status_code in (403, 429):
            if h.get("retry-after"):
                try:
                    return max(0.0, float(h["retry-after"]))
                except ValueError:
                    return self.max_wait + 1
            if h.get("x-ratelimit-remaining") == "0":
                try:
                    return max(0.0, float(h.get("x-ratelimit-reset", "0")) - time.time()) + 1
                except ValueError:
                    return self.max_wait + 1
        return None

    def request(
        self,
        method: str,
        path: str,
        params: dict | None = None,
        body: Any = None,
        conditional: bool = True,
        slim: Callable[[Any], Any] | None = None,
    ) -> tuple[int, Any, Any]:
        """(status, parsed JSON body, response). 304 answers return the stored body with status 200.
        `slim` reduces a body to what the caller needs before it is returned and stored with its ETag."""
        url = self._url(path)
        key = url + ("?" + "&".join(f"{k}={v}" for k, v in sorted(params.items())) if params else "")
        headers = {}
        cached = self.etags.entries.get(key) if (method == "GET" and conditional) else None
        if cached:
            headers["If-None-Match"] = cached["etag"]
        delay = self.backoff
        for attempt in range(self.max_retries + 1):
            try:
                self.counters.requests += 1
                if method != "GET":
                    self.counters.writes += 1
                resp = net.request(
                    self.session,
                    method,
                    url,
                    params=params,
                    json_body=body,
                    headers=headers,
                    cap=API_MAX_BYTES,
                    what=f"{method} {url}",
                    read_timeout=self.timeout,
                )
            except self._requests.RequestException as e:
                if attempt < self.max_retries:
                    self.sleep(delay)
                    delay *= 2
                    continue
                raise CannotCheck(self.scrub(f"network error on {method} {url}: {type(e).__name__}")) from None
            if resp.status_code == 304 and cached:
                self.counters.not_modified += 1
                return 200, cached["body"], resp
            wait = self._wait_for(resp)
            if wait is not None:
                if wait <= self.max_wait and attempt < self.max_retries:
                    self.sleep(wait)
                    continue
                raise CannotCheck(
                    f"rate limited on {method} {url} (would wait {wait:.0f} s, bound {self.max_wait:.0f} s)"
                )
            if resp.status_code >= 500:
                if attempt < self.max_retries:
                    self.sleep(delay)
                    delay *= 2
                    continue
                raise CannotCheck(f"server error {resp.status_code} on {method} {url} after {attempt + 1} tries")
            if resp.status_code == 404:
                raise NotFound(f"not found: {method} {url}")
            if resp.status_code >= 400:
                msg = ""
                try:
                    doc = resp.json()
                    msg = str(doc.get("message", ""))[:300] if isinstance(doc, dict) else ""
                except ValueError:
                    pass
                raise CannotCheck(self.scrub(f"HTTP {resp.status_code} on {method} {url}: {msg}".rstrip(": ")))
            try:
                data = resp.json() if resp.content else None
            except ValueError:
                raise CannotCheck(f"invalid JSON from {method} {url}") from None
            if slim is not None:
                try:
                    data = slim(data)
                except (KeyError, TypeError, AttributeError):
                    raise CannotCheck(f"unexpected answer from {method} {url}") from None
            if method == "GET" and conditional and resp.headers.get("ETag"):
                self.etags.entries[key] = {"etag": resp.headers["ETag"], "body": data}
            return resp.status_code, data, resp
        raise CannotCheck(f"giving up on {method} {url}")  # pragma: no cover - loop always returns or raises

    def get(
        self, path: str, params: dict | None = None, conditional: bool = True, slim: Callable[[Any], Any] | None = None
    ) -> Any:
        return self.request("GET", path, params=params, conditional=conditional, slim=slim)[1]

    def paginate(self, path: str, params: dict | None = None) -> list:
        """Follow `Link: rel="next"` pages (never conditional: lists change)."""
        out: list = []
        url = path
        p: dict[str, Any] | None = dict(params or {}, per_page=100)  # the next pages' links carry their own
        for _ in range(100):
            _, data, resp = self.request("GET", url, params=p, conditional=False)
            out.extend(data or [])
            nxt = resp.links.get("next", {}).get("url") if hasattr(resp, "links") else None
            if not nxt:
                return out
            url, p = nxt, None
        raise CannotCheck(f"too many pages listing {path}")
