"""Thermal equilibrium: one rule, used online while running and offline on the store.

The rule (DESIGN.md): over a trailing window (default 5 min), the temperature slope is under
0.1 °C/min and the relative slopes of SM clock and of every workload part's throughput are
under 0.2 %/min, for 3 consecutive checks. Requiring clocks and throughput to be flat as well
as temperature keeps a plateau that throttling makes (temperature pinned at a limit while the
clocks slide, or a clock step that bends a rising temperature flat for a while) from passing
for equilibrium on its own. Where temperature cannot be read, power takes its place; where
neither can, clock and throughput decide alone. The basis is recorded.

A least-squares slope over a window measures the slope at the window's centre (exactly so
for a quadratic), so the equilibrium time is the centre of the first of the passing windows:
the time the evidence is about, not the time the rule could confirm it, which is half a
window and the further checks later (``Equilibrium.confirmed_s``). Dating it at the window's
end would put it minutes after the device settled (bench/verdict_accuracy.py measures both
against the simulator's truth).

Checks happen on a fixed schedule from the device's load start (``load_start + window +
k * interval``) and look only at the window's data, so that the online detector and the
offline pass over the store make the same checks and find the same time
(``EquilibriumRule`` is that shared part).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from soak.config import Windows

MIN_POINTS = 10  # fewer points in a window than this: the check cannot pass
MIN_COVERAGE = 0.8  # share of the window the points must span


@dataclass(frozen=True, slots=True)
class Series:
    """Samples of one quantity: times and values (NaN where unreadable)."""

    t: np.ndarray
    y: np.ndarray

    def window(self, start: float, end: float) -> Series:
        lo, hi = np.searchsorted(self.t, [start, end], side="right")
        return Series(self.t[lo:hi], self.y[lo:hi])


@dataclass(frozen=True, slots=True)
class CheckResult:
    """One check of the rule: the window ``(t_s - eq_window_s, t_s]`` and its slopes."""

    t_s: float  # the window's end: when the check can be made
    passed: bool
    temp_slope_c_per_min: float | None
    power_rel_slope_pct_per_min: float | None
    clock_rel_slope_pct_per_min: float | None
    throughput_rel_slope_pct_per_min: dict[str, float | None]
    basis: str
    centre_s: float = math.nan  # the time the window's slopes describe


@dataclass(frozen=True, slots=True)
class Fit:
    """T(t) = T∞ − ΔT·e^(−(t − t0)/τ), fitted to temperature since load start."""

    t0_s: float
    t_inf_c: float
    delta_c: float
    tau_s: float
    rms_c: float

    def predicted_equilibrium_s(self, windows: Windows) -> float:
        """When the model's slope falls under the temperature threshold: the time the rule
        will date equilibrium at (a window's centre, where its slope is measured)."""
        threshold = windows.eq_temp_slope_c_per_min / 60.0
        rate0 = abs(self.delta_c) / self.tau_s
        settle = self.tau_s * math.log(rate0 / threshold) if rate0 > threshold else 0.0
        return self.t0_s + settle


def slope_per_min(s: Series) -> float | None:
    """Least-squares slope in units per minute over finite points, or None if too few."""
    mask = np.isfinite(s.y)
    if mask.sum() < MIN_POINTS:
        return None
    t, y = s.t[mask], s.y[mask]
    tc = t - t.mean()
    denom = float(np.dot(tc, tc))
    if denom <= 0:
        return None
    return float(np.dot(tc, y - y.mean()) / denom) * 60.0


def rel_slope_pct_per_min(s: Series) -> float | None:
    slope = slope_per_min(s)
    if slope is None:
        return None
    level = float(np.nanmedian(s.y))
    if not level:
        return None
    return 100.0 * slope / abs(level)


def _covers(s: Series, start: float, end: float) -> bool:
    finite = s.t[np.isfinite(s.y)]
    if finite.size < MIN_POINTS:
        return False
    return (finite[-1] - finite[0]) >= MIN_COVERAGE * (end - start)


def choose_basis(temp: Series, power: Series, previous: str | None = None) -> str:
    """Temperature where it can be read, else power, else throughput alone. A basis once
    chosen is only ever upgraded (throughput to power or temperature), never dropped: a
    sensor that stops answering then blocks the rule instead of loosening it."""
    if previous == "temperature":
        return previous
    if np.isfinite(temp.y).sum() >= MIN_POINTS:
        return "temperature"
    if previous == "power" or np.isfinite(power.y).sum() >= MIN_POINTS:
        return "power"
    return "throughput"


def check_window(
    t_check: float,
    temp: Series,
    power: Series,
    clock: Series,
    rates: Mapping[str, Series],
    windows: Windows,
    basis: str,
) -> CheckResult:
    """Apply the equilibrium rule to the trailing window that ends at ``t_check``."""
    start = t_check - windows.eq_window_s
    w_temp, w_power, w_clock = (s.window(start, t_check) for s in (temp, power, clock))
    w_rates = {part: s.window(start, t_check) for part, s in rates.items()}

    temp_slope = slope_per_min(w_temp)
    power_slope = rel_slope_pct_per_min(w_power)
    clock_slope = rel_slope_pct_per_min(w_clock)
    rate_slopes = {part: rel_slope_pct_per_min(s) for part, s in w_rates.items()}

    def flat(value: float | None, limit: float) -> bool:
        return value is not None and abs(value) < limit

    rel = windows.eq_rel_slope_pct_per_min
    ok = bool(w_rates) and all(
        _covers(s, start, t_check) and flat(rate_slopes[p], rel) for p, s in w_rates.items()
    )
    if np.isfinite(w_clock.y).any():
        ok = ok and _covers(w_clock, start, t_check) and flat(clock_slope, rel)
    if basis == "temperature":
        ok = ok and _covers(w_temp, start, t_check)
        ok = ok and flat(temp_slope, windows.eq_temp_slope_c_per_min)
    elif basis == "power":
        ok = ok and _covers(w_power, start, t_check)
        ok = ok and flat(power_slope, windows.eq_power_rel_slope_pct_per_min)
    centre = t_check - windows.eq_window_s / 2
    return CheckResult(
        t_check, ok, temp_slope, power_slope, clock_slope, rate_slopes, basis, centre
    )


def check_times(load_start_s: float, end_s: float, windows: Windows) -> np.ndarray:
    first = load_start_s + windows.eq_window_s
    if end_s < first:
        return np.empty(0)
    count = math.floor((end_s - first) / windows.eq_check_interval_s + 1e-9) + 1
    return first + windows.eq_check_interval_s * np.arange(count)


class EquilibriumRule:
    """The rule's state from one check to the next: the basis and the streak of passing
    checks. The online detector and the offline pass both feed it, check by check."""

    def __init__(self, windows: Windows) -> None:
        self.windows = windows
        self.basis: str | None = None
        self.streak: list[CheckResult] = []
        self.last: CheckResult | None = None
        self.time_s: float | None = None  # the first passing window's centre
        self.confirmed_s: float | None = None  # the check that completed the streak

    @property
    def reached(self) -> bool:
        return self.time_s is not None

    def check(
        self,
        t_check: float,
        temp: Series,
        power: Series,
        clock: Series,
        rates: Mapping[str, Series],
    ) -> CheckResult:
        """Make the check at ``t_check`` on series holding at least its window."""
        start = t_check - self.windows.eq_window_s
        basis = choose_basis(temp.window(start, t_check), power.window(start, t_check), self.basis)
        if basis != self.basis:  # a better sensor came: its checks start their own streak
            self.basis, self.streak = basis, []
        result = check_window(t_check, temp, power, clock, rates, self.windows, basis)
        self.last = result
        self.streak = [*self.streak, result] if result.passed else []
        if self.time_s is None and len(self.streak) >= self.windows.eq_checks:
            self.time_s = self.streak[0].centre_s
            self.confirmed_s = result.t_s
        return result


@dataclass(frozen=True, slots=True)
class Equilibrium:
    reached: bool
    time_s: float | None  # centre of the first of the consecutive passing windows
    basis: str
    fit: Fit | None
    last_check: CheckResult | None
    confirmed_s: float | None = None  # when the rule had its consecutive checks


def detect(
    load_start_s: float,
    end_s: float,
    temp: Series,
    power: Series,
    clock: Series,
    rates: Mapping[str, Series],
    windows: Windows,
) -> Equilibrium:
    """The offline pass: the same checks the online detector makes, over stored series."""
    rule = EquilibriumRule(windows)
    for t_check in check_times(load_start_s, end_s, windows):
        rule.check(float(t_check), temp, power, clock, rates)
        if rule.reached:
            break
    basis = rule.basis or choose_basis(temp, power)
    since = temp.window(load_start_s, end_s)
    fit = fit_exponential(since.t, since.y, load_start_s) if basis == "temperature" else None
    return Equilibrium(rule.reached, rule.time_s, basis, fit, rule.last, rule.confirmed_s)


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

    def sse(tau: float) -> tuple[float, float, float]:
        basis = np.column_stack([np.ones_like(t), -np.exp(-t / tau)])
        coef, *_ = np.linalg.lstsq(basis, y, rcond=None)
        resid = y - basis @ coef
        return float(resid @ resid), float(coef[0]), float(coef[1])

    taus = np.geomspace(5.0, max(10 * span, 10.0), 48)
    errors = [sse(tau)[0] for tau in taus]
    best = int(np.argmin(errors))
    lo = math.log(taus[max(best - 1, 0)])
    hi = math.log(taus[min(best + 1, len(taus) - 1)])
    for _ in range(30):  # golden-section refinement in log τ
        a = hi - 0.618 * (hi - lo)
        b = lo + 0.618 * (hi - lo)
        if sse(math.exp(a))[0] < sse(math.exp(b))[0]:
            hi = b
        else:
            lo = a
    tau = math.exp((lo + hi) / 2)
    err, t_inf, delta = sse(tau)
    return Fit(t0, t_inf, delta, tau, math.sqrt(err / t.size))


class OnlineDetector:
    """Per-device equilibrium detector fed every tick; memory stays bounded (the trailing
    window plus a coarse history for the fit), so a 24-hour soak does not grow it."""

    def __init__(self, windows: Windows, fit_every_s: float = 60.0, lag_s: float = 5.0) -> None:
        self.windows = windows
        self.load_start_s: float | None = None
        self.fit: Fit | None = None
        self.rule = EquilibriumRule(windows)
        # A check runs lag_s after its time, so that work finished before it but delivered
        # a little later by a worker is in, as it is in the offline pass.
        self._lag_s = lag_s
        self._keep_s = windows.eq_window_s + 2 * windows.eq_check_interval_s + lag_s
        self._tele: deque[tuple[float, float, float, float]] = deque()
        self._rates: dict[str, deque[tuple[float, float]]] = {}
        self._history = _CoarseHistory()
        self._next_check: float | None = None
        self._fit_every_s = fit_every_s
        self._next_fit = 0.0

    @property
    def equilibrium_s(self) -> float | None:
        """The equilibrium time, once the rule has confirmed it (None before)."""
        return self.rule.time_s

    @property
    def confirmed_s(self) -> float | None:
        return self.rule.confirmed_s

    @property
    def basis(self) -> str | None:
        return self.rule.basis

    @property
    def last_check(self) -> CheckResult | None:
        return self.rule.last

    @property
    def reached(self) -> bool:
        return self.rule.reached

    def start(self, load_start_s: float) -> None:
        self.load_start_s = load_start_s
        self._next_check = load_start_s + self.windows.eq_window_s

    def add_telemetry(
        self, t_s: float, temp_c: float | None, power_w: float | None, sm_clock_mhz: float | None
    ) -> None:
        nan = math.nan
        row = (
            t_s,
            nan if temp_c is None else temp_c,
            nan if power_w is None else power_w,
            nan if sm_clock_mhz is None else sm_clock_mhz,
        )
        self._tele.append(row)
        if self.load_start_s is not None and t_s >= self.load_start_s and temp_c is not None:
            self._history.add(t_s, temp_c)

    def add_rate(self, part: str, t_mid_s: float, rate: float) -> None:
        self._rates.setdefault(part, deque()).append((t_mid_s, rate))

    def update(self, now_s: float) -> CheckResult | None:
        """Run every check whose time has passed; returns the latest one made."""
        self._trim(now_s)
        made = None
        while (
            not self.reached
            and self._next_check is not None
            and now_s >= self._next_check + self._lag_s
        ):
            made = self._check(self._next_check)
            self._next_check += self.windows.eq_check_interval_s
        if not self.reached and now_s >= self._next_fit:
            self._next_fit = now_s + self._fit_every_s
            if self.load_start_s is not None:
                t, y = self._history.arrays()
                self.fit = fit_exponential(t, y, self.load_start_s)
        return made

    def eta_s(self, now_s: float) -> float | None:
        """Predicted seconds until the rule confirms equilibrium, from the fit; 0 once it
        has. Confirmation comes half a window after the dated time, plus the further
        checks, plus the lag."""
        if self.reached:
            return 0.0
        if self.fit is None:
            return None
        w = self.windows
        after = w.eq_window_s / 2 + (w.eq_checks - 1) * w.eq_check_interval_s + self._lag_s
        predicted = self.fit.predicted_equilibrium_s(w) + after
        # Never promise sooner than the checks still needed can be made.
        needed = w.eq_checks - 1 - len(self.rule.streak)
        earliest = (self._next_check or now_s) + needed * w.eq_check_interval_s + self._lag_s
        return max(predicted, earliest, now_s) - now_s

    def _check(self, t_check: float) -> CheckResult:
        tele = np.array(self._tele, dtype=float).reshape(-1, 4)
        t = tele[:, 0]
        temp, power, clock = (Series(t, tele[:, i]) for i in (1, 2, 3))
        rates = {
            part: Series(*np.array(q, dtype=float).reshape(-1, 2).T)
            for part, q in self._rates.items()
        }
        return self.rule.check(t_check, temp, power, clock, rates)

    def _trim(self, now_s: float) -> None:
        horizon = now_s - self._keep_s
        while self._tele and self._tele[0][0] < horizon:
            self._tele.popleft()
        for q in self._rates.values():
            while q and q[0][0] < horizon:
                q.popleft()


class _CoarseHistory:
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
