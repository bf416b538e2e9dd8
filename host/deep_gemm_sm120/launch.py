"""The launch entry every family's API ends in, with the switches that shape it: programmatic dependent launch
(PDL) and DeepGEMM's compile mode."""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from . import runtime

PDL_ENV = "DG_SM120_PDL"


class Launcher:
    """Launch state shared by every family: the raw launch entry and stream getter (bound on first use, so
    importing stays free of CUDA) and the PDL switch (None until the first launch reads the environment)."""

    __slots__ = ("launch", "stream", "pdl", "compile_mode")

    def __init__(self) -> None:
        self.launch: Callable[..., Any] | None = None
        self.stream: Callable[[int], int] | None = None
        self.pdl: bool | None = None
        self.compile_mode = 0

    def bind(self) -> Launcher:
        self.launch, self.stream = runtime.launcher(), runtime.current_stream_fn()
        return self


BOUND = Launcher()


def bound() -> Launcher:
    """The launch state, bound to the runtime on first use."""
    return BOUND if BOUND.launch is not None else BOUND.bind()


def get_pdl() -> bool:
    """Whether launches of kernels that wait on griddepcontrol carry programmatic dependent launch (PDL):
    the next kernel's prologue then overlaps this one's tail. On by default; DG_SM120_PDL=0 (read at the first
    launch) or set_pdl(False) turns it off."""
    if BOUND.pdl is None:
        BOUND.pdl = os.environ.get(PDL_ENV, "1") not in ("0", "false", "False", "")
    return BOUND.pdl


def set_pdl(enabled: bool) -> None:
    if not isinstance(enabled, bool):
        raise TypeError(f"set_pdl takes a bool, got {type(enabled).__name__}")
    BOUND.pdl = enabled


COMPILE_MODES = {
    0: "compile (JIT, on first use of a configuration) and launch",
    1: "compile only: every check runs and each kernel is built and loaded into the JIT cache, but no "
    "kernel is launched (outputs are left as they are): warm-up without GPU work",
}


def _skip_launch(*args) -> None:
    """The launch entry under compile mode 1: the kernel was built and loaded by the caller; nothing runs."""


def get_compile_mode() -> int:
    return BOUND.compile_mode


def set_compile_mode(mode: int) -> None:
    """DeepGEMM's compile mode (see COMPILE_MODES). Mode 1 swaps the launch entry every family calls for one that
    does nothing, so hot paths keep their single attribute read; mode 0 rebinds the real one on next use."""
    if isinstance(mode, bool) or not isinstance(mode, int):
        raise TypeError(f"set_compile_mode takes an int, got {type(mode).__name__}")
    if mode not in COMPILE_MODES:
        raise ValueError(f"compile mode must be one of {sorted(COMPILE_MODES)} ({COMPILE_MODES}), got {mode}")
    BOUND.compile_mode = mode
    if mode == 1:
        BOUND.launch, BOUND.stream = _skip_launch, lambda index: 0
    else:
        BOUND.launch = BOUND.stream = None


def launch(
    kernel, grid: int | tuple[int, int, int], params: bytes, tmaps: bytes, index: int, smem: int | None = None
) -> None:
    """Launch a jit.LoadedKernel on the current stream of device `index` (PDL when the family waits on
    griddepcontrol and the switch is on). Every entry point launches through here."""
    b = BOUND if BOUND.launch is not None else bound()
    gx, gy, gz = (grid, 1, 1) if isinstance(grid, int) else grid
    pdl = kernel.pdl and (b.pdl if b.pdl is not None else get_pdl())
    smem = kernel.smem_bytes if smem is None else smem
    rec = _REC.rec
    if rec is not None:  # FastCalls.add's record (fast_call.cpp read_record)
        rec.append(
            None
            if kernel.pointers is None
            else (kernel.handle, gx, gy, gz, kernel.threads, smem, index, kernel.pdl, params, tmaps, kernel.pointers)
        )
    b.launch(  # type: ignore[misc]  # bound() set both entries; no check on the hot path
        kernel.handle,
        gx,
        gy,
        gz,
        kernel.threads,
        smem,
        b.stream(index),  # type: ignore[misc]  # likewise
        pdl,
        params,
        tmaps,
    )


