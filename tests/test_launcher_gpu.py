"""The generic launch entry on a GPU, beyond what the GEMMs use: a 3-D and a 2-D tensor map in one launch
(any rank, any number), scalars after them, a 2-D grid, and the per-thread descriptor cache across calls that
only change the coordinates."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from gpu_helpers import requires_cuda

from deep_gemm_sm120.core.params import Param, ParamList
from deep_gemm_sm120.core.tma import tma_request

pytestmark = [pytest.mark.cuda, pytest.mark.emulation, requires_cuda]
BOX3 = (16, 8, 4)  # innermost first: 16 floats x 8 rows x 4 planes
BOX2 = (16, 8)


@dataclass(frozen=True)
class TmaProbeSpec:
    name = "tma_probe_3d_2d"
    threads = 128
    smem_bytes = 4 * (16 * 8 * 4 + 16 * 8) + 64
    params = ParamList(
        Param("t3", "CUtensorMap"),
        Param("t2", "CUtensorMap"),
        Param("out", "float*"),
        Param("x", "uint32_t"),
        Param("y", "uint32_t"),
        Param("z", "uint32_t"),
    )

    def source(self) -> str:
        n3, n2 = 16 * 8 * 4, 16 * 8
        return (
            '#include "common/sm120_tma.cuh"\n'
            '#include "common/sm120_fence.cuh"\n'
            'extern "C" __global__ void __launch_bounds__(128, 1) probe(const __grid_constant__ CUtensorMap t3,\n'
            "        const __grid_constant__ CUtensorMap t2, float* out, uint32_t x, uint32_t y, uint32_t z) {\n"
            "    extern __shared__ __align__(128) uint8_t smem[];\n"
            "    float* box3 = reinterpret_cast<float*>(smem);\n"
            f"    float* box2 = box3 + {n3};\n"
            f"    uint64_t* bar = reinterpret_cast<uint64_t*>(box2 + {n2});\n"
            "    if (threadIdx.x == 0) {\n"
            "        sm120::mbarrier_init(bar, 1);\n"
            "        sm120::fence_barrier_init();\n"
            "    }\n"
            "    __syncthreads();\n"
            "    // block (bx, by) loads the box at (x + 16 bx, y, z + 4 by) and the 2-D box at (x, y + 8 by)\n"
            "    if (threadIdx.x == 0) {\n"
            f"        sm120::mbarrier_arrive_expect_tx(bar, {4 * (n3 + n2)});\n"
            "        sm120::tma_load_3d(box3, &t3, bar, x + 16 * blockIdx.x, y, z + 4 * blockIdx.y);\n"
            "        sm120::tma_load_2d(box2, &t2, bar, x, y + 8 * blockIdx.y);\n"
            "    }\n"
            "    sm120::mbarrier_wait(bar, 0);\n"
            f"    float* o = out + (blockIdx.y * gridDim.x + blockIdx.x) * {n3 + n2};\n"
            f"    for (uint32_t i = threadIdx.x; i < {n3 + n2}; i += blockDim.x) o[i] = box3[i];\n"
            "}\n"
        )


def test_3d_and_2d_tensor_maps_in_one_launch(sm120_or_emulation):
    from deep_gemm_sm120 import jit, runtime
    from deep_gemm_sm120.arch import target_for_device

    dev = torch.cuda.current_device()
    spec = TmaProbeSpec()
    kern = jit.get_kernel(spec, target_for_device(dev), dev)
    p = spec.params
    vol = torch.randn(12, 40, 64, device="cuda")  # [D2, D1, D0] fp32
    mat = torch.randn(48, 20, device="cuda")  # [rows, cols]
    launch, stream = runtime.launcher(), runtime.current_stream_fn()
    tmaps = tma_request(
        p.offsets["t3"], "float32", vol.data_ptr(), (64, 40, 12), (64 * 4, 40 * 64 * 4), BOX3, 0
    ) + tma_request(p.offsets["t2"], "float32", mat.data_ptr(), (20, 48), (20 * 4,), BOX2, 0)
    n = 16 * 8 * 4 + 16 * 8
    # x (innermost) in steps of 4 floats: a box must start 16-byte aligned along its innermost dimension (an
    # odd x raises "illegal instruction" on the H200); y and z are free. The last boxes run off the end: zero fill
    for x, y, z in ((0, 0, 0), (4, 5, 1), (40, 37, 10)):
        out = torch.full((2 * 2 * n,), float("nan"), device="cuda")
        launch(
            kern.handle,
            2,
            2,
            1,
            spec.threads,
            spec.smem_bytes,
            stream(dev),
            False,
            p.pack(out=out.data_ptr(), x=x, y=y, z=z),
            tmaps,
        )
        torch.cuda.synchronize()
        padded = torch.zeros(12 + 8, 40 + 8, 64 + 32, device="cuda")
        padded[:12, :40, :64] = vol
        mpad = torch.zeros(48 + 16, 40 + 16, device="cuda")
        mpad[:48, :20] = mat
        for by in range(2):
            for bx in range(2):
                got = out[(by * 2 + bx) * n : (by * 2 + bx + 1) * n]
                want3 = padded[z + 4 * by : z + 4 * by + 4, y : y + 8, x + 16 * bx : x + 16 * bx + 16]
                assert torch.equal(got[: 16 * 8 * 4].view(4, 8, 16), want3), (x, y, z, bx, by)
                # the 2-D box sits right after the 3-D one in shared memory, and the kernel copies both
                want2 = mpad[y + 8 * by : y + 8 * by + 8, x : x + 16]
                assert torch.equal(got[16 * 8 * 4 :].view(8, 16), want2), (x, y, bx, by)
