"""What tests and benchmarks share, importable from an installed package (neither imports the other):
`numeric` (calc_diff in DeepGEMM's convention), `block_scaled` (FP8/FP4 operands with adversarial scales and their
fp64 values), `mqa_inputs` (dense, paged and sparse MQA-logits workloads). Inputs are built on the current CUDA
device unless a function takes a device."""
from .numeric import calc_diff

__all__ = ["calc_diff"]
