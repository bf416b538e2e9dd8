"""`deep_gemm.utils.math`: DeepGEMM 2.8.1's reference casts, with its results on the same input (dtype, padding,
sign of zero, rounding): multiplication by the reciprocal scale, amax floors of 1e-4, e2m1 ties to the even code,
no sign on a zero code, int8 packing, 1.0 (byte 127) as the padding scale of a packed UE8M0 row.

These are preparation and test helpers (plain torch, any device), not the kernels' inputs checks: where DeepGEMM
asserts, these raise TypeError / ValueError naming what was expected. deep_gemm_sm120.quant keeps its own stricter
helpers (its ceil_to_ue8m0 refuses 0 and out-of-range scales instead of clamping them)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..core.arith import ceil_div, round_up

_E4M3_MAX, _E2M1_MAX = 448.0, 6.0
_AMAX_FLOOR = 1e-4
# e2m1 magnitudes by code, and the boundaries between neighbouring codes: at a boundary the even code wins, so
# values exactly at 0.75, 1.75 and 3.5 round up and values at 0.25, 1.25, 2.5 and 5 round down
_E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
_ROUND_DOWN_AT = (0.25, 1.25, 2.5, 5.0)
_ROUND_UP_AT = (0.75, 1.75, 3.5)


def align(x: int, y: int) -> int:
    """DeepGEMM's name for rounding x up to a multiple of y."""
    return round_up(x, y)


def _tensor(name: str, x, floating: bool = True, dims: int | None = None) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if floating and not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got {x.dtype}")
    if dims is not None and x.dim() != dims:
        raise ValueError(f"{name} must be {dims}-D, got shape {tuple(x.shape)}")
    return x


def _gran(gran_k) -> int:
    if not isinstance(gran_k, int) or isinstance(gran_k, bool) or gran_k <= 0:
        raise ValueError(f"gran_k must be a positive int, got {gran_k!r}")
    return gran_k


def ceil_to_ue8m0(x: torch.Tensor) -> torch.Tensor:
    """The power of two at or above |x|, from the float32 bits: exponent + 1 when any mantissa bit is set, clamped
    to the normal exponents 1..254 (so 0 and subnormals give 2**-126, inf and NaN 2**127). float32 out."""
    bits = _tensor("x", x).abs().float().contiguous().view(torch.int32)
    exponent = ((bits >> 23) & 0xFF) + ((bits & 0x7FFFFF) != 0).to(torch.int32)
    return (exponent.clamp(1, 254) << 23).view(torch.float32)


def pack_ue8m0_to_int(x: torch.Tensor) -> torch.Tensor:
    """Four power-of-two (or zero) float32 scales along the last dim into one int32, first in the lowest byte."""
    _tensor("x", x)
    if x.dtype != torch.float32:
        raise TypeError(f"x must be float32 scales, got {x.dtype}")
    if x.shape[-1] % 4:
        raise ValueError(f"the last dim must be a multiple of 4 (4 scales per int32), got {x.shape[-1]}")
    bits = x.contiguous().view(torch.int32)
    if bool((bits < 0).any()) or bool(((bits & 0x7FFFFF) != 0).any()):
        raise ValueError("x holds scales that are not non-negative powers of two (UE8M0 stores an exponent only)")
    return (bits >> 23).to(torch.uint8).view(torch.int32)


def unpack_ue8m0_from_int(packed_sf: torch.Tensor) -> torch.Tensor:
    """pack_ue8m0_to_int's inverse: [..., K/4] int32 -> [..., K] float32 powers of two."""
    return (_tensor("packed_sf", packed_sf, floating=False).contiguous().view(torch.uint8).to(torch.int32) << 23).view(
        torch.float32
    )


def unpack_e4m3_sf_from_int(packed_sf: torch.Tensor) -> torch.Tensor:
    """Four UE4M3 scale bytes per int32 -> float32, [..., K/4] -> [..., K]."""
    if _tensor("packed_sf", packed_sf, floating=False).dtype != torch.int32:
        raise TypeError(f"packed_sf must be int32, got {packed_sf.dtype}")
    return packed_sf.contiguous().view(torch.uint8).view(torch.float8_e4m3fn).float()


def _scales(amax: torch.Tensor, bound: float, use_ue8m0: bool) -> torch.Tensor:
    sf = amax / bound
    return ceil_to_ue8m0(sf) if use_ue8m0 else sf


def _pad_cols(x: torch.Tensor, gran_k: int) -> torch.Tensor:
    pad = align(x.shape[1], gran_k) - x.shape[1]
    return torch.nn.functional.pad(x, (0, pad)) if pad else x


