"""DeepGEMM's shared keywords, written once and used by every family's API: what each means on SM120 kernels
(honoured, accepted without effect, or refused by name), and DeepGEMM's argument forms (scale pairs, recipes)
turned into the ones the kernels take. The compat table states them (core/names.py's keyword texts)."""

from __future__ import annotations

import torch

from .core.arith import ceil_div
from .core.rules import dtype_name


def epilogue(name: str, value, alpha_=None, scales: bool = False):
    """DeepGEMM's `epilogue=` -> the alpha the GEMM applies (None: none given). None and Identity() change nothing;
    Alpha(x) is `alpha=x` (given both, they must agree); a GEMM that does not scale its result (scales=False)
    takes only alpha 1. The FP8-output and stochastic-rounding epilogues are refused by name."""
    from .epilogue import Alpha, Epilogue, Identity

    if value is not None and not isinstance(value, Epilogue):
        raise TypeError(f"{name}(epilogue=...) takes a deep_gemm.epilogue object or None, got {type(value).__name__}")
    if isinstance(value, Alpha):
        if alpha_ is not None and alpha_ != value.alpha:
            raise ValueError(f"{name}: alpha={alpha_!r} and epilogue=Alpha({value.alpha!r}) disagree")
        alpha_ = value.alpha
    elif value is not None and not isinstance(value, Identity):
        raise NotImplementedError(
            f"{name}(epilogue={value.kind}) is not supported: deep_gemm_sm120 kernels have "
            f"no fused output quantization or stochastic rounding (Identity and Alpha are)"
        )
    if not scales and alpha_ is not None and alpha_ != 1:
        raise NotImplementedError(
            f"{name}(alpha={alpha_!r}): this kernel computes its result without a scale; only alpha None or 1"
        )
    return alpha_


def gemm(name: str, compiled_dims_, epilogue_, alpha_=None, scales: bool = False, disable_ue8m0_cast: bool = False):
    """A GEMM's shared keywords in one call: `compiled_dims` (a str, no effect), `disable_ue8m0_cast` (a bool,
    see ue8m0_cast), `epilogue` and `alpha` (see epilogue). Returns the alpha to apply (None: none given)."""
    if (
        epilogue_ is None
        and type(compiled_dims_) is str
        and type(disable_ue8m0_cast) is bool  # vLLM passes True with FP32 scales: common too
        and (alpha_ is None or scales)
    ):
        return alpha_  # the common call: nothing to resolve
    compiled_dims(name, compiled_dims_)
    ue8m0_cast(name, disable_ue8m0_cast)
    return epilogue(name, epilogue_, alpha_, scales)


def compiled_dims(name: str, value) -> None:
    """A JIT hint (which dimensions DeepGEMM compiles as constants): accepted, never changes a result here."""
    if not isinstance(value, str):
        raise TypeError(f"{name}(compiled_dims=...) must be a str, got {type(value).__name__}")


def flag(name: str, keyword: str, value) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name}({keyword}=...) must be a bool, got {type(value).__name__}")
    return value


def ue8m0_cast(name: str, disable_ue8m0_cast) -> None:
    """A bool. FP32 scales are never rounded or reinterpreted either way: True sends e4m3 GEMMs with float32
    scales on both sides to the exact FP32-scale kernel without reading the values; False checks them and takes
    the UE8M0 kernel for powers of two, the exact one otherwise (docs/fp32_scales.md)."""
    flag(name, "disable_ue8m0_cast", disable_ue8m0_cast)


def alpha(value):
    return 1.0 if value is None else value


def pair(name: str, x, fp4_names: tuple[str, ...]):
    """(data, scale factors), or a bare tensor meaning unit scales (DeepGEMM passes a 1.0 scale then)."""
    if isinstance(x, (tuple, list)):
        if len(x) != 2:
            raise TypeError(f"{name} must be a (tensor, scale factors) pair or a tensor, got a {len(x)}-sequence")
        return tuple(x)
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a (tensor, scale factors) pair or a tensor, got {type(x).__name__}")
    if x.dim() == 0:  # no K dimension to size the scales by (x.shape[-1] would be an IndexError)
        raise ValueError(f"{name} must be [..., K], got a 0-d tensor")
    fp4 = dtype_name(x.dtype) in fp4_names
    k = x.shape[-1] * (2 if fp4 else 1)
    gran = 32 if fp4 else 128
    return x, torch.ones(*x.shape[:-1], ceil_div(k, gran), dtype=torch.float32, device=x.device)  # 2**0: exact


def recipe(name: str, recipe_, recipe_a, recipe_b, a, b, fp4_names: tuple[str, ...]):
    """DeepGEMM's recipe forms -> ours: (gran_m, gran_n, gran_k), or per operand (gran_mn, gran_k) pairs."""
    if recipe_a is None and recipe_b is None:
        return recipe_
    if recipe_ is not None:
        raise ValueError(f"{name}: pass recipe or recipe_a/recipe_b, not both")
    if recipe_a is None or recipe_b is None or len(recipe_a) != 2 or len(recipe_b) != 2:
        raise ValueError(
            f"{name}: recipe_a and recipe_b are (gran_mn, gran_k) pairs, given together; got "
            f"{recipe_a!r} and {recipe_b!r}"
        )
    (ma, ka), (nb, kb) = recipe_a, recipe_b
    if ka == kb:
        return (ma, nb, ka)
    a4, b4 = (dtype_name(t.dtype) in fp4_names for t in (a, b))
    if a4 != b4:  # mixed e4m3 x e2m1: our recipe's gran_k is the e4m3 side's; the e2m1 side is 1x32
        g8, g4 = (kb, ka) if a4 else (ka, kb)
        if g4 != 32:
            raise NotImplementedError(f"{name}: the packed FP4 operand of a mixed GEMM takes 1x32 scales, got 1x{g4}")
        return (ma, nb, g8)
    raise NotImplementedError(
        f"{name}: a and b scale granularities differ (recipe_a {recipe_a}, recipe_b "
        f"{recipe_b}); SM120 kernels use one K granularity for both"
    )


def expected_m(name: str, value) -> int:
    """A masked call's expected_m: DeepGEMM's contract has it as a required int (the tile hint), so None or a
    non-int is a TypeError here rather than a failed comparison inside the plan."""
    if type(value) is not int or value < 0:
        raise TypeError(f"{name}: expected_m must be a non-negative int (typical rows per group), got {value!r}")
    return value


def zero_psum_padding(d: torch.Tensor, ends: torch.Tensor, align_rows: int) -> None:
    """ensure_zero_padding with a psum layout: rows between a group's end and the next group's aligned start,
    and rows past the last end, become 0. Device-side (no sync), so it stays legal in CUDA-graph capture."""
    m = d.shape[0]
    if m == 0 or ends.numel() == 0:
        return
    rows = torch.arange(m, device=d.device)
    ends64 = ends.long()
    g = torch.searchsorted(ends64, rows, right=True)
    prev = torch.cat([ends64.new_zeros(1), ends64])[g]
    start = (prev + align_rows - 1) // align_rows * align_rows
    d.masked_fill_(((g >= ends64.numel()) | (rows < start)).unsqueeze(1), 0)
