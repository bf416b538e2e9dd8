"""`is_supported`: answers whether a call would run, without raising and without touching CUDA
unless a device is given."""
from __future__ import annotations

from .arch import SM120_TARGETS, emulation_requested, target_for_capability

_DENSE = {"bf16_gemm_nt", "bf16_gemm_nn", "bf16_gemm_tn", "bf16_gemm_tt"}
_OPS = _DENSE | {"k_grouped_bf16_gemm_tn_contiguous", "m_grouped_bf16_gemm_nt_contiguous", "m_grouped_bf16_gemm_nt_masked"}
_BLOCK_SCALED = {"fp8_gemm_nt", "fp8_fp4_gemm_nt", "m_grouped_fp8_gemm_nt_contiguous", "m_grouped_fp8_gemm_nt_masked",
                 "m_grouped_fp8_fp4_gemm_nt_contiguous", "m_grouped_fp8_fp4_gemm_nt_masked"}
_OPS = _OPS | _BLOCK_SCALED
_FP8 = {"float8_e4m3fn"}
_FP4 = {"uint8", "int8", "float4_e2m1fn_x2"}
_BF16_OUT = {"bfloat16", "float32", "bf16", "fp32"}


def _dtype_name(x) -> str:
    return str(x).replace("torch.", "") if x is not None else ""


def is_supported(op: str, **kw) -> bool:
    """is_supported("bf16_gemm_nt", m=.., n=.., k=.., ab_dtype=torch.bfloat16, out_dtype=torch.float32,
    capability=(12, 0)) -> bool. Unknown ops, dtypes or keyword names answer False."""
    try:
        if op not in _OPS:
            return False
        allowed = {"m", "n", "k", "ab_dtype", "out_dtype", "capability", "device"}
        if set(kw) - allowed:
            return False
        ab = _dtype_name(kw.get("ab_dtype")) if "ab_dtype" in kw else None
        if op in _BLOCK_SCALED:
            if ab is not None and ab not in _FP8 | _FP4:
                return False
            # K-major byte rows of 16 bytes: K % 16 (FP8) or K % 32 (packed FP4)
            if "k" in kw and isinstance(kw["k"], int) and kw["k"] % (32 if ab in _FP4 else 16):
                return False
        elif ab is not None and ab not in ("bfloat16", "bf16"):
            return False
        if "out_dtype" in kw and _dtype_name(kw["out_dtype"]) not in _BF16_OUT:
            return False
        out = _dtype_name(kw.get("out_dtype")) if "out_dtype" in kw else None
        if op.startswith("m_grouped") and out not in (None, "bfloat16", "bf16"):
            return False  # M-grouped GEMMs write bf16
        if op.startswith("k_grouped") and out not in (None, "float32", "fp32"):
            return False  # K-grouped GEMMs accumulate into fp32
        for dim in ("m", "n", "k"):
            if dim in kw and (not isinstance(kw[dim], int) or kw[dim] < 0):
                return False
        # TMA needs 16-byte rows: the inner dimension of every operand must be a multiple of 8 bf16
        if "k" in kw and kw["k"] % 8 and op.startswith("bf16") and op != "bf16_gemm_tn":
            return False  # some operand is K-major (a [M, K] or b [N, K])
        if op in ("bf16_gemm_tn", "bf16_gemm_tt") and "m" in kw and kw["m"] % 8:
            return False  # a is [K, M]
        if op in ("bf16_gemm_nn", "bf16_gemm_tn") and "n" in kw and kw["n"] % 8:
            return False  # b is [K, N]
        cap = kw.get("capability")
        if cap is None and kw.get("device") is not None:
            import torch

            cap = torch.cuda.get_device_capability(kw["device"])
        if cap is not None:
            target_for_capability(tuple(cap), emulation_requested())
        return True
    except Exception:  # noqa: BLE001 - the contract is "answers without raising"
        return False


__all__ = ["is_supported", "SM120_TARGETS"]