def _packed_ue8m0(sf: torch.Tensor) -> torch.Tensor:
    """Scales padded to whole int32 words with 1.0 (byte 127; covers no element), then packed."""
    pad = align(sf.shape[-1], 4) - sf.shape[-1]
    if pad:
        sf = torch.nn.functional.pad(sf, (0, pad), value=1.0)
    return pack_ue8m0_to_int(sf)


def per_token_cast_to_fp8(
    x: torch.Tensor, use_ue8m0: bool, gran_k: int = 128, use_packed_ue8m0: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, K] -> (e4m3 [M, K], scales [M, ceil(K/gran_k)] float32, or int32 [M, ceil(K/gran_k/4)] packed)."""
    _tensor("x", x, dims=2)
    gran_k = _gran(gran_k)
    if use_packed_ue8m0 and not use_ue8m0:
        raise ValueError("use_packed_ue8m0=True needs use_ue8m0=True (only powers of two pack into UE8M0)")
    m, k = x.shape
    blocks = _pad_cols(x, gran_k).view(m, -1, gran_k)
    sf = _scales(blocks.abs().float().amax(dim=2).clamp(_AMAX_FLOOR), _E4M3_MAX, use_ue8m0)
    q = (blocks * (1.0 / sf.unsqueeze(2))).to(torch.float8_e4m3fn).view(m, -1)[:, :k].contiguous()
    return q, (_packed_ue8m0(sf) if use_packed_ue8m0 else sf)


def per_channel_cast_to_fp8(x: torch.Tensor, use_ue8m0: bool, gran_k: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, N] -> (e4m3 [M, N], scales [M/gran_k, N]): one scale per column and gran_k rows (M % gran_k == 0)."""
    _tensor("x", x, dims=2)
    gran_k = _gran(gran_k)
    m, n = x.shape
    if m % gran_k:
        raise ValueError(f"per_channel_cast_to_fp8 needs M % gran_k == 0, got M={m}, gran_k={gran_k}")
    blocks = x.view(-1, gran_k, n)
    sf = _scales(blocks.abs().float().amax(dim=1).clamp(_AMAX_FLOOR), _E4M3_MAX, use_ue8m0)
    return (blocks * (1.0 / sf.unsqueeze(1))).to(torch.float8_e4m3fn).view(m, n), sf


