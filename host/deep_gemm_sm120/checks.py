"""The argument checks every entry point shares, on tensors (types, dims, strides, alignment, devices, grouped
layouts): each raises the typed error naming what was expected (core/rules.py has the error-type rule). The
shape and dtype rules of each op are its family's (rules.py in the family package); is_supported calls those.

Grouped layouts (device_layer/layout/sm120_grouped_layout.cuh): every group of a contiguous layout starts at a
multiple of MK_ALIGNMENT_FOR_CONTIGUOUS_LAYOUT rows. A boundary inside a block would make the kernel use one
expert's weights for another expert's tokens, so the host checks the layout before the launch (one device
reduction and one sync) unless told not to: `check_layout=False`, or automatically while a CUDA graph is being
captured (a sync is illegal there).
"""

from __future__ import annotations

import os

import torch

from .arch import target_of
from .core.arith import round_up
from .core.limits import MK_ALIGNMENT_FOR_CONTIGUOUS_LAYOUT, TMA_ALIGN
from .core.rules import dtype_name, require_dtype


def require_tensor(name: str, t) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    return t


def require_int32(name: str, t) -> torch.Tensor:
    """An index tensor (grouped layout, masked_m, ...): a torch.Tensor of int32 (TypeError otherwise)."""
    require_dtype(name, dtype_name(require_tensor(name, t).dtype), ("int32",))
    return t


def require_2d(name: str, t: torch.Tensor, what: str) -> None:
    if t.dim() != 2:
        raise ValueError(f"{name} must be 2-D {what}, got shape {tuple(t.shape)}")


def tma_operand(name: str, t: torch.Tensor) -> tuple[int | None, int]:
    """A row-major [rows, cols] operand read by TMA: unit inner stride, no overlapping rows, 16-byte aligned base.
    Returns (row stride in elements for the family rule, None for a single row; row stride in bytes for the
    descriptor, padded to 16 bytes for a single row). The 16-byte stride rule itself is the family rule's."""
    rows, cols = t.shape
    s0, s1 = t.stride()
    if s1 != 1 and cols > 1:
        raise ValueError(
            f"{name} must be row-major with a contiguous last dimension (stride(1) == 1), got strides {(s0, s1)}"
        )
    elem = t.element_size()
    if rows > 1 and s0 < cols:
        raise ValueError(f"{name} rows overlap (stride(0) = {s0} < {cols} columns)")
    if t.data_ptr() % TMA_ALIGN:
        raise ValueError(f"{name} data pointer must be {TMA_ALIGN}-byte aligned for TMA, got {t.data_ptr():#x}")
    if rows > 1:
        return s0, s0 * elem
    return None, round_up(cols * elem, TMA_ALIGN)


def output_row_stride(name: str, t: torch.Tensor) -> int:
    """Row-major output written by the epilogue: unit inner stride, 16-byte aligned base."""
    if t.stride(1) != 1 and t.shape[1] > 1:
        raise ValueError(
            f"{name} must have a contiguous last dimension (stride(1) == 1), got strides {tuple(t.stride())}"
        )
    if t.shape[0] > 1 and t.stride(0) < t.shape[1]:
        raise ValueError(f"{name} rows overlap (stride(0) = {t.stride(0)} < {t.shape[1]} columns)")
    if t.data_ptr() % TMA_ALIGN:
        raise ValueError(f"{name} data pointer must be {TMA_ALIGN}-byte aligned, got {t.data_ptr():#x}")
    return t.stride(0) if t.shape[0] > 1 else t.shape[1]


def write_empty_reduction(d: torch.Tensor, c: torch.Tensor | None) -> None:
    """d = c (+ nothing) for a product with an empty reduction (K = 0 or no batches): TMA cannot describe a
    zero-extent operand, so no kernel runs. Zeros without c; a copy of c unless c is d itself."""
    if c is None:
        d.zero_()
    elif c.data_ptr() != d.data_ptr():
        d.copy_(c)


