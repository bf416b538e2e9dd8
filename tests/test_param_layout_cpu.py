"""Argument-order safety without a GPU: compile one instantiation of every family and prove that the parameter
list the host packs (core/params.py) is the kernel's, from the cubin's own parameter table (EIATTR_KPARAM_INFO:
count, order, sizes, offsets, alignment). A reordered list must fail."""

from __future__ import annotations

import concurrent.futures as cf
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import host_decls
import kernel_signatures

params = host_decls.load("core.params")
toolchain = host_decls.load("core.toolchain")
TARGETS = ("sm_120a", "sm_90a")  # the release target and the qualification build: their bases differ

try:
    _TC = toolchain.find_toolchain()
except RuntimeError:
    _TC = None
pytestmark = [pytest.mark.compile_gate, pytest.mark.skipif(_TC is None, reason="no CUDA >= 13 toolchain")]


def _cubin(source: str, target: str) -> bytes:
    with tempfile.TemporaryDirectory() as wd:
        src, out = os.path.join(wd, "k.cu"), os.path.join(wd, "k.cubin")
        Path(src).write_text(source)
        subprocess.run(
            toolchain.compile_command(_TC.nvcc, src, out, target, str(ROOT / "device_layer")),
            check=True,
            capture_output=True,
            text=True,
        )
        return Path(out).read_bytes()


@pytest.fixture(scope="module")
def compiled():
    """{(family, target): the cubin's parameter table} for the first instantiation of each family."""
    fams = host_decls.registry().families
    jobs = [(f, t) for f in fams for t in TARGETS]
    with cf.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as ex:
        cubins = list(ex.map(lambda ft: _cubin(ft[0].specs()[0].source(), ft[1]), jobs))
    out = {}
    for (fam, target), cubin in zip(jobs, cubins):
        tables = kernel_signatures.cubin_kernel_params(cubin)
        assert len(tables) == 1, f"{fam.name}: one kernel per translation unit"
        out[fam.name, target] = tables[0]
    return out


def test_every_family_packs_the_kernels_parameter_layout(compiled):
    for fam in host_decls.registry().families:
        for target in TARGETS:
            table = compiled[fam.name, target]
            assert kernel_signatures.layout_problems(fam.params, table) == [], (fam.name, target)
            assert len(table.params) == len(fam.params) and table.size >= fam.params.size


def test_the_sm90_build_moves_the_base_not_the_layout(compiled):
    """What the driver-side pointers absorb: the same relative layout at a different base."""
    bf16_120 = compiled["bf16_gemm", "sm_120a"]
    bf16_90 = compiled["bf16_gemm", "sm_90a"]
    assert bf16_120.params[0][1] == 0
    shift = bf16_90.params[0][1] - bf16_120.params[0][1]
    assert all(b[1] - a[1] == shift for a, b in zip(bf16_120.params, bf16_90.params))


def test_a_reordered_parameter_list_fails_against_the_cubin(compiled):
    fam = host_decls.registry().by_name["fp8_fp4_gemm_1d1d"]
    ps = list(fam.params.params)
    names = [p.name for p in ps]
    for a, b in (("tmap_b", "sfa"), ("d", "m"), ("num_splits", "alpha"), ("sfb", "layout")):
        mutated = list(ps)
        i, j = names.index(a), names.index(b)
        mutated[i], mutated[j] = mutated[j], mutated[i]
        problems = kernel_signatures.layout_problems(params.ParamList(*mutated), compiled[fam.name, "sm_120a"])
        header = kernel_signatures.header_signature(
            (ROOT / "device_layer" / fam.header).read_text(), fam.kernel.split("::")[-1]
        )
        caught = problems or kernel_signatures.signature_problems(params.ParamList(*mutated), header)
        assert caught, f"swapping {a} and {b} went unnoticed"
    dropped = params.ParamList(*ps[:-1])
    assert kernel_signatures.layout_problems(dropped, compiled[fam.name, "sm_120a"])


def test_cubin_reader_rejects_non_elf():
    with pytest.raises(ValueError, match="ELF"):
        kernel_signatures.cubin_kernel_params(b"not a cubin")


def test_keyword_pack_takes_every_name_once():
    from deep_gemm_sm120.core.params import Param, ParamList

    pl = ParamList(
        Param("out", "float*"), Param("tmap", "CUtensorMap"), Param("n", "uint32_t"), Param("alpha", "float")
    )
    buf = pl.pack(alpha=0.5, out=0x1000, n=7)  # any order; the tensor map is not a value
    assert len(buf) == pl.size and pl.unpack(buf) == {"out": 0x1000, "n": 7, "alpha": 0.5}
    for bad, named in (
        ({"out": 1, "n": 2}, "missing ['alpha']"),
        ({"out": 1, "n": 2, "alpha": 1.0, "x": 3}, "unknown ['x']"),
        ({"out": 1, "n": 2, "beta": 1.0}, "missing ['alpha'], unknown ['beta']"),
    ):
        with pytest.raises(TypeError, match=re.escape(named)):
            pl.pack(**bad)
    one, none = ParamList(Param("n", "uint32_t")), ParamList()
    assert one.unpack(one.pack(n=3)) == {"n": 3} and none.pack() == b""
    with pytest.raises(TypeError, match="unknown"):
        none.pack(n=1)
