"""The `deep_gemm` surface (deep_gemm_sm120.compat) on a CPU: every name DeepGEMM exports exists with its
signature; the argument patterns serving stacks use bind and reach our kernels' validation (the last check
before CUDA); keywords are honoured or refused by name; the opt-in import hook never shadows a real DeepGEMM
unless asked."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import deep_gemm_sm120 as dg
from deep_gemm_sm120 import compat
from deep_gemm_sm120 import keywords as policy
from deep_gemm_sm120.compat import surface
from deep_gemm_sm120.core.names import ALIAS, NOT_PROVIDED, NOT_YET, OUT_OF_SCOPE
from deep_gemm_sm120.families.fp8_fp4_gemm_1d1d.rules import FP4
from deep_gemm_sm120.families.mqa_logits.api import _forms

ROOT = Path(__file__).resolve().parents[1]
CPU = "must be on a CUDA device"
FP8 = torch.float8_e4m3fn

# Public names of sgl-deep-gemm 0.2.5's deep_gemm/__init__.py (read from the wheel, 2026-11-30) plus the names
# DeepGEMM main and vLLM call that it lacks.
SGL_025_NAMES = """set_num_sms get_num_sms set_tc_util get_tc_util set_pdl get_pdl use_deterministic_algorithms
get_deterministic_algorithms set_ignore_compile_dims shutdown set_block_size_multiple_of cublaslt_gemm_nt
cublaslt_gemm_nn cublaslt_gemm_tn cublaslt_gemm_tt fp8_fp4_gemm_nt fp8_fp4_gemm_nn fp8_fp4_gemm_tn fp8_fp4_gemm_tt
fp4_gemm_nt fp8_gemm_nt fp8_gemm_nn fp8_gemm_tn fp8_gemm_tt m_grouped_fp8_fp4_gemm_nt_contiguous
m_grouped_fp8_fp4_gemm_nn_contiguous m_grouped_fp4_gemm_nt_contiguous m_grouped_fp8_gemm_nt_contiguous
m_grouped_fp8_gemm_nn_contiguous bf16_gemm_nt bf16_gemm_nn bf16_gemm_tn bf16_gemm_tt einsum fp8_einsum
fp8_fp4_paged_mqa_logits fp8_fp4_mqa_logits get_paged_mqa_logits_metadata tf32_hc_prenorm_gemm
transform_sf_into_required_layout get_mk_alignment_for_contiguous_layout m_grouped_fp8_fp4_gemm_nt_masked
m_grouped_fp4_gemm_nt_masked m_grouped_fp8_gemm_nt_masked fp8_m_grouped_gemm_nt_masked
k_grouped_fp8_gemm_tn_contiguous k_grouped_fp8_gemm_nt_contiguous m_grouped_bf16_gemm_nt_contiguous
m_grouped_bf16_gemm_nn_contiguous m_grouped_bf16_gemm_nt_masked k_grouped_bf16_gemm_tn_contiguous
bf16_m_grouped_gemm_nt_masked cublaslt_nvfp4_gemm_nt batched_syrk batched_symm k_grouped_fp4_gemm_nt_contiguous
get_mqa_logits_metadata get_sparse_mqa_logits_metadata get_paged_sparse_mqa_logits_metadata fp8_fp4_sparse_mqa_logits
fp8_fp4_paged_sparse_mqa_logits bf16_mega_gate mega_mhc SymmBuffer transform_weights_for_mega_moe
transform_scales_for_mega_moe fp8_fp4_mega_moe nvfp4_mega_moe bf16_mega_moe mega_moe_pre_dispatch
mega_moe_pre_dispatch_sm90 get_block_m_for_mega_moe SM90SymmBuffer get_symm_buffer_for_sm90_mega_moe
get_symm_buffer_for_mega_moe transform_weights_for_mega_moe_sm90 fp8_mega_moe get_num_locality_domains
is_localization_available localize localize_rows is_localized destroy_localizer get_tma_aligned_size
set_mk_alignment_for_contiguous_layout get_theoretical_mk_alignment_for_contiguous_layout
get_mn_major_tma_aligned_tensor get_mn_major_tma_aligned_packed_ue8m0_tensor
get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor pack_ue8m0_to_int ceil_to_ue8m0 per_token_cast_to_fp8
per_channel_cast_to_fp8 per_block_cast_to_fp8 per_token_cast_to_fp4 calc_diff""".split()
MAIN_ONLY = ["fp8_mqa_logits", "fp8_paged_mqa_logits"]

# DeepGEMM 2.8.1's positional parameters (facts from vllm 0.33.0's bundled deep_gemm/_C.py, 2026-12-01): ours are
# exactly these, in this order; where sgl-deep-gemm 0.2.5 differs (einsum's use_cublaslt, k-grouped `ks`) its
# spelling is accepted by keyword only
POSITIONAL_281 = {
    "fp8_fp4_gemm_nt": "a b d c recipe recipe_a recipe_b compiled_dims disable_ue8m0_cast alpha epilogue",
    "m_grouped_fp8_fp4_gemm_nt_contiguous": "a b d grouped_layout recipe recipe_a recipe_b compiled_dims "
    "disable_ue8m0_cast use_psum_layout ensure_zero_padding "
    "expected_m_for_psum_layout epilogue",
    "m_grouped_fp8_fp4_gemm_nt_masked": "a b d masked_m expected_m recipe recipe_a recipe_b compiled_dims "
    "disable_ue8m0_cast epilogue",
    "k_grouped_fp8_gemm_tn_contiguous": "a b d ks_cpu grouped_layout c recipe compiled_dims use_psum_layout epilogue",
    "fp8_einsum": "expr a b d c recipe epilogue use_128x4_sfd_layout",
    "fp8_fp4_paged_mqa_logits": "q kv_cache weights context_lens block_table schedule_meta max_context_len indices",
    "get_mqa_logits_metadata": "cu_seq_len_k_start cu_seq_len_k_end num_kv_tokens num_heads",
    "bf16_gemm_nt": "a b d c compiled_dims alpha epilogue",
    "m_grouped_bf16_gemm_nt_contiguous": "a b d grouped_layout compiled_dims use_psum_layout ensure_zero_padding "
    "expected_m_for_psum_layout epilogue",
    "m_grouped_bf16_gemm_nt_masked": "a b d masked_m expected_m compiled_dims epilogue",
    "k_grouped_bf16_gemm_tn_contiguous": "a b d ks_cpu grouped_layout c compiled_dims use_psum_layout epilogue",
    "einsum": "expr a b d c epilogue",
    "transform_sf_into_required_layout": "sf mn k recipe num_groups is_sfa disable_ue8m0_cast psum_layout",
    "tf32_hc_prenorm_gemm": "a b d sqr_sum num_splits",
}


def _z(*shape, dtype=torch.bfloat16):
    return torch.zeros(*shape, dtype=dtype)


def _reaches_device_check(fn, *args, **kw):
    with pytest.raises(ValueError, match=CPU):
        fn(*args, **kw)


def test_every_deepgemm_name_exists():
    missing = [n for n in SGL_025_NAMES + MAIN_ONLY if not callable(getattr(compat, n, None))]
    assert missing == []
    assert {e.name for e in surface.ENTRIES} >= set(SGL_025_NAMES + MAIN_ONLY)


def test_positional_orders_are_deepgemm_281s():
    for name, expected in POSITIONAL_281.items():
        params = inspect.signature(getattr(compat, name)).parameters.values()
        assert [p.name for p in params if p.kind == p.POSITIONAL_OR_KEYWORD] == expected.split(), name
        assert not any(p.kind == p.VAR_POSITIONAL for p in params), name
    # fp8_fp4_mqa_logits takes two published forms, told apart by the 6th argument's type; sgl-deep-gemm's is
    # (q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, max_seqlen_k, schedule_meta)
    assert _forms(64, "meta", None) == (False, 64)
    params = inspect.signature(compat.fp8_fp4_mqa_logits).parameters.values()
    assert [p.name for p in params if p.kind == p.POSITIONAL_OR_KEYWORD][5:] == ["max_seqlen_k", "schedule_meta"]


def test_sgl_deep_gemm_spellings_by_keyword():
    sig = inspect.signature(compat.einsum)
    assert sig.parameters["use_cublaslt"].kind == inspect.Parameter.KEYWORD_ONLY
    with pytest.raises(TypeError, match="once"):
        compat.k_grouped_bf16_gemm_tn_contiguous(_z(8, 4), _z(8, 4), _z(1, 4, 4, dtype=torch.float32), [8], ks=[8])
    _reaches_device_check(
        compat.k_grouped_bf16_gemm_tn_contiguous, _z(8, 16), _z(8, 16), _z(1, 16, 16, dtype=torch.float32), ks=[8]
    )
    with pytest.raises(TypeError, match="one alignment"):
        compat.set_mk_alignment_for_contiguous_layout(128, new_value=256)
    compat.set_mk_alignment_for_contiguous_layout(new_value=256)
    try:
        assert compat.get_mk_alignment_for_contiguous_layout() == 256
    finally:
        compat.set_mk_alignment_for_contiguous_layout(128)


def test_statuses_match_behaviour():
    for e in surface.ENTRIES:
        fn = getattr(compat, e.name)
        if inspect.ismodule(fn):  # a refusing module refuses with every name it has
            if e.status in (OUT_OF_SCOPE, NOT_PROVIDED):
                for n in fn.__all__:
                    with pytest.raises(NotImplementedError, match=n):
                        getattr(fn, n)()
            continue
        if e.status == ALIAS:
            assert fn is getattr(compat, e.note), e.name
        elif e.status in (NOT_YET, OUT_OF_SCOPE, NOT_PROVIDED):
            params = inspect.signature(fn).parameters
            args = [None] * sum(
                p.default is inspect.Parameter.empty and p.kind == p.POSITIONAL_OR_KEYWORD for p in params.values()
            )
            if e.name in ("fp8_fp4_mqa_logits", "fp8_mqa_logits"):
                args = [None] * 5
            with pytest.raises(NotImplementedError) as info:
                fn(*args)
            if e.status == NOT_YET:
                assert "issue" in str(info.value), e.name
            assert e.name in str(info.value) or e.status == NOT_PROVIDED


def test_compat_table_in_docs_is_current():
    doc = (ROOT / "docs" / "deep_gemm_compat.md").read_text()
    assert surface.render() in doc, "regenerate with python -m deep_gemm_sm120.compat"


def test_block_scaled_caller_patterns_reach_the_kernels():
    a, b, d = _z(64, 256, dtype=FP8), _z(128, 256, dtype=FP8), _z(64, 128)
    sfa, sfb = torch.ones(64, 2), torch.ones(1, 2)
    _reaches_device_check(compat.fp8_gemm_nt, (a, sfa), (b, sfb), d)
    _reaches_device_check(compat.fp8_gemm_nt, (a, sfa), (b, sfb), d, None, (1, 128, 128), None, None, "nk", False, None)
    _reaches_device_check(
        compat.fp8_fp4_gemm_nt,
        [a, sfa],
        [b, sfb],
        d,
        recipe_a=(1, 128),
        recipe_b=(128, 128),
        disable_ue8m0_cast=True,
        alpha=0.5,
    )
    _reaches_device_check(compat.fp8_gemm_nt, a, b, d)  # bare tensors: unit scales
    g = 2
    layout = torch.zeros(128, dtype=torch.int32)
    _reaches_device_check(
        compat.m_grouped_fp8_gemm_nt_contiguous,
        (_z(128, 256, dtype=FP8), torch.ones(128, 2)),
        (_z(g, 128, 256, dtype=FP8), torch.ones(g, 1, 2)),
        _z(128, 128),
        layout,
        None,
        None,
        None,
        "nk",
        False,
        False,
        True,
        None,
    )
    _reaches_device_check(
        compat.fp8_m_grouped_gemm_nt_masked,
        (_z(g, 64, 256, dtype=FP8), torch.ones(g, 64, 2)),
        (_z(g, 128, 256, dtype=FP8), torch.ones(g, 1, 2)),
        _z(g, 64, 128),
        torch.zeros(g, dtype=torch.int32),
        32,
        recipe=(1, 128, 128),
    )


def test_recipe_forms():
    a8, a4 = _z(4, 256, dtype=FP8), _z(4, 128, dtype=torch.uint8)
    assert policy.recipe("f", None, (1, 128), (128, 128), a8, a8, FP4) == (1, 128, 128)
    assert policy.recipe("f", None, (1, 128), (1, 32), a8, a4, FP4) == (1, 1, 128)  # mixed: e4m3 side's gran
    with pytest.raises(NotImplementedError, match="granularities differ"):
        policy.recipe("f", None, (1, 128), (1, 32), a8, a8, FP4)
    with pytest.raises(ValueError, match="not both"):
        policy.recipe("f", (1, 1, 128), (1, 128), (1, 128), a8, a8, FP4)


def test_bf16_caller_patterns_and_keyword_refusals():
    a, b, d = _z(64, 128), _z(96, 128), _z(64, 96)
    _reaches_device_check(compat.bf16_gemm_nt, a, b, d)
    _reaches_device_check(compat.bf16_gemm_nt, a, b, d, None, "nk")
    _reaches_device_check(compat.bf16_gemm_nt, a, b, d, c=None, compiled_dims="mn", alpha=1.0)
    with pytest.raises(NotImplementedError, match="alpha"):
        compat.bf16_gemm_nt(a, b, d, alpha=2.0)
    ep = compat.epilogue
    with pytest.raises(TypeError, match="epilogue object"):
        compat.bf16_gemm_tn(a, b, d, epilogue=object())
    for refused in (ep.FP8Quantization(_z(1)), ep.FP8CastWithClamp(_z(1), 1.0), ep.BF16StochasticRounding()):
        with pytest.raises(NotImplementedError, match=type(refused).__name__):
            compat.bf16_gemm_tn(a, b, d, epilogue=refused)
    _reaches_device_check(compat.bf16_gemm_nt, a, b, d, epilogue=ep.Identity())
    _reaches_device_check(compat.bf16_gemm_nt, a, b, d, epilogue=ep.Alpha(1))
    with pytest.raises(NotImplementedError, match="alpha"):
        compat.bf16_gemm_nt(a, b, d, epilogue=ep.Alpha(2.0))
    fa, fb = (_z(4, 128, dtype=FP8), torch.ones(4, 1)), (_z(4, 128, dtype=FP8), torch.ones(4, 1))
    _reaches_device_check(compat.fp8_gemm_nt, fa, fb, _z(4, 4), epilogue=ep.Alpha(0.5))
    _reaches_device_check(compat.fp8_gemm_nt, fa, fb, _z(4, 4), alpha=0.5, epilogue=ep.Alpha(0.5))
    with pytest.raises(ValueError, match="disagree"):
        compat.fp8_gemm_nt(fa, fb, _z(4, 4), alpha=0.25, epilogue=ep.Alpha(0.5))
    ga, gb = (_z(1, 4, 128, dtype=FP8), torch.ones(1, 4, 1)), (_z(1, 4, 128, dtype=FP8), torch.ones(1, 4, 1))
    _reaches_device_check(
        compat.m_grouped_fp8_gemm_nt_masked,
        ga,
        gb,
        _z(1, 4, 4),
        torch.zeros(1, dtype=torch.int32),
        4,
        epilogue=ep.Alpha(0.5),
    )  # the block-scaled kernel scales its result, grouped too
    with pytest.raises(NotImplementedError, match="alpha"):  # the BF16 grouped GEMMs do not
        compat.m_grouped_bf16_gemm_nt_masked(
            _z(1, 4, 64), _z(1, 4, 64), _z(1, 4, 4), torch.zeros(1, dtype=torch.int32), 4, epilogue=ep.Alpha(0.5)
        )
    with pytest.raises(NotImplementedError, match="FP8 output"):
        compat.fp8_einsum("bhr,hdr->bhd", fa, fb, (_z(4, 4), torch.ones(4, 1)), use_128x4_sfd_layout=True)
    with pytest.raises(TypeError, match="compiled_dims"):
        compat.bf16_gemm_nn(a, b, d, compiled_dims=3)
    with pytest.raises(TypeError, match="disable_ue8m0_cast"):
        compat.fp8_gemm_nt(
            (_z(4, 128, dtype=FP8), torch.ones(4, 1)),
            (_z(4, 128, dtype=FP8), torch.ones(1, 1)),
            _z(4, 4),
            disable_ue8m0_cast="yes",
        )
    layout = torch.zeros(256, dtype=torch.int32)
    _reaches_device_check(
        compat.m_grouped_bf16_gemm_nt_contiguous,
        _z(256, 64),
        _z(2, 32, 64),
        _z(256, 32),
        layout,
        "nk",
        False,
        True,
        None,
        None,
    )
    _reaches_device_check(
        compat.bf16_m_grouped_gemm_nt_masked,
        _z(2, 8, 64),
        _z(2, 32, 64),
        _z(2, 8, 32),
        torch.zeros(2, dtype=torch.int32),
        8,
        "nk",
    )
    # DeepGEMM's k-grouped order: a, b, d, ks, grouped_layout, c
    ks = [4, 6]
    d32 = _z(2, 64, 32, dtype=torch.float32)
    _reaches_device_check(
        compat.k_grouped_bf16_gemm_tn_contiguous,
        _z(10, 64),
        _z(10, 32),
        d32,
        ks,
        torch.tensor(ks, dtype=torch.int32),
        d32,
    )
    with pytest.raises(TypeError, match="c is the 6th argument"):  # our native order (ks, c) passed to DeepGEMM's
        compat.k_grouped_bf16_gemm_tn_contiguous(_z(10, 64), _z(10, 32), d32, ks, d32)
    with pytest.raises(NotImplementedError, match="ks_cpu=None"):
        compat.k_grouped_bf16_gemm_tn_contiguous(_z(10, 64), _z(10, 32), d32, None, torch.tensor(ks))
    with pytest.raises(NotImplementedError, match="use_psum_layout"):
        compat.k_grouped_bf16_gemm_tn_contiguous(_z(10, 64), _z(10, 32), d32, ks, None, use_psum_layout=True)


def test_mqa_logits_forms_are_unambiguous():
    """_forms(max_seqlen_k, schedule_meta, clean_logits) as the signature binds both published forms."""
    base = ("q", "kv", "w", "ks", "ke")
    assert _forms(512, None, None) == (False, 512)  # 2.8.1 / sgl: an int is never clean_logits
    assert _forms(512, "meta", None) == (False, 512)  # with schedule_meta 7th
    assert _forms(False, 256, None) == (False, 256)  # DeepGEMM main: bool clean_logits, int max_seqlen_k
    assert _forms(True, None, None) == (True, 0)
    assert _forms(0, None, None) == (True, 0) and _forms(64, None, None) == (False, 64)  # defaults follow the form
    assert _forms(0, None, False) == (False, 0)  # clean_logits by keyword
    with pytest.raises(ValueError, match="clean_logits=False"):
        _forms(64, None, True)
    with pytest.raises(TypeError, match="6th argument"):
        _forms(1.5, None, None)
    with pytest.raises(TypeError, match="multiple values"):
        _forms(True, None, True)
    with pytest.raises(TypeError, match="q must be a"):  # parsed, then the real entry point checks
        compat.fp8_fp4_mqa_logits(*base, 512)
    with pytest.raises(TypeError, match="unexpected"):
        compat.fp8_mqa_logits(*base, bogus=1)


def test_psum_zero_padding_is_exact():
    d = torch.ones(512, 4)
    ends = torch.tensor([100, 100, 300, 384], dtype=torch.int32)  # groups: [0,100), empty, [128,300), [384,384)
    policy.zero_psum_padding(d, ends, compat.get_mk_alignment_for_contiguous_layout())
    rows = d[:, 0]
    assert rows[:100].eq(1).all() and rows[100:128].eq(0).all() and rows[128:300].eq(1).all()
    assert rows[300:].eq(0).all()


def test_cublaslt_names_compute_through_torch():
    a, b = torch.randn(6, 8), torch.randn(5, 8)
    d = torch.empty(6, 5)
    compat.cublaslt_gemm_nt(a, b, d)
    assert torch.allclose(d, a @ b.T)
    c = torch.randn(6, 5)
    compat.cublaslt_gemm_tn(a.T.contiguous(), b.T.contiguous(), d, c)
    assert torch.allclose(d, a @ b.T + c, atol=1e-5)


def test_layout_helpers_and_controls():
    x = torch.randn(4, 256)
    q, sf = compat.per_token_cast_to_fp8(x, use_ue8m0=True)
    assert q.dtype == FP8 and sf.shape == (4, 2)
    q, packed = compat.per_token_cast_to_fp8(x, use_ue8m0=True, gran_k=64, use_packed_ue8m0=True)
    assert packed.dtype == torch.int32 and packed.shape == (4, 1)
    with pytest.raises(ValueError, match="use_ue8m0"):
        compat.per_token_cast_to_fp8(x, use_ue8m0=False, use_packed_ue8m0=True)
    q4, sf4 = compat.per_token_cast_to_fp4(x, use_ue8m0=True, gran_k=32)
    assert q4.shape == (4, 128) and q4.dtype == torch.int8 and sf4.shape == (4, 8)
    assert compat.per_token_cast_to_fp4(x, use_ue8m0=True)[1].shape == (4, 2)  # DeepGEMM's default gran_k 128
    sfp = compat.transform_sf_into_required_layout(torch.ones(4, 2), 4, 256, (1, 128), is_sfa=True)
    assert sfp.dtype == torch.int32
    with pytest.raises(ValueError, match="powers of two"):  # UE8M0 words cannot hold 3.0
        compat.transform_sf_into_required_layout(torch.full((4, 2), 3.0), 4, 256, (1, 1, 128))
    # disable_ue8m0_cast=True keeps FP32 (DeepGEMM's SM90 form): float32, MN-major, the exact kernel's layout
    exact = compat.transform_sf_into_required_layout(
        torch.full((4, 2), 3.0), 4, 256, (1, 1, 128), disable_ue8m0_cast=True
    )
    assert exact.dtype == torch.float32 and exact.shape == (4, 2) and exact.stride() == (1, 4)
    assert bool((exact == 3.0).all())
    with pytest.raises(NotImplementedError, match="psum_layout"):
        compat.transform_sf_into_required_layout(torch.ones(4, 2), 4, 256, (1, 128), psum_layout=torch.zeros(1))
    assert compat.get_tma_aligned_size(5, 4) == 8 and compat.get_tma_aligned_size(17, 1) == 32
    assert compat.get_mk_alignment_for_contiguous_layout() == 128
    compat.set_mk_alignment_for_contiguous_layout(256)
    try:
        assert compat.get_theoretical_mk_alignment_for_contiguous_layout(expected_m=7) == 256
        assert compat.utils.get_k_alignment_for_contiguous_layout() == 256
    finally:
        compat.set_mk_alignment_for_contiguous_layout(128)
    with pytest.raises(ValueError, match="multiple of 128"):
        compat.set_mk_alignment_for_contiguous_layout(96)
    assert compat.calc_diff is dg.testing.calc_diff and compat.testing.calc_diff is dg.testing.calc_diff
    assert compat.pack_ue8m0_to_int is compat.utils.math.pack_ue8m0_to_int and compat.get_pdl is dg.get_pdl
    compat.use_deterministic_algorithms(True)
    assert compat.get_deterministic_algorithms() is True
    compat.set_tc_util(0.8)
    assert compat.get_tc_util() == 0.8
    compat.set_block_size_multiple_of(64), compat.set_ignore_compile_dims(True), compat.shutdown()


def _python(code: str, env: dict, *paths: str) -> subprocess.CompletedProcess:
    full = {**os.environ, **env, "PYTHONPATH": os.pathsep.join([str(ROOT / "host"), *paths])}
    for k, v in list(full.items()):
        if v is None:
            del full[k]
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full, timeout=120)


def test_precedence_with_a_serving_stacks_bundled_copy(tmp_path):
    """vLLM imports `deep_gemm` first and falls back to its bundled vllm.third_party.deep_gemm: under =1 that bundled
    copy counts as present (the hook declines, and vLLM is not imported to find out); under =force ours wins."""
    stack = tmp_path / "stack"
    bundled = stack / "vllm" / "third_party" / "deep_gemm"
    bundled.mkdir(parents=True)
    (stack / "vllm" / "__init__.py").write_text("raise RuntimeError('vllm must not be imported by the hook')\n")
    (stack / "vllm" / "third_party" / "__init__.py").write_text("")
    (bundled / "__init__.py").write_text("BUNDLED = True\n")
    probe = (
        "import sys, _deep_gemm_sm120_hook as h\n"
        "try:\n    import deep_gemm; print('ours' if deep_gemm.__name__.startswith('deep_gemm_sm120') else 'other')\n"
        "except ModuleNotFoundError:\n    print('none')\n"
        "print('vllm' in sys.modules)\nprint(h.explain())\n"
    )
    fallback = _python(probe, {"DG_SM120_AS_DEEP_GEMM": "1"}, str(stack))
    lines = fallback.stdout.splitlines()
    assert fallback.returncode == 0 and lines[:2] == ["none", "False"], fallback.stderr
    assert "vllm.third_party.deep_gemm at" in lines[2] and "=force" in lines[2]
    forced = _python(probe, {"DG_SM120_AS_DEEP_GEMM": "force"}, str(stack))
    assert forced.stdout.splitlines()[:2] == ["ours", "False"], forced.stderr
    assert "shadowing vllm.third_party.deep_gemm" in forced.stdout
    # and with no DeepGEMM anywhere, =1 is ours
    alone = _python(probe, {"DG_SM120_AS_DEEP_GEMM": "1"})
    assert alone.stdout.splitlines()[0] == "ours" and "no other DeepGEMM" in alone.stdout, alone.stderr


def test_import_hook_provides_deep_gemm_only_when_asked(tmp_path):
    code = (
        "import sys, deep_gemm, deep_gemm.testing, deep_gemm.utils; "
        "import deep_gemm_sm120.compat as c; assert deep_gemm is c and deep_gemm.testing is c.testing; "
        "assert deep_gemm.utils.per_token_cast_to_fp8 is c.per_token_cast_to_fp8; print('ours')"
    )
    # the .pth line, processed as site-packages would process it
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    (site_dir / "deep_gemm_sm120_compat.pth").write_text((ROOT / "host" / "deep_gemm_sm120_compat.pth").read_text())
    via_pth = f"import site; site.addsitedir({str(site_dir)!r}); " + code
    off = _python(via_pth, {"DG_SM120_AS_DEEP_GEMM": "0"})
    assert off.returncode != 0 and "No module named 'deep_gemm'" in off.stderr
    on = _python(via_pth, {"DG_SM120_AS_DEEP_GEMM": "1"})
    assert on.returncode == 0 and on.stdout.strip() == "ours", on.stderr
    # a real DeepGEMM on the path wins unless forced
    real = tmp_path / "real"
    (real / "deep_gemm").mkdir(parents=True)
    (real / "deep_gemm" / "__init__.py").write_text("REAL = True\n")
    which = (
        f"import site; site.addsitedir({str(site_dir)!r}); import deep_gemm; print(getattr(deep_gemm, 'REAL', False))"
    )
    assert _python(which, {"DG_SM120_AS_DEEP_GEMM": "1"}, str(real)).stdout.strip() == "True"
    assert _python(which, {"DG_SM120_AS_DEEP_GEMM": "force"}, str(real)).stdout.strip() == "False"
    # from code, without the environment
    prog = _python(
        "import deep_gemm_sm120.compat as c; c.install(); import deep_gemm; print(deep_gemm is c)",
        {"DG_SM120_AS_DEEP_GEMM": "0"},
    )
    assert prog.stdout.strip() == "True", prog.stderr


def test_deepgemm_environment_is_read_when_used_not_at_import(tmp_path, monkeypatch):
    """vLLM and SGLang set DG_JIT_CACHE_DIR / DG_JIT_NVCC_COMPILER after `import deep_gemm`: each cache lookup and
    toolchain search reads them then. Ours win when both are set; DeepGEMM's cache dir gets a subdirectory."""
    import deep_gemm_sm120.compat  # noqa: F401 - imported first, as a serving stack does
    from deep_gemm_sm120.core import envvars, toolchain
    from deep_gemm_sm120.jit import cache as jit_cache

    for name in (*envvars.CACHE_DIR, *envvars.NVCC, *envvars.DEBUG):
        monkeypatch.delenv(name, raising=False)
    assert jit_cache.KernelCache().root.endswith(os.path.join(".cache", "deep_gemm_sm120"))
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(tmp_path / "dg"))
    assert jit_cache.KernelCache().root == str(tmp_path / "dg" / "deep_gemm_sm120")
    monkeypatch.setenv("DG_SM120_JIT_CACHE_DIR", str(tmp_path / "ours"))
    assert jit_cache.KernelCache().root == str(tmp_path / "ours")
    # the compiler: DeepGEMM's variable is the first candidate, and a later change is seen
    monkeypatch.setenv("DG_JIT_NVCC_COMPILER", "/nonexistent/nvcc-a")
    assert toolchain.nvcc_candidates()[0] == "/nonexistent/nvcc-a"
    monkeypatch.setenv("DG_SM120_NVCC", "/nonexistent/nvcc-b")
    assert toolchain.nvcc_candidates()[0] == "/nonexistent/nvcc-b"
    # debug output: any of DeepGEMM's three switches
    assert not envvars.flag(envvars.DEBUG)
    monkeypatch.setenv("DG_JIT_PRINT_COMPILER_COMMAND", "1")
    assert envvars.flag(envvars.DEBUG)
    monkeypatch.setenv("DG_JIT_PRINT_COMPILER_COMMAND", "0")
    assert not envvars.flag(envvars.DEBUG)


