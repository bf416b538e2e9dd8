"""Gated delta rule chunked forward (Qwen3-Next / Qwen3.5 linear attention; docs/gated_delta_rule.md): the
recurrence kernel (impls/sm120_gated_delta_rule_fwd.cuh) and the public op chunk_gated_delta_rule, which runs
the prep family's kernel first. Declarations only (torch-free)."""
from __future__ import annotations

from dataclasses import dataclass

from ...core.limits import SMEM_LIMIT
from ...core.params import Param, ParamList
from ...core.registry import Family, GateRules, KernelSpec, Op
from ...core.rules import require_dim, require_dtype
from ...services.gated_delta_rule_prep import CHUNKS, CXX_ELEM, HEAD_DIM, GdrPrepSpec, align_up, hmma

PARAMS = ParamList(
    Param("tmap_q", "CUtensorMap"), Param("tmap_k", "CUtensorMap"), Param("tmap_v", "CUtensorMap"),
    Param("tmap_tw", "CUtensorMap"), Param("tmap_tu", "CUtensorMap"), Param("tmap_attn", "CUtensorMap"),
    Param("tmap_gate", "CUtensorMap"),
    Param("initial_state", "const float*"), Param("final_state", "float*"), Param("o", "{elem}*"),
    Param("cu_seqlens", "const int32_t*"), Param("seq_len", "uint32_t"), Param("value_heads", "uint32_t"),
    Param("group", "uint32_t"), Param("ready", "const int32_t*"),
)
V_SLICES = (16, 32, 64, 128)
MAX_STAGES = 2
HEAD_DIMS = (HEAD_DIM,)
ELEM_DTYPES = {"bfloat16": "bf16", "float16": "fp16"}
# 99 KiB per block on SM120: the recurrence double-buffers 32-token chunks. Elsewhere 32 too: on the H200 chunk 32
# was faster than 64 at all 43 shapes of benchmarks/bench_gated_delta_rule.py (docs/gated_delta_rule.md)
SM120_CHUNK, OTHER_CHUNK = 32, 32


def stage_bytes(chunk: int, vslice: int) -> int:
    """GdrFwdConfig::kStageBytes: q, k tiles, the v slice, Tw, Tu, attn and gates, each 1024-aligned."""
    mat = align_up(chunk * chunk * 2, 1024)
    return 2 * chunk * HEAD_DIM * 2 + align_up(chunk * vslice * 2, 1024) + 3 * mat + align_up(chunk * 16, 1024)


def out_bytes(chunk: int, vslice: int, ksplit: int = 1) -> int:
    """The per-group o staging, plus the K-split exchange (GdrFwdConfig::kOutBytes + kXchBytes)."""
    warps = vslice // 16 * ksplit
    return vslice // 16 * chunk * 16 * 2 + (2 * warps * 2 * (chunk // 8 * 4 * 32) * 4 if ksplit > 1 else 0)


