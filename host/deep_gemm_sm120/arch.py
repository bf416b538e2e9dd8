"""Which compile target a device gets, and whether SM120 kernels may run on it (emulation)."""
from __future__ import annotations

import os
from functools import lru_cache

EMULATE_ENV = "DG_SM120_EMULATE"
SM120_TARGETS = {(12, 0): "sm_120a", (12, 1): "sm_121a"}
# Non-SM120 archs on which the emulation path is qualified (the H200 is sm_90a).
EMULATION_TARGETS = {(9, 0): "sm_90a"}
RELEASE_TARGETS = ("sm_120a", "sm_120f", "sm_121a")


def _env_reader(name: str):
    """A cheap reader of one environment variable's raw value: os.environ.get costs ~0.7 us (key encoding and
    value decoding), a noticeable share of a cached launch; CPython's os.environ keeps its encoded dict in
    `_data`, updated by every os.environ write. Falls back to os.environ.get elsewhere."""
    data, encode = getattr(os.environ, "_data", None), getattr(os.environ, "encodekey", None)
    if isinstance(data, dict) and encode is not None:
        key = encode(name)
        return lambda: data.get(key)
    return lambda: os.environ.get(name)


# The raw DG_SM120_EMULATE value: part of every plan-cache key (the target depends on it), read per call so
# that changing it takes effect at once.
emulation_env = _env_reader(EMULATE_ENV)


def emulation_requested() -> bool:
    v = emulation_env()
    v = v.decode() if isinstance(v, bytes) else v
    return v not in (None, "", "0", "false", "False")


def target_for_capability(cap: tuple[int, int], emulate: bool) -> str:
    """The nvcc target for a compute capability, or NotImplementedError naming the arch."""
    if cap in SM120_TARGETS:
        return SM120_TARGETS[cap]
    if emulate and cap in EMULATION_TARGETS:
        return EMULATION_TARGETS[cap]
    arch = f"sm_{cap[0]}{cap[1]}"
    if emulate:
        raise NotImplementedError(
            f"deep_gemm_sm120: no emulation path for {arch}; emulation is qualified on sm_90 only")
    raise NotImplementedError(
        f"deep_gemm_sm120 kernels target SM120 (compute capability 12.x); this device is {arch}. "
        f"Set {EMULATE_ENV}=1 to run them through the sm_90 emulation (for qualification, not speed).")


@lru_cache(maxsize=None)
def device_capability(index: int) -> tuple[int, int]:
    import torch

    return tuple(torch.cuda.get_device_capability(index))


def target_for_device(index: int) -> str:
    return target_for_capability(device_capability(index), emulation_requested())


_targets: dict = {}


def target_of(index: int) -> str:
    """target_for_device(index) under the current DG_SM120_EMULATE, memoized per (device, raw value): the kernel
    and plan caches take the target itself as their key, so a change of the variable takes effect at once."""
    key = (index, emulation_env())
    t = _targets.get(key)
    if t is None:
        t = _targets[key] = target_for_device(index)
    return t
