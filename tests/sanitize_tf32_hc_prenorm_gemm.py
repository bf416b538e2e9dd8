"""Driver for compute-sanitizer (memcheck / racecheck): tf32_hc_prenorm_gemm with and without splits, tails,
empty splits and the internal split + reduce.

    compute-sanitizer --tool racecheck python tests/sanitize_tf32_hc_prenorm_gemm.py
Exits non-zero on a numerical failure; the sanitizer reports memory errors and races itself.
"""

import sys

import torch
from sanitizer_driver import prepare

prepare()

from test_tf32_hc_prenorm_gemm_gpu import max_rel, references

import deep_gemm_sm120 as dg
from deep_gemm_sm120.testing import calc_diff

failures = 0
for m, n, k, splits in [
    (13, 24, 7168, None),
    (137, 24, 7680, 16),
    (65, 7, 136, 3),
    (33, 24, 128, 5),
    (300, 32, 2048, None),
    (4096, 24, 1024, None),
    (129, 17, 4104, None),
]:
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda")
    lead = () if splits is None else (splits,)
    d = torch.full((*lead, m, n), float("nan"), device="cuda")
    s = torch.full((*lead, m), float("nan"), device="cuda")
    dg.tf32_hc_prenorm_gemm(a, b, d, s, num_splits=splits)
    torch.cuda.synchronize()
    ref_d, ref_s = references(a, b, splits)
    diff, rel = calc_diff(d, ref_d), max_rel(s, ref_s)
    ok = diff < 1e-8 and rel < 1e-5 and not torch.isnan(d).any() and not torch.isnan(s).any()
    failures += not ok
    print(
        f"sanitize case m={m} n={n} k={k} splits={splits}: diff={diff:.2e} sqr_rel={rel:.2e} {'ok' if ok else 'FAIL'}"
    )
sys.exit(1 if failures else 0)
