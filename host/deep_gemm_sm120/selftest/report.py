"""What a self-test report says about where it ran, and its text summary."""

from __future__ import annotations

import ctypes
import platform
import re
import subprocess


def driver_version() -> str:
    """The CUDA driver's version (cuDriverGetVersion, e.g. "13.0"), or "" when libcuda cannot be asked."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
        v = ctypes.c_int(0)
        if lib.cuDriverGetVersion(ctypes.byref(v)) != 0:
            return ""
    except (OSError, AttributeError):
        return ""
    return f"{v.value // 1000}.{(v.value % 1000) // 10}"


def kernel_module_version() -> str:
    """The NVIDIA kernel module's version (e.g. "580.159.04") from /proc, or "" elsewhere: the driver build,
    which cuDriverGetVersion's API level does not tell apart."""
    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8", errors="replace") as fh:
            text = fh.read(4096)
    except OSError:
        return ""
    m = re.search(r"Kernel Module\s+(?:for \S+\s+)?([0-9][0-9.]*)", text)
    return m.group(1) if m else ""


def nvcc_version() -> str:
    from ..core import toolchain

    try:
        tc = toolchain.find_toolchain()
    except Exception as e:  # no toolkit: the report says so instead of failing
        return f"not found ({e})"[:200]
    return f"{tc.version} ({tc.nvcc})"


def nvidia_smi_driver() -> str:
    try:
        p = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return p.stdout.strip().splitlines()[0] if p.returncode == 0 and p.stdout.strip() else ""


def environment(index: int, target: str) -> dict:
    import torch

    from .. import __version__
    from ..core import encoding as enc
    from ..jit.device_layer import tree_digest

    props = torch.cuda.get_device_properties(index)
    emulated = not target.startswith("sm_12")
    return {
        "gpu": props.name,
        "uuid": str(getattr(props, "uuid", "")),
        "compute_capability": f"{props.major}.{props.minor}",
        "sms": props.multi_processor_count,
        "target": target,
        "emulated": emulated,
        "emulated_selector_reading": enc.emulated_reading() if emulated else None,
        "driver": {
            "cuda_api": driver_version(),
            "kernel_module": kernel_module_version(),
            "nvidia_smi": nvidia_smi_driver(),
        },
        "cuda_runtime_of_torch": torch.version.cuda,
        "nvcc": nvcc_version(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "package_version": __version__,
        "device_layer_sha256": tree_digest(),
        "scale_encoding_policy": enc.policy(),
    }


def summary(report: dict) -> str:
    """A few lines a person reads first: where it ran, each encoding's verdict, what failed."""
    env = report.get("environment", {})
    lines = [f"deep_gemm_sm120 {env.get('package_version', '?')} self-test: {report['verdict'].upper()}"]
    if env:
        where = f"{env['gpu']} (sm {env['compute_capability']}, target {env['target']})"
        if env.get("emulated"):
            where += f", EMULATED SM120 atoms (selector reading: {env.get('emulated_selector_reading')})"
        lines.append(f"  device: {where}; driver {env['driver']['cuda_api'] or env['driver']['nvidia_smi']}")
    for kind, row in report.get("atoms", {}).items():
        verdicts = ", ".join(f"{e}: {'pass' if ok else 'FAIL'}" for e, ok in row["encodings"].items())
        lines.append(f"  atoms {kind:<10} {verdicts}; uses {row['chosen'] or 'none (disabled)'}")
    bad = [c for c in report.get("atom_cases", []) if c["verdict"] != "ok"]
    for c in bad[:6]:
        first = f": {c['misreads'][0]}" if c["misreads"] else ""
        lines.append(
            f"    {c['kind']} {c['encoding']} tile {c['tile']} bytes {c['byte_ids']}: {c['verdict']}"
            f" (max rel error {c['max_rel_error']:.2e}, matches {c['matches']}){first}"
        )
    if len(bad) > 6:
        lines.append(f"    ... {len(bad) - 6} more atom cases not ok (see the JSON report)")
    for s in report.get("specials", []):
        if s["verdict"] != "ok":
            lines.append(f"  special {s['kind']} {s['encoding']} {s['name']}: {s['verdict']} ({s['observed']})")
    fam = report.get("families", [])
    if fam:
        counts = {}
        for row in fam:
            counts[row["verdict"]] = counts.get(row["verdict"], 0) + 1
        lines.append("  families: " + ", ".join(f"{n} {v}" for v, n in sorted(counts.items())))
        for row in fam:
            if row["verdict"] != "ok":
                detail = row.get("message") or f"{row['metric']} {row['error']:.3e} (bound {row['bound']:.0e})"
                lines.append(f"    {row['case']} [{row['encoding'] or '-'}]: {row['verdict']}: {detail}")
    for note in report.get("notes", []):
        lines.append(f"  note: {note}")
    lines.append(f"  took {report.get('seconds', 0):.1f} s")
    return "\n".join(lines)
