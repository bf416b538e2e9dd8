"""The dense MQA-logits kernel (impls/sm120_mqa_logits.cuh): parameters, the q-tile / KV-ring geometry it
shares with the paged kernel, its instantiations, the logits row stride and the SASS the gate demands."""

from __future__ import annotations

from dataclasses import dataclass

from ...core import encoding as enc
from ...core.gemm import ceil_div
from ...core.limits import SMEM_LIMIT
from ...core.params import Param, ParamList
from ...core.registry import GateRules, KernelSpec

PARAMS = ParamList(
    Param("tmap_q", "CUtensorMap"),
    Param("tmap_kv", "CUtensorMap"),
    Param("kv_scale", "const float*"),
    Param("q_sf", "const uint32_t*"),
    Param("kv_sf", "const uint32_t*"),
    Param("weights", "const float*"),
    Param("ks", "const int32_t*"),
    Param("ke", "const int32_t*"),
    Param("logits", "{logit}*"),
    Param("seq_len", "uint32_t"),
    Param("seq_len_kv", "uint32_t"),
    Param("ld_weights", "uint32_t"),
    Param("ld_logits", "uint32_t"),
)
CXX_LOGIT = {"fp32": "float", "bf16": "sm120::bf16"}
HEADS = (16, 32, 64)
HEAD_DIMS = (64, 128)
FP4_HEAD_DIMS = (128,)  # one packed UE8M0 word (four 1x32 blocks) per q row and per key
FP4_DTYPES = ("uint8", "int8", "float4_e2m1fn_x2")
ROWS = 64  # M per CTA: 64 / heads queries
BLOCK_KV = 128
MAX_STAGES = 8
MODES = ("clean", "plain", "compressed")  # clean: -inf outside [ks, ke); compressed: column = key - ks
LOGIT_ALIGN_BYTES = 1024  # DeepGEMM pads the logits row stride to this


class MqaSpecGeometry:
    """Shared by the dense and paged specs: a 64-row q tile plus a ring of `tile_keys`-key KV stages, as many as
    fit next to the q tile, and `barriers` fixed mbarriers besides a full/empty pair per stage."""

    barriers = 1
    heads: int
    head_dim: int
    logit_dtype: str
    fp4: bool

    @property
    def tile_keys(self) -> int:
        raise NotImplementedError

    @property
    def row_bytes(self) -> int:
        return self.head_dim // 2 if self.fp4 else self.head_dim

    @property
    def stages(self) -> int:
        free = SMEM_LIMIT - ROWS * self.row_bytes - 8 * (2 * MAX_STAGES + self.barriers)
        return min(MAX_STAGES, free // (self.tile_keys * self.row_bytes))

    def shared_bytes(self) -> int:
        return (ROWS + self.stages * self.tile_keys) * self.row_bytes + 8 * (2 * self.stages + self.barriers)

    def block_threads(self) -> int:
        return 4 * 32 + 32  # four math warps and the producer warp

    def type_subst(self) -> dict[str, str]:
        return {"logit": CXX_LOGIT[self.logit_dtype]}


@dataclass(frozen=True)
class MqaLogitsSpec(MqaSpecGeometry, KernelSpec):
    heads: int = 64
    head_dim: int = 128
    logit_dtype: str = "fp32"
    mode: str = "clean"
    fp4: bool = False
    encoding: str = enc.SELECTORS  # FP4: how the packed UE8M0 words reach the MMA (core/encoding.py)

    def __post_init__(self) -> None:
        enc.check(self)
        super().__post_init__()

    @property
    def uses_selectors(self) -> bool:
        """FP4: per-tile UE8M0 scales; FP8 runs unit scales at selector 0."""
        return self.fp4

    @property
    def scale_kind(self) -> str:
        return "mxfp4"

    @property
    def tile_keys(self) -> int:
        return BLOCK_KV

    def kernel_name(self) -> str:
        return (
            f"{'fp4' if self.fp4 else 'fp8'}_mqa_logits_h{self.heads}_d{self.head_dim}_kv{BLOCK_KV}_s{self.stages}_"
            f"{self.logit_dtype}_{self.mode}{enc.NAME_SUFFIX[self.encoding]}"
        )

    @property
    def block_q(self) -> int:
        return ROWS // self.heads

    def template_args(self) -> list[str]:
        b = lambda x: "true" if x else "false"
        return [
            str(self.heads),
            str(self.head_dim),
            str(BLOCK_KV),
            str(self.stages),
            b(self.fp4),
            CXX_LOGIT[self.logit_dtype],
            b(self.mode == "clean"),
            b(self.mode == "compressed"),
            *enc.template_tail(self.encoding),
        ]


def specs() -> list[MqaLogitsSpec]:
    return enc.variants(
        [
            MqaLogitsSpec(h, d, t, mode, fp4)
            for fp4 in (False, True)
            for h in HEADS
            for d in (FP4_HEAD_DIMS if fp4 else HEAD_DIMS)
            for t in CXX_LOGIT
            for mode in MODES
        ]
    )


def logits_row_stride(seq_len_kv: int, max_seqlen_k: int, elem_bytes: int) -> int:
    """DeepGEMM's padded row stride (elements): a multiple of 1024 bytes, with a tile of slack past the keys."""
    per = LOGIT_ALIGN_BYTES // elem_bytes
    cols = seq_len_kv + BLOCK_KV if max_seqlen_k == 0 else ceil_div(max_seqlen_k, BLOCK_KV) * BLOCK_KV
    return ceil_div(cols, per) * per


def gate_rules(fp4: bool) -> GateRules:
    """SM120: the full-rate block-scaled MMA, FP8 with unit scales (QMMA.SF) or MXFP4 (OMMA.SF), never the
    half-rate unscaled forms. sm_90a: the emulation, whose spills are reported, not failed."""
    return GateRules(
        required={
            "sm120": ("OMMA.SF" if fp4 else "QMMA.SF", "UTMALDG", "LDSM"),
            "sm90": ("HMMA.16816.F32", "UTMALDG", "LDSM"),
        },
        forbidden={"sm120": (r"^(QMMA\.16832|OMMA\.16864)",)},
        emulation_spills_allowed=True,
    )


def plan_specs(
    num_sms: int,
    heads: int = 64,
    head_dim: int = 128,
    logits_dtype=None,
    clean_logits: bool = True,
    max_seqlen_k: int = 0,
    fp4: bool = False,
    **_shape,
) -> list:
    t = "bf16" if logits_dtype is not None and "bfloat16" in str(logits_dtype) else "fp32"
    mode = "compressed" if max_seqlen_k else ("clean" if clean_logits else "plain")
    return [MqaLogitsSpec(heads, head_dim, t, mode, fp4)]
