"""Host package on a CPU-only machine: import hygiene, typed validation errors, dispatch, heuristics, numerics."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from deep_gemm_sm120.core.arith import ceil_div

ROOT = Path(__file__).resolve().parents[1]


def test_import_never_initializes_cuda():
    code = (
        "import torch, deep_gemm_sm120 as dg; "
        "assert not torch.cuda.is_initialized(); "
        "assert dg.is_supported('bf16_gemm_nt', m=64, n=64, k=64, capability=(12, 0)); "
        "import deep_gemm_sm120.runtime, deep_gemm_sm120.jit; "
        "assert not torch.cuda.is_initialized(); print('ok')"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "host"), "CUDA_VISIBLE_DEVICES": ""}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr


def test_runtime_extension_loads_without_libcuda():
    from deep_gemm_sm120 import runtime

    ext = runtime._ext()  # importing _C must not need libcuda
    if ext.driver_available():
        pytest.skip("this machine has an NVIDIA driver")
    from deep_gemm_sm120.services.split_k_reduce import PARAMS

    with pytest.raises(RuntimeError, match="libcuda"):
        runtime.load_kernel(b"\0" * 16, 1024, 0, PARAMS)


def test_launch_entry_reads_its_arguments_strictly():
    """The runtime's launch entry (a METH_FASTCALL function: the hot path of every cached call) checks each
    argument's type and range before it touches the driver, so these errors need no GPU."""
    from deep_gemm_sm120 import runtime

    launch = runtime.launcher()
    good = [0, 1, 1, 1, 128, 0, 0, False, b"", b""]

    def call(i, value):
        args = list(good)
        args[i] = value
        launch(*args)

    with pytest.raises(TypeError, match="takes 10 positional arguments, got 9"):
        launch(*good[:9])
    with pytest.raises(TypeError, match="keyword"):
        launch(*good[:9], tmaps=b"")
    with pytest.raises(TypeError, match="gy must be an int, got float"):
        call(2, 1.0)
    with pytest.raises(TypeError, match="handle must be an int, got bool"):
        call(0, True)
    with pytest.raises(ValueError, match=r"block must be in \[0, 4294967295\], got 4294967296"):
        call(4, 1 << 32)
    with pytest.raises(ValueError, match=r"smem must be in \[0, 4294967295\]"):
        call(5, -1)
    with pytest.raises(ValueError, match=r"handle must be in \[0, 2147483647\]"):
        call(0, -3)
    with pytest.raises(TypeError, match="pdl must be a bool, got int"):
        call(7, 1)
    with pytest.raises(TypeError, match="params must be bytes, got bytearray"):
        call(8, bytearray())
    with pytest.raises(TypeError, match="tmaps must be bytes, got str"):
        call(9, "")
    if not runtime._ext().driver_available():  # well-formed arguments reach the driver, which is missing
        with pytest.raises(RuntimeError, match="libcuda"):
            launch(*good)


def _t(*shape, dtype=torch.bfloat16):
    return torch.zeros(*shape, dtype=dtype)


@pytest.mark.parametrize(
    "args, exc, match",
    [
        ((_t(4, 8, dtype=torch.float32), _t(4, 8), _t(4, 4)), TypeError, "a must be torch.bfloat16, got torch.float32"),
        ((_t(4, 8), _t(4, 8, dtype=torch.float16), _t(4, 4)), TypeError, "b must be torch.bfloat16"),
        ((_t(4, 8), _t(4, 8), _t(4, 4, dtype=torch.float16)), TypeError, "d must be torch.bfloat16 or torch.float32"),
        ((_t(4, 8), _t(4, 16), _t(4, 4)), ValueError, "K must agree"),
        ((_t(4, 8), _t(5, 8), _t(4, 4)), ValueError, r"d must be \[M, N\] = \(4, 5\), got \(4, 4\)"),
        ((_t(2, 4, 8), _t(4, 8), _t(4, 4)), ValueError, r"a must be 2-D \[M, K\]"),
        (("not a tensor", _t(4, 8), _t(4, 4)), TypeError, "a must be a torch.Tensor, got str"),
        ((_t(4, 8), _t(4, 8), _t(4, 4)), ValueError, "must be on a CUDA device, got cpu"),
    ],
)
def test_bf16_gemm_validation_errors(args, exc, match):
    import deep_gemm_sm120 as dg

    with pytest.raises(exc, match=match):
        dg.bf16_gemm_nt(*args)


