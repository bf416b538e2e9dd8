"""Every public name of DeepGEMM's Python surface (`deep_gemm`, as sgl-deep-gemm 0.2.5 and DeepGEMM main export
it) with what deep_gemm_sm120.compat does for it. docs/deep_gemm_compat.md is generated from this table
(`python -m deep_gemm_sm120.compat.surface`; a test keeps it current) and tests check each status against the
behaviour."""
from __future__ import annotations

from dataclasses import dataclass

SUPPORTED, ALIAS, NOT_YET, OUT_OF_SCOPE, NOT_PROVIDED = "supported", "alias", "not yet", "out of scope", "not provided"


@dataclass(frozen=True)
class Entry:
    name: str
    status: str
    note: str = ""       # what it maps to, which issue brings it, or why not
    keywords: str = ""   # how its keywords are honoured


_BS_KW = ("`recipe` / `recipe_a` / `recipe_b` honoured; `alpha=None` means 1; `disable_ue8m0_cast` either way "
          "requires power-of-two FP32 scales (others raise `ValueError`: never reinterpreted); "
          "`compiled_dims` accepted (JIT hint, no effect on results); `epilogue` other than None: "
          "`NotImplementedError`")
_BF16_KW = "`compiled_dims` accepted (no effect); `alpha` None or 1 only; `epilogue` other than None: NotImplementedError"
_M_CONTIG_KW = ("`use_psum_layout` honoured; `ensure_zero_padding=True` zeroes d's psum padding rows (per-row "
                "layouts: -1 rows are never written); `expected_m_for_psum_layout` accepted (tile hint)")

