"""Integer rounding, in one place (torch-free: the declarations and the tools use it too)."""

from __future__ import annotations


def ceil_div(a: int, b: int) -> int:
    """ceil(a / b) for integers, b > 0; exact at any size (no float)."""
    return -(-a // b)


def round_up(a: int, b: int) -> int:
    """The smallest multiple of b that is >= a (b > 0)."""
    return ceil_div(a, b) * b
