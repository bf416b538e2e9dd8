"""`deep_gemm.utils` as DeepGEMM 2.8.1 has it: a package with layout / math / nvfp4 / dist / mlopart, reachable
through the import hook, and reference casts that give DeepGEMM's results on the same input (its documented
rounding, dtypes, padding and sign of zero). The same functions are compared with DeepGEMM's own module, read
from the released vLLM wheel, in tests/test_ecosystem.py."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from deep_gemm_sm120.compat import utils
from deep_gemm_sm120.core.arith import round_up

E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def test_package_layout_and_top_level_reexports():
    for sub in ("layout", "math", "nvfp4", "dist", "mlopart"):
        assert getattr(utils, sub).__name__ == f"deep_gemm_sm120.utils.{sub}"
    for name in (*utils.layout.__all__, *utils.math.__all__, "init_dist", "uneven_all_gather"):
        assert callable(getattr(utils, name)), name
    assert utils.get_m_alignment_for_contiguous_layout is utils.layout.get_mk_alignment_for_contiguous_layout


def test_submodules_import_by_deepgemm_name_through_the_installed_hook(tmp_path):
    """SGLang: `from deep_gemm.utils.layout import get_mn_major_tma_aligned_tensor` at import time, in the
    environment the README's install builds (an editable install included: setup.py adds the hook's .pth line to
    the editable wheel too)."""
    import site
    from importlib import metadata

    installed = [
        d
        for d in metadata.distributions(name="deep_gemm_sm120")
        if any(str(f).endswith(".dist-info/RECORD") for f in d.files or ())
    ]
    if not installed:
        pytest.skip("deep_gemm_sm120 is not installed in this interpreter (the README's install is what is checked)")
    site_dirs = [*site.getsitepackages(), site.getusersitepackages()]
    assert any(os.path.isfile(os.path.join(d, "deep_gemm_sm120_compat.pth")) for d in site_dirs), (
        f"the install put no deep_gemm_sm120_compat.pth in {site_dirs}"
    )
    prog = (
        "import deep_gemm\n"
        "from deep_gemm.utils.layout import get_mn_major_tma_aligned_tensor\n"
        "from deep_gemm.utils.math import per_token_cast_to_fp8, ceil_div\n"
        "import deep_gemm.utils.nvfp4, deep_gemm.utils.mlopart, deep_gemm.utils.dist\n"
        "print(get_mn_major_tma_aligned_tensor.__module__, ceil_div(7, 2), deep_gemm.utils.mlopart.is_available(b''))\n"
    )
    env = {**os.environ, "DG_SM120_AS_DEEP_GEMM": "1"}
    p = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["deep_gemm_sm120.utils.layout", "4", "False"]


def test_refusals_name_why():
    for fn, args in (
        (utils.dist.init_dist, (0, 1)),
        (utils.uneven_all_gather, (torch.zeros(1),)),
        (utils.dist.dist_print, ("x",)),
    ):
        with pytest.raises(NotImplementedError, match="multi-GPU"):
            fn(*args)
    with pytest.raises(utils.mlopart.MLOPartUnavailable, match="SM120"):
        utils.mlopart.create_memory(b"", 1, 0)
    assert issubclass(utils.mlopart.MLOPartUnavailable, RuntimeError)


def test_ceil_to_ue8m0_clamps_instead_of_raising():
    x = torch.tensor([0.0, -3.0, 1.0, 1.5, 2.0**-140, float("inf"), 0.75])
    got = utils.ceil_to_ue8m0(x)
    assert got.tolist() == [2.0**-126, 4.0, 1.0, 2.0, 2.0**-126, 2.0**127, 1.0]


def test_pack_and_unpack_ue8m0():
    sf = torch.tensor([[1.0, 2.0, 0.5, 0.0, 4.0, 1.0, 1.0, 8.0]])
    packed = utils.pack_ue8m0_to_int(sf)
    assert packed.dtype == torch.int32 and packed.shape == (1, 2)
    assert packed.view(torch.uint8).tolist() == [[127, 128, 126, 0, 129, 127, 127, 130]]
    assert torch.equal(utils.unpack_ue8m0_from_int(packed)[:, :3], sf[:, :3])
    with pytest.raises(ValueError, match="multiple of 4"):
        utils.pack_ue8m0_to_int(sf[:, :6])
    with pytest.raises(ValueError, match="powers of two"):
        utils.pack_ue8m0_to_int(torch.full((1, 4), 3.0))


def test_fp8_casts_multiply_by_the_reciprocal():
    """DeepGEMM scales by x * (1 / sf), which rounds differently from x / sf in a few values per thousand."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 300, generator=g) * torch.rand(64, 1, generator=g) * 10
    q, sf = utils.per_token_cast_to_fp8(x, use_ue8m0=False)
    assert sf.shape == (64, 3) and q.shape == (64, 300)
    padded = torch.nn.functional.pad(x, (0, 84)).view(64, 3, 128)
    expect_sf = padded.abs().amax(2).clamp(1e-4) / 448.0
    assert torch.equal(sf, expect_sf)
    expect_q = (padded * (1.0 / expect_sf.unsqueeze(2))).to(torch.float8_e4m3fn).view(64, -1)[:, :300]
    assert torch.equal(q.view(torch.uint8), expect_q.view(torch.uint8))
    # packed UE8M0: one 128-wide block per row -> 3 scales padded with 1.0 (byte 127) to a whole word
    _, packed = utils.per_token_cast_to_fp8(x, use_ue8m0=True, use_packed_ue8m0=True)
    assert packed.shape == (64, 1) and packed.view(torch.uint8)[:, 3].eq(127).all()
    qb, sfb = utils.per_block_cast_to_fp8(x, use_ue8m0=True)
    assert sfb.shape == (1, 3) and qb.shape == x.shape
    qc, sfc = utils.per_channel_cast_to_fp8(x[:, :256].T.contiguous(), use_ue8m0=True, gran_k=64)
    assert sfc.shape == (4, 64) and qc.dtype == torch.float8_e4m3fn
    qd, sfd = utils.per_custom_dims_cast_to_fp8(x.view(8, 8, 300), (0,), use_ue8m0=False)
    assert sfd.shape == (8,) and qd.shape == (8, 8, 300)


