"""Split-K reduction (impls/sm120_split_k_reduce.cuh): D = C + the fp32 slices a split-K GEMM wrote, added in
a fixed order. A service kernel: no public op; the GEMM families launch it through launch.py here."""

from __future__ import annotations

from dataclasses import dataclass

from ...core.arith import ceil_div
from ...core.gemm import CXX_OUT
from ...core.params import Param, ParamList
from ...core.registry import Family, GateRules, KernelSpec

PARAMS = ParamList(
    Param("w", "const float*"),
    Param("d", "{out}*"),
    Param("c", "const {out}*"),
    Param("m", "uint32_t"),
    Param("n", "uint32_t"),
    Param("ldd", "uint32_t"),
    Param("ldc", "uint32_t"),
    Param("num_splits", "uint32_t"),
)
THREADS = 256  # sm120::kSplitKReduceThreads


@dataclass(frozen=True)
class SplitKReduceSpec(KernelSpec):
    out_dtype: str = "bf16"
    with_c: bool = False
    warp_per_element: bool = False  # many splits of a small output: lanes over splits

    def kernel_name(self) -> str:
        return f"split_k_reduce_{self.out_dtype}{'_c' if self.with_c else ''}{'_wpe' if self.warp_per_element else ''}"

    def block_threads(self) -> int:
        return THREADS

    def shared_bytes(self) -> int:
        return 0

    def template_args(self) -> list[str]:
        b = lambda x: "true" if x else "false"
        return [CXX_OUT[self.out_dtype], b(self.with_c), b(self.warp_per_element)]

    def type_subst(self) -> dict[str, str]:
        return {"out": CXX_OUT[self.out_dtype]}


def grid(m: int, n: int, num_sms: int, warp_per_element: bool = False) -> int:
    """One thread per 4 columns of a row (or one warp per element), at most 8 CTAs per SM (grid-stride loop)."""
    work = m * n * 32 if warp_per_element else m * ceil_div(n, 4)
    return max(1, min(ceil_div(work, THREADS), num_sms * 8))


# Warp-per-element pays off when each element has many slices and the output is small (its loads are
# one sector per split; the quad form reads 16-byte vectors).
WARP_PER_ELEMENT_MIN_SPLITS = 8
WARP_PER_ELEMENT_MAX_ELEMENTS = 1 << 16


def warp_per_element(m: int, n: int, splits: int) -> bool:
    return splits >= WARP_PER_ELEMENT_MIN_SPLITS and m * n <= WARP_PER_ELEMENT_MAX_ELEMENTS


FAMILY = Family(
    name="split_k_reduce",
    params=PARAMS,
    specs=lambda: (
        [SplitKReduceSpec(out, c) for out in ("bf16", "fp32") for c in (False, True)]
        + [SplitKReduceSpec("fp32", False, True)]
    ),
    # Plain loads and stores: no tensor cores, no TMA. The gate still forbids local memory.
    gate=lambda spec: GateRules(required={"sm120": ("LDG", "STG"), "sm90": ("LDG", "STG")}),
    quick_key=lambda s: (s.warp_per_element,),  # one register/smem profile per form
    pdl=True,
    api_modules=(),
    service=True,
)
