"""The window check: has each judged signal stopped moving, and since when (rule, lines 3–9)."""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass

import numpy as np

from soak.analysis.equilibrium.levels import (
    BATCHES,
    LONG_SCALE,
    MIN_BATCH_SHARE,
    MIN_POINTS,
    Piece,
    Series,
    mean,
    pieces,
    read_noise,
    residuals,
    t_quantile,
)
from soak.analysis.equilibrium.signals import Signals
from soak.profile import Windows


@dataclass(frozen=True, slots=True)
class Drift:
    """How far one signal's level moved from window A to window B, against its tolerance.
    ``most`` is the most it can have moved at the rule's confidence, |Δ| + t·se; None where
    the windows hold too few readings to say (``note`` says why)."""

    signal: str  # "temperature", "power", "SM clock", "gemm throughput"
    unit: str  # "°C" for temperature; "%" (of B's level) for the others
    tolerance: float
    change: float | None = None  # B − A, in ``unit``
    noise: float | None = None  # standard error of ``change``
    most: float | None = None  # |change| + t·noise
    level: float | None = None  # B's level, in the signal's own unit
    # Where the signal dates the check, in half-windows from A's start: 0 (A₁'s centre), 0.5
    # (A's centre), 1 (A₂'s), 1.5 (A | B), 2, 3 (B₂'s); None where it cannot say
    settled_from: float | None = None
    note: str = ""
    flat: bool | None = None  # B's halves agree; None where it cannot say
    # The end of the last half-window whose level lies the tolerance or more from B's, in
    # half-windows from A's start: 0 where none does (rule, line 9)
    off_until: float | None = None
    # The least t·se(Δ) its batch-to-batch scatter allows on the rule's longest windows, in
    # ``unit`` (rule, line 1); None where it cannot be measured
    floor: float | None = None
    basis: bool = False  # the basis signal, which always judges (rule, line 1)

    @property
    def passed(self) -> bool:
        return self.most is not None and self.most < self.tolerance

    @property
    def undecidable(self) -> bool:
        """Its own noise reaches its tolerance even on the rule's longest windows: no level
        it could show would pass or fail the test on evidence (rule, line 1)."""
        return self.floor is not None and self.floor >= self.tolerance

    @property
    def judges(self) -> bool:
        """Whether its test counts in the check: the basis always, another signal where it
        can decide its tolerance (rule, line 1)."""
        return self.basis or not self.undecidable

    def set_aside_reason(self) -> str:
        """Why it does not judge the check (rule, line 1)."""
        return (
            f"{self.signal} cannot judge: its readings scatter so much within each 30-s batch "
            f"that even on the rule's longest windows its noise alone adds "
            f"± {self.floor or 0:.2f} {self.unit} to any change, at or beyond its tolerance "
            f"of {self.tolerance:g} {self.unit}"
        )

    @property
    def stepped(self) -> bool:
        """A → B moved by more than the tolerance with the rule's confidence, and B is flat:
        a level that changed and stays changed (rule, line 12)."""
        if self.change is None or self.most is None or not self.flat:
            return False
        least = 2 * abs(self.change) - self.most  # |Δ| − t·se
        return least > self.tolerance

    def describe(self, window_s: float) -> str:
        if self.change is None or self.noise is None:
            return f"{self.signal}: {self.note}"
        minutes = f"{window_s / 60:g}-min"
        moved = (
            f"{self.signal} moved {self.change:+.2f} {self.unit} (± {self.noise:.2f}) between "
            f"the last two {minutes} windows; tolerance {self.tolerance:g} {self.unit}"
        )
        return f"{moved}; {self.note}" if self.note else moved


