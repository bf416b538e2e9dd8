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

    major, minor = torch.cuda.get_device_capability(index)
    return int(major), int(minor)


def target_for_device(index: int) -> str:
    return target_for_capability(device_capability(index), emulation_requested())


_targets: dict[int, str] = {}  # device index -> the target its first kernel call chose


def target_of(index: int) -> str:
    """target_for_device(index), fixed for the process once a device has one: DG_SM120_EMULATE is read until a
    call on the device succeeds (a refusal is not remembered, so setting the variable after one takes effect),
    and clearing it later keeps that device on the emulation path. A hit is one dict lookup (os.environ.get
    costs ~0.7 us, a share of a cached call); reset_targets() forgets the choices."""
    t = _targets.get(index)
    if t is None:
        t = _targets[index] = target_for_device(index)
    return t


def reset_targets() -> None:
    """Forget every device's target: the next call reads DG_SM120_EMULATE again (tests switch it per test). The
    calls planned for the old targets are forgotten with them (launch.forget_calls: the served ones hold no
    target to compare)."""
    from .launch import forget_calls

    _targets.clear()
    forget_calls()
