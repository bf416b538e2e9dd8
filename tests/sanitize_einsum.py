"""Driver for compute-sanitizer (memcheck / racecheck): the BF16 einsum expressions, with tails, padded operands,
accumulation and the split batch reduction, and fp8_einsum (tails, padded weights, fp32 d with c).

    compute-sanitizer --tool memcheck python tests/sanitize_einsum.py
Exits non-zero on a numerical failure; the sanitizer reports memory errors and races itself.
"""

import sys

import torch
from sanitizer_driver import prepare, run_cases

prepare()

from test_einsum_gpu import check_bmk, check_per_head
from test_fp8_einsum_gpu import run as check_fp8

cases = [
    (check_per_head, ("bhr,hdr->bhd", 32, 8, 512, 136)),
    (check_per_head, ("bhd,hdr->bhr", 33, 4, 200, 136)),
    (check_per_head, ("bhr,hdr->bhd", 1, 3, 72, 100)),
    (check_bmk, (129, 128, 384, 128, torch.float32, True)),
    (check_bmk, (3, 24, 7, 72, torch.bfloat16, False)),
    (check_bmk, (4, 256, 256, 256, torch.float32, False)),
    (check_fp8, (32, 4, 512, 256)),
    (check_fp8, (129, 3, 400, 200, torch.bfloat16, False, 0, 16)),
    (check_fp8, (7, 2, 256, 128, torch.float32, True)),
]
sys.exit(run_cases((f"{fn.__name__}{args}", lambda fn=fn, args=args: fn(*args)) for fn, args in cases))