def test_c_validation_errors():
    import deep_gemm_sm120 as dg

    with pytest.raises(TypeError, match="c must have d's dtype torch.bfloat16, got torch.float32"):
        dg.bf16_gemm_nt(_t(4, 8), _t(4, 8), _t(4, 4), c=_t(4, 4, dtype=torch.float32))
    with pytest.raises(ValueError, match=r"c must be \[M, N\]"):
        dg.bf16_gemm_nt(_t(4, 8), _t(4, 8), _t(4, 4), c=_t(4, 5))


def test_tma_stride_and_alignment_rules():
    from deep_gemm_sm120.checks import output_row_stride, tma_operand
    from deep_gemm_sm120.core.rules import require_tma_rows

    def row_bytes(name, t):  # the tensor-level checks, then the 16-byte stride rule the families apply
        stride, stride_bytes = tma_operand(name, t)
        require_tma_rows(name, t.shape[1], t.element_size(), stride, t.shape[0])
        return stride_bytes

    assert row_bytes("a", _t(4, 64)) == 128
    with pytest.raises(ValueError, match="multiple of 16 bytes.*multiple of 8"):
        row_bytes("a", _t(4, 12))
    with pytest.raises(ValueError, match="contiguous last dimension"):
        row_bytes("a", _t(64, 8).T)
    with pytest.raises(ValueError, match="16-byte aligned"):
        row_bytes("a", _t(4, 72)[:, 1:65])
    assert row_bytes("a", _t(4, 128)[:, :64]) == 256  # strided rows are fine
    assert row_bytes("a", _t(1, 12)) == 32  # one row: stride padded, never read
    assert tma_operand("a", _t(4, 12)) == (12, 24)
    assert tma_operand("a", _t(1, 12)) == (None, 32)
    with pytest.raises(ValueError, match="contiguous last dimension"):
        output_row_stride("d", _t(8, 8).T)


def test_arch_dispatch():
    from deep_gemm_sm120.arch import target_for_capability

    assert target_for_capability((12, 0), False) == "sm_120a"
    assert target_for_capability((12, 1), False) == "sm_121a"
    assert target_for_capability((9, 0), True) == "sm_90a"
    with pytest.raises(NotImplementedError, match="this device is sm_90.*DG_SM120_EMULATE=1"):
        target_for_capability((9, 0), False)
    with pytest.raises(NotImplementedError, match="sm_80"):
        target_for_capability((8, 0), True)


def test_is_supported_answers_without_raising(monkeypatch):
    import deep_gemm_sm120 as dg

    monkeypatch.delenv("DG_SM120_EMULATE", raising=False)
    assert dg.is_supported(
        "bf16_gemm_nt", m=1, n=7168, k=2048, ab_dtype=torch.bfloat16, out_dtype=torch.float32, capability=(12, 0)
    )
    assert not dg.is_supported("bf16_gemm_nt", capability=(9, 0))
    monkeypatch.setenv("DG_SM120_EMULATE", "1")
    assert dg.is_supported("bf16_gemm_nt", capability=(9, 0))
    assert not dg.is_supported("bf16_gemm_nt", k=100)  # TMA needs 16-byte rows
    assert not dg.is_supported("bf16_gemm_nt", ab_dtype=torch.float16)
    assert not dg.is_supported("bf16_gemm_nt", out_dtype=torch.float16)
    assert not dg.is_supported("fp8_fp4_sparse_mqa_logits_v2")  # not an op of this package
    assert dg.is_supported("fp8_fp4_sparse_mqa_logits", heads=32, head_dim=128, q_dtype=torch.uint8, sparse_block_kv=16)
    assert not dg.is_supported("fp8_fp4_sparse_mqa_logits", heads=32, head_dim=64, q_dtype=torch.uint8)
    assert dg.is_supported("fp8_gemm_nt", m=1, n=7168, k=7168, ab_dtype=torch.float8_e4m3fn, capability=(12, 0))
    assert dg.is_supported("fp8_fp4_gemm_nt", k=7168, ab_dtype=torch.uint8, out_dtype=torch.float32)
    assert not dg.is_supported("fp8_gemm_nt", k=100, ab_dtype=torch.float8_e4m3fn)  # 16-byte K rows
    assert not dg.is_supported("fp8_fp4_gemm_nt", k=48, ab_dtype=torch.uint8)  # 48 e2m1 = 24 bytes
    assert not dg.is_supported("fp8_gemm_nt", ab_dtype=torch.bfloat16)
    assert not dg.is_supported("m_grouped_fp8_gemm_nt_masked", out_dtype=torch.float32)
    assert not dg.is_supported("bf16_gemm_nt", bogus=1)
    assert not dg.is_supported("bf16_gemm_nt", m=-1)


