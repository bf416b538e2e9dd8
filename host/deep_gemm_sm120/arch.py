"""Which compile target a device gets, and whether SM120 kernels may run on it (emulation)."""

from __future__ import annotations

import os
from functools import cache

EMULATE_ENV = "DG_SM120_EMULATE"
SM120_TARGETS = {(12, 0): "sm_120a", (12, 1): "sm_121a"}
# Non-SM120 archs on which the emulation path is qualified (the H200 is sm_90a).
EMULATION_TARGETS = {(9, 0): "sm_90a"}
RELEASE_TARGETS = ("sm_120a", "sm_120f", "sm_121a")


def emulation_requested() -> bool:
    return os.environ.get(EMULATE_ENV, "") not in ("", "0", "false", "False")


def target_for_capability(cap: tuple[int, int], emulate: bool) -> str:
    """The nvcc target for a compute capability, or NotImplementedError naming the arch."""
    if cap in SM120_TARGETS:
        return SM120_TARGETS[cap]
    if emulate and cap in EMULATION_TARGETS:
        return EMULATION_TARGETS[cap]
    arch = f"sm_{cap[0]}{cap[1]}"
    if emulate:
        raise NotImplementedError(
            f"deep_gemm_sm120: no emulation path for {arch}; emulation is qualified on sm_90 only"
        )
    raise NotImplementedError(
        f"deep_gemm_sm120 kernels target SM120 (compute capability 12.x); this device is {arch}. "
        f"Set {EMULATE_ENV}=1 to run them through the sm_90 emulation (for qualification, not speed)."
    )


@cache
def device_capability(index: int) -> tuple[int, int]:
    import torch

    return tuple(torch.cuda.get_device_capability(index))


def target_for_device(index: int) -> str:
    return target_for_capability(device_capability(index), emulation_requested())


_native: dict[int, str] = {}  # device index -> its SM120 target (the variable cannot change it)


def target_of(index: int) -> str:
    """target_for_device(index), memoized for SM120 devices, whose target DG_SM120_EMULATE cannot change. On any
    other device (the qualification emulation) the variable is read on every call, so setting or clearing it
    takes effect at once; the kernel and plan caches take the target itself as their key."""
    t = _native.get(index)
    if t is not None:
        return t
    t = target_for_device(index)
    if device_capability(index) in SM120_TARGETS:
        _native[index] = t
    return t
