"""MQA logits (impls/sm120_mqa_logits.cuh): the DeepSeek V3.2/V4 indexer's scores, dense FP8 and FP4 forms
(the paged form is families/paged_mqa_logits; docs/mqa_logits.md). Declarations only (torch-free): parameters,
specs, the rule and the SASS the gate demands."""
from __future__ import annotations

from dataclasses import dataclass

from ...core.gemm import ceil_div
from ...core.limits import SMEM_LIMIT
from ...core.params import Param, ParamList
from ...core.registry import Family, GateRules, KernelSpec, Op
from ...core.deepgemm import Entry, SUPPORTED
from ...core.rules import require_dim, require_dtype

PARAMS = ParamList(
    Param("tmap_q", "CUtensorMap"), Param("tmap_kv", "CUtensorMap"),
    Param("kv_scale", "const float*"), Param("q_sf", "const uint32_t*"), Param("kv_sf", "const uint32_t*"),
    Param("weights", "const float*"),
    Param("ks", "const int32_t*"), Param("ke", "const int32_t*"), Param("logits", "{logit}*"),
    Param("seq_len", "uint32_t"), Param("seq_len_kv", "uint32_t"), Param("ld_weights", "uint32_t"),
    Param("ld_logits", "uint32_t"),
)
CXX_LOGIT = {"fp32": "float", "bf16": "sm120::bf16"}
HEADS = (16, 32, 64)
HEAD_DIMS = (64, 128)
FP4_HEAD_DIMS = (128,)        # one packed UE8M0 word (four 1x32 blocks) per q row and per key
FP4_DTYPES = ("uint8", "int8", "float4_e2m1fn_x2")
ROWS = 64                     # M per CTA: 64 / heads queries
BLOCK_KV = 128
MAX_STAGES = 8
MODES = ("clean", "plain", "compressed")   # clean: -inf outside [ks, ke); compressed: column = key - ks
LOGIT_ALIGN_BYTES = 1024      # DeepGEMM pads the logits row stride to this


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

    @property
    def smem_bytes(self) -> int:
        return (ROWS + self.stages * self.tile_keys) * self.row_bytes + 8 * (2 * self.stages + self.barriers)

    @property
    def threads(self) -> int:
        return 4 * 32 + 32   # four math warps and the producer warp

    def type_subst(self) -> dict[str, str]:
        return {"logit": CXX_LOGIT[self.logit_dtype]}


@dataclass(frozen=True)
class MqaLogitsSpec(MqaSpecGeometry, KernelSpec):
    heads: int = 64
    head_dim: int = 128
    logit_dtype: str = "fp32"
    mode: str = "clean"
    fp4: bool = False

    @property
    def tile_keys(self) -> int:
        return BLOCK_KV

    @property
    def name(self) -> str:
        return (f"{'fp4' if self.fp4 else 'fp8'}_mqa_logits_h{self.heads}_d{self.head_dim}_kv{BLOCK_KV}_s{self.stages}_"
                f"{self.logit_dtype}_{self.mode}")

    @property
    def block_q(self) -> int:
        return ROWS // self.heads

    def template_args(self) -> list[str]:
        b = lambda x: "true" if x else "false"  # noqa: E731
        return [str(self.heads), str(self.head_dim), str(BLOCK_KV), str(self.stages), b(self.fp4),
                CXX_LOGIT[self.logit_dtype], b(self.mode == "clean"), b(self.mode == "compressed")]


def specs() -> list[MqaLogitsSpec]:
    return [MqaLogitsSpec(h, d, t, mode, fp4) for fp4 in (False, True) for h in HEADS
            for d in (FP4_HEAD_DIMS if fp4 else HEAD_DIMS) for t in CXX_LOGIT for mode in MODES]


def logits_row_stride(seq_len_kv: int, max_seqlen_k: int, elem_bytes: int) -> int:
    """DeepGEMM's padded row stride (elements): a multiple of 1024 bytes, with a tile of slack past the keys."""
    per = LOGIT_ALIGN_BYTES // elem_bytes
    cols = seq_len_kv + BLOCK_KV if max_seqlen_k == 0 else ceil_div(max_seqlen_k, BLOCK_KV) * BLOCK_KV
    return ceil_div(cols, per) * per


def operand_rule(fp4: bool, q_dtype: str | None, kv_dtype: str | None, q_sf_dtype: str | None,
                 kv_sf_dtype: str | None, weights_dtype: str | None, logits_dtype: str | None, heads: int | None,
                 head_dim: int | None) -> None:
    """What the dense and paged forms share: operand dtypes (FP8: e4m3 values, fp32 per-key scales; FP4: packed
    e2m1 with int32 packed UE8M0 words), fp32 weights, fp32 / bf16 logits, and the supported heads and head dims.
    None skips a check (is_supported's unspecified values; the paged cache is uint8, checked by its own rule)."""
    if fp4:
        require_dtype("q", q_dtype, FP4_DTYPES)
        require_dtype("q scales", q_sf_dtype, ("int32",))
        if kv_dtype is not None:
            require_dtype("kv", kv_dtype, FP4_DTYPES)
        require_dtype("kv scales", kv_sf_dtype, ("int32",))
    else:
        require_dtype("q", q_dtype, ("float8_e4m3fn",))
        if kv_dtype is not None:
            require_dtype("kv", kv_dtype, ("float8_e4m3fn",))
        require_dtype("kv scales", kv_sf_dtype, ("float32",))
    require_dtype("weights", weights_dtype, ("float32",), not_yet=("bfloat16",))
    require_dtype("logits_dtype", logits_dtype, ("float32", "bfloat16"))
    for name, v in (("heads", heads), ("head_dim", head_dim)):
        if v is not None:
            require_dim(name, v)
    if heads is not None and heads not in HEADS:
        raise NotImplementedError(f"{heads} heads are not supported; supported: {HEADS}")
    dims = FP4_HEAD_DIMS if fp4 else HEAD_DIMS
    if head_dim is not None and head_dim not in dims:
        raise NotImplementedError(f"head dim {head_dim} is not supported for {'FP4' if fp4 else 'FP8'}; "
                                  f"supported: {dims}")


