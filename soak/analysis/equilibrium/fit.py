"""The exponential fit: the live view's forecast of when equilibrium comes (not the rule)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from soak.analysis.equilibrium.levels import MIN_POINTS
from soak.profile import Windows

# The shortest τ searched: a sensor refreshed every few seconds shows no faster rise.
TAU_MIN_S = 5.0
BOUND_SLACK = 1.01  # a τ within 1 % of an end of the search is at that end


@dataclass(frozen=True, slots=True)
class Fit:
    """T(t) = T∞ − ΔT·e^(−(t − t0)/τ), fitted to temperature since load start.

    ``bound`` says where the best τ lies at an end of the search, so that τ was not
    measured: "lower" where the temperature had settled before the readings could show
    its rise (τ under ``TAU_MIN_S``; T∞ is then the level it settled at), "upper" where the
    readings show no bend yet (a ramp; neither τ nor T∞ is known)."""

    t0_s: float
    t_inf_c: float
    delta_c: float
    tau_s: float
    rms_c: float
    bound: Literal["", "lower", "upper"] = ""

    @property
    def measured_tau_s(self) -> float | None:
        return None if self.bound else self.tau_s

    @property
    def measured_t_inf_c(self) -> float | None:
        return None if self.bound == "upper" else self.t_inf_c

    def predicted_check_s(self, windows: Windows) -> float:
        """The first check the model passes: when the difference of two adjacent window
        means, |ΔT|·(τ/W)·(e^(W/τ) − 1)²·e^(−(t − t0)/τ), falls under the tolerance (noise
        left out)."""
        w, tau = windows.eq_window_s, self.tau_s
        if abs(self.delta_c) <= 0 or tau <= 0 or w <= 0:
            return self.t0_s + 2 * w
        x = w / tau  # log(e^x - 1) without overflow: x + log(1 - e^-x) for a long window
        if not x > 0:  # a window too short against τ to be told apart from none
            return self.t0_s + 2 * w
        log_expm1 = math.log(math.expm1(x)) if x < 30 else x + math.log1p(-math.exp(-x))
        log_change = math.log(abs(self.delta_c)) + math.log(tau / w) + 2 * log_expm1
        settle = tau * (log_change - math.log(windows.eq_temp_tolerance_c))
        return self.t0_s + max(settle, 2 * w)


def fit_exponential(t: np.ndarray, y: np.ndarray, t0: float) -> Fit | None:
    """Fit T∞ − ΔT·e^(−(t−t0)/τ) by a search over τ with T∞ and ΔT linear at each τ."""
    mask = np.isfinite(y) & (t >= t0)
    t, y = t[mask] - t0, y[mask]
    if t.size < MIN_POINTS or np.ptp(t) <= 0:
        return None
    if t.size > 2000:  # a fit needs shape, not every tick
        idx = np.linspace(0, t.size - 1, 2000).astype(int)
        t, y = t[idx], y[idx]
    span = float(np.ptp(t))
    taus = np.geomspace(TAU_MIN_S, max(10 * span, 2 * TAU_MIN_S), 48)
    errors = _grid_sse(t, y, taus)
    best = int(np.argmin(errors))
    lo = math.log(taus[max(best - 1, 0)])
    hi = math.log(taus[min(best + 1, len(taus) - 1)])
    y_mean = y.sum() / y.size
    at = (-t, y_mean, y - y_mean)  # what every τ shares, computed once
    for _ in range(30):  # golden-section refinement in log τ
        a = hi - 0.618 * (hi - lo)
        b = lo + 0.618 * (hi - lo)
        if _sse(*at, math.exp(a))[0] < _sse(*at, math.exp(b))[0]:
            hi = b
        else:
            lo = a
    tau = math.exp((lo + hi) / 2)
    err, t_inf, delta = _sse(*at, tau)
    bound: Literal["", "lower", "upper"] = ""
    if best == 0 and tau <= taus[0] * BOUND_SLACK:
        bound = "lower"
    elif best == len(taus) - 1 and tau >= taus[-1] / BOUND_SLACK:
        bound = "upper"
    return Fit(t0, t_inf, delta, tau, math.sqrt(err / t.size), bound)


def _grid_sse(t: np.ndarray, y: np.ndarray, taus: np.ndarray) -> np.ndarray:
    """``_sse``'s squared residuals at every τ of ``taus`` at once."""
    f = -np.exp(-t / taus[:, None])
    fc = f - f.mean(axis=1, keepdims=True)
    yc = y - y.mean()
    sxx = (fc * fc).sum(axis=1)
    slope = (fc @ yc) / np.where(sxx == 0, 1.0, sxx)
    resid = yc - slope[:, None] * fc
    return (resid * resid).sum(axis=1)