# ---------------------------------------------------------------- calls validated once per signature

_CACHES: list[CallCache] = []  # every CallCache (module-level ones, made at import)
# Bumped by forget_calls (under _GEN_LOCK): a recording that began before a forget adds nothing after it.
_GEN = [0]
_GEN_LOCK = threading.RLock()  # reentrant: a table's add reads attributes, which may run Python that forgets
_MEMOS: list[dict] = []  # every kernel_memo's store
# While > 0 (scale_encoding.forced: a self-test thread loads kernels of one encoding on purpose), no plan or kernel
# is stored, so none made for the forced encoding outlives it and no thread finds another's.
_FROZEN = [0]
_frozen_lock = threading.Lock()


def kernel_memo(maxsize: int) -> Callable:
    """Memoize a function that returns loaded kernels (its positional arguments are the key), bounded, forgotten
    with the call caches (forget_calls) and never stored into while plans are frozen: a kernel chosen under one
    scale encoding is never handed out under another."""

    def wrap(fn: Callable) -> Callable:
        store: dict = {}
        _MEMOS.append(store)

        def memo(*args):
            got = store.get(args)
            if got is None:
                got = fn(*args)
                if not _FROZEN[0]:
                    if len(store) >= maxsize:
                        store.clear()
                    store[args] = got
            return got

        memo.__wrapped__ = fn  # type: ignore[attr-defined]
        memo.maxsize = maxsize  # type: ignore[attr-defined]
        memo.cache_clear = store.clear  # type: ignore[attr-defined]  # lru_cache's name for it
        memo.__doc__, memo.__name__ = fn.__doc__, fn.__name__
        return memo

    return wrap


def tensor_key(t) -> tuple:
    """What an entry point's checks read of a tensor besides its values and its address: dtype, shape, strides,
    device and the address's 16-byte alignment class. Two calls whose tensors agree on these pass or fail the
    checks alike (AttributeError for something that is not a tensor: the caller then runs the checks, which
    name what was expected). The class is part of the key: an object that only looks like a tensor (a shape
    tuple equals a torch.Size) never matches an entry a checked tensor made."""
    # the device itself: mps:0 is not cuda:0
    return (type(t), t.dtype, t.shape, t.stride(), t.device, t.data_ptr() & 15)


# What building a key may raise: AttributeError (not a tensor), TypeError (unhashable, or recipe_key's refusal),
# RuntimeError (a tensor without storage: sparse, meta-less fakes). The caller then runs the checks uncached,
# and they give the typed error.
KEY_ERRORS = (AttributeError, TypeError, RuntimeError)


def recipe_key(recipe) -> tuple | None:
    """A recipe as a key part. The checks take a tuple or list; one of plain ints keys as its tuple (a list and
    a tuple are checked alike). Anything else (a deque, an array, an iterator, floats, bools, which would hash
    like ints) raises TypeError: such a call is checked every time rather than matched to another's entry."""
    if recipe is None:
        return None
    if type(recipe) not in (tuple, list) or any(type(g) is not int for g in recipe):
        raise TypeError("recipe is not a tuple or list of ints")
    return tuple(recipe)


class CallCache(dict):
    """Signature -> what the checks and the plan of a call with that signature produced (checks run once per
    signature). A dict (a hit is one C-level `get`), bounded by `put`: cleared when full, so a server seeing
    endless shapes holds at most `limit` entries. A plan also reads what no key holds (num_sms): whatever
    changes that calls forget_calls()."""

    __slots__ = ("limit",)

    def __init__(self, limit: int = 4096) -> None:
        super().__init__()
        self.limit = limit
        _CACHES.append(self)

    def put(self, key, value) -> None:
        if _FROZEN[0]:  # plans made while an encoding is forced stay with their call
            return
        if len(self) >= self.limit:
            self.clear()
        self[key] = value


def forget_calls() -> None:
    """Empty every CallCache and FastCalls table: the next call of each signature checks and plans again
    (set_num_sms changes the grids and split-K of plans no key tells apart)."""
    with _GEN_LOCK:
        _GEN[0] += 1
        for calls in _CACHES:
            calls.clear()
        for store in _MEMOS:
            store.clear()
        for fast in _FASTS:
            fast.clear()


