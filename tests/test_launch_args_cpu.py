"""Every call site packs the right value into the right kernel parameter, checked on a CPU: the device layer is
stubbed (device 0, a fake kernel loader, a launcher that records), each API is called, and the recorded
parameter buffer is decoded *by name* with the family's ParamList, tensor maps by field. A positional slip in
any family's API (the hot paths pack positionally) fails here, not first on the H200."""

from __future__ import annotations

import ctypes
import struct
from dataclasses import dataclass

import pytest
import torch

import deep_gemm_sm120 as dg
from deep_gemm_sm120 import arch, device, jit, launch
from deep_gemm_sm120.core import tma
from deep_gemm_sm120.families import bf16_gemm, fp8_fp4_gemm_1d1d
from deep_gemm_sm120.families.bf16_gemm import api as bf16_api
from deep_gemm_sm120.families.bf16_gemm import grouped as bf16_grouped
from deep_gemm_sm120.families.bf16_gemm import plan as bf16_plan
from deep_gemm_sm120.families.fp8_fp4_gemm_1d1d import api as fp8_api
from deep_gemm_sm120.services import split_k_reduce

SMS = 132


@dataclass(frozen=True)
class Launch:
    kernel: str
    grid: tuple[int, int, int]
    block: int
    smem: int
    pdl: bool
    args: dict
    maps: list[dict]


def _decode_maps(buf: bytes) -> list[dict]:
    out = []
    for i in range(0, len(buf), tma.RECORD.size):
        f = tma.RECORD.unpack(buf[i : i + tma.RECORD.size])
        rank = f[2]
        out.append(
            {
                "offset": f[0],
                "dtype": f[1],
                "swizzle": f[3],
                "address": f[4],
                "dims": f[5 : 5 + rank],
                "strides": f[10 : 10 + rank - 1],
                "box": f[14 : 14 + rank],
            }
        )
    return out


@pytest.fixture()
def recorded(monkeypatch):
    """Stub the device layer; yields the list of launches the API makes."""
    families = {
        s: f for f in (bf16_gemm.FAMILY, fp8_fp4_gemm_1d1d.FAMILY, split_k_reduce.FAMILY) for s in [f.spec_type]
    }
    handles: dict[int, object] = {}

    def fake_get_kernel(spec, target, dev):
        assert target == "sm_120a" and dev == 0
        handles[len(handles)] = spec
        return jit.LoadedKernel(len(handles) - 1, spec.threads, spec.smem_bytes, spec.name, families[type(spec)].pdl)

    launches: list[Launch] = []

    def fake_launch(handle, gx, gy, gz, block, smem, stream, pdl, params, tmaps):
        spec = handles[handle]
        assert stream == 1234
        launches.append(
            Launch(spec.name, (gx, gy, gz), block, smem, pdl, spec.params.unpack(params), _decode_maps(tmaps))
        )

    monkeypatch.delenv("DG_SM120_EMULATE", raising=False)
    monkeypatch.setattr(arch, "device_capability", lambda i: (12, 0))
    monkeypatch.setattr(device, "device_sm_count", lambda i: SMS)
    monkeypatch.setattr(jit, "get_kernel", fake_get_kernel)
    monkeypatch.setattr(launch.BOUND, "launch", fake_launch)
    monkeypatch.setattr(launch.BOUND, "stream", lambda i: 1234)
    for mod in (bf16_api, bf16_grouped, fp8_api):
        monkeypatch.setattr(mod, "device_of", lambda **t: 0)
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda self: self)
    caches = (bf16_grouped._kernel, fp8_api._grouped_kernel)

    def clear():
        for c in caches:
            c.cache_clear()
        launch.forget_calls()  # calls checked and planned once per signature
        arch.reset_targets()

    clear()
    yield launches
    clear()


def _z(*shape, dtype=torch.bfloat16):
    return torch.zeros(*shape, dtype=dtype)


@pytest.mark.parametrize("fast", [False, True])
def test_bf16_dense(recorded, monkeypatch, fast):
    if fast:  # the hot path: every tensor on device 0
        monkeypatch.setattr(torch.Tensor, "get_device", lambda self: 0)
    a, b, d, c = _z(300, 256), _z(512, 256), _z(300, 512, dtype=torch.float32), _z(300, 512, dtype=torch.float32)
    dg.bf16_gemm_nt(a, b, d, c=c)
    (ln,) = recorded
    assert ln.kernel.startswith("bf16_gemm_nt_") and ln.kernel.endswith("_fp32_c") and ln.pdl
    assert ln.args == {
        "d": d.data_ptr(),
        "c": c.data_ptr(),
        "layout": 0,
        "aux": 0,
        "m": 300,
        "n": 512,
        "k": 256,
        "ldd": 512,
        "ldc": 512,
        "num_groups": 1,
        "psum_layout": 0,
        "num_splits": 1,
        "split_stride": 0,
    }
    ma, mb = ln.maps
    assert (ma["offset"], mb["offset"]) == (
        bf16_gemm.FAMILY.params.offsets["tmap_a"],
        bf16_gemm.FAMILY.params.offsets["tmap_b"],
    )
    assert ma["address"] == a.data_ptr() and ma["dims"] == (256, 300) and ma["strides"] == (512,)
    assert mb["address"] == b.data_ptr() and mb["dims"] == (256, 512) and mb["strides"] == (512,)
    plan = bf16_plan.dense_plan(bf16_plan.m_bucket(300), 512, 256, SMS)
    assert ma["box"] == (plan.config.block_k, plan.config.block_m) and ln.grid == (plan.grid(SMS), 1, 1)


