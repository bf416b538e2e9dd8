"""The self-test: proof on the user's GPU that the SM120-only atoms read their scales where the kernels put them,
in both scale encodings, and that one small case of every kernel family matches float64.

    python -m deep_gemm_sm120.selftest [--json PATH] [--atoms-only] [--families F,...] [--device N]
    deep_gemm_sm120.selftest()  ->  the report (a dict)

Parts: the atoms (selftest/atoms.py: every block-scaled MMA kind, every case of the scale probe's table, random,
decode and special-value inputs), then the family cases (selftest/families.py; block-scaled ones in each
encoding). The atom verdicts are also recorded where `DG_SM120_SCALE_ENCODING=auto` looks for them, so a run
before CUDA-graph capture lets the capture proceed. Exit: 0 everything ok, 1 something failed (the report says
what, and which encoding the kernels will use), 2 the self-test could not run (no GPU, an unsupported one, no
CUDA compiler, the runtime not built), with a message and no traceback.
"""

from __future__ import annotations

import json
import os
import sys
import time
import types

from ..core import encoding as enc

EXIT_OK, EXIT_FAILED, EXIT_COULD_NOT_RUN = 0, 1, 2
DEFAULT_JSON = "deep_gemm_sm120_selftest.json"


class CouldNotRun(RuntimeError):
    """The self-test cannot run here (exit 2); the message says why and what to do."""


def _target(index: int) -> str:
    import torch

    from ..arch import emulation_requested, target_for_capability

    cap = torch.cuda.get_device_capability(index)
    try:
        return target_for_capability((int(cap[0]), int(cap[1])), emulation_requested())
    except NotImplementedError as e:
        raise CouldNotRun(str(e)) from None


def _preflight(device: int | None) -> tuple[int, str]:
    import torch

    if not torch.cuda.is_available():
        raise CouldNotRun("no CUDA GPU was found (torch.cuda.is_available() is False); run this on the SM120 machine")
    index = torch.cuda.current_device() if device is None else device
    if not 0 <= index < torch.cuda.device_count():
        raise CouldNotRun(f"device {index} does not exist ({torch.cuda.device_count()} CUDA devices)")
    target = _target(index)
    from .. import runtime
    from ..core import toolchain

    try:
        enc.policy(), enc.emulated_reading()
    except ValueError as e:
        raise CouldNotRun(str(e)) from None

    try:
        runtime._ext()
    except RuntimeError as e:
        raise CouldNotRun(str(e)) from None
    try:
        toolchain.find_toolchain()
    except Exception as e:
        raise CouldNotRun(f"no usable CUDA compiler for the JIT: {e}") from None
    return index, target


def selftest(device: int | None = None, *, families: bool | tuple[str, ...] = True, seed: int = 0) -> dict:
    """Run the self-test on `device` (default: the current one) and return the report. Raises CouldNotRun when it
    cannot run; every failure inside is a verdict in the report ("verdict": "pass" or "fail")."""
    import torch

    from .. import scale_encoding
    from .atoms import run_atoms
    from .families import run_families
    from .report import environment

    t0 = time.perf_counter()
    index, target = _preflight(device)
    if families not in (True, False):
        from .families import CASES

        unknown = sorted(set(families) - {c.family for c in CASES})  # type: ignore[arg-type]
        if unknown:
            known = ", ".join(sorted({c.family for c in CASES}))
            raise CouldNotRun(f"no self-test cases for families {unknown}; the cases cover {known}")
    with torch.cuda.device(index):
        report: dict = {"schema": 1, "environment": environment(index, target), "notes": []}
        try:
            results = run_atoms(index, target)
        except RuntimeError as e:  # the probe did not build or load (a toolchain or driver problem)
            raise CouldNotRun(f"the scale probe could not run: {e}"[:4000]) from None
        verdict_path = scale_encoding.record(index, target, results)
        report["atom_verdict_file"] = verdict_path
        report["atoms"] = {
            r.kind: {
                "encodings": {e: r.passes(e) for e in enc.ENCODINGS},
                "chosen": scale_encoding.effective(r.kind, {e for e in enc.ENCODINGS if r.passes(e)}, index),
                "table_matches_device": r.table_ok,
                "seconds": round(r.seconds, 3),
            }
            for r in results
        }
        report["atom_cases"] = [c.as_dict() for r in results for c in r.cases]
        report["specials"] = [s.as_dict() for r in results for s in r.specials]
        if families:
            only = None if families is True else tuple(families)
            report["families"] = run_families(seed=seed, only=only)
    if report["environment"]["emulated"]:
        report["notes"].append("SM120-only atoms ran through the sm_90 emulation: this is not an SM120 result")
    failed = [c for c in report["atom_cases"] if c["verdict"] != "ok"]
    failed += [s for s in report["specials"] if s["verdict"] == "wrong"]
    failed += [f for f in report.get("families", []) if f["verdict"] != "ok"]
    failed += [k for k, row in report["atoms"].items() if not row["table_matches_device"]]
    report["verdict"] = "fail" if failed else "pass"
    report["seconds"] = round(time.perf_counter() - t0, 3)
    return report


def write(report: dict, path: str) -> str:
    path = os.path.abspath(path)
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(report, fh, indent=1)
    os.replace(tmp, path)
    return path


class _CallableModule(types.ModuleType):
    """`deep_gemm_sm120.selftest(...)` runs the self-test while `python -m deep_gemm_sm120.selftest` and
    `import deep_gemm_sm120.selftest.atoms` keep working: the package is the module and the call."""

    def __call__(self, device: int | None = None, **kwargs) -> dict:
        return selftest(device, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