def test_fp4_cast_codes_signs_ties_and_dtype():
    # one row: the exact grid, the ties (even code wins), values that round to zero from below, and a max of 6
    vals = [0.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.1, -0.25, -6.0, 6.0, 0.5, 1.0, 3.0, 4.0]
    x = torch.tensor([vals * 8])  # 128 values: one block, amax 6 -> scale 1
    packed, sf = utils.per_token_cast_to_fp4(x, use_ue8m0=True)
    assert packed.dtype == torch.int8 and packed.shape == (1, 64) and sf.tolist() == [[1.0]]
    b = packed.view(torch.uint8)[0, :8]
    codes = torch.stack([b & 15, b >> 4], -1).flatten().tolist()
    assert codes == [0, 0, 2, 2, 4, 4, 6, 6, 0, 0, 15, 7, 1, 2, 5, 6]  # -0.1 and -0.25 -> +0, not 0x8
    back = utils.cast_back_from_fp4(packed, sf)
    assert back[0, :16].tolist() == [0.0, 0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 0.0, 0.0, -6.0, 6.0, 0.5, 1.0, 3.0, 4.0]


def test_nvfp4_helpers_and_transpose():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(8, 128, generator=g)
    packed, sf = utils.per_token_cast_to_nvfp4(x)
    assert packed.dtype == torch.int8 and sf.shape == (8, 8) and sf.dtype == torch.float32
    _, sf_words = utils.per_token_cast_to_nvfp4(x, use_packed_e4m3=True)
    assert sf_words.dtype == torch.int32 and torch.equal(utils.unpack_e4m3_sf_from_int(sf_words), sf)
    assert (utils.cast_back_from_fp4(packed, sf, gran_k=16) - x).abs().max() < 0.5 * x.abs().max()
    p2, s2 = utils.nvfp4.per_token_cast_to_nvfp4(x, global_scale=0.01)
    assert s2.dtype == torch.int32 and s2.shape == (8, 2)
    assert (utils.nvfp4.cast_back_from_nvfp4(p2, s2, 0.01) - x).abs().max() < 0.5 * x.abs().max()
    t = utils.transpose_packed_fp4(packed)
    assert t.shape == (128, 4) and torch.equal(utils.transpose_packed_fp4(t), packed)
    with pytest.raises(ValueError, match="multiple of 64"):
        utils.nvfp4.per_token_cast_to_nvfp4(x[:, :48])
    with pytest.raises(TypeError, match="int8"):
        utils.transpose_packed_fp4(packed.view(torch.uint8))


