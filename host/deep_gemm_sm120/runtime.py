"""Access to the compiled pybind11 runtime (`_C`). Importing this never loads libcuda."""

from __future__ import annotations

from functools import cache

from .core.params import ParamList


@cache
def _ext():
    try:
        from . import _C
    except ImportError as e:  # the extension was not built (e.g. a source checkout without `pip install -e .`)
        raise RuntimeError(f"deep_gemm_sm120 runtime extension is not built ({e}); run `pip install -e .`") from None
    return _C


def load_kernel(cubin: bytes, smem_bytes: int, device: int, params: ParamList) -> int:
    """Load into `device`'s primary context (the one torch uses); returns a handle for launch(). The driver
    must report the parameter count and sizes `params` declares (cuFuncGetParamInfo), else RuntimeError."""
    offsets = [off for _, off, _, _ in params.layout]
    sizes = [size for _, _, size, _ in params.layout]
    return _ext().load_kernel(cubin, smem_bytes, device, offsets, sizes, params.size)


def launcher():
    """The one launch entry: launcher()(handle, gx, gy, gz, block, smem, stream, pdl, params, tmaps), with
    `params` from ParamList.pack / packer and `tmaps` concatenated core.tma records (bound once on hot paths)."""
    return _ext().launch


def kernel_attribute(handle: int, attr: str) -> int:
    return _ext().kernel_attribute(handle, attr)


def current_stream_fn():
    """Fast raw-stream getter for a device index (torch's private binding when present, else the public API)."""
    import torch

    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw
    return lambda index: torch.cuda.current_stream(index).cuda_stream