def per_block_cast_to_fp8(x: torch.Tensor, use_ue8m0: bool, gran_k: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, N] -> (e4m3 [M, N], scales [ceil(M/gran_k), ceil(N/gran_k)]): one scale per gran_k x gran_k block."""
    _tensor("x", x, dims=2)
    gran_k = _gran(gran_k)
    m, n = x.shape
    padded = torch.nn.functional.pad(x, (0, align(n, gran_k) - n, 0, align(m, gran_k) - m))
    blocks = padded.view(padded.shape[0] // gran_k, gran_k, padded.shape[1] // gran_k, gran_k)
    sf = _scales(blocks.abs().float().amax(dim=(1, 3), keepdim=True).clamp(_AMAX_FLOOR), _E4M3_MAX, use_ue8m0)
    q = (blocks * (1.0 / sf)).to(torch.float8_e4m3fn).view_as(padded)[:m, :n].contiguous()
    return q, sf.view(blocks.shape[0], blocks.shape[2])


def per_custom_dims_cast_to_fp8(
    x: torch.Tensor, dims: Sequence[int], use_ue8m0: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """One scale per index of the kept `dims` (amax over every other dim); scales squeezed."""
    _tensor("x", x)
    kept = {d % x.dim() for d in dims}
    reduced = tuple(d for d in range(x.dim()) if d not in kept)
    sf = _scales(x.abs().float().amax(dim=reduced, keepdim=True).clamp(_AMAX_FLOOR), _E4M3_MAX, use_ue8m0)
    return (x * (1.0 / sf)).to(torch.float8_e4m3fn), sf.squeeze()


def _e2m1_codes(x: torch.Tensor) -> torch.Tensor:
    """int8 e2m1 codes: magnitude to the nearest of _E2M1 (ties to the even code, 6 beyond), sign only on a
    non-zero magnitude (so -0.1 encodes as +0)."""
    a = x.abs()
    mag = sum((a > b).to(torch.uint8) for b in _ROUND_DOWN_AT) + sum((a >= b).to(torch.uint8) for b in _ROUND_UP_AT)
    negative = (x < 0) & (mag != 0)
    return (mag | (negative.to(torch.uint8) << 3)).view(torch.int8)


def _pack_nibbles(codes: torch.Tensor) -> torch.Tensor:
    """[M, K] int8 codes -> [M, K/2] int8, even K index in the low nibble."""
    c = codes.view(torch.uint8)
    return ((c[:, 0::2] & 0x0F) | ((c[:, 1::2] & 0x0F) << 4)).view(torch.int8)


def _unpack_nibbles(packed: torch.Tensor) -> torch.Tensor:
    b = packed.view(torch.uint8)
    return torch.stack([b & 0x0F, b >> 4], dim=-1).flatten(-2)


def _decode_e2m1(codes: torch.Tensor) -> torch.Tensor:
    table = torch.tensor(_E2M1, dtype=torch.float32, device=codes.device)
    c = codes.to(torch.int64)
    mag = table[c & 7]
    return torch.where((c & 8) != 0, -mag, mag)


def per_token_cast_to_fp4(
    x: torch.Tensor, use_ue8m0: bool, gran_k: int = 128, use_packed_ue8m0: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, K] (K even) -> (packed e2m1 int8 [M, K/2], scales amax/6 per (row, gran_k block): float32, or packed
    UE8M0 int32 with use_packed_ue8m0)."""
    _tensor("x", x, dims=2)
    gran_k = _gran(gran_k)
    m, k = x.shape
    if k % 2:
        raise ValueError(f"K must be even (two e2m1 values per byte), got {k}")
    if use_packed_ue8m0 and not use_ue8m0:
        raise ValueError("use_packed_ue8m0=True needs use_ue8m0=True (only powers of two pack into UE8M0)")
    blocks = _pad_cols(x, gran_k).view(m, -1, gran_k)
    sf = _scales(blocks.abs().float().amax(dim=2).clamp_min(_AMAX_FLOOR), _E2M1_MAX, use_ue8m0)
    codes = _e2m1_codes(blocks * (1.0 / sf.unsqueeze(2))).view(m, -1)
    packed = _pack_nibbles(codes)[:, : k // 2].contiguous()
    return packed, (_packed_ue8m0(sf) if use_packed_ue8m0 else sf)


def per_token_cast_to_nvfp4(
    x: torch.Tensor,
    gran_k: int = 16,
    use_packed_e4m3: bool = False,
    global_scale: float | None = None,
    *,
    use_packed_ue4m3: bool | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, K] (K % (4 gran_k) == 0) -> (packed e2m1 int8 [M, K/2], UE4M3 block scales e4m3(amax / 6 /
    global_scale), >= 2**-9, as float32 [M, K/gran_k], or 4 bytes per int32 with use_packed_e4m3). Dequantize
    with value * scale (* global_scale when given). DeepGEMM 2.8.1's results; sgl-deep-gemm's spelling
    `use_packed_ue4m3` is accepted by keyword (its unclamped scales differ only for all-zero blocks)."""
    if use_packed_ue4m3 is not None:
        use_packed_e4m3 = use_packed_e4m3 or use_packed_ue4m3
    _tensor("x", x, dims=2)
    gran_k = _gran(gran_k)
    m, k = x.shape
    if k % (4 * gran_k):
        raise ValueError(f"K must be a multiple of 4 * gran_k = {4 * gran_k}, got {k}")
    blocks = x.float().view(m, k // gran_k, gran_k)
    inverse_global = 1.0 if global_scale is None else 1.0 / global_scale
    sf_e4m3 = (blocks.abs().amax(dim=2) * (1.0 / 6.0) * inverse_global).clamp_min(2.0**-9).to(torch.float8_e4m3fn)
    sf = sf_e4m3.float()
    divisor = sf if global_scale is None else sf * global_scale
    packed = _pack_nibbles(_e2m1_codes(blocks / divisor.unsqueeze(2)).view(m, k)).contiguous()
    return (packed, sf_e4m3.view(torch.uint8).contiguous().view(torch.int32)) if use_packed_e4m3 else (packed, sf)


def cast_to_ue4m3(x: torch.Tensor) -> torch.Tensor:
    """Round to the nearest UE4M3 (e4m3) value, returned as float32 (sgl-deep-gemm's NVFP4 scale helper)."""
    return _tensor("x", x).to(torch.float8_e4m3fn).float()


def _e4m3_bytes(name: str, sf: torch.Tensor) -> torch.Tensor:
    """Scale bytes of UE4M3 values: float8_e4m3fn as is; float32 only when every value is exactly an e4m3 value
    (a scale is never rounded silently: cast_to_ue4m3 first)."""
    _tensor(name, sf)
    e4m3 = sf if sf.dtype == torch.float8_e4m3fn else sf.to(torch.float8_e4m3fn)
    if sf.dtype != torch.float8_e4m3fn and not bool((e4m3.float() == sf.float()).all()):
        raise ValueError(f"{name} holds values that are not UE4M3 (e4m3) scales; round them with cast_to_ue4m3 first")
    from ..scale_layout import scale_bytes

    return scale_bytes(e4m3)  # the kernels' own check: non-negative and finite


def pack_ue4m3_to_int(x: torch.Tensor) -> torch.Tensor:
    """Four UE4M3 scales along the last dim into one int32, first in the lowest byte (the kernel's scale word)."""
    if x.shape[-1] % 4:
        raise ValueError(f"the last dim must be a multiple of 4 (4 scales per int32), got {x.shape[-1]}")
    return _e4m3_bytes("x", x).view(torch.int32)


def unpack_ue4m3_from_int(packed_sf: torch.Tensor) -> torch.Tensor:
    """pack_ue4m3_to_int's inverse: [..., K/4] int32 -> [..., K] float32."""
    return unpack_e4m3_sf_from_int(packed_sf)


def transform_ue4m3_sf_into_required_layout(sf: torch.Tensor, mn: int) -> torch.Tensor:
    """NVFP4 block scales [..., MN, K/16] (UE4M3 values: float32 or float8_e4m3fn) -> the layout the SM120
    block-scaled GEMM reads: int32 words of four scales, MN-major, word stride padded to 16 bytes (K padding
    scales 0). fp8_fp4_gemm_nt takes the result with recipe (1, 1, 16)."""
    from ..scale_layout import mn_major, pack_scale_bytes

    _tensor("sf", sf)
    if sf.dim() not in (2, 3) or sf.shape[-2] != mn:
        raise ValueError(f"sf must be [(G,) MN = {mn}, K/16], got {tuple(sf.shape)}")
    return mn_major(pack_scale_bytes(_e4m3_bytes("sf", sf)))


def transpose_packed_fp4(a: torch.Tensor) -> torch.Tensor:
    """Packed e2m1 [M, K/2] int8 (M even) -> the packed transpose [K, M/2]."""
    _tensor("a", a, floating=False, dims=2)
    if a.dtype != torch.int8:
        raise TypeError(f"a must be packed e2m1 in int8, got {a.dtype}")
    if a.shape[0] % 2:
        raise ValueError(f"M must be even to pack the transpose, got {a.shape[0]}")
    codes = _unpack_nibbles(a).view(torch.int8)
    return _pack_nibbles(codes.t().contiguous()).contiguous()


def _per_column(sf: torch.Tensor, k: int, gran_k: int) -> torch.Tensor:
    return sf[:, torch.arange(k, device=sf.device) // gran_k]


def cast_back_from_fp4(
    packed: torch.Tensor, sf: torch.Tensor, gran_k: int = 128, use_packed_ue8m0: bool = False
) -> torch.Tensor:
    """packed e2m1 [M, K/2] and scales per (row, gran_k block) -> float32 [M, K]."""
    _tensor("packed", packed, floating=False, dims=2)
    values = _decode_e2m1(_unpack_nibbles(packed))
    scales = unpack_ue8m0_from_int(sf) if use_packed_ue8m0 else sf
    return values * _per_column(scales, values.shape[1], _gran(gran_k))


def cast_back_from_fp8(
    x_fp8: torch.Tensor, sf: torch.Tensor, gran_k: int = 128, use_packed_ue8m0: bool = False
) -> torch.Tensor:
    """e4m3 [M, K] and scales per (row, gran_k block) -> float32 [M, K]."""
    _tensor("x_fp8", x_fp8, dims=2)
    scales = unpack_ue8m0_from_int(sf) if use_packed_ue8m0 else sf
    return x_fp8.float() * _per_column(scales, x_fp8.shape[1], _gran(gran_k))


__all__ = [
    "ceil_div",
    "align",
    "ceil_to_ue8m0",
    "pack_ue8m0_to_int",
    "per_token_cast_to_fp8",
    "per_channel_cast_to_fp8",
    "per_block_cast_to_fp8",
    "per_custom_dims_cast_to_fp8",
    "per_token_cast_to_fp4",
    "per_token_cast_to_nvfp4",
    "unpack_e4m3_sf_from_int",
    "cast_to_ue4m3",
    "pack_ue4m3_to_int",
    "unpack_ue4m3_from_int",
    "transform_ue4m3_sf_into_required_layout",
    "transpose_packed_fp4",
    "unpack_ue8m0_from_int",
    "cast_back_from_fp4",
    "cast_back_from_fp8",
]