@dataclass(frozen=True, slots=True)
class CheckResult:
    """One check of the rule: windows A = (t_s − 2W, t_s − W] and B = (t_s − W, t_s]."""

    t_s: float  # B's end: when the check can be made
    passed: bool
    drifts: tuple[Drift, ...]
    basis: str
    centre_s: float  # the time the check's evidence is about (rule, line 9)
    window_s: float = 300.0
    # The end of the last half-window some signal finds the tolerance or more from B's
    # level: the level was not yet the one B keeps until then; None where none is
    off_until_s: float | None = None

    def overrules(self, date_s: float) -> bool:
        """Whether this check finds a half-window lying wholly after ``date_s`` the
        tolerance or more from B's level: a date there is wrong by its own measure (rule,
        line 9)."""
        return self.off_until_s is not None and self.off_until_s - self.window_s / 2 >= date_s

    def drift(self, signal: str) -> Drift | None:
        return next((d for d in self.drifts if d.signal == signal), None)

    @property
    def judging(self) -> tuple[Drift, ...]:
        """The signals whose tests count in this check (rule, line 1)."""
        return tuple(d for d in self.drifts if d.judges)

    @property
    def set_aside(self) -> tuple[Drift, ...]:
        """The signals that could not judge this check, for their own noise (rule, line 1)."""
        return tuple(d for d in self.drifts if not d.judges)

    @property
    def dated_by(self) -> tuple[str, ...]:
        """The judging signals that set this check's date: those that settled last."""
        dates = [d.settled_from for d in self.judging if d.settled_from is not None]
        if not dates:
            return ()
        return tuple(d.signal for d in self.judging if d.settled_from == max(dates))

    @property
    def held_back_by(self) -> tuple[str, ...]:
        """The judging signals that failed this check."""
        return tuple(d.signal for d in self.judging if not d.passed)

    @property
    def reason(self) -> str:
        """Why the check failed ("" if it passed): the signals that had not stopped."""
        if self.passed:
            return ""
        if not self.drifts:
            return "no temperature, power or throughput to judge it by"
        failed = [d.describe(self.window_s) for d in self.judging if not d.passed]
        if not failed:
            return "no signal could judge it: " + "; ".join(
                d.set_aside_reason() for d in self.set_aside
            )
        return "; ".join(failed)


def _too_few(parts: list[Piece], segments: int, w: float) -> str:
    """Why A or B holds too few readings to be judged ("" where both hold enough)."""
    per_window = BATCHES * segments
    need = math.ceil(MIN_BATCH_SHARE * per_window)
    halves = (parts[:segments], parts[segments:])
    for name, half in zip(("earlier", "last"), halves, strict=True):
        readings = sum(p.readings for p in half)
        filled = sum(p.finite.size for p in half)
        if readings < MIN_POINTS or filled < need:
            return (
                f"{readings} readings in {filled} of {per_window} stretches of the {name} "
                f"{w / 60:g} min (needs {MIN_POINTS} in {need})"
            )
    return ""


def _halves(y: np.ndarray) -> tuple[float, float]:
    """The means of y's two halves, the first one the longer where y is odd (as
    ``np.array_split`` splits it)."""
    k = (y.size + 1) // 2
    return mean(y[:k]), mean(y[k:])


def _dating(
    ya: np.ndarray, yb: np.ndarray, scale: float, tolerance: float, variance: float, t_q: float
) -> tuple[float, float, bool, float, float]:
    """Where the signal dates the check (rule, line 9), where it dated it before the
    conventions below, whether B is flat, B's half-to-half step and its standard error."""
    level_b = mean(yb)
    halves = [*_halves(ya), *_halves(yb)]
    settled_from = float(len(halves) - 1)
    for k in range(len(halves) - 2, -1, -1):
        if abs(halves[k] - level_b) * scale >= tolerance:
            break
        settled_from = float(k)
    off_until = settled_from  # before the conventions below move it
    steps = [b - a for a, b in itertools.pairwise(halves)]
    b_half = yb.size // 2
    b_se = math.sqrt(variance * (1 / b_half + 1 / (yb.size - b_half)))
    b_flat = (abs(steps[-1]) + t_q * b_se) * scale < tolerance
    monotone = all(s <= 0 for s in steps) or all(s >= 0 for s in steps)
    if not b_flat:  # B still moves: its level is not the kept one; no earlier than A | B
        settled_from = max(settled_from, 1.5)
    elif settled_from <= 1 and monotone:
        settled_from = 0.5  # a monotone approach: A's centre
    return settled_from, off_until, bool(b_flat), float(steps[-1]), b_se


