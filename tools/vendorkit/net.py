"""HTTP reads from servers the run does not trust (package indexes, GitHub API hosts, file mirrors).

Every request is read here, never by requests' own conveniences (`.content`, `.json()`, `iter_content`):
- the whole request, body included, has a total deadline (the run budget's `request_seconds`, or what is left of
  its `seconds`): a server trickling one byte every few seconds is cut off, not waited for;
- the body is read with `read1`, so a trickle cannot hold one read past the deadline;
- the body has a size cap the caller names, counted after decoding, and every byte received or decoded is drawn
  from the run budget;
- a `Content-Encoding` is decoded here, in bounded steps (never more than CHUNK bytes out of one step), so a
  1 MB gzip bomb costs what its cap allows and no more; encodings other than gzip and deflate are refused.
Transport failures stay requests' exceptions (callers retry or report them); a cap or deadline is BudgetExceeded
or CannotCheck (exit 2).
"""

from __future__ import annotations

import json
import time
import zlib
from dataclasses import dataclass
from typing import Any, Protocol

from . import budget
from .errors import CannotCheck

CHUNK = 64 << 10


class Sink(Protocol):
    """Where a body can go instead of memory: a binary file, or anything else that takes its pieces."""

    def write(self, data: bytes, /) -> object: ...


@dataclass
class Response:
    status_code: int
    headers: Any  # requests' case-insensitive headers
    url: str
    content: bytes  # decoded body (empty when it went to a sink, or for HEAD)
    size: int = 0  # body bytes delivered (decoded), to the sink too

    def json(self):
        """The body as JSON; ValueError (also for nesting too deep to parse) otherwise."""
        try:
            return json.loads(self.content)
        except RecursionError:
            raise ValueError("JSON nested too deeply") from None

    @property
    def text(self) -> str:
        charset = "utf-8"
        for part in self.headers.get("Content-Type", "").split(";")[1:]:
            k, _, v = part.strip().partition("=")
            if k.lower() == "charset" and v:
                charset = v.strip('"')
        try:
            return self.content.decode(charset, errors="replace")
        except LookupError:
            return self.content.decode("utf-8", errors="replace")

    @property
    def links(self) -> dict:
        from requests.utils import parse_header_links

        out = {}
        for link in parse_header_links(self.headers.get("Link", "")):
            key = link.get("rel") or link.get("url")
            if key:
                out[key] = link
        return out


class _Decoder:
    """Bounded incremental decoding of a Content-Encoding (identity, gzip, deflate)."""

    def __init__(self, encoding: str, what: str):
        enc = [e.strip().lower() for e in encoding.split(",") if e.strip() and e.strip().lower() != "identity"]
        if len(enc) > 1 or (enc and enc[0] not in ("gzip", "x-gzip", "deflate")):
            raise CannotCheck(
                f"{what}: the server answered with Content-Encoding {encoding!r} (only gzip and deflate are read)"
            )
        self.kind = enc[0] if enc else None
        self._z = None
        if self.kind in ("gzip", "x-gzip"):
            self._z = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self._first = True

    def feed(self, data: bytes):
        """Decoded pieces of `data`, each at most CHUNK bytes."""
        if self.kind is None:
            yield data
            return
        if self._z is None:  # deflate: zlib-wrapped as the RFC says, raw deflate as some servers send
            self._z = zlib.decompressobj(zlib.MAX_WBITS if data[:1] and (data[0] & 0x0F) == 8 else -zlib.MAX_WBITS)
        buf = data
        while True:
            try:
                out = self._z.decompress(buf, CHUNK)
            except zlib.error as e:
                raise CannotCheck(f"corrupt {self.kind} body ({e})") from None
            if out:
                yield out
            buf = self._z.unconsumed_tail
            if not buf:
                return


def request(
    http,
    method: str,
    url: str,
    *,
    cap: int,
    what: str,
    headers: dict | None = None,
    params: dict | None = None,
    json_body: Any = None,
    sink: Sink | None = None,
    decode: bool = True,
    allow_redirects: bool = True,
    connect_timeout: float = 15.0,
    read_timeout: float = 60.0,
) -> Response:
    """One HTTP request through a requests session, read under the run's budget (see the module docstring).
    `cap`: largest body accepted (decoded bytes); `sink`: write the body there instead of keeping it; `decode`:
    decode a Content-Encoding (False: the raw bytes, as pip downloads files)."""
    b = budget.current()
    deadline, key = b.request_deadline()
    hdrs = {"Accept-Encoding": "gzip, deflate" if decode else "identity", **(headers or {})}
    r = http.request(
        method,
        url,
        params=params,
        json=json_body,
        headers=hdrs,
        stream=True,
        timeout=(connect_timeout, read_timeout),
        allow_redirects=allow_redirects,
    )
    try:
        out: list[bytes] = []
        size = 0
        if method != "HEAD":
            dec = _Decoder(r.headers.get("Content-Encoding", "") if decode else "", what)
            raw = r.raw
            read = getattr(raw, "read1", None)
            while True:
                if time.monotonic() > deadline:
                    raise budget.BudgetExceeded(key, f"{what} still arriving after {_spent(b, key):g} s")
                chunk = read(CHUNK, decode_content=False) if read else raw.read(8192, decode_content=False)
                if not chunk:
                    break
                b.take(len(chunk), what)
                for piece in dec.feed(chunk):
                    size += len(piece)
                    if size > cap:
                        raise CannotCheck(f"{what}: the answer is larger than {cap:,} bytes; not read further")
                    if dec.kind is not None:
                        b.take(len(piece), what)
                    if sink is not None:
                        sink.write(piece)
                    else:
                        out.append(piece)
        return Response(r.status_code, r.headers, r.url or url, b"".join(out), size)
    finally:
        r.close()


def _spent(b: budget.Budget, key: str) -> float:
    return b.limits.request_seconds if key == "request_seconds" else b.limits.seconds