def test_bf16_decode_swaps_and_splits(recorded):
    a, b, d = _z(1, 7168), _z(2112, 7168), _z(1, 2112)
    dg.bf16_gemm_nt(a, b, d)
    gemm, reduce = recorded
    assert "_swap" in gemm.kernel and gemm.kernel.endswith("_fp32_swap")  # slices are fp32
    args = gemm.args
    assert (args["m"], args["n"], args["k"]) == (2112, 1, 7168)  # kernel space: N x M
    assert args["num_splits"] > 1 and args["split_stride"] == 2112 and args["c"] == 0
    assert gemm.maps[0]["address"] == b.data_ptr() and gemm.maps[1]["address"] == a.data_ptr()
    assert reduce.kernel == "split_k_reduce_bf16" and reduce.pdl
    assert reduce.args == {
        "w": args["d"],
        "d": d.data_ptr(),
        "c": 0,
        "m": 1,
        "n": 2112,
        "ldd": 2112,
        "ldc": 0,
        "num_splits": args["num_splits"],
    }


def test_bf16_mn_major_layouts(recorded):
    a, b, d = _z(256, 192), _z(256, 320), _z(192, 320)  # tn: a [K, M], b [K, N]
    dg.bf16_gemm_tn(a, b, d)
    (ln,) = recorded
    assert ln.kernel.endswith("_tn") and (ln.args["m"], ln.args["n"], ln.args["k"]) == (192, 320, 256)
    ma, mb = ln.maps
    assert ma["dims"] == (192, 256) and ma["box"][0] == 64 and ma["swizzle"] == 128  # [K][M], 64-wide boxes
    assert mb["dims"] == (320, 256) and mb["strides"] == (640,)


def test_bf16_m_grouped(recorded):
    g, m, n, k = 3, 256, 128, 64
    a, b, d = _z(m, k), _z(g, n, k), _z(m, n)
    layout = torch.zeros(m, dtype=torch.int32)
    dg.m_grouped_bf16_gemm_nt_contiguous(a, b, d, layout, check_layout=False)
    masked_m = torch.zeros(g, dtype=torch.int32)
    am, dm = _z(g, 64, k), _z(g, 64, n)
    dg.m_grouped_bf16_gemm_nt_masked(am, b, dm, masked_m, expected_m=16)
    contig, masked = recorded
    assert contig.args == {
        "d": d.data_ptr(),
        "c": 0,
        "layout": layout.data_ptr(),
        "aux": 0,
        "m": m,
        "n": n,
        "k": k,
        "ldd": n,
        "ldc": 0,
        "num_groups": g,
        "psum_layout": 0,
        "num_splits": 1,
        "split_stride": 0,
    }
    assert contig.maps[1]["dims"] == (k, g * n)  # b seen as [G*N, K]
    assert masked.args["layout"] == masked_m.data_ptr() and masked.args["m"] == 64 and "m_masked" in masked.kernel
    assert masked.maps[0]["dims"] == (k, g * 64) and masked.args["d"] == dm.data_ptr()


def test_bf16_k_grouped(recorded, monkeypatch):
    ks, m, n = [64, 0, 192], 128, 256
    a, b = _z(sum(ks), m), _z(sum(ks), n)
    d = _z(3, m, n, dtype=torch.float32)
    seen = {}
    inner = launch.BOUND.launch

    def reading(*args):  # the device-side metadata as the kernel reads it (CPU tensors, alive during the launch)
        inner(*args)
        ln = recorded[-1]
        g = ln.args["num_groups"]
        seen["ks"] = list(struct.unpack(f"<{g}i", ctypes.string_at(ln.args["layout"], 4 * g)))
        seen["aux"] = list(struct.unpack("<5q", ctypes.string_at(ln.args["aux"], 40)))

    monkeypatch.setattr(launch.BOUND, "launch", reading)
    dg.k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks, c=d)
    (ln,) = recorded
    assert seen["ks"] == ks
    assert seen["aux"][:4] == [a.data_ptr(), b.data_ptr(), m * 2, n * 2] and seen["aux"][4]  # bases, strides, slots
    for odd in ([64, 0, 192, 0, 7], [1]):  # an odd count: the last int32 pair is half padding
        a2, b2, d2 = _z(sum(odd), m), _z(sum(odd), n), _z(len(odd), m, n, dtype=torch.float32)
        dg.k_grouped_bf16_gemm_tn_contiguous(a2, b2, d2, odd)
        assert seen["ks"] == odd
    assert "k_contiguous" in ln.kernel and ln.args["k"] == 256 and ln.args["num_groups"] == 3
    assert ln.args["d"] == ln.args["c"] == d.data_ptr() and ln.args["ldd"] == ln.args["ldc"] == n
    assert ln.maps[0]["dims"] == (m, 256) and ln.maps[1]["dims"] == (n, 256)  # MN-major [sum K][M], [sum K][N]