def _fallback_packed_ue8m0(x: torch.Tensor) -> torch.Tensor:
    """DeepGEMM's documented packing, restated: exponent bytes, zero-padded to [TMA-aligned MN, K rounded to 4],
    four per int32, stored MN-major, viewed back to [MN, K/4]."""
    mn, k = x.shape
    aligned_mn, aligned_k = round_up(mn, 4), round_up(k, 4)
    raw = torch.zeros(aligned_mn, aligned_k, dtype=torch.uint8)
    raw[:mn, :k] = (x.view(torch.int32) >> 23).to(torch.uint8)
    words = raw.view(torch.int32)
    out = torch.zeros(aligned_k // 4, aligned_mn, dtype=torch.int32).t()
    out[:] = words
    return out[:mn]


def test_packed_ue8m0_layout_bytes_are_deepgemms():
    """Padding scales are 0 (as DeepGEMM writes them), not 1.0; MN-major, 16-byte aligned word stride."""
    sf = 2.0 ** torch.randint(-8, 8, (6, 5)).float()
    ours = utils.get_mn_major_tma_aligned_packed_ue8m0_tensor(sf)
    theirs = _fallback_packed_ue8m0(sf)
    assert ours.shape == theirs.shape and ours.stride() == theirs.stride() == (1, 8)
    assert torch.equal(ours, theirs)
    assert (ours[:, 1] >> 8).eq(0).all(), "scale bytes 5..7 of each row pad with 0"
    with pytest.raises(ValueError, match="powers of two"):
        utils.get_mn_major_tma_aligned_packed_ue8m0_tensor(sf * 1.5)


def test_ue4m3_helpers_and_layout():
    x = torch.tensor([[0.5, 1.0, 448.0, 2.0**-9], [3.0, 0.0, 6.0, 0.25]])
    packed = utils.pack_ue4m3_to_int(x)
    assert packed.dtype == torch.int32 and packed.shape == (2, 1)
    assert torch.equal(utils.unpack_ue4m3_from_int(packed), x)
    assert torch.equal(utils.cast_to_ue4m3(torch.tensor([1.03])), torch.tensor([1.0]))
    with pytest.raises(ValueError, match="cast_to_ue4m3"):
        utils.pack_ue4m3_to_int(torch.tensor([[1.03, 1.0, 1.0, 1.0]]))  # never rounded silently
    with pytest.raises(ValueError, match="non-negative"):
        utils.pack_ue4m3_to_int(-x)
    sf = utils.cast_to_ue4m3(torch.rand(6, 5) * 4)  # [MN = 6, K/16 = 5]: one padded word per row
    out = utils.transform_ue4m3_sf_into_required_layout(sf, 6)
    assert out.shape == (6, 2) and out.stride() == (1, 8)
    raw = out.t().contiguous().view(torch.uint8).view(2, 6, 4).permute(1, 0, 2).reshape(6, 8)
    assert torch.equal(raw[:, :5].view(torch.float8_e4m3fn).float(), sf) and raw[:, 5:].eq(0).all()
    with pytest.raises(ValueError, match="MN = 7"):
        utils.transform_ue4m3_sf_into_required_layout(sf, 7)
    a, b = utils.per_token_cast_to_nvfp4(torch.randn(4, 64), use_packed_ue4m3=True)  # sgl-deep-gemm's spelling
    assert b.dtype == torch.int32 and b.shape == (4, 1)


def test_compile_mode_switch():
    from deep_gemm_sm120 import compat, launch

    assert compat.get_compile_mode() == 0
    for bad, err in ((2, ValueError), (True, TypeError), ("1", TypeError)):
        with pytest.raises(err):
            compat.set_compile_mode(bad)
    compat.set_compile_mode(1)
    try:
        assert compat.get_compile_mode() == 1
        assert launch.bound().launch is launch._skip_launch  # every family's launch goes through this entry
        launch.launch(type("K", (), {"handle": 0, "threads": 1, "smem_bytes": 0, "pdl": False})(), 1, b"", b"", 0)
    finally:
        compat.set_compile_mode(0)
    assert launch.BOUND.launch is None and compat.get_compile_mode() == 0


def test_version_and_module_surfaces():
    from deep_gemm_sm120 import compat

    assert compat.__version__ == "2.8.1" and compat.__implementation__ == "deep_gemm_sm120"
    assert compat.is_localization_available() is False and compat.locality_domain.is_localized(torch.zeros(1)) is False
    compat.destroy_localizer(), compat.locality_domain.release_mlopart()
    with pytest.raises(NotImplementedError, match="MLOPart"):
        compat.locality_domain.empty_per_domain((4,), torch.float32)
    assert isinstance(compat.NVFP4SymmBuffer, type) and compat.mega.NVFP4SymmBuffer is compat.NVFP4SymmBuffer
    with pytest.raises(NotImplementedError, match="NVFP4SymmBuffer"):
        compat.NVFP4SymmBuffer(None, 8, 128, 2, 1024, 512)
    for name in ("get_block_m_for_nvfp4_mega_moe", "fp4_fp4_mega_moe", "get_bf16_mega_gate_config"):
        with pytest.raises(NotImplementedError, match=name):
            getattr(compat, name)(1, 2, 3, 4)
    with pytest.raises(NotImplementedError, match="m_grouped_bf16_gemm_nt_contiguous"):
        compat.legacy.m_grouped_bf16_gemm_nt_contiguous_tl(None, None, None, None)
