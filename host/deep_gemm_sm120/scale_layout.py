"""Scale factors in the layout the block-scaled kernels read (device_layer/impls/sm120_fp8_fp4_gemm_1d1d.cuh).

Required layout ("packed, MN-major"): int32 [..., MN, ceil(ceil(K / gran_k) / 4)] whose word (r, p) packs the
scale bytes of K blocks 4p .. 4p+3 of row r, first block in the lowest byte, stored MN-major (stride 1 along
MN, the word stride padded to 16 bytes), one leading group dimension for grouped operands. Scale bytes are
UE8M0 (FP8, MXFP4) or UE4M3 (NVFP4). 128x128 weight blocks become one scale per row (each block row repeated
128 times): the kernels only take "1D" per-row scales on both sides.

Accepted inputs:
  float32               powers of two (UE8M0) for this layout; anything else raises here: the FP8 GEMMs take
                        such scales exactly instead (the float32 layout below), never reinterpreted.
  torch.float8_e8m0fnu  UE8M0 bytes as they are.
  torch.float8_e4m3fn   UE4M3 (NVFP4 only); must be non-negative and finite.
  int32                 already packed (the output of transform_sf_into_required_layout); checked, not copied.

Exact FP32 scales (the "fp8_fp32" kernel: e4m3 operands, any FP32 scale per 128 K, applied in FP32 after each
K block's MMAs): float32 [..., MN, ceil(K / 128)] stored MN-major (stride 1 along MN, the K-block stride a
multiple of 4 floats as fp32_mn_major writes it, DeepGEMM's "MN-major TMA-aligned" layout; any stride of at
least MN is read in place), one scale per row; fp32_mn_major makes it
from any per-row or 128-row-block float32 scales, transform_sf_into_required_layout(..., disable_ue8m0_cast=
True) likewise. Nothing about the values is checked or rounded.
"""

from __future__ import annotations

import torch

from .core.arith import ceil_div, round_up
from .quant import ue8m0_exponent_bytes

_E8M0 = getattr(torch, "float8_e8m0fnu", None)


def sf_words(k: int, gran_k: int) -> int:
    """Packed int32 words per row for K elements at one scale per gran_k."""
    return ceil_div(ceil_div(k, gran_k), 4)


def sf_format(sf: torch.Tensor) -> str:
    """'ue8m0', 'ue4m3' or 'packed' from the scale tensor's dtype (TypeError for anything else)."""
    if sf.dtype == torch.int32:
        return "packed"
    if sf.dtype == torch.float8_e4m3fn:
        return "ue4m3"
    if sf.dtype == torch.float32 or (_E8M0 is not None and sf.dtype == _E8M0):
        return "ue8m0"
    raise TypeError(
        f"scale factors must be float32 (powers of two), float8_e8m0fnu, float8_e4m3fn (NVFP4) or "
        f"packed int32, got {sf.dtype}"
    )


def scale_bytes(sf: torch.Tensor) -> torch.Tensor:
    """uint8 encodings of unpacked scales (UE8M0 exponents or UE4M3 bytes); rejects values they cannot hold.
    Those values are read on the host, which a CUDA-graph capture forbids: unpacked scales raise there (ValueError,
    before any CUDA call) instead of being encoded unchecked; pack them once outside the capture."""
    fmt = sf_format(sf)
    if fmt == "packed":
        raise TypeError("scale_bytes takes unpacked scales, got packed int32")
    if sf.is_cuda and torch.cuda.is_current_stream_capturing():
        raise ValueError(
            "unpacked scale factors cannot be checked while a CUDA graph is captured (their values "
            "are read on the host): pack them outside the capture with transform_sf_into_required_layout "
            "and pass the int32 result (e4m3 GEMMs with float32 scales on both sides: disable_ue8m0_cast=True "
            "takes them exactly and reads no value)"
        )
    if sf.dtype == torch.float32:
        return ue8m0_exponent_bytes(sf)  # raises unless every value is a power of two
    raw = sf.contiguous().view(torch.uint8)
    if fmt == "ue4m3":
        if bool(((raw & 0x80) != 0).any()) or bool(((raw & 0x7F) == 0x7F).any()):
            raise ValueError("UE4M3 (NVFP4) scales must be non-negative and finite")
    elif bool((raw == 0xFF).any()):
        raise ValueError("UE8M0 scales hold NaN (0xFF)")
    return raw


