"""Driver for compute-sanitizer (memcheck / racecheck): the BF16 einsum expressions, with tails, padded operands,
accumulation and the split batch reduction, and fp8_einsum (tails, padded weights, fp32 d with c).

    compute-sanitizer --tool memcheck python tests/sanitize_einsum.py
Exits non-zero on a numerical failure; the sanitizer reports memory errors and races itself.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "host"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
if torch.cuda.get_device_capability()[0] != 12:
    os.environ["DG_SM120_EMULATE"] = "1"

from test_einsum_gpu import check_bmk, check_per_head  # noqa: E402
from test_fp8_einsum_gpu import run as check_fp8  # noqa: E402

failures = 0
cases = [(check_per_head, ("bhr,hdr->bhd", 32, 8, 512, 136)), (check_per_head, ("bhd,hdr->bhr", 33, 4, 200, 136)),
         (check_per_head, ("bhr,hdr->bhd", 1, 3, 72, 100)),
         (check_bmk, (129, 128, 384, 128, torch.float32, True)), (check_bmk, (3, 24, 7, 72, torch.bfloat16, False)),
         (check_bmk, (4, 256, 256, 256, torch.float32, False)),
         (check_fp8, (32, 4, 512, 256)), (check_fp8, (129, 3, 400, 200, torch.bfloat16, False, 0, 16)),
         (check_fp8, (7, 2, 256, 128, torch.float32, True))]
for fn, args in cases:
    try:
        fn(*args)
        print(f"sanitize case {fn.__name__}{args}: ok")
    except AssertionError as e:
        failures += 1
        print(f"sanitize case {fn.__name__}{args}: FAIL {e}")
sys.exit(1 if failures else 0)
