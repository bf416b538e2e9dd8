"""Driver for compute-sanitizer (memcheck / racecheck): a representative subset of block-scaled GEMM calls
(FP8 DeepSeek recipe with tails and split-K, MXFP8, MXFP4, NVFP4, grouped contiguous and masked).

    compute-sanitizer --tool memcheck python tests/sanitize_fp8_fp4_gemm.py
Exits non-zero on a numerical failure; the sanitizer reports memory errors and races itself.
"""

import sys

import torch
from sanitizer_driver import prepare

prepare()

import deep_gemm_sm120 as dg
from deep_gemm_sm120.selftest.workloads.block_scaled import fp4_operands, fp8_operands, fp8_operands_fp32, quantize_side
from deep_gemm_sm120.testing import calc_diff

failures = 0


def report(name: str, d: torch.Tensor, ref: torch.Tensor, tol: float) -> None:
    global failures
    torch.cuda.synchronize()
    diff = calc_diff(d, ref)
    ok = diff <= tol and not torch.isnan(d).any()
    failures += not ok
    print(f"sanitize {name}: diff={diff:.2e} {'ok' if ok else 'FAIL'}")


gen = torch.Generator(device="cuda").manual_seed(0)
for m, n, k, gran, blocks in [(129, 200, 1040, 128, True), (16, 256, 4096, 128, True), (64, 320, 512, 32, False)]:
    a, b, ref = fp8_operands(m, n, k, gen, gran, blocks)
    d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    dg.fp8_gemm_nt(a, b, d)
    report(f"fp8 g{gran} {(m, n, k)}", d, ref, 1e-3)
# exact FP32 scales (fp8_fp32): tails, split-K, and a masked call with an empty and a partial group
for m, n, k in [(129, 200, 1040), (16, 256, 4096)]:
    a, b, ref = fp8_operands_fp32(m, n, k, gen)
    d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    dg.fp8_gemm_nt(a, b, d, disable_ue8m0_cast=True)
    report(f"fp8 fp32 scales {(m, n, k)}", d, ref, 1e-3)
fp32_parts = [fp8_operands_fp32(64, 136, 640, gen) for _ in range(3)]
stack = lambda i, j: torch.stack([p[i][j] for p in fp32_parts])
d = torch.zeros(3, 64, 136, device="cuda", dtype=torch.bfloat16)
counts = torch.tensor([0, 33, 64], dtype=torch.int32, device="cuda")
dg.m_grouped_fp8_gemm_nt_masked((stack(0, 0), stack(0, 1)), (stack(1, 0), stack(1, 1)), d, counts, 32)
report("grouped masked fp8 fp32 scales", d[1, :33], fp32_parts[1][2][:33], 1e-3)
for kind in ("mxfp4", "nvfp4"):
    a, b, alpha, ref = fp4_operands(100, 192, 1024, gen, kind)
    d = torch.full((100, 192), float("nan"), device="cuda", dtype=torch.float32)
    dg.fp8_fp4_gemm_nt(a, b, d, alpha=alpha)
    report(f"{kind} (100, 192, 1024)", d, ref, 2e-2)

# mixed: e4m3 (1x128) x MXFP4 and MXFP4 x e4m3 (1x32), with a K tail inside the last stage
for fa, fb, gran in (("e4m3", "mxfp4", 128), ("mxfp4", "e4m3", 32)):
    a, sfa, da = quantize_side(fa, 70, 1056, gen, gran if fa == "e4m3" else 32)
    b, sfb, db = quantize_side(fb, 136, 1056, gen, gran if fb == "e4m3" else 32)
    d = torch.full((70, 136), float("nan"), device="cuda", dtype=torch.bfloat16)
    dg.fp8_fp4_gemm_nt((a, sfa), (b, sfb), d)
    report(f"mixed {fa} x {fb} (70, 136, 1056)", d, da @ db.T, 1e-2)

# grouped: contiguous (an empty middle group) and masked, FP8
(a, sfa), _, _ = fp8_operands(256, 8, 512, gen)
parts = [fp8_operands(8, 192, 512, gen) for _ in range(3)]
b = torch.stack([p[1][0] for p in parts])
sfb = torch.stack([p[1][1] for p in parts])
lay = torch.tensor([0] * 100 + [-1] * 28 + [2] * 128, dtype=torch.int32, device="cuda")
d = torch.zeros(256, 192, device="cuda", dtype=torch.bfloat16)
dg.m_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, lay)
deq_a = a.double() * sfa.double().repeat_interleave(128, 1)[:, :512]
deq_b = [
    x.double() * s.double().repeat_interleave(128, 0).repeat_interleave(128, 1)[:192, :512] for x, s in zip(b, sfb)
]
report("grouped contiguous fp8", d[:100], deq_a[:100] @ deq_b[0].T, 1e-3)
am = torch.stack([a[:64], a[64:128], a[128:192]])
sfam = torch.stack([sfa[:64], sfa[64:128], sfa[128:192]])
masked = torch.tensor([3, 0, 64], dtype=torch.int32, device="cuda")
dm = torch.zeros(3, 64, 192, device="cuda", dtype=torch.bfloat16)
dg.m_grouped_fp8_gemm_nt_masked((am, sfam), (b, sfb), dm, masked, expected_m=32)
report("grouped masked fp8", dm[2], deq_a[128:192] @ deq_b[2].T, 1e-3)
import untrusted_indices
from sanitizer_driver import run_cases

failures += run_cases([c for c in untrusted_indices.CASES if c[0].startswith("block-scaled")])
sys.exit(1 if failures else 0)