def _sse(
    minus_t: np.ndarray, y_mean: float, yc: np.ndarray, tau: float
) -> tuple[float, float, float]:
    """The least-squares fit of y = T∞ − ΔT·e^(−t/τ) at one τ (given −t, ȳ and y − ȳ): its
    squared residuals, T∞ and ΔT. Linear in T∞ and ΔT: a centred regression of y on
    −e^(−t/τ) (where that is the same at every t, ΔT says nothing and T∞ is the mean)."""
    f = -np.exp(minus_t / tau)
    f_mean = f.sum() / f.size
    fc = f - f_mean
    sxx = float(np.dot(fc, fc))
    slope = float(np.dot(fc, yc)) / sxx if sxx else 0.0
    resid = yc - slope * fc
    return float(np.dot(resid, resid)), float(y_mean - slope * f_mean), slope


class CoarseHistory:
    """Temperature since load start, averaged into bins that widen as the run grows, so a
    fit over hours of data costs the same as over minutes."""

    def __init__(self, bin_s: float = 5.0, max_bins: int = 1024) -> None:
        self.bin_s = bin_s
        self.max_bins = max_bins
        self._bins: list[list[float]] = []  # [t_sum, y_sum, n]
        self._origin: float | None = None

    def add(self, t: float, y: float) -> None:
        if self._origin is None:
            self._origin = t
        index = int((t - self._origin) // self.bin_s)
        while index >= len(self._bins):
            self._bins.append([0.0, 0.0, 0.0])
        b = self._bins[index]
        b[0] += t
        b[1] += y
        b[2] += 1
        if len(self._bins) > self.max_bins:
            self._merge()

    def add_many(self, t: np.ndarray, y: np.ndarray) -> None:
        """``add`` of each (t, y) in turn, times in order: the bins' sums the same, each
        summed in the same order (``np.cumsum`` along a row is sequential; a 0.0 pad adds
        nothing), without a call per reading. Where the block would widen the bins, one by
        one."""
        if not t.size:
            return
        if self._origin is None:
            self._origin = float(t[0])
        index = ((t - self._origin) // self.bin_s).astype(np.int64)
        first, last = int(index[0]), int(index[-1])
        if last >= self.max_bins or first < len(self._bins) - 1 or first < 0:
            for ti, yi in zip(t.tolist(), y.tolist(), strict=True):
                self.add(ti, yi)
            return
        while last >= len(self._bins):
            self._bins.append([0.0, 0.0, 0.0])
        rows = index - first
        counts = np.bincount(rows)
        width = int(counts.max()) + 1
        starts = np.cumsum(counts) - counts
        column = np.arange(index.size) - starts[rows] + 1
        bins = self._bins[first : last + 1]
        for k, values in ((0, t), (1, y)):
            grid = np.zeros((counts.size, width))
            grid[:, 0] = [b[k] for b in bins]
            grid[rows, column] = values
            sums = np.cumsum(grid, axis=1)[:, -1].tolist()
            for b, total in zip(bins, sums, strict=True):
                b[k] = total
        for b, n in zip(bins, counts.tolist(), strict=True):
            b[2] += n

    def _merge(self) -> None:
        merged = []
        for i in range(0, len(self._bins), 2):
            pair = self._bins[i : i + 2]
            merged.append(
                [sum(b[0] for b in pair), sum(b[1] for b in pair), sum(b[2] for b in pair)]
            )
        self._bins = merged
        self.bin_s *= 2

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        full = [b for b in self._bins if b[2] > 0]
        if not full:
            return np.empty(0), np.empty(0)
        data = np.array(full)
        return data[:, 0] / data[:, 2], data[:, 1] / data[:, 2]
