"""Run a serving stack's released DeepGEMM wrapper against deep_gemm_sm120 (`python ecosystem_harness.py STACK
FOLDER`, a fresh process per stack): their wrapper modules are loaded from FOLDER (read from the wheel), every
other module of theirs is a stub, and `import deep_gemm` is ours (compat.install(force=True), what DG_SM120_AS_DEEP_GEMM=force does). Prints one JSON
object: what their detection says, which DeepGEMM names they resolve and whether each exists, and whether each
call they make binds to our signature. tests/test_ecosystem.py asserts on it."""

from __future__ import annotations

import ast
import importlib.abc
import importlib.util
import inspect
import json
import os
import sys
import types
from pathlib import Path

from deep_gemm_sm120.core.arith import ceil_div, round_up


class Stub:
    """Anything a stubbed module is asked for: callable, attribute-able, usable as a decorator or context."""

    def __init__(self, name: str = "stub"):
        self._name = name

    def __getattr__(self, item):
        if item.startswith("__"):
            raise AttributeError(item)
        return Stub(f"{self._name}.{item}")

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]  # a decorator
        return Stub(f"{self._name}()")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def __iter__(self):
        return iter(())

    def __mro_entries__(self, bases):
        return (object,)


class Env:
    """sglang.srt.environ.envs: each variable's .get() gives the value below, else False."""

    VALUES = {"SGLANG_ENABLE_JIT_DEEPGEMM": True, "SGLANG_IS_FIRST_RANK_ON_NODE": True}

    def __init__(self, cache_dir: str):
        self.values = {**self.VALUES, "SGLANG_DG_CACHE_DIR": cache_dir}

    def __getattr__(self, item):
        return types.SimpleNamespace(get=lambda: self.values.get(item, False))


class Platform:
    """vLLM's current_platform on an SM120 GPU."""

    simple_compile_backend = "eager"
    is_sm100 = False

    def is_device_capability_family(self, family: int) -> bool:
        return family == 120

    def support_deep_gemm(self) -> bool:
        return True

    def is_arch_support_pdl(self) -> bool:
        return True

    def is_cuda(self) -> bool:
        return True

    def fp8_dtype(self):
        import torch

        return torch.float8_e4m3fn

    def __getattr__(self, item):
        return Stub(f"current_platform.{item}")


def overrides(cache_dir: str) -> dict[str, dict]:
    return {
        "vllm.envs": {
            "VLLM_USE_DEEP_GEMM": True,
            # VLLM_USE_DEEP_GEMM_E8M0=0: vLLM's FLOAT32 scales (the fp32 mode of this harness)
            "VLLM_USE_DEEP_GEMM_E8M0": os.environ.get("DG_SM120_HARNESS_E8M0", "1") != "0",
            "VLLM_CACHE_ROOT": cache_dir,
        },
        "vllm.platforms": {"current_platform": Platform()},
        "vllm.utils.import_utils": {"has_deep_gemm": lambda: importlib.util.find_spec("deep_gemm") is not None},
        "vllm.utils.math_utils": {"cdiv": ceil_div},
        "vllm.model_executor.layers.quantization.utils.quant_utils": {"get_fp8_min_max": lambda: (-448.0, 448.0)},
        "sglang.srt.environ": {"envs": Env(cache_dir)},
        "sglang.srt.runtime_context": {"get_platform": lambda: Platform()},
        "sglang.srt.utils": {
            "get_device_sm": lambda: 120,
            "is_cuda": lambda: True,
            "is_musa": lambda: False,
            "ceil_div": ceil_div,
            "ceil_align": round_up,
        },
    }


class StackFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Their modules: the real file when FOLDER has it, else a stub module (its overrides set)."""

    def __init__(self, folder: Path, tops: tuple[str, ...], cache_dir: str):
        self.folder, self.tops, self.over = folder, tops, overrides(cache_dir)

    def find_spec(self, fullname, path, target=None):
        top = fullname.split(".")[0]
        if top not in self.tops:
            return None
        rel = Path(*fullname.split("."))
        for candidate, package in (
            (self.folder / rel / "__init__.py", True),
            (self.folder / rel.with_suffix(".py"), False),
        ):
            if candidate.is_file():
                return importlib.util.spec_from_file_location(
                    fullname, candidate, submodule_search_locations=[str(candidate.parent)] if package else None
                )
        return importlib.util.spec_from_loader(fullname, self, is_package=True)

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []

        def missing(item, name=spec.name):
            if item.startswith("__"):
                raise AttributeError(item)
            return Stub(f"{name}.{item}")

        module.__getattr__ = missing
        return module

    def exec_module(self, module):
        module.__dict__.update(self.over.get(module.__name__, {}))


class MissingThirdParty(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Third-party modules their wrappers import that this environment lacks (tqdm): stubs."""

    NAMES = ("tqdm",)

    def find_spec(self, fullname, path, target=None):
        if fullname.split(".")[0] in self.NAMES:
            for f in sys.meta_path:
                if f is not self and not isinstance(f, StackFinder) and getattr(f, "find_spec", None):
                    if f.find_spec(fullname, path) is not None:
                        return None
            return importlib.util.spec_from_loader(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.tqdm = lambda it=None, *a, **k: it
        return module

    def exec_module(self, module):
        pass


# ---------------------------------------------------------------- reading their source


def resolved_names(tree: ast.AST, receivers: set[str]) -> dict[str, str]:
    """{variable: DeepGEMM name} for `v = getattr(R, "name", ...)` (possibly inside `or`), plus every name read as
    R.name, getattr(R, "name"), hasattr(R, "name") or `from deep_gemm[...] import name` (variable: the name)."""
    out: dict[str, str] = {}

    def getattr_name(node):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr")
            and len(node.args) >= 2
            and isinstance(node.args[0], ast.Name)
            and node.args[0].id in receivers
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            return node.args[1].value
        return None

    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            values = node.value.values if isinstance(node.value, ast.BoolOp) else [node.value]
            for v in values:
                name = getattr_name(v)
                if name:
                    out.setdefault(node.targets[0].id, name)
        name = getattr_name(node)
        if name:
            out.setdefault(f"<{name}>", name)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in receivers:
            out.setdefault(f"<{node.attr}>", node.attr)
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "deep_gemm":
            for a in node.names:
                out.setdefault(a.asname or a.name, f"{node.module}:{a.name}")
    return out


def calls(tree: ast.AST, receivers: set[str], variables: dict[str, str]):
    """(DeepGEMM name, line, positional count or None when *args, keywords, has **kwargs) of each call."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f, name = node.func, None
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in receivers:
            name = f.attr
        elif isinstance(f, ast.Name) and f.id in variables and ":" not in variables[f.id]:
            name = variables[f.id]
        if name is None:
            continue
        starred = any(isinstance(a, ast.Starred) for a in node.args)
        yield (
            name,
            node.lineno,
            None if starred else len(node.args),
            [k.arg for k in node.keywords if k.arg is not None],
            any(k.arg is None for k in node.keywords),
        )


def resolve(dg, qualified: str):
    """Our object for a DeepGEMM name ('fp8_gemm_nt' or 'deep_gemm.utils.layout:get_tma_aligned_size')."""
    if ":" in qualified:
        module, attr = qualified.split(":")
        return getattr(importlib.import_module(module), attr, None)
    return getattr(dg, qualified, None)


def binds(fn, positional: int | None, keywords: list[str], more: bool) -> str:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return "ok"
    args = [None] * (positional or 0)
    kwargs = {k: None for k in keywords}
    try:
        (sig.bind_partial if positional is None or more else sig.bind)(*args, **kwargs)
    except TypeError as e:
        return str(e)
    return "ok"


# ---------------------------------------------------------------- the two stacks


def fp32_calls(mod, device: str = "cpu") -> dict:
    """vLLM's own FP8 wrappers (dense, M-grouped contiguous and masked) called as its FP8 linear and fused-MoE
    layers call them with FLOAT32 scales (1x128 activations, 128x128 weights, amax/448: not powers of two): which
    block-scaled kernel kind each call is planned for (our _kind, observed) and where it stops. On the CPU the
    device check stops every call; with device="cuda" the calls run, on random FP8 operands, and each output's
    calc_diff against float64 of the dequantized operands is reported (masked: the rows each group holds)."""
    import torch

    from deep_gemm_sm120.families.fp8_fp4_gemm_1d1d import api
    from deep_gemm_sm120.testing import calc_diff

    seen: list[str] = []
    real = api._kind

    def spy(*args, **kwargs):
        kind = real(*args, **kwargs)
        seen.append(kind)
        return kind

    api._kind = spy
    fp8 = torch.float8_e4m3fn
    gen = torch.Generator(device=device).manual_seed(40)
    g, m, n, k = 2, 128, 256, 512
    scales = lambda *shape: torch.rand(*shape, generator=gen, device=device) * 0.01 + 1e-3
    values = lambda *shape: (torch.randn(*shape, generator=gen, device=device) * 100).clamp(-448, 448).to(fp8)
    a, b = values(m, k), values(n, k)
    ag, bg = values(g, m, k), values(g, n, k)
    sa, sb, sag, sbg = (
        scales(m, k // 128),
        scales(n // 128, k // 128),
        scales(g, m, k // 128),
        scales(g, n // 128, k // 128),
    )
    ac, sac = values(2 * m, k), scales(2 * m, k // 128)  # contiguous: one 128-row block per group (vLLM aligns)
    m_indices = (torch.arange(2 * m, device=device) >= m).to(torch.int32)
    masked_m = torch.tensor([m, 77], dtype=torch.int32, device=device)
    out_dense = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device=device)
    out_cont = torch.full((2 * m, n), float("nan"), dtype=torch.bfloat16, device=device)
    out_masked = torch.full((g, m, n), float("nan"), dtype=torch.bfloat16, device=device)

    def deq(q, sf, block_rows):  # float64 of FP8 values times their 1x128 (block_rows=1) or 128x128 scales
        s = sf.double().repeat_interleave(128, -1)
        if block_rows > 1:
            s = s.repeat_interleave(block_rows, -2)
        return q.double() * s[..., : q.shape[-2], : q.shape[-1]]

    def dense_ref():
        return out_dense, deq(a, sa, 1) @ deq(b, sb, 128).T

    def cont_ref():
        ref = torch.cat(
            [deq(ac[i * m : (i + 1) * m], sac[i * m : (i + 1) * m], 1) @ deq(bg[i], sbg[i], 128).T for i in range(g)]
        )
        return out_cont, ref

    def masked_ref():
        rows = [int(x) for x in masked_m.tolist()]
        got = torch.cat([out_masked[i, : rows[i]] for i in range(g)])
        ref = torch.cat([(deq(ag[i], sag[i], 1) @ deq(bg[i], sbg[i], 128).T)[: rows[i]] for i in range(g)])
        return got, ref

    cases = {
        "fp8_gemm_nt": (lambda: mod.fp8_gemm_nt((a, sa), (b, sb), out_dense), dense_ref),
        "m_grouped_fp8_gemm_nt_contiguous": (
            lambda: mod.m_grouped_fp8_gemm_nt_contiguous((ac, sac), (bg, sbg), out_cont, m_indices),
            cont_ref,
        ),
        "fp8_m_grouped_gemm_nt_masked": (
            lambda: mod.fp8_m_grouped_gemm_nt_masked((ag, sag), (bg, sbg), out_masked, masked_m, m),
            masked_ref,
        ),
    }
    out = {}
    for name, (call, reference) in cases.items():
        seen.clear()
        row: dict = {}
        try:
            call()
            error = None
            if device != "cpu":
                got, ref = reference()
                row["calc_diff"] = float(calc_diff(got, ref))
                row["nan"] = bool(torch.isnan(got).any())
        except Exception as e:  # reported: the test says which outcome is expected
            error = f"{type(e).__name__}: {e}"
        out[name] = {"kinds": list(seen), "error": error, **row}
    api._kind = real
    return out


def run(stack: str, folder: Path, cache_dir: str) -> dict:
    import torch

    # their @torch.compile'd torch helpers are not what is checked here; compiling them would load dynamo
    torch.compile = lambda fn=None, **kw: fn if fn is not None else (lambda f: f)
    sys.meta_path.insert(0, StackFinder(folder, ("vllm", "sglang"), cache_dir))
    sys.meta_path.append(MissingThirdParty())
    import deep_gemm_sm120.compat

    deep_gemm_sm120.compat.install(force=True)  # as DG_SM120_AS_DEEP_GEMM=force does at start-up
    import deep_gemm

    report: dict = {"deep_gemm": deep_gemm.__name__, "version": getattr(deep_gemm, "__version__", None)}
    if stack == "vllm":
        wrappers = ["vllm.utils.deep_gemm"]
        mod = importlib.import_module("vllm.utils.deep_gemm")
        report["detection"] = {
            "is_deep_gemm_supported": mod.is_deep_gemm_supported(),
            "is_deep_gemm_e8m0_used": mod.is_deep_gemm_e8m0_used(),
        }
        mod._lazy_init()
        report["imported"] = getattr(mod._import_deep_gemm(), "__name__", None)
        report["unresolved_impls"] = sorted(
            k for k, v in vars(mod).items() if k.startswith("_") and k.endswith("_impl") and v is None
        )
        receivers = {"_dg", "deep_gemm", "dg"}
        if os.environ.get("DG_SM120_HARNESS_E8M0") == "0":
            report["fp32_calls"] = fp32_calls(mod, os.environ.get("DG_SM120_HARNESS_DEVICE", "cpu"))
    else:
        wrappers = [
            "sglang.srt.layers.deep_gemm_wrapper.configurer",
            "sglang.srt.layers.deep_gemm_wrapper.compile_utils",
            "sglang.srt.layers.deep_gemm_wrapper.entrypoint",
        ]
        importlib.import_module("sglang.srt.layers.deep_gemm_wrapper")  # imports entrypoint, compile_utils, configurer
        conf = importlib.import_module("sglang.srt.layers.deep_gemm_wrapper.configurer")
        report["detection"] = {
            "ENABLE_JIT_DEEPGEMM": conf.ENABLE_JIT_DEEPGEMM,
            "sm120_apis_available": conf._sm120_deep_gemm_apis_available(),
            "DEEPGEMM_SCALE_UE8M0": conf.DEEPGEMM_SCALE_UE8M0,
        }
        report["imported"] = deep_gemm.__name__
        from deep_gemm_sm120.core import envvars

        report["jit_cache_dir"] = str(envvars.cache_dir())
        report["compile_mode_api"] = all(hasattr(deep_gemm, n) for n in ("get_compile_mode", "set_compile_mode"))
        receivers = {"deep_gemm"}
    names, bad_calls, checked = {}, [], 0
    for w in wrappers:
        path = Path(importlib.import_module(w).__file__)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        variables = resolved_names(tree, receivers)
        for qualified in variables.values():
            names[qualified] = resolve(deep_gemm, qualified) is not None
        for name, line, npos, kws, more in calls(tree, receivers, variables):
            fn, checked = resolve(deep_gemm, name), checked + 1
            verdict = "missing" if fn is None else binds(fn, npos, kws, more)
            if verdict != "ok":
                bad_calls.append(f"{path.name}:{line} {name}: {verdict}")
    report["names"] = names
    report["bad_calls"], report["calls_checked"] = bad_calls, checked
    return report


if __name__ == "__main__":
    stack, folder, cache_dir = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    print(json.dumps(run(stack, folder, cache_dir), default=str))
