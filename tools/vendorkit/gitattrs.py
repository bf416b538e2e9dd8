"""What a checkout does to a blob, from the tree's `.gitattributes` (and the repository's info/attributes).

A checkout does not always write a blob's bytes: `eol=crlf` (or `text` with `eol=crlf`, `text=auto` with
`eol=crlf`, the legacy `crlf` attribute) rewrites line endings, `ident` expands `$Id$`, `working-tree-encoding`
re-encodes, and `filter=NAME` runs a program from the cloner's configuration. A view of a git ref must be the
checkout's view, so:
- line-ending conversion is resolved: the view hands out the bytes a checkout writes (git's rules for when it
  converts: a lone LF is needed, and `text=auto` leaves files with any CR, or binary ones, alone);
- `ident` on a blob holding `$Id`, a non-UTF-8 `working-tree-encoding` and any `filter` are refused: the
  checkout's bytes depend on the cloner, so the file cannot be certified and is reported.
Configuration (`core.autocrlf`, `core.eol`, `core.attributesFile`, filter drivers) is never read: it is the
cloner's, and git's defaults (LF, no drivers) are assumed, which is what a fresh clone on Linux writes.

Patterns follow gitattributes(5): a pattern without a slash matches a name at any depth below its file's
directory, one with a slash is anchored there; `*` and `?` do not cross '/', `**` does; a pattern ending in '/'
matches directories only, so never a file. Deeper files override shallower ones, info/attributes overrides
all, and later lines override earlier ones. `[attr]` macros are honoured in the root file and info/attributes.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

_UNSET, _UNSPEC = False, None
BUILTIN_MACROS = {"binary": [("diff", False), ("merge", False), ("text", False)]}


@dataclass
class _Rule:
    regex: re.Pattern
    assigns: list[tuple[str, object]]   # (attribute, True | False | None | "value"), macros already expanded


def _unquote(s: str) -> str:
    """A C-quoted pattern ("a\\tb") as git writes one; other text as it is."""
    if len(s) >= 2 and s[0] == s[-1] == '"':
        body = s[1:-1]
        try:
            return body.encode("latin-1", "backslashreplace").decode("unicode_escape").encode("latin-1").decode(
                "utf-8", "replace")
        except (UnicodeDecodeError, UnicodeEncodeError):
            return body
    return s


def glob_regex(pattern: str) -> str:
    """A regex (for fullmatch on a '/'-joined path) of one gitattributes glob."""
    out, i, n = [], 0, len(pattern)
    while i < n:
        c = pattern[i]
        if pattern.startswith("**/", i) and (i == 0 or pattern[i - 1] == "/"):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("/**", i) and i + 3 == n:
            out.append("/.*")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[":
            j = i + 1
            if j < n and pattern[j] in "!^":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                j += 1
            if j >= n:
                out.append(re.escape(c))
                i += 1
                continue
            body = pattern[i + 1:j]
            neg = body[:1] in ("!", "^")
            body = "".join(ch if ch == "-" else re.escape(ch) for ch in (body[1:] if neg else body))
            out.append(f"[^{body}/]" if neg else f"[{body}]")
            i = j + 1
        elif c == "\\" and i + 1 < n:
            out.append(re.escape(pattern[i + 1]))
            i += 2
        else:
            out.append(re.escape(c))
            i += 1
    return "".join(out)


def parse(text: str, base: str, macros: dict, allow_macros: bool) -> list[_Rule]:
    """Rules of one attributes file whose directory is `base` ("" for the root)."""
    rules = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith('"'):
            end = line.find('"', 1)
            while end > 0 and line[end - 1] == "\\":
                end = line.find('"', end + 1)
            if end < 0:
                continue
            raw, rest = line[: end + 1], line[end + 1:]
        else:
            raw, _, rest = line.partition(" ")
            if "\t" in raw:
                raw, _, more = raw.partition("\t")
                rest = more + " " + rest
        states = _states(rest.split(), macros)
        if raw.startswith("[attr]"):
            if allow_macros:
                macros[raw[6:]] = states
            continue
        pattern = _unquote(raw)
        if pattern.startswith("!") or pattern.endswith("/") or not pattern:
            continue  # negative patterns are forbidden; directory-only patterns never match a file
        if "/" in pattern.rstrip("/"):
            rx = glob_regex(pattern.lstrip("/"))
        else:
            rx = "(?:.*/)?" + glob_regex(pattern)
        prefix = re.escape(base + "/") if base else ""
        try:
            rules.append(_Rule(re.compile(prefix + rx, re.S), states))
        except re.error:
            continue
    return rules


def _states(tokens: list[str], macros: dict) -> list[tuple[str, object]]:
    out: list[tuple[str, object]] = []
    for tok in tokens:
        if tok.startswith("-"):
            name, value = tok[1:], _UNSET
        elif tok.startswith("!"):
            name, value = tok[1:], _UNSPEC
        elif "=" in tok:
            name, value = tok.split("=", 1)
        else:
            name, value = tok, True
        if not name:
            continue
        if value is True and name in macros:
            out.extend(macros[name])
        out.append((name, value))
    return out


class Attributes:
    """The attributes of paths in one tree. `files`: attribute-file directory ("" root) -> its text, in order of
    increasing priority by depth; `info`: the repository's info/attributes text (highest priority)."""

    def __init__(self, files: dict[str, str], info: str = ""):
        macros = dict(BUILTIN_MACROS)
        self.rules: list[_Rule] = []
        for base in sorted(files, key=lambda d: (d.count("/") + (1 if d else 0), d)):
            self.rules += parse(files[base], base, macros, allow_macros=(base == ""))
        self.rules += parse(info, "", macros, allow_macros=True)

    def of(self, path: str) -> dict[str, object]:
        found: dict[str, object] = {}
        for rule in self.rules:
            if rule.regex.fullmatch(path):
                for name, value in rule.assigns:
                    found[name] = value
        return {k: v for k, v in found.items() if v is not None}


