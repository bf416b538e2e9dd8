"""The paged MQA-logits scheduler (scheduler/sm120_paged_mqa_logits.cuh), a service kernel: the one CTA behind
get_paged_mqa_logits_metadata (families/paged_mqa_logits/metadata.py) that splits the (batch, chunk) work evenly
over SMs on the GPU (graph-capturable)."""
from __future__ import annotations

from dataclasses import dataclass

from ...core.params import Param, ParamList
from ...core.registry import Family, GateRules, KernelSpec
from ...core.rules import require_dim

PARAMS = ParamList(
    Param("context_lens", "const int32_t*"), Param("num_batches", "uint32_t"), Param("next_n", "uint32_t"),
    Param("ld", "uint32_t"), Param("chunk_keys", "uint32_t"), Param("num_sms", "uint32_t"), Param("meta", "int32_t*"),
)
THREADS = 1024
BLOCK_KVS = (32, 64, 128)


def chunk_keys(block_kv: int) -> int:
    """Keys per scheduled chunk: one paged-kernel pipeline tile (at least 64 keys, one or two cache blocks)."""
    return max(64, block_kv)


@dataclass(frozen=True)
class PagedMetadataSpec(KernelSpec):
    @property
    def name(self) -> str:
        return "paged_mqa_logits_metadata"

    @property
    def threads(self) -> int:
        return THREADS

    @property
    def smem_bytes(self) -> int:
        return 0  # the scan's 4 KB is static shared memory

    def template_args(self) -> list[str]:
        return [str(THREADS)]


def metadata_rule(num_batches: int | None = None, block_kv: int | None = None, num_sms: int | None = None,
                  context_lens_dtype: str | None = None, context_lens_dim: int | None = None) -> None:
    from ...core.rules import require_dtype

    require_dtype("context_lens", context_lens_dtype, ("int32",))
    if context_lens_dim is not None and context_lens_dim not in (1, 2):
        raise ValueError(f"context_lens must be [B] or [B, next_n], got {context_lens_dim} dimensions")
    for name, v in (("num_batches", num_batches), ("block_kv", block_kv), ("num_sms", num_sms)):
        if v is not None:
            require_dim(name, v)
    if block_kv is not None and block_kv not in BLOCK_KVS:
        raise NotImplementedError(f"block_kv {block_kv} is not supported; supported: {BLOCK_KVS}")
    if num_sms is not None and num_sms < 1:
        raise ValueError(f"num_sms must be >= 1, got {num_sms}")


FAMILY = Family(
    name="paged_mqa_logits_metadata",
    header="scheduler/sm120_paged_mqa_logits.cuh",
    params=PARAMS,
    specs=lambda: [PagedMetadataSpec()],
    gate=lambda spec: GateRules(required={"sm120": ("LDG", "STG", "BAR"), "sm90": ("LDG", "STG", "BAR")}),
    pdl=False,
    service=True,  # get_paged_mqa_logits_metadata, the op, is the paged_mqa_logits family's
)
