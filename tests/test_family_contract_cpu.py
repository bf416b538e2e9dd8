"""The family contract: a new family is one package, and everything else follows from its declaration.

A throwaway family (a scratch package and a trivial kernel header in a temporary directory, joined through
DG_SM120_FAMILY_PATH) is followed to every place a family reaches, with no other file edited: the package's API
and exports, is_supported / why_unsupported, precompile(families=...), the compile gate's case list, the support
matrix, the DeepGEMM compat surface and its generated table, and the qualification plan. docs/adding_a_family.md
describes exactly this.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

HEADER = r'''#pragma once
// A throwaway family for the contract test: out = alpha * in.
#include "common/sm120_arch.cuh"

namespace toy {
template <uint32_t kThreads>
__global__ void __launch_bounds__(kThreads, 1) toy_scale_kernel(float* out, const float* src, float alpha, uint32_t n) {
    const uint32_t i = blockIdx.x * kThreads + threadIdx.x;
    if (i < n) out[i] = alpha * src[i];
}
}  // namespace toy
'''

DECLARATION = '''"""toy_scale: out = alpha * in (the contract test's throwaway family)."""
from __future__ import annotations

import os
from dataclasses import dataclass

from ...core.deepgemm import SUPPORTED, Entry
from ...core.params import Param, ParamList
from ...core.registry import Family, GateRules, KernelSpec, Op

PARAMS = ParamList(Param("out", "float*"), Param("src", "const float*"), Param("alpha", "float"),
                   Param("n", "uint32_t"))


@dataclass(frozen=True)
class ToySpec(KernelSpec):
    threads_: int = 128

    @property
    def name(self):
        return f"toy_scale_t{self.threads_}"

    @property
    def threads(self):
        return self.threads_

    @property
    def smem_bytes(self):
        return 0

    def template_args(self):
        return [str(self.threads_)]


def toy_rule(n=None, in_dtype=None):
    if in_dtype is not None and in_dtype != "float32":
        raise TypeError(f"toy_scale takes float32, got {in_dtype}")
    if n is not None and n % 4:
        raise ValueError(f"n must be a multiple of 4, got {n}")


FAMILY = Family(
    name="toy_scale",
    header=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "sm120_toy_scale.cuh"),
    kernel="toy::toy_scale_kernel",
    params=PARAMS,
    spec_type=ToySpec,
    specs=lambda: [ToySpec(128), ToySpec(256)],
    gate=lambda spec: GateRules(required={"sm120": ("STG",), "sm90": ("STG",)}),
    quick_key=lambda s: (),
    pdl=False,
    ops=(Op("toy_scale", toy_rule, "in fp32 [n]", "fp32 [n]", "the contract test's family",
            plan_specs=lambda num_sms, **_: [ToySpec(128)]),),
    exports=("api.toy_helper",),
    sanitizers=("toy_scale",),
    benchmarks=("toy_scale",),
    deepgemm=(Entry("toy_scale", SUPPORTED, "toy_scale (a test family)"),),
)
'''

API = '''"""toy_scale's PyTorch entry point."""
from __future__ import annotations

from ...launch import device_of
from . import toy_rule


def toy_scale(x, out, alpha=1.0):
    toy_rule(n=x.numel(), in_dtype=str(x.dtype).removeprefix("torch."))
    device_of(x=x, out=out)


def toy_helper():
    return "toy"
'''

DEEPGEMM = '''"""DeepGEMM's name for the toy family (its Entry is in the declaration)."""
from __future__ import annotations

