"""Split-K on the host, shared by the GEMM families: the fp32 workspace the slices write, and the launch of
the reduce kernel that adds them into D (+ C) in a fixed order. The plan itself is core/splitk.py."""

from __future__ import annotations

import torch

from ... import jit
from ... import launch as launching
from ...launch import launch
from . import PARAMS, SplitKReduceSpec, grid

_pack = PARAMS.packer()


class SplitK:
    """The reduce step of one plan, launched after the sliced GEMM on the same stream."""

    __slots__ = ("kernel", "num_sms", "warp_per_element")

    def __init__(self, out: str, with_c: bool, target: str, index: int, num_sms: int, warp_per_element: bool = False):
        self.kernel = jit.get_kernel(SplitKReduceSpec(out, with_c, warp_per_element), target, index)
        self.num_sms = num_sms
        self.warp_per_element = warp_per_element

    @staticmethod
    def workspace(splits: int, m: int, n: int, device: torch.device) -> torch.Tensor:
        """[splits, M, N] fp32 slices; the stream-ordered caching allocator keeps it alive for both launches (a call
        served in C allocates its own the same way: launch.empty)."""
        return launching.empty((splits * m * n,), torch.float32, device)

    def reduce(
        self, ws_ptr: int, d_ptr: int, c_ptr: int, m: int, n: int, ldd: int, ldc: int, splits: int, index: int
    ) -> None:
        launch(
            self.kernel,
            grid(m, n, self.num_sms, self.warp_per_element),
            _pack(ws_ptr, d_ptr, c_ptr, m, n, ldd, ldc, splits),
            b"",
            index,
        )
