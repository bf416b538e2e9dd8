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
from ...core.tma import with_addresses
from ...device import num_sms_for
from ...launch import KEY_ERRORS, CallCache, fast_calls, kernel_memo, launch, no_fast, recipe_key, recording, tensor_key
from ...quant import not_power_of_two
from .api import _check_given_packed, _check_sf, _inexact, _pair, _prepare_sf
from .kernel import PARAMS, spec_for
from .plan import batched_config
from .rules import FP8_EINSUM_EXPRS, fp8_einsum_rule

_OFF_A, _OFF_B = PARAMS.offsets["tmap_a"], PARAMS.offsets["tmap_b"]
_OUT = {torch.bfloat16: "bf16", torch.float32: "fp32"}
_U32 = 2**32
_SEQ = (tuple, list)
_CALLS = CallCache()  # fp8_einsum calls checked once per signature
_pack = PARAMS.packer()  # the parameters after the two tensor maps, in declaration order


@kernel_memo(maxsize=1024)
def _kernel(h: int, m: int, n: int, out: str, with_c: bool, index: int, num_sms: int, target: str, kind: str = "mxfp8"):
    """The batched kernel of one kind for a plan (batched_config: the same tiles for either kind)."""
    spec = spec_for(batched_config(h, m, n, num_sms), kind, (128, 128), out, with_c, "batched")
    return jit.get_kernel(spec, target, index)


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
    with use_128x4_sfd_layout): not provided (NotImplementedError). Checks run once per signature (the
    expression, recipe and every tensor's dtype, shape, strides, device and alignment class); what depends on
    values (unpacked scales' conversion and power-of-two test, the opt-in packed-scale check) runs per call."""
    sig = (
        _FAST(expr, a, b, d, c, recipe)
        if epilogue is None
        and use_128x4_sfd_layout is False
        and (SCALE_CHECKS.value is False or not get_scale_checks())
        else None
    )
    if sig is True:  # served in C (launch.fast_calls)
        return
    try:
        if epilogue is not None or use_128x4_sfd_layout is not False or type(a) not in _SEQ or type(b) not in _SEQ:
            raise TypeError("not a signature the cache keys")
        x, sfx = a
        y, sfy = b
        key = sig or (
            type(expr),
            expr,
            recipe_key(recipe),
            tensor_key(x),
            tensor_key(sfx),
            tensor_key(y),
            tensor_key(sfy),
            tensor_key(d),
            None if c is None else tensor_key(c),
        )
        call = _CALLS.get(key)
    except (*KEY_ERRORS, ValueError):  # ValueError: a pair of another length; the checks name what was expected
        key, call = None, None
    if call is None or target_of(call[1]) != call[0]:
        call, (x, sfx, y, sfy) = _prepare(expr, a, b, d, c, recipe, epilogue, use_128x4_sfd_layout)
        if sig is not None and key is not None:  # a new signature: what it launches is kept for the C table
            with recording(_FAST, (expr, a, b, d, c, recipe)):
                call[2](x, sfx, y, sfy, d, c)
        else:
            call[2](x, sfx, y, sfy, d, c)
        if key is not None:  # stored once the call succeeded: one whose scale values fail leaves no entry
            _CALLS.put(key, call)
        return
    call[2](x, sfx, y, sfy, d, c)


_FAST = fast_calls("VPPTTV")


def _prepare(expr, a, b, d, c, recipe, epilogue, use_128x4_sfd_layout) -> tuple:
    """Every check of a call, then ((target, device index, what a call of this signature runs), its operands)."""
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
    packed_x, packed_y = sfx.dtype == torch.int32, sfy.dtype == torch.int32
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
    operands = (x, sfx, y, sfy)
    if bs == 0 or h == 0 or dd == 0:
        return (target_of(index), index, _nothing), operands
    if r == 0:
        return (target_of(index), index, _empty_reduction), operands
    if max(d.stride(0), d.stride(1)) >= _U32:
        raise ValueError("d's strides must fit 32 bits")
    # per head: A_h = x[:, h] (rows b), B_h = y[h] (rows d); scales packed as [h, words, rows]. Every scale is
    # checked here as far as the signature decides: packed int32 ones are then used as given ((word stride,
    # group stride)), unpacked ones (None) are converted per call.
    sfa_fixed = _check_sf("sfa", sfx if packed_x else sfx.permute(1, 0, 2), bs, r, 128, h, True)
    sfb_fixed = _check_sf("sfb", sfy, dd, r, 128, h, False)
    num_sms = num_sms_for(index)
    target = target_of(index)
    out, with_c = _OUT[d.dtype], c is not None
    cfg = batched_config(h, bs, dd, num_sms)
    maps = _map(_OFF_A, x, 0, 1, cfg.block_m) + _map(_OFF_B, y, 1, 0, cfg.block_n)
    ldd = d.stride(0) if bs > 1 else dd
    ldc, split_stride = ldd if with_c else 0, d.stride(1)
    grid = min(num_sms, h * ceil_div(bs, cfg.block_m) * ceil_div(dd, cfg.block_n))
    if packed_x and packed_y:
        kern = _kernel(h, bs, dd, out, with_c, index, num_sms, target, "mxfp8")

    def run(x, sfx, y, sfy, d, c) -> None:
        sw = SCALE_CHECKS.value  # opt-in (DG_SM120_CHECK_SCALES): packed scales taken as given
        if sw or (sw is None and get_scale_checks()):
            no_fast()  # the check reads the scales' values on every call
            _check_given_packed("mxfp8", (("sfa", sfx, packed_x), ("sfb", sfy, packed_y)))
        if packed_x and packed_y:
            k_ = kern
            (sfa_ps, sfa_gs), (sfb_ps, sfb_gs) = sfa_fixed, sfb_fixed
            sfa_p, sfb_p = sfx, sfy
        else:
            no_fast()  # the kernel follows the scales' values
            kind, (sfa_p, sfa_ps, sfa_gs), (sfb_p, sfb_ps, sfb_gs) = _scales_per_call(x, sfx, sfy, bs, h, r, dd)
            k_ = _kernel(h, bs, dd, out, with_c, index, num_sms, target, kind)
        params = _pack(
            sfa_p.data_ptr(), sfb_p.data_ptr(), d.data_ptr(), c.data_ptr() if c is not None else 0, 0,
            bs, dd, r, ldd, ldc, h, 0, 1, split_stride, sfa_ps, sfa_gs, sfb_ps, sfb_gs, 1.0,
        )  # fmt: skip
        launch(k_, grid, params, with_addresses(maps, x.data_ptr(), y.data_ptr()), index)

    return (target, index, run), operands


def _scales_per_call(x, sfx, sfy, bs: int, h: int, r: int, dd: int) -> tuple:
    """(kind, (sfa, pack stride, group stride), (sfb, ...)) for scales one or both of which are unpacked: UE8M0
    (powers of two) packed for the mxfp8 kernel, else float32 on both sides for the exact kernel (a ValueError
    naming the exact path when the other side is packed or not float32)."""
    sfx_h = sfx if sfx.dtype == torch.int32 else sfx.permute(1, 0, 2)
    try:
        return "mxfp8", _prepare_sf("sfa", sfx_h, bs, r, 128, h, True), _prepare_sf("sfb", sfy, dd, r, 128, h, False)
    except ValueError as e:  # FP32 scales UE8M0 cannot hold: the exact kernel when both sides are float32
        if not not_power_of_two(e):
            raise
        if not (sfx.dtype == torch.float32 and sfy.dtype == torch.float32):
            raise _inexact(e) from None
    exact = (_prepare_sf("sfa", sfx_h, bs, r, 128, h, True, True), _prepare_sf("sfb", sfy, dd, r, 128, h, False, True))
    return ("fp8_fp32", *exact)


def _nothing(x, sfx, y, sfy, d, c) -> None:
    """An empty output: nothing to write."""


def _empty_reduction(x, sfx, y, sfy, d, c) -> None:
    write_empty_reduction(d, c)


__all__ = ["fp8_einsum", "FP8_EINSUM_EXPRS"]
