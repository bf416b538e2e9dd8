"""The SM120 compile gate: parsers (CPU), a quick real run, a must-fail kernel, and the full matrix (slow)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import compile_gate as gate

PTXAS_LOG = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_ZN5sm120kernel' for 'sm_120a'
ptxas info    : Function properties for _ZN5sm120kernel
    8 bytes stack frame, 16 bytes spill stores, 28 bytes spill loads
ptxas info    : Used 168 registers, used 1 barriers, 1024 bytes smem, 8 bytes cumulative stack size
"""
SASS = """
        /*0270*/                   STL [R1], R2 ;
        /*02e0*/                   USETMAXREG.TRY_ALLOC.CTAPOOL UP0, 0xe8 ;
        /*0340*/               @P0 EXIT ;
        /*0d30*/                   HMMA.16816.F32.BF16 R4, R68.reuse, R96, R4 ;
        /*0d40*/              @!P1 UTMALDG.2D [UR8], [UR14] ;
        /*0d50*/                   LDLU R3, [R1] ;
"""


def test_parse_ptxas():
    assert gate.parse_ptxas(PTXAS_LOG) == {"regs": 168, "smem": 1024, "stack": 8, "spill_stores": 16, "spill_loads": 28}


def test_sass_opcodes_and_rules():
    ops = gate.sass_opcodes(SASS)
    assert ops == ["STL", "USETMAXREG.TRY_ALLOC.CTAPOOL", "EXIT", "HMMA.16816.F32.BF16", "UTMALDG.2D", "LDLU"]
    missing, forbidden = gate.check_opcodes(
        ops, ("HMMA.16816.F32.BF16", "UTMALDG", "QMMA.SF"), gate.host_decls.load("core.registry").FORBIDDEN_EVERYWHERE
    )
    assert missing == ["QMMA.SF"]
    assert forbidden == ["STL"]  # LDLU is not LDL


def test_include_rules(tmp_path):
    (tmp_path / "ok.cuh").write_text("")
    h = tmp_path / "sm120_x.cuh"
    text = (
        '#include "ok.cuh"\n#include <cuda.h>\n#include <cute/tensor.hpp>\n#include "../deep_gemm/common/utils.cuh"\n'
    )
    problems = gate.include_problems(str(h), text)
    assert len(problems) == 2
    assert "cute/tensor.hpp" in problems[0] and "utils.cuh" in problems[1]


def test_device_layer_includes_are_self_contained():
    for rel in gate.headers():
        path = ROOT / "device_layer" / rel
        assert gate.include_problems(str(path), path.read_text()) == [], rel


def test_kernel_list_is_the_host_list():
    sys.path.insert(0, str(ROOT / "host"))
    from deep_gemm_sm120.core.registry import registry
    from deep_gemm_sm120.families.bf16_gemm.kernel import specs as bf16_specs
    from deep_gemm_sm120.families.bf16_gemm.plan import choose_config

    jobs = gate.kernel_jobs(quick=False)
    assert {j.name for j in jobs} == {s.name for s in registry().specs()}
    assert all(j.rules.required_for("sm_120a") and j.rules.required_for("sm_90a") for j in jobs)
    quick = gate.kernel_jobs(quick=True)
    assert {j.family for j in quick} == {f.name for f in registry().families} and len(quick) < len(jobs) / 3
    chosen = {
        choose_config(m, n, sms)
        for m in (1, 7, 64, 129, 4096, 8192)
        for n in (24, 2112, 7168, 36864)
        for sms in (132, 170, 188)
    }
    assert chosen <= {s.config for s in bf16_specs()}
    with pytest.raises(gate.UsageError, match="unknown families"):
        gate.kernel_jobs(quick=True, families=("nope",))


needs_nvcc = pytest.mark.skipif(not gate.discover_toolchains([]), reason="no CUDA toolchain")


