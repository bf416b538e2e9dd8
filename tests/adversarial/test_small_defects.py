"""Small defects found when trying the tools as a new user would (issue 38), and the stamp that tried to smuggle a
second verdict into the JSON report."""

from __future__ import annotations

import json
import subprocess
import sys

from vendor_helpers import PREFIX, ROOT, V2, make_fork, run_cv


def test_bytes_from_without_upstream_is_a_usage_error(canon, tmp_path):
    fork = make_fork(tmp_path, V2)
    code, _, err = run_cv("--repo", str(canon), "--fork", str(fork), "--bytes-from", str(fork))
    assert code == 3 and "--bytes-from goes with --upstream" in err


def test_a_missing_bytes_from_path_is_named_as_such(canon, tmp_path):
    import shutil

    canon = shutil.copytree(canon, tmp_path / "canon")  # a lineage is written into it below
    fork = make_fork(tmp_path, V2)
    code, _, err = run_cv(
        "--repo", str(canon), "--fork", str(fork), "--upstream", "nope", "--bytes-from", str(tmp_path / "nowhere")
    )
    assert code == 3 and "unknown upstream lineage" in err  # the lineage is checked first
    from vendorkit.lineage import build, write
    from vendorkit.manifest import FileEntry

    write(
        str(canon),
        build(
            "probe", "v1.0.0", PREFIX, "test", [FileEntry("mma/sm120.cuh", "0" * 64, None, None, None)], "2026-12-02"
        ),
    )
    code, _, err = run_cv(
        "--repo", str(canon), "--fork", str(fork), "--upstream", "probe", "--bytes-from", str(tmp_path / "nowhere")
    )
    assert code == 2 and "--bytes-from" in err and "no such file or directory" in err and "fork path" not in err


def test_refusal_hints_never_begin_with_or(canon, tmp_path):
    fork = make_fork(tmp_path, {rel: b"// its own header\n" for rel in V2})  # not-vendored: its own headers
    code, out, _ = run_cv("--repo", str(canon), "--fork", str(fork), "--sync")
    hints = out.split("To proceed:", 1)[1].splitlines()[1:]
    assert hints and not hints[0].lstrip().startswith("or "), out


def _help(*argv: str) -> str:
    return subprocess.run([sys.executable, *argv, "--help"], capture_output=True, text=True, timeout=60).stdout


def test_help_texts_are_whole_and_name_every_exit_code():
    gate = _help(str(ROOT / "tools/compile_gate.py"))
    assert "instantiation the host can choose" in gate and "Exit: 0 all pass, 1 a check failed, 3" in gate
    prov = _help(str(ROOT / "tools/check_vendor.py"), "provenance")
    assert all(s in prov.replace("\n", " ") for s in ("0 every file matches", "1 some file", "2 a source", "3 usage"))
    watch = _help(str(ROOT / "tools/watch_downstreams.py")).replace("\n", " ")
    assert "PIP_INDEX_URL" in watch and "SM120_PYPI_INDEX" in watch and "https://pypi.org)" not in watch


def test_a_stamp_cannot_smuggle_keys_into_the_report(canon, tmp_path):
    fork = make_fork(tmp_path, V2)
    assert run_cv("--repo", str(canon), "--fork", str(fork), "--sync")[0] == 0
    stamp = fork / PREFIX / ".sm120-vendor.json"
    doc = json.loads(stamp.read_text())
    doc["patches"] = [
        {
            "path": "mma/sm120.cuh",
            "base_sha256": doc["files"][2]["sha256"],
            "patched_sha256": "0" * 64,
            "reason": "x",
            "verdict": "in-sync",
            "exit_code": 0,
        }
    ]
    doc["verdict"] = "in-sync"
    stamp.write_text(json.dumps(doc))
    code, out, _ = run_cv("--repo", str(canon), "--fork", str(fork), "--format", "json")
    report = json.loads(out)
    assert code == 1 and report["verdict"] == "drifted" and out.count('"verdict"') == 1
    assert "keys --sync never writes" in " ".join(report["stamp"]["problems"])
    assert all(
        set(p) <= {"path", "base_sha256", "patched_sha256", "reason", "upstream"} for p in report["stamp"]["patches"]
    )