def test_heuristics_pick_by_waves_and_are_memoized():
    from deep_gemm_sm120.families.bf16_gemm.plan import choose_config, dense_plan

    big = choose_config(8192, 8192, 132)
    assert (big.block_m, big.block_n, big.block_k) == (128, 256, 32)  # largest tiles when waves are many
    decode = choose_config(1, 7168, 170)
    assert decode.block_m == 64  # no 128-row tile for a single token
    dense_plan.cache_clear()
    dense_plan(4096, 4096, 4096, 170)
    dense_plan(4096, 4096, 4096, 170)
    assert dense_plan.cache_info().hits == 1


def test_small_m_swaps_ab():
    from deep_gemm_sm120.families.bf16_gemm.plan import dense_plan, m_bucket

    for m, want_n in ((1, 16), (16, 16), (17, 32), (32, 32)):
        p = dense_plan(m_bucket(m), 7168, 2048, 170)
        assert p.swap_ab and p.config.block_n == want_n and p.config.block_n >= m
    assert not dense_plan(m_bucket(33), 7168, 2048, 170).swap_ab


def test_calc_diff():
    from deep_gemm_sm120.testing import calc_diff

    x = torch.randn(1000, dtype=torch.float64)
    assert calc_diff(x, x) == pytest.approx(0.0, abs=1e-12)
    assert calc_diff(x, -x) == pytest.approx(2.0)
    assert calc_diff(x, 3 * x) == pytest.approx(calc_diff(2 * x, 6 * x))  # scale invariant
    assert 0 < calc_diff(x, x + 1e-3 * torch.randn_like(x)) < 1e-5
    assert calc_diff(torch.zeros(3), torch.zeros(3)) == 0.0


def test_set_num_sms_validation(monkeypatch):
    import deep_gemm_sm120 as dg
    from deep_gemm_sm120 import device

    with pytest.raises(TypeError, match="num_sms must be an int"):
        dg.set_num_sms(1.5)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    device.device_sm_count.cache_clear()
    monkeypatch.setattr(device, "device_sm_count", lambda i: 170)
    with pytest.raises(ValueError, match=r"num_sms must be in \[1, 170\]"):
        dg.set_num_sms(171)
    dg.set_num_sms(100)
    try:
        assert dg.get_num_sms() == 100 and device.num_sms_for(0) == 100
    finally:
        device._num_sms = None


def test_without_a_gpu_the_errors_say_so(monkeypatch):
    """No CUDA GPU: the SM count calls raise the README's error type naming the cause (torch itself would raise an
    AssertionError or RuntimeError), and a kernel call on CPU tensors says no GPU was found."""
    import deep_gemm_sm120 as dg

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for call in (dg.get_num_sms, lambda: dg.set_num_sms(8)):
        with pytest.raises(NotImplementedError, match="no CUDA GPU was found"):
            call()
    a = torch.zeros(4, 8, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"a must be on a CUDA device, got cpu; no CUDA GPU was found"):
        dg.bf16_gemm_nt(a, torch.zeros(16, 8, dtype=torch.bfloat16), torch.zeros(4, 16, dtype=torch.bfloat16))


@pytest.mark.parametrize(
    "fn, a, b, d, match",
    [
        ("bf16_gemm_nn", (4, 8), (16, 5), (4, 5), r"a is \[M, K\] = \(4, 8\) and b is \[K, N\] = \(16, 5\)"),
        ("bf16_gemm_tn", (8, 4), (5, 16), (4, 16), r"a is \[K, M\] = \(8, 4\) and b is \[K, N\] = \(5, 16\)"),
        ("bf16_gemm_tt", (8, 4), (5, 8), (5, 4), r"d must be \[M, N\] = \(4, 5\)"),
        ("bf16_gemm_tt", (8, 4, 1), (8, 5), (4, 5), r"a must be 2-D \[K, M\]"),
    ],
)
def test_layout_validation_errors(fn, a, b, d, match):
    import deep_gemm_sm120 as dg

    with pytest.raises(ValueError, match=match):
        getattr(dg, fn)(_t(*a), _t(*b), _t(*d))


