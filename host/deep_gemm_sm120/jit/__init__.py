"""JIT: generated source -> nvcc -> cubin cache -> loaded kernel handle."""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

from .. import scale_encoding
from ..core import encoding, envvars, toolchain
from ..core.progress import Progress
from . import cache as _cache
from .device_layer import device_layer_dir, tree_digest

STRICT_ENV = "DG_SM120_JIT_STRICT"
DEBUG_ENV = "DG_SM120_JIT_DEBUG"


def _flag(name: str) -> bool:
    return os.environ.get(name, "0") not in ("", "0", "false", "False")


@dataclass(frozen=True)
class LoadedKernel:
    handle: int
    threads: int
    smem_bytes: int
    name: str
    pdl: bool  # the kernel waits on griddepcontrol: it may be launched with PDL
    # offsets of the pointer parameters in the packed buffer (ParamList.pointers); None: unknown, so calls of the
    # kernel are never served in C (launch.served)
    pointers: tuple[int, ...] | None = None


_loaded: dict[tuple, LoadedKernel] = {}
_lock = threading.Lock()
stats = {"compiles": 0, "disk_hits": 0, "compile_seconds": 0.0}
_stats_lock = threading.Lock()


def _count(key: str, value: float = 1) -> None:
    with _stats_lock:
        stats[key] += value


def cubin_for(spec, target: str, cache: _cache.KernelCache | None = None) -> tuple[bytes, dict]:
    """The cubin for `spec` on `target`, from the disk cache or freshly compiled."""
    cache = cache or _cache.KernelCache()
    tc = toolchain.find_toolchain()
    source = encoding.emulation_prelude(target) + spec.source()
    family = getattr(type(spec), "FAMILY", None)  # None: a bare spec (probes, tools) that includes what it needs
    if family is not None and os.path.isabs(family.header):
        # a family kept outside device_layer/: its header's bytes key the cache too
        with open(family.header, "rb") as fh:
            source += f"\n// header sha256 {hashlib.sha256(fh.read()).hexdigest()}\n"
    key_flags = ["-cubin", *toolchain.BASE_FLAGS, *toolchain.gencode(target)]  # the include dir is in the digest
    key = _cache.cache_key(tree_digest(), source, key_flags, tc.version, target)
    found = cache.lookup(key)
    if found is not None:
        _count("disk_hits")
        return found
    if _flag(STRICT_ENV):
        raise RuntimeError(
            f"{STRICT_ENV}=1 and {spec.name} for {target} is not in the JIT cache "
            f"({cache.root}); warm it with deep_gemm_sm120.precompile() first"
        )

    def produce(work: str) -> tuple[str, dict]:
        src = os.path.join(work, "kernel.cu")
        with open(src, "w", encoding="utf-8") as fh:
            fh.write(source)
        out = os.path.join(work, "kernel.cubin")
        cmd = toolchain.compile_command(tc.nvcc, src, out, target, device_layer_dir())
        t0 = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, text=True)
        dt = time.perf_counter() - t0
        log = (p.stdout + p.stderr).strip()
        if p.returncode != 0:
            raise RuntimeError(f"nvcc failed ({' '.join(cmd)}):\n{log}")
        _count("compiles")
        _count("compile_seconds", dt)
        if envvars.flag(envvars.DEBUG):  # ours or DeepGEMM's, read at each compile
            sys.stderr.write(f"[deep_gemm_sm120 jit] {' '.join(cmd)}\n{log}\n[compiled in {dt:.2f} s]\n")
        return out, {
            "name": spec.name,
            "target": target,
            "compiler": tc.version,
            "command": cmd,
            "ptxas_log": log,
            "compile_seconds": round(dt, 3),
        }

    return cache.build(key, produce)


def get_kernel(spec, target: str, device: int) -> LoadedKernel:
    """Loaded kernel for (spec, target) on `device`; compiled or read from disk at most once per process. A
    block-scaled spec takes the scale encoding the device uses (scale_encoding.resolve) first."""
    spec = scale_encoding.resolve(spec, target, device)
    memo_key = (spec, target, device, encoding.emulation_prelude(target))  # an emulated reading is its own cubin
    k = _loaded.get(memo_key)
    if k is not None:
        return k
    with _lock:
        k = _loaded.get(memo_key)
        if k is None:
            from .. import runtime

            cubin, _meta = cubin_for(spec, target)
            handle = runtime.load_kernel(cubin, spec.smem_bytes, device, spec.params)
            family = getattr(type(spec), "FAMILY", None)
            k = LoadedKernel(
                handle, spec.threads, spec.smem_bytes, spec.name, bool(family and family.pdl), spec.params.pointers
            )
            _loaded[memo_key] = k
    return k


def precompile(specs, targets, jobs: int | None = None, progress: bool | None = None) -> int:
    """Compile (or verify cached) every spec for every target without touching a GPU, `jobs` nvcc processes
    at a time (default: one per core). Progress goes to stderr: a line per kernel on a terminal, a line per
    tenth of the work elsewhere (`progress` forces it on or off), then a summary line (built, cached, failed,
    time) unless progress is False. Returns the number of (spec, target) pairs; raises the first compile error
    after the rest finish."""
    work = [(s, t) for t in targets for s in specs]
    jobs = jobs or os.cpu_count() or 1
    bar = Progress(len(work), "precompile", enabled=progress, milestones=True)
    before = dict(stats)
    t0 = time.perf_counter()
    errors = []
    with cf.ThreadPoolExecutor(max_workers=max(1, jobs)) as ex:
        futs = {ex.submit(cubin_for, s, t): (s, t) for s, t in work}
        for f in cf.as_completed(futs):
            s, t = futs[f]
            try:
                f.result()
                bar.step(f"{s.name} [{t}]")
            except Exception as e:
                errors.append((s, t, e))
                bar.step(f"{s.name} [{t}] FAILED")
    bar.close()
    if progress is not False:
        built = int(stats["compiles"] - before["compiles"])
        cached = int(stats["disk_hits"] - before["disk_hits"])
        sys.stderr.write(
            f"precompile: {len(work)} kernel/target pairs: {built} built, {cached} cached, "
            f"{len(errors)} failed in {time.perf_counter() - t0:.0f} s ({jobs} jobs)\n"
        )
    if errors:
        s, t, first = errors[0]
        raise RuntimeError(f"{len(errors)} of {len(work)} kernels failed to compile; first: {s.name} for {t}: {first}")
    return len(work)