# ---------------------------------------------------------------- calls served in C (host/csrc/fast_call.cpp)

_FASTS: list = []  # every FastCalls table (module-level ones, made at import)


class _Recording(threading.local):
    """What launch() appends to while a checked call of a new signature runs in recording(): one per thread, so
    two threads' first calls never record into each other's list. `fresh`: the tensors that call allocated
    through empty() / zeros(), with their factories and versions."""

    rec: list | None = None
    fresh: list | None = None


_REC = _Recording()


class _NoFastCalls:
    """The stand-in when the runtime extension is not built: nothing is served, every call takes its checked
    path (which then names the missing extension when it launches)."""

    hits = 0

    def __init__(self, schema: str, returns: bool = False) -> None:
        self.schema = schema
        self.returns = returns

    def __call__(self, *args) -> None:
        return None

    def __len__(self) -> int:
        return 0

    def add(self, args: tuple, records: list, fresh: list | None = None, result=None, spans=None) -> bool:
        return False

    def clear(self) -> None:
        pass


def fast_calls(schema: str, limit: int = 1024, returns: bool = False):
    """A table of calls served in C (host/csrc/fast_call.cpp). `table(*args)` reads the call's signature (what
    tensor_key reads of every tensor, the value of every plain argument): when the table holds it, it makes the
    tensors that call allocated (empty() / zeros()), launches what the checked call of that signature launched with
    this call's addresses, and returns True (a table made with returns=True: what the checked call returned, made
    of the new allocations). Otherwise it
    returns the signature as bytes, for the caller's own CallCache key, or None when an argument is not what the
    schema allows (the checked path then names what is wrong). `schema`: one letter per argument, T a tensor or
    None, P a (tensor, scales) pair or a bare tensor, V a plain value (None, bool, int, float, str, or a tuple /
    list of those). A checked call of a new signature fills the table through recording()."""
    try:
        fast = runtime._ext().FastCalls(schema, BOUND, limit, returns)
    except (RuntimeError, AttributeError, TypeError):  # not built, or built before FastCalls (or returns) existed
        fast = _NoFastCalls(schema, returns)
    _FASTS.append(fast)
    return fast


class Recorded:
    """What a checked call inside recording() hands back: `result`, what the entry point returns (tables made
    with returns=True)."""

    __slots__ = ("result",)

    def __init__(self) -> None:
        self.result = None


def _tensors(obj, out: list) -> list:
    """The tensors of an argument (a tensor, or a tuple / list of them, one level), in order."""
    if isinstance(obj, torch.Tensor):
        out.append(obj)
    elif type(obj) in (tuple, list):
        for x in obj:
            if isinstance(x, torch.Tensor):
                out.append(x)
    return out


def _version(t: torch.Tensor) -> int | None:
    """A tensor's version counter: an in-place torch operation on it (or on a view of it) bumps it, which no launch
    does. None for an inference tensor (made under torch.inference_mode), which keeps none: there the guard
    cannot look, and the CPU rig's oracle, which runs every served entry point on ordinary tensors, is what holds
    their checked paths to launches only."""
    return None if t.is_inference() else t._version


def _versions(args: tuple) -> list:
    """Every argument tensor with its version counter (_version)."""
    got: list = []
    for a in args:
        _tensors(a, got)
    return [(t, _version(t)) for t in got]


def _extent(t: torch.Tensor) -> int:
    """The bytes a tensor's elements span from its address (strides as they are; 0 when empty): an address a
    launch passes inside it, at an offset the signature fixes, is patched as this argument's plus the offset."""
    if t.numel() == 0:
        return 0
    return (1 + sum((n - 1) * abs(st) for n, st in zip(t.shape, t.stride()))) * t.element_size()


def _written(pairs) -> bool:
    """Whether a torch operation wrote one of the tensors since its version was read (pairs of (tensor, version),
    or (tensor, factory, version) for allocations)."""
    return any(x[-1] is not None and _version(x[0]) != x[-1] for x in pairs)