from .api import toy_scale  # noqa: F401
'''


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("scratch_families")
    (d / "toy_scale").mkdir()
    (d / "sm120_toy_scale.cuh").write_text(HEADER)
    (d / "toy_scale" / "__init__.py").write_text(DECLARATION)
    (d / "toy_scale" / "api.py").write_text(API)
    (d / "toy_scale" / "deepgemm.py").write_text(DEEPGEMM)
    return d


def _run(scratch: Path, code: list[str], tmp: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "DG_SM120_FAMILY_PATH": str(scratch), "DG_SM120_JIT_CACHE_DIR": str(tmp / "jit"),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "host"), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(code, capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)


def test_the_package_reaches_the_api_support_and_compat(scratch, tmp_path):
    code = textwrap.dedent('''
        import json, torch, deep_gemm_sm120 as dg
        from deep_gemm_sm120 import compat
        from deep_gemm_sm120.compat import surface
        out = {"op": callable(dg.toy_scale), "export": dg.toy_helper(), "in_all": "toy_scale" in dg.__all__,
               "supported": dg.is_supported("toy_scale", n=64, in_dtype=torch.float32),
               "why": dg.why_unsupported("toy_scale", n=6), "why_dtype": dg.why_unsupported("toy_scale",
                                                                                         in_dtype=torch.int32),
               "compat": compat.toy_scale is dg.toy_scale,
               "surface": [e.status for e in surface.ENTRIES if e.name == "toy_scale"],
               "table": "`toy_scale` | supported" in surface.render()}
        try:
            dg.toy_scale(torch.zeros(8), torch.zeros(8))
        except ValueError as e:
            out["cpu_call"] = str(e)
        print(json.dumps(out))
    ''')
    p = _run(scratch, [sys.executable, "-c", code], tmp_path)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["op"] and out["export"] == "toy" and out["in_all"] and out["supported"] is True
    assert out["why"].startswith("ValueError: n must be a multiple of 4")
    assert out["why_dtype"].startswith("TypeError: toy_scale takes float32")
    assert out["compat"] and out["surface"] == ["supported"] and out["table"]
    assert "must be on a CUDA device" in out["cpu_call"]


def test_the_tools_derive_the_family(scratch, tmp_path):
    p = _run(scratch, [sys.executable, "tools/compile_gate.py", "--list", "--families", "toy_scale"], tmp_path)
    assert p.returncode == 0 and "toy_scale_t128" in p.stdout and "toy_scale_t256" in p.stdout, p.stderr
    p = _run(scratch, [sys.executable, "tools/support_matrix.py"], tmp_path)
    assert p.returncode == 0 and "| `toy_scale` | family |" in p.stdout and "the contract test's family" in p.stdout
    for what in ("sanitizers", "benchmarks"):
        p = _run(scratch, [sys.executable, "tools/family_plan.py", what], tmp_path)
        assert p.returncode == 0 and "toy_scale" in p.stdout.split()
    # and without the path, nothing of it remains: no file of this repository was edited
    env_free = subprocess.run([sys.executable, "tools/family_plan.py", "families"], capture_output=True, text=True,
                              cwd=ROOT, env={k: v for k, v in os.environ.items() if k != "DG_SM120_FAMILY_PATH"})
    assert "toy_scale" not in env_free.stdout


def test_precompile_and_the_gate_build_it(scratch, tmp_path):
    """The kernel itself, through the JIT and the compile gate (needs nvcc: the test command installs the CUDA
    compiler wheels)."""
    code = ("import deep_gemm_sm120 as dg; "
            "print(dg.precompile(families=['toy_scale'], targets=['sm_120a'], progress=False))")
    p = _run(scratch, [sys.executable, "-c", code], tmp_path)
    assert p.returncode == 0 and p.stdout.strip().splitlines()[-1] == "2", p.stderr
    p = _run(scratch, [sys.executable, "tools/compile_gate.py", "--families", "toy_scale", "--targets",
                       "sm_120a,sm_90a", "--json", str(tmp_path / "gate.json"), "--nvcc",
                       json.loads(_run(scratch, [sys.executable, "-c", "import json,sys; sys.path.insert(0,'tools');"
                                                 "import compile_gate as g; print(json.dumps(g.discover_toolchains([])"
                                                 "[0].nvcc))"], tmp_path).stdout)], tmp_path)
    doc = json.loads((tmp_path / "gate.json").read_text())
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert {(r["name"], r["target"]) for r in doc["results"]} == {
        (f"toy_scale_t{t}", tgt) for t in (128, 256) for tgt in ("sm_120a", "sm_90a")}
