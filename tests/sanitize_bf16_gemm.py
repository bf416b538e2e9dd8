"""Driver for compute-sanitizer (memcheck / racecheck): a representative subset of BF16 GEMM calls.

    compute-sanitizer --tool memcheck python tests/sanitize_bf16_gemm.py
Exits non-zero on a numerical failure; the sanitizer reports memory errors and races itself.
"""

import sys

import torch
from sanitizer_driver import prepare

prepare()

import deep_gemm_sm120 as dg
from deep_gemm_sm120.testing import calc_diff

failures = 0
for m, n, k, dt, with_c in [
    (129, 200, 136, torch.bfloat16, False),
    (7, 576, 1536, torch.float32, True),
    (48, 130, 4104, torch.bfloat16, True),  # split-K + reduce
    (256, 256, 1024, torch.bfloat16, True),
    (1, 2112, 512, torch.bfloat16, False),
    (300, 130, 72, torch.float32, False),
    # 16-byte bf16 stores with an N tail; C in registers of its own / in the accumulators
    (520, 1000, 264, torch.bfloat16, True),
    (260, 600, 264, torch.float32, True),
]:
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    c = torch.randn(m, n, device="cuda", dtype=dt) if with_c else None
    d = torch.full((m, n), float("nan"), device="cuda", dtype=dt)
    dg.bf16_gemm_nt(a, b, d, c=c)
    torch.cuda.synchronize()
    diff = calc_diff(d, a.double() @ b.double().T + (c.double() if with_c else 0))
    ok = diff <= 1e-5 and not torch.isnan(d).any()
    failures += not ok
    print(f"sanitize case m={m} n={n} k={k} out={dt} c={with_c}: diff={diff:.2e} {'ok' if ok else 'FAIL'}")

# Grouped paths: contiguous (per-row ids with an empty middle group) and masked.
lay = torch.tensor([0] * 100 + [-1] * 28 + [2] * 128, dtype=torch.int32, device="cuda")
a = torch.randn(256, 512, device="cuda", dtype=torch.bfloat16)
b = torch.randn(3, 200, 512, device="cuda", dtype=torch.bfloat16)
d = torch.zeros(256, 200, device="cuda", dtype=torch.bfloat16)
dg.m_grouped_bf16_gemm_nt_contiguous(a, b, d, lay)
masked = torch.tensor([3, 0, 64], dtype=torch.int32, device="cuda")
am = torch.randn(3, 64, 512, device="cuda", dtype=torch.bfloat16)
dm = torch.zeros(3, 64, 200, device="cuda", dtype=torch.bfloat16)
dg.m_grouped_bf16_gemm_nt_masked(am, b, dm, masked, expected_m=32)
torch.cuda.synchronize()
ok = (
    calc_diff(d[:100], a[:100].double() @ b[0].double().T) <= 1e-5
    and calc_diff(dm[2], am[2].double() @ b[2].double().T) <= 1e-5
)
# K-grouped: on-device descriptor rebasing (tensormap.replace) with K tails and an empty group
ks = [100, 0, 77]
ak = torch.randn(sum(ks), 192, device="cuda", dtype=torch.bfloat16)
bk = torch.randn(sum(ks), 136, device="cuda", dtype=torch.bfloat16)  # [K, N] rows: N a multiple of 8
dk = torch.zeros(3, 192, 136, device="cuda", dtype=torch.float32)
dg.k_grouped_bf16_gemm_tn_contiguous(ak, bk, dk, ks)
torch.cuda.synchronize()
ok = ok and calc_diff(dk[2], ak[100:].double().T @ bk[100:].double()) <= 1e-5 and bool((dk[1] == 0).all())
# the large K-grouped tile (M x N > 512 x 512), accumulating onto C in place
ks = [130, 0, 64]
ak = torch.randn(sum(ks), 520, device="cuda", dtype=torch.bfloat16)
bk = torch.randn(sum(ks), 520, device="cuda", dtype=torch.bfloat16)
ck = torch.randn(3, 520, 520, device="cuda", dtype=torch.float32)
dk = ck.clone()
dg.k_grouped_bf16_gemm_tn_contiguous(ak, bk, dk, ks, c=dk)
torch.cuda.synchronize()
ok = (
    ok
    and calc_diff(dk[0], ak[:130].double().T @ bk[:130].double() + ck[0].double()) <= 1e-5
    and torch.equal(dk[1], ck[1])
)
print(f"sanitize grouped cases: {'ok' if ok else 'FAIL'}")
# MN-major operands (ldmatrix.trans path): nn with swap-AB, tn, tt
for layout, (m, n, k) in (("nn", (9, 264, 200)), ("tn", (136, 200, 72)), ("tt", (64, 130, 264))):
    a = torch.randn(*((k, m) if layout[0] == "t" else (m, k)), device="cuda", dtype=torch.bfloat16)
    b = torch.randn(*((k, n) if layout[1] == "n" else (n, k)), device="cuda", dtype=torch.bfloat16)
    d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float32)
    getattr(dg, f"bf16_gemm_{layout}")(a, b, d)
    torch.cuda.synchronize()
    ref = (a.double().T if layout[0] == "t" else a.double()) @ (b.double() if layout[1] == "n" else b.double().T)
    good = calc_diff(d, ref) <= 1e-5 and not torch.isnan(d).any()
    ok = ok and good
    print(f"sanitize layout {layout} m={m} n={n} k={k}: {'ok' if good else 'FAIL'}")
# untrusted group ids and masked_m, corrupted between capture and replay (tests/untrusted_indices.py)
import untrusted_indices
from sanitizer_driver import run_cases

failures += run_cases([c for c in untrusted_indices.CASES if c[0].startswith("m-grouped")])
sys.exit(1 if (failures or not ok) else 0)
