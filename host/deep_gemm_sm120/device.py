"""SM count control and per-device facts, cached so the hot path does not query the driver."""

from __future__ import annotations

from functools import cache

from .launch import forget_calls

_num_sms: int | None = None

NO_GPU = "no CUDA GPU was found (torch.cuda.is_available() is False): deep_gemm_sm120's kernels need an SM120 GPU"


def require_gpu(what: str) -> None:
    """NotImplementedError (the README's error for a platform we do not run on) when there is no CUDA GPU;
    torch would raise an AssertionError or RuntimeError from deep inside instead."""
    import torch

    if not torch.cuda.is_available():
        raise NotImplementedError(f"{what}: {NO_GPU}")


@cache
def device_sm_count(index: int) -> int:
    import torch

    return torch.cuda.get_device_properties(index).multi_processor_count


def set_num_sms(num_sms: int) -> None:
    """Limit persistent kernels to `num_sms` CTAs (e.g. to leave SMs for communication kernels)."""
    import torch

    if not isinstance(num_sms, int) or isinstance(num_sms, bool):
        raise TypeError(f"num_sms must be an int, got {type(num_sms).__name__}")
    require_gpu("set_num_sms")
    limit = device_sm_count(torch.cuda.current_device())
    if not 1 <= num_sms <= limit:
        raise ValueError(f"num_sms must be in [1, {limit}] on this device, got {num_sms}")
    global _num_sms
    _num_sms = num_sms
    forget_calls()  # cached calls hold grids planned for the previous count


def get_num_sms() -> int:
    import torch

    if _num_sms is not None:
        return _num_sms
    require_gpu("get_num_sms")
    return device_sm_count(torch.cuda.current_device())


def num_sms_for(index: int) -> int:
    return _num_sms if _num_sms is not None else device_sm_count(index)