def fwd_stages(chunk: int, vslice: int, ksplit: int = 1) -> int:
    """As many stages as fit the SM120 budget, at most MAX_STAGES (64-token chunks fit one); 0: does not fit."""
    free = SMEM_LIMIT - out_bytes(chunk, vslice, ksplit)
    return max(0, min(MAX_STAGES, free // (stage_bytes(chunk, vslice) + 16)))


@dataclass(frozen=True)
class GdrFwdSpec(KernelSpec):
    chunk: int = 32
    vslice: int = 64
    elem: str = "bf16"
    ksplit: int = 1

    @property
    def stages(self) -> int:
        return fwd_stages(self.chunk, self.vslice, self.ksplit)

    @property
    def name(self) -> str:
        split = f"_k{self.ksplit}" if self.ksplit > 1 else ""
        return f"gated_delta_rule_fwd_c{self.chunk}_v{self.vslice}{split}_s{self.stages}_{self.elem}"

    @property
    def threads(self) -> int:
        return (self.vslice // 16 * self.ksplit + 1) * 32

    @property
    def smem_bytes(self) -> int:
        return self.stages * (stage_bytes(self.chunk, self.vslice) + 16) + out_bytes(self.chunk, self.vslice,
                                                                                      self.ksplit)

    def template_args(self) -> list[str]:
        return [str(self.chunk), str(self.vslice), str(self.ksplit), str(self.stages), CXX_ELEM[self.elem]]

    def type_subst(self) -> dict[str, str]:
        return {"elem": CXX_ELEM[self.elem]}


def plans(chunk: int) -> tuple[tuple[int, int], ...]:
    """Every (V slice, K split) the recurrence is built for at this chunk size. 64-token chunks stop at 64-column
    slices (nine warps of a 128-column CTA leave ptxas 168 registers a thread, and the 64-token state step spilled
    there). The K split of two exists only on 16-column slices of 32- and 64-token chunks, the one place it
    measured faster on the H200 (a split of four, or of wider slices, measured slower: docs/gated_delta_rule.md);
    it keeps the unsplit kernel's stage count."""
    slices = V_SLICES if chunk < 64 else V_SLICES[:-1]
    split = ((16, 2),) if chunk >= 32 and fwd_stages(chunk, 16, 2) == fwd_stages(chunk, 16) else ()
    return tuple((vs, 1) for vs in slices) + split


def specs() -> list[GdrFwdSpec]:
    return [GdrFwdSpec(c, vs, e, ks) for c in CHUNKS for vs, ks in plans(c) for e in CXX_ELEM]


def choose_plan(num_seqs: int, value_heads: int, num_sms: int, chunk: int) -> tuple[int, int]:
    """(V slice, K split). The V slice: the widest that still gives every other SM a CTA (wider slices share each
    loaded q / k / factor tile among more warps). Then, on 16-column slices, two warps per 16 value columns along
    the head dim while that stays within one warp per tensor-core partition (four an SM): the few-head, long
    sequence shapes. Tuned on the H200 (benchmarks/bench_gated_delta_rule.py --sweep; docs/gated_delta_rule.md)."""
    heads = num_seqs * value_heads
    built = plans(chunk)
    widest_first = sorted((vs for vs, ks in built if ks == 1), reverse=True)
    vs = next((v for v in widest_first if 2 * heads * (HEAD_DIM // v) >= num_sms), V_SLICES[0])
    split = (vs, 2) in built and heads * (HEAD_DIM // 16) * 2 <= 4 * num_sms
    return vs, 2 if split else 1


def recurrence_ctas(num_seqs: int, value_heads: int, vslice: int) -> int:
    """The recurrence's grid: one CTA per (V slice, value head, sequence)."""
    return num_seqs * value_heads * (HEAD_DIM // vslice)


def choose_overlap(recurrence_ctas: int, num_sms: int, pdl: bool) -> int:
    """CTAs of a persistent prep grid that runs beside the recurrence (0: the prep runs first, one CTA per item).
    Overlapped when the recurrence leaves at least half the SMs idle (few heads, whose long chunk walk then starts
    at once instead of after the whole prep); the prep gets the idle SMs. Needs PDL: without it the recurrence
    would start only after the (then narrower) prep grid anyway."""
    if not pdl or 2 * recurrence_ctas > num_sms:
        return 0
    return num_sms - recurrence_ctas


def gdr_rule(dtype: str | None = None, beta_dtype: str | None = None, g_dtype: str | None = None,
             initial_state_dtype: str | None = None, heads: int | None = None, value_heads: int | None = None,
             head_dim: int | None = None, value_dim: int | None = None, chunk_size: int | None = None) -> None:
    """q / k / v bf16 or fp16 (one dtype), g fp32, beta q's dtype or fp32, initial_state fp32; HV a positive
    multiple of H; K = V = 128 (NotImplementedError otherwise); chunk_size 16 / 32 / 64 or None (the device's
    default_chunk_size())."""
    require_dtype("q / k / v", dtype, tuple(ELEM_DTYPES))
    require_dtype("g (log-space decay)", g_dtype, ("float32",))
    require_dtype("beta", beta_dtype, (dtype or "bfloat16", "float32") if dtype else tuple(ELEM_DTYPES) + ("float32",))
    require_dtype("initial_state", initial_state_dtype, ("float32",))
    for name, x in (("heads", heads), ("value_heads", value_heads), ("head_dim", head_dim), ("value_dim", value_dim)):
        if x is not None:
            require_dim(name, x)
    if heads is not None and value_heads is not None and (heads == 0 or value_heads % heads):
        raise ValueError(f"HV = {value_heads} value heads must be a positive multiple of H = {heads} q/k heads")
    for name, x in (("K", head_dim), ("V", value_dim)):
        if x is not None and x not in HEAD_DIMS:
            raise NotImplementedError(f"head dim {name} = {x} is not supported yet; supported: K = V = 128")
    if chunk_size is not None:
        if not isinstance(chunk_size, int) or isinstance(chunk_size, bool):
            raise TypeError(f"chunk_size must be None or an int, got {type(chunk_size).__name__}")
        if chunk_size not in CHUNKS:
            raise NotImplementedError(f"chunk_size {chunk_size} is not supported; supported: {CHUNKS}")


def plan_specs(num_sms: int, dtype=None, chunk_size: int | None = None, num_seqs: int = 1, value_heads: int = 1,
               **_shape) -> list:
    elem = ELEM_DTYPES.get(str(dtype).replace("torch.", ""), "bf16")
    chunk = chunk_size or SM120_CHUNK
    vs, ks = choose_plan(num_seqs, value_heads, num_sms, chunk)
    # the persistent prep too where the launch overlaps (with PDL on, the default; the one-item prep without)
    overlap = choose_overlap(recurrence_ctas(num_seqs, value_heads, vs), num_sms, True) > 0
    return [GdrPrepSpec(chunk, elem)] + [GdrPrepSpec(chunk, elem, True)] * overlap + [GdrFwdSpec(chunk, vs, elem, ks)]


FAMILY = Family(
    name="gated_delta_rule",
    header="impls/sm120_gated_delta_rule_fwd.cuh",
    kernel="sm120::sm120_gated_delta_rule_fwd_kernel",
    params=PARAMS,
    specs=specs,
    gate=lambda spec: GateRules(required={"sm120": (hmma(spec.elem), "LDSM", "UTMALDG"),
                                          "sm90": (hmma(spec.elem), "LDSM", "UTMALDG")}),
    quick_key=lambda s: (s.chunk, s.vslice, s.ksplit),
    pdl=True,
    ops=(Op("chunk_gated_delta_rule", gdr_rule,
            "q, k [B,T,H,128], v [B,T,HV,128] bf16/fp16; g fp32 [B,T,HV]; beta [B,T,HV]",
            "(o [B,T,HV,128] in v's dtype, final_state fp32 [N,HV,128,128] or None)",
            "FLA's forward semantics; varlen (cu_seqlens), initial state, in-kernel q/k l2norm; chunk 16/32/64 "
            "(default 32); forward only (backward raises NotImplementedError)",
            signature="chunk_gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None, "
                      "output_final_state=False, cu_seqlens=None, use_qk_l2norm_in_kernel=False, chunk_size=None)",
            plan_specs=plan_specs),),
    exports=("contract.chunk_gated_delta_rule_bwd", "contract.default_chunk_size"),
    sanitizers=("gated_delta_rule",),
    benchmarks=("gated_delta_rule",),
)
