"""Names, tags and digests are matched whole (`fullmatch`), never with `$`, which also matches before a trailing
newline: a tag "0.1.9\\n" or a name "x\\n" is refused everywhere."""

from __future__ import annotations

import ast
import json
import re

import pytest
from vendor_helpers import ROOT, run_cv


def _patterns(tree: ast.AST):
    """(line, pattern text, flags given?) of every literal pattern passed to a re function or re.compile."""
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "re"
            and node.func.attr in ("compile", "match", "search", "fullmatch")
            and node.args
        ):
            continue
        arg = node.args[0]
        if isinstance(arg, ast.Constant) and isinstance(arg.value, (str, bytes)):
            text = arg.value.decode("latin-1") if isinstance(arg.value, bytes) else arg.value
            yield node.lineno, text, len(node.args) > 1 or bool(node.keywords)
        elif isinstance(arg, ast.JoinedStr):
            yield node.lineno, "".join(v.value for v in arg.values if isinstance(v, ast.Constant)), False


def test_no_pattern_in_the_tools_anchors_with_a_dollar():
    offenders = []
    for path in sorted((ROOT / "tools").rglob("*.py")):
        for line, pattern, flagged in _patterns(ast.parse(path.read_text(encoding="utf-8"))):
            if re.search(r"(?<!\\)\$$", pattern) and not flagged:  # re.M patterns anchor lines on purpose
                offenders.append(f"{path.relative_to(ROOT)}:{line}: {pattern!r}")
    assert not offenders, "use fullmatch instead of a trailing $:\n" + "\n".join(offenders)


@pytest.mark.parametrize("tag", ["v0.1.9\n", "0.1.9\n", "v0.1.9\r\n"])
def test_a_tag_with_a_trailing_newline_is_refused(canon, tmp_path, tag):
    from vendorkit import versions

    assert not versions.is_tag(tag) and not versions.is_lineage_tag(tag)
    vendor = tmp_path / "VENDOR-sm120.json"
    vendor.write_text(
        json.dumps({"upstream": "x", "tag": tag, "files": {"deep_gemm/include/deep_gemm/common/sm120_a.cuh": "0" * 64}})
    )
    code, _, err = run_cv("import-manifest", str(vendor), "--upstream", "probe", "--repo", str(canon))
    assert code == 3 and "is not a version" in err
    assert not (canon / "vendor_manifests" / "upstreams" / "probe").exists()
    code, _, err = run_cv("--repo", str(canon), "--tag", tag)
    assert code == 3


@pytest.mark.parametrize("field, value", [("name", "ok\n"), ("repo", "org/DeepGEMM\n"), ("track", "latest\n")])
def test_watcher_config_values_are_matched_whole(canon, tmp_path, field, value):
    import yaml

    from vendorkit import watch
    from vendorkit.errors import UsageError
    from vendorkit.manifest import ManifestSet

    entry = {
        "name": "ok",
        "repo": "org/DeepGEMM",
        "ref": "main",
        "prefix": "deep_gemm",
        "track": "latest",
        field: value,
    }
    cfg = tmp_path / "ds.yaml"
    cfg.write_text(yaml.safe_dump({"downstreams": [entry]}))
    ms = ManifestSet.load_dir(str(canon / "vendor_manifests"))
    with pytest.raises(UsageError):
        watch.load_config(str(cfg), ms, str(canon))