def _fp8(rows, k, lead=()):
    return _z(*lead, rows, k, dtype=torch.float8_e4m3fn)


def test_fp8_dense_with_packed_scales(recorded):
    m, n, k = 200, 384, 512
    a, b, d = _fp8(m, k), _fp8(n, k), _z(m, n)
    sfa = dg.transform_sf_into_required_layout(torch.ones(m, 4), m, k, (1, 128, 128), is_sfa=True)
    sfb = dg.transform_sf_into_required_layout(torch.ones(3, 4), n, k, (1, 128, 128))
    dg.fp8_gemm_nt((a, sfa), (b, sfb), d, recipe=(1, 128, 128), alpha=0.5)
    (ln,) = recorded
    assert ln.kernel.startswith("fp8_fp4_gemm_1d1d_mxfp8_g128_")
    args = ln.args
    assert (args["sfa"], args["sfb"], args["d"], args["m"], args["n"], args["k"]) == (
        sfa.data_ptr(),
        sfb.data_ptr(),
        d.data_ptr(),
        m,
        n,
        k,
    )
    assert (
        args["alpha"] == 0.5 and args["sfa_pack_stride"] == sfa.stride(-1) and args["sfb_pack_stride"] == sfb.stride(-1)
    )
    assert ln.maps[0]["dims"] == (k, m) and ln.maps[0]["box"][0] == 128 and ln.maps[1]["address"] == b.data_ptr()


def test_fp8_masked_grouped(recorded):
    g, m, n, k = 2, 64, 128, 256
    a, b, d = _fp8(m, k, (g,)), _fp8(n, k, (g,)), _z(g, m, n)
    sfa = dg.transform_sf_into_required_layout(torch.ones(g, m, 2), m, k, (1, 128, 128), num_groups=g, is_sfa=True)
    sfb = dg.transform_sf_into_required_layout(torch.ones(g, 1, 2), n, k, (1, 128, 128), num_groups=g)
    masked_m = torch.zeros(g, dtype=torch.int32)
    dg.m_grouped_fp8_gemm_nt_masked((a, sfa), (b, sfb), d, masked_m, 32, recipe=(1, 128, 128))
    (ln,) = recorded
    assert "m_masked" in ln.kernel and ln.args["layout"] == masked_m.data_ptr() and ln.args["num_groups"] == g
    assert ln.args["sfa_group_stride"] == sfa.stride(0) and ln.args["sfb_group_stride"] == sfb.stride(0)
    assert ln.maps[0]["dims"] == (k, g * m)


def test_decoder_reads_what_the_packer_wrote():
    buf = bf16_gemm.FAMILY.params.packer()(*range(1, 14))
    assert list(bf16_gemm.FAMILY.params.unpack(buf).values()) == list(range(1, 14))
    assert struct.calcsize(tma.RECORD.format) == 120


def test_benchmark_config_launcher_matches_the_api(recorded, monkeypatch):
    """benchmarks/bench_bf16_gemm.config_launcher (the sweep's and gemm_bounds.py's direct launch of one tile
    config) packs exactly what bf16_gemm_nt packs for the config its planner picks."""
    import os
    import sys
    from types import SimpleNamespace

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))
    import bench_bf16_gemm

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: SimpleNamespace(multi_processor_count=SMS))
    a, b, d = _z(4096, 2304), _z(7168, 2304), _z(4096, 7168)
    dg.bf16_gemm_nt(a, b, d)
    plan = bf16_plan.dense_plan(bf16_plan.m_bucket(4096), 7168, 2304, SMS)
    run, _ = bench_bf16_gemm.config_launcher(plan.config, a, b, d)
    run()
    api, direct = recorded
    assert plan.splits == 1 and api == direct


@pytest.mark.parametrize("op", ["bf16", "fp8"])
def test_set_num_sms_reaches_a_cached_call(recorded, monkeypatch, op):
    """A call signature's plan is cached, and the plan reads num_sms: set_num_sms after the first call must
    change the next call's grid (and split-K), as if nothing were cached."""
    monkeypatch.setattr(device, "_num_sms", None)  # restored after the test
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    m, n, k = 4096, 7168, 2304
    if op == "bf16":
        args = (_z(m, k), _z(n, k), _z(m, n))
        call = dg.bf16_gemm_nt
    else:
        sfa = dg.transform_sf_into_required_layout(torch.ones(m, 18), m, k, (1, 128, 128), is_sfa=True)
        sfb = dg.transform_sf_into_required_layout(torch.ones(56, 18), n, k, (1, 128, 128))
        args = ((_fp8(m, k), sfa), (_fp8(n, k), sfb), _z(m, n))
        call = fp8_api.fp8_fp4_gemm_nt
    call(*args)
    dg.set_num_sms(20)
    call(*args)
    first, second = recorded
    assert first.grid[0] == SMS and second.grid[0] == 20
