"""Memo cells of the scalar query paths (``attention_query``, ``moe_query``): a non-negative
count or length x is rounded in log2 space, ``cells`` grid points per doubling of 1 + x."""

from __future__ import annotations

import math


def index(x: float, cells: float) -> int:
    """Grid index of x: round(log2(1 + x) * cells)."""
    return round(math.log2(1.0 + x) * cells)


def centre(c: int, cells: float) -> float:
    """Representative value of grid index c: the inverse of ``index`` at the cell's centre."""
    return 2.0 ** (c / cells) - 1.0


def nearest_integer(c: int, cells: float) -> float:
    """Representative value of an integer statistic: ``centre`` rounded to an integer (exact
    while a cell holds at most one integer: below ~23 at 16 cells, ~92 at 64)."""
    return float(round(centre(c, cells)))
