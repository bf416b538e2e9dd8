"""The paged MQA-logits scheduler (scheduler/sm120_paged_mqa_logits.cuh), a service kernel of this family only:
the one CTA behind get_paged_mqa_logits_metadata (metadata.py) that splits the (batch, chunk) work evenly over
SMs on the GPU (graph-capturable)."""

from __future__ import annotations

from dataclasses import dataclass

from ...core.params import Param, ParamList
from ...core.registry import Family, GateRules, KernelSpec

PARAMS = ParamList(
    Param("context_lens", "const int32_t*"),
    Param("num_batches", "uint32_t"),
    Param("next_n", "uint32_t"),
    Param("ld", "uint32_t"),
    Param("chunk_keys", "uint32_t"),
    Param("num_sms", "uint32_t"),
    Param("meta", "int32_t*"),
)
THREADS = 1024
BLOCK_KVS = (32, 64, 128)


def chunk_keys(block_kv: int) -> int:
    """Keys per scheduled chunk: one paged-kernel pipeline tile (at least 64 keys, one or two cache blocks)."""
    return max(64, block_kv)


@dataclass(frozen=True)
class PagedMetadataSpec(KernelSpec):
    def kernel_name(self) -> str:
        return "paged_mqa_logits_metadata"

    def block_threads(self) -> int:
        return THREADS

    def shared_bytes(self) -> int:
        return 0  # the scan's 4 KB is static shared memory

    def template_args(self) -> list[str]:
        return [str(THREADS)]


SCHEDULE = Family(
    name="paged_mqa_logits_metadata",
    header="scheduler/sm120_paged_mqa_logits.cuh",
    params=PARAMS,
    specs=lambda: [PagedMetadataSpec()],
    gate=lambda spec: GateRules(required={"sm120": ("LDG", "STG", "BAR"), "sm90": ("LDG", "STG", "BAR")}),
    pdl=False,
    service=True,  # get_paged_mqa_logits_metadata, the op, is this family's
)
