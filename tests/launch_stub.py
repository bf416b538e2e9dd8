"""The GPU a host-side CPU test pretends to have: an SM120 device of `sms` SMs whose kernels come from
`get_kernel` and whose launches go to `launch_fn` (both the test's), on stream `stream`, PDL on, never capturing.
Shared by the call-cache rig and the segmented-GDR wiring test; each also stubs its families' device_of."""

from __future__ import annotations

import torch

from deep_gemm_sm120 import arch, device, jit, launch


def stub_gpu(monkeypatch, get_kernel, launch_fn, sms: int, stream: int) -> None:
    monkeypatch.delenv("DG_SM120_EMULATE", raising=False)
    monkeypatch.setattr(arch, "device_capability", lambda i: (12, 0))
    monkeypatch.setattr(device, "device_sm_count", lambda i: sms)
    monkeypatch.setattr(device, "_num_sms", None)
    monkeypatch.setattr(jit, "get_kernel", get_kernel)
    monkeypatch.setattr(launch.BOUND, "launch", launch_fn)
    monkeypatch.setattr(launch.BOUND, "stream", lambda i: stream)
    monkeypatch.setattr(launch.BOUND, "pdl", True)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
