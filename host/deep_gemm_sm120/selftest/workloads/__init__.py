"""Inputs and float64 references shared by the self-test, the GPU tests, the sanitizer drivers and the
benchmarks: block-scaled operands with adversarial scales, MQA-logits workloads, the sparse MQA and the gated
delta rule references. Importing them needs torch only; building inputs needs a GPU."""
