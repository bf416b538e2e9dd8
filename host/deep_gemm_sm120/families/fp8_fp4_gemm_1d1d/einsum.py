"""fp8_einsum(expr, a, b, d, c=None, recipe=(1, 128, 128), epilogue=None, use_128x4_sfd_layout=False): DeepGEMM's block-scaled einsum, `bhr,hdr->bhd`.

    d[b, h, :] = (x[b, h, :] * sfx[b, h]) @ (y[h] * sfy[h]).T  (+ c[b, h, :])

a = (x, sfx): x float8_e4m3fn [b, h, r], sfx [b, h, ceil(r / 128)] (1x128, DeepSeek's activations);
b = (y, sfy): y float8_e4m3fn [h, d, r], sfy [h, ceil(d / 128), ceil(r / 128)] (128x128 weight blocks) or
[h, d, ceil(r / 128)]. Scales: UE8M0 (float32 powers of two or float8_e8m0fnu), converted on every call (torch ops
and a device sync for the power-of-two check); float32 scales that are not powers of two (a checkpoint's FP32
block scales) take the exact FP32-scale kernel (fp8_fp32: applied in FP32 after each 128-K block, never rounded),
also converted per call. For hot paths and CUDA graphs pass UE8M0 scales packed once, per head:
    sfx_p = transform_sf_into_required_layout(sfx.transpose(0, 1), b, r, (1, 128, 128), num_groups=h, is_sfa=True)
    sfy_p = transform_sf_into_required_layout(sfy, d, r, (1, 128, 128), num_groups=h)
d bf16 or fp32 [b, h, d]; c optional with d's dtype and strides.

One launch over all heads: x and y are read through 3-D TMA maps (head = dim 2, any 16-byte-multiple strides),
the scales are packed per head (each 128x128 block repeated over its 128 rows: exact), and the block-scaled MMA
(`QMMA.SF`, kind::mxf8f6f4) multiplies with the scales in the instruction. Runtime shapes."""

from __future__ import annotations

import torch

from ... import jit, keywords
from ...arch import target_of
from ...batched import batched_map, check_batched_operand
from ...checks import SCALE_CHECKS, device_of, get_scale_checks, require_tensor, write_empty_reduction
from ...core.arith import ceil_div
from ...core.rules import dtype_name
from ...device import num_sms_for
from ...launch import kernel_memo, launch
from ...quant import not_power_of_two
from .api import _check_given_packed, _inexact, _pair, _prepare_sf
from .kernel import PARAMS, spec_for
from .plan import batched_config
from .rules import FP8_EINSUM_EXPRS, fp8_einsum_rule

_OFF_A, _OFF_B = PARAMS.offsets["tmap_a"], PARAMS.offsets["tmap_b"]
_OUT = {torch.bfloat16: "bf16", torch.float32: "fp32"}
_U32 = 2**32


@kernel_memo(maxsize=1024)
def _kernel(h: int, m: int, n: int, out: str, with_c: bool, index: int, num_sms: int, target: str, kind: str = "mxfp8"):
    cfg = batched_config(h, m, n, num_sms)
    spec = spec_for(cfg, kind, (128, 128), out, with_c, "batched")
    return jit.get_kernel(spec, target, index), cfg


def _map(offset: int, t: torch.Tensor, rows_dim: int, batch_dim: int, box_rows: int) -> bytes:
    """e4m3 [.., rows, .., K] as uint8 with dims (K, rows, batch) and 128-byte (128B-swizzled) K boxes."""
    return batched_map(offset, "uint8", t, -1, rows_dim, batch_dim, (128, box_rows), 128)


