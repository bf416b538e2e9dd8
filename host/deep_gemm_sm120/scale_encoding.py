"""Which scale encoding a device's block-scaled kernels use (core/encoding.py names them).

DG_SM120_SCALE_ENCODING=selectors|replicated picks one outright; auto (the default) proves the choice on the
device: before the first block-scaled kernel of a device is loaded, the atom part of the self-test runs
(selftest/atoms.py, one probe launch per atom kind, a few seconds once the probe is compiled) and its verdict is
kept in memory and on disk beside the JIT cache, keyed by the device (name, UUID, compute capability), the
driver (CUDA API level and kernel module), the device-layer digest, the compiler, the package (and its judge),
the compile target and the emulated selector reading, so later processes read it instead of probing. Per atom
kind: selectors when they read every scale where the kernels put it, else replicated (with one warning naming
the report), else NotImplementedError naming the report: never a kernel whose scales the hardware reads from
the wrong place. An explicit setting that a verdict this process or the disk already has says fails is refused
the same way.

The variable is read once per device, at its first block-scaled plan (reset() forgets it). The probe cannot run
inside CUDA-graph capture: a capture that needs a verdict the process and the disk do not have raises a
RuntimeError saying to run `python -m deep_gemm_sm120.selftest` (or one eager call) first.
"""

from __future__ import annotations

import contextvars
import hashlib
import json
import os
import tempfile
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

from .core import encoding as enc

_lock = threading.Lock()
_verdicts: dict[tuple[int, str, str], Verdict | None] = {}  # (device, target, emulated reading) -> verdict
_policies: dict[int, str] = {}  # device -> DG_SM120_SCALE_ENCODING as its first block-scaled plan read it
_forced: contextvars.ContextVar[str | None] = contextvars.ContextVar("dg_sm120_forced_encoding", default=None)
_warned: set[tuple[int, str]] = set()
VERDICT_SCHEMA = 2


def choose(passing) -> str | None:
    """The encoding kernels of an atom kind use, given the encodings its atoms passed: selectors first (full
    rate with fewer registers), then replicated, else None (the kind is disabled)."""
    for e in enc.ENCODINGS:
        if e in passing:
            return e
    return None


@dataclass(frozen=True)
class Verdict:
    """Per atom kind, the encodings the device's atoms passed; where the atoms report lives."""

    passing: dict[str, tuple[str, ...]]
    report: str

    def choose(self, kind: str) -> str | None:
        return choose(self.passing.get(kind, ()))


def policy(device: int | None = None) -> str:
    """The encoding this thread's calls use: a self-test's forced one, else DG_SM120_SCALE_ENCODING (auto by
    default) as `device`'s first block-scaled plan read it (now, when no device is given or none read it)."""
    f = _forced.get()
    if f is not None:
        return f
    if device is not None and device in _policies:
        return _policies[device]
    return enc.policy()


@contextmanager
def forced(encoding: str) -> Iterator[None]:
    """Block-scaled kernels this thread (context) loads inside use `encoding` (the self-test's family cases, the
    encoding benchmark). No plan or kernel is stored while any thread forces (launch.frozen_plans), so nothing
    loaded for the forced encoding outlives the block and no other thread is handed one."""
    from .launch import frozen_plans

    if encoding not in enc.ENCODINGS:
        raise ValueError(f"encoding must be one of {enc.ENCODINGS}, got {encoding!r}")
    token = _forced.set(encoding)
    try:
        with frozen_plans():
            yield
    finally:
        _forced.reset(token)


def reset() -> None:
    """Forget verdicts, policies and warnings in this process (the disk cache stays); cached calls re-plan."""
    from .launch import forget_calls

    with _lock:
        _verdicts.clear()
        _policies.clear()
        _warned.clear()
    forget_calls()


def resolve(spec, target: str, device: int):
    """The spec jit.get_kernel loads: a block-scaled spec in the selector encoding (what planners build) becomes
    the encoding this device uses for its atom kind; any other spec is returned as it is."""
    if getattr(spec, "encoding", None) != enc.SELECTORS or not spec.uses_selectors:
        return spec
    chosen = encoding_for(spec.scale_kind, target, device)
    return spec if chosen == enc.SELECTORS else replace(spec, encoding=chosen)


def encoding_for(kind: str, target: str, device: int) -> str:
    f = _forced.get()
    if f is not None:
        return f  # the self-test runs an encoding to judge it, whatever a verdict says
    mode = _policies.get(device)
    if mode is None:
        mode = _policies.setdefault(device, enc.policy())
    key = _memo_key(device, target)
    if mode != enc.AUTO:
        known = _verdicts[key] if key in _verdicts else _verdict(device, target, probe=False)
        if known is not None and mode not in known.passing.get(kind, enc.ENCODINGS):
            raise NotImplementedError(
                f"deep_gemm_sm120: DG_SM120_SCALE_ENCODING={mode}, but this GPU's self-test found the {kind} "
                f"block-scaled MMA reading that encoding's scales from the wrong place; refusing rather than "
                f"computing wrong results (unset it to use what passed). Report: {known.report}"
            )
        return mode
    verdict = _verdicts.get(key) or _verdict(device, target, probe=True)
    assert verdict is not None  # probe=True always gives one
    chosen = verdict.choose(kind)
    if chosen is None:
        raise NotImplementedError(
            f"deep_gemm_sm120: neither scale encoding of the {kind} block-scaled MMA reads its scales correctly "
            f"on this GPU (the self-test's atom probe failed both); block-scaled kernels of this kind are "
            f"disabled rather than computing wrong results. Report: {verdict.report}"
        )
    if chosen != enc.SELECTORS and (device, kind) not in _warned:
        _warned.add((device, kind))
        warnings.warn(
            f"deep_gemm_sm120: on this GPU the {kind} block-scaled MMA failed the selector-encoding self-test and "
            f"passed the replicated one; its kernels use the replicated encoding (correct, a few more "
            f"registers). Please send the report to the project: {verdict.report}",
            RuntimeWarning,
            stacklevel=3,
        )
    return chosen


