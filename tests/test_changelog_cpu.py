"""One version, one history: the package's version is the latest release's tag, setup.py takes it from
version.py, and CHANGELOG.md has one entry per release whose file lists are what the manifests record."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

import deep_gemm_sm120

ROOT = Path(__file__).resolve().parents[1]
ENTRY = re.compile(r"^## (v\d+\.\d+\.\d+) \((\d{4}-\d{2}-\d{2})\)$", re.M)
FILES = re.compile(r"^- (added|changed|removed): (.+)$", re.M)


def _version_key(tag: str) -> tuple[int, ...]:
    return tuple(int(x) for x in tag.lstrip("v").split("."))


def _manifests() -> list[dict]:
    docs = [yaml.safe_load(p.read_text()) for p in (ROOT / "vendor_manifests").glob("v*.yaml")]
    return sorted(docs, key=lambda m: _version_key(m["tag"]))


def _expected_entries() -> dict[str, tuple[str, dict[str, list[str]]]]:
    out, prev = {}, None
    for m in _manifests():
        files = {f["path"]: f["sha256"] for f in m["files"]}
        before = prev or {}
        lists = {
            "added": sorted(set(files) - set(before)),
            "removed": sorted(set(before) - set(files)),
            "changed": sorted(p for p in files if p in before and files[p] != before[p]),
        }
        out[m["tag"]] = (str(m["created"]), {k: v for k, v in lists.items() if v})
        prev = files
    return out


def _entries(text: str) -> dict[str, tuple[str, dict[str, list[str]]]]:
    heads = list(ENTRY.finditer(text))
    out = {}
    for h, nxt in zip(heads, heads[1:] + [None]):
        body = text[h.end() : nxt.start() if nxt else len(text)]
        lists = {kind: re.findall(r"`([^`]+)`", names) for kind, names in FILES.findall(body)}
        assert h.group(1) not in out, f"CHANGELOG.md has {h.group(1)} twice"
        out[h.group(1)] = (h.group(2), lists)
    return out


def test_version_is_the_latest_release():
    latest = _manifests()[-1]["tag"]
    assert deep_gemm_sm120.__version__ == latest.lstrip("v"), (
        f"version.py says {deep_gemm_sm120.__version__}, the latest manifest is {latest}: a release bumps both"
    )


def test_setup_reads_the_one_version():
    setup = (ROOT / "setup.py").read_text()
    assert "version.py" in setup and not re.search(r"version\s*=\s*[\"']\d", setup)


def test_changelog_has_every_release_as_its_manifest_records_it():
    text = (ROOT / "CHANGELOG.md").read_text()
    entries, expected = _entries(text), _expected_entries()
    assert list(entries) == sorted(entries, key=_version_key, reverse=True), "entries newest first"
    assert set(entries) == set(expected), (sorted(set(expected) - set(entries)), sorted(set(entries) - set(expected)))
    for tag, (date, lists) in expected.items():
        assert entries[tag] == (date, lists), f"CHANGELOG.md {tag} disagrees with vendor_manifests/{tag}.yaml"


def test_the_changelog_check_sees_a_wrong_list():
    expected = _expected_entries()
    tag = next(reversed(expected))
    date, lists = expected[tag]
    kind = next(iter(lists))
    text = f"## {tag} ({date})\n\nx\n\n- {kind}: `not/a_file.cuh`\n"
    assert _entries(text)[tag] != (date, lists)
