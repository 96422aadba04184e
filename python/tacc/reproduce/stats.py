"""Statistics over seeds: the mean and its 95% confidence interval, and whether two
variants' means differ by more than their seed-to-seed variation (Welch's t-test)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def mean_ci(values: Sequence[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95% confidence interval (Student t; 0 for one value,
    NaN when a value is infinite)."""
    x = np.asarray([v for v in values if v is not None and not math.isnan(v)], dtype=float)
    if x.size == 0:
        return math.nan, math.nan
    if x.size == 1:
        return float(x[0]), 0.0
    if not np.isfinite(x).all():  # e.g. a time that never came, as infinity: no interval
        return float(x.mean()), math.nan
    return float(x.mean()), float(t95(x.size - 1) * x.std(ddof=1) / math.sqrt(x.size))


# Two-sided 95% Student t quantiles by degrees of freedom (statistical constants).
_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
        9: 2.262, 10: 2.228, 15: 2.131, 20: 2.086, 30: 2.042}


def t95(df: float) -> float:
    """The two-sided 95% t quantile at `df` degrees of freedom, or the next larger one the
    table holds (between its entries, and beyond 30, the interval errs on the wide side)."""
    return _T95[max(k for k in _T95 if k <= max(df, 1))]


def within_spread(a: Sequence[float], b: Sequence[float]) -> bool | None:
    """Whether the means of two samples over seeds differ by less than Welch's t-test can
    tell from seed-to-seed variation (95%, two-sided); None with fewer than two of either."""
    x, y = (np.asarray([v for v in s if not math.isnan(v)], dtype=float) for s in (a, b))
    if x.size < 2 or y.size < 2:
        return None
    vx, vy = x.var(ddof=1) / x.size, y.var(ddof=1) / y.size
    if vx + vy == 0:
        return False
    df = (vx + vy) ** 2 / (vx ** 2 / (x.size - 1) + vy ** 2 / (y.size - 1))
    return bool(abs(x.mean() - y.mean()) < t95(df) * math.sqrt(vx + vy))
