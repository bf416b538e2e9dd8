"""A review's probes of 99cd1f7 (the K-grouped BF16 call cache: warm launches, metadata block and refusals equal
cold ones) and fe82e0a (qualify_sm120's report after every step), kept as regressions. The test_bug_* ones failed
before their fix: a bad --out exited 1 with a traceback after the self-test ran (now 2 before any step), a run
stopped in its first step left a stale report, an unreadable step result crashed the kit, a failed write left
the temporary file."""

from __future__ import annotations

import ctypes
import json
import os
import struct
import sys

import pytest
import torch
from test_call_cache_cpu import _like, _names, _t, rig  # noqa: F401 - the rig fixture, used by name

import deep_gemm_sm120 as dg
from deep_gemm_sm120 import launch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))

import qualify_sm120 as kit

FN = dg.k_grouped_bf16_gemm_tn_contiguous


# ---------------------------------------------------------------- 1. K-grouped call cache


@pytest.fixture()
def meta_reader(rig, monkeypatch):  # noqa: F811 - the imported rig fixture
    """Per launch: the aux block (a, b bases, row strides, slots) and the ks int32 pairs as the kernel reads them,
    with a/b addresses written as the call's tensor names."""
    seen = []
    inner = launch.BOUND.launch

    def reading(*args):
        inner(*args)
        ln = rig.launches[-1]
        p = dict(ln.args)
        g = p["num_groups"]
        aux = list(struct.unpack("<5q", ctypes.string_at(p["aux"], 40)))
        ks = list(struct.unpack(f"<{g}i", ctypes.string_at(p["layout"], 4 * g)))
        seen.append({"aux": aux, "ks": ks, "layout_is_aux_plus_40": p["layout"] == p["aux"] + 40})

    monkeypatch.setattr(launch.BOUND, "launch", reading)
    return seen


def _call(ks, m=64, n=72, with_c=False, alias=False, offset=0, layout=True, spelling="ks_cpu"):
    total = sum(int(x) for x in list(ks))
    a, b = _t(total, m), _t(total, n)
    if offset:  # views 8 elements (16 bytes) into their storage: same alignment class
        a, b = _like(a, offset=offset), _like(b, offset=offset)
    g = len(list(ks))
    d = _t(g, m, n, dtype=torch.float32)
    kw = {}
    if with_c:
        kw["c"] = d if alias else torch.randn(g, m, n)
    args = (a, b, d)
    if spelling == "ks":
        kw["ks"] = ks
    else:
        args = (a, b, d, ks) + ((torch.tensor([int(x) for x in ks], dtype=torch.int32),) if layout else ())
    return args, kw


def _norm_meta(entry, a, b):
    aux = list(entry["aux"])
    aux[0] = "@a" if aux[0] == a.data_ptr() else aux[0]
    aux[1] = "@b" if aux[1] == b.data_ptr() else aux[1]
    aux[4] = bool(aux[4])
    return {**entry, "aux": aux}


@pytest.mark.parametrize(
    "ks,kw",
    [
        ([64, 0, 192], {}),
        ((64, 0, 192), {}),
        ([64, 0, 192, 0, 7], {"with_c": True}),
        ([1], {"with_c": True, "alias": True}),
        ([128, 64], {"offset": 8}),
        ([128, 64], {"layout": False, "spelling": "ks"}),
    ],
)
def test_probe_meta_block_warm_equals_cold_and_points_at_this_calls_operands(rig, meta_reader, ks, kw):  # noqa: F811 - the imported rig fixture
    # probe (no bug found): the metadata block holds the current call's a/b, the strides, a slots buffer and ks
    out = []
    for cold in (True, False, True):
        if cold:
            launch.forget_calls()
        args, kwargs = _call(ks, **kw)
        got, preps = rig.record(FN, args, kwargs, _names(args, kwargs))
        assert got[0] == "ok", got
        assert preps == (1 if cold else 0)
        a, b = args[0], args[1]
        (entry,) = meta_reader[-1:]
        meta_reader.clear()
        e = _norm_meta(entry, a, b)
        assert e["aux"][:2] == ["@a", "@b"] and e["ks"] == [int(x) for x in ks] and e["layout_is_aux_plus_40"]
        out.append((got, e))
    assert out[0] == out[1] == out[2]


