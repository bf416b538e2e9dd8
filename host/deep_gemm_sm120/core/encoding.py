"""Scale encodings of the block-scaled kernels (issue 44): how a kernel hands its scale factors to SM120's
block-scaled MMAs (device_layer/mma/sm120_scale_selectors.cuh has the lane and byte mapping).

  selectors   one scale register per lane serves two m16 / four n8 tiles through non-zero thread-id and byte-id
              selectors (the encoding every kernel had through v0.8.6).
  replicated  selector 0 for every MMA, each scale in every lane and byte the MMA may read (CUTLASS's layout).

A spec carries its encoding as a field. Planners build "selectors" specs; jit.get_kernel turns them into the
encoding the device uses (scale_encoding.py: this variable, or under `auto` the self-test's verdict). Stdlib
only: the compile gate imports this.
"""

from __future__ import annotations

import os
from dataclasses import replace

SELECTORS, REPLICATED = "selectors", "replicated"
ENCODINGS = (SELECTORS, REPLICATED)
AUTO = "auto"
POLICIES = (AUTO, *ENCODINGS)
CXX = {SELECTORS: "sm120::ScaleEncoding::kSelectors", REPLICATED: "sm120::ScaleEncoding::kReplicated"}
NAME_SUFFIX = {SELECTORS: "", REPLICATED: "_rep"}

ENV = "DG_SM120_SCALE_ENCODING"
# Emulation-only (sm_90 builds): how the emulated MMA reads a non-zero selector. "documented" is the PTX ISA
# reading; "ignored" reads every selector as 0, as silicon that disagreed with us might (the safety-net test).
EMULATE_ENV = "DG_SM120_EMULATE_SELECTORS"
READINGS = ("documented", "ignored")
EMULATION_DEFINE = "SM120_EMULATION_SELECTORS_IGNORED"


def policy() -> str:
    """DG_SM120_SCALE_ENCODING now: auto (default), selectors or replicated (ValueError for anything else)."""
    value = os.environ.get(ENV, "").strip().lower() or AUTO
    if value not in POLICIES:
        raise ValueError(f"{ENV} must be one of {', '.join(POLICIES)}; got {os.environ.get(ENV)!r}")
    return value


def emulated_reading() -> str:
    """DG_SM120_EMULATE_SELECTORS now: documented (default) or ignored (ValueError for anything else)."""
    value = os.environ.get(EMULATE_ENV, "").strip().lower() or READINGS[0]
    if value not in READINGS:
        raise ValueError(f"{EMULATE_ENV} must be one of {', '.join(READINGS)}; got {os.environ.get(EMULATE_ENV)!r}")
    return value


def emulation_prelude(target: str) -> str:
    """Source lines an sm_90 build gets for the emulated selector reading (empty for SM120 targets and by
    default, so default cubins and their cache keys are those of earlier releases)."""
    if target.startswith("sm_12") or emulated_reading() == READINGS[0]:
        return ""
    return f"#define {EMULATION_DEFINE} 1\n"


def check(spec) -> None:
    """A spec's encoding is one we build, and `replicated` only where the kernel has selectors to replace."""
    enc = spec.encoding
    if enc not in ENCODINGS:
        raise ValueError(f"{type(spec).__name__}: scale encoding must be one of {ENCODINGS}, got {enc!r}")
    if enc == REPLICATED and not spec.uses_selectors:
        raise ValueError(f"{type(spec).__name__}: no per-tile scales (unit scales at selector 0): no {enc} form")


def template_tail(encoding: str) -> list[str]:
    """The trailing template argument: none for selectors (the header's default), so those instantiations and
    their JIT cache keys are unchanged."""
    return [] if encoding == SELECTORS else [CXX[encoding]]


def variants(specs: list) -> list:
    """`specs` followed by the replicated form of each that has selectors (a family's specs() lists both)."""
    return [*specs, *(replace(s, encoding=REPLICATED) for s in specs if s.uses_selectors)]


def for_policy(specs: list, mode: str) -> list:
    """What precompile warms under a policy: specs without per-tile scales as they are, and each block-scaled
    one in the policy's encoding (auto: both, since the device's verdict may pick either), duplicates dropped."""
    wanted = ENCODINGS if mode == AUTO else (mode,)
    out = []
    for s in specs:
        if not getattr(s, "uses_selectors", False):
            out.append(s)
            continue
        out += [s if s.encoding == e else replace(s, encoding=e) for e in wanted]
    return list(dict.fromkeys(out))