def fp8_einsum(
    expr: str,
    a,
    b,
    d: torch.Tensor,
    c: torch.Tensor | None = None,
    recipe=(1, 128, 128),
    epilogue=None,
    use_128x4_sfd_layout: bool = False,
) -> None:
    """DeepGEMM 2.8.1's fp8_einsum for `bhr,hdr->bhd` (see the module doc); writes d in place. `d` a tensor:
    BF16 / FP32 output. `d` as (d, sfd) or an FP8 epilogue asks for FP8 output with scales in sfd (128x4 blocks
    with use_128x4_sfd_layout): not provided (NotImplementedError)."""
    name = "fp8_einsum"
    keywords.flag(name, "use_128x4_sfd_layout", use_128x4_sfd_layout)
    if isinstance(d, (tuple, list)):
        raise NotImplementedError(
            f"{name}(d=(d, sfd)): FP8 output with scale factors is not provided; SM120 einsum writes BF16 or FP32 d"
        )
    keywords.epilogue(name, epilogue)
    if not isinstance(expr, str):
        raise TypeError(f"expr must be a str, got {type(expr).__name__}")
    norm = expr.replace(" ", "")
    x, sfx = _pair("a", a)
    y, sfy = _pair("b", b)
    require_tensor("d", d)
    if c is not None:
        require_tensor("c", c)
    fp8_einsum_rule(
        expr=norm,
        recipe=recipe,
        a_dtype=dtype_name(x.dtype),
        b_dtype=dtype_name(y.dtype),
        out_dtype=dtype_name(d.dtype),
        c_dtype=dtype_name(c.dtype) if c is not None else None,
    )
    for name, t, what in (("a", x, "[b, h, r]"), ("b", y, "[h, d, r]"), ("d", d, "[b, h, d]")):
        if t.dim() != 3:
            raise ValueError(f"{name} must be 3-D {what}, got shape {tuple(t.shape)}")
    bs, h, r = x.shape
    hy, dd, ry = y.shape
    if hy != h or ry != r:
        raise ValueError(f"a {tuple(x.shape)} and b {tuple(y.shape)} must agree on h and r")
    fp8_einsum_rule(expr=norm, b=bs, h=h, r=r, d=dd)
    if tuple(d.shape) != (bs, h, dd):
        raise ValueError(f"d must be {(bs, h, dd)}, got {tuple(d.shape)}")
    if c is not None and (tuple(c.shape) != tuple(d.shape) or c.stride() != d.stride()):
        raise ValueError("c must have d's shape and strides")
    if d.stride(2) != 1 and dd > 1:
        raise ValueError(f"d must have a contiguous last dimension, got strides {tuple(d.stride())}")
    packed_x = sfx.dtype == torch.int32
    if sfx.dim() != 3 or tuple(sfx.shape[:2]) != ((h, bs) if packed_x else (bs, h)):
        raise ValueError(
            f"a's scales must be [b, h, ceil(r / 128)] = {(bs, h, ceil_div(r, 128))}, got {tuple(sfx.shape)}"
        )
    if sfy.dim() != 3 or sfy.shape[0] != h:
        raise ValueError(f"b's scales must be [h, ceil(d / 128), ceil(r / 128)], got {tuple(sfy.shape)}")
    if bs and h and dd and r:
        check_batched_operand("a", x)
        check_batched_operand("b", y)
    index = device_of(a=x, sfa=sfx, b=y, sfb=sfy, d=d, **({"c": c} if c is not None else {}))
    if bs == 0 or h == 0 or dd == 0:
        return
    if r == 0:
        write_empty_reduction(d, c)
        return
    if max(d.stride(0), d.stride(1)) >= _U32:
        raise ValueError("d's strides must fit 32 bits")
    # per head: A_h = x[:, h] (rows b), B_h = y[h] (rows d); scales packed as [h, words, rows]
    sw = SCALE_CHECKS.value  # opt-in (DG_SM120_CHECK_SCALES): packed scales taken as given
    if sw or (sw is None and get_scale_checks()):
        _check_given_packed("mxfp8", (("sfa", sfx, packed_x), ("sfb", sfy, sfy.dtype == torch.int32)))
    sfx_h = sfx if packed_x else sfx.permute(1, 0, 2)
    kind = "mxfp8"
    try:
        sfa_p, sfa_ps, sfa_gs = _prepare_sf("sfa", sfx_h, bs, r, 128, h, True)
        sfb_p, sfb_ps, sfb_gs = _prepare_sf("sfb", sfy, dd, r, 128, h, False)
    except ValueError as e:  # FP32 scales UE8M0 cannot hold: the exact kernel when both sides are float32
        if not not_power_of_two(e):
            raise
        if not (sfx.dtype == torch.float32 and sfy.dtype == torch.float32):
            raise _inexact(e) from None
        kind = "fp8_fp32"
        sfa_p, sfa_ps, sfa_gs = _prepare_sf("sfa", sfx_h, bs, r, 128, h, True, True)
        sfb_p, sfb_ps, sfb_gs = _prepare_sf("sfb", sfy, dd, r, 128, h, False, True)
    num_sms = num_sms_for(index)
    kern, cfg = _kernel(h, bs, dd, _OUT[d.dtype], c is not None, index, num_sms, target_of(index), kind)
    tmaps = _map(_OFF_A, x, 0, 1, cfg.block_m) + _map(_OFF_B, y, 1, 0, cfg.block_n)
    ldd = d.stride(0) if bs > 1 else dd
    params = PARAMS.pack(
        sfa=sfa_p.data_ptr(),
        sfb=sfb_p.data_ptr(),
        d=d.data_ptr(),
        c=c.data_ptr() if c is not None else 0,
        layout=0,
        m=bs,
        n=dd,
        k=r,
        ldd=ldd,
        ldc=ldd if c is not None else 0,
        num_groups=h,
        psum_layout=0,
        num_splits=1,
        split_stride=d.stride(1),
        sfa_pack_stride=sfa_ps,
        sfa_group_stride=sfa_gs,
        sfb_pack_stride=sfb_ps,
        sfb_group_stride=sfb_gs,
        alpha=1.0,
    )
    tiles = h * ceil_div(bs, cfg.block_m) * ceil_div(dd, cfg.block_n)
    launch(kern, min(num_sms, tiles), params, tmaps, index)


__all__ = ["fp8_einsum", "FP8_EINSUM_EXPRS"]