def gate_rules(fp4: bool) -> GateRules:
    """SM120: the full-rate block-scaled MMA, FP8 with unit scales (QMMA.SF) or MXFP4 (OMMA.SF), never the
    half-rate unscaled forms. sm_90a: the emulation, whose spills are reported, not failed."""
    return GateRules(required={"sm120": ("OMMA.SF" if fp4 else "QMMA.SF", "UTMALDG", "LDSM"),
                               "sm90": ("HMMA.16816.F32", "UTMALDG", "LDSM")},
                     forbidden={"sm120": (r"^(QMMA\.16832|OMMA\.16864)",)}, emulation_spills_allowed=True)


def mqa_logits_rule(seq_len: int | None = None, seq_len_kv: int | None = None, heads: int | None = None,
                    head_dim: int | None = None, q_dtype: str | None = None, kv_dtype: str | None = None,
                    q_sf_dtype: str | None = None, kv_sf_dtype: str | None = None, weights_dtype: str | None = None,
                    logits_dtype: str | None = None, clean_logits: bool = True, max_seqlen_k: int = 0,
                    fp4: bool = False) -> None:
    """FP8: q [S, H, D] e4m3 (no q scales), kv [SK, D] e4m3 with fp32 per-key scales. FP4: q [S, H, D/2] and
    kv [SK, D/2] packed e2m1 with int32 packed UE8M0 1x32 scales [S, H] and [SK]. weights fp32 [S, H];
    head_dim is D (unpacked)."""
    operand_rule(fp4, q_dtype, kv_dtype, q_sf_dtype, kv_sf_dtype, weights_dtype, logits_dtype, heads, head_dim)
    for name, v in (("seq_len", seq_len), ("seq_len_kv", seq_len_kv)):
        if v is not None:
            require_dim(name, v)
    if not isinstance(max_seqlen_k, int) or isinstance(max_seqlen_k, bool) or max_seqlen_k < 0:
        raise ValueError(f"max_seqlen_k must be a non-negative int, got {max_seqlen_k!r}")
    if max_seqlen_k > 0 and clean_logits:
        raise ValueError("compressed logits (max_seqlen_k > 0) require clean_logits=False (DeepGEMM's contract)")


def plan_specs(num_sms: int, heads: int = 64, head_dim: int = 128, logits_dtype=None, clean_logits: bool = True,
               max_seqlen_k: int = 0, fp4: bool = False, **_shape) -> list:
    t = "bf16" if logits_dtype is not None and "bfloat16" in str(logits_dtype) else "fp32"
    mode = "compressed" if max_seqlen_k else ("clean" if clean_logits else "plain")
    return [MqaLogitsSpec(heads, head_dim, t, mode, fp4)]


FAMILY = Family(
    name="mqa_logits",
    params=PARAMS,
    specs=specs,
    gate=lambda spec: gate_rules(spec.fp4),
    quick_key=lambda s: (s.heads, s.head_dim, s.fp4),
    pdl=True,
    ops=(Op("fp8_fp4_mqa_logits", mqa_logits_rule, "q e4m3 [S,H,D], kv e4m3 [SK,D] + fp32 [SK], weights fp32 [S,H]",
            "fp32 or bf16 [S, SK] (row stride padded to 1024 B) or compressed [S, max_seqlen_k]",
            "H 16/32/64; FP8 D 64/128 (QMMA.SF, unit scales, kv scale after the product); FP4 D 128 "
            "(OMMA.SF with packed UE8M0 1x32 scales)",
            aliases=("fp8_mqa_logits",),
            signature="fp8_fp4_mqa_logits(q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, "
                      "clean_logits=True, max_seqlen_k=0, logits_dtype=torch.float32)",
            plan_specs=plan_specs),),
    sanitizers=("mqa_logits",),
    benchmarks=("mqa_logits",),
    deepgemm=(
        Entry("fp8_fp4_mqa_logits", SUPPORTED, "fp8_fp4_mqa_logits (FP8; FP4 with packed UE8M0 1x32 scales)",
              "both argument forms: an int 6th positional is max_seqlen_k (sgl-deep-gemm 0.2.5, whose schedule_meta is "
              "accepted and unused), a bool is clean_logits (DeepGEMM main); `logits_dtype` fp32 / bf16; bf16 weights: "
              "NotImplementedError"),
        Entry("fp8_mqa_logits", SUPPORTED, "fp8_fp4_mqa_logits with q a tensor", "as fp8_fp4_mqa_logits"),
        Entry("get_mqa_logits_metadata", SUPPORTED, "an empty int32 tensor: the SM120 dense kernel finds each CTA's key "
              "range on the device"),
    ),
)
