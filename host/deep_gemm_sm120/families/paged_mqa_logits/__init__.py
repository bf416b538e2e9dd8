"""Paged MQA logits (impls/sm120_paged_mqa_logits.cuh): the DeepSeek V3.2/V4 indexer's decode scores over a
paged FP8 or FP4 KV cache, scheduled by get_paged_mqa_logits_metadata. Declarations only (torch-free)."""
from __future__ import annotations

from dataclasses import dataclass

from ...core.params import Param, ParamList
from ...core.registry import Family, KernelSpec, Op
from ...core.deepgemm import Entry, SUPPORTED
from ...core.rules import require_dim, require_dtype
from ..mqa_logits import CXX_LOGIT, FP4_HEAD_DIMS, HEAD_DIMS, HEADS, MqaSpecGeometry, gate_rules, operand_rule
from ...services.paged_mqa_logits_metadata import BLOCK_KVS, PagedMetadataSpec, chunk_keys, metadata_rule

PARAMS = ParamList(
    Param("tmap_q", "CUtensorMap"), Param("tmap_kv", "CUtensorMap"),
    Param("kv_cache", "const uint8_t*"), Param("q_sf", "const uint32_t*"), Param("weights", "const float*"),
    Param("context_lens", "const int32_t*"), Param("block_table", "const int32_t*"),
    Param("schedule_meta", "const int32_t*"), Param("logits", "{logit}*"),
    Param("kv_block_stride", "uint32_t"), Param("next_n", "uint32_t"), Param("ctx_ld", "uint32_t"),
    Param("ctx_2d", "uint32_t"), Param("bt_ld", "uint32_t"), Param("ld_weights", "uint32_t"),
    Param("ld_logits", "uint32_t"), Param("max_context_len", "uint32_t"), Param("num_batches", "uint32_t"),
    Param("bt_cols", "uint32_t"), Param("num_blocks", "uint32_t"),
)
@dataclass(frozen=True)
class PagedMqaLogitsSpec(MqaSpecGeometry, KernelSpec):
    heads: int = 64
    head_dim: int = 128
    block_kv: int = 64
    logit_dtype: str = "fp32"
    clean: bool = False
    fp4: bool = False
    barriers = 2   # + q_full / q_empty

    @property
    def tile_keys(self) -> int:
        return chunk_keys(self.block_kv)

    @property
    def name(self) -> str:
        return (f"{'fp4' if self.fp4 else 'fp8'}_paged_mqa_logits_h{self.heads}_d{self.head_dim}_b{self.block_kv}_"
                f"s{self.stages}_{self.logit_dtype}{'_clean' if self.clean else ''}")

    def template_args(self) -> list[str]:
        b = lambda x: "true" if x else "false"  # noqa: E731
        return [str(self.heads), str(self.head_dim), str(self.block_kv), str(self.stages), b(self.fp4),
                CXX_LOGIT[self.logit_dtype], b(self.clean)]


def specs() -> list[PagedMqaLogitsSpec]:
    return [PagedMqaLogitsSpec(h, d, bkv, t, clean, fp4) for fp4 in (False, True) for h in HEADS
            for d in (FP4_HEAD_DIMS if fp4 else HEAD_DIMS) for bkv in BLOCK_KVS for t in CXX_LOGIT
            for clean in (False, True)]


