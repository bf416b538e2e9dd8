"""Scale probe (impls/sm120_scale_probe.cuh): one block-scaled MMA per warp, as the kernels issue it, on registers
the host chooses. A service kernel: the self-test (deep_gemm_sm120.selftest) launches it to prove each scale
encoding on the user's GPU, and the automatic encoding choice runs that part of the self-test once per device.

The case table mirrors ScaleProbeTable in the header; the kernel writes each case's descriptor next to its
result, so a table that drifted from the header is caught on the GPU, not read as a wrong mapping."""

from __future__ import annotations

from dataclasses import dataclass

from ...core import encoding as enc
from ...core.params import Param, ParamList
from ...core.registry import Family, GateRules, KernelSpec

PARAMS = ParamList(Param("words", "const uint32_t*"), Param("out", "float*"), Param("table", "uint32_t*"))
WORDS_PER_CASE = 256  # A fragment 4 x 32, B fragment 2 x 32, A scale 32, B scale 32
OUTS_PER_CASE = 128  # 16 x 8 accumulators, 4 per lane

# atom kind -> (sm120::ScaleKind, scale_vec (bytes one MMA reads), the SM120 SASS the gate requires)
ATOM_KINDS = {
    "mxfp8": ("kMxFp8", 1, "QMMA.SF.16832.F32.E4M3.E4M3.E8"),
    "e4m3_e2m1": ("kMxE4M3E2M1", 1, "QMMA.SF.16832.F32.E4M3.E2M1.E8"),
    "e2m1_e4m3": ("kMxE2M1E4M3", 1, "QMMA.SF.16832.F32.E2M1.E4M3.E8"),
    "mxfp4": ("kMxFp4", 2, "OMMA.SF.16864.F32.E2M1.E2M1.E8"),
    "nvfp4": ("kNvFp4", 4, "OMMA.SF.16864.F32.E2M1.E2M1.UE4M3.4X"),
}


@dataclass(frozen=True)
class ProbeCase:
    """One row of ScaleProbeTable: the encoding, the m16 / n8 tile the MMA serves and its byte-ids."""

    encoding: str
    i: int
    j: int
    byte_a: int
    byte_b: int

    @property
    def descriptor(self) -> int:
        rep = 1 if self.encoding == enc.REPLICATED else 0
        return rep | self.i << 4 | self.j << 8 | self.byte_a << 12 | self.byte_b << 16


def cases(kind: str) -> tuple[ProbeCase, ...]:
    """ScaleProbeTable<kind>'s cases in order: selectors (tile i + 2 j, then byte pair), then replicated."""
    vec = ATOM_KINDS[kind][1]
    byte_ids = {1: (0, 1, 2, 3), 2: (0, 2), 4: (0,)}[vec]
    pairs = [(a, b) for a in byte_ids for b in byte_ids]
    sel = [ProbeCase(enc.SELECTORS, t % 2, t // 2, a, b) for t in range(8) for a, b in pairs]
    return (*sel, *(ProbeCase(enc.REPLICATED, 0, 0, a, b) for a, b in pairs))


@dataclass(frozen=True)
class ScaleProbeSpec(KernelSpec):
    kind: str = "mxfp8"

    def __post_init__(self) -> None:
        if self.kind not in ATOM_KINDS:
            raise ValueError(f"scale probe kind must be one of {sorted(ATOM_KINDS)}, got {self.kind!r}")
        super().__post_init__()

    def kernel_name(self) -> str:
        return f"scale_probe_{self.kind}"

    def block_threads(self) -> int:
        return 32

    def shared_bytes(self) -> int:
        return 0

    def template_args(self) -> list[str]:
        return [f"sm120::ScaleKind::{ATOM_KINDS[self.kind][0]}"]

    @property
    def num_cases(self) -> int:
        return len(cases(self.kind))


def gate(spec: ScaleProbeSpec) -> GateRules:
    # SM120: the block-scaled MMA of the kind and never an unscaled one; sm_90a: the emulation's f16 HMMAs.
    return GateRules(
        required={"sm120": (ATOM_KINDS[spec.kind][2],), "sm90": ("HMMA.16816.F32",)},
        forbidden={"sm120": (r"^(QMMA\.16832|OMMA\.16864)",)},
        emulation_spills_allowed=True,
    )


FAMILY = Family(
    name="scale_probe",
    params=PARAMS,
    specs=lambda: [ScaleProbeSpec(k) for k in ATOM_KINDS],
    gate=gate,
    quick_key=lambda s: (s.kind,),
    pdl=False,
    api_modules=(),
    service=True,
)
