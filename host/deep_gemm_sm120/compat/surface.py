"""Every public name of DeepGEMM's Python surface (`deep_gemm`, as sgl-deep-gemm 0.2.5 and DeepGEMM main export
it) with what deep_gemm_sm120.compat does for it: the names each kernel family answers for come from its
declaration (`Family.names`, core/names.py), the rest (utilities, runtime controls, names with no SM120
kernel) are listed here. docs/deep_gemm_compat.md is generated from the whole (`python -m
deep_gemm_sm120.compat`; a test keeps it current) and tests check each status against the behaviour."""

from __future__ import annotations

from ..core.names import ALIAS, NOT_PROVIDED, OUT_OF_SCOPE, SUPPORTED, Name, alias
from ..core.registry import registry

GENERIC: tuple[Name, ...] = (
    # ---- cuBLAS(Lt) through torch
    *(
        Name(f"cublaslt_gemm_{lay}", SUPPORTED, "torch.matmul in fp32 accumulation (cuBLAS), for comparisons")
        for lay in ("nt", "nn", "tn", "tt")
    ),
    Name("cublaslt_nvfp4_gemm_nt", NOT_PROVIDED, "use fp8_fp4_gemm_nt with NVFP4 operands"),
    Name("batched_syrk", NOT_PROVIDED, "no SM120 kernel"),
    Name("batched_symm", NOT_PROVIDED, "no SM120 kernel"),
    # ---- MegaMoE / MegaGate (SM100 / SM90 upstream), symmetric memory, locality partitions: out of scope
    *(
        Name(
            n,
            OUT_OF_SCOPE,
            "MegaMoE / MegaGate / symmetric-memory / locality-partition entry points are SM100 "
            "and SM90 kernels upstream and out of scope here (MoE on SM120: the M-grouped GEMMs)",
        )
        for n in (
            "bf16_mega_gate",
            "get_bf16_mega_gate_config",
            "mega_mhc",
            "SymmBuffer",
            "SM90SymmBuffer",
            "NVFP4SymmBuffer",
            "transform_weights_for_mega_moe",
            "transform_weights_for_mega_moe_sm90",
            "transform_scales_for_mega_moe",
            "fp8_fp4_mega_moe",
            "fp4_fp4_mega_moe",
            "nvfp4_mega_moe",
            "bf16_mega_moe",
            "fp8_mega_moe",
            "mega_moe_pre_dispatch",
            "mega_moe_pre_dispatch_sm90",
            "get_block_m_for_mega_moe",
            "get_block_m_for_nvfp4_mega_moe",
            "get_symm_buffer_for_mega_moe",
            "get_symm_buffer_for_sm90_mega_moe",
            "get_num_locality_domains",
            "localize",
            "localize_rows",
        )
    ),
    Name("mega", OUT_OF_SCOPE, "module: every MegaMoE name above, refusing (the same objects)"),
    Name("is_localization_available", SUPPORTED, "False: an SM120 GPU is one locality domain (no MLOPart)"),
    Name("is_localized", SUPPORTED, "False for every tensor"),
    Name("destroy_localizer", SUPPORTED, "no-op (nothing is ever localized)"),
    Name(
        "locality_domain",
        SUPPORTED,
        "module: the questions answered as above, `release_mlopart` a no-op; "
        "allocation in a domain (`empty`, `empty_per_domain`, ...) NotImplementedError",
    ),
    Name(
        "legacy",
        NOT_PROVIDED,
        "module: DeepGEMM's A100 Triton grouped GEMMs; each name refuses naming our kernel to call instead",
    ),
    # ---- version, compile mode, epilogue objects
    Name(
        "__version__", SUPPORTED, "'2.8.1': the DeepGEMM API level followed (`__implementation__` = 'deep_gemm_sm120')"
    ),
    Name("get_compile_mode", SUPPORTED, "the mode in force (0 unless set)"),
    Name(
        "set_compile_mode",
        SUPPORTED,
        "0: compile and launch; 1: compile only (every check runs, each kernel is "
        "JIT-built and loaded, no launch: warm-up); others ValueError",
    ),
    Name(
        "epilogue",
        SUPPORTED,
        "module: `Identity`, `Alpha`, `FP8Quantization` (2.8.1), `FP8CastWithClamp` "
        "(sgl-deep-gemm), `BF16StochasticRounding`; each GEMM's keywords column says which it takes",
    ),
    # ---- layout helpers
    Name(
        "transform_sf_into_required_layout",
        SUPPORTED,
        "transform_sf_into_required_layout",
        "`recipe` as (gran_mn, gran_n, gran_k) or (gran_mn, gran_k); `is_sfa=None` means False; "
        "`disable_ue8m0_cast` as for the GEMMs; `psum_layout` other than None: NotImplementedError",
    ),
    Name("get_mk_alignment_for_contiguous_layout", SUPPORTED, "128 unless set higher"),
    Name(
        "set_mk_alignment_for_contiguous_layout",
        SUPPORTED,
        "multiples of 128 (the kernels' BLOCK_M divides them); others raise ValueError",
    ),
    Name("get_theoretical_mk_alignment_for_contiguous_layout", SUPPORTED, "the current alignment (any expected_m)"),
    alias("get_m_alignment_for_contiguous_layout", "get_mk_alignment_for_contiguous_layout"),
    alias("get_k_alignment_for_contiguous_layout", "get_mk_alignment_for_contiguous_layout"),
    Name("get_mn_major_tma_aligned_tensor", SUPPORTED, "utils.layout: the MN-major copy, 16-byte aligned stride"),
    Name(
        "get_mn_major_tma_aligned_packed_ue8m0_tensor",
        SUPPORTED,
        "utils.layout: DeepGEMM's bytes (K padding "
        "scales 0); FP32 scales that are not powers of two: ValueError (never truncated)",
        "`psum_layout` other than None: NotImplementedError",
    ),
    Name(
        "get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor",
        NOT_PROVIDED,
        "only block-scaled K-grouped GEMMs read this layout",
    ),
    Name(
        "pack_ue8m0_to_int",
        SUPPORTED,
        "utils.math: DeepGEMM's packing (non-negative powers of two or 0; others ValueError)",
    ),
    Name("get_tma_aligned_size", SUPPORTED, "MN rounded up to 16 bytes of elements"),
    Name("ceil_to_ue8m0", SUPPORTED, "utils.math: DeepGEMM's results (0 and tiny scales clamp to the smallest UE8M0)"),
    # ---- runtime controls
    Name("get_num_sms", SUPPORTED, "get_num_sms"),
    Name("set_num_sms", SUPPORTED, "set_num_sms"),
    Name("set_pdl", SUPPORTED, "set_pdl (programmatic dependent launch)"),
    Name("get_pdl", SUPPORTED, "get_pdl"),
    Name(
        "use_deterministic_algorithms",
        SUPPORTED,
        "every kernel is already deterministic (split-K reduces in a fixed order): accepted, recorded",
    ),
    Name("get_deterministic_algorithms", SUPPORTED, "True"),
    Name("set_tc_util", SUPPORTED, "accepted and recorded; SM100 tensor-core power knob, no effect on SM120"),
    Name("get_tc_util", SUPPORTED, "the recorded value"),
    Name("set_block_size_multiple_of", SUPPORTED, "accepted and recorded; tile choice is ours (no effect on results)"),
    Name("set_ignore_compile_dims", SUPPORTED, "accepted (compiled_dims never changes results here)"),
    Name("shutdown", SUPPORTED, "no-op (nothing to release before interpreter exit)"),
    # ---- utilities (deep_gemm.utils / deep_gemm.testing)
    Name(
        "per_token_cast_to_fp8",
        SUPPORTED,
        "utils.math: DeepGEMM 2.8.1's bytes",
        "`use_ue8m0`, `gran_k`, `use_packed_ue8m0` honoured",
    ),
    Name("per_block_cast_to_fp8", SUPPORTED, "utils.math: DeepGEMM 2.8.1's bytes", "`use_ue8m0`, `gran_k` honoured"),
    Name("per_channel_cast_to_fp8", SUPPORTED, "utils.math: DeepGEMM 2.8.1's bytes", "`use_ue8m0`, `gran_k` honoured"),
    Name(
        "per_token_cast_to_fp4",
        SUPPORTED,
        "utils.math: DeepGEMM 2.8.1's bytes (int8 e2m1, no signed zero; a packed row pads with 1.0 scales)",
        "`use_ue8m0`, `gran_k`, `use_packed_ue8m0` honoured; the SM120 kernels take MXFP4 (gran_k 32, UE8M0) from it",
    ),
    Name("calc_diff", SUPPORTED, "testing.calc_diff (also deep_gemm.testing.calc_diff)"),
    Name("per_custom_dims_cast_to_fp8", SUPPORTED, "utils.math: DeepGEMM's results"),
    Name(
        "per_token_cast_to_nvfp4",
        SUPPORTED,
        "utils.math: DeepGEMM 2.8.1's results (e4m3 block scales >= 2**-9)",
        "`gran_k`, `use_packed_e4m3`, `global_scale`; sgl-deep-gemm's `use_packed_ue4m3` by keyword",
    ),
    Name("cast_to_ue4m3", SUPPORTED, "utils.math: round to e4m3, as float32"),
    Name(
        "pack_ue4m3_to_int",
        SUPPORTED,
        "utils.math: 4 UE4M3 bytes per int32; float32 input must already be e4m3 "
        "values (ValueError, never rounded silently)",
    ),
    Name("unpack_ue4m3_from_int", SUPPORTED, "utils.math"),
    Name("unpack_e4m3_sf_from_int", SUPPORTED, "utils.math"),
    Name(
        "transform_ue4m3_sf_into_required_layout",
        SUPPORTED,
        "utils.math: NVFP4 scales -> the packed MN-major int32 layout fp8_fp4_gemm_nt reads with recipe (1, 1, 16)",
    ),
    Name("unpack_ue8m0_from_int", SUPPORTED, "utils.math"),
    Name("transpose_packed_fp4", SUPPORTED, "utils.math"),
    Name("cast_back_from_fp4", SUPPORTED, "utils.math"),
    Name("cast_back_from_fp8", SUPPORTED, "utils.math"),
    Name("ceil_div", SUPPORTED, "utils.math"),
    Name("align", SUPPORTED, "utils.math"),
    Name("init_dist", NOT_PROVIDED, "utils.dist: DeepGEMM's multi-GPU test scaffolding; no multi-GPU kernel here"),
    Name("uneven_all_gather", NOT_PROVIDED, "utils.dist: as init_dist"),
    Name("utils", SUPPORTED, "package: `layout`, `math`, `nvfp4`, `dist` (refusing), `mlopart` (unavailable)"),
    Name(
        "testing",
        SUPPORTED,
        "module: `calc_diff`, `count_bytes`, `get_arch_major`, `assert_bitwise_equal` "
        "(DeepGEMM's `bench` / `bench_kineto` timers are not provided: benchmarks/harness.py times ours)",
    ),
)


def family_entries() -> tuple[Name, ...]:
    """The DeepGEMM names the families declare (their own names, deepgemm=False, are not DeepGEMM's)."""
    return tuple(n for fam in registry().user_families for n in fam.names if n.deepgemm)


ENTRIES: tuple[Name, ...] = (*family_entries(), *GENERIC)

KEYWORDS_USED_BY_CALLERS = (
    "recipe",
    "recipe_a",
    "recipe_b",
    "compiled_dims",
    "disable_ue8m0_cast",
    "alpha",
    "epilogue",
    "use_psum_layout",
    "psum_layout",
    "ensure_zero_padding",
    "expected_m_for_psum_layout",
    "num_groups",
    "is_sfa",
    "clean_logits",
    "max_seqlen_k",
    "logits_dtype",
    "num_splits",
    "use_cublaslt",
)


def render() -> str:
    rows = ["| name | status | maps to / why | keywords |", "|---|---|---|---|"]
    for e in ENTRIES:
        status, does = (ALIAS, e.alias_of) if e.alias_of else (e.status, e.does)
        rows.append(f"| `{e.name}` | {status} | {does.replace('|', '/')} | {e.keywords.replace('|', '/')} |")
    return "\n".join(rows)
