"""What every family's API shares between checking its arguments and launching: the device prologue, the PDL
switch, and the launch entry itself."""
from __future__ import annotations

import os

import torch

from . import runtime
from .arch import target_for_device

PDL_ENV = "DG_SM120_PDL"


class Launcher:
    """Launch state shared by every family: the raw launch entry and stream getter (bound on first use, so
    importing stays free of CUDA) and the PDL switch (None until the first launch reads the environment)."""
    __slots__ = ("launch", "stream", "pdl", "compile_mode")

    def __init__(self) -> None:
        self.launch = None
        self.stream = None
        self.pdl: bool | None = None
        self.compile_mode = 0

    def bind(self) -> "Launcher":
        self.launch, self.stream = runtime.launcher(), runtime.current_stream_fn()
        return self


# Hot paths read BOUND's fields directly: `BOUND if BOUND.launch is not None else bound()`, and
# `BOUND.pdl if BOUND.pdl is not None else get_pdl()`.
BOUND = Launcher()


def bound() -> Launcher:
    return BOUND if BOUND.launch is not None else BOUND.bind()


def get_pdl() -> bool:
    """Whether launches of kernels that wait on griddepcontrol carry programmatic dependent launch (PDL):
    the next kernel's prologue then overlaps this one's tail. On by default; DG_SM120_PDL=0 (read at the first
    launch) or set_pdl(False) turns it off."""
    if BOUND.pdl is None:
        BOUND.pdl = os.environ.get(PDL_ENV, "1") not in ("0", "false", "False", "")
    return BOUND.pdl


def set_pdl(enabled: bool) -> None:
    if not isinstance(enabled, bool):
        raise TypeError(f"set_pdl takes a bool, got {type(enabled).__name__}")
    BOUND.pdl = enabled


COMPILE_MODES = {0: "compile (JIT, on first use of a configuration) and launch",
                 1: "compile only: every check runs and each kernel is built and loaded into the JIT cache, but no "
                    "kernel is launched (outputs are left as they are): warm-up without GPU work"}


def _skip_launch(*args) -> None:
    """The launch entry under compile mode 1: the kernel was built and loaded by the caller; nothing runs."""


def get_compile_mode() -> int:
    return BOUND.compile_mode


def set_compile_mode(mode: int) -> None:
    """DeepGEMM's compile mode (see COMPILE_MODES). Mode 1 swaps the launch entry every family calls for one that
    does nothing, so hot paths keep their single attribute read; mode 0 rebinds the real one on next use."""
    if isinstance(mode, bool) or not isinstance(mode, int):
        raise TypeError(f"set_compile_mode takes an int, got {type(mode).__name__}")
    if mode not in COMPILE_MODES:
        raise ValueError(f"compile mode must be one of {sorted(COMPILE_MODES)} ({COMPILE_MODES}), got {mode}")
    BOUND.compile_mode = mode
    if mode == 1:
        BOUND.launch, BOUND.stream = _skip_launch, lambda index: 0
    else:
        BOUND.launch = BOUND.stream = None


def device_of(**tensors: torch.Tensor) -> int:
    """The device prologue of every entry point: all tensors on one CUDA device (ValueError otherwise), and the
    architecture supported there (NotImplementedError otherwise, even for empty problems). Returns its index."""
    devs = {name: t.device for name, t in tensors.items()}
    for name, dev in devs.items():
        if dev.type != "cuda":
            from .device import NO_GPU

            raise ValueError(f"{name} must be on a CUDA device, got {dev}"
                             + ("" if torch.cuda.is_available() else f"; {NO_GPU}"))
    first = next(iter(devs.values()))
    if any(dev != first for dev in devs.values()):
        listing = ", ".join(f"{n}={d}" for n, d in devs.items())
        raise ValueError(f"all tensors must be on one CUDA device, got {listing}")
    index = first.index if first.index is not None else torch.cuda.current_device()
    target_for_device(index)
    return index


def launch(kernel, grid: int | tuple[int, int, int], params: bytes, tmaps: bytes, index: int,
           smem: int | None = None) -> None:
    """Launch a jit.LoadedKernel on the current stream of device `index` (PDL when the family waits on
    griddepcontrol and the switch is on)."""
    b = bound()
    gx, gy, gz = (grid, 1, 1) if isinstance(grid, int) else grid
    b.launch(kernel.handle, gx, gy, gz, kernel.threads, kernel.smem_bytes if smem is None else smem,
             b.stream(index), kernel.pdl and get_pdl(), params, tmaps)
