"""Report rendering: text for people, JSON for machines (schema_version 2), markdown for PRs/issues. Text and
markdown cap each diff (--diff-lines); JSON keeps every fact, full diffs included."""
from __future__ import annotations

import json

from .compare import Report
from .diagnose import DEFAULT_DIFF_LINES, capped

JSON_SCHEMA_VERSION = 2


def _summary(r: Report) -> str:
    c = r.counts()
    return ", ".join(f"{v} {k}" for k, v in c.items()) or "no files"


def _headline(r: Report) -> str:
    if r.mode == "self":
        return f"self-check of {r.target} against {r.tag or 'no release'}"
    return f"fork {r.target} (prefix {r.prefix or '.'}) against {r.tag}"


def _stamp_line(r: Report) -> str | None:
    if not r.stamp:
        return None
    n = len(r.stamp["patches"])
    return (f"stamp: written for {r.stamp['tag']}, owns {r.stamp['owned']} files"
            + (f", {n} pinned patch{'es' if n != 1 else ''}" if n else ""))


def to_text(r: Report, verbose: bool = False, diff_lines: int = DEFAULT_DIFF_LINES) -> str:
    out = [f"check_vendor: {_headline(r)}"]
    if _stamp_line(r):
        out.append(_stamp_line(r))
    for f in r.files:
        if f.status == "ok" and not verbose:
            continue
        line = f"  {f.status:<8} {f.path}"
        if f.diagnosis:
            line += f"  [{f.diagnosis}]"
        if f.detail:
            line += f"  {f.detail}"
        out.append(line)
        if f.diff and diff_lines > 0:
            out.extend("      " + ln for ln in capped(f.diff, diff_lines).rstrip("\n").splitlines())
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
        "stamp": r.stamp,
    }
    return json.dumps(doc, indent=2, sort_keys=False) + "\n"


def _md(s: str | None) -> str:
    return (s or "").replace("|", "\\|").replace("\n", " ")


def to_markdown(r: Report, diff_lines: int = DEFAULT_DIFF_LINES) -> str:
    verdict = r.verdict + (f" (identical to `{r.stale_tag}`)" if r.stale_tag else "")
    out = [f"### check_vendor: {_md(_headline(r))}", "", f"**Verdict: {verdict}** — {_summary(r)}", ""]
    if _stamp_line(r):
        out += [_md(_stamp_line(r)), ""]
    rows = [f for f in r.files if f.status != "ok"]
    if rows:
        out += ["| status | path | diagnosis | detail |", "|---|---|---|---|"]
        out += [f"| {f.status} | `{_md(f.path)}` | {_md(f.diagnosis)} | {_md(f.detail)} |" for f in rows]
        out.append("")
        for f in rows:
            if f.diff and diff_lines > 0:
                out += [f"<details><summary>diff of <code>{f.path}</code></summary>", "", "```diff",
                        capped(f.diff, diff_lines).rstrip("\n"), "```", "</details>", ""]
    out += [f"- note: {_md(n)}" for n in r.notes]
    out += [f"- error: {_md(e)}" for e in r.errors]
    return "\n".join(out).rstrip("\n") + "\n"


def render(r: Report, fmt: str, verbose: bool = False, diff_lines: int = DEFAULT_DIFF_LINES) -> str:
    if fmt == "json":
        return to_json(r)
    if fmt == "markdown":
        return to_markdown(r, diff_lines)
    return to_text(r, verbose, diff_lines)


def error_markdown(message: str, exit_code: int) -> str:
    """What --format markdown prints when the check cannot run, so a CI job summary is never empty."""
    return f"### check_vendor: could not check\n\n**Exit {exit_code}**: {_md(message)}\n"
