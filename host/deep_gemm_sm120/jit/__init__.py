"""JIT: generated source -> nvcc -> cubin cache -> loaded kernel handle."""
from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass

from . import cache as _cache
from .compiler import compile_cubin, compile_flags, find_compiler
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


_loaded: dict[tuple, LoadedKernel] = {}
_lock = threading.Lock()
stats = {"compiles": 0, "disk_hits": 0, "compile_seconds": 0.0}


def cubin_for(spec, target: str, cache: _cache.KernelCache | None = None) -> tuple[bytes, dict]:
    """The cubin for `spec` on `target`, from the disk cache or freshly compiled."""
    cache = cache or _cache.KernelCache()
    comp = find_compiler()
    inc = device_layer_dir()
    source = spec.source()
    flags = compile_flags(target, inc)
    key_flags = [f for f in flags if not f.startswith("-I")]  # location-independent; content is in the digest
    key = _cache.cache_key(tree_digest(), source, key_flags, comp.version, target)
    found = cache.lookup(key)
    if found is not None:
        stats["disk_hits"] += 1
        return found
    if _flag(STRICT_ENV):
        raise RuntimeError(f"{STRICT_ENV}=1 and {spec.name} for {target} is not in the JIT cache "
                           f"({cache.root}); warm it with deep_gemm_sm120.precompile() first")

    def produce(work: str) -> tuple[str, dict]:
        src = os.path.join(work, "kernel.cu")
        with open(src, "w", encoding="utf-8") as fh:
            fh.write(source)
        out = os.path.join(work, "kernel.cubin")
        t0 = time.perf_counter()
        cmd, log = compile_cubin(comp, src, out, flags)
        dt = time.perf_counter() - t0
        stats["compiles"] += 1
        stats["compile_seconds"] += dt
        if _flag(DEBUG_ENV):
            sys.stderr.write(f"[deep_gemm_sm120 jit] {' '.join(cmd)}\n{log}\n[compiled in {dt:.2f} s]\n")
        return out, {"name": spec.name, "target": target, "compiler": comp.version, "command": cmd,
                     "ptxas_log": log, "compile_seconds": round(dt, 3)}

    return cache.build(key, produce)


def get_kernel(spec, target: str, device: int) -> LoadedKernel:
    """Loaded kernel for (spec, target) on `device`; compiled or read from disk at most once per process."""
    memo_key = (spec, target, device)
    k = _loaded.get(memo_key)
    if k is not None:
        return k
    with _lock:
        k = _loaded.get(memo_key)
        if k is None:
            from .. import runtime

            cubin, _meta = cubin_for(spec, target)
            handle = runtime.load_kernel(cubin, spec.smem_bytes, device)
            k = LoadedKernel(handle, spec.threads, spec.smem_bytes, spec.name)
            _loaded[memo_key] = k
    return k


def precompile(specs, targets) -> int:
    """Compile (or verify cached) every spec for every target without touching a GPU. Returns the count."""
    n = 0
    for t in targets:
        for s in specs:
            cubin_for(s, t)
            n += 1
    return n
