"""Report rendering: text for people, JSON for machines (schema_version 2), markdown for PRs and issues.

Every string a fork controls (paths, link targets, stamp tags and reasons, diff lines, messages quoting them)
goes through vendorkit.inert: text output escapes control and invisible characters, markdown puts such strings
only inside code spans or fenced blocks, JSON escapes through the encoder. Diffs are capped at --diff-lines in
every format (lines cut at limits.DIFF_LINE_CHARS) unless --full-diffs lifts the line cap.
"""

from __future__ import annotations

import json

from . import inert
from .compare import Report
from .diagnose import DEFAULT_DIFF_LINES, capped

JSON_SCHEMA_VERSION = 2


def _summary(r: Report) -> str:
    c = r.counts()
    return ", ".join(f"{v} {k}" for k, v in c.items()) or "no files"


def _against(r: Report) -> str | None:
    return r.tag if r.lineage is None else f"{r.lineage}@{r.tag} (upstream lineage)"


def _stamp_line(r: Report, q) -> str | None:
    if not r.stamp:
        return None
    if r.stamp.get("problems"):
        return "stamp: not trustworthy (see invalid-stamp): its ownership and pinned patches are ignored"
    n = len(r.stamp["patches"])
    return f"stamp: written for {q(r.stamp['tag'])}, owns {r.stamp['owned']} files" + (
        f", {n} pinned patch{'es' if n != 1 else ''}" if n else ""
    )


def _trust_line(r: Report) -> str | None:
    t = r.trust
    if not t:
        return None
    pin = t.get("pin")
    pinned = f"; pinned {pin['tag']} (release {pin['chain_length']}, {pin['chain_head'][:16]})" if pin else ""
    return f"trust: {t['status']}: {t['detail']}{pinned}"


def to_text(r: Report, verbose: bool = False, diff_lines: int | None = DEFAULT_DIFF_LINES) -> str:
    t = inert.text
    head = (
        f"self-check of {t(r.target)} against {r.tag or 'no release'}"
        if r.mode == "self"
        else f"fork {t(r.target)} (prefix {t(r.prefix or '.')}) against {_against(r)}"
    )
    out = [f"check_vendor: {head}"]
    for d in r.distributions or []:
        out.append(
            f"  file {t(d['file'])} ({t(d['platforms'])}; {t(d['integrity'])}; vendor root "
            f"{t(d['prefix'] or '.')}): {d['verdict']}"
        )
    stamp = _stamp_line(r, t)
    if stamp:
        out.append(stamp)
    for f in r.files:
        if f.status == "ok" and not verbose:
            continue
        line = f"  {f.status:<8} {t(f.path)}" + (f"  (in {t(f.dist)})" if f.dist else "")
        if f.diagnosis:
            line += f"  [{t(f.diagnosis)}]"
        if f.detail:
            line += f"  {t(f.detail)}"
        out.append(line)
        if f.diff and diff_lines != 0:
            shown, cut = capped(f.diff, diff_lines)
            out.extend("      " + t(ln) for ln in shown.rstrip("\n").split("\n"))
            if cut:
                out.append(f"      ... diff truncated: {cut} more lines (--diff-lines N, --full-diffs)")
    trust = _trust_line(r)
    if trust:
        out.append(t(trust))
    out += [f"note: {t(n)}" for n in r.notes]
    out += [f"error: {t(e)}" for e in r.errors]
    verdict = r.verdict + (f" (identical to {r.stale_tag})" if r.stale_tag else "")
    out.append(f"verdict: {verdict} ({_summary(r)})")
    return "\n".join(out) + "\n"


def to_json(r: Report, diff_lines: int | None = DEFAULT_DIFF_LINES) -> str:
    files = []
    for f in r.files:
        d = f.as_dict()
        d["diff_truncated"] = 0
        if f.diff and diff_lines == 0:
            d["diff"], d["diff_truncated"] = None, f.diff.count("\n")
        elif f.diff:
            d["diff"], d["diff_truncated"] = capped(f.diff, diff_lines)
        files.append(d)
    doc = {
        "schema_version": JSON_SCHEMA_VERSION,
        "mode": r.mode,
        "target": r.target,
        "prefix": r.prefix,
        "tag": r.tag,
        "lineage": r.lineage,
        "digest": r.digest_kind,
        "verdict": r.verdict,
        "stale_tag": r.stale_tag,
        "exit_code": r.exit_code,
        "counts": r.counts(),
        "files": files,
        "notes": r.notes,
        "errors": r.errors,
        "stamp": r.stamp,
        "distributions": r.distributions,
        "trust": r.trust,
    }
    return json.dumps(inert.json_safe(doc), indent=2, sort_keys=False) + "\n"


def to_markdown(r: Report, diff_lines: int | None = DEFAULT_DIFF_LINES) -> str:
    c = inert.md_code
    verdict = r.verdict + (f" (identical to `{r.stale_tag}`)" if r.stale_tag else "")
    head = (
        f"self-check of {c(r.target, False)} against {r.tag or 'no release'}"
        if r.mode == "self"
        else f"fork {c(r.target, False)} (prefix {c(r.prefix or '.', False)}) against {_against(r)}"
    )
    out = [f"### check_vendor: {head}", "", f"**Verdict: {verdict}** — {_summary(r)}", ""]
    stamp = _stamp_line(r, lambda s: c(s, False))
    if stamp:
        out += [stamp, ""]
    if r.distributions:
        out += ["| file | platforms | integrity | verdict |", "|---|---|---|---|"]
        out += [
            f"| {c(d['file'])} | {c(d['platforms'])} | {c(d['integrity'])} | {d['verdict']} |" for d in r.distributions
        ]
        out.append("")
    rows = [f for f in r.files if f.status != "ok"]
    if rows and r.distributions:
        out += ["| status | path | file | diagnosis | detail |", "|---|---|---|---|---|"]
        out += [f"| {f.status} | {c(f.path)} | {c(f.dist)} | {c(f.diagnosis)} | {c(f.detail)} |" for f in rows]
        out.append("")
    elif rows:
        out += ["| status | path | diagnosis | detail |", "|---|---|---|---|"]
        out += [f"| {f.status} | {c(f.path)} | {c(f.diagnosis)} | {c(f.detail)} |" for f in rows]
        out.append("")
        for f in rows:
            if f.diff and diff_lines != 0:
                shown, cut = capped(f.diff, diff_lines)
                out += [
                    f"<details><summary>diff of <code>{inert.html(f.path)}</code></summary>",
                    "",
                    *inert.md_fence(shown.rstrip("\n"), "diff"),
                ]
                if cut:
                    out.append(f"... diff truncated: {cut} more lines")
                out += ["</details>", ""]
    trust = _trust_line(r)
    if trust:
        out += [f"- {c(trust, False)}"]
    out += [f"- note: {c(n, False)}" for n in r.notes]
    out += [f"- error: {c(e, False)}" for e in r.errors]
    return "\n".join(out).rstrip("\n") + "\n"


def render(r: Report, fmt: str, verbose: bool = False, diff_lines: int | None = DEFAULT_DIFF_LINES) -> str:
    if fmt == "json":
        return to_json(r, diff_lines)
    if fmt == "markdown":
        return to_markdown(r, diff_lines)
    return to_text(r, verbose, diff_lines)


def error_markdown(message: str, exit_code: int) -> str:
    """What --format markdown prints when the check cannot run, so a CI job summary is never empty."""
    return f"### check_vendor: could not check\n\n**Exit {exit_code}**: {inert.md_code(message, False)}\n"
