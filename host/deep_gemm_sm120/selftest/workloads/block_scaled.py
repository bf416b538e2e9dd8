"""Block-scaled GEMM operands and their fp64 values (CPU or GPU tensors), for the tests, sanitizer drivers and
benchmarks.

Inputs are built with deliberately *adversarial* scales: every row / 128-row block and every K block gets its
own magnitude (a span of about 2^-12 .. 2^12), so a scale applied to the wrong row, column or K block moves
the result far beyond the tolerances."""

from __future__ import annotations

import torch

from deep_gemm_sm120 import quant
from deep_gemm_sm120.core.arith import ceil_div


def adversarial(rows: int, k: int, block_k: int, gen: torch.Generator, block_rows: int = 1) -> torch.Tensor:
    """Gaussian values whose magnitude changes per (block of rows, block of K), on the generator's device."""
    device = gen.device
    x = torch.randn(rows, k, device=device, generator=gen)
    br, bk = ceil_div(rows, block_rows), ceil_div(k, block_k)
    exps = torch.randint(-12, 13, (br, bk), device=device, generator=gen).float()
    mag = torch.pow(2.0, exps).repeat_interleave(block_rows, 0).repeat_interleave(block_k, 1)[:rows, :k]
    return x * mag


def cast_fp8(x: torch.Tensor, block_rows: int, block_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """e4m3 values and power-of-two fp32 scales per block_rows x block_k block."""
    return quant._cast_fp8(x, block_rows, block_k, True)


def dequant_fp8(q: torch.Tensor, sf: torch.Tensor, block_rows: int, block_k: int) -> torch.Tensor:
    rows, k = q.shape
    scale = sf.double().repeat_interleave(block_rows, 0).repeat_interleave(block_k, 1)[:rows, :k]
    return q.double() * scale


def fp8_operands(m: int, n: int, k: int, gen: torch.Generator, gran_k: int = 128, b_blocks: bool = True):
    """((a, sfa), (b, sfb), fp64 reference of a @ b.T) for a DeepSeek-style (b_blocks: 128x128 weights) or
    per-row recipe at K granularity gran_k."""
    bk_rows = 128 if b_blocks else 1
    xa = adversarial(m, k, gran_k, gen)
    xb = adversarial(n, k, gran_k, gen, block_rows=bk_rows)
    a, sfa = cast_fp8(xa, 1, gran_k)
    b, sfb = cast_fp8(xb, bk_rows, gran_k)
    ref = dequant_fp8(a, sfa, 1, gran_k) @ dequant_fp8(b, sfb, bk_rows, gran_k).T
    return (a, sfa), (b, sfb), ref


def fp8_operands_fp32(m: int, n: int, k: int, gen: torch.Generator, b_blocks: bool = True):
    """As fp8_operands with DeepSeek's recipe, but with the FP32 scales a checkpoint ships (amax / 448 per 1x128
    and 128x128 block: not powers of two), adversarial magnitudes as there."""
    bk_rows = 128 if b_blocks else 1
    xa = adversarial(m, k, 128, gen)
    xb = adversarial(n, k, 128, gen, block_rows=bk_rows)
    a, sfa = quant._cast_fp8(xa, 1, 128, False)
    b, sfb = quant._cast_fp8(xb, bk_rows, 128, False)
    ref = dequant_fp8(a, sfa, 1, 128) @ dequant_fp8(b, sfb, bk_rows, 128).T
    return (a, sfa), (b, sfb), ref


def fp4_operands(m: int, n: int, k: int, gen: torch.Generator, kind: str):
    """((a, sfa), (b, sfb), alpha, fp64 reference) with per_token_cast_to_fp4 on both sides."""
    block = 32 if kind == "mxfp4" else 16
    xa, xb = adversarial(m, k, block, gen), adversarial(n, k, block, gen)
    a, sfa, ga = quant.per_token_cast_to_fp4(xa, kind)
    b, sfb, gb = quant.per_token_cast_to_fp4(xb, kind)
    ref = quant.dequantize_fp4(a, sfa, 1.0, kind).double() @ quant.dequantize_fp4(b, sfb, 1.0, kind).double().T
    alpha = float(ga) * float(gb)
    return (a, sfa), (b, sfb), alpha, ref * alpha


SIDES = {
    "mxfp8": ("e4m3", "e4m3"),
    "mxfp4": ("mxfp4", "mxfp4"),
    "nvfp4": ("nvfp4", "nvfp4"),
    "e4m3_e2m1": ("e4m3", "mxfp4"),
    "e2m1_e4m3": ("mxfp4", "e4m3"),
}


def quantize_side(fmt: str, rows: int, k: int, gen: torch.Generator, gran: int = 128, block_rows: int = 1):
    """(quantized operand, its scales, fp64 dequantized values) for one operand with adversarial scales.
    fmt: e4m3 (UE8M0 per block_rows x gran), mxfp4 or nvfp4 (block scales only: alpha = 1)."""
    if fmt == "e4m3":
        q, sf = cast_fp8(adversarial(rows, k, gran, gen, block_rows=block_rows), block_rows, gran)
        return q, sf, dequant_fp8(q, sf, block_rows, gran)
    block = 32 if fmt == "mxfp4" else 16
    q, sf, _ = quant.per_token_cast_to_fp4(adversarial(rows, k, block, gen), fmt)
    return q, sf, quant.dequantize_fp4(q, sf, 1.0, fmt).double()


def einsum_operands(x: torch.Tensor, y: torch.Tensor, ue8m0: bool = True):
    """fp8_einsum('bhr,hdr->bhd') operands in DeepGEMM's test recipe: x [B, H, R] per token (1x128), each head of
    y [H, D, R] per 128x128 block, UE8M0 scales (ue8m0=False: the FP32 amax / 448 scales a checkpoint ships).
    Returns ((xq, sx), (yq, sy))."""
    bs, h, r = x.shape
    xq, sx = quant.per_token_cast_to_fp8(x.reshape(-1, r).float(), ue8m0)
    xq, sx = xq.view(bs, h, r), sx.view(bs, h, -1)
    yq = torch.empty(y.shape, device=y.device, dtype=torch.float8_e4m3fn)
    sy = torch.empty(y.shape[0], ceil_div(y.shape[1], 128), ceil_div(r, 128), device=y.device)
    for i in range(y.shape[0]):
        yq[i], sy[i] = quant.per_block_cast_to_fp8(y[i].float(), ue8m0)
    return (xq, sx), (yq, sy)