# crlf_action, as git's convert.c names them
BINARY, TEXT, TEXT_INPUT, TEXT_CRLF, AUTO, AUTO_INPUT, AUTO_CRLF, UNDEFINED = range(8)


def _action(value) -> int:
    """git_path_check_crlf: one reading of the `text` attribute and of the legacy `crlf` one."""
    return {True: TEXT, False: BINARY, "input": TEXT_INPUT, "auto": AUTO}.get(value, UNDEFINED) \
        if isinstance(value, (bool, str)) else UNDEFINED


def crlf_action(attrs: dict) -> int:
    action = _action(attrs.get("text"))
    if action == UNDEFINED:
        action = _action(attrs.get("crlf"))
    if action != BINARY:
        eol = attrs.get("eol")
        if action == AUTO and eol == "lf":
            action = AUTO_INPUT
        elif action == AUTO and eol == "crlf":
            action = AUTO_CRLF
        elif eol == "lf":
            action = TEXT_INPUT
        elif eol == "crlf":
            action = TEXT_CRLF
    return action


def _converts(data: bytes, action: int) -> bool:
    """Whether a checkout turns lone LFs into CRLF (git: will_convert_lf_to_crlf, core.eol left at LF)."""
    if action not in (TEXT_CRLF, AUTO_CRLF):
        return False
    crlf = data.count(b"\r\n")
    lone_lf = data.count(b"\n") - crlf
    if not lone_lf:
        return False
    if action == AUTO_CRLF:
        lone_cr = data.count(b"\r") - crlf
        if lone_cr or crlf or _binary(data):
            return False
    return True


_NONPRINTABLE = bytes([127] + [c for c in range(32) if c not in (8, 9, 10, 12, 13, 27)])
_PRINTABLE_LOW = bytes([8, 9, 12, 27])


def _binary(data: bytes) -> bool:
    """git's convert_is_binary: a NUL, or more than one non-printable byte per 128 printable ones (CR and LF
    count as neither)."""
    if b"\0" in data:
        return True
    nonprintable = len(data) - len(data.translate(None, _NONPRINTABLE))
    printable = len(data) - nonprintable - data.count(b"\r") - data.count(b"\n")
    return (printable >> 7) < nonprintable


def checkout(data: bytes, attrs: dict) -> tuple[bytes, str | None, str | None]:
    """(the bytes a checkout writes, what converted them or None, why the checkout's bytes cannot be known or
    None)."""
    action = crlf_action(attrs)
    filt = attrs.get("filter")
    if isinstance(filt, str) and filt:
        return data, None, f"a checkout runs the filter driver {filt!r} on it (gitattributes filter={filt}): its " \
                           f"bytes depend on the cloner's configuration"
    if attrs.get("ident") is True and b"$Id" in data:
        return data, None, "a checkout expands its $Id$ keyword (gitattributes ident)"
    enc = attrs.get("working-tree-encoding")
    if isinstance(enc, str) and action != BINARY and enc.replace("-", "").replace("_", "").lower() != "utf8":
        return data, None, f"a checkout re-encodes it as {enc} (gitattributes working-tree-encoding)"
    if _converts(data, action):
        out = re.sub(rb"(?<!\r)\n", b"\r\n", data)
        return out, "a checkout writes it with CRLF line endings (gitattributes eol=crlf)", None
    return data, None, None