def _still_moving(
    w: float, unit: str, tolerance: float, step: float, se: float, t_q: float, most: float
) -> tuple[str, float]:
    """Why a check whose windows agree fails where B's halves still differ (``step`` ±
    ``se``, in the check's unit), and the most the level may have moved then."""
    note = (
        f"the last {w / 60:g} min still move: their halves differ by {step:+.2f} "
        f"{unit} (± {se:.2f}); tolerance {tolerance:g} {unit}"
    )
    return note, max(most, abs(step) + t_q * se)


def drift(
    signal: str,
    s: Series,
    t_check: float,
    windows: Windows,
    *,
    absolute_c: float | None = None,
    window_s: float | None = None,
    basis: bool = False,
    floor_factor: float = 1.0,
) -> Drift:
    """The test on one signal at one check (rule, lines 1, 4–7). With ``absolute_c`` the
    tolerance is in the signal's unit (temperature); otherwise it is
    ``eq_rel_tolerance_pct`` of window B's level and the change is in % of that level.
    ``basis``: the basis signal, which judges whatever its noise. ``floor_factor``: what
    turns its floor on these batches into its floor on the profile's (rule, line 16)."""
    w = windows.eq_window_s if window_s is None else window_s
    relative = absolute_c is None
    tolerance, unit = (windows.eq_rel_tolerance_pct, "%") if relative else (absolute_c, "°C")
    blank = Drift(signal, unit, tolerance, basis=basis)
    # Batches are eq_window_s / BATCHES long at every scale; the longer scale's windows hold
    # ``segments`` short windows' worth, each detrended on its own.
    segments = max(1, round(w / windows.eq_window_s))
    per_window = BATCHES * segments
    parts = pieces(s, t_check, w, per_window)
    note = _too_few(parts, segments, w)
    if note:
        return dataclasses.replace(blank, note=note)
    squares, df = residuals(parts)
    if df < 2:
        return dataclasses.replace(blank, note="too few batches to measure its noise")
    ya = np.concatenate([p.finite for p in parts[:segments]])
    yb = np.concatenate([p.finite for p in parts[segments:]])
    level_a, level_b = mean(ya), mean(yb)
    if relative and level_b == 0:
        return dataclasses.replace(blank, note="its level is 0, so no relative change")
    scale = 100.0 / abs(level_b) if relative else 1.0
    variance = squares / df
    t_q = t_quantile(df)
    change = (level_b - level_a) * scale
    noise = math.sqrt(variance * (1 / ya.size + 1 / yb.size)) * scale
    settled_from, off_until, b_flat, b_step, b_se = _dating(ya, yb, scale, tolerance, variance, t_q)
    most = abs(change) + t_q * noise
    if not b_flat and segments == 1 and most < tolerance:
        # B still moves: A and B agreeing says nothing (a hump: rise in A, fall in B). Only
        # the longer scale, whose windows span a fan cycle, may pass it.
        note, most = _still_moving(w, unit, tolerance, b_step * scale, b_se * scale, t_q, most)
    floor = _floor(parts, df, segments, scale * floor_factor)
    found = (change, noise, most, level_b, settled_from, note, b_flat, off_until, floor)
    return Drift(signal, unit, tolerance, *found, basis)


def stepped(
    s: Series, t_check: float, windows: Windows, *, absolute_c: float | None = None
) -> bool:
    """``drift(…).stepped`` on the profile's windows, without the rest of the test (its
    dating, its floor): what the watch asks of each signal soon after a date (rule, line
    12). The same sums in the same order as ``drift``'s."""
    w = windows.eq_window_s
    relative = absolute_c is None
    tolerance = windows.eq_rel_tolerance_pct if relative else absolute_c
    parts = pieces(s, t_check, w, BATCHES)
    if _too_few(parts, 1, w):
        return False
    squares, df = residuals(parts)
    if df < 2:
        return False
    ya = np.concatenate([parts[0].finite])
    yb = np.concatenate([parts[1].finite])
    level_a, level_b = mean(ya), mean(yb)
    if relative and level_b == 0:
        return False
    scale = 100.0 / abs(level_b) if relative else 1.0
    variance = squares / df
    t_q = t_quantile(df)
    b_first, b_second = _halves(yb)
    b_half = yb.size // 2
    b_se = math.sqrt(variance * (1 / b_half + 1 / (yb.size - b_half)))
    if not (abs(b_second - b_first) + t_q * b_se) * scale < tolerance:  # B not flat
        return False
    change = (level_b - level_a) * scale
    noise = math.sqrt(variance * (1 / ya.size + 1 / yb.size)) * scale
    most = abs(change) + t_q * noise
    return 2 * abs(change) - most > tolerance