def test_probe_list_and_tuple_share_one_entry_and_launch_alike(rig):  # noqa: F811 - the imported rig fixture
    launch.forget_calls()
    args, kw = _call([64, 128])
    cold, p1 = rig.record(FN, args, kw, _names(args, kw))
    args, kw = _call((64, 128))
    warm, p2 = rig.record(FN, args, kw, _names(args, kw))
    assert (p1, p2) == (1, 0) and cold == warm


@pytest.mark.parametrize("kind", ["numpy", "bool", "generator", "intsubclass", "both"])
def test_probe_unkeyed_ks_spellings_are_checked_every_time(rig, kind):  # noqa: F811 - the imported rig fixture
    # probe (no bug found): ks that the key does not hold run the checks each call; warm == cold; no entry added
    np = pytest.importorskip("numpy")

    class MyInt(int):
        pass

    base = [1, 1] if kind == "bool" else [64, 128]

    def spell():
        if kind == "numpy":
            return [np.int64(x) for x in base]
        if kind == "bool":
            return [True, True]
        if kind == "generator":
            return (x for x in base)
        if kind == "intsubclass":
            return [MyInt(x) for x in base]
        return list(base)

    def build():
        a, b, d = _t(sum(base), 64), _t(sum(base), 72), _t(2, 64, 72, dtype=torch.float32)
        if kind == "both":
            return (a, b, d, list(base)), {"ks": list(base)}
        return (a, b, d, spell()), {}

    launch.forget_calls()
    args, kw = build()
    cold, _ = rig.record(FN, args, kw, _names(args, kw))
    entries_cold = rig.entries()
    a, b, d = _t(sum(base), 64), _t(sum(base), 72), _t(2, 64, 72, dtype=torch.float32)
    assert rig.record(FN, (a, b, d, list(base)), {}, {"arg0": a, "arg1": b, "arg2": d})[0][0] == "ok"
    entries = rig.entries()
    args, kw = build()
    warm, preps = rig.record(FN, args, kw, _names(args, kw))
    assert warm == cold and preps == 1
    assert rig.entries() == entries and entries_cold == (0 if cold[0] == "raise" else entries_cold)


def test_probe_total_k_zero_alias_and_copy_warm_and_cold(rig):  # noqa: F811 - the imported rig fixture
    # probe (no bug found): total K = 0 writes d = c (or leaves it when c is d) whether cached or not
    for warm in (False, True):
        if not warm:
            launch.forget_calls()
        a, b = _t(0, 16), _t(0, 24)
        d, c = torch.full((2, 16, 24), 5.0), torch.randn(2, 16, 24)
        FN(a, b, d, [0, 0], c=c)
        assert torch.equal(d, c)
        d2 = torch.full((2, 16, 24), 5.0)
        FN(a, b, d2, [0, 0], c=d2)  # c aliasing d: key identical to a separate c of the same layout
        assert torch.equal(d2, torch.full((2, 16, 24), 5.0))
        d3 = torch.full((2, 16, 24), 5.0)
        FN(a, b, d3, [0, 0])
        assert not d3.any()


def test_probe_g_zero_and_failing_calls_add_no_entry(rig):  # noqa: F811 - the imported rig fixture
    launch.forget_calls()
    a, b, d = _t(0, 16), _t(0, 24), _t(0, 16, 24, dtype=torch.float32)
    assert rig.record(FN, (a, b, d, []), {}, {})[0] == ("ok", [])
    n = rig.entries()
    for bad in ([64], [-1], [2**31], [32, 33]):
        a, b, d = _t(64, 16), _t(64, 24), _t(len(bad), 16, 24, dtype=torch.float32)
        first, _ = rig.record(FN, (a, b, d, bad), {}, {})
        second, preps = rig.record(FN, (a, b, d, bad), {}, {})
        if bad != [64]:
            assert first[0] == "raise" and first == second and preps == 1 and rig.entries() == n, (bad, first)
        else:
            n = rig.entries()