def require_shape(name: str, t: torch.Tensor, shape: tuple, what: str) -> None:
    if tuple(t.shape) != shape:
        raise ValueError(f"{name} must be {what} = {shape}, got {tuple(t.shape)}")


def rows_view(name: str, t: torch.Tensor) -> torch.Tensor:
    """[G, R, C] with contiguous rows -> the 2-D [G*R, C] view the kernels' descriptors use."""
    g, r, c = t.shape
    s0, s1, s2 = t.stride()
    if s2 != 1 and c > 1:
        raise ValueError(f"{name} must have a contiguous last dimension, got strides {(s0, s1, s2)}")
    if g > 1 and s0 != r * s1:
        raise ValueError(
            f"{name} groups must be stacked densely (stride(0) == {r} * stride(1)), got strides {(s0, s1, s2)}"
        )
    return t.view(g * r, c) if t.is_contiguous() else t.as_strided((g * r, c), (s1, s2))


def check_contiguous_layout(layout: torch.Tensor, m: int, num_groups: int, psum: bool) -> None:
    """Raise ValueError unless `layout` obeys the contiguous-layout contract (works on any device)."""
    align = MK_ALIGNMENT_FOR_CONTIGUOUS_LAYOUT
    if not psum:
        blocks = layout.view(-1, align)
        first = blocks[:, :1]
        bad_range = (blocks < -1) | (blocks >= num_groups)
        mixed = (blocks != first) & (blocks != -1)  # two groups in one block
        late_start = (first == -1) & (blocks != -1)  # padding before real rows
        bad = (bad_range | mixed | late_start).any(dim=1)
        if bool(bad.any()):
            i = int(bad.nonzero()[0, 0])
            row = i * align
            if bool(bad_range[i].any()):
                raise ValueError(
                    f"grouped_layout rows {row}..{row + align - 1} hold a group id outside "
                    f"[-1, {num_groups}) (b has {num_groups} groups)"
                )
            raise ValueError(
                f"grouped_layout rows {row}..{row + align - 1} mix groups or start with padding: "
                f"each group must start at a multiple of get_mk_alignment_for_contiguous_layout() "
                f"= {align} rows, with -1 padding only after a group's rows"
            )
        return
    ends = layout.long()
    prev = torch.cat([ends.new_zeros(1), ends[:-1]])
    starts = (prev + align - 1) // align * align
    bad = (ends < prev) | ((ends < starts) & (ends != prev)) | (ends > m)
    if bool(bad.any()):
        g = int(bad.nonzero()[0, 0])
        raise ValueError(
            f"grouped_layout (psum) entry {g} = {int(ends[g])} is not a valid group end: ends must "
            f"not decrease, each non-empty group starts at the previous end rounded up to {align}, "
            f"and the last end is <= M = {m}"
        )


def require_contiguous_layout_shape(grouped_layout: torch.Tensor, m: int, groups: int, psum: bool) -> None:
    """Shape / contiguity of a contiguous-layout index tensor (no device access). M's alignment is part of
    each family's shape rule."""
    if psum:
        require_shape("grouped_layout", grouped_layout, (groups,), "[G] (group end rows, psum layout)")
    else:
        require_shape("grouped_layout", grouped_layout, (m,), "[M] (one group id per row)")
    if not grouped_layout.is_contiguous():
        raise ValueError("grouped_layout must be contiguous")


class _Switch:
    """A process-wide on/off for host checks that read values (a device sync each): read from its environment
    variable at first use unless set; off while a CUDA graph is captured."""

    __slots__ = ("env", "default", "value")

    def __init__(self, env: str, default: bool) -> None:
        self.env, self.default = env, default
        self.value: bool | None = None

    def get(self) -> bool:
        if self.value is None:
            raw = os.environ.get(self.env)
            word = None if raw is None else raw.strip().lower()
            if word is None:
                self.value = self.default
            elif self.default:  # on unless turned off
                self.value = word not in ("0", "false", "no", "off")
            else:  # off unless turned on
                self.value = word in ("1", "true", "yes", "on")
        return self.value

    def set(self, name: str, enabled: bool) -> None:
        if not isinstance(enabled, bool):
            raise TypeError(f"{name} takes a bool, got {type(enabled).__name__}")
        self.value = enabled

    def now(self) -> bool:
        return self.get() and not torch.cuda.is_current_stream_capturing()


