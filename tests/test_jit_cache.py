"""JIT cache: key material, atomic publish, corruption recovery, concurrent builders, strict mode."""

from __future__ import annotations

import hashlib
import json
import multiprocessing as mp
import os
import sys
from pathlib import Path

import pytest

from deep_gemm_sm120.jit import cache as jc

ROOT = Path(__file__).resolve().parents[1]


def _produce(payload: bytes):
    def produce(work: str):
        p = os.path.join(work, "kernel.cubin")
        with open(p, "wb") as fh:
            fh.write(payload)
        return p, {"name": "k"}

    return produce


def test_key_covers_every_component():
    base = ("tree", "src", ["-O3"], "13.0.88", "sm_120a")
    k0 = jc.cache_key(*base)
    variants = [
        ("tree2", *base[1:]),
        (base[0], "src2", *base[2:]),
        (*base[:2], ["-O2"], *base[3:]),
        (*base[:3], "13.2.86", base[4]),
        (*base[:4], "sm_120f"),
    ]
    keys = {jc.cache_key(*v) for v in variants}
    assert k0 not in keys and len(keys) == len(variants)


def test_publish_lookup_and_corruption_recovery(tmp_path):
    cache = jc.KernelCache(str(tmp_path))
    key = "ab" + "0" * 62
    assert cache.lookup(key) is None
    cubin, meta = cache.build(key, _produce(b"CUBIN-1"))
    assert cubin == b"CUBIN-1" and meta["cubin_sha256"] == hashlib.sha256(b"CUBIN-1").hexdigest()
    assert cache.lookup(key)[0] == b"CUBIN-1"
    assert not os.listdir(tmp_path / "tmp")  # no leftovers
    entry = Path(cache.entry_dir(key))
    (entry / "kernel.cubin").write_bytes(b"CUBIN-truncated")  # corrupt: hash mismatch
    assert cache.lookup(key) is None and not entry.exists()
    cache.build(key, _produce(b"CUBIN-2"))
    (entry / "meta.json").write_text("{not json")
    assert cache.lookup(key) is None
    cubin, _ = cache.build(key, _produce(b"CUBIN-3"))
    assert cache.lookup(key)[0] == b"CUBIN-3"


def _race_worker(root: str, key: str, payload: bytes, q) -> None:
    import time

    cache = jc.KernelCache(root)

    def produce(work):
        time.sleep(0.2)  # both builders are inside the window at once
        return _produce(payload)(work)

    try:
        cubin, _ = cache.build(key, produce)
        q.put(("ok", cubin))
    except Exception as e:
        q.put(("error", repr(e)))


def test_two_processes_building_the_same_kernel_both_succeed(tmp_path):
    key = "cd" + "1" * 62
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_race_worker, args=(str(tmp_path), key, b"SAME-CUBIN", q)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    results = [q.get(timeout=5) for _ in procs]
    assert results == [("ok", b"SAME-CUBIN")] * 2
    assert jc.KernelCache(str(tmp_path)).lookup(key)[0] == b"SAME-CUBIN"


def test_strict_mode_raises_on_miss(tmp_path, monkeypatch):
    from deep_gemm_sm120 import jit
    from deep_gemm_sm120.families.bf16_gemm.kernel import specs as bf16_specs

    monkeypatch.setenv("DG_SM120_JIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("DG_SM120_JIT_STRICT", "1")
    try:
        jit.toolchain.find_toolchain()
    except RuntimeError:
        pytest.skip("no nvcc: strict mode is reached only after the compiler is known")
    with pytest.raises(RuntimeError, match="DG_SM120_JIT_STRICT=1.*precompile"):
        jit.cubin_for(bf16_specs()[0], "sm_120a")


@pytest.mark.compile_gate
def test_precompile_then_strict_hit_and_debug_output(tmp_path, monkeypatch, capfd):
    import deep_gemm_sm120 as dg
    from deep_gemm_sm120 import jit
    from deep_gemm_sm120.families.bf16_gemm.kernel import specs as bf16_specs

    try:
        jit.toolchain.find_toolchain()
    except RuntimeError:
        pytest.skip("no nvcc")
    monkeypatch.setenv("DG_SM120_JIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("DG_SM120_JIT_DEBUG", "1")
    spec = bf16_specs()[0]
    assert dg.precompile([spec], ["sm_120a"]) == 1
    err = capfd.readouterr().err
    assert "-gencode arch=compute_120a,code=sm_120a" in err and "Used" in err and "registers" in err
    # off a terminal too: progress milestones and the summary line
    assert "precompile: 1/1" in err and "precompile: 1 kernel/target pairs: 1 built, 0 cached, 0 failed" in err
    assert dg.precompile([spec], ["sm_120a"]) == 1
    assert "0 built, 1 cached, 0 failed" in capfd.readouterr().err
    monkeypatch.setenv("DG_SM120_JIT_STRICT", "1")
    cubin, meta = jit.cubin_for(spec, "sm_120a")
    assert meta["target"] == "sm_120a" and cubin[:4] == b"\x7fELF"
    entries = [p for p in tmp_path.rglob("meta.json")]
    assert len(entries) == 1 and json.loads(entries[0].read_text())["name"] == spec.name


def test_jit_tree_digest_uses_the_manifest_formula():
    """The JIT cache key's device-layer digest must be the manifests' tree_sha256 formula (the host package
    keeps its own copy so it never imports tools/); pin the two together on the real tree."""
    import hashlib

    sys.path.insert(0, str(ROOT / "tools"))
    from deep_gemm_sm120.jit.device_layer import device_layer_dir, tree_digest
    from vendorkit.hashing import tree_sha256

    base = Path(device_layer_dir())
    entries = [
        (p.relative_to(base).as_posix(), hashlib.sha256(p.read_bytes()).hexdigest())
        for p in base.rglob("*")
        if p.is_file()
    ]
    assert entries and tree_digest() == tree_sha256(entries)


def test_a_bare_spec_without_a_family_compiles(tmp_path, monkeypatch):
    """Probes (tests/test_block_scaled_atoms_gpu.py, tests/test_launcher_gpu.py) and tools hand the JIT specs that
    belong to no family: the cache key must not need one (a regression the GPU run caught, now checked here)."""
    from deep_gemm_sm120 import jit
    from deep_gemm_sm120.core.params import Param, ParamList

    try:
        jit.toolchain.find_toolchain()
    except RuntimeError:
        pytest.skip("no nvcc")

    class BareSpec:
        name = "bare_probe"
        threads = 32
        smem_bytes = 0
        params = ParamList(Param("out", "float*"))

        def source(self) -> str:
            return (
                '#include "common/sm120_arch.cuh"\n'
                'extern "C" __global__ void __launch_bounds__(32, 1) bare_probe(float* out) {\n'
                "    out[threadIdx.x] = 1.0f;\n}\n"
            )

    assert not hasattr(BareSpec, "FAMILY")
    monkeypatch.setenv("DG_SM120_JIT_CACHE_DIR", str(tmp_path))
    cubin, meta = jit.cubin_for(BareSpec(), "sm_90a")
    assert cubin[:4] == b"\x7fELF" and meta["target"] == "sm_90a"
