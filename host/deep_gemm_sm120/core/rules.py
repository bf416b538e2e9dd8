"""Typed checks on plain values (ints and dtype names), shared by each op's rule and so by the API and
is_supported alike.

The error-type rule, everywhere in the package:
  TypeError            a Python type, or a dtype outside the function's contract (DeepGEMM's for that name);
  ValueError           a wrong shape, stride, alignment, device or value;
  NotImplementedError  something DeepGEMM's contract allows that we do not (yet) support, or an architecture
                       that is not SM120.
"""

from __future__ import annotations

from .limits import TMA_ALIGN

# Spellings is_supported accepts for dtypes, besides torch dtypes themselves.
_DTYPE_ALIASES = {
    "bf16": "bfloat16",
    "fp32": "float32",
    "float": "float32",
    "fp16": "float16",
    "half": "float16",
    "e4m3": "float8_e4m3fn",
    "fp8": "float8_e4m3fn",
    "e8m0": "float8_e8m0fnu",
    "int": "int32",
}


_NAMES: dict = {}  # dtype (or spelling) -> name: str(torch.dtype) costs a microsecond on every call otherwise


def dtype_name(dtype) -> str:
    """'bfloat16' for torch.bfloat16, 'torch.bfloat16', 'bfloat16' or 'bf16'."""
    try:
        return _NAMES[dtype]
    except (KeyError, TypeError):
        pass
    if dtype is None:
        raise TypeError("dtype must be given")
    name = str(dtype)
    name = name[len("torch.") :] if name.startswith("torch.") else name
    name = _DTYPE_ALIASES.get(name, name)
    try:
        _NAMES[dtype] = name
    except TypeError:  # unhashable: answer without caching
        pass
    return name


def show(dtype_name_: str) -> str:
    return f"torch.{dtype_name_}"


def require_dtype(what: str, dtype: str | None, allowed: tuple[str, ...], not_yet: tuple[str, ...] = ()) -> None:
    """TypeError outside `allowed` + `not_yet`; NotImplementedError for `not_yet` (DeepGEMM takes it, we do not).
    None means "not specified" (is_supported answers for the supported choice)."""
    if dtype is None or dtype in allowed:
        return
    want = " or ".join(show(a) for a in allowed)
    if dtype in not_yet:
        raise NotImplementedError(f"{what} as {show(dtype)} is not supported yet (supported: {want})")
    raise TypeError(f"{what} must be {want}, got {show(dtype)}")


def require_dim(name: str, value) -> int:
    if type(value) is int and value >= 0:  # the common case, first
        return value
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name} must be non-negative, got {value}")
    return value


def require_contiguous_m(m: int, alignment: int) -> None:
    """M-grouped contiguous layouts (per-row group ids) pad every group to the layout alignment."""
    if m % alignment:
        raise ValueError(
            f"M = {m} must be a multiple of get_mk_alignment_for_contiguous_layout() = {alignment} "
            f"(pad each group with -1 rows)"
        )


def require_tma_rows(
    operand: str, inner: int, elem_bytes: int, stride: int | None = None, rows: int | None = None
) -> None:
    """An operand TMA reads as rows of `inner` elements: the row stride (`stride` elements, or `inner` for a
    contiguous tensor) must be a multiple of 16 bytes. A single row has no stride to check (the host encodes a
    padded one)."""
    if rows == 1:
        return
    stride = inner if stride is None else stride
    if (stride * elem_bytes) % TMA_ALIGN:
        per = TMA_ALIGN // elem_bytes if elem_bytes <= TMA_ALIGN else 1
        raise ValueError(
            f"{operand} row stride must be a multiple of {TMA_ALIGN} bytes for TMA (got "
            f"{stride * elem_bytes} bytes: the last dimension must be a multiple of {per})"
        )
