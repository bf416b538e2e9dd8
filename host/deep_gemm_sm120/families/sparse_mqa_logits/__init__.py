"""Sparse and paged-sparse MQA logits (impls/sm120_sparse_mqa_logits.cuh): DeepSeek V4.1's indexer scores over
the KV blocks each query selected, MXFP8 or MXFP4 (docs/sparse_mqa_logits.md). Declarations only (torch-free):
parameters, specs, the rules is_supported shares with the API, and the SASS the gate demands.

One kernel serves both forms (the contiguous KV is a single page); the sparse block (8 / 16 / 32 keys) and the
page size are runtime parameters, so the instantiations are the register geometry only: heads x head dim x
format."""
from __future__ import annotations

from dataclasses import dataclass

from ...core.gemm import ceil_div
from ...core.params import Param, ParamList
from ...core.registry import Family, KernelSpec, Op
from ...core.deepgemm import Entry, SUPPORTED
from ...core.rules import require_dim, require_dtype
from ..mqa_logits import FP4_DTYPES, gate_rules

PARAMS = ParamList(
    Param("tmap_q", "CUtensorMap"), Param("tmap_kv", "CUtensorMap"),
    Param("q_sf", "const uint32_t*"), Param("kv_sf", "const uint8_t*"), Param("weights", "const sm120::bf16*"),
    Param("metadata", "const int32_t*"), Param("logits", "sm120::bf16*"),
    Param("num_slots", "uint32_t"), Param("block_log2", "uint32_t"), Param("page_rows", "uint32_t"),
    Param("total_rows", "uint32_t"), Param("sf_page_stride", "uint32_t"), Param("tiles_per_cta", "uint32_t"), Param("ld_weights", "uint32_t"),
    Param("ld_logits", "uint32_t"),
)
HEADS = (16, 32, 64)
HEAD_DIMS = {"mxfp8": (64, 128), "mxfp4": (128,)}
SPARSE_BLOCKS = (8, 16, 32)
TILE_KEYS = 64          # keys per pipeline stage (8, 4 or 2 sparse blocks)
STAGES = 4              # 4 x 8 KiB at D = 128 MXFP8: two CTAs per SM within 99 KiB
MAX_TILES_PER_CTA = 8   # 512 keys of one row per CTA at most
SCALE_BYTES = 4         # packed UE8M0: one int32 per KV row


@dataclass(frozen=True)
class SparseMqaLogitsSpec(KernelSpec):
    heads: int = 64
    head_dim: int = 128
    fp4: bool = False

    @property
    def row_bytes(self) -> int:
        return self.head_dim // 2 if self.fp4 else self.head_dim

    @property
    def stages(self) -> int:
        return STAGES

    @property
    def smem_bytes(self) -> int:
        return (self.heads + self.stages * TILE_KEYS) * self.row_bytes + 8 * (2 * self.stages + 1)

    @property
    def threads(self) -> int:
        return 4 * 32 + 32   # four math warps and the producer warp

    @property
    def name(self) -> str:
        return f"{'mxfp4' if self.fp4 else 'mxfp8'}_sparse_mqa_logits_h{self.heads}_d{self.head_dim}_s{self.stages}"

    def template_args(self) -> list[str]:
        return [str(self.heads), str(self.head_dim), str(self.stages), "true" if self.fp4 else "false"]


def specs() -> list[SparseMqaLogitsSpec]:
    return [SparseMqaLogitsSpec(h, d, fmt == "mxfp4") for fmt, dims in HEAD_DIMS.items() for h in HEADS for d in dims]


def tiles_per_cta(rows: int, num_slots: int, sparse_block_kv: int, num_sms: int) -> int:
    """Tiles of one row per CTA: as few as keep about four CTAs per SM (two resident, two waves), at most 512
    keys (the q load and pipeline fill amortized, and enough CTAs for short prefills)."""
    tiles = ceil_div(num_slots * sparse_block_kv, TILE_KEYS)
    want = ceil_div(max(rows, 1) * tiles, 4 * num_sms)
    return max(1, min(tiles, MAX_TILES_PER_CTA, want))


