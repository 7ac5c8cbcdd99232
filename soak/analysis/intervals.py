"""Confidence intervals of a window's figures and of their steady/cold ratios.

A figure's standard error is the batch-means one ``soak.analysis.noise`` computes (the
window cut into equal blocks, the figure taken in each): blocks long against the noise's
correlation, so the block figures are near independent and a t interval with blocks − 1
degrees of freedom holds. A ratio's interval is the delta method's: its relative error is
the two relative errors added in quadrature (the cold and steady windows do not overlap, so
their errors are independent); with errors of a few per cent at most it matches Fieller's.

A window's median has the distribution-free interval of two order statistics (the binomial
one: the ranks between which the median lies with ``CONFIDENCE``), so that a level that
swings between a floor and its maximum from one reading to the next (a clock held by SW
thermal slowdown) has the wide interval it deserves and a steady one a narrow one. It takes
the readings as independent: right for a swing faster than the reading interval, too narrow
for a slow drift, which a window's median then follows anyway.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import special, stats

CONFIDENCE = 0.95  # two-sided: a figure is decided where its interval clears its floor


@dataclass(frozen=True, slots=True)
class Interval:
    """A figure and the half-width of its two-sided interval at ``CONFIDENCE``."""

    value: float
    half: float
    se: float
    df: int

    @property
    def low(self) -> float:
        return self.value - self.half

    @property
    def high(self) -> float:
        return self.value + self.half

    def relative_se(self) -> float:
        return self.se / abs(self.value) if self.value else math.inf


def t_quantile(df: int, confidence: float = CONFIDENCE) -> float:
    """Student's t for a two-sided interval at ``confidence`` (``scipy.stats.t.ppf``'s own
    ``special.stdtrit``)."""
    return float(special.stdtrit(df, 0.5 + confidence / 2))


def mean_interval(
    value: float | None, se: float | None, blocks: int, confidence: float = CONFIDENCE
) -> Interval | None:
    """A batch-means figure's interval; None where the figure or its noise is unknown."""
    if value is None or se is None or blocks < 2 or not math.isfinite(value + se):
        return None
    df = blocks - 1
    return Interval(value, t_quantile(df, confidence) * se, se, df)


def ratio_interval(
    late: Interval | None, cold: Interval | None, confidence: float = CONFIDENCE
) -> Interval | None:
    """The interval of late/cold by the delta method, with the smaller of the two degrees
    of freedom (the more cautious quantile); None without both or with a cold of 0."""
    if late is None or cold is None or cold.value == 0:
        return None
    ratio = late.value / cold.value
    relative = math.hypot(late.relative_se(), cold.relative_se())
    se = abs(ratio) * relative
    if not math.isfinite(se):
        return None
    df = min(late.df, cold.df)
    return Interval(ratio, t_quantile(df, confidence) * se, se, df)


def scaled(interval: Interval, value: float) -> Interval:
    """The interval of ``value``, a figure proportional to ``interval``'s (a ratio with a
    known factor taken out): the same relative width."""
    factor = value / interval.value if interval.value else math.inf
    return Interval(value, abs(interval.half * factor), abs(interval.se * factor), interval.df)


def median_interval(
    values: np.ndarray, confidence: float = CONFIDENCE
) -> tuple[float, float] | None:
    """The order-statistic interval of the median of ``values`` (NaN left out): the k-th
    smallest and the k-th largest reading, k from the binomial(n, ½) quantile; None with
    fewer than 6 readings, which give no interval at 95 %."""
    finite = np.sort(values[np.isfinite(values)])
    n = finite.size
    k = int(stats.binom.ppf((1 - confidence) / 2, n, 0.5)) if n else 0
    if n < 6 or k < 1:
        return None
    return float(finite[k - 1]), float(finite[n - k])


def ratio_bounds(
    late: tuple[float, float] | None, cold: tuple[float, float] | None
) -> tuple[float, float] | None:
    """The widest late/cold ratio two intervals allow (each end against the other's far
    end): cautious, for deciding whether a loss lies beyond both levels' noise."""
    if late is None or cold is None or cold[0] <= 0:
        return None
    return late[0] / cold[1], late[1] / cold[0]