def test_toolchain_search_follows_a_later_nvcc_variable(tmp_path, monkeypatch):
    from deep_gemm_sm120.core import envvars, toolchain

    for name in envvars.NVCC:
        monkeypatch.delenv(name, raising=False)
    try:
        first = toolchain.find_toolchain()
    except RuntimeError:
        pytest.skip("no nvcc on this machine")
    fake = tmp_path / "nvcc"
    fake.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 13.9, V13.9.1'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("DG_JIT_NVCC_COMPILER", str(fake))
    assert toolchain.find_toolchain().version == "13.9.1"  # not the memoized first answer
    monkeypatch.delenv("DG_JIT_NVCC_COMPILER")
    assert toolchain.find_toolchain() == first


def test_wheel_ships_the_hook(tmp_path):
    p = subprocess.run(
        [sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "deep_gemm_sm120_compat.pth").read_text().startswith("import os;")
    assert (tmp_path / "_deep_gemm_sm120_hook.py").is_file()
    assert (tmp_path / "deep_gemm_sm120" / "compat" / "__init__.py").is_file()


def test_the_hook_explains_the_variable_as_written():
    """`python -m _deep_gemm_sm120_hook` repeats the value the user set (=0 is not "unset", =yes is not "=1")."""
    import _deep_gemm_sm120_hook as hook

    assert hook.explain("0").startswith("DG_SM120_AS_DEEP_GEMM=0: `import deep_gemm` is not ours")
    assert hook.explain("yes").startswith("DG_SM120_AS_DEEP_GEMM=yes: `import deep_gemm`")
    assert hook.explain("Force").startswith("DG_SM120_AS_DEEP_GEMM=Force: `import deep_gemm` gives deep_gemm_sm120")
    assert hook.explain("").startswith("DG_SM120_AS_DEEP_GEMM is unset:")
