"""Service kernels: the GPU work the user families need and users never call by name (the split-K reduction,
the MQA-logits schedule builders, the gated-delta-rule prep). Each package declares its kernel like a family
(`FAMILY = Family(..., service=True)`, no ops), so precompile and the compile gate cover it; the registry finds
it here by being here."""