def _check_results(doc: dict) -> tuple[list, list]:
    kernels = [r for r in doc["results"] if r["kind"] == "kernel"]
    assert all(r["verdict"] == "pass" for r in kernels)
    # spill-free everywhere except the sm_90a emulation builds of families that emulate SM120-only atoms
    # (their GateRules say so; reported, not failed)
    from deep_gemm_sm120.core.registry import registry

    by_name = {spec.name: fam for fam in registry().families for spec in fam.specs()}
    emulated = [
        r
        for r in kernels
        if by_name[r["name"]]
        .gate(next(s for s in by_name[r["name"]].specs() if s.name == r["name"]))
        .spills_allowed(r["target"])
    ]
    assert {r["target"] for r in emulated} <= {"sm_90a"}
    assert all(r["spill_stores"] == 0 and r["stack"] == 0 for r in kernels if r not in emulated)
    assert all(r["smem"] <= gate.SMEM_LIMIT for r in kernels)
    assert all(r["smem"] > 0 for r in kernels if r["name"].startswith("bf16_gemm"))  # dynamic smem counted
    return kernels, emulated


def check_smoke(doc: dict) -> None:
    """What README's `compile_gate.py --smoke` line must show (tests/test_doc_commands.py runs that line as
    written): every family's first instantiation on every target and every header, one toolchain, all passing."""
    assert doc["exit_code"] == 0
    kernels, _ = _check_results(doc)
    from deep_gemm_sm120.core.registry import registry

    families = {fam.name for fam in registry().families}
    by_name = {spec.name: fam.name for fam in registry().families for spec in fam.specs()}
    assert {(by_name[r["name"]], r["target"]) for r in kernels} == {(f, t) for f in families for t in gate.TARGETS}
    assert sorted(r["name"] for r in doc["results"] if r["kind"] == "header") == gate.headers()
    assert len(doc["toolchains"]) == 1


BAD_KERNEL = r"""
#include "common/sm120_arch.cuh"
__global__ void __launch_bounds__(128, 1) bad(float* out, int i) {
    float local[256];
    for (int j = 0; j < 256; ++j) local[j] = out[j * i];
    local[(i * 7) & 255] += 1.0f;  // run-time indexed write into a register array: forces local memory
    for (int j = 0; j < 256; ++j) out[j + threadIdx.x] = local[j];
}
"""


@pytest.mark.compile_gate
@needs_nvcc
def test_gate_rejects_local_memory_and_smem_overrun():
    tc = gate.discover_toolchains([])[0]
    rules = gate.kernel_jobs(quick=True, families=("bf16_gemm",))[0].rules
    job = gate.KernelJob("bad", "bf16_gemm", BAD_KERNEL, 200_000, rules, pdl=True)
    r = gate.check_kernel(tc, job, "sm_120a")
    assert r.verdict == "fail"
    joined = "; ".join(r.problems)
    assert "local memory" in joined and "shared memory 200000 B" in joined
    assert {"HMMA.16816.F32.BF16", "UTMALDG", gate.PDL_WAIT_OPCODE} <= set(r.missing_opcodes)
    assert {"LDL", "STL"} & set(r.forbidden_opcodes)


@pytest.mark.compile_gate
@pytest.mark.slow
@needs_nvcc
def test_full_gate_matrix(tmp_path):
    """Every instantiation x every target x the toolchains in DG_SM120_GATE_NVCC (a ':'-separated list of nvcc
    paths, built with tools/toolchain_venv.sh); unset: every toolchain discovered here, at least two. CI shards
    the matrix with one toolchain per job so each job fits its time limit."""
    out = tmp_path / "gate.json"
    listed = [p for p in os.environ.get("DG_SM120_GATE_NVCC", "").split(":") if p]
    nvccs = [a for p in listed for a in ("--nvcc", p)]
    assert gate.main(["--json", str(out), "-j", str(os.cpu_count() or 2), *nvccs]) == 0
    doc = json.loads(out.read_text())
    if listed:
        assert len(doc["toolchains"]) == len(listed), "every listed toolchain must run"
    else:
        assert len(doc["toolchains"]) >= 2, "the gate must run the system toolchain and a pinned wheel toolchain"
    kernels, emulated = _check_results(doc)
    assert {r["target"] for r in kernels} == set(gate.TARGETS)
    from deep_gemm_sm120.core.registry import registry

    by_name = {spec.name: fam for fam in registry().families for spec in fam.specs()}
    assert {by_name[r["name"]].name for r in emulated} == {
        "fp8_fp4_gemm_1d1d",
        "mqa_logits",
        "paged_mqa_logits",
        "sparse_mqa_logits",
    }
    n_headers = len(gate.headers()) * len(gate.TARGETS) * len(doc["toolchains"])
    assert sum(r["kind"] == "header" for r in doc["results"]) == n_headers
