"""The paged MQA-logits kernel (impls/sm120_paged_mqa_logits.cuh): parameters and instantiations (the q-tile /
KV-ring geometry is the dense kernel's), and the kernels a call launches."""

from __future__ import annotations

from dataclasses import dataclass

from ...core import encoding as enc
from ...core.params import Param, ParamList
from ...core.registry import KernelSpec
from ..mqa_logits.kernel import CXX_LOGIT, FP4_HEAD_DIMS, HEAD_DIMS, HEADS, MqaSpecGeometry
from .schedule import BLOCK_KVS, PagedMetadataSpec, chunk_keys

PARAMS = ParamList(
    Param("tmap_q", "CUtensorMap"),
    Param("tmap_kv", "CUtensorMap"),
    Param("kv_cache", "const uint8_t*"),
    Param("q_sf", "const uint32_t*"),
    Param("weights", "const float*"),
    Param("context_lens", "const int32_t*"),
    Param("block_table", "const int32_t*"),
    Param("schedule_meta", "const int32_t*"),
    Param("logits", "{logit}*"),
    Param("kv_block_stride", "uint32_t"),
    Param("next_n", "uint32_t"),
    Param("ctx_ld", "uint32_t"),
    Param("ctx_2d", "uint32_t"),
    Param("bt_ld", "uint32_t"),
    Param("ld_weights", "uint32_t"),
    Param("ld_logits", "uint32_t"),
    Param("max_context_len", "uint32_t"),
    Param("num_batches", "uint32_t"),
    Param("bt_cols", "uint32_t"),
    Param("num_blocks", "uint32_t"),
)


@dataclass(frozen=True)
class PagedMqaLogitsSpec(MqaSpecGeometry, KernelSpec):
    heads: int = 64
    head_dim: int = 128
    block_kv: int = 64
    logit_dtype: str = "fp32"
    clean: bool = False
    fp4: bool = False
    encoding: str = enc.SELECTORS  # FP4: how the packed UE8M0 words reach the MMA (core/encoding.py)
    barriers = 2  # + q_full / q_empty

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
        return chunk_keys(self.block_kv)

    def kernel_name(self) -> str:
        return (
            f"{'fp4' if self.fp4 else 'fp8'}_paged_mqa_logits_h{self.heads}_d{self.head_dim}_b{self.block_kv}_"
            f"s{self.stages}_{self.logit_dtype}{'_clean' if self.clean else ''}{enc.NAME_SUFFIX[self.encoding]}"
        )

    def template_args(self) -> list[str]:
        b = lambda x: "true" if x else "false"
        return [
            str(self.heads),
            str(self.head_dim),
            str(self.block_kv),
            str(self.stages),
            b(self.fp4),
            CXX_LOGIT[self.logit_dtype],
            b(self.clean),
            *enc.template_tail(self.encoding),
        ]


def specs() -> list[PagedMqaLogitsSpec]:
    return enc.variants(
        [
            PagedMqaLogitsSpec(h, d, bkv, t, clean, fp4)
            for fp4 in (False, True)
            for h in HEADS
            for d in (FP4_HEAD_DIMS if fp4 else HEAD_DIMS)
            for bkv in BLOCK_KVS
            for t in CXX_LOGIT
            for clean in (False, True)
        ]
    )


def plan_specs(
    num_sms: int,
    heads: int = 64,
    head_dim: int = 128,
    block_kv: int = 64,
    logits_dtype=None,
    clean_logits: bool = False,
    fp4: bool = False,
    **_shape,
) -> list:
    t = "bf16" if logits_dtype is not None and "bfloat16" in str(logits_dtype) else "fp32"
    return [PagedMqaLogitsSpec(heads, head_dim, block_kv, t, clean_logits, fp4), PagedMetadataSpec()]
