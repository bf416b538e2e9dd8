"""Scale-factor and quantization utilities for block-scaled FP8 / FP4 GEMMs (DeepGEMM names and recipes).

Recipes: FP8 activations 1x128 per token (per_token_cast_to_fp8), FP8 weights 128x128 (per_block_cast_to_fp8),
MXFP4 1x32 with UE8M0 scales and NVFP4 1x16 with UE4M3 scales (per_token_cast_to_fp4). SM120's block-scaled
MMAs take UE8M0 (power-of-two) scales for FP8 and MXFP4: FP32 scales are either rounded *up* to powers of
two explicitly (`ceil_to_ue8m0`, lossy by design: values shrink by up to 2x before quantization, never
overflow) or rejected (`require_ue8m0`) -- never passed through.
"""

from __future__ import annotations

import torch

from .core.arith import round_up

FP8_E4M3_MAX = 448.0
E2M1_MAX = 6.0
# e2m1 magnitudes by 3-bit code (sign in bit 3): 0, 0.5, 1, 1.5, 2, 3, 4, 6
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
_E2M1_BOUNDS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)  # midpoints between consecutive magnitudes


def _require_float(name: str, x: torch.Tensor) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got {x.dtype}")


def ceil_to_ue8m0(x: torch.Tensor) -> torch.Tensor:
    """Smallest power of two >= x, element-wise, exactly (frexp, not log2: log2 rounding can round down).

    x must be positive and finite (scales). Returns float32."""
    _require_float("x", x)
    x = x.float()
    if bool((x <= 0).any()) or not bool(torch.isfinite(x).all()):
        raise ValueError("ceil_to_ue8m0 needs positive, finite scales")
    mantissa, exponent = torch.frexp(x)  # x = mantissa * 2**exponent, mantissa in [0.5, 1)
    exponent = torch.where(mantissa == 0.5, exponent - 1, exponent)
    if bool((exponent < -126).any()) or bool((exponent > 127).any()):
        raise ValueError("scale outside the UE8M0 range 2**-127 .. 2**127")
    return torch.ldexp(torch.ones_like(x), exponent)


def is_ue8m0(x: torch.Tensor) -> torch.Tensor:
    """Element-wise: is x a positive normal power of two (representable as UE8M0)?"""
    bits = x.float().contiguous().view(torch.int32)
    return (bits & 0x007FFFFF == 0) & (x > 0) & torch.isfinite(x) & (bits >> 23 != 0)


def not_power_of_two(e: BaseException) -> bool:
    """Whether `e` is require_ue8m0's ValueError: FP32 scales UE8M0 cannot hold. The block-scaled GEMMs then take
    the exact FP32-scale kernel where the operands allow it. A plain ValueError marked by an attribute, so every
    public function keeps raising exactly ValueError."""
    return isinstance(e, ValueError) and getattr(e, "_dg_sm120_not_power_of_two", False)


def require_ue8m0(name: str, sf: torch.Tensor) -> None:
    """Reject FP32 scales that are not powers of two (they would be silently reinterpreted otherwise)."""
    _require_float(name, sf)
    if not bool(is_ue8m0(sf).all()):
        err = ValueError(
            f"{name} holds FP32 scales that are not powers of two; SM120 block-scaled MMAs take "
            f"UE8M0 scales: convert them explicitly with ceil_to_ue8m0 (rounds up, lossy) first"
        )
        err._dg_sm120_not_power_of_two = True  # type: ignore[attr-defined]
        raise err


def ue8m0_exponent_bytes(sf: torch.Tensor) -> torch.Tensor:
    """uint8 biased exponents (the UE8M0 encoding) of power-of-two FP32 scales."""
    require_ue8m0("sf", sf)
    return (sf.float().contiguous().view(torch.int32) >> 23).to(torch.uint8)


