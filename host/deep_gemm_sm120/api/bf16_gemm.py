"""BF16 GEMM: D = C + A·Bᵀ with A [M,K], B [N,K] (both K-major), D/C [M,N] in bf16 or fp32."""
from __future__ import annotations

import torch

from .. import jit, runtime
from ..arch import target_for_device
from ..configs import Bf16GemmSpec
from ..device import num_sms_for
from ..heuristics import choose_bf16_config
from ..validation import (output_row_stride, require_2d, require_dtype, require_same_cuda_device,
                          require_tensor, tma_row_stride_bytes)

_OUT = {torch.bfloat16: "bf16", torch.float32: "fp32"}
_BLOCK_K = 64


def _validate_nt(a, b, d, c) -> tuple[int, int, int]:
    for name, t in (("a", a), ("b", b), ("d", d)):
        require_tensor(name, t)
    require_dtype("a", a, (torch.bfloat16,))
    require_dtype("b", b, (torch.bfloat16,))
    require_dtype("d", d, (torch.bfloat16, torch.float32), unsupported=True)
    require_2d("a", a, "[M, K]")
    require_2d("b", b, "[N, K]")
    require_2d("d", d, "[M, N]")
    m, k = a.shape
    n, kb = b.shape
    if kb != k:
        raise ValueError(f"a is [M, K] = {tuple(a.shape)} and b is [N, K] = {tuple(b.shape)}: K must agree")
    if tuple(d.shape) != (m, n):
        raise ValueError(f"d must be [M, N] = ({m}, {n}), got {tuple(d.shape)}")
    tensors = {"a": a, "b": b, "d": d}
    if c is not None:
        require_tensor("c", c)
        if c.dtype != d.dtype:
            raise TypeError(f"c must have d's dtype {d.dtype}, got {c.dtype}")
        if tuple(c.shape) != (m, n):
            raise ValueError(f"c must be [M, N] = ({m}, {n}), got {tuple(c.shape)}")
        tensors["c"] = c
    require_same_cuda_device(**tensors)
    return m, n, k


def bf16_gemm_nt(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: torch.Tensor | None = None) -> None:
    """d = c + a @ b.T (c optional, may alias d). Result written into the preallocated `d`."""
    m, n, k = _validate_nt(a, b, d, c)
    ldd = output_row_stride("d", d)
    ldc = output_row_stride("c", c) if c is not None else 0
    index = d.device.index if d.device.index is not None else torch.cuda.current_device()
    target = target_for_device(index)  # NotImplementedError on non-SM120 unless emulation is requested
    if m == 0 or n == 0:
        return
    if k == 0:  # empty reduction: TMA cannot describe a zero-extent tensor; nothing to read from a or b
        if c is None:
            d.zero_()
        elif c.data_ptr() != d.data_ptr():
            d.copy_(c)
        return
    lda = tma_row_stride_bytes("a", a)
    ldb = tma_row_stride_bytes("b", b)
    num_sms = num_sms_for(index)
    cfg = choose_bf16_config(m, n, k, num_sms)
    kern = jit.get_kernel(Bf16GemmSpec(cfg, _OUT[d.dtype], c is not None), target, index)
    grid = min(num_sms, -(-m // cfg.block_m) * -(-n // cfg.block_n))
    stream = torch.cuda.current_stream(d.device).cuda_stream
    runtime.launch(
        kern.handle, grid, kern.threads, stream,
        [(a.data_ptr(), 2, k, m, lda, _BLOCK_K, cfg.block_m, 128),
         (b.data_ptr(), 2, k, n, ldb, _BLOCK_K, cfg.block_n, 128)],
        [d.data_ptr(), c.data_ptr() if c is not None else 0],
        [m, n, k, ldd, ldc],
    )
