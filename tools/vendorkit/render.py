"""Report rendering: text for people, JSON for machines (schema_version 1), markdown for PRs/issues."""
from __future__ import annotations

import json

from .compare import Report

JSON_SCHEMA_VERSION = 1


def _summary(r: Report) -> str:
    c = r.counts()
    return ", ".join(f"{v} {k}" for k, v in c.items()) or "no files"


def _headline(r: Report) -> str:
    if r.mode == "self":
        return f"self-check of {r.target} against {r.tag or 'no release'}"
    return f"fork {r.target} (prefix {r.prefix or '.'}) against {r.tag}"


def to_text(r: Report, verbose: bool = False) -> str:
    out = [f"check_vendor: {_headline(r)}"]
    for f in r.files:
        if f.status == "ok" and not verbose:
            continue
        line = f"  {f.status:<8} {f.path}"
        if f.diagnosis:
            line += f"  [{f.diagnosis}]"
        if f.detail:
            line += f"  {f.detail}"
        out.append(line)
        if f.diff:
            out.extend("      " + ln for ln in f.diff.rstrip("\n").splitlines())
    for n in r.notes:
        out.append(f"note: {n}")
    for e in r.errors:
        out.append(f"error: {e}")
    verdict = r.verdict + (f" (identical to {r.stale_tag})" if r.stale_tag else "")
    out.append(f"verdict: {verdict} ({_summary(r)})")
    return "\n".join(out) + "\n"


def to_json(r: Report) -> str:
    doc = {
        "schema_version": JSON_SCHEMA_VERSION,
        "mode": r.mode,
        "target": r.target,
        "prefix": r.prefix,
        "tag": r.tag,
        "digest": r.digest_kind,
        "verdict": r.verdict,
        "stale_tag": r.stale_tag,
        "exit_code": r.exit_code,
        "counts": r.counts(),
        "files": [f.as_dict() for f in r.files],
        "notes": r.notes,
        "errors": r.errors,
    }
    return json.dumps(doc, indent=2, sort_keys=False) + "\n"


def _md(s: str | None) -> str:
    return (s or "").replace("|", "\\|").replace("\n", " ")


def to_markdown(r: Report) -> str:
    verdict = r.verdict + (f" (identical to `{r.stale_tag}`)" if r.stale_tag else "")
    out = [f"### check_vendor: {_md(_headline(r))}", "", f"**Verdict: {verdict}** — {_summary(r)}", ""]
    rows = [f for f in r.files if f.status != "ok"]
    if rows:
        out += ["| status | path | diagnosis | detail |", "|---|---|---|---|"]
        out += [f"| {f.status} | `{_md(f.path)}` | {_md(f.diagnosis)} | {_md(f.detail)} |" for f in rows]
        out.append("")
        for f in rows:
            if f.diff:
                out += [f"<details><summary>diff of <code>{f.path}</code></summary>", "", "```diff",
                        f.diff.rstrip("\n"), "```", "</details>", ""]
    out += [f"- note: {_md(n)}" for n in r.notes]
    out += [f"- error: {_md(e)}" for e in r.errors]
    return "\n".join(out).rstrip("\n") + "\n"


def render(r: Report, fmt: str, verbose: bool = False) -> str:
    if fmt == "json":
        return to_json(r)
    if fmt == "markdown":
        return to_markdown(r)
    return to_text(r, verbose)
