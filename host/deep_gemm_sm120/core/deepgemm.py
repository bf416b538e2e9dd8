"""How a family meets DeepGEMM's Python surface, declared next to its ops (torch-free: the tools read it too).

Each family lists the DeepGEMM names it answers for as `Entry`s in its declaration (`Family.deepgemm`); the
callables live in the family's `deepgemm.py` (DeepGEMM's positional order and keywords over our API).
deep_gemm_sm120.compat binds them and docs/deep_gemm_compat.md is generated from them: nothing lists a
family's DeepGEMM names anywhere else.
"""
from __future__ import annotations

from dataclasses import dataclass

SUPPORTED, ALIAS, NOT_YET, OUT_OF_SCOPE, NOT_PROVIDED = "supported", "alias", "not yet", "out of scope", "not provided"
STATUSES = (SUPPORTED, ALIAS, NOT_YET, OUT_OF_SCOPE, NOT_PROVIDED)


@dataclass(frozen=True)
class Entry:
    """One DeepGEMM public name. `note`: what it maps to, or (ALIAS) the name it is an alias of, or why not.
    `keywords`: how its keywords are honoured. A family's `deepgemm.py` defines the callable of every SUPPORTED
    name (and may define a refusal with DeepGEMM's signature; otherwise one is generated from the note)."""
    name: str
    status: str
    note: str = ""
    keywords: str = ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"{self.name}: status {self.status!r} is not one of {STATUSES}")


# keyword policies several families' GEMMs share, as the compat table states them (compat/policy.py implements)
BLOCK_SCALED_KEYWORDS = (
    "`recipe` / `recipe_a` / `recipe_b` honoured; `alpha=None` means 1; `disable_ue8m0_cast` either way requires "
    "power-of-two FP32 scales (others raise `ValueError`: never reinterpreted); `compiled_dims` accepted (JIT hint, "
    "no effect on results); `epilogue`: None / `Identity()`, `Alpha(x)` (= `alpha=x`); the FP8-output and "
    "stochastic-rounding epilogues: `NotImplementedError`")
BF16_KEYWORDS = ("`compiled_dims` accepted (no effect); `alpha` None or 1 only; `epilogue`: None / `Identity()` / "
                 "`Alpha(1)`, others NotImplementedError")
M_CONTIGUOUS_KEYWORDS = ("`use_psum_layout` honoured; `ensure_zero_padding=True` zeroes d's psum padding rows "
                         "(per-row layouts: -1 rows are never written); `expected_m_for_psum_layout` accepted "
                         "(tile hint)")
