"""Which scale encoding a device's block-scaled kernels use (core/encoding.py names them).

DG_SM120_SCALE_ENCODING=selectors|replicated picks one outright. The default, auto, proves the choice on the
device: before the first block-scaled kernel of a device is loaded, the atom part of the self-test runs
(selftest/atoms.py, one probe launch per atom kind, a few seconds once the probe is compiled) and its verdict is
kept in memory and on disk beside the JIT cache, keyed by the device (name, UUID, compute capability), the
driver, the device-layer digest, the compile target and the emulated selector reading, so later processes
read it instead of probing. Per atom kind: selectors when they read every scale where the kernels put it, else
replicated (with one warning naming the report), else NotImplementedError naming the report: never a kernel
whose scales the hardware reads from the wrong place.

The probe cannot run inside CUDA-graph capture: a capture that needs a verdict the process and the disk do not
have raises a RuntimeError saying to run `python -m deep_gemm_sm120.selftest` (or one eager call) first.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

from .core import encoding as enc

_lock = threading.Lock()
_verdicts: dict[tuple[int, str, str], Verdict] = {}  # (device, target, emulated reading) -> verdict
_forced: str | None = None
_warned: set[tuple[int, str]] = set()
VERDICT_SCHEMA = 1


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


def policy() -> str:
    """The encoding a call uses unless a self-test forces one: DG_SM120_SCALE_ENCODING (auto by default)."""
    return _forced or enc.policy()


@contextmanager
def forced(encoding: str) -> Iterator[None]:
    """Every block-scaled kernel loaded inside uses `encoding` (the self-test's family cases); cached calls are
    forgotten on entry and exit so none keeps a kernel of the other encoding."""
    from .launch import forget_calls

    global _forced
    if encoding not in enc.ENCODINGS:
        raise ValueError(f"encoding must be one of {enc.ENCODINGS}, got {encoding!r}")
    previous = _forced
    _forced = encoding
    forget_calls()
    try:
        yield
    finally:
        _forced = previous
        forget_calls()


def reset() -> None:
    """Forget verdicts and warnings in this process (the disk cache stays); cached calls re-plan."""
    from .launch import forget_calls

    with _lock:
        _verdicts.clear()
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
    mode = policy()
    if mode != enc.AUTO:
        return mode
    verdict = _verdicts.get(_memo_key(device, target)) or _verdict(device, target)
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


def _device_facts(device: int, target: str) -> dict:
    import torch

    from .jit.device_layer import tree_digest
    from .selftest.report import driver_version

    props = torch.cuda.get_device_properties(device)
    return {
        "schema": VERDICT_SCHEMA,
        "gpu": props.name,
        "uuid": str(getattr(props, "uuid", "")),
        "capability": f"{props.major}.{props.minor}",
        "driver": driver_version(),
        "device_layer": tree_digest(),
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
    """Publish by atomic rename: concurrent processes each write a whole file, readers never see half of one."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(payload, fh, indent=1)
    os.replace(tmp, path)


def _verdict(device: int, target: str) -> Verdict:
    import torch

    with _lock:
        got = _verdicts.get(_memo_key(device, target))
        if got is not None:
            return got
        facts = _device_facts(device, target)
        path = verdict_path(facts)
        got = _read(path, facts)
        if got is None:
            if torch.cuda.is_current_stream_capturing():
                raise RuntimeError(
                    "deep_gemm_sm120: the first block-scaled kernel on this device needs the scale-encoding "
                    "self-test, which cannot run inside CUDA-graph capture. Run `python -m deep_gemm_sm120.selftest` "
                    "(or one eager call of the op) before capturing, or set DG_SM120_SCALE_ENCODING."
                )
            from .selftest.atoms import run_atoms

            got = _record(facts, path, run_atoms(device, target))
        _verdicts[_memo_key(device, target)] = got
        return got


def _record(facts: dict, path: str, results) -> Verdict:
    passing = {r.kind: tuple(e for e in enc.ENCODINGS if r.passes(e)) for r in results}
    _write(
        path,
        {
            "facts": facts,
            "passing": passing,
            "cases": [c.as_dict() for r in results for c in r.cases if c.verdict != "ok"],
            "specials": [s.as_dict() for r in results for s in r.specials],
        },
    )
    return Verdict(passing, path)


def record(device: int, target: str, results) -> str:
    """Keep the self-test's atom results as this device's verdict (memory and disk); returns the file."""
    facts = _device_facts(device, target)
    path = verdict_path(facts)
    with _lock:
        _verdicts[_memo_key(device, target)] = _record(facts, path, results)
    return path
