"""The public names a family declares, each once (torch-free: the tools read them too).

A family's declaration lists every public name it answers for, in one tuple (`Family.names`):
- `Op`: an entry point of ours, defined under that name in one of the family's API modules, with the rule that
  checks its shapes and dtypes (the API and is_supported call the same function);
- `Name(..., alias_of=X)`: another name for X, the same object (`deep_gemm.fp8_gemm_nt is dg.fp8_fp4_gemm_nt`);
- `Name(..., status=NOT_PROVIDED | NOT_YET | OUT_OF_SCOPE, does=why)`: a DeepGEMM name we refuse, raising
  NotImplementedError with `does` (a callable of that name in an API module keeps DeepGEMM's signature).
The package root binds every supported name, `import deep_gemm` (deep_gemm_sm120.compat) binds the DeepGEMM ones
(the same objects), and docs/deep_gemm_compat.md is generated from them: nothing lists them anywhere else.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

SUPPORTED, NOT_YET, OUT_OF_SCOPE, NOT_PROVIDED = "supported", "not yet", "out of scope", "not provided"
STATUSES = (SUPPORTED, NOT_YET, OUT_OF_SCOPE, NOT_PROVIDED)
ALIAS = "alias"  # the status column of an alias in the compat table


@dataclass(frozen=True)
class Name:
    """One public name. `does`: what it runs (supported) or why it is refused (the refusal's message).
    `keywords`: how DeepGEMM's keywords are honoured. `alias_of`: the name whose object this is. `deepgemm`:
    one of DeepGEMM's names (False: ours only, absent from `import deep_gemm`)."""

    name: str
    status: str = SUPPORTED
    does: str = ""
    keywords: str = ""
    alias_of: str = ""
    deepgemm: bool = True

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"{self.name}: status {self.status!r} is not one of {STATUSES}")
        if self.alias_of and (self.status != SUPPORTED or self.does or self.keywords):
            raise ValueError(f"{self.name}: an alias has only its target ({self.alias_of}); its row is the target's")

    @property
    def refused(self) -> bool:
        return self.status != SUPPORTED


@dataclass(frozen=True, kw_only=True)
class Op(Name):
    """An entry point of ours. `rule` checks shapes and dtypes given as plain values and raises the typed error
    the API raises for them; `operands` / `output` / `notes` are its support-matrix row; `signature` is how the
    support matrix shows it (a test holds it to the API function's); `plan_specs(num_sms=..., **shape)` gives
    the kernels a call of that shape launches (precompile(shapes=))."""

    rule: Callable[..., None]
    operands: str
    output: str
    notes: str = ""
    signature: str = ""
    plan_specs: Callable[..., list] | None = field(default=None, compare=False)


def make_refusal(name: str, message: str):
    """A callable under `name` that refuses with NotImplementedError naming itself and why. A class name
    (SymmBuffer, NVFP4SymmBuffer) gets a class whose construction refuses, so isinstance checks still work."""

    def refuse(*args, **kwargs):
        raise NotImplementedError(f"{name}: {message}")

    if name[:1].isupper():
        return type(name, (), {"__init__": lambda self, *a, **k: refuse(), "__doc__": f"Not provided: {message}"})
    refuse.__name__ = refuse.__qualname__ = name
    return refuse


def alias(name: str, of: str, deepgemm: bool = True) -> Name:
    return Name(name, alias_of=of, deepgemm=deepgemm)


def refused(name: str, why: str, status: str = NOT_PROVIDED) -> Name:
    return Name(name, status, does=why)


# keyword policies several families' GEMMs share, as the compat table states them (deep_gemm_sm120/keywords.py
# implements them)
BLOCK_SCALED_KEYWORDS = (
    "`recipe` / `recipe_a` / `recipe_b` honoured; `alpha=None` means 1; FP32 scales are never rounded: "
    "`disable_ue8m0_cast=True`, or FP32 scales that are not powers of two, take the exact FP32-scale kernel (e4m3 "
    "operands, float32 scales per 128 K on both sides; otherwise `ValueError`); `compiled_dims` accepted (JIT hint, "
    "no effect on results); `epilogue`: None / `Identity()`, `Alpha(x)` (= `alpha=x`); the FP8-output and "
    "stochastic-rounding epilogues: `NotImplementedError`"
)
BF16_KEYWORDS = (
    "`compiled_dims` accepted (no effect); `alpha` None or 1 only; `epilogue`: None / `Identity()` / "
    "`Alpha(1)`, others NotImplementedError"
)
EPILOGUE_IDENTITY = "`epilogue`: Identity/None, Alpha(1); others NotImplementedError"
M_CONTIGUOUS_KEYWORDS = (
    "`use_psum_layout` honoured; `ensure_zero_padding=True` zeroes d's psum padding rows "
    "(per-row layouts: -1 rows are never written); `expected_m_for_psum_layout` accepted "
    "(tile hint)"
)
