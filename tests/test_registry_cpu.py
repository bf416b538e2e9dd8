"""The kernel-family registry on a CPU: torch-free loading, one declaration per fact, derived exports and
tables, kernel signatures that match the headers, bucketed plans."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ROOT / "tools"
sys.path.insert(0, str(TOOLS))

import host_decls
import kernel_signatures

BLOCK_TORCH = "import sys; sys.modules['torch'] = None; sys.modules['yaml'] = None; sys.modules['numpy'] = None\n"


def _run_blocked(code: str, *args: str) -> subprocess.CompletedProcess:
    """Python with torch, yaml and numpy made unimportable: what tools/ must live with."""
    return subprocess.run(
        [sys.executable, "-c", BLOCK_TORCH + code, *args],
        capture_output=True,
        text=True,
        cwd=TOOLS,
        env={**os.environ, "PYTHONPATH": str(TOOLS)},
    )


def test_declarations_load_without_torch():
    p = _run_blocked(
        "import host_decls; r = host_decls.registry(); print(len(r.specs()), sorted(r.by_name), len(r.ops))"
    )
    assert p.returncode == 0, p.stderr
    count, *_ = p.stdout.split()
    assert int(count) == len(host_decls.registry().specs()) > 200


def test_compile_gate_lists_without_torch_outside_the_test_venv():
    p = _run_blocked(
        "import runpy, sys; sys.argv = ['compile_gate.py', '--list', '--quick']; "
        "runpy.run_path('compile_gate.py', run_name='__main__')"
    )
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert {ln.split()[0] for ln in lines} == set(host_decls.registry().by_name)


def test_support_matrix_is_generated_from_the_registry():
    import support_matrix

    assert support_matrix.main(["--check"]) == 0, "run python tools/support_matrix.py --write"
    section = support_matrix.render()
    for name in host_decls.registry().ops:
        assert f"`{name}" in section


def test_package_exports_every_registered_op():
    import deep_gemm_sm120 as dg
    from deep_gemm_sm120.core.registry import registry

    reg = registry()
    supported = {n for n in reg.names if not reg.resolve(n)[1].refused}
    assert set(dg.OPS) == supported and set(reg.ops) <= supported
    for name in supported:
        assert callable(getattr(dg, name)) and name in dg.__all__
    assert dg.fp8_gemm_nt is dg.fp8_fp4_gemm_nt  # aliases are the same function
    refused = set(reg.names) - supported
    assert refused and not any(hasattr(dg, n) for n in refused)  # the root exports what runs


def test_every_family_declares_a_kernel_the_header_defines():
    for fam in host_decls.registry().families:
        text = (ROOT / "device_layer" / fam.header).read_text()
        sig = kernel_signatures.header_signature(text, fam.kernel.split("::")[-1])
        assert sig == [(p.kind, p.name) for p in fam.params.params], fam.name
        assert kernel_signatures.signature_problems(fam.params, sig) == []


def test_a_reordered_parameter_list_is_caught_by_name():
    """Two u32 parameters swapped keep the byte layout; the header comparison still names the mismatch."""
    params = host_decls.load("core.params")
    fam = host_decls.registry().by_name["bf16_gemm"]
    sig = kernel_signatures.header_signature(
        (ROOT / "device_layer" / fam.header).read_text(), fam.kernel.split("::")[-1]
    )
    ps = list(fam.params.params)
    i, j = [p.name for p in ps].index("m"), [p.name for p in ps].index("n")
    ps[i], ps[j] = ps[j], ps[i]
    swapped = params.ParamList(*ps)
    assert swapped.layout[i][1:] == fam.params.layout[i][1:]  # same offsets and sizes ...
    problems = kernel_signatures.signature_problems(swapped, sig)
    assert problems and "'n'" in problems[0] and "'m'" in problems[0]  # ... but not the same parameters


def test_param_list_layout_is_the_abi_layout():
    params = host_decls.load("core.params")
    pl = params.ParamList(
        params.Param("p", "const float*"),
        params.Param("a", "uint32_t"),
        params.Param("t", "CUtensorMap"),
        params.Param("x", "float"),
        params.Param("q", "uint64_t"),
    )
    assert [(n, o, s) for n, o, s, _ in pl.layout] == [
        ("p", 0, 8),
        ("a", 8, 4),
        ("t", 128, 128),
        ("x", 256, 4),
        ("q", 264, 8),
    ]
    assert pl.size == 272 and pl.tmaps == ("t",) and pl.values == ("p", "a", "x", "q")
    buf = pl.pack(p=0x1000, a=7, x=1.5, q=2**40)
    assert len(buf) == 272 and buf[128:256] == bytes(128)  # the tensor-map slot is filled by the runtime
    assert buf == pl.packer()(0x1000, 7, 1.5, 2**40)
    with pytest.raises(TypeError, match="missing"):
        pl.pack(p=1, a=2, x=3.0)
    with pytest.raises(ValueError, match="unsupported kernel parameter type"):
        _ = params.Param("v", "OutT").kind
    with pytest.raises(ValueError, match="duplicate"):
        params.ParamList(params.Param("a", "uint32_t"), params.Param("a", "float"))


def test_tma_record_matches_the_runtime_struct():
    tma = host_decls.load("core.tma")
    src = (ROOT / "host" / "csrc" / "runtime.cpp").read_text()
    assert "static_assert(sizeof(TmaRequest) == 120" in src and tma.RECORD.size == 120
    rec = tma.tma_request(128, "bfloat16", 0xABC0, (64, 32, 4), (256, 8192), (64, 32, 1), 128)
    assert tma.RECORD.unpack(rec)[:5] == (128, 9, 3, 128, 0xABC0)
    with pytest.raises(ValueError, match="swizzle"):
        tma.tma_request(0, "uint8", 0, (16,), (), (16,), 48)


def test_gate_rules_are_mandatory_for_every_target_class():
    reg_mod = host_decls.load("core.registry")
    with pytest.raises(ValueError, match="missing \\['sm90'\\]"):
        reg_mod.GateRules(required={"sm120": ("HMMA",)})
    params = host_decls.load("core.params")

    @dataclass(frozen=True)
    class FakeSpec(reg_mod.KernelSpec):
        def kernel_name(self) -> str:
            return "fake"

        def block_threads(self) -> int:
            return 32

        def shared_bytes(self) -> int:
            return 0

    fam = reg_mod.Family(
        name="fake",
        header="impls/x.cuh",
        kernel="sm120::x",
        params=params.ParamList(),
        spec_type=FakeSpec,
        specs=lambda: [FakeSpec()],
        gate=lambda s: None,
        quick_key=lambda s: (),
        pdl=False,
    )
    with pytest.raises(TypeError, match="must return GateRules"):
        reg_mod._validate(reg_mod.Registry((fam,), {"fake": "x"}))


def test_one_home_for_each_fact():
    """The shared-memory limit and the contiguous-layout alignment: one Python home each, equal to the C++ twin;
    nvcc discovery lives in core/toolchain.py only."""
    limits = host_decls.load("core.limits")
    arch = (ROOT / "device_layer" / "common" / "sm120_arch.cuh").read_text()
    layout = (ROOT / "device_layer" / "layout" / "sm120_grouped_layout.cuh").read_text()
    assert f"kMaxSmemPerBlock = {limits.SMEM_LIMIT};" in arch
    assert f"kMKAlignmentForContiguousLayout = {limits.MK_ALIGNMENT_FOR_CONTIGUOUS_LAYOUT};" in layout
    py = [p for p in (ROOT / "host").rglob("*.py")] + [p for p in TOOLS.rglob("*.py")]
    literal = [p for p in py if "101376" in p.read_text() and p.name != "limits.py"]
    assert literal == [], literal
    discovery = [p for p in py if '"--version"' in p.read_text()]
    assert [p.name for p in discovery] == ["toolchain.py"], discovery


@pytest.mark.parametrize("layout", ["nt", "nn", "tn", "tt"])
def test_dense_plans_depend_on_m_only_through_its_bucket(layout):
    """Plan caches key on m_bucket(M): the plan (tile, swap, splits, grid) must equal the one for the exact M."""
    from deep_gemm_sm120.families.bf16_gemm.plan import dense_plan, m_bucket

    for n, k, sms in ((2112, 7168, 170), (7168, 2048, 188), (24576, 1536, 132), (576, 16384, 170), (130, 4104, 132)):
        for m in list(range(1, 300)) + list(range(300, 9000, 37)):
            assert dense_plan(m, n, k, sms, layout) == dense_plan(m_bucket(m), n, k, sms, layout), (m, n, k, sms)
    buckets = {m_bucket(m) for m in range(1, 8193)}
    assert len(buckets) <= 130


def test_block_scaled_plans_depend_on_m_only_through_its_bucket():
    from deep_gemm_sm120.families.fp8_fp4_gemm_1d1d.plan import dense_plan, m_bucket

    for kind in ("mxfp8", "nvfp4"):
        for n, k, sms in ((2112, 7168, 170), (256, 16384, 170), (7168, 2048, 188)):
            for m in list(range(1, 200)) + list(range(200, 9000, 41)):
                assert dense_plan(m, n, k, sms, kind) == dense_plan(m_bucket(m), n, k, sms, kind)


def test_plan_caches_are_bounded():
    from deep_gemm_sm120.families.bf16_gemm import api as bf16_api
    from deep_gemm_sm120.families.fp8_fp4_gemm_1d1d import api as fp8_api
    from deep_gemm_sm120.families.fp8_fp4_gemm_1d1d import einsum as fp8_einsum
    from deep_gemm_sm120.families.mqa_logits import api as mqa_api

    for cached in (fp8_api._grouped_kernel, fp8_einsum._kernel, mqa_api._kernel):  # kernel_memo: bounded
        assert 0 < cached.maxsize <= 4096
    from deep_gemm_sm120.families.bf16_gemm import grouped as bf16_grouped
    from deep_gemm_sm120.launch import _CACHES

    every = (bf16_api._CALLS, bf16_grouped._GROUPED, fp8_api._DENSE, fp8_api._M_GROUPED)
    assert set(map(id, every)) <= set(map(id, _CACHES))  # forget_calls() reaches each
    for calls in _CACHES:  # per-signature call caches: cleared when full
        assert calls.limit <= 4096
        calls.clear()
        for i in range(calls.limit + 5):
            calls.put(i, i)
        assert len(calls) <= calls.limit
        calls.clear()


def test_precompile_filters_and_runs_in_parallel(monkeypatch):
    """precompile(families=, shapes=) picks what those calls launch; jobs run concurrently (no nvcc needed)."""
    import threading
    import time

    import deep_gemm_sm120 as dg
    from deep_gemm_sm120 import jit

    seen, active, peak = [], [0], [0]
    lock = threading.Lock()

    def fake_cubin_for(spec, target):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
            seen.append((spec.name, target))
        time.sleep(0.02)
        with lock:
            active[0] -= 1
        return b"", {}

    monkeypatch.setattr(jit, "cubin_for", fake_cubin_for)
    n = dg.precompile(families=["split_k_reduce"], targets=["sm_120a"], jobs=4, progress=False)
    assert n == 5 and {t for _, t in seen} == {"sm_120a"} and all(s.startswith("split_k_reduce") for s, _ in seen)
    assert peak[0] > 1
    seen.clear()
    # a decode GEMM on both SM120 parts: the swap-AB kernel, split K, and its reduce
    n = dg.precompile(
        shapes=[{"op": "bf16_gemm_nt", "m": 1, "n": 2112, "k": 7168}], targets=["sm_120a"], progress=False
    )
    names = sorted(s for s, _ in seen)
    assert n == len(names) and any("_swap" in s for s in names) and any(s.startswith("split_k_reduce") for s in names)
    shape = {"op": "fp8_gemm_nt", "m": 4096, "n": 7168, "k": 7168, "kind": "mxfp8", "num_sms": 170}
    # block-scaled: the encoding DG_SM120_SCALE_ENCODING names; under auto (the default) both, since the device's
    # self-test picks one (issue 44)
    for policy, suffixes in (("", ["", "_rep"]), ("selectors", [""]), ("replicated", ["_rep"])):
        monkeypatch.setenv("DG_SM120_SCALE_ENCODING", policy)
        seen.clear()
        dg.precompile(shapes=[shape], targets=["sm_120a"], progress=False)
        names = sorted(s for s, _ in seen)
        base = "fp8_fp4_gemm_1d1d_mxfp8_g128_128x128_s3_w2x4_bf16"
        probes = (
            [f"scale_probe_{k}" for k in ("e2m1_e4m3", "e4m3_e2m1", "mxfp4", "mxfp8", "nvfp4")] if not policy else []
        )
        assert names == [base + x for x in suffixes] + probes, policy  # auto also warms what it runs first
    monkeypatch.setenv("DG_SM120_SCALE_ENCODING", "sometimes")
    with pytest.raises(ValueError, match="DG_SM120_SCALE_ENCODING must be one of auto, selectors, replicated"):
        dg.precompile(shapes=[shape], targets=["sm_120a"], progress=False)
    monkeypatch.delenv("DG_SM120_SCALE_ENCODING")
    seen.clear()  # explicit specs are warmed as given
    from deep_gemm_sm120.families.fp8_fp4_gemm_1d1d.kernel import specs as bs_specs

    dg.precompile(specs=[bs_specs()[0]], targets=["sm_120a"], progress=False)
    assert [s for s, _ in seen] == [bs_specs()[0].name]
    with pytest.raises(ValueError, match="unknown kernel families"):
        dg.precompile(families=["nope"])
    with pytest.raises(ValueError, match="'op'"):
        dg.precompile(shapes=[{"m": 1}])
    seen.clear()  # a shape the op refuses builds nothing: the call's own typed error, naming the shape
    with pytest.raises(ValueError, match=r"refused by bf16_gemm_nt: .*multiple of 16 bytes"):
        dg.precompile(shapes=[{"op": "bf16_gemm_nt", "m": 1, "n": 7168, "k": 100}], targets=["sm_120a"])
    with pytest.raises(TypeError, match="refused by fp8_gemm_nt"):
        dg.precompile(shapes=[{"op": "fp8_gemm_nt", "k": 7168, "ab_dtype": "bfloat16"}], targets=["sm_120a"])
    assert seen == []
    with pytest.raises(ValueError, match="unknown targets"):
        dg.precompile(families=["split_k_reduce"], targets=["sm_80"])


def test_progress_is_a_line_on_a_terminal_and_silent_otherwise():
    import io

    progress = host_decls.load("core.progress")

    class Tty(io.StringIO):
        def isatty(self):
            return True

    quiet, tty = io.StringIO(), Tty()
    for stream in (quiet, tty):
        bar = progress.Progress(3, "precompile", stream=stream)
        for i in range(3):
            bar.step(f"k{i}")
        bar.close()
    assert quiet.getvalue() == ""
    out = tty.getvalue()
    assert "precompile: 3/3" in out and out.count("\r") == 3 and out.endswith("\n")


def test_services_are_declared_as_such_and_the_root_imports_no_family():
    """Internal kernels (split-K reduce, schedule builders, the GDR prep) are service=True with no names; the one
    several families share lives in services/, each one-user service in its family's package (listed in its
    `services`); user families carry every name; no module at the package root imports a family (names are
    bound from the declarations)."""
    import ast

    from deep_gemm_sm120.core.registry import registry

    reg = registry()
    services = {f.name for f in reg.families if f.service}
    assert services == {
        "split_k_reduce",
        "scale_probe",  # the self-test's probe of the block-scaled atoms (several families' encodings)
        "paged_mqa_logits_metadata",
        "sparse_mqa_logits_metadata",
        "gated_delta_rule_prep",
        "gated_delta_rule_combine",  # the segmented walk's chain of segment maps
        "gated_delta_rule_bwd",  # the backward's reverse state pass
        "gated_delta_rule_bwd_chunk",  # the backward's per-chunk gradients (B3)
        "gated_delta_rule_grad_rows",  # the backward's last step of dq / dk
    }
    assert all(not f.names for f in reg.families if f.service)
    assert reg.packages["split_k_reduce"].split(".")[-2] == "services"
    assert reg.packages["scale_probe"].split(".")[-2] == "services"
    owners = {s.name: f.name for f in reg.user_families for s in f.services}
    assert owners == {
        "paged_mqa_logits_metadata": "paged_mqa_logits",
        "sparse_mqa_logits_metadata": "sparse_mqa_logits",
        "gated_delta_rule_prep": "gated_delta_rule",
        "gated_delta_rule_combine": "gated_delta_rule",
        "gated_delta_rule_bwd": "gated_delta_rule",
        "gated_delta_rule_bwd_chunk": "gated_delta_rule",
        "gated_delta_rule_grad_rows": "gated_delta_rule",
    }
    assert all(reg.packages[s] == reg.packages[f] for s, f in owners.items())
    assert "get_paged_mqa_logits_metadata" in {op.name for f in reg.user_families for op in f.ops}
    package = ROOT / "host" / "deep_gemm_sm120"
    for path in package.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                module = (node.module or "") if isinstance(node, ast.ImportFrom) else ""
                names = [a.name for a in node.names]
                assert "families" not in module and not any(n.startswith("families") for n in names), (
                    f"{path.name} imports a family ({module or names})"
                )
