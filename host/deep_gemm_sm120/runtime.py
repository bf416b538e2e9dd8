"""Access to the compiled pybind11 runtime (`_C`). Importing this never loads libcuda."""
from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=None)
def _ext():
    try:
        from . import _C
    except ImportError as e:  # the extension was not built (e.g. a source checkout without `pip install -e .`)
        raise RuntimeError(f"deep_gemm_sm120 runtime extension is not built ({e}); run `pip install -e .`") from None
    return _C


def load_kernel(cubin: bytes, smem_bytes: int, device: int) -> int:
    """Load into `device`'s primary context (the one torch uses); returns a handle for launch()."""
    return _ext().load_kernel(cubin, "", smem_bytes, device)


def launch(handle: int, grid: int, block: int, stream: int, tmaps: list, ptrs: list, u32s: list,
           pdl: bool = False) -> None:
    _ext().launch(handle, grid, block, stream, tmaps, ptrs, u32s, pdl)


def kernel_attribute(handle: int, attr: str) -> int:
    return _ext().kernel_attribute(handle, attr)


def gemm_launcher():
    """The flat launch entry for two-TMA-operand GEMM kernels (bound once by callers on the hot path)."""
    return _ext().launch_gemm_tma2


def block_scaled_launcher():
    """The flat launch entry for block-scaled (FP8 / FP4) GEMM kernels."""
    return _ext().launch_block_scaled_gemm


def current_stream_fn():
    """Fast raw-stream getter for a device index (torch's private binding when present, else the public API)."""
    import torch

    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw
    return lambda index: torch.cuda.current_stream(index).cuda_stream
