"""The self-test's judging and the automatic scale-encoding choice, without a GPU (issue 44).

The probe's outputs are simulated in float64 from the same inputs with a model of the hardware: the documented
reading of the PTX ISA, selectors read as 0, a swapped thread-id or reversed byte order, a coarse accumulator.
The judge must say `ok` only for the documented reading, name the lanes and bytes of every misread, tell a
coarse accumulator (`imprecise`, right mapping) from a wrong mapping, and the choice must follow the verdicts:
selectors, else replicated with one warning naming the report, else NotImplementedError, never a probe inside
CUDA-graph capture, the verdict kept on disk per device / driver / device layer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import warnings

import pytest
import torch

from deep_gemm_sm120 import scale_encoding
from deep_gemm_sm120.core import encoding as enc
from deep_gemm_sm120.selftest import atoms as A
from deep_gemm_sm120.services.scale_probe import ATOM_KINDS, cases

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def simulate(kind: str, reading_fn=None, how: str = "documented", post=None) -> A.KindResult:
    """The probe run of one kind on modelled hardware, judged as run_atoms judges a real one."""
    at = A.Atom(kind)
    batches, what = A.plan(at, 7)
    table = list(cases(kind))
    d = torch.cat([A.reference(b, table, how, reading_fn)[0] for b in batches]).float()
    if post is not None:
        d = post(d)
    return A.judge(at, what, batches, d, [c.descriptor for c in table] * len(batches))


def test_documented_hardware_passes_every_case_and_special():
    for kind in ATOM_KINDS:
        r = simulate(kind)
        assert r.table_ok and r.passes("selectors") and r.passes("replicated")
        assert all(c.verdict == "ok" and not c.misreads for c in r.cases), kind
        assert {s.verdict for s in r.specials} <= {"ok", "info"}
        assert len(r.specials) == 6  # three specials in each encoding


def test_selectors_read_as_zero_fail_the_selector_encoding_only():
    for kind in ATOM_KINDS:
        r = simulate(kind, how="selectors-as-zero")
        assert not r.passes("selectors") and r.passes("replicated"), kind
        for c in r.cases:
            nonzero = c.case.encoding == "selectors" and any((c.case.i, c.case.j, c.case.byte_a, c.case.byte_b))
            assert (c.verdict == "wrong") == nonzero, c.as_dict()
            if nonzero:
                assert c.matches == "selectors-as-zero" and c.misreads


def _swapped_thread_id(case, vec):
    """Hardware that takes thread-id-a 1 - t (the other thread pair of the quad)."""
    ba, ta, bb, tb = A.issued_selectors(case)
    a = [[(A.sfa_lane(r, 1 - ta), ba + ch) for ch in range(vec)] for r in range(16)]
    b = [[(A.sfb_lane(c, tb), bb + ch) for ch in range(vec)] for c in range(8)]
    return a, b


def _reversed_bytes(case, vec):
    """Hardware that numbers scale bytes from the top of the register."""
    ba, ta, bb, tb = A.issued_selectors(case)
    a = [[(A.sfa_lane(r, ta), 3 - (ba + ch)) for ch in range(vec)] for r in range(16)]
    b = [[(A.sfb_lane(c, tb), 3 - (bb + ch)) for ch in range(vec)] for c in range(8)]
    return a, b


def test_a_swapped_thread_pair_is_named_and_the_replicated_copies_absorb_it():
    r = simulate("mxfp8", _swapped_thread_id)
    assert not r.passes("selectors") and r.passes("replicated")
    c = next(c for c in r.cases if c.case.encoding == "selectors" and c.case.i == 0)
    assert c.verdict == "wrong" and c.matches == "none"
    # row 0 at thread-id 0 is lane 0; the swapped hardware reads lane 2
    assert any(m.startswith("A row 0 chunk 0: read lane 2 byte") and "expected lane 0 byte" in m for m in c.misreads)


def test_reversed_bytes_fail_nvfp4_in_both_encodings():
    for kind, replicated_ok in (("mxfp8", True), ("mxfp4", False), ("nvfp4", False)):
        r = simulate(kind, _reversed_bytes)
        assert not r.passes("selectors") and r.passes("replicated") == replicated_ok, kind


def test_a_coarse_accumulator_is_imprecise_not_a_wrong_mapping():
    def coarse(d):  # 10 mantissa bits: beyond fp32 rounding, far inside an O(1) error
        m, e = torch.frexp(d)
        return torch.ldexp(torch.round(m * 2**10) / 2**10, e)

    r = simulate("mxfp8", post=coarse)
    assert {c.verdict for c in r.cases} == {"imprecise"}
    assert r.passes("selectors") and r.passes("replicated")
    assert all(A.ROUNDING < c.max_rel_error <= A.IMPRECISE for c in r.cases)


def test_unwritten_outputs_and_a_drifted_table_fail():
    r = simulate("mxfp4", post=lambda d: torch.full_like(d, float("nan")))
    assert all(c.verdict == "wrong" for c in r.cases) and not r.passes("replicated")
    at = A.Atom("nvfp4")
    batches, what = A.plan(at, 1)
    table = list(cases("nvfp4"))
    d = torch.cat([A.reference(b, table)[0] for b in batches]).float()
    seen = [c.descriptor for c in table] * len(batches)
    seen[3] ^= 1
    r = A.judge(at, what, batches, d, seen)
    assert not r.table_ok and not r.passes("selectors") and not r.passes("replicated")


def test_specials_follow_their_definitions():
    def fp32_scale_product(d):  # hardware that multiplies the two scales in fp32 (the old emulation)
        return torch.where(d.abs() > 2.0**100, torch.full_like(d, float("inf")), d)

    r = simulate("mxfp8", post=fp32_scale_product)
    bad = {(s.name, s.encoding) for s in r.specials if s.verdict == "wrong"}
    assert bad == {("ue8m0_exponent_sum", "selectors"), ("ue8m0_exponent_sum", "replicated")}

    def nan_free(d):  # hardware that reads 0xFF as a huge finite scale
        return torch.nan_to_num(d, nan=1.0)

    r = simulate("mxfp4", post=nan_free)
    assert {s.name for s in r.specials if s.verdict == "wrong"} == {"ue8m0_nan"}
    r = simulate("nvfp4", post=lambda d: torch.where(d == 16.0, d, d))  # identity: the sign bit is ignored
    sign = [s for s in r.specials if s.name == "ue4m3_sign"]
    assert len(sign) == 2 and all(s.verdict == "info" and s.observed.startswith("sign ignored") for s in sign)


def test_decode_names_every_position_uniquely():
    for kind in ATOM_KINDS:
        at = A.Atom(kind)
        for half in (0, 1):
            codes = A.decode_codes(at, half)
            vals = [float(A.scale_value(codes[lane, b].view(1), at.ue4m3)[0]) for lane in range(32) for b in range(4)]
            mine = [v for i, v in enumerate(vals) if i // 4 // 16 == half]
            assert len(set(mine)) == 64 and not set(mine) & {v for i, v in enumerate(vals) if i // 4 // 16 != half}


def test_probe_table_matches_the_header():
    """cases() is the header's ScaleProbeTable: checked at compile time by static_asserts nvcc evaluates, and
    a wrong descriptor is caught (the check can fail)."""
    from deep_gemm_sm120.core import toolchain

    tc = toolchain.find_toolchain()
    cxx = {k: v[0] for k, v in ATOM_KINDS.items()}

    def source(perturb: bool) -> str:
        lines = ['#include "impls/sm120_scale_probe.cuh"']
        for kind, table in ((k, cases(k)) for k in ATOM_KINDS):
            t = f"sm120::ScaleProbeTable<sm120::ScaleKind::{cxx[kind]}>"
            lines.append(f'static_assert({t}::kCases == {len(table)}, "{kind} count");')
            for i, c in enumerate(table):
                want = c.descriptor ^ (1 if perturb and kind == "mxfp4" and i == 5 else 0)
                lines.append(f'static_assert({t}::descriptor({i}) == {want}u, "{kind} case {i}");')
        return "\n".join(lines) + "\n"

    for perturb in (False, True):
        src = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"probe_table_{os.getpid()}_{perturb}.cu")
        with open(src, "w") as fh:
            fh.write(source(perturb))
        p = subprocess.run(
            [tc.nvcc, "-std=c++17", "-c", "-I", os.path.join(ROOT, "device_layer"), src, "-o", src + ".o"],
            capture_output=True,
            text=True,
        )
        assert (p.returncode == 0) != perturb, p.stderr[-3000:]
        if perturb:
            assert "mxfp4 case 5" in p.stdout + p.stderr


# ---------------------------------------------------------------- the choice


@pytest.fixture()
def fake_device(monkeypatch, tmp_path):
    """A device whose facts and atom results the test sets: `state["results"]` (None: documented hardware)."""
    state = {"runs": 0, "results": None, "driver": "13.0"}

    def facts(device, target):
        return {"schema": 1, "gpu": "RTX 5090", "uuid": "u", "capability": "12.0", "driver": state["driver"],
                "device_layer": "d", "target": target, "emulated_selectors": None}  # fmt: skip

    def run_atoms(device, target, kinds=None, seed=0):
        state["runs"] += 1
        if state["results"] is not None:
            return state["results"]
        return [simulate(k) for k in ATOM_KINDS]

    monkeypatch.setattr(scale_encoding, "_device_facts", facts)
    monkeypatch.setattr(
        scale_encoding, "verdict_path", lambda f: str(tmp_path / f"atoms-{scale_encoding.verdict_key(f)}.json")
    )
    monkeypatch.setattr(A, "run_atoms", run_atoms)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    monkeypatch.delenv(enc.ENV, raising=False)
    scale_encoding.reset()
    yield state
    scale_encoding.reset()


def _spec(kind="mxfp8"):
    from deep_gemm_sm120.families.fp8_fp4_gemm_1d1d.kernel import specs

    return next(s for s in specs() if s.kind == kind and s.encoding == "selectors")


def test_policy_values(monkeypatch):
    for value, want in (("", "auto"), ("AUTO", "auto"), (" selectors ", "selectors"), ("replicated", "replicated")):
        monkeypatch.setenv(enc.ENV, value)
        assert scale_encoding.policy() == want
    monkeypatch.setenv(enc.ENV, "both")
    with pytest.raises(
        ValueError, match="DG_SM120_SCALE_ENCODING must be one of auto, selectors, replicated; got 'both'"
    ):
        scale_encoding.policy()


def test_resolve_touches_block_scaled_selector_specs_only(monkeypatch):
    from deep_gemm_sm120.families.bf16_gemm.kernel import specs as bf16_specs
    from deep_gemm_sm120.services.scale_probe import ScaleProbeSpec

    monkeypatch.setattr(scale_encoding, "_verdict", lambda *a, **k: None)  # no verdict known for device 0
    monkeypatch.setenv(enc.ENV, "replicated")
    scale_encoding.reset()
    s = _spec()
    assert scale_encoding.resolve(s, "sm_120a", 0).name == s.name + "_rep"
    for other in (bf16_specs()[0], ScaleProbeSpec("mxfp8"), _spec("fp8_fp32")):
        assert scale_encoding.resolve(other, "sm_120a", 0) is other
    rep = scale_encoding.resolve(s, "sm_120a", 0)
    monkeypatch.setenv(enc.ENV, "selectors")  # read once per device: the first plan's setting holds
    assert scale_encoding.resolve(s, "sm_120a", 0) == rep and scale_encoding.policy(0) == "replicated"
    scale_encoding.reset()  # ... until reset()
    assert scale_encoding.resolve(s, "sm_120a", 0) is s and scale_encoding.resolve(rep, "sm_120a", 0) is rep
    with scale_encoding.forced("replicated"):
        assert scale_encoding.resolve(s, "sm_120a", 0) == rep
        seen = []  # forcing is this thread's (context's) alone
        t = threading.Thread(target=lambda: seen.append(scale_encoding.resolve(s, "sm_120a", 0)))
        t.start()
        t.join()
        assert seen == [s]
    assert scale_encoding.resolve(s, "sm_120a", 0) is s
    with pytest.raises(ValueError, match="encoding must be one of"):
        with scale_encoding.forced("auto"):
            pass
    scale_encoding.reset()


def test_nothing_planned_while_forced_is_kept():
    from deep_gemm_sm120 import launch

    calls = []

    @launch.kernel_memo(maxsize=4)
    def kernel(x):
        calls.append(x)
        return object()

    cache = launch.CallCache(limit=4)
    first = kernel(1)
    assert kernel(1) is first and calls == [1]
    with scale_encoding.forced("replicated"):
        a, b = kernel(1), kernel(1)  # forgotten on entry, never stored inside
        assert a is not first and a is not b
        cache.put("k", "plan")
        assert "k" not in cache
    c = kernel(1)
    assert c is not a and kernel(1) is c  # forgotten on exit, stored again after
    cache.put("k", "plan")
    assert cache["k"] == "plan"
    for i in range(10):  # bounded
        kernel(100 + i)
    assert len(launch._MEMOS[-1]) <= 4


def test_auto_keeps_selectors_and_the_verdict_on_disk(fake_device, tmp_path):
    s = _spec()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert scale_encoding.resolve(s, "sm_120a", 0) is s
        assert scale_encoding.resolve(_spec("nvfp4"), "sm_120a", 0).encoding == "selectors"
    assert fake_device["runs"] == 1
    (path,) = tmp_path.glob("atoms-*.json")
    data = json.loads(path.read_text())
    assert (
        data["passing"] == {k: ["selectors", "replicated"] for k in ATOM_KINDS} and data["facts"]["gpu"] == "RTX 5090"
    )
    scale_encoding.reset()  # a new process: the disk answers
    assert scale_encoding.resolve(s, "sm_120a", 0) is s and fake_device["runs"] == 1
    fake_device["driver"] = "13.1"  # a driver update is another verdict
    scale_encoding.reset()
    scale_encoding.resolve(s, "sm_120a", 0)
    assert fake_device["runs"] == 2 and len(list(tmp_path.glob("atoms-*.json"))) == 2
    path.write_text("{not json")  # corrupt: probed again and rewritten
    fake_device["driver"] = "13.0"
    scale_encoding.reset()
    scale_encoding.resolve(s, "sm_120a", 0)
    assert fake_device["runs"] == 3 and json.loads(path.read_text())["facts"]["driver"] == "13.0"
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_auto_falls_back_with_one_warning_and_refuses_when_both_fail(fake_device):
    fake_device["results"] = [simulate(k, how="selectors-as-zero") for k in ATOM_KINDS]
    s = _spec("mxfp4")
    with pytest.warns(RuntimeWarning, match=r"mxfp4 block-scaled MMA failed the selector-encoding self-test.*atoms-"):
        assert scale_encoding.resolve(s, "sm_120a", 0).encoding == "replicated"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert scale_encoding.resolve(s, "sm_120a", 0).encoding == "replicated"
    scale_encoding.reset()
    fake_device["driver"] = "other"
    fake_device["results"] = [simulate(k, _reversed_bytes) for k in ATOM_KINDS]
    with pytest.raises(NotImplementedError, match=r"neither scale encoding of the nvfp4 .* Report: .*atoms-"):
        scale_encoding.resolve(_spec("nvfp4"), "sm_120a", 0)
    with pytest.warns(RuntimeWarning, match="mxfp8"):  # the kinds that still pass one encoding keep working
        assert scale_encoding.resolve(_spec("mxfp8"), "sm_120a", 0).encoding == "replicated"


def test_an_explicit_setting_a_verdict_refutes_is_refused(fake_device):
    scale_encoding.record(0, "sm_120a", [simulate(k, how="selectors-as-zero") for k in ATOM_KINDS])
    scale_encoding.reset()  # a new process: the verdict is on disk
    os.environ[enc.ENV] = "selectors"
    try:
        with pytest.raises(
            NotImplementedError, match=r"DG_SM120_SCALE_ENCODING=selectors, but .* mxfp8 .*Report: .*atoms-"
        ):
            scale_encoding.resolve(_spec(), "sm_120a", 0)
        scale_encoding.reset()
        os.environ[enc.ENV] = "replicated"
        assert scale_encoding.resolve(_spec(), "sm_120a", 0).encoding == "replicated" and fake_device["runs"] == 0
        with scale_encoding.forced("selectors"):  # the self-test may still run it to judge it
            assert scale_encoding.resolve(_spec(), "sm_120a", 0).encoding == "selectors"
    finally:
        del os.environ[enc.ENV]
    assert scale_encoding.effective("mxfp8", {"replicated"}) == "replicated"


def test_record_forgets_cached_plans_and_a_read_only_cache_is_a_warning(fake_device, monkeypatch, tmp_path):
    from deep_gemm_sm120 import launch

    cache = launch.CallCache(limit=4)
    cache.put("k", "a plan made under the old verdict")
    scale_encoding.record(0, "sm_120a", [simulate(k) for k in ATOM_KINDS])
    assert "k" not in cache
    scale_encoding.reset()

    def read_only(path, payload):
        raise PermissionError(13, "Read-only file system", path)

    monkeypatch.setattr(scale_encoding, "_write", read_only)
    with pytest.warns(RuntimeWarning, match="could not write the scale-encoding verdict"):
        monkeypatch.setitem(fake_device, "driver", "other")
        assert scale_encoding.resolve(_spec(), "sm_120a", 0).encoding == "selectors"
    assert scale_encoding.resolve(_spec(), "sm_120a", 0).encoding == "selectors" and fake_device["runs"] == 1


def test_no_probe_inside_capture_but_a_recorded_verdict_serves(fake_device, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    with pytest.raises(RuntimeError, match="cannot run inside CUDA-graph capture"):
        scale_encoding.resolve(_spec(), "sm_120a", 0)
    assert fake_device["runs"] == 0
    scale_encoding.record(0, "sm_120a", [simulate(k) for k in ATOM_KINDS])
    scale_encoding.reset()  # only the disk now
    assert scale_encoding.resolve(_spec(), "sm_120a", 0).encoding == "selectors" and fake_device["runs"] == 0
    monkeypatch.setenv(enc.ENV, "replicated")  # an explicit policy never probes
    scale_encoding.reset()
    assert scale_encoding.resolve(_spec(), "sm_120a", 1).encoding == "replicated"


def test_concurrent_first_calls_probe_once(fake_device):
    out = []
    threads = [
        threading.Thread(target=lambda: out.append(scale_encoding.resolve(_spec(), "sm_120a", 0))) for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert fake_device["runs"] == 1 and len(out) == 8


def test_precompile_encodings_and_the_emulation_prelude(monkeypatch):
    specs = [_spec(), _spec("fp8_fp32")]
    assert [s.encoding for s in enc.for_policy(specs, "auto")] == ["selectors", "replicated", "selectors"]
    assert [s.encoding for s in enc.for_policy(specs, "replicated")] == ["replicated", "selectors"]
    monkeypatch.delenv(enc.EMULATE_ENV, raising=False)
    assert enc.emulation_prelude("sm_90a") == ""
    monkeypatch.setenv(enc.EMULATE_ENV, "ignored")
    assert enc.emulation_prelude("sm_90a") == "#define SM120_EMULATION_SELECTORS_IGNORED 1\n"
    assert enc.emulation_prelude("sm_120a") == ""  # silicon reads what it reads
    monkeypatch.setenv(enc.EMULATE_ENV, "sideways")
    with pytest.raises(ValueError, match="DG_SM120_EMULATE_SELECTORS must be one of documented, ignored"):
        enc.emulation_prelude("sm_90a")


def test_selftest_without_a_gpu_exits_2_with_a_message():
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", PYTHONPATH=os.path.join(ROOT, "host"))
    p = subprocess.run(
        [sys.executable, "-m", "deep_gemm_sm120.selftest"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert p.returncode == 2 and "self-test could not run: no CUDA GPU was found" in p.stderr
    assert "Traceback" not in p.stderr and not os.path.exists(os.path.join(ROOT, "deep_gemm_sm120_selftest.json"))


def test_summary_says_what_failed():
    from deep_gemm_sm120.selftest.report import summary

    r = simulate("mxfp8", how="selectors-as-zero")
    report = {
        "verdict": "fail",
        "environment": {
            "package_version": "0.8.7",
            "gpu": "RTX 5090",
            "compute_capability": "12.0",
            "target": "sm_120a",
            "emulated": False,
            "driver": {"cuda_api": "13.0", "nvidia_smi": ""},
        },  # fmt: skip
        "atoms": {"mxfp8": {"encodings": {"selectors": False, "replicated": True}, "chosen": "replicated"}},
        "atom_cases": [c.as_dict() for c in r.cases],
        "specials": [s.as_dict() for s in r.specials],
        "families": [
            {
                "case": "fp8_gemm_nt",
                "encoding": "selectors",
                "verdict": "wrong",
                "metric": "calc_diff",
                "error": 0.9,
                "bound": 1e-3,
            },
            {"case": "bf16_gemm_nt", "encoding": None, "verdict": "error", "message": "RuntimeError: boom"},
        ],  # fmt: skip
        "seconds": 3.2,
    }
    text = summary(report)
    assert "self-test: FAIL" in text and "selectors: FAIL, replicated: pass; uses replicated" in text
    assert "matches selectors-as-zero" in text and "more atom cases not ok" in text
    assert "fp8_gemm_nt [selectors]: wrong: calc_diff 9.000e-01" in text and "RuntimeError: boom" in text


def test_selftest_refuses_what_it_cannot_run(monkeypatch):
    """A bad setting or an unknown family is "could not run" (exit 2 from the CLI), never a traceback."""
    import deep_gemm_sm120.selftest as st

    preflight = st._preflight
    monkeypatch.setattr(st, "_preflight", lambda device: (0, "sm_120a"))
    with pytest.raises(
        st.CouldNotRun, match=r"no self-test cases for families \['fp8_fp4_gemm'\]; the cases cover .*fp8_fp4_gemm_1d1d"
    ):
        st.selftest(families=("fp8_fp4_gemm",))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(st, "_target", lambda index: "sm_120a")
    monkeypatch.setenv(enc.ENV, "both")
    from deep_gemm_sm120 import runtime

    monkeypatch.setattr(runtime, "_ext", lambda: object())
    with pytest.raises(st.CouldNotRun, match="DG_SM120_SCALE_ENCODING must be one of"):
        preflight(None)


def test_cache_scale_words_reads_the_blocks_requests_read():
    from deep_gemm_sm120.scale_layout import cache_scale_words

    blocks, rows, row = 6, 4, 8
    cache = torch.zeros(blocks, rows * (row + 4), dtype=torch.uint8)
    words = cache[:, rows * row :].view(torch.int32)
    words[:] = torch.arange(blocks * rows, dtype=torch.int32).view(blocks, rows) + 1
    table = torch.tensor([[4, 1, 5], [2, 0, 3]], dtype=torch.int32)
    lens = torch.tensor([5, 0], dtype=torch.int32)  # request 0 reads blocks 4, 1; request 1 none
    got = cache_scale_words(cache.view(blocks, rows, 1, row + 4), rows, row, table, lens)
    want = torch.zeros(blocks, rows, dtype=torch.int32)
    want[[4, 1]] = words[[4, 1]]
    assert torch.equal(got, want)
    lens2d = torch.tensor([[1, 9], [2, 3]], dtype=torch.int32)  # [B, next_n]: a request's longest context
    got = cache_scale_words(cache.view(blocks, rows, 1, row + 4), rows, row, table, lens2d)
    want[[5, 2]] = words[[5, 2]]
    assert torch.equal(got, want)
    table[0, 1] = 99  # an entry past the cache reads nothing (the index checks refuse it elsewhere)
    got = cache_scale_words(cache.view(blocks, rows, 1, row + 4), rows, row, table, lens)
    assert got[1].eq(0).all() and torch.equal(got[4], words[4])
