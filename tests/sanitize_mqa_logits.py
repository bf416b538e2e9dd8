"""Driver for compute-sanitizer (memcheck / racecheck): dense and paged MQA logits, FP8 and FP4, and the paged
scheduler, with tails, empty ranges, zero-length contexts and every block_kv.

    compute-sanitizer --tool racecheck python tests/sanitize_mqa_logits.py
Exits non-zero on a numerical failure; the sanitizer reports memory errors and races itself.
"""

import sys

import torch
from sanitizer_driver import prepare, run_cases

prepare()

import test_mqa_logits_gpu as dense
import test_paged_mqa_logits_gpu as paged

cases = [
    (dense.check, (77, 513, 64, 128, "window")),
    (dense.check, (33, 300, 16, 64, "causal", torch.bfloat16)),
    (dense.check, (45, 260, 32, 128, "window", torch.float32, "compressed")),
    (dense.test_fp4_matches_dequantized_reference, (None, 32, "clean")),
    (paged.run, ([300, 0, 1, 129], 2, 64, 128, 32)),
    (paged.run, ([300, 65], 3, 32, 128, 64, False, True)),
    (paged.run, ([500, 7], 1, 16, 64, 128)),
    (paged.run, ([400, 0, 64], 2, 64, 128, 64, True)),
]
import untrusted_indices

labelled = [
    (f"{fn.__name__}{args[1:] if args and args[0] is None else args}", lambda fn=fn, args=args: fn(*args))
    for fn, args in cases
]
labelled += [c for c in untrusted_indices.CASES if c[0].startswith(("paged", "dense"))]
sys.exit(run_cases(labelled))