def _sm120(monkeypatch):
    monkeypatch.setattr(
        kit, "probe", lambda env: {"cuda": True, "gpu": "RTX 5090", "capability": [12, 0], "package": "0.8.7"}
    )
    monkeypatch.setattr(kit, "_commit", lambda: "")


def test_bug_out_in_missing_directory_exits_2_before_any_step(monkeypatch, tmp_path):
    # REAL BUG: --out in a directory that does not exist (or an unwritable one) is found only when the first
    # step's report is written (after the ~4-minute self-test ran): FileNotFoundError escapes main(), exit 1 with a
    # traceback ("a step failed"), not 2 ("could not run"), and no step result is kept anywhere.
    _sm120(monkeypatch)
    ran = []
    monkeypatch.setattr(kit, "step", lambda name, *a, **k: ran.append(name) or {"step": name, "passed": True})
    try:
        rc = kit.main(["--out", str(tmp_path / "no" / "such" / "q.json"), "--no-bench", "--no-sanitizers"])
    except OSError as e:
        pytest.fail(f"main() raised {type(e).__name__} after running {ran}: exit 1 with a traceback, not 2")
    assert rc == kit.EXIT_COULD_NOT_RUN and ran == []


def test_bug_out_is_a_directory_exits_2_before_any_step(monkeypatch, tmp_path):
    # REAL BUG (same cause): --out naming a directory -> IsADirectoryError after the first step.
    _sm120(monkeypatch)
    ran = []
    monkeypatch.setattr(kit, "step", lambda name, *a, **k: ran.append(name) or {"step": name, "passed": True})
    try:
        rc = kit.main(["--out", str(tmp_path), "--no-bench", "--no-sanitizers"])
    except OSError as e:
        pytest.fail(f"main() raised {type(e).__name__} after running {ran}")
    assert rc == kit.EXIT_COULD_NOT_RUN and ran == []


