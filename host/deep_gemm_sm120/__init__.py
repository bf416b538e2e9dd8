"""deep_gemm_sm120: DeepGEMM-style API for SM120 kernels, JIT-compiled from device_layer/.

Importing this package never initializes CUDA and works without a GPU, driver or toolkit. The kernel entry
points are the ops the family registry declares (families/<family>/), exported here under DeepGEMM's names.
"""

from __future__ import annotations

import importlib
import inspect

from . import arch, selftest, testing, utils
from .checks import get_index_checks, get_scale_checks, set_index_checks, set_scale_checks
from .core.limits import SM120_PART_SMS
from .core.names import make_refusal
from .core.registry import registry
from .device import get_num_sms, set_num_sms
from .launch import get_pdl, set_pdl
from .scale_layout import transform_sf_into_required_layout
from .support import is_supported, supported_ops, why_unsupported
from .utils import (
    ceil_to_ue8m0,
    get_mk_alignment_for_contiguous_layout,
    get_mn_major_tma_aligned_packed_ue8m0_tensor,
    get_mn_major_tma_aligned_tensor,
    pack_ue8m0_to_int,
    per_block_cast_to_fp8,
    per_token_cast_to_fp4,
    per_token_cast_to_fp8,
)
from .version import __version__


def _bind_names() -> dict[str, object]:
    """Every name the families declare -> its object: a supported one from the family's API modules (an alias
    is its target's object); a refused one the API module's callable of that name (DeepGEMM's signature) or a
    refusal made from the declared reason. No module here imports a family by name."""
    reg, found = registry(), {}
    for fam in reg.user_families:
        modules = [importlib.import_module(f"{reg.packages[fam.name]}.{m}") for m in fam.api_modules]
        for decl in fam.names:
            if decl.alias_of:
                continue
            fn = next((getattr(m, decl.name) for m in modules if hasattr(m, decl.name)), None)
            if fn is None and not decl.refused:
                raise ImportError(
                    f"family {fam.name} declares {decl.name}, which its API modules {fam.api_modules} do not define"
                )
            found[decl.name] = fn if fn is not None else make_refusal(decl.name, decl.does)
    for name in reg.names:
        target = name
        while reg.names[target][1].alias_of:
            target = reg.names[target][1].alias_of
        found[name] = found[target]
    return found


NAMES = _bind_names()  # every family name -> its object (deep_gemm_sm120.compat binds the DeepGEMM ones)
OPS = tuple(n for n, (_, decl) in registry().names.items() if not registry().resolve(n)[1].refused)
globals().update({n: NAMES[n] for n in OPS})


def precompile(
    specs=None, targets=None, *, families=None, shapes=None, jobs: int | None = None, progress: bool | None = None
) -> int:
    """Warm the JIT disk cache without a GPU; returns the number of (kernel, target) pairs compiled or found.

    specs: explicit instantiations; else every kernel of `families` (names, default all) or, with `shapes`, only
    what those calls launch: dicts like {"op": "bf16_gemm_nt", "m": 1, "n": 7168, "k": 2048,
    "out_dtype": "float32"} (block-scaled ops also take "kind" and "gran_k"), planned for "num_sms" or every
    SM120 part. targets: default the release targets (sm_120a, sm_120f, sm_121a). jobs: parallel nvcc
    processes (default one per core). progress: a progress line on stderr (default: when it is a terminal).
    Derived block-scaled kernels are built in the scale encoding DG_SM120_SCALE_ENCODING names, or under `auto`
    (the default) in both, with the scale probe the device's self-test picks one with (docs/block_scaled.md)."""
    from . import jit
    from .core import encoding

    if specs is None:  # explicit specs are warmed as given
        mode = encoding.policy()
        specs = encoding.for_policy(
            _shape_specs(shapes, families)
            if shapes is not None
            else registry().specs(tuple(families) if families is not None else None),
            mode,
        )
        if mode == encoding.AUTO and any(getattr(s, "uses_selectors", False) for s in specs):
            specs += registry().by_name["scale_probe"].specs()  # what auto runs before the first of them
    targets = tuple(targets) if targets is not None else arch.RELEASE_TARGETS
    bad = [t for t in targets if t not in arch.RELEASE_TARGETS + tuple(arch.EMULATION_TARGETS.values())]
    if bad:
        raise ValueError(f"unknown targets {bad}; expected some of {arch.RELEASE_TARGETS} (or sm_90a for emulation)")
    return jit.precompile(list(dict.fromkeys(specs)), targets, jobs=jobs, progress=progress)


def _check_shape(name: str, op, shape: dict) -> None:
    """The op's own rule on the shape's keywords it answers for: a shape the call would refuse is refused here
    with the same typed error, instead of building kernels nobody can launch."""
    from .core.rules import dtype_name

    accepted = inspect.signature(op.rule).parameters
    args = {k: dtype_name(v) if k.endswith("dtype") and v is not None else v for k, v in shape.items() if k in accepted}
    try:
        op.rule(**args)
    except (TypeError, ValueError, NotImplementedError) as e:
        raise type(e)(f"precompile: shape {dict(op=name, **shape)} is refused by {name}: {e}") from e


def _shape_specs(shapes, families) -> list:
    ops = registry().ops
    out = []
    for shape in shapes:
        shape = dict(shape)
        name = shape.pop("op", None)
        if name not in ops:
            raise ValueError(f"shapes entries need 'op' naming one of {sorted(ops)}, got {name!r}")
        fam, op = ops[name]
        if families is not None and fam.name not in families:
            continue
        if op.plan_specs is None:
            raise NotImplementedError(f"{name} cannot be planned from a shape; pass specs= or families=")
        _check_shape(name, op, shape)
        sms = [shape.pop("num_sms")] if "num_sms" in shape else sorted(set(SM120_PART_SMS.values()))
        for num_sms in sms:
            out += op.plan_specs(num_sms=num_sms, **shape)
    return out


__all__ = [
    "transform_sf_into_required_layout",
    "get_mk_alignment_for_contiguous_layout",
    "per_token_cast_to_fp8",
    "per_block_cast_to_fp8",
    "per_token_cast_to_fp4",
    "ceil_to_ue8m0",
    "pack_ue8m0_to_int",
    "get_mn_major_tma_aligned_tensor",
    "get_mn_major_tma_aligned_packed_ue8m0_tensor",
    "get_num_sms",
    "set_num_sms",
    "get_pdl",
    "set_pdl",
    "get_index_checks",
    "set_index_checks",
    "get_scale_checks",
    "set_scale_checks",
    "is_supported",
    "why_unsupported",
    "supported_ops",
    "precompile",
    "arch",
    "selftest",
    "testing",
    "utils",
    "__version__",
]
__all__.extend(OPS)