def _memo_key(device: int, target: str) -> tuple[int, str, str]:
    # an emulated selector reading is its own set of cubins, so its own verdict (DG_SM120_EMULATE_SELECTORS)
    return device, target, "" if target.startswith("sm_12") else enc.emulated_reading()


def verdict_key(facts: dict) -> str:
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:32]


def _judge_digest() -> str:
    """The self-test code that judges the atoms: a change to it is a new verdict."""
    here = os.path.dirname(os.path.abspath(__file__))
    h = hashlib.sha256()
    for rel in ("selftest/atoms.py", "services/scale_probe/__init__.py"):
        with open(os.path.join(here, rel), "rb") as fh:
            h.update(fh.read())
    return h.hexdigest()[:16]


def _device_facts(device: int, target: str) -> dict:
    import torch

    from . import __version__
    from .core import toolchain
    from .jit.device_layer import tree_digest
    from .selftest.report import driver_version, kernel_module_version

    props = torch.cuda.get_device_properties(device)
    return {
        "schema": VERDICT_SCHEMA,
        "gpu": props.name,
        "uuid": str(getattr(props, "uuid", "")),
        "capability": f"{props.major}.{props.minor}",
        "driver": driver_version(),
        "kernel_module": kernel_module_version(),
        "device_layer": tree_digest(),
        "compiler": toolchain.find_toolchain().version,
        "package": __version__,
        "judge": _judge_digest(),
        "target": target,
        "emulated_selectors": enc.emulated_reading() if not target.startswith("sm_12") else None,
    }


def verdict_path(facts: dict) -> str:
    from .core.envvars import cache_dir

    return os.path.join(cache_dir(), "selftest", f"atoms-{verdict_key(facts)}.json")


def _read(path: str, facts: dict) -> Verdict | None:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
        if data.get("facts") != facts:
            return None
        passing = {k: tuple(v) for k, v in data["passing"].items()}
    except (OSError, ValueError, KeyError, AttributeError, TypeError):
        return None  # missing or unreadable: probe again and rewrite it
    return Verdict(passing, path)


def _write(path: str, payload: dict) -> None:
    """Publish by atomic rename of a private temporary file: concurrent processes (even in containers sharing
    the cache) each write a whole file, readers never see half of one."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".", suffix=".tmp", dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(payload, fh, indent=1)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _verdict(device: int, target: str, probe: bool) -> Verdict | None:
    """The device's verdict from memory, else the disk, else (probe) a fresh atom probe; None without probe
    when neither memory nor disk has one."""
    import torch

    key = _memo_key(device, target)
    with _lock:
        if key in _verdicts and (_verdicts[key] is not None or not probe):
            return _verdicts[key]
        facts = _device_facts(device, target)
        path = verdict_path(facts)
        got = _read(path, facts)
        if got is None and probe:
            if torch.cuda.is_current_stream_capturing():
                raise RuntimeError(
                    "deep_gemm_sm120: the first block-scaled kernel on this device needs the scale-encoding "
                    "self-test, which cannot run inside CUDA-graph capture. Run `python -m deep_gemm_sm120.selftest` "
                    "(or one eager call of the op) before capturing, or set DG_SM120_SCALE_ENCODING."
                )
            from .selftest.atoms import run_atoms

            got = _record(facts, path, run_atoms(device, target))
        _verdicts[key] = got
        return got


def _record(facts: dict, path: str, results) -> Verdict:
    passing = {r.kind: tuple(e for e in enc.ENCODINGS if r.passes(e)) for r in results}
    payload = {
        "facts": facts,
        "passing": passing,
        "cases": [c.as_dict() for r in results for c in r.cases if c.verdict != "ok"],
        "specials": [s.as_dict() for r in results for s in r.specials],
    }
    try:
        _write(path, payload)
    except OSError as e:  # a read-only cache: this process keeps the verdict, later ones probe again
        warnings.warn(
            f"deep_gemm_sm120: could not write the scale-encoding verdict to {path} ({e}); it holds for this "
            f"process only",
            RuntimeWarning,
            stacklevel=4,
        )
    return Verdict(passing, path)


def record(device: int, target: str, results) -> str:
    """Keep the self-test's atom results as this device's verdict (memory and disk); returns the file. Cached
    plans are forgotten: the next call of each signature loads the encoding the new verdict picks."""
    from .launch import forget_calls

    facts = _device_facts(device, target)
    path = verdict_path(facts)
    with _lock:
        _verdicts[_memo_key(device, target)] = _record(facts, path, results)
        _warned.clear()
    forget_calls()
    return path


def effective(kind: str, passing, device: int | None = None) -> str | None:
    """The encoding kernels of `kind` would use with these passing encodings under this process's setting (for
    the self-test's report): an explicit setting when it passed, else what auto chooses (None: disabled)."""
    mode = policy(device)
    if mode == enc.AUTO:
        return choose(passing)
    return mode if mode in passing else None
