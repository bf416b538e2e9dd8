"""Driver for compute-sanitizer (memcheck / racecheck): sparse and paged-sparse MQA logits, MXFP8 and MXFP4, every
sparse block size, with empty rows, the last partial block (boxes past the KV end), hand-made out-of-range table
entries, corrupted indices under graph replay, one tile per CTA and eight.

    compute-sanitizer --tool racecheck python tests/sanitize_sparse_mqa_logits.py
Exits non-zero on a numerical failure; the sanitizer reports memory errors and races itself.
"""

import sys

from sanitizer_driver import prepare, run_cases

prepare()

import test_sparse_mqa_logits_gpu as t

cases = [
    ("contiguous mxfp8 d128 h64 b8", lambda: t.test_contiguous_matches_reference(None, "mxfp8", 128, 64, 8)),
    ("contiguous mxfp8 d64 h16 b32", lambda: t.test_contiguous_matches_reference(None, "mxfp8", 64, 16, 32)),
    ("contiguous mxfp4 d128 h32 b16", lambda: t.test_contiguous_matches_reference(None, "mxfp4", 128, 32, 16)),
    ("work split 2 rows", lambda: t.test_work_split_and_partial_tiles(None, 2, 128, 16)),
    ("work split 300 rows, 5 slots", lambda: t.test_work_split_and_partial_tiles(None, 300, 5, 8)),
    ("empty / repeated / last partial block", lambda: t.test_empty_repeated_and_last_partial_block(None)),
    ("out-of-range table entries", lambda: t.test_out_of_range_table_entries_are_never_read(None)),
    ("paged mxfp8 d128 h64 b32", lambda: t.test_paged_matches_reference(None, "mxfp8", 128, 64, 32)),
    ("paged mxfp4 d128 h16 b8", lambda: t.test_paged_matches_reference(None, "mxfp4", 128, 16, 8)),
    ("paged page_kv 8", lambda: t.test_paged_page_sizes(None, 8)),
    ("slot-table kernel, block 8", lambda: t.test_metadata_kernel_matches_torch_reference(None, 8)),
]
import untrusted_indices

cases += [c for c in untrusted_indices.CASES if c[0].startswith("sparse")]
sys.exit(run_cases(cases))
