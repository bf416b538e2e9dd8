"""The kernel-family registry: every family under `families/` declares itself once (a `FAMILY` object in its
package's `__init__.py`), and everything that lists kernels or ops is derived from here: precompile()'s specs,
the compile gate's instantiations and SASS rules, is_supported, the package exports and the support matrix.

A family package is discovered by being there: adding one edits no list anywhere else.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import ClassVar

from .limits import SMEM_LIMIT
from .names import Name, Op
from .params import ParamList

TARGET_CLASSES = ("sm120", "sm90")  # native SM120 targets; the sm_90a qualification build
# Forbidden in every kernel on every target: local memory traffic and the emulated-TMA call.
FORBIDDEN_EVERYWHERE = (r"^LDL(\.|$)", r"^STL(\.|$)", r"^CALL\.ABS\.NOINC")


def target_class(target: str) -> str:
    return "sm120" if target.startswith("sm_12") else "sm90"


@dataclass(frozen=True)
class GateRules:
    """What the compile gate demands of one instantiation's SASS, per target class."""

    required: dict[str, tuple[str, ...]]  # opcode prefixes that must appear
    forbidden: dict[str, tuple[str, ...]] = field(default_factory=dict)  # extra regexes that must not match
    # The sm_90a build is the qualification emulation of SM120-only atoms: its spills and local memory are
    # reported, not failed (the SM120 builds must stay spill-free).
    emulation_spills_allowed: bool = False

    def __post_init__(self) -> None:
        missing = [c for c in TARGET_CLASSES if c not in self.required]
        if missing:
            raise ValueError(f"gate rules must name required opcodes for {TARGET_CLASSES}, missing {missing}")
        for pats in self.forbidden.values():
            for p in pats:
                re.compile(p)

    def required_for(self, target: str) -> tuple[str, ...]:
        return self.required[target_class(target)]

    def forbidden_for(self, target: str) -> tuple[str, ...]:
        cls = target_class(target)
        base = FORBIDDEN_EVERYWHERE[2:] if self.spills_allowed(target) else FORBIDDEN_EVERYWHERE
        return base + self.forbidden.get(cls, ())

    def spills_allowed(self, target: str) -> bool:
        return self.emulation_spills_allowed and target_class(target) == "sm90"


@dataclass(frozen=True)
class KernelSpec:
    """One instantiation of a family's kernel (subclasses are frozen dataclasses of its template arguments).
    `name`, `threads` and `smem_bytes` are fields, derived once when the spec is made: from `kernel_name()`,
    and from the spec's `config` (a core.gemm tile) unless `block_threads()` / `shared_bytes()` say otherwise.
    They take no part in equality: two specs are one kernel when their template arguments agree. `FAMILY` is
    set when the family declares itself."""

    FAMILY: ClassVar[Family]
    name: str = field(init=False, compare=False)
    threads: int = field(init=False, compare=False)
    smem_bytes: int = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", self.kernel_name())
        object.__setattr__(self, "threads", self.block_threads())
        object.__setattr__(self, "smem_bytes", self.shared_bytes())

    def kernel_name(self) -> str:
        raise NotImplementedError

    def block_threads(self) -> int:
        return self.config.threads  # type: ignore[attr-defined]  # subclasses with a `config` field (a core.gemm tile) use this; others override it

    def shared_bytes(self) -> int:
        return self.config.smem_bytes  # type: ignore[attr-defined]  # subclasses with a `config` field (a core.gemm tile) use this; others override it

    def template_args(self) -> list[str]:
        raise NotImplementedError

    def type_subst(self) -> dict[str, str]:
        return {}

    @property
    def family(self) -> str:
        return type(self).FAMILY.name

    @property
    def params(self) -> ParamList:
        return type(self).FAMILY.params

    def source(self) -> str:
        fam = type(self).FAMILY
        types = ",\n    ".join(fam.params.instantiation_types(**self.type_subst()))
        return (
            f'#include "{fam.header}"\n'
            "// One instantiation per translation unit; the runtime finds it as the module's only kernel.\n"
            f"template __global__ void {fam.kernel}<{', '.join(self.template_args())}>(\n    {types});\n"
        )


def _no_key(spec) -> tuple:
    return ()


@dataclass(frozen=True)
class Family:
    name: str
    params: ParamList  # the kernel's parameters, written once
    specs: Callable[[], list]  # every instantiation the host API can launch
    gate: Callable[[object], GateRules]  # SASS rules of one instantiation
    pdl: bool  # waits on griddepcontrol before touching global memory
    # relative to device_layer/ (absolute: a family kept outside); default impls/sm120_<name>.cuh
    header: str = ""
    kernel: str = ""  # qualified template name; default sm120::sm120_<name>_kernel
    spec_type: type[KernelSpec] | None = None  # default: the type of specs()[0]
    quick_key: Callable[[object], tuple] = _no_key  # equal keys share resources (gate --quick); default: one
    # Every public name the family answers for, once (core/names.py): its ops, aliases and refusals.
    names: tuple[Name, ...] = ()
    api_modules: tuple[str, ...] = ("api",)  # modules of the family package that define those names
    # A service kernel: GPU work families need and users never call; no names. One used by a single family is
    # declared in that family's package and listed in its `services`; a shared one lives in services/.
    service: bool = False
    services: tuple[Family, ...] = ()
    # Qualification: compute-sanitizer drivers (tests/sanitize_<x>.py) and benchmarks (benchmarks/bench_<x>.py)
    # covering this family; CI and tools/qualify_h200.sh run what the families declare (tools/family_plan.py).
    sanitizers: tuple[str, ...] = ()
    benchmarks: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # conventions fill what a declaration leaves out (frozen: set once, here)
        object.__setattr__(self, "header", self.header or f"impls/sm120_{self.name}.cuh")
        object.__setattr__(self, "kernel", self.kernel or f"sm120::sm120_{self.name}_kernel")
        spec_type = self.spec_type or type(self.specs()[0])
        object.__setattr__(self, "spec_type", spec_type)
        spec_type.FAMILY = self
        if os.path.isabs(self.header) and not os.path.isfile(self.header):
            raise ValueError(f"{self.name}: header {self.header} does not exist")
        if self.service and self.names:
            raise ValueError(f"{self.name}: a service kernel has no public names (its users are families)")
        if any(not s.service for s in self.services):
            raise ValueError(f"{self.name}: `services` lists service kernels only")

    @property
    def ops(self) -> tuple[Op, ...]:
        return tuple(n for n in self.names if isinstance(n, Op))


