"""Service kernels several families share (the split-K reduction): GPU work users never call by name. Each
package declares its kernel like a family (`FAMILY = Family(..., service=True)`, no names), so precompile and
the compile gate cover it; the registry finds it here by being here. A service kernel only one family uses is
declared in that family's package and listed in its `services`."""
