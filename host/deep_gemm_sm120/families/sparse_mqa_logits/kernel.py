"""The sparse MQA-logits kernel (impls/sm120_sparse_mqa_logits.cuh): parameters, instantiations (the register
geometry: heads x head dim x format; the sparse block and page size are runtime parameters), and how a call is
split over CTAs."""

from __future__ import annotations

from dataclasses import dataclass

from ...core import encoding as enc
from ...core.gemm import ceil_div
from ...core.params import Param, ParamList
from ...core.registry import KernelSpec

PARAMS = ParamList(
    Param("tmap_q", "CUtensorMap"),
    Param("tmap_kv", "CUtensorMap"),
    Param("q_sf", "const uint32_t*"),
    Param("kv_sf", "const uint8_t*"),
    Param("weights", "const sm120::bf16*"),
    Param("metadata", "const int32_t*"),
    Param("logits", "sm120::bf16*"),
    Param("num_slots", "uint32_t"),
    Param("block_log2", "uint32_t"),
    Param("page_rows", "uint32_t"),
    Param("total_rows", "uint32_t"),
    Param("sf_page_stride", "uint32_t"),
    Param("tiles_per_cta", "uint32_t"),
    Param("ld_weights", "uint32_t"),
    Param("ld_logits", "uint32_t"),
)
HEADS = (16, 32, 64)
HEAD_DIMS = {"mxfp8": (64, 128), "mxfp4": (128,)}
SPARSE_BLOCKS = (8, 16, 32)
TILE_KEYS = 64  # keys per pipeline stage (8, 4 or 2 sparse blocks)
STAGES = 4  # 4 x 8 KiB at D = 128 MXFP8: two CTAs per SM within 99 KiB
MAX_TILES_PER_CTA = 8  # 512 keys of one row per CTA at most
SCALE_BYTES = 4  # packed UE8M0: one int32 per KV row


@dataclass(frozen=True)
class SparseMqaLogitsSpec(KernelSpec):
    heads: int = 64
    head_dim: int = 128
    fp4: bool = False
    encoding: str = enc.SELECTORS  # how the packed UE8M0 words reach the MMA (core/encoding.py)

    def __post_init__(self) -> None:
        enc.check(self)
        super().__post_init__()

    @property
    def uses_selectors(self) -> bool:
        """MXFP8 and MXFP4 both take per-tile UE8M0 scales."""
        return True

    @property
    def scale_kind(self) -> str:
        return "mxfp4" if self.fp4 else "mxfp8"

    @property
    def row_bytes(self) -> int:
        return self.head_dim // 2 if self.fp4 else self.head_dim

    @property
    def stages(self) -> int:
        return STAGES

    def shared_bytes(self) -> int:
        return (self.heads + self.stages * TILE_KEYS) * self.row_bytes + 8 * (2 * self.stages + 1)

    def block_threads(self) -> int:
        return 4 * 32 + 32  # four math warps and the producer warp

    def kernel_name(self) -> str:
        fmt = "mxfp4" if self.fp4 else "mxfp8"
        return f"{fmt}_sparse_mqa_logits_h{self.heads}_d{self.head_dim}_s{self.stages}{enc.NAME_SUFFIX[self.encoding]}"

    def template_args(self) -> list[str]:
        args = [str(self.heads), str(self.head_dim), str(self.stages), "true" if self.fp4 else "false"]
        return args + enc.template_tail(self.encoding)


def specs() -> list[SparseMqaLogitsSpec]:
    return enc.variants(
        [SparseMqaLogitsSpec(h, d, fmt == "mxfp4") for fmt, dims in HEAD_DIMS.items() for h in HEADS for d in dims]
    )


def tiles_per_cta(rows: int, num_slots: int, sparse_block_kv: int, num_sms: int) -> int:
    """Tiles of one row per CTA: as few as keep about four CTAs per SM (two resident, two waves), at most 512
    keys (the q load and pipeline fill amortized, and enough CTAs for short prefills)."""
    tiles = ceil_div(num_slots * sparse_block_kv, TILE_KEYS)
    want = ceil_div(max(rows, 1) * tiles, 4 * num_sms)
    return max(1, min(tiles, MAX_TILES_PER_CTA, want))


def plan_specs(num_sms: int, heads: int = 64, head_dim: int = 128, fp4: bool = False, **_shape) -> list:
    return [SparseMqaLogitsSpec(heads, head_dim, fp4)]
