#!/usr/bin/env python3
"""The bf16 `mma.sync` ceiling of the GPU this runs on, measured in the same process as the GEMM benchmarks, so
every GEMM line can report its share of it (issue 13).

    python benchmarks/mma_ceiling.py            # prints the ceiling and the probe's sweep (needs a GPU)

The probe kernel is compiled by the package's JIT from the device layer's own `mma_bf16_16816` wrapper (no asm
here): every warp keeps its A / B fragments in registers and issues `kChains` independent m16n8k16 MMAs per
step, so nothing but the tensor pipe limits it. The ceiling is the best rate over resident warp counts (4 to 16
warps per SM, two CTAs per SM); it is what a register-fed `mma.sync` GEMM could reach with zero memory and
epilogue cost. It is a measured rate of this GPU at its current clocks, not a datasheet figure.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "host"))

CHAINS = 8  # independent accumulators per warp: enough to cover the MMA latency
STEPS = 4096  # MMA steps per warp per launch
FLOPS_PER_MMA = 2 * 16 * 8 * 16

SOURCE = r"""#include "mma/sm120.cuh"
#include "common/sm120_arch.cuh"

namespace sm120_bench {
// kChains independent m16n8k16 bf16 MMAs per step, fragments in registers; the sum is stored so nothing is dead.
template <uint32_t kChains>
__global__ void mma_ceiling_kernel(float* __restrict__ out, uint32_t steps, uint32_t seed) {
    uint32_t a[4], b[2];
#pragma unroll
    for (uint32_t i = 0; i < 4; ++i) a[i] = seed * (threadIdx.x + 7 * i + 1) | 0x3f803f80u;
    b[0] = a[1] ^ 0x00010001u, b[1] = a[2] ^ 0x00020002u;
    float acc[kChains][4] = {};
    for (uint32_t s = 0; s < steps; ++s) {
#pragma unroll
        for (uint32_t c = 0; c < kChains; ++c) sm120::mma_bf16_16816(acc[c], a, b);
    }
    float sum = 0.0f;
#pragma unroll
    for (uint32_t c = 0; c < kChains; ++c) sum += acc[c][0] + acc[c][1] + acc[c][2] + acc[c][3];
    out[blockIdx.x * blockDim.x + threadIdx.x] = sum;
}
}  // namespace sm120_bench

template __global__ void sm120_bench::mma_ceiling_kernel<%d>(float* __restrict__, uint32_t, uint32_t);
"""


@dataclass(frozen=True)
class ProbeSpec:
    """Enough of a registry spec for jit.get_kernel: one translation unit with one kernel."""

    threads: int
    chains: int = CHAINS
    smem_bytes: int = 0

    @property
    def name(self) -> str:
        return f"mma_ceiling_c{self.chains}_t{self.threads}"

    @property
    def params(self):
        from deep_gemm_sm120.core.params import Param, ParamList

        return ParamList(Param("out", "float*"), Param("steps", "uint32_t"), Param("seed", "uint32_t"))

    def source(self) -> str:
        return SOURCE % self.chains


def probe(threads: int, ctas_per_sm: int = 2, steps: int = STEPS, device: int = 0):
    """A zero-argument launcher of one probe configuration and the FLOP count of one launch."""
    from deep_gemm_sm120 import jit
    from deep_gemm_sm120.arch import target_for_device
    from deep_gemm_sm120.launch import launch

    spec = ProbeSpec(threads)
    kern = jit.get_kernel(spec, target_for_device(device), device)
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    grid = sms * ctas_per_sm
    out = torch.empty(grid * threads, device="cuda")
    params = spec.params.pack(out=out.data_ptr(), steps=steps, seed=0x1234)

    def run() -> None:
        launch(kern, grid, params, b"", device)

    run.out = out  # keep the output alive as long as the launcher
    return run, grid * (threads // 32) * steps * CHAINS * FLOPS_PER_MMA


def measure(threads: int, ctas_per_sm: int = 2, steps: int = STEPS, device: int = 0) -> float:
    """FLOP/s of one probe configuration (best of five launches)."""
    run, flops = probe(threads, ctas_per_sm, steps, device)
    run()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / 1e3)
    return flops / best


def ceiling(device: int = 0, verbose: bool = False) -> float:
    """The bf16 mma.sync ceiling in FLOP/s: the best rate over 128, 256 and 512 threads per CTA, two CTAs per SM."""
    if torch.cuda.get_device_capability(device)[0] != 12:
        os.environ.setdefault("DG_SM120_EMULATE", "1")  # the sm_90a build of the same source
    rates = {}
    for threads in (128, 256, 512):
        rates[threads] = measure(threads, device=device)
        if verbose:
            print(f"  probe {threads:4d} threads x 2 CTAs/SM: {rates[threads] / 1e12:7.1f} TFLOP/s")
    return max(rates.values())


if __name__ == "__main__":
    peak = ceiling(verbose=True)
    print(f"bf16 mma.sync ceiling on {torch.cuda.get_device_name()}: {peak / 1e12:.1f} TFLOP/s")