INDEX_CHECKS_ENV = "DG_SM120_INDEX_CHECKS"
SCALE_CHECKS_ENV = "DG_SM120_CHECK_SCALES"
_INDEX_CHECKS = _Switch(INDEX_CHECKS_ENV, True)
_SCALE_CHECKS = _Switch(SCALE_CHECKS_ENV, False)
# Cached hot paths read SCALE_CHECKS.value (None until the first get() reads the environment), so a cached call
# with the check off costs one attribute read and enters no function of this module.
SCALE_CHECKS = _SCALE_CHECKS


def index_checks() -> bool:
    """Whether the host checks that read index values (a block table, lengths, ranges, a grouped layout; one
    device sync each) run now: never while a CUDA graph is captured, and not when DG_SM120_INDEX_CHECKS=0 (read
    at the first check) or set_index_checks(False). The kernels give their documented defined results on any
    index either way (docs/untrusted_indices.md); the checks turn a bad index into a ValueError naming it."""
    return _INDEX_CHECKS.now()


def get_index_checks() -> bool:
    """The switch of index_checks() (on by default), capture aside."""
    return _INDEX_CHECKS.get()


def set_index_checks(enabled: bool) -> None:
    """Turn the host checks of index values on or off for this process (see index_checks)."""
    _INDEX_CHECKS.set("set_index_checks", enabled)


def scale_checks() -> bool:
    """Whether packed int32 scales a caller passes are checked for special encodings on every call (UE8M0 0xFF
    = NaN; UE4M3 NaN and a set sign bit): off by default (it reads the scales: a device sync), on with
    DG_SM120_CHECK_SCALES=1 or set_scale_checks(True), never while a CUDA graph is captured. Unpacked scales are
    always checked when they are packed."""
    return _SCALE_CHECKS.now()


def get_scale_checks() -> bool:
    return _SCALE_CHECKS.get()


def set_scale_checks(enabled: bool) -> None:
    """Turn the packed-scale check on or off for this process (see scale_checks)."""
    _SCALE_CHECKS.set("set_scale_checks", enabled)


def check_given_scales(fmt: str, *named: tuple[str, torch.Tensor]) -> None:
    """When scale_checks(): each (name, packed int32 scale words a caller passed) against the encodings no scale
    may hold (scale_layout.check_packed_values), a ValueError naming the word and byte."""
    if scale_checks():
        from .scale_layout import check_packed_values

        for name, sf in named:
            check_packed_values(name, sf, fmt)


def maybe_check_contiguous_layout(
    check: bool | None, grouped_layout: torch.Tensor, m: int, groups: int, psum: bool
) -> None:
    """The layout contract check (one device reduction + sync): `check` forces it on or off; None follows
    index_checks() (off while a CUDA graph is captured or when index checks are turned off)."""
    if check is None:
        check = index_checks()
    if check:
        check_contiguous_layout(grouped_layout, m, groups, psum)


def device_of(**tensors: torch.Tensor) -> int:
    """The device prologue of every entry point: all tensors on one CUDA device (ValueError otherwise), and the
    architecture supported there (NotImplementedError otherwise, even for empty problems). Returns its index."""
    devs = {name: t.device for name, t in tensors.items()}
    for name, dev in devs.items():
        if dev.type != "cuda":
            from .device import NO_GPU

            raise ValueError(
                f"{name} must be on a CUDA device, got {dev}" + ("" if torch.cuda.is_available() else f"; {NO_GPU}")
            )
    first = next(iter(devs.values()))
    if any(dev != first for dev in devs.values()):
        listing = ", ".join(f"{n}={d}" for n, d in devs.items())
        raise ValueError(f"all tensors must be on one CUDA device, got {listing}")
    index = first.index if first.index is not None else torch.cuda.current_device()
    target_of(index)
    return index