def test_layout_specs_and_swap_rules():
    from deep_gemm_sm120.families.bf16_gemm.kernel import specs as bf16_specs
    from deep_gemm_sm120.families.bf16_gemm.plan import dense_plan

    specs = bf16_specs()
    assert {s.layout for s in specs} == {"nt", "nn", "tn", "tt"}
    assert all(
        s.config.block_k in (32, 64) and s.config.block_m % 64 == 0 for s in specs if s.layout[0] == "t"
    )  # MN-major A is fetched in 64-wide [BLOCK_K][64] boxes
    assert all(s.config.block_n % 64 == 0 for s in specs if s.layout[1] == "n" and not s.swap_ab)
    assert dense_plan(16, 4096, 4096, 132, "nn").swap_ab  # K-major A: swap-AB allowed
    assert not dense_plan(16, 4096, 4096, 132, "tn").swap_ab  # MN-major A: never swapped
    swapped_nn = [s for s in specs if s.swap_ab and s.layout == "nn"]
    assert swapped_nn and all(s.mn_major == (True, False) for s in swapped_nn)


def test_is_supported_layouts():
    import deep_gemm_sm120 as dg

    assert dg.is_supported("bf16_gemm_tn", m=64, n=64, k=7, capability=(12, 0))  # K is the outer dim of both
    assert not dg.is_supported("bf16_gemm_tt", m=64, n=64, k=7, capability=(12, 0))  # b [N, K] is K-major
    assert not dg.is_supported("bf16_gemm_tn", m=7, n=64, k=64, capability=(12, 0))
    assert not dg.is_supported("bf16_gemm_nn", m=7, n=60, k=64, capability=(12, 0))


def test_split_k_heuristic():
    from deep_gemm_sm120.core.splitk import choose_splits
    from deep_gemm_sm120.families.bf16_gemm.plan import dense_plan

    assert dense_plan(64, 2112, 7168, 132).splits == 4  # 33 tiles on 132 SMs, K = 112 blocks
    assert dense_plan(4096, 4096, 4096, 132).splits == 1  # plenty of tiles
    assert dense_plan(64, 2112, 1024, 132).splits == 1  # short K
    for tiles in range(1, 80):
        for k in range(2048, 40000, 1111):
            s = choose_splits(tiles, k, 64, 132)
            kb = ceil_div(k, 64)
            per = ceil_div(kb, s)
            assert 1 <= s <= 16 and (s - 1) * per < kb, (tiles, k, s)  # no empty slice
            assert s == 1 or tiles * s <= 132


def test_pdl_switch(monkeypatch):
    import deep_gemm_sm120 as dg
    from deep_gemm_sm120 import launch

    monkeypatch.setattr(launch.BOUND, "pdl", None)
    monkeypatch.setenv("DG_SM120_PDL", "0")
    assert dg.get_pdl() is False
    monkeypatch.setattr(launch.BOUND, "pdl", None)
    monkeypatch.delenv("DG_SM120_PDL")
    assert dg.get_pdl() is True  # on by default
    dg.set_pdl(False)
    assert dg.get_pdl() is False
    with pytest.raises(TypeError, match="bool"):
        dg.set_pdl(1)
    dg.set_pdl(True)


def test_empty_reduction_writes_c_or_zeros():
    import torch

    from deep_gemm_sm120.checks import write_empty_reduction

    d = torch.full((2, 3), 7.0)
    write_empty_reduction(d, None)
    assert torch.equal(d, torch.zeros(2, 3))
    c = torch.arange(6.0).view(2, 3)
    write_empty_reduction(d, c)
    assert torch.equal(d, c)
    write_empty_reduction(c, c)  # c is d: left as it is
    assert torch.equal(c, torch.arange(6.0).view(2, 3))


def test_a_device_keeps_the_target_its_first_call_chose(monkeypatch):
    """DG_SM120_EMULATE is read until a call on the device succeeds (a refusal is not remembered); afterwards
    the device keeps its target (no environment read per call) until reset_targets()."""
    from deep_gemm_sm120 import arch

    monkeypatch.setattr(arch, "device_capability", lambda i: (9, 0))
    monkeypatch.delenv("DG_SM120_EMULATE", raising=False)
    arch.reset_targets()
    for _ in range(2):  # refused, and refused again: nothing memoized
        with pytest.raises(NotImplementedError, match="sm_90"):
            arch.target_of(0)
    monkeypatch.setenv("DG_SM120_EMULATE", "1")
    assert arch.target_of(0) == "sm_90a"
    monkeypatch.delenv("DG_SM120_EMULATE")
    assert arch.target_of(0) == "sm_90a"  # fixed for the process
    arch.reset_targets()
    with pytest.raises(NotImplementedError, match="DG_SM120_EMULATE=1"):
        arch.target_of(0)
