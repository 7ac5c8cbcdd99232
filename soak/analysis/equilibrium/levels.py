"""Levels and their noise: a window's level from its 30-s batch levels (spec, line 2)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

import numpy as np
from scipy import stats

from soak.config import Windows

MIN_POINTS = 10  # fewer readings than this in a window and its level cannot be judged
BATCHES = 10  # batches per window: the usual 10–30 of batch means, the fewest that leave df
MIN_BATCH_SHARE = 0.8  # a window with more gaps than this says nothing about its level
CONFIDENCE = 0.95  # one-sided: noise can make a date later, never earlier
LONG_SCALE = 2  # the longer windows, in eq_window_s: long enough to span a fan's cycle


@dataclass(frozen=True, slots=True)
class Series:
    """Samples of one quantity: times and values (NaN where unreadable)."""

    t: np.ndarray
    y: np.ndarray

    def window(self, start: float, end: float) -> Series:
        """The samples in (start, end]."""
        lo, hi = np.searchsorted(self.t, [start, end], side="right")
        return Series(self.t[lo:hi], self.y[lo:hi])


@dataclass(frozen=True, slots=True)
class Level:
    """A signal's level over one or more ``eq_window_s`` windows, with what its noise needs:
    batch count, and squared residuals about each window's line and their degrees of
    freedom."""

    level: float
    batches: int
    squares: float
    df: int


def batch_levels(
    s: Series, t_check: float, window_s: float, per_window: int = BATCHES
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Batch medians over (t_check − 2W, t_check]: nominal centres, levels (NaN where a
    batch is empty) and reading counts, 2·per_window of each. A batch is (edge, next edge]."""
    count = 2 * per_window
    edges = t_check - 2 * window_s + (2 * window_s / count) * np.arange(count + 1)
    span = s.window(edges[0], edges[-1])
    finite = np.isfinite(span.y)
    t, y = span.t[finite], span.y[finite]
    index = np.clip(np.searchsorted(edges, t, side="left") - 1, 0, count - 1)
    counts = np.bincount(index, minlength=count)
    filled = counts > 0
    levels = np.full(count, np.nan)
    ordered = y[np.lexsort((y, index))]  # every batch's median at once: by batch, by value
    first = (np.cumsum(counts) - counts)[filled]
    n = counts[filled]
    levels[filled] = (ordered[first + (n - 1) // 2] + ordered[first + n // 2]) / 2
    centres = (edges[:-1] + edges[1:]) / 2
    return centres, levels, counts


@cache
def t_quantile(df: int) -> float:
    """Student's t at the rule's confidence (one-sided), for ``df`` degrees of freedom."""
    return float(stats.t.ppf(CONFIDENCE, df))


def line(x: np.ndarray, y: np.ndarray) -> tuple[float, float, np.ndarray]:
    """Least-squares line of y in x: its slope, Σ(x − x̄)², and the residuals about it."""
    xc = x - x.mean()
    sxx = float(np.dot(xc, xc))
    slope = float(np.dot(xc, y - y.mean()) / sxx)
    return slope, sxx, y - y.mean() - slope * xc


def detrended(
    centres: np.ndarray, levels: np.ndarray, parts: int
) -> tuple[list[np.ndarray], float, int]:
    """Each short window's finite batch levels, and the squared residuals about each one's
    own least-squares line with their degrees of freedom: the noise of a batch level about
    the local trend, with the trend (and a cycle's slow swing) left out."""
    pieces, squares, df = [], 0.0, 0
    for k in range(parts):
        part = slice(k * BATCHES, (k + 1) * BATCHES)
        ok = np.isfinite(levels[part])
        x, y = centres[part][ok], levels[part][ok]
        pieces.append(y)
        if y.size >= 3:
            _, _, resid = line(x, y)
            squares += float(resid @ resid)
            df += y.size - 2
    return pieces, squares, df


def level_of(s: Series, end_s: float, windows: Windows, windows_n: int = 2) -> Level | None:
    """The level of (end − n·W, end] (n = ``windows_n`` eq_window_s windows, two by default:
    the 10-min level); None where it holds too few readings to say."""
    w = windows.eq_window_s
    per_window = BATCHES * windows_n // 2
    centres, batch, counts = batch_levels(s, end_s, w * windows_n / 2, per_window)
    filled = int(np.isfinite(batch).sum())
    enough = math.ceil(MIN_BATCH_SHARE * BATCHES * windows_n)
    if int(counts.sum()) < MIN_POINTS * windows_n or filled < enough:
        return None
    pieces, squares, df = detrended(centres, batch, windows_n)
    return Level(float(np.concatenate(pieces).mean()), filled, squares, df)