@dataclass(frozen=True)
class Registry:
    families: tuple[Family, ...]
    packages: dict[str, str]  # family name -> package (module) name

    @property
    def by_name(self) -> dict[str, Family]:
        return {f.name: f for f in self.families}

    @property
    def user_families(self) -> tuple[Family, ...]:
        """The families users call (their ops make the surface); `families` adds the service kernels."""
        return tuple(f for f in self.families if not f.service)

    @property
    def names(self) -> dict[str, tuple[Family, Name]]:
        """Every public name of every family: {name: (family, declaration)}."""
        return {n.name: (fam, n) for fam in self.user_families for n in fam.names}

    def resolve(self, name: str) -> tuple[Family, Name]:
        """The declaration a name stands for, following aliases (KeyError for an unknown name)."""
        fam, decl = self.names[name]
        while decl.alias_of:
            fam, decl = self.names[decl.alias_of]
        return fam, decl

    @property
    def ops(self) -> dict[str, tuple[Family, Op]]:
        """The names that run one of our ops (aliases included): {name: (family, op)}."""
        out = {}
        for name in self.names:
            fam, decl = self.resolve(name)
            if isinstance(decl, Op):
                out[name] = (fam, decl)
        return out

    def specs(self, families: tuple[str, ...] | None = None) -> list:
        if families is not None:
            unknown = sorted(set(families) - set(self.by_name))
            if unknown:
                raise ValueError(f"unknown kernel families {unknown}; known: {sorted(self.by_name)}")
        return [s for f in self.families if families is None or f.name in families for s in f.specs()]


def _validate(reg: Registry) -> None:
    seen: dict[str, str] = {}
    for fam in reg.user_families:
        for decl in fam.names:
            if decl.name in seen:
                raise ValueError(f"{decl.name} is declared by families {seen[decl.name]} and {fam.name}")
            seen[decl.name] = fam.name
    names = reg.names
    for name, (fam, decl) in names.items():
        hops = 0
        while decl.alias_of:
            if decl.alias_of not in names or hops > len(names):
                raise ValueError(f"{fam.name}: {name} is an alias of {decl.alias_of}, which no family declares")
            decl, hops = names[decl.alias_of][1], hops + 1
        if isinstance(decl, Op) and decl.refused:
            raise ValueError(f"{fam.name}: op {decl.name} is declared {decl.status}; an op is supported")
    for fam in reg.families:
        spec_type = fam.spec_type
        assert spec_type is not None  # Family.__post_init__ fills it
        for spec in fam.specs():
            if not isinstance(spec, spec_type):
                raise TypeError(f"{fam.name}: spec {spec!r} is not a {spec_type.__name__}")
            rules = fam.gate(spec)
            if not isinstance(rules, GateRules):
                raise TypeError(f"{fam.name}: gate({spec.name}) must return GateRules, got {rules!r}")
            if spec.smem_bytes > SMEM_LIMIT:
                raise ValueError(f"{spec.name} needs {spec.smem_bytes} B of shared memory (> {SMEM_LIMIT} B)")


FAMILY_PATH_ENV = "DG_SM120_FAMILY_PATH"


def extra_family_dirs() -> list[str]:
    """Directories of family packages kept outside this package (DG_SM120_FAMILY_PATH, os.pathsep-separated):
    they join `families/` as if they were in it, so a family can be developed, or a test family added, without
    editing a file here. Their kernel headers are absolute paths."""
    return [d for d in os.environ.get(FAMILY_PATH_ENV, "").split(os.pathsep) if d]


@cache
def registry() -> Registry:
    """Import every package under `families/` (and DG_SM120_FAMILY_PATH) and `services/` and collect its FAMILY
    (validated once)."""
    base = __name__.rsplit(".", 2)[0]
    fams, packages = [], {}
    for where, service in (("families", False), ("services", True)):
        pkg = importlib.import_module(f"{base}.{where}")
        if not service:
            pkg.__path__ = [*dict.fromkeys([*pkg.__path__, *extra_family_dirs()])]
        for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
            if not info.ispkg:
                continue
            mod = importlib.import_module(f"{pkg.__name__}.{info.name}")
            fam = getattr(mod, "FAMILY", None)
            if not isinstance(fam, Family):
                raise TypeError(f"{where}/{info.name}/__init__.py must define FAMILY = Family(...)")
            if fam.service != service:
                raise TypeError(f"{where}/{info.name}: service={fam.service} does not match its folder")
            for f in (fam, *fam.services):  # a family's own service kernels are registered with it
                fams.append(f)
                packages[f.name] = mod.__name__
    reg = Registry(tuple(fams), packages)
    _validate(reg)
    return reg
