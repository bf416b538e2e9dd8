"""The slot-table kernel of the sparse MQA-logits metadata functions (scheduler/sm120_sparse_mqa_logits_metadata.cuh),
a service kernel of this family only: one thread per (row, slot), one launch, graph-capturable. The public entry
points are get_sparse_mqa_logits_metadata / get_paged_sparse_mqa_logits_metadata (metadata.py), which run it for
CUDA tensors (and the same semantics as torch ops for CPU tensors)."""

from __future__ import annotations

from dataclasses import dataclass

from ...core.params import Param, ParamList
from ...core.registry import Family, GateRules, KernelSpec

PARAMS = ParamList(
    Param("ks", "const int32_t*"),
    Param("ke", "const int32_t*"),
    Param("block_table", "const int32_t*"),
    Param("indices", "const int32_t*"),
    Param("meta", "int32_t*"),
    Param("rows", "uint32_t"),
    Param("num_slots", "uint32_t"),
    Param("block_log2", "uint32_t"),
    Param("page_kv", "uint32_t"),
    Param("max_pages", "uint32_t"),
    Param("bt_ld", "uint32_t"),
    Param("idx_ld", "uint32_t"),
)
THREADS = 256


@dataclass(frozen=True)
class SparseMetadataSpec(KernelSpec):
    def kernel_name(self) -> str:
        return "sparse_mqa_logits_metadata"

    def block_threads(self) -> int:
        return THREADS

    def shared_bytes(self) -> int:
        return 0

    def template_args(self) -> list[str]:
        return [str(THREADS)]


SLOTS = Family(
    name="sparse_mqa_logits_metadata",
    header="scheduler/sm120_sparse_mqa_logits_metadata.cuh",
    params=PARAMS,
    specs=lambda: [SparseMetadataSpec()],
    gate=lambda spec: GateRules(required={"sm120": ("LDG", "STG"), "sm90": ("LDG", "STG")}),
    pdl=False,
    api_modules=(),
    service=True,
)