def pack_ue8m0_to_int(sf: torch.Tensor) -> torch.Tensor:
    """Pack 4 consecutive UE8M0 scales along the last dim into one int32, first scale in the lowest byte.

    sf: [..., K'] power-of-two FP32 scales; K' is padded to a multiple of 4 with 2**0 (byte 127)."""
    b = ue8m0_exponent_bytes(sf).to(torch.int32)
    pad = (-b.shape[-1]) % 4
    if pad:
        b = torch.nn.functional.pad(b, (0, pad), value=127)
    b = b.view(*b.shape[:-1], -1, 4)
    return b[..., 0] | (b[..., 1] << 8) | (b[..., 2] << 16) | (b[..., 3] << 24)


def _block_amax(x: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    m, k = x.shape
    pm, pk = (-m) % rows, (-k) % cols
    xp = torch.nn.functional.pad(x.abs().float(), (0, pk, 0, pm))
    return xp.view((m + pm) // rows, rows, (k + pk) // cols, cols).amax(dim=(1, 3))


def _expand(scale: torch.Tensor, rows: int, cols: int, m: int, k: int) -> torch.Tensor:
    return scale.repeat_interleave(rows, 0).repeat_interleave(cols, 1)[:m, :k]


def _cast_fp8(x: torch.Tensor, rows: int, cols: int, use_ue8m0: bool) -> tuple[torch.Tensor, torch.Tensor]:
    _require_float("x", x)
    if x.dim() != 2:
        raise ValueError(f"x must be 2-D [M, K], got shape {tuple(x.shape)}")
    m, k = x.shape
    amax = _block_amax(x, rows, cols).clamp_min(1e-4)
    scale = amax / FP8_E4M3_MAX
    if use_ue8m0:
        scale = ceil_to_ue8m0(scale)
    q = (x.float() / _expand(scale, rows, cols, m, k)).clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX).to(torch.float8_e4m3fn)
    return q, scale


def _require_gran(gran_k) -> int:
    if not isinstance(gran_k, int) or isinstance(gran_k, bool) or gran_k <= 0:
        raise ValueError(f"gran_k must be a positive int, got {gran_k!r}")
    return gran_k


def per_token_cast_to_fp8(
    x: torch.Tensor, use_ue8m0: bool = True, gran_k: int = 128
) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, K] -> (e4m3 [M, K], fp32 scales [M, ceil(K/gran_k)]): one scale per token and gran_k channels.
    use_ue8m0=False keeps the exact amax/448 scales (SM120's kernels then refuse them: round first)."""
    return _cast_fp8(x, 1, _require_gran(gran_k), use_ue8m0)


def per_block_cast_to_fp8(
    x: torch.Tensor, use_ue8m0: bool = True, gran_k: int = 128
) -> tuple[torch.Tensor, torch.Tensor]:
    """x [N, K] -> (e4m3 [N, K], fp32 scales [ceil(N/gran_k), ceil(K/gran_k)]): one scale per square block."""
    return _cast_fp8(x, _require_gran(gran_k), gran_k, use_ue8m0)


def per_channel_cast_to_fp8(
    x: torch.Tensor, use_ue8m0: bool = True, gran_k: int = 128
) -> tuple[torch.Tensor, torch.Tensor]:
    """x [K, N] -> (e4m3 [K, N], fp32 scales [ceil(K/gran_k), N]): one scale per channel and gran_k rows."""
    return _cast_fp8(x, _require_gran(gran_k), 1, use_ue8m0)


def e2m1_codes(x: torch.Tensor) -> torch.Tensor:
    """Nearest e2m1 code (4 bits: sign | 3-bit magnitude) of each value, ties to the even code; saturates at 6."""
    a = x.float().abs()
    mag = torch.zeros_like(a, dtype=torch.int32)
    for i, bound in enumerate(_E2M1_BOUNDS):
        # above the midpoint -> next code; exactly at it -> the even one of the two codes
        mag = torch.where((a > bound) | ((a == bound) & ((i + 1) % 2 == 0)), torch.full_like(mag, i + 1), mag)
    sign = (x < 0).to(torch.int32) << 3
    return (sign | mag).to(torch.uint8)


def e2m1_decode(codes: torch.Tensor) -> torch.Tensor:
    table = torch.tensor(E2M1_VALUES, dtype=torch.float32, device=codes.device)
    c = codes.to(torch.int64)
    mag = table[c & 7]
    return torch.where((c & 8) != 0, -mag, mag)


def pack_e2m1(codes: torch.Tensor) -> torch.Tensor:
    """Two e2m1 codes per byte along the last dim (even K index in the low nibble): [..., K] -> [..., K/2]."""
    if codes.shape[-1] % 2:
        raise ValueError(f"the packed dimension must be even, got {codes.shape[-1]}")
    c = codes.to(torch.uint8)
    return c[..., 0::2] | (c[..., 1::2] << 4)


def unpack_e2m1(packed: torch.Tensor) -> torch.Tensor:
    lo, hi = packed & 0xF, packed >> 4
    return torch.stack([lo, hi], dim=-1).flatten(-2)


def per_token_cast_to_fp4(x: torch.Tensor, kind: str = "mxfp4") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x [M, K] -> (packed e2m1 uint8 [M, K/2], block scales, fp32 global scale (0-d)).

    mxfp4: 1x32 blocks, fp32 power-of-two scales [M, K/32] (UE8M0, rounded up so nothing saturates);
           global scale 1.
    nvfp4: 1x16 blocks, float8_e4m3fn scales [M, K/16] (UE4M3) on top of a per-tensor fp32 global scale
           amax(x) / (6 * 448), which keeps every block scale in e4m3's normal range (small blocks would
           otherwise land on coarse subnormals). Value = e2m1 * block scale * global scale."""
    _require_float("x", x)
    if x.dim() != 2:
        raise ValueError(f"x must be 2-D [M, K], got shape {tuple(x.shape)}")
    if kind not in ("mxfp4", "nvfp4"):
        raise ValueError(f"FP4 kind must be 'mxfp4' or 'nvfp4', got {kind!r}")
    block = 32 if kind == "mxfp4" else 16
    m, k = x.shape
    if k % block:
        raise ValueError(f"K = {k} must be a multiple of the {kind} block ({block})")
    amax = _block_amax(x, 1, block).clamp_min(1e-12)
    if kind == "mxfp4":
        scale = ceil_to_ue8m0(amax / E2M1_MAX)
        global_scale = torch.ones((), dtype=torch.float32, device=x.device)
        effective = scale
    else:
        global_scale = (x.abs().max().float() / (E2M1_MAX * FP8_E4M3_MAX)).clamp_min(1e-30)
        scale = (amax / E2M1_MAX / global_scale).clamp(max=FP8_E4M3_MAX).to(torch.float8_e4m3fn)
        effective = scale.float().clamp_min(2.0**-9) * global_scale  # all-zero blocks stay zero
    codes = e2m1_codes(x.float() / _expand(effective, 1, block, m, k))
    return pack_e2m1(codes), scale, global_scale


def dequantize_fp4(
    packed: torch.Tensor, scale: torch.Tensor, global_scale: torch.Tensor | float = 1.0, kind: str = "mxfp4"
) -> torch.Tensor:
    block = 32 if kind == "mxfp4" else 16
    values = e2m1_decode(unpack_e2m1(packed))
    m, k = values.shape
    return values * _expand(scale.float(), 1, block, m, k) * global_scale


def get_mn_major_tma_aligned_tensor(x: torch.Tensor) -> torch.Tensor:
    """Same values and shape [..., MN, K'], stored MN-major with the MN stride padded to 16 bytes (TMA)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"expected a tensor of scale factors, got {type(x).__name__}")
    if x.dim() not in (2, 3):
        raise ValueError(f"expected [MN, K'] or [G, MN, K'], got shape {tuple(x.shape)}")
    mn, kk = x.shape[-2:]
    align = max(1, 16 // x.element_size())
    aligned = round_up(mn, align)
    out = torch.empty((*x.shape[:-2], kk, aligned), dtype=x.dtype, device=x.device).transpose(-1, -2)
    out = out[..., :mn, :]
    out.copy_(x)
    return out


def get_mn_major_tma_aligned_packed_ue8m0_tensor(sf: torch.Tensor) -> torch.Tensor:
    """Power-of-two FP32 scales [..., MN, K'] -> int32 [..., MN, ceil(K'/4)] (4 UE8M0 bytes each), MN-major."""
    return get_mn_major_tma_aligned_tensor(pack_ue8m0_to_int(sf))