def pack_scale_bytes(b: torch.Tensor) -> torch.Tensor:
    """uint8 [..., K'] -> int32 [..., ceil(K'/4)], 4 consecutive bytes per word, first in the lowest byte.
    Padding bytes are 0: they scale K positions past the end, which the kernel reads as zeros."""
    w = b.to(torch.int32)
    pad = (-w.shape[-1]) % 4
    if pad:
        w = torch.nn.functional.pad(w, (0, pad), value=0)
    w = w.view(*w.shape[:-1], w.shape[-1] // 4, 4)  # sizes spelled out: an empty MN leaves -1 ambiguous
    return w[..., 0] | (w[..., 1] << 8) | (w[..., 2] << 16) | (w[..., 3] << 24)


def mn_major(x: torch.Tensor) -> torch.Tensor:
    """Same values, stored MN-major with the word stride padded to a multiple of 4 words (16 bytes)."""
    mn, words = x.shape[-2:]
    aligned = round_up(mn, 4)
    out = torch.empty((*x.shape[:-2], words, aligned), dtype=x.dtype, device=x.device).transpose(-1, -2)
    out = out[..., :mn, :]
    out.copy_(x)
    return out


def check_packed(name: str, sf: torch.Tensor, shape: tuple[int, ...]) -> tuple[int, int]:
    """Validate a packed int32 scale tensor of `shape` ([G,] MN, words); returns (word stride, group stride)."""
    if tuple(sf.shape) != shape:
        what = "[G, MN, words]" if len(shape) == 3 else "[MN, words]"
        raise ValueError(f"{name} (packed int32) must be {what} = {shape}, got {tuple(sf.shape)}")
    mn, words = shape[-2:]
    if mn > 1 and sf.stride(-2) != 1:
        raise ValueError(
            f"{name} (packed int32) must be MN-major (stride 1 along MN; use "
            f"transform_sf_into_required_layout), got strides {tuple(sf.stride())}"
        )
    pack_stride = sf.stride(-1) if words > 1 else max(mn, 1)
    if words > 1 and pack_stride < mn:
        raise ValueError(f"{name} words overlap (stride {pack_stride} < MN = {mn})")
    group_stride = sf.stride(0) if len(shape) == 3 and shape[0] > 1 else 0  # one group: its stride is never read
    if len(shape) == 3 and shape[0] > 1 and group_stride < pack_stride * max(words - 1, 0) + mn:
        raise ValueError(f"{name} groups overlap (group stride {group_stride})")
    if max(pack_stride, group_stride) >= 2**32:
        raise ValueError(f"{name} strides must fit 32 bits, got {tuple(sf.stride())}")
    if sf.data_ptr() % 4:
        raise ValueError(f"{name} data pointer must be 4-byte aligned")
    return pack_stride, group_stride


def fp32_direct(sf: torch.Tensor, shape: tuple[int, ...]) -> tuple[int, int] | None:
    """(K-block stride, group stride) in floats when float32 scales of `shape` ([G,] MN, K blocks; one per row)
    are already in the exact kernel's layout (MN-major, 4-byte aligned, blocks and groups not overlapping);
    None when they must be converted (fp32_mn_major) first. Reads no values."""
    if sf.dtype != torch.float32 or tuple(sf.shape) != shape:
        return None
    mn, blocks = shape[-2:]
    if mn > 1 and sf.stride(-2) != 1:
        return None
    block_stride = sf.stride(-1) if blocks > 1 else max(mn, 1)
    if block_stride < mn or sf.data_ptr() % 4:
        return None
    group_stride = sf.stride(0) if len(shape) == 3 and shape[0] > 1 else 0  # one group: its stride is never read
    if len(shape) == 3 and shape[0] > 1 and group_stride < block_stride * max(blocks - 1, 0) + mn:
        return None
    if max(block_stride, group_stride) >= 2**32:  # the kernel's strides are 32-bit: converted instead
        return None
    return block_stride, group_stride


def fp32_mn_major(sf: torch.Tensor, mn: int, gran_mn: int) -> torch.Tensor:
    """float32 scales [..., ceil(MN / gran_mn), K blocks] -> one per row, MN-major, K-block stride padded to 4
    floats (the exact kernel's layout). A copy on the scales' device; no value is read or changed."""
    x = sf.float()
    if gran_mn > 1:
        x = x.repeat_interleave(gran_mn, dim=-2)[..., :mn, :]
    return mn_major(x)


def check_packed_values(name: str, sf: torch.Tensor, fmt: str) -> None:
    """Packed int32 scales' bytes against the encodings no scale may hold (reads them: a sync; opt-in, see
    checks.scale_checks): UE8M0 0xFF (NaN), UE4M3 0x7F / 0xFF (NaN) and a set sign bit. Padding bytes are 0."""
    if sf.numel() == 0:
        return
    b = torch.stack([(sf >> shift) & 0xFF for shift in (0, 8, 16, 24)], dim=-1)
    bad = (b == 0xFF) if fmt == "ue8m0" else ((b & 0x80) != 0) | ((b & 0x7F) == 0x7F)
    if not bool(bad.any()):
        return
    where = [int(x) for x in bad.nonzero()[0]]
    value = int(b[tuple(where)])
    what = "NaN (0xFF)" if fmt == "ue8m0" else ("NaN" if value & 0x7F == 0x7F else "a negative scale")
    raise ValueError(
        f"{name} (packed int32, {fmt.upper()}) holds {what}: byte {where[-1]} of word {tuple(where[:-1])} is "
        f"{value:#04x}"
    )


def cache_scale_words(
    kv_cache: torch.Tensor, rows_per_block: int, row_bytes: int, block_table: torch.Tensor, lens: torch.Tensor
) -> torch.Tensor:
    """The packed scale words of a paged cache whose blocks hold `rows_per_block` value rows of `row_bytes`, then
    one int32 word per row (DeepGEMM's FP4 / MXFP8 layouts), as int32 [blocks, rows_per_block]: the words of the
    blocks a request reads (block_table row r's first ceil(lens[r] / rows_per_block) entries inside the cache),
    zero (a valid scale) for every other block, whose stale bytes no kernel reads."""
    blocks = kv_cache.shape[0]
    tail = torch.as_strided(
        kv_cache,
        (blocks, rows_per_block * 4),
        (kv_cache.stride(0), 1),
        kv_cache.storage_offset() + rows_per_block * row_bytes,
    )
    lens = lens.reshape(lens.shape[0], -1).amax(1).clamp_min(0).long()
    used = (
        torch.arange(block_table.shape[1], device=block_table.device)
        < ((lens + rows_per_block - 1) // rows_per_block)[:, None]
    )
    ids = block_table[used].long()
    ids = torch.unique(ids[(ids >= 0) & (ids < blocks)])
    out = torch.zeros(blocks, rows_per_block * 4, dtype=torch.uint8, device=kv_cache.device)
    out[ids] = tail[ids]
    return out.view(torch.int32)


def check_unpacked(
    sf: torch.Tensor,
    mn: int,
    k: int,
    recipe: tuple[int, ...] | None = None,
    num_groups: int | None = None,
    is_sfa: bool = False,
) -> tuple[int, int | None]:
    """pack_sf's checks of everything but the values (type, shape, recipe; packed int32 scales in full).
    Returns (gran_mn, gran_k), gran_k None for packed scales. Depends only on the signature of the call."""
    if not isinstance(sf, torch.Tensor):
        raise TypeError(f"sf must be a torch.Tensor, got {type(sf).__name__}")
    grouped = num_groups is not None
    if sf.dim() != (3 if grouped else 2):
        raise ValueError(
            f"sf must be {'[G, MN, K blocks]' if grouped else '[MN, K blocks]'}, got shape {tuple(sf.shape)}"
        )
    if grouped and sf.shape[0] != num_groups:
        raise ValueError(f"sf has {sf.shape[0]} groups, expected {num_groups}")
    fmt = sf_format(sf)
    if recipe is not None:
        if len(recipe) != 3 or any(not isinstance(x, int) or x <= 0 for x in recipe):
            raise ValueError(f"recipe must be (gran_m, gran_n, gran_k) positive ints, got {recipe!r}")
        gran_mn, gran_k = (recipe[0] if is_sfa else recipe[1]), recipe[2]
    else:
        gran_mn = 1
        gran_k = None
    lead = (num_groups,) if grouped else ()
    if fmt == "packed":
        if gran_k is None:
            raise ValueError("packed int32 scales carry no granularity: pass recipe")
        check_packed("sf", sf, (*lead, mn, sf_words(k, gran_k)))
        return gran_mn, None
    cols = sf.shape[-1]
    if gran_k is None:
        grans = [g for g in (128, 32, 16) if ceil_div(k, g) == cols]
        if len(grans) != 1:
            raise ValueError(f"cannot tell the K granularity of sf with {cols} columns for K = {k}: pass recipe")
        gran_k = grans[0]
    if cols != ceil_div(k, gran_k) or sf.shape[-2] != ceil_div(mn, gran_mn):
        raise ValueError(
            f"sf must be [{'G, ' if grouped else ''}ceil(MN/{gran_mn}), ceil(K/{gran_k})] = "
            f"{(*lead, ceil_div(mn, gran_mn), ceil_div(k, gran_k))}, got {tuple(sf.shape)}"
        )
    return gran_mn, gran_k


def pack_sf(
    sf: torch.Tensor,
    mn: int,
    k: int,
    recipe: tuple[int, ...] | None = None,
    num_groups: int | None = None,
    is_sfa: bool = False,
) -> torch.Tensor:
    """Scales of one operand -> the packed MN-major int32 layout (see the module docstring).

    sf: [(G,) ceil(MN / gran_mn), ceil(K / gran_k)] unpacked scales, or already packed int32 (then only checked).
    recipe: DeepGEMM's (gran_m, gran_n, gran_k); gran_mn is recipe[0] for A (is_sfa) and recipe[1] for B.
    When omitted, gran_mn is 1 and gran_k follows from the scale tensor's shape and dtype."""
    gran_mn, gran_k = check_unpacked(sf, mn, k, recipe, num_groups, is_sfa)
    if gran_k is None:  # packed: checked, used as it is
        return sf
    b = scale_bytes(sf)  # the values: exact scale values or ValueError (reads them: a sync)
    if gran_mn > 1:
        b = b.repeat_interleave(gran_mn, dim=-2)[..., :mn, :]
    return mn_major(pack_scale_bytes(b))


__all__ = [
    "transform_sf_into_required_layout",
    "sf_words",
    "sf_format",
    "scale_bytes",
    "pack_scale_bytes",
    "check_packed",
    "check_unpacked",
    "fp32_direct",
    "fp32_mn_major",
    "check_packed_values",
]


def transform_sf_into_required_layout(
    sf: torch.Tensor,
    mn: int,
    k: int,
    recipe,
    num_groups: int | None = None,
    is_sfa: bool | None = None,
    disable_ue8m0_cast: bool = False,
    psum_layout=None,
) -> torch.Tensor:
    """DeepGEMM's name and signature for pack_sf: `recipe` as (gran_m, gran_n, gran_k) or (gran_mn, gran_k);
    `is_sfa=None` means False; `psum_layout` other than None: NotImplementedError (SM120 scale layouts are per
    row). float32 scales per 128 K with `disable_ue8m0_cast=True` stay FP32 (any value): the exact kernel's
    float32 MN-major per-row layout (fp32_mn_major, DeepGEMM's SM90 form), which the FP8 GEMMs use as it is;
    otherwise they must be powers of two and become packed UE8M0 words."""
    from . import keywords

    name = "transform_sf_into_required_layout"
    keywords.ue8m0_cast(name, disable_ue8m0_cast)
    if psum_layout is not None:
        raise NotImplementedError(f"{name}(psum_layout=...) is not supported: SM120 scale layouts are per row")
    if not isinstance(recipe, (tuple, list)) or len(recipe) not in (2, 3):
        raise ValueError(f"{name}: recipe is (gran_m, gran_n, gran_k) or (gran_mn, gran_k), got {recipe!r}")
    full = tuple(recipe) if len(recipe) == 3 else (recipe[0], recipe[0], recipe[1])
    if disable_ue8m0_cast and isinstance(sf, torch.Tensor) and sf.dtype == torch.float32:
        gran_mn, gran_k = check_unpacked(sf, mn, k, full, num_groups, bool(is_sfa))
        if gran_k == 128:  # the exact FP32-scale kernel's layout; other granularities pack as UE8M0 below
            return fp32_mn_major(sf, mn, gran_mn)
    return pack_sf(sf, mn, k, full, num_groups, bool(is_sfa))