def _fmt(q_dtype: str | None) -> str | None:
    if q_dtype is None:
        return None
    if q_dtype == "float8_e4m3fn":
        return "mxfp8"
    if q_dtype in FP4_DTYPES:
        return "mxfp4"
    raise TypeError(f"q must be float8_e4m3fn (MXFP8) or packed e2m1 ({' / '.join(FP4_DTYPES)}, MXFP4), got {q_dtype}")


def geometry_rule(fmt: str | None, heads: int | None, head_dim: int | None, sparse_block_kv: int | None) -> None:
    """The supported geometry: NotImplementedError naming the supported set."""
    for name, v in (("heads", heads), ("head_dim", head_dim), ("sparse_block_kv", sparse_block_kv)):
        if v is not None:
            require_dim(name, v)
    if heads is not None and heads not in HEADS:
        raise NotImplementedError(f"{heads} heads are not supported; supported: {HEADS}")
    if head_dim is not None:
        dims = HEAD_DIMS[fmt or "mxfp8"] if fmt else tuple(sorted({d for v in HEAD_DIMS.values() for d in v}))
        if head_dim not in dims:
            raise NotImplementedError(f"head dim {head_dim} is not supported for {(fmt or 'mxfp8').upper()}; "
                                      f"supported: {dims}")
    if sparse_block_kv is not None and sparse_block_kv not in SPARSE_BLOCKS:
        raise NotImplementedError(f"sparse_block_kv {sparse_block_kv} is not supported; supported: {SPARSE_BLOCKS}")


def sparse_rule(rows: int | None = None, heads: int | None = None, head_dim: int | None = None,
                q_dtype: str | None = None, kv_dtype: str | None = None, q_sf_dtype: str | None = None,
                kv_sf_dtype: str | None = None, weights_dtype: str | None = None,
                num_max_sparse_blocks: int | None = None, sparse_block_kv: int | None = None,
                kv_cache_dtype: str | None = None, page_kv: int | None = None) -> None:
    """q (values, int32 packed UE8M0 [S, H]) MXFP8 e4m3 [S, H, D] or MXFP4 packed [S, H, D/2]; kv the same format
    (contiguous) or a uint8 cache (paged); bf16 weights [S, H]; head_dim is D (unpacked)."""
    fmt = _fmt(q_dtype)
    if kv_dtype is not None and fmt is not None and _fmt(kv_dtype) != fmt:
        raise TypeError(f"kv must be {fmt.upper()} like q, got {kv_dtype}")
    for name, dt in (("q scales", q_sf_dtype), ("kv scales", kv_sf_dtype)):
        require_dtype(name, dt, ("int32",))
    require_dtype("weights", weights_dtype, ("bfloat16",))
    require_dtype("kv_cache", kv_cache_dtype, ("uint8",))
    geometry_rule(fmt, heads, head_dim, sparse_block_kv)
    if rows is not None:
        require_dim("rows", rows)
    if num_max_sparse_blocks is not None:
        require_dim("num_max_sparse_blocks", num_max_sparse_blocks)
        if num_max_sparse_blocks < 1:
            raise ValueError(f"num_max_sparse_blocks must be >= 1, got {num_max_sparse_blocks}")
    if page_kv is not None:
        require_dim("page_kv", page_kv)
        if sparse_block_kv is not None and (page_kv < 1 or page_kv % sparse_block_kv):
            raise ValueError(f"page_kv = {page_kv} must be a positive multiple of sparse_block_kv = "
                             f"{sparse_block_kv} (a block never straddles pages)")


def plan_specs(num_sms: int, heads: int = 64, head_dim: int = 128, fp4: bool = False, **_shape) -> list:
    return [SparseMqaLogitsSpec(heads, head_dim, fp4)]


_GEOMETRY = "H 16/32/64; MXFP8 D 64/128, MXFP4 D 128; sparse blocks 8/16/32 (runtime); QMMA.SF / OMMA.SF"