def _result_recipe(result, fresh: list):
    """What a served call must return, from the tensors it allocates (Entry::result in fast_call.cpp): each returned
    tensor one of them or a view of one. None when the result is not that (the call stays checked)."""
    made = [t for t, _, _ in fresh]

    def item(x):
        if x is None:
            return None
        if not isinstance(x, torch.Tensor):
            raise LookupError
        for j, t in enumerate(made):
            if x is t:
                return j
        for j, t in enumerate(made):
            if x._base is t:
                return (j, tuple(x.shape), tuple(x.stride()), x.storage_offset())
        raise LookupError

    try:
        if type(result) is tuple:
            return ("tuple", tuple(item(x) for x in result))
        return None if result is None else ("one", item(result))
    except LookupError:
        return None


@contextmanager
def recording(fast, args: tuple) -> Iterator[Recorded]:
    """Record what the checked call in the block launches and keep it in `fast` under the signature of `args` (the
    arguments the table is called with). Kept only when the block finishes, launched at least once, and every
    launch can be replayed from args alone and the tensors the call allocated through empty() / zeros()
    (FastCalls.add: each address a launch passes is exactly one of args' tensors, or inside one of those
    allocations, or inside exactly one argument's extent that no other argument overlaps; a temporary, a copy or a
    value check (no_fast) keeps the signature on the checked path). Nor is it kept when a
    torch operation wrote one of the call's tensors in place (version counters): only launches are replayed.
    A table made with returns=True also needs the block's `result` (set on what it yields), made of the
    allocated tensors or views of them."""
    outer, rec, gen = _REC.rec, [], _GEN[0]
    outer_fresh, fresh = _REC.fresh, []
    versions = _versions(args)
    got = Recorded()
    _REC.rec, _REC.fresh = rec, fresh
    try:
        yield got
    finally:
        _REC.rec, _REC.fresh = outer, outer_fresh
    if outer is not None:  # a checked call inside another one's: the outer call launched these too
        outer.extend(rec)
        if outer_fresh is not None:
            outer_fresh.extend(fresh)
    if not rec or None in rec:
        return
    if _written(versions) or _written(fresh):
        return
    recipe = _result_recipe(got.result, fresh) if fast.returns else None
    if fast.returns and recipe is None:
        return
    made = [(t.data_ptr(), t.untyped_storage().nbytes(), f) for t, f, _ in fresh]
    extents = [(t.data_ptr(), _extent(t)) for t, _ in versions]
    with _GEN_LOCK:  # not after a forget_calls (set_num_sms, a verdict, frozen plans) that began meanwhile
        if _GEN[0] == gen and not _FROZEN[0]:
            fast.add(args, rec, made, recipe, extents)


def _allocated(t: torch.Tensor, make: Callable[..., torch.Tensor], shape: tuple[int, ...], dtype, device):
    """t, made by make(shape, dtype=, device=): while a checked call records, kept with the factory a served call
    makes its own with (built only then: a checked call that records nothing pays no partial)."""
    fresh = _REC.fresh
    if fresh is not None:
        fresh.append((t, functools.partial(make, shape, dtype=dtype, device=device), _version(t)))
    return t


def empty(shape: tuple[int, ...], dtype: torch.dtype, device) -> torch.Tensor:
    """torch.empty for a tensor a launch addresses (a workspace, an output): a call served in C makes its own the
    same way, per call, instead of the checked call's address."""
    return _allocated(torch.empty(shape, dtype=dtype, device=device), torch.empty, shape, dtype, device)


def zeros(shape: tuple[int, ...], dtype: torch.dtype, device) -> torch.Tensor:
    """torch.zeros for a tensor a launch addresses (a flag table, an accumulator): as empty()."""
    return _allocated(torch.zeros(shape, dtype=dtype, device=device), torch.zeros, shape, dtype, device)


def no_fast() -> None:
    """Called by a checked call whose work depends on values no signature holds: it is not served in C."""
    rec = _REC.rec
    if rec is not None:
        rec.append(None)


@contextmanager
def frozen_plans() -> Iterator[None]:
    """Forget every plan, store none until the block ends (any thread), then forget again."""
    with _frozen_lock:
        _FROZEN[0] += 1
    forget_calls()
    try:
        yield
    finally:
        with _frozen_lock:
            _FROZEN[0] -= 1
        forget_calls()
