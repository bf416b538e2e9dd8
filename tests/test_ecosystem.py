"""The released serving stacks against our `deep_gemm`, read from their wheels at test time (vLLM 0.33.0, SGLang
0.5.23; tests/ecosystem_wheels.py fetches a few members from the package index pip uses and caches them; nothing
of theirs is in this repository). Their DeepGEMM wrapper modules run unmodified in a fresh process with their other
imports stubbed (tests/ecosystem_harness.py). Skipped, with the reason, only when the index cannot be reached.

These are the only tests that leave 127.0.0.1: issue 27 asks for the released wheels, and they come from the
index the README's test command installs from (docs/deep_gemm_compat.md, "Ecosystem test")."""

from __future__ import annotations

import ast
import importlib.util
import inspect
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import ecosystem_harness as harness
import ecosystem_wheels as wheels
import pytest
import torch
from gpu_helpers import requires_cuda

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module", params=sorted(wheels.PINS))
def stack(request):
    folder, why = wheels.fetch(request.param)
    if folder is None:
        pytest.skip(f"the package index is not reachable for {request.param}=={wheels.PINS[request.param]}: {why}")
    return request.param, folder


@pytest.fixture(scope="module")
def vllm_sources():
    folder, why = wheels.fetch("vllm")
    if folder is None:
        pytest.skip(f"the package index is not reachable for vllm=={wheels.PINS['vllm']}: {why}")
    return folder / "vllm" / "third_party" / "deep_gemm"