def paged_rule(batch: int | None = None, next_n: int | None = None, heads: int | None = None,
               head_dim: int | None = None, block_kv: int | None = None, q_dtype: str | None = None,
               q_sf_dtype: str | None = None, kv_cache_dtype: str | None = None, weights_dtype: str | None = None,
               logits_dtype: str | None = None, max_context_len: int | None = None, fp4: bool = False,
               indices=None) -> None:
    """q [B, next_n, H, D] e4m3 (FP4: [B, next_n, H, D/2] packed + int32 [B, next_n, H]); kv_cache uint8
    [num_blocks, block_kv, 1, D + 4] (FP4: D/2 + 4); weights fp32 [B * next_n, H]."""
    if indices is not None:
        raise NotImplementedError("indices (varlen paged MQA logits) are not supported: DeepGEMM runs them on SM100 "
                                  "only; pass next_n queries per batch")
    operand_rule(fp4, q_dtype, None, q_sf_dtype, "int32" if fp4 else "float32", weights_dtype, logits_dtype, heads,
                 head_dim)
    require_dtype("kv_cache", kv_cache_dtype, ("uint8",))
    for name, v in (("batch", batch), ("next_n", next_n), ("block_kv", block_kv),
                    ("max_context_len", max_context_len)):
        if v is not None:
            require_dim(name, v)
    if next_n is not None and next_n < 1:
        raise ValueError(f"next_n must be >= 1, got {next_n}")
    if block_kv is not None and block_kv not in BLOCK_KVS:
        raise NotImplementedError(f"block_kv {block_kv} is not supported; supported: {BLOCK_KVS}")


def plan_specs(num_sms: int, heads: int = 64, head_dim: int = 128, block_kv: int = 64, logits_dtype=None,
               clean_logits: bool = False, fp4: bool = False, **_shape) -> list:

    t = "bf16" if logits_dtype is not None and "bfloat16" in str(logits_dtype) else "fp32"
    return [PagedMqaLogitsSpec(heads, head_dim, block_kv, t, clean_logits, fp4), PagedMetadataSpec()]


FAMILY = Family(
    name="paged_mqa_logits",
    params=PARAMS,
    specs=specs,
    gate=lambda spec: gate_rules(spec.fp4),
    quick_key=lambda s: (s.heads, s.head_dim, s.block_kv, s.fp4),
    pdl=True,
    ops=(Op("fp8_fp4_paged_mqa_logits", paged_rule,
            "q e4m3 [B,next_n,H,D] (FP4 packed + int32 scales), kv_cache uint8 [blocks, block_kv, 1, D+4]",
            "fp32 or bf16 [B * next_n, max_context_len]",
            "H 16/32/64; FP8 D 64/128, FP4 D 128; block_kv 32/64/128; any next_n; schedule from "
            "get_paged_mqa_logits_metadata", aliases=("fp8_paged_mqa_logits",),
            signature="fp8_fp4_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta, "
                      "max_context_len, clean_logits=False, logits_dtype=torch.float32, indices=None)",
            plan_specs=plan_specs),
         Op("get_paged_mqa_logits_metadata", metadata_rule, "context_lens int32 [B] or [B, next_n]",
            "int32 [num_sms + 1, 2]",
            "(batch, chunk) where each SM starts; chunks of max(64, block_kv) keys; computed on the GPU by the "
            "service kernel services/paged_mqa_logits_metadata",
            signature="get_paged_mqa_logits_metadata(context_lens, block_kv, num_sms)",
            plan_specs=lambda num_sms, **_: [PagedMetadataSpec()])),
    api_modules=("api", "metadata"),
    sanitizers=("mqa_logits",),
    benchmarks=("mqa_logits",),
    deepgemm=(
        Entry("get_paged_mqa_logits_metadata", SUPPORTED, "get_paged_mqa_logits_metadata (GPU-computed, "
              "graph-capturable)", "`indices` (varlen, SM100-only upstream): NotImplementedError"),
        Entry("fp8_fp4_paged_mqa_logits", SUPPORTED, "fp8_fp4_paged_mqa_logits", "DeepGEMM 2.8.1's order (`indices` "
              "8th; `indices` not None: NotImplementedError); `clean_logits`, `logits_dtype` keyword-only extensions "
              "(default: uncleaned float32, as 2.8.1); 1-D and 2-D context_lens"),
        Entry("fp8_paged_mqa_logits", SUPPORTED, "fp8_fp4_paged_mqa_logits with q a tensor"),
    ),
)