FAMILY = Family(
    name="sparse_mqa_logits",
    params=PARAMS,
    specs=specs,
    gate=lambda spec: gate_rules(spec.fp4),
    quick_key=lambda s: (s.heads, s.head_dim, s.fp4),
    pdl=True,
    api_modules=("api", "metadata"),
    ops=(
        Op("fp8_fp4_sparse_mqa_logits", sparse_rule,
           "q (MXFP8 e4m3 [S,H,D] | MXFP4 packed [S,H,D/2], int32 UE8M0 [S,H]), kv (values [N,..], int32 [N]), "
           "weights bf16 [S,H]", "bf16 [S, num_max_sparse_blocks * sparse_block_kv]; -inf where not a score",
           _GEOMETRY + "; slot table from get_sparse_mqa_logits_metadata",
           signature="fp8_fp4_sparse_mqa_logits(q, kv, weights, metadata, num_max_sparse_blocks, sparse_block_kv, "
                     "use_unaligned_ks=False)", plan_specs=plan_specs),
        Op("fp8_fp4_paged_sparse_mqa_logits", sparse_rule,
           "q [S,1,H,..] + int32 [S,1,H], kv_cache uint8 [pages, page_kv, 1, D(/2)+4], weights bf16 [S,H]",
           "bf16 [S, num_max_sparse_blocks * sparse_block_kv]; -inf where not a score",
           _GEOMETRY + "; page_kv a multiple of the block; slot table from get_paged_sparse_mqa_logits_metadata",
           signature="fp8_fp4_paged_sparse_mqa_logits(q, kv_cache, weights, metadata, num_max_sparse_blocks, "
                     "sparse_block_kv)", plan_specs=plan_specs),
        Op("get_sparse_mqa_logits_metadata", sparse_rule, "ks, ke int32 [S], indices int32 [S, num_max]",
           "int32 [S, num_max, 2] slot table (first physical row, valid count)",
           "one kernel launch on the GPU (graph-capturable; torch ops for CPU tensors)",
           signature="get_sparse_mqa_logits_metadata(cu_seq_len_k_start, cu_seq_len_k_end, num_kv_tokens, "
                     "sparse_kv_block_indices, qk_dtype, sparse_block_kv, use_unaligned_ks=False)",
           plan_specs=lambda num_sms, **_: []),
        Op("get_paged_sparse_mqa_logits_metadata", sparse_rule,
           "context_lens int32 [S], block_table int32 [S, pages] (each row its request's pages), indices int32 [S] "
           "(request of each row), sparse_kv_block_indices int32 [S, num_max]",
           "int32 [S, num_max, 2] slot table (first physical row, valid count)",
           "one kernel launch on the GPU (graph-capturable; torch ops for CPU tensors)",
           signature="get_paged_sparse_mqa_logits_metadata(context_lens, block_table, indices, page_kv, "
                     "sparse_kv_block_indices, qk_dtype, sparse_block_kv)",
           plan_specs=lambda num_sms, **_: []),
    ),
    sanitizers=("sparse_mqa_logits",),
    benchmarks=("sparse_mqa_logits",),
    deepgemm=(
        Entry("get_sparse_mqa_logits_metadata", SUPPORTED, "get_sparse_mqa_logits_metadata (slot table int32 [S, "
              "num_max, 2], one GPU launch, graph-capturable)", "`use_unaligned_ks` honoured (unaligned ks rejected without it)"),
        Entry("get_paged_sparse_mqa_logits_metadata", SUPPORTED, "get_paged_sparse_mqa_logits_metadata (slot table; "
              "`page_kv` a multiple of `sparse_block_kv`)"),
        Entry("fp8_fp4_sparse_mqa_logits", SUPPORTED, "fp8_fp4_sparse_mqa_logits (MXFP8 / MXFP4; H 16/32/64, D 64/128 "
              "(MXFP4 128), blocks 8/16/32)", "`use_unaligned_ks` accepted (the slot table carries the alignment); "
              "-inf written wherever DeepGEMM leaves the output unspecified"),
        Entry("fp8_fp4_paged_sparse_mqa_logits", SUPPORTED, "fp8_fp4_paged_sparse_mqa_logits (as the contiguous form, "
              "q [S, 1, H, ..])"),
    ),
)
