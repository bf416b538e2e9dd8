"""What every family's API shares between checking its arguments and launching: the device prologue, the PDL
switch, and the launch entry itself."""
from __future__ import annotations

import os

import torch

from . import runtime
from .arch import target_for_device

PDL_ENV = "DG_SM120_PDL"
_pdl: bool | None = None  # None until the first launch reads the environment (or set_pdl decides)


def get_pdl() -> bool:
    """Whether launches of kernels that wait on griddepcontrol carry programmatic dependent launch (PDL):
    the next kernel's prologue then overlaps this one's tail. On by default; DG_SM120_PDL=0 (read at the first
    launch) or set_pdl(False) turns it off."""
    global _pdl
    if _pdl is None:
        _pdl = os.environ.get(PDL_ENV, "1") not in ("0", "false", "False", "")
    return _pdl


def set_pdl(enabled: bool) -> None:
    if not isinstance(enabled, bool):
        raise TypeError(f"set_pdl takes a bool, got {type(enabled).__name__}")
    global _pdl
    _pdl = enabled


def device_of(**tensors: torch.Tensor) -> int:
    """The device prologue of every entry point: all tensors on one CUDA device (ValueError otherwise), and the
    architecture supported there (NotImplementedError otherwise, even for empty problems). Returns its index."""
    devs = {name: t.device for name, t in tensors.items()}
    for name, dev in devs.items():
        if dev.type != "cuda":
            raise ValueError(f"{name} must be on a CUDA device, got {dev}")
    first = next(iter(devs.values()))
    if any(dev != first for dev in devs.values()):
        listing = ", ".join(f"{n}={d}" for n, d in devs.items())
        raise ValueError(f"all tensors must be on one CUDA device, got {listing}")
    index = first.index if first.index is not None else torch.cuda.current_device()
    target_for_device(index)
    return index


class Launcher:
    """The raw launch entry and stream getter, bound on first use (importing stays free of CUDA)."""
    __slots__ = ("launch", "stream")

    def __init__(self) -> None:
        self.launch = None
        self.stream = None

    def bind(self) -> "Launcher":
        self.launch, self.stream = runtime.launcher(), runtime.current_stream_fn()
        return self


_bound = Launcher()


def bound() -> Launcher:
    return _bound if _bound.launch is not None else _bound.bind()


def launch(kernel, grid: int | tuple[int, int, int], params: bytes, tmaps: bytes, index: int,
           smem: int | None = None) -> None:
    """Launch a jit.LoadedKernel on the current stream of device `index` (PDL when the family waits on
    griddepcontrol and the switch is on)."""
    b = bound()
    gx, gy, gz = (grid, 1, 1) if isinstance(grid, int) else grid
    b.launch(kernel.handle, gx, gy, gz, kernel.threads, kernel.smem_bytes if smem is None else smem,
             b.stream(index), kernel.pdl and get_pdl(), params, tmaps)
