"""On-disk cubin cache: content-addressed, published by atomic rename, self-healing.

Layout: <root>/<key[:2]>/<key>/{kernel.cubin, meta.json}. An entry is valid only when meta.json parses
and names the sha256 of kernel.cubin; anything else is moved aside and rebuilt. Builders work in a
private temporary directory under <root>/tmp and publish with one rename, so concurrent processes
compiling the same kernel both succeed and readers never see half-written files.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable

CACHE_ENV = "DG_SM120_JIT_CACHE_DIR"
CUBIN = "kernel.cubin"
META = "meta.json"


def default_root() -> str:
    """$DG_SM120_JIT_CACHE_DIR, else $DG_JIT_CACHE_DIR/deep_gemm_sm120, else ~/.cache/deep_gemm_sm120, read now."""
    from ..core import envvars

    return envvars.cache_dir()


def cache_key(tree_digest: str, source: str, flags: list[str], compiler_version: str, target: str) -> str:
    material = json.dumps(
        {"tree": tree_digest, "source": source, "flags": flags, "compiler": compiler_version, "target": target},
        sort_keys=True,
    )
    return hashlib.sha256(material.encode()).hexdigest()


class KernelCache:
    def __init__(self, root: str | None = None):
        self.root = root or default_root()

    def entry_dir(self, key: str) -> str:
        return os.path.join(self.root, key[:2], key)

    def _read_valid(self, d: str) -> tuple[bytes, dict] | None:
        try:
            with open(os.path.join(d, META), encoding="utf-8") as fh:
                meta = json.load(fh)
            with open(os.path.join(d, CUBIN), "rb") as fh:
                cubin = fh.read()
        except (OSError, ValueError):
            return None
        if not isinstance(meta, dict) or meta.get("cubin_sha256") != hashlib.sha256(cubin).hexdigest():
            return None
        return cubin, meta

    def _discard(self, d: str) -> None:
        aside = f"{d}.corrupt.{os.getpid()}.{time.monotonic_ns()}"
        try:
            os.rename(d, aside)
        except OSError:
            return  # already gone (another process healed it)
        shutil.rmtree(aside, ignore_errors=True)

    def lookup(self, key: str) -> tuple[bytes, dict] | None:
        d = self.entry_dir(key)
        if not os.path.isdir(d):
            return None
        found = self._read_valid(d)
        if found is None:
            self._discard(d)
        return found

    def build(self, key: str, produce: Callable[[str], tuple[str, dict]]) -> tuple[bytes, dict]:
        """`produce(tmpdir)` writes a cubin there and returns (its path, metadata); we publish it."""
        tmp_root = os.path.join(self.root, "tmp")
        os.makedirs(tmp_root, exist_ok=True)
        work = tempfile.mkdtemp(prefix=f"{key[:16]}.", dir=tmp_root)
        try:
            cubin_path, meta = produce(work)
            with open(cubin_path, "rb") as fh:
                cubin = fh.read()
            stage = os.path.join(work, "entry")
            os.mkdir(stage)
            with open(os.path.join(stage, CUBIN), "wb") as fh:
                fh.write(cubin)
                fh.flush()
                os.fsync(fh.fileno())
            meta = dict(meta, key=key, cubin_sha256=hashlib.sha256(cubin).hexdigest())
            with open(os.path.join(stage, META), "w", encoding="utf-8") as fh:
                json.dump(meta, fh, indent=1)
                fh.flush()
                os.fsync(fh.fileno())
            final = self.entry_dir(key)
            os.makedirs(os.path.dirname(final), exist_ok=True)
            try:
                os.rename(stage, final)
            except OSError:
                winner = self._read_valid(final)  # another process published first: use theirs
                if winner is not None:
                    return winner
                self._discard(final)
                os.rename(stage, final)
            return cubin, meta
        finally:
            shutil.rmtree(work, ignore_errors=True)
