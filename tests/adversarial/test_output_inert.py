"""Fork-controlled text is inert in every output: a file name cannot forge a report line, drive the terminal,
break out of a markdown code span (mentions, links, images, HTML) or take over another downstream's issue."""

from __future__ import annotations

import json
import os
import re

from vendor_helpers import PREFIX, V2, make_fork, run_cv
from watch_helpers import config, entry, remote_fork, watch

HOSTILE = [
    "sm120_a.cuh\nverdict: in-sync (5 ok)",
    "sm120_\x1b[2J\x1b[31mred.cuh",
    "sm120_\u202eevil.cuh",
    "sm120_``` `@octocat <b>bold <img src=x onerror=alert(1)> [x](javascript:alert(1)) ![i](http:evil) #1 <!-- x -->.cuh",
    "sm120_|pipe|.cuh",
    "sm120_\u2028line.cuh",
]
MARKUP = ("@octocat", "<b>", "](", "![", "<!--", "\x1b", "\u202e")


def _code_spans_removed(line: str) -> str:
    """The line with its code spans taken out, by CommonMark's rule: a run of n backticks opens a span that the
    next run of exactly n backticks closes."""
    out, i = [], 0
    while i < len(line):
        m = re.compile(r"`+").search(line, i)
        if m is None:
            out.append(line[i:])
            break
        out.append(line[i : m.start()])
        n = len(m.group())
        close = next((c for c in re.finditer(r"`+", line[m.end() :]) if len(c.group()) == n), None)
        if close is None:
            out.append(m.group())
            i = m.end()
        else:
            i = m.end() + close.end()
    return "".join(out)


def _assert_inert_markdown(md: str) -> None:
    fence, columns = None, None
    for line in md.splitlines():
        m = re.match(r"^(`{3,})", line)
        if fence is None and m:
            fence = m.group(1)
            continue
        if fence is not None:  # inside a fenced block: literal; it ends only at a line of at least that fence
            if re.match(rf"^`{{{len(fence)},}}\s*$", line):
                fence = None
            continue
        bare = _code_spans_removed(line)
        for bad in MARKUP:
            assert bad not in bare, f"{bad!r} outside a code span in: {line!r}"
        if line.startswith("|"):  # every row of a table has its header's number of cell borders
            pipes = len(re.findall(r"(?<!\\)\|", line))
            columns = columns or pipes
            assert pipes == columns, f"a cell broke out of its column: {line!r}"
        else:
            columns = None
    assert fence is None


def _hostile_fork(tmp_path):
    files = dict(V2)
    for name in HOSTILE:
        files[f"impls/{name}"] = b"// hostile name\n"
    files["common/sm120_tma.cuh"] = V2["common/sm120_tma.cuh"] + b"// ``` @octocat <script>x</script>\n\x1b[31m\n"
    fork = make_fork(tmp_path, files)
    (fork / PREFIX / "impls").joinpath(os.fsdecode(b"sm120_\xff\xfe.cuh")).write_bytes(b"// undecodable name\n")
    return fork


def test_text_output_cannot_forge_lines_or_drive_the_terminal(canon, tmp_path):
    fork = _hostile_fork(tmp_path)
    code, out, err = run_cv("--repo", str(canon), "--fork", str(fork))
    assert code == 1
    lines = out.splitlines()
    assert [ln for ln in lines if ln.startswith("verdict:")] == [lines[-1]] and "drifted" in lines[-1]
    for bad in ("\x1b", "\u202e", "\u2028", "\r"):
        assert bad not in out
    out.encode("utf-8")  # no lone surrogates: prints on any UTF-8 terminal
    assert "sm120_a.cuh\\x0averdict: in-sync (5 ok)" in out and "sm120_\\xff\\xfe.cuh" in out  # the bytes
    assert len([ln for ln in lines if ln.startswith("  extra ")]) == len(HOSTILE) + 1


def test_markdown_output_keeps_names_in_code_spans(canon, tmp_path):
    fork = _hostile_fork(tmp_path)
    code, md, _ = run_cv("--repo", str(canon), "--fork", str(fork), "--format", "markdown")
    assert code == 1 and "@octocat" in md
    _assert_inert_markdown(md)


def _strings(obj):
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield k
            yield from _strings(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _strings(v)


def test_json_output_is_strict_utf8_and_names_every_file(canon, tmp_path):
    """Valid UTF-8 JSON with no lone surrogate (a strict reader takes it); an undecodable byte of a name is the
    four characters \\xNN, as the docs say."""
    fork = _hostile_fork(tmp_path)
    code, out, _ = run_cv("--repo", str(canon), "--fork", str(fork), "--format", "json")
    doc = json.loads(out)
    paths = {f["path"] for f in doc["files"]}
    assert {f"impls/{n}" for n in HOSTILE} <= paths and "impls/sm120_\\xff\\xfe.cuh" in paths
    assert out.isascii()
    for s in _strings(doc):
        s.encode("utf-8")  # raises on a lone surrogate


def test_error_messages_are_escaped(canon, tmp_path):
    bad = tmp_path / "no\nverdict: in-sync\x1b[0m-1.0-py3-none-any.whl"
    code, out, err = run_cv("--repo", str(canon), "--fork", str(bad))
    assert code == 2 and err.count("\n") == 1 and "\x1b" not in err and "\\x0averdict" in err


def test_issue_bodies_are_inert_and_markers_cannot_be_planted(canon, gh, tmp_path):
    files = dict(V2)
    for name in HOSTILE[3:]:
        files[f"impls/{name}"] = b"// hostile name\n"
    files["impls/sm120_<!-- deep_gemm_sm120:vendor-drift name=victim -->.cuh"] = b"// planted marker\n"
    remote_fork(tmp_path / "a", gh, "org/hostile", files)
    remote_fork(tmp_path / "b", gh, "org/victim", V2)
    cfg = config(tmp_path, entry("hostile", "org/hostile"), entry("victim", "org/victim"))
    issues = ["--issues", "--repo", "us/deep_gemm_sm120"]
    code, doc, _ = watch(canon, gh, cfg, tmp_path, *issues)
    store = gh.issues["us/deep_gemm_sm120"]
    assert code == 1 and len(store) == 1
    body = store[0]["body"]
    assert body.splitlines()[0] == "<!-- deep_gemm_sm120:vendor-drift name=hostile -->"
    _assert_inert_markdown("\n".join(body.splitlines()[2:]))
    # the victim is in sync: on the next run it must not claim (and close) the hostile fork's issue
    code, doc, _ = watch(canon, gh, cfg, tmp_path, *issues)
    assert store[0]["state"] == "open" and gh.comments == []
    assert {d["name"]: d["issue"] for d in doc["downstreams"]} == {"hostile": "unchanged #1", "victim": "-"}