def test_bug_a_run_stopped_in_its_first_step_leaves_a_stale_pass(monkeypatch, tmp_path):
    # REAL BUG: the report is first written after step 1, so a run stopped (killed, Ctrl-C, time limit) during the
    # self-test leaves the previous run's file in place, e.g. verdict "pass" from another commit / GPU: the
    # "incomplete until the last step" promise does not hold for the first (longest, 240 s) step.
    _sm120(monkeypatch)
    out = tmp_path / "q.json"
    out.write_text(json.dumps({"verdict": "pass", "steps": [], "failed_steps": [], "commit": "old"}))

    def fake_step(name, *a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(kit, "step", fake_step)
    with pytest.raises(KeyboardInterrupt):
        kit.main(["--out", str(out)])
    assert json.loads(out.read_text())["verdict"] != "pass", "a stale passing report survives a stopped run"


def test_bug_truncated_bench_json_crashes_the_kit(monkeypatch, tmp_path):
    # REAL BUG: a step's result file that is not valid JSON (benchmarks/harness.finish writes --json in place, not
    # via a temp file, so a benchmark killed at its time limit mid-write, or one whose json.dump raises, leaves a
    # truncated file) makes json.load raise in main(): the benchmark row is never recorded, the report stays
    # "incomplete" although every step ended, and the kit exits 1 via a traceback. Same for selftest.json.
    _sm120(monkeypatch)
    out = tmp_path / "q.json"

    def fake_step(name, cmd, env, limit, deadline, parse=None):
        if name == "benchmark":
            with open(cmd[cmd.index("--json") + 1], "w") as fh:
                fh.write('{"results": [1, 2')  # cut off
            return {"step": name, "passed": False, "rc": None}
        return {"step": name, "passed": True}

    monkeypatch.setattr(kit, "step", fake_step)
    try:
        rc = kit.main(["--out", str(out), "--no-sanitizers"])
    except ValueError as e:
        pytest.fail(f"main() raised {type(e).__name__}: {e}; report verdict {json.loads(out.read_text())['verdict']}")
    report = json.loads(out.read_text())
    assert rc == kit.EXIT_FAILED and report["verdict"] == "fail" and report["failed_steps"] == ["benchmark"]


def test_bug_truncated_selftest_json_crashes_the_kit(monkeypatch, tmp_path):
    # REAL BUG (same cause; less likely since selftest.write is atomic, but any stray/invalid file does it):
    # no report at all is written, exit 1 via traceback.
    _sm120(monkeypatch)
    out = tmp_path / "q.json"

    def fake_step(name, cmd, env, limit, deadline, parse=None):
        if name == "selftest":
            with open(cmd[cmd.index("--json") + 1], "w") as fh:
                fh.write("{")
            return {"step": name, "passed": False, "rc": 1}
        return {"step": name, "passed": True}

    monkeypatch.setattr(kit, "step", fake_step)
    try:
        rc = kit.main(["--out", str(out), "--no-sanitizers", "--no-bench"])
    except ValueError as e:
        pytest.fail(f"main() raised {type(e).__name__}: {e}; report written: {out.exists()}")
    assert rc == kit.EXIT_FAILED and json.loads(out.read_text())["failed_steps"] == ["selftest"]


def test_bug_a_failed_write_leaves_the_tmp_file(monkeypatch, tmp_path):
    # REAL BUG (minor): write_report leaves <out>.tmp behind when json.dump / the write fails (disk full, an
    # interrupt mid-dump): nothing removes it on error.
    out = tmp_path / "q.json"

    class Boom:
        pass

    with pytest.raises(TypeError):
        kit.write_report(str(out), {"x": Boom()})
    assert not list(tmp_path.glob("*.tmp")), "write_report left its .tmp behind"


def test_probe_exit_codes_and_incomplete_between_steps(monkeypatch, tmp_path):
    # probe (no bug found): 0 / 1 as documented; between steps the file says "incomplete" and is valid JSON
    _sm120(monkeypatch)
    out = tmp_path / "q.json"
    seen = []

    def fake_step(name, cmd, env, limit, deadline, parse=None):
        if out.exists():
            seen.append(json.loads(out.read_text())["verdict"])
        return {"step": name, "passed": name != "gpu tests"}

    monkeypatch.setattr(kit, "step", fake_step)
    assert kit.main(["--out", str(out), "--no-bench", "--no-sanitizers"]) == kit.EXIT_FAILED
    assert set(seen) == {"incomplete"} and json.loads(out.read_text())["verdict"] == "fail"
    monkeypatch.setattr(kit, "step", lambda name, *a, **k: {"step": name, "passed": True})
    assert kit.main(["--out", str(out), "--no-bench", "--no-sanitizers"]) == kit.EXIT_OK
    assert not list(tmp_path.glob("*.tmp"))


def test_probe_exception_between_steps_keeps_finished_steps(monkeypatch, tmp_path):
    # probe (no bug found): an exception raised after step 2's row (in the next step) leaves steps 1-2, incomplete
    _sm120(monkeypatch)
    out = tmp_path / "q.json"

    def fake_step(name, *a, **k):
        if name == "gpu tests (replicated)":
            raise RuntimeError("boom")
        return {"step": name, "passed": True}

    monkeypatch.setattr(kit, "step", fake_step)
    with pytest.raises(RuntimeError):
        kit.main(["--out", str(out)])
    r = json.loads(out.read_text())
    assert r["verdict"] == "incomplete" and [s["step"] for s in r["steps"]] == ["selftest", "gpu tests"]