def _run(stack_name: str, folder: Path, tmp_path: Path, our_cache_dir: str | None = None, **extra_env: str) -> dict:
    """The harness in a child, with the tester's own DG_SM120_JIT_CACHE_DIR out of the way (it would win over
    the DG_JIT_CACHE_DIR the stack sets, as documented) unless `our_cache_dir` sets it; extra_env on top."""
    env = {k: v for k, v in os.environ.items() if k != "DG_SM120_JIT_CACHE_DIR"}
    # the package this process imported, installed or not (a GPU box that builds in place has no install)
    import deep_gemm_sm120

    package_root = os.path.dirname(os.path.dirname(os.path.abspath(deep_gemm_sm120.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
    if our_cache_dir is not None:
        env["DG_SM120_JIT_CACHE_DIR"] = our_cache_dir
    env.update(extra_env)
    p = subprocess.run(
        [sys.executable, str(HERE / "ecosystem_harness.py"), stack_name, str(folder), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=env,
    )
    assert p.returncode == 0, p.stderr[-4000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_their_wrapper_detects_resolves_and_binds(stack, tmp_path):
    name, folder = stack
    report = _run(name, folder, tmp_path)
    assert report["imported"] == report["deep_gemm"] == "deep_gemm_sm120.compat"
    assert report["version"] == "2.8.1"
    assert all(report["detection"].values()), report["detection"]
    missing = sorted(n for n, ok in report["names"].items() if not ok)
    assert missing == [], f"{name} resolves names we lack: {missing}"
    assert report["bad_calls"] == [], report["bad_calls"]
    assert len(report["names"]) >= 15 and report["calls_checked"] >= 8, report  # the scan saw their wrapper
    if name == "vllm":
        assert report["unresolved_impls"] == []
    else:  # SGLang sets DG_JIT_CACHE_DIR when its wrapper is imported, after our compat module was
        assert report["jit_cache_dir"] == str(tmp_path / "deep_gemm_sm120")
        assert report["compile_mode_api"]
        ours = str(tmp_path / "ours")  # our own variable, when a user exports it, wins over the stack's
        assert _run(name, folder, tmp_path, our_cache_dir=ours)["jit_cache_dir"] == ours


def test_vllm_float32_scales_reach_the_exact_kernel(tmp_path):
    """VLLM_USE_DEEP_GEMM_E8M0=0 (vLLM's FLOAT32 scales, issue 40): its own FP8 linear and fused-MoE wrappers
    call ours with disable_ue8m0_cast=True, and every call is planned for the exact FP32-scale kernel before the
    device check stops it (no GPU here; tests/test_fp32_scales_gpu.py checks that kernel's numbers)."""
    folder, why = wheels.fetch("vllm")
    if folder is None:
        pytest.skip(f"the package index is not reachable for vllm=={wheels.PINS['vllm']}: {why}")
    report = _run("vllm", folder, tmp_path, DG_SM120_HARNESS_E8M0="0")
    assert report["detection"]["is_deep_gemm_e8m0_used"] is False
    calls = report["fp32_calls"]
    assert set(calls) == {"fp8_gemm_nt", "m_grouped_fp8_gemm_nt_contiguous", "fp8_m_grouped_gemm_nt_masked"}
    for name, seen in calls.items():
        assert seen["kinds"] == ["fp8_fp32"], (name, seen)
        assert seen["error"] is not None and "cuda" in seen["error"].lower(), (name, seen)  # stopped at the device


@pytest.mark.cuda
@pytest.mark.emulation
@requires_cuda
def test_vllm_float32_scales_compute_exactly_on_the_gpu(tmp_path):
    """The GPU half of the test above (issue 40): vLLM 0.33.0's FP8 linear and fused-MoE wrappers, unmodified,
    with FLOAT32 scales on CUDA tensors: every call binds, takes the exact FP32-scale kernel and matches float64
    of the dequantized operands within output rounding (the FP8 tests' bound; masked: the rows each group holds).
    Off SM120 it runs the sm_90 emulation of the unit-scale MMA (DG_SM120_EMULATE=1)."""
    folder, why = wheels.fetch("vllm")
    if folder is None:
        pytest.skip(f"the package index is not reachable for vllm=={wheels.PINS['vllm']}: {why}")
    report = _run(
        "vllm",
        folder,
        tmp_path,
        os.environ.get("DG_SM120_JIT_CACHE_DIR", str(tmp_path / "jit")),
        DG_SM120_HARNESS_E8M0="0",
        DG_SM120_HARNESS_DEVICE="cuda",
        DG_SM120_EMULATE=os.environ.get("DG_SM120_EMULATE", "1"),
    )
    calls = report["fp32_calls"]
    assert set(calls) == {"fp8_gemm_nt", "m_grouped_fp8_gemm_nt_contiguous", "fp8_m_grouped_gemm_nt_masked"}
    for name, seen in calls.items():
        assert seen["error"] is None and seen["kinds"] == ["fp8_fp32"], (name, seen)
        assert not seen["nan"] and seen["calc_diff"] <= 1e-3, (name, seen)


def test_deepgemm_281_positional_orders(vllm_sources):
    """Every function DeepGEMM 2.8.1's _C.py defines that we bind takes the same positional parameters in the same
    order (extra parameters of ours are keyword-only)."""
    import deep_gemm_sm120.compat as compat

    tree = ast.parse((vllm_sources / "_C.py").read_text(encoding="utf-8"))
    compared = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef) or node.name.startswith("_"):
            continue
        ours = getattr(compat, node.name, None)
        if not callable(ours) or isinstance(ours, type):
            continue
        params = list(inspect.signature(ours).parameters.values())
        if any(p.kind == p.VAR_POSITIONAL for p in params):
            continue  # a two-form entry point (mqa_logits): bound by test_compat_cpu
        theirs = [a.arg for a in node.args.args]
        assert [p.name for p in params if p.kind == p.POSITIONAL_OR_KEYWORD] == theirs, node.name
        # and the same string defaults (compiled_dims='nk' / 'mn', ...): what introspecting tools show
        defaults = dict(zip(theirs[len(theirs) - len(node.args.defaults) :], node.args.defaults))
        ours_by_name = {p.name: p for p in params}
        for arg, default in defaults.items():
            if isinstance(default, ast.Constant) and isinstance(default.value, str):
                assert ours_by_name[arg].default == default.value, f"{node.name}({arg}=...)"
        compared.append(node.name)
    assert len(compared) >= 25, compared


def _load_their_utils(folder: Path):
    """Their utils/math.py and utils/nvfp4.py as one throwaway package (plain torch: no extension needed)."""
    pkg = types.ModuleType("dg281_utils")
    pkg.__path__ = [str(folder / "utils")]
    sys.modules["dg281_utils"] = pkg
    mods = {}
    for name in ("math", "nvfp4"):
        spec = importlib.util.spec_from_file_location(f"dg281_utils.{name}", folder / "utils" / f"{name}.py")
        mods[name] = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mods[name]
        spec.loader.exec_module(mods[name])
    return mods["math"], mods["nvfp4"]


def _same(a, b, what: str) -> None:
    a, b = (a if isinstance(a, tuple) else (a,)), (b if isinstance(b, tuple) else (b,))
    assert len(a) == len(b), what
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and x.shape == y.shape, (what, x.dtype, y.dtype, x.shape, y.shape)
        assert torch.equal(x.contiguous().view(torch.uint8), y.contiguous().view(torch.uint8)), what


def test_utils_give_deepgemm_281s_bytes(vllm_sources):
    """Same input, same bytes: dtypes, padding, sign of zero and rounding of every shared utility, with inputs that
    hit the e2m1 ties, zeros, negative zeros and tiny blocks."""
    from deep_gemm_sm120.utils import math as ours
    from deep_gemm_sm120.utils import nvfp4 as ours_nvfp4

    theirs, theirs_nvfp4 = _load_their_utils(vllm_sources)
    g = torch.Generator().manual_seed(27)
    x = torch.randn(128, 256, generator=g) * 3
    x[0, :32] = torch.tensor(
        [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.25, -0.75, -5.0, 0.0, -0.0, 1e-9, -1e-9, 6.0, 7.0] * 2
    )
    x[1] = 0.0
    x[2, :128] = -0.0
    xb = x.to(torch.bfloat16)
    for ue8m0 in (True, False):
        _same(ours.per_token_cast_to_fp8(x, ue8m0), theirs.per_token_cast_to_fp8(x, ue8m0), f"per_token {ue8m0}")
        _same(
            ours.per_token_cast_to_fp8(xb, ue8m0, gran_k=64),
            theirs.per_token_cast_to_fp8(xb, ue8m0, gran_k=64),
            f"per_token bf16 {ue8m0}",
        )
        _same(ours.per_channel_cast_to_fp8(x, ue8m0), theirs.per_channel_cast_to_fp8(x, ue8m0), f"per_channel {ue8m0}")
        _same(ours.per_block_cast_to_fp8(x, ue8m0), theirs.per_block_cast_to_fp8(x, ue8m0), f"per_block {ue8m0}")
        _same(
            ours.per_custom_dims_cast_to_fp8(x, (0,), ue8m0),
            theirs.per_custom_dims_cast_to_fp8(x, (0,), ue8m0),
            f"per_custom_dims {ue8m0}",
        )
    _same(
        ours.per_token_cast_to_fp8(x, True, use_packed_ue8m0=True),
        theirs.per_token_cast_to_fp8(x, True, use_packed_ue8m0=True),
        "per_token packed",
    )
    for gran, packed in ((32, False), (32, True), (128, False)):
        _same(
            ours.per_token_cast_to_fp4(x, True, gran, packed),
            theirs.per_token_cast_to_fp4(x, True, gran, packed),
            f"fp4 {gran} {packed}",
        )
    small = torch.randn(4, 64, generator=g)  # two 1x32 scales per row: the packed row pads with 1.0
    _same(
        ours.per_token_cast_to_fp4(small, True, 32, True),
        theirs.per_token_cast_to_fp4(small, True, 32, True),
        "fp4 padded scales",
    )
    for gs in (None, 0.37):
        for packed in (False, True):
            _same(
                ours.per_token_cast_to_nvfp4(x, 16, packed, gs),
                theirs.per_token_cast_to_nvfp4(x, 16, packed, gs),
                f"nvfp4 {gs} {packed}",
            )
    _same(ours_nvfp4.per_token_cast_to_nvfp4(x, 0.5), theirs_nvfp4.per_token_cast_to_nvfp4(x, 0.5), "nvfp4 mega")
    q, sf = theirs_nvfp4.per_token_cast_to_nvfp4(x, 0.5)
    _same(ours_nvfp4.cast_back_from_nvfp4(q, sf, 0.5), theirs_nvfp4.cast_back_from_nvfp4(q, sf, 0.5), "nvfp4 back")
    scales = torch.tensor([0.0, 1e-30, 0.3, 1.0, 2.0**100, 3e38])
    _same(ours.ceil_to_ue8m0(scales), theirs.ceil_to_ue8m0(scales), "ceil_to_ue8m0 (zero and extremes)")
    pow2 = 2.0 ** torch.randint(-20, 20, (8, 12), generator=g).float()
    _same(ours.pack_ue8m0_to_int(pow2), theirs.pack_ue8m0_to_int(pow2), "pack_ue8m0_to_int")
    packed_int = theirs.pack_ue8m0_to_int(pow2)
    _same(ours.unpack_ue8m0_from_int(packed_int), theirs.unpack_ue8m0_from_int(packed_int), "unpack_ue8m0_from_int")
    q4, s4 = theirs.per_token_cast_to_fp4(x, True, 32)
    _same(ours.transpose_packed_fp4(q4), theirs.transpose_packed_fp4(q4), "transpose_packed_fp4")
    _same(ours.cast_back_from_fp4(q4, s4, 32), theirs.cast_back_from_fp4(q4, s4, 32), "cast_back_from_fp4")
    q8, s8 = theirs.per_token_cast_to_fp8(x, True)
    _same(ours.cast_back_from_fp8(q8, s8), theirs.cast_back_from_fp8(q8, s8), "cast_back_from_fp8")
    _, e4 = theirs.per_token_cast_to_nvfp4(x, 16, True)
    _same(ours.unpack_e4m3_sf_from_int(e4), theirs.unpack_e4m3_sf_from_int(e4), "unpack_e4m3_sf_from_int")


def test_the_harness_finds_what_does_not_bind():
    """The scan is not vacuous: a call that does not bind, and a name we lack, are reported."""
    src = (
        "import deep_gemm\n_impl = getattr(deep_gemm, 'fp8_fp4_paged_mqa_logits', None)\n"
        "_gone = getattr(deep_gemm, 'no_such_name', None)\n"
        "_impl(q, kv, w, lens, table, meta, 4096, True, torch.float32, None)\n"
        "deep_gemm.bf16_gemm_nt(a, b, d, c, 'nk', None, None, 'extra')\n"
        "deep_gemm.fp8_einsum('bhr,hdr->bhd', a, b, d, use_128x4_sfd_layout=False)\n"
    )
    import deep_gemm_sm120.compat as compat

    tree = ast.parse(src)
    variables = harness.resolved_names(tree, {"deep_gemm"})
    assert variables["_impl"] == "fp8_fp4_paged_mqa_logits" and variables["_gone"] == "no_such_name"
    assert harness.resolve(compat, "no_such_name") is None
    verdicts = {
        name: harness.binds(harness.resolve(compat, name), n, kw, more)
        for name, _, n, kw, more in harness.calls(tree, {"deep_gemm"}, variables)
    }
    assert "too many positional" in verdicts["fp8_fp4_paged_mqa_logits"]  # clean_logits is keyword-only now
    assert "too many positional" in verdicts["bf16_gemm_nt"]
    assert verdicts["fp8_einsum"] == "ok"