def floor_of(
    s: Series,
    t_check: float,
    windows: Windows,
    absolute_c: float | None = None,
    floor_factor: float = 1.0,
) -> float | None:
    """The signal's floor at the check ``t_check`` (rule, line 1), without the rest of its
    test: what the watch needs of a signal that has not stepped; None where its windows
    hold too few readings to say."""
    w = windows.eq_window_s
    parts = pieces(s, t_check, w, BATCHES)
    if _too_few(parts, 1, w):
        return None
    _, df = residuals(parts)
    level_b = mean(parts[1].finite)
    if df < 2 or (absolute_c is None and level_b == 0):
        return None
    scale = 100.0 / abs(level_b) if absolute_c is None else 1.0
    return _floor(parts, df, 1, scale * floor_factor)


def _floor(parts: list[Piece], df: int, segments: int, scale: float) -> float | None:
    """The least t·se(Δ) its readings' own scatter allows on the rule's longest windows
    (``LONG_SCALE``·W, ``LONG_SCALE``·BATCHES batches each), in the check's unit: the
    margin its noise alone adds to any change it could show (rule, line 1)."""
    sigma = read_noise(parts)
    if sigma is None:
        return None
    batches = LONG_SCALE * BATCHES
    long_df = max(2, round(df * LONG_SCALE / segments))
    return t_quantile(long_df) * sigma * math.sqrt(2 / batches) * scale


def check_window(
    t_check: float,
    signals: Signals,
    windows: Windows,
    basis: str,
    window_s: float | None = None,
    floor_factor: float = 1.0,
) -> CheckResult:
    """The check of the two windows that end at ``t_check``, each ``window_s`` long
    (``eq_window_s`` unless given: the longer scale, rule line 7); ``floor_factor`` as
    ``drift``'s."""
    w = windows.eq_window_s if window_s is None else window_s
    judged = signals.judged(basis, windows, t_check - 2 * w, t_check)
    drifts = [
        drift(
            name,
            series,
            t_check,
            windows,
            absolute_c=absolute,
            window_s=w,
            basis=is_basis(name, basis),
            floor_factor=floor_factor,
        )
        for name, series, absolute in judged
    ]
    judging = [d for d in drifts if d.judges]  # rule, line 1
    passed = bool(judging) and (basis != "throughput" or bool(signals.rates))
    passed = passed and all(d.passed for d in judging)
    # The centre of the first half-window from which on every judging signal stays within
    # its tolerance of its last half-window's level (rule, line 9).
    first = max((d.settled_from for d in judging if d.settled_from is not None), default=3)
    centre = t_check - 2 * w + first * w / 2 + w / 4
    off = max((d.off_until for d in judging if d.off_until), default=None)
    off_until_s = None if off is None else t_check - 2 * w + off * w / 2
    return CheckResult(t_check, passed, tuple(drifts), basis, centre, w, off_until_s)


def is_basis(signal: str, basis: str) -> bool:
    """Whether ``signal`` is the basis: temperature or power by name, every part's
    throughput where the basis is throughput."""
    if basis == "throughput":
        return signal.endswith(" throughput")
    return signal == basis


def first_check_s(load_start_s: float, windows: Windows) -> float:
    return load_start_s + 2 * windows.eq_window_s


def shortest_confirmation_s(windows: Windows) -> float:
    """The least load after which the rule can have confirmed equilibrium."""
    return 2 * windows.eq_window_s + (windows.eq_checks - 1) * windows.eq_check_interval_s


def check_times(load_start_s: float, end_s: float, windows: Windows) -> np.ndarray:
    first = first_check_s(load_start_s, windows)
    if end_s < first:
        return np.empty(0)
    count = math.floor((end_s - first) / windows.eq_check_interval_s + 1e-9) + 1
    return first + windows.eq_check_interval_s * np.arange(count)
