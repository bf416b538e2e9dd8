"""Markdown from fork-controlled text is data once rendered: every report check_vendor, provenance and the watcher
write is rendered by cmark-gfm (the parser GitHub uses) and the HTML is inspected. Generated hostile names (a
marker plus markdown, HTML, mention, reference and link syntax) must appear only inside <code> or <pre>, and
the HTML holds only the elements the reports themselves use: no link, image, raw HTML or mention from a fork."""

from __future__ import annotations

import html.parser
import os
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from vendor_helpers import PREFIX, V2, make_fork, run_cv

cmarkgfm = pytest.importorskip("cmarkgfm")  # in the test extras; a missing one is a broken install, not a pass
from cmarkgfm.cmark import Options

MARK = "ZQX"
ALLOWED = {
    "h1",
    "h2",
    "h3",
    "h4",
    "p",
    "strong",
    "em",
    "code",
    "pre",
    "table",
    "thead",
    "tbody",
    "tr",
    "th",
    "td",
    "ul",
    "li",
    "details",
    "summary",
    "br",
    "hr",
}
PIECES = [
    "@octocat",
    "#12",
    "GH-3",
    "org/repo#4",
    "[x](https://evil.example)",
    "![i](http://evil/i.png)",
    "<img src=x>",
    "<b>",
    "</code>",
    "<!--",
    "-->",
    "https://evil.example",
    "www.evil.example",
    "`",
    "``",
    "|",
    "\\",
    "\\|",
    "*",
    "_",
    "~~",
    "<details>",
    "&lt;",
    "&#64;",
    " ",
    "\t",
    "\n",
    "\u202e",
    "\u2028",
]
EXAMPLES = int(os.environ.get("SM120_FUZZ_EXAMPLES", "20"))


class _Inspect(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.tags: set[str] = set()
        self.leaks: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        if tag not in ("br", "hr"):
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if tag in self.stack:
            while self.stack and self.stack.pop() != tag:
                pass

    def handle_data(self, data):
        if MARK in data and not {"code", "pre"} & set(self.stack):
            self.leaks.append(data)

    def handle_comment(self, data):  # only the watcher's own two marker lines are comments
        if not re.fullmatch(r" deep_gemm_sm120:vendor-drift name=[A-Za-z0-9._-]+ | findings [0-9a-f]{32} ", data):
            self.tags.add("<!--")


def _assert_rendered_inert(md: str) -> None:
    rendered = cmarkgfm.github_flavored_markdown_to_html(md, options=Options.CMARK_OPT_UNSAFE)
    p = _Inspect()
    p.feed(rendered)
    p.close()
    assert not p.leaks, f"fork text outside code: {p.leaks[:3]}"
    assert p.tags <= ALLOWED, f"elements no report writes: {sorted(p.tags - ALLOWED)}\n{rendered[:2000]}"


def _name(pieces: list[str]) -> str:
    return "sm120_" + MARK + "".join(pieces) + MARK + ".cuh"


names = st.lists(st.lists(st.sampled_from(PIECES), min_size=1, max_size=6).map(_name), min_size=1, max_size=4)


def _fork(tmp, hostile: list[str]):
    files = dict(V2)
    files["common/sm120_tma.cuh"] = V2["common/sm120_tma.cuh"] + f"// {MARK} @octocat <b> [x](http://e)\n".encode()
    for i, n in enumerate(hostile):
        files["impls/" + (n[:6] + str(i) + n[6:]).replace("/", "_")] = b"// hostile\n"
    return make_fork(tmp, files)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(hostile=names)
def test_check_markdown_renders_inert(canon, tmp_path_factory, hostile):
    fork = _fork(tmp_path_factory.mktemp("f"), hostile)
    code, md, _ = run_cv("--repo", str(canon), "--fork", str(fork), "--format", "markdown")
    assert code == 1 and MARK in md
    _assert_rendered_inert(md)
    code, md, _ = run_cv("provenance", str(fork), "--repo", str(canon), "--format", "markdown")
    assert MARK in md
    _assert_rendered_inert(md)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(hostile=names)
def test_watcher_issue_body_and_summary_render_inert(canon, tmp_path_factory, hostile):
    from vendorkit import watch
    from vendorkit.compare import Comparator, Report
    from vendorkit.forkview import LocalFork
    from vendorkit.manifest import ManifestSet
    from vendorkit.provenance import load_index

    fork = _fork(tmp_path_factory.mktemp("w"), hostile)
    ms = ManifestSet.load_dir(str(canon / "vendor_manifests"))
    ds = watch.Downstream("hostile", "org/hostile", "main", PREFIX, "latest")
    rep = Report(mode="fork", target=ds.source, tag=ms.latest.tag, prefix=PREFIX, digest_kind="sha256")
    Comparator(LocalFork(str(fork)), ms, ms.latest, PREFIX, want_diff=True).run(rep)
    index = load_index(str(canon))
    res = watch.ForkResult(
        ds,
        rep,
        commit="0" * 40,
        ms=ms,
        provenance=[(f.path, index.matches(f.path, f.actual)) for f in rep.files if f.actual],
    )
    for md in (watch.issue_body(res, ms), watch.summary_markdown([res], lambda s: s)):
        assert MARK in md
        _assert_rendered_inert(md)


def test_error_markdown_renders_inert(canon, tmp_path):
    bad = tmp_path / f"{MARK}@octocat [x](http://e) <b>-1.0-py3-none-any.whl"
    code, md, _ = run_cv("--repo", str(canon), "--fork", str(bad), "--format", "markdown")
    assert code == 2 and MARK in md
    _assert_rendered_inert(md)