ENTRIES: tuple[Entry, ...] = (
    # ---- block-scaled GEMMs
    Entry("fp8_fp4_gemm_nt", SUPPORTED, "fp8_fp4_gemm_nt (FP8, MXFP4, NVFP4, mixed)", _BS_KW),
    Entry("fp8_gemm_nt", ALIAS, "fp8_fp4_gemm_nt"),
    Entry("fp4_gemm_nt", ALIAS, "fp8_fp4_gemm_nt"),
    *(Entry(f"fp8_fp4_gemm_{lay}", NOT_PROVIDED, "the SM120 block-scaled kernel reads K-major operands (NT) only: "
            "pass contiguous transposes to fp8_fp4_gemm_nt") for lay in ("nn", "tn", "tt")),
    *(Entry(f"fp8_gemm_{lay}", ALIAS, f"fp8_fp4_gemm_{lay}") for lay in ("nn", "tn", "tt")),
    Entry("m_grouped_fp8_fp4_gemm_nt_contiguous", SUPPORTED, "m_grouped_fp8_fp4_gemm_nt_contiguous",
          _BS_KW + "; " + _M_CONTIG_KW),
    Entry("m_grouped_fp8_gemm_nt_contiguous", ALIAS, "m_grouped_fp8_fp4_gemm_nt_contiguous"),
    Entry("m_grouped_fp4_gemm_nt_contiguous", ALIAS, "m_grouped_fp8_fp4_gemm_nt_contiguous"),
    Entry("m_grouped_fp8_fp4_gemm_nn_contiguous", NOT_PROVIDED, "MN-major block-scaled B is not supported (NT only)"),
    Entry("m_grouped_fp8_gemm_nn_contiguous", ALIAS, "m_grouped_fp8_fp4_gemm_nn_contiguous"),
    Entry("m_grouped_fp8_fp4_gemm_nt_masked", SUPPORTED, "m_grouped_fp8_fp4_gemm_nt_masked", _BS_KW),
    Entry("m_grouped_fp8_gemm_nt_masked", ALIAS, "m_grouped_fp8_fp4_gemm_nt_masked"),
    Entry("m_grouped_fp4_gemm_nt_masked", ALIAS, "m_grouped_fp8_fp4_gemm_nt_masked"),
    Entry("fp8_m_grouped_gemm_nt_masked", ALIAS, "m_grouped_fp8_fp4_gemm_nt_masked"),
    Entry("k_grouped_fp8_gemm_tn_contiguous", NOT_PROVIDED, "no block-scaled K-grouped kernel (BF16 K-grouped exists)"),
    Entry("k_grouped_fp8_gemm_nt_contiguous", NOT_PROVIDED, "no block-scaled K-grouped kernel"),
    Entry("k_grouped_fp4_gemm_nt_contiguous", NOT_PROVIDED, "no block-scaled K-grouped kernel"),
    # ---- BF16 GEMMs
    *(Entry(f"bf16_gemm_{lay}", SUPPORTED, f"bf16_gemm_{lay}", _BF16_KW) for lay in ("nt", "nn", "tn", "tt")),
    Entry("m_grouped_bf16_gemm_nt_contiguous", SUPPORTED, "m_grouped_bf16_gemm_nt_contiguous",
          _M_CONTIG_KW + "; `compiled_dims` accepted; `epilogue`: NotImplementedError"),
    Entry("m_grouped_bf16_gemm_nn_contiguous", NOT_PROVIDED, "M-grouped BF16 takes a K-major B ([G, N, K]) only"),
    Entry("m_grouped_bf16_gemm_nt_masked", SUPPORTED, "m_grouped_bf16_gemm_nt_masked",
          "`compiled_dims` accepted; `epilogue`: NotImplementedError"),
    Entry("bf16_m_grouped_gemm_nt_masked", ALIAS, "m_grouped_bf16_gemm_nt_masked"),
    Entry("k_grouped_bf16_gemm_tn_contiguous", SUPPORTED, "k_grouped_bf16_gemm_tn_contiguous (DeepGEMM's order: "
          "a, b, d, ks, grouped_layout, c)", "`ks` (CPU ints) required: without it the K split lives only on the "
          "device; `use_psum_layout=True`: NotImplementedError; `compiled_dims` accepted"),
    # ---- hyper-connection
    Entry("tf32_hc_prenorm_gemm", SUPPORTED, "tf32_hc_prenorm_gemm", "`num_splits` honoured (DeepGEMM's split of "
          "64-wide K blocks); N up to 32 (any, not only multiples of 8); K a multiple of 8 (not only of 64)"),
    Entry("einsum", SUPPORTED, "einsum: bmk,bnk->mn, bhr,hdr->bhd, bhd,hdr->bhr (runtime shapes); other "
          "expressions raise NotImplementedError listing these", "`c` honoured for bmk,bnk->mn (fp32 d: c is d "
          "accumulates); `use_cublaslt=True` computes with torch.einsum (cuBLAS); `epilogue` other than None: "
          "NotImplementedError"),
    Entry("fp8_einsum", SUPPORTED, "fp8_einsum: bhr,hdr->bhd with recipe (1, 128, 128) (DeepGEMM's other two "
          "expressions are SM100-only there: NotImplementedError)", "`c` honoured (d's dtype and strides); "
          "unpacked UE8M0 scales (float32 powers of two or float8_e8m0fnu); `epilogue` other than None: "
          "NotImplementedError"),
    # ---- cuBLAS(Lt) through torch
    *(Entry(f"cublaslt_gemm_{lay}", SUPPORTED, "torch.matmul in fp32 accumulation (cuBLAS), for comparisons")
      for lay in ("nt", "nn", "tn", "tt")),
    Entry("cublaslt_nvfp4_gemm_nt", NOT_PROVIDED, "use fp8_fp4_gemm_nt with NVFP4 operands"),
    # ---- families still to land
    Entry("fp8_fp4_mqa_logits", SUPPORTED, "fp8_fp4_mqa_logits (FP8; FP4 with packed UE8M0 1x32 scales)",
          "both argument forms: an int 6th positional is max_seqlen_k (sgl-deep-gemm 0.2.5, whose schedule_meta is "
          "accepted and unused), a bool is clean_logits (DeepGEMM main); `logits_dtype` fp32 / bf16; bf16 weights: "
          "NotImplementedError"),
    Entry("fp8_mqa_logits", SUPPORTED, "fp8_fp4_mqa_logits with q a tensor", "as fp8_fp4_mqa_logits"),
    Entry("get_mqa_logits_metadata", SUPPORTED, "an empty int32 tensor: the SM120 dense kernel finds each CTA's key "
          "range on the device"),
    Entry("get_paged_mqa_logits_metadata", SUPPORTED, "get_paged_mqa_logits_metadata (GPU-computed, "
          "graph-capturable)", "`indices` (varlen, SM100-only upstream): NotImplementedError"),
    Entry("fp8_fp4_paged_mqa_logits", SUPPORTED, "fp8_fp4_paged_mqa_logits", "`clean_logits`, `logits_dtype` "
          "honoured; 1-D and 2-D context_lens; `indices`: NotImplementedError"),
    Entry("fp8_paged_mqa_logits", SUPPORTED, "fp8_fp4_paged_mqa_logits with q a tensor"),
    Entry("get_sparse_mqa_logits_metadata", SUPPORTED, "get_sparse_mqa_logits_metadata (slot table int32 [S, "
          "num_max, 2], one GPU launch, graph-capturable)", "`use_unaligned_ks` honoured (unaligned ks rejected without it)"),
    Entry("get_paged_sparse_mqa_logits_metadata", SUPPORTED, "get_paged_sparse_mqa_logits_metadata (slot table; "
          "`page_kv` a multiple of `sparse_block_kv`)"),
    Entry("fp8_fp4_sparse_mqa_logits", SUPPORTED, "fp8_fp4_sparse_mqa_logits (MXFP8 / MXFP4; H 16/32/64, D 64/128 "
          "(MXFP4 128), blocks 8/16/32)", "`use_unaligned_ks` accepted (the slot table carries the alignment); "
          "-inf written wherever DeepGEMM leaves the output unspecified"),
    Entry("fp8_fp4_paged_sparse_mqa_logits", SUPPORTED, "fp8_fp4_paged_sparse_mqa_logits (as the contiguous form, "
          "q [S, 1, H, ..])"),
    Entry("batched_syrk", NOT_PROVIDED, "no SM120 kernel"),
    Entry("batched_symm", NOT_PROVIDED, "no SM120 kernel"),
    # ---- MegaMoE, symmetric memory, locality: out of scope (issue 15)
    *(Entry(n, OUT_OF_SCOPE, "MegaMoE / symmetric-memory / locality entry points are out of scope")
      for n in ("bf16_mega_gate", "mega_mhc", "SymmBuffer", "SM90SymmBuffer", "transform_weights_for_mega_moe",
                "transform_weights_for_mega_moe_sm90", "transform_scales_for_mega_moe", "fp8_fp4_mega_moe",
                "nvfp4_mega_moe", "bf16_mega_moe", "fp8_mega_moe", "mega_moe_pre_dispatch",
                "mega_moe_pre_dispatch_sm90", "get_block_m_for_mega_moe", "get_symm_buffer_for_mega_moe",
                "get_symm_buffer_for_sm90_mega_moe", "get_num_locality_domains", "is_localization_available",
                "localize", "localize_rows", "is_localized", "destroy_localizer")),
    # ---- layout helpers
    Entry("transform_sf_into_required_layout", SUPPORTED, "transform_sf_into_required_layout",
          "`recipe` as (gran_mn, gran_n, gran_k) or (gran_mn, gran_k); `is_sfa=None` means False; "
          "`disable_ue8m0_cast` as for the GEMMs; `psum_layout` other than None: NotImplementedError"),
    Entry("get_mk_alignment_for_contiguous_layout", SUPPORTED, "128 unless set higher"),
    Entry("set_mk_alignment_for_contiguous_layout", SUPPORTED, "multiples of 128 (the kernels' BLOCK_M divides them); "
          "others raise ValueError"),
    Entry("get_theoretical_mk_alignment_for_contiguous_layout", SUPPORTED, "the current alignment (any expected_m)"),
    Entry("get_m_alignment_for_contiguous_layout", ALIAS, "get_mk_alignment_for_contiguous_layout"),
    Entry("get_k_alignment_for_contiguous_layout", ALIAS, "get_mk_alignment_for_contiguous_layout"),
    Entry("get_mn_major_tma_aligned_tensor", SUPPORTED, "quant.get_mn_major_tma_aligned_tensor"),
    Entry("get_mn_major_tma_aligned_packed_ue8m0_tensor", SUPPORTED, "quant.get_mn_major_tma_aligned_packed_ue8m0_tensor",
          "`psum_layout` other than None: NotImplementedError"),
    Entry("get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor", NOT_PROVIDED,
          "only block-scaled K-grouped GEMMs read this layout"),
    Entry("pack_ue8m0_to_int", SUPPORTED, "quant.pack_ue8m0_to_int"),
    Entry("get_tma_aligned_size", SUPPORTED, "MN rounded up to 16 bytes of elements"),
    Entry("ceil_to_ue8m0", SUPPORTED, "quant.ceil_to_ue8m0"),
    # ---- runtime controls
    Entry("get_num_sms", SUPPORTED, "get_num_sms"),
    Entry("set_num_sms", SUPPORTED, "set_num_sms"),
    Entry("set_pdl", SUPPORTED, "set_pdl (programmatic dependent launch)"),
    Entry("get_pdl", SUPPORTED, "get_pdl"),
    Entry("use_deterministic_algorithms", SUPPORTED, "every kernel is already deterministic (split-K reduces in a "
          "fixed order): accepted, recorded"),
    Entry("get_deterministic_algorithms", SUPPORTED, "True"),
    Entry("set_tc_util", SUPPORTED, "accepted and recorded; SM100 tensor-core power knob, no effect on SM120"),
    Entry("get_tc_util", SUPPORTED, "the recorded value"),
    Entry("set_block_size_multiple_of", SUPPORTED, "accepted and recorded; tile choice is ours (no effect on results)"),
    Entry("set_ignore_compile_dims", SUPPORTED, "accepted (compiled_dims never changes results here)"),
    Entry("shutdown", SUPPORTED, "no-op (nothing to release before interpreter exit)"),
    # ---- utilities (deep_gemm.utils / deep_gemm.testing)
    Entry("per_token_cast_to_fp8", SUPPORTED, "quant.per_token_cast_to_fp8", "`use_ue8m0`, `gran_k`, "
          "`use_packed_ue8m0` honoured"),
    Entry("per_block_cast_to_fp8", SUPPORTED, "quant.per_block_cast_to_fp8", "`use_ue8m0`, `gran_k` honoured"),
    Entry("per_channel_cast_to_fp8", SUPPORTED, "quant.per_channel_cast_to_fp8", "`use_ue8m0`, `gran_k` honoured"),
    Entry("per_token_cast_to_fp4", SUPPORTED, "quant.per_token_cast_to_fp4 (MXFP4)", "`gran_k` must be 32 and "
          "`use_ue8m0` True (MXFP4 is the SM120 FP4 format with UE8M0 scales); `use_packed_ue8m0` honoured"),
    Entry("calc_diff", SUPPORTED, "testing.calc_diff (also deep_gemm.testing.calc_diff)"),
)

KEYWORDS_USED_BY_CALLERS = ("recipe", "recipe_a", "recipe_b", "compiled_dims", "disable_ue8m0_cast", "alpha",
                            "epilogue", "use_psum_layout", "psum_layout", "ensure_zero_padding",
                            "expected_m_for_psum_layout", "num_groups", "is_sfa", "clean_logits", "max_seqlen_k",
                            "logits_dtype", "num_splits", "use_cublaslt")


def render() -> str:
    rows = ["| name | status | maps to / why | keywords |", "|---|---|---|---|"]
    for e in ENTRIES:
        rows.append(f"| `{e.name}` | {e.status} | {e.note.replace('|', '/')} | {e.keywords.replace('|', '/')} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(render())
