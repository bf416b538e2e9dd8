"""Where the device-layer headers are, and their tree digest (part of every cache key)."""

from __future__ import annotations

import hashlib
import os
from functools import cache

ENV = "DG_SM120_DEVICE_LAYER"
_PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@cache
def device_layer_dir() -> str:
    cands = [
        os.environ.get(ENV, ""),
        os.path.join(_PKG, "_device_layer"),
        os.path.join(os.path.dirname(os.path.dirname(_PKG)), "device_layer"),
    ]
    for c in cands:
        if c and os.path.isfile(os.path.join(c, "impls", "sm120_bf16_gemm.cuh")):
            return c
    raise FileNotFoundError(f"device_layer/ not found (looked in {', '.join(c for c in cands if c)}); set {ENV}")


@cache
def tree_digest() -> str:
    """sha256 over "<sha256>  <path>\\n" in path order: the manifests' tree_sha256 formula."""
    root = device_layer_dir()
    lines = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            p = os.path.join(dirpath, name)
            with open(p, "rb") as fh:
                digest = hashlib.sha256(fh.read()).hexdigest()
            lines.append((os.path.relpath(p, root).replace(os.sep, "/"), digest))
    h = hashlib.sha256()
    for path, digest in sorted(lines):
        h.update(f"{digest}  {path}\n".encode())
    return h.hexdigest()
