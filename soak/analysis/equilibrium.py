"""Thermal equilibrium: one rule, used online while running and offline on the store.

**The rule.** Every ``eq_check_interval_s`` from the device's load start, the last
``2 · eq_window_s`` of each signal are cut into two adjacent windows, A (older) and B (newer),
and the signal's *level* in each is compared. A signal has stopped moving when, with 95 %
one-sided confidence, its level moved less than its tolerance from A to B:

    |Δ| + t₀.₉₅(df) · se(Δ) < tolerance,    Δ = level(B) − level(A)

(the equivalence half of a two one-sided tests procedure: the burden of proof lies on
"settled", so noise can only make equilibrium later, never earlier; a false PASS is the worst
bug soak can have). On the 5-min scale the newer window must also be flat on its own: its
halves B₁, B₂ agree by the same test (``|B₂ − B₁| + t·se < tolerance``, "**B**" below).
The device is at equilibrium once its basis signal — temperature; power
where temperature cannot be read — and every measured SM clock and throughput part pass
together, at ``eq_checks`` of the checks made within one window's time. Requiring clocks and
throughput to have stopped as well keeps a plateau that throttling makes (temperature pinned
at a limit while the clocks slide) from passing for equilibrium. Where no throughput is
measured (an imported telemetry-only trace), the basis and the clocks decide alone.

**Why levels of windows and not a slope.** Real sensors defeat slopes: a core temperature
quantised to 1 °C and refreshed every 5 s makes one step inside a 5-min window read as
0.2 °C/min; spikes of 10–30 % in per-interval throughput make a least-squares slope wander;
half a fan cycle looks like a fast drift. The mean of a window counts a step only for the
share of the window after it, averages spikes down, and a periodic fan cycle of amplitude
a and period P moves a window's mean by at most a·P/(π·W): the difference of two adjacent
window means swings through zero every half period, so cycling passes at some phase of every
cycle and counts as settled at its mean (for the worst case P = 2W, a = 1 °C, about a third
of each cycle passes). Overshoot then settle needs nothing special: the level keeps moving,
down, until it stops.

Checks 30 s apart share most of their data, so one passing check can be luck at the margin;
asking for ``eq_checks`` passes guards against that. They need not be consecutive, only
within one window's time: a fan cycle swings the difference of window means through zero
twice a cycle and passes only near those phases, around the level it keeps, which is the
settled one.

**Level and noise, by batch means.** Each window is cut into ``BATCHES`` = 10 batches. A
batch's level is its median, for every signal (a median ignores heavy-tailed jitter and
spikes; for whole-degree temperature readings a mean would resolve below one step, but it
also follows a fan's short swings: measured on the simulator's healthy servers it dated 15 of
1,360 devices early and left 18 unsettled in 40 minutes, against 9 and 0 with the median;
docs/equilibrium.md). Batches much longer than the noise's correlation time (5-s
sensor refresh, 1–2-s work intervals; a batch is 30 s) have nearly independent levels, so
their scatter measures the noise of a window's level with the autocorrelation included; 10
batches is the usual choice (Schmeiser 1982: 10–30; fewer leave too few degrees of freedom,
more make batches short enough to be correlated). Each window's batch levels are detrended by
their own least-squares line, so that a trend is not counted as noise; the pooled residual
variance has ``n_A + n_B − 4`` degrees of freedom, and Student's t for those degrees covers
the few batches. A window needs ``MIN_POINTS`` readings and readings in ``MIN_BATCH_SHARE`` of
its batches, or the check cannot pass.

**Tolerances** are what "settled" means, not tuning: 1 °C (``eq_temp_tolerance_c``), the
resolution of GPU core sensors (NVML reports whole degrees; a change under one step is one the
sensor cannot show, and a constant reading in both windows passes, as it must) and the
distance the simulator's truth and the accuracy contract allow; 1 % for power, SM clock and
throughput (``eq_rel_tolerance_pct``), the contract's own precision for throughput (DESIGN.md,
"Windows and equilibrium").

**Dating.** The contract's reference for "settled" is the centre of the first window whose
mean stays within the tolerance of the level the device keeps. A passing check shows that A's
level is within the tolerance of B's; it does not show that every part of A is, nor that B
is the kept level. So each signal is dated on the four half-windows of the check (A's halves
A₁ A₂, B's halves B₁ B₂), by three statements, each one a fact about the data or an assumption
the data can refute:

- *B stands for the kept level only if B itself is flat*: its halves agree within the
  tolerance, by the same test (``|B₂ − B₁| + t·se < tolerance``). Where B still moves (an
  overshoot turning back, the top of a fan cycle, the tail of a slow rise), nothing is dated
  before the boundary of A and B (``t_check − W``); for a first-order approach
  T∞ − ΔT·e^(−t/τ), whose window means differ by Δ = d_b·(τ/W)·4·sinh²(W/2τ) where d_b is the
  distance at the boundary, d_b = Δ·W / (4τ·sinh²(W/2τ)) is under Δ, so under the
  tolerance, for any τ up to about 1.06·W (5.3 min for 5-min windows; GPUs and the simulator
  settle with τ of 1–4 min).
- *Where B is flat, the date is the centre of the first half-window from which on every
  half-window's level is within the tolerance of B's level* (A₁'s centre ``t_check − 1.75·W``
  down to B₂'s ``t_check − 0.25·W``): the reference's own definition, on the check's data.
- *Where the four half-window levels are also monotone* (each step the same sign: a plain
  approach, no cycle or overshoot turning inside the 10 minutes) and the first one within the
  tolerance is A₁ or A₂, the date is A's centre (``t_check − 1.5·W``): for a monotone convex
  approach the value at A's centre is no farther from the kept level than A's mean, which the
  passing check put within the tolerance of B.

**B.** Two windows can agree while neither is settled: a hump (the reading rises onto a
plateau in A and starts to fall off it in B, as when the fans' late catch-up and their hunt
in opposite phase hold the simulator's die flat 2 °C above its settling point for six
minutes) gives A and B the same mean. B's halves then disagree, and a check on the 5-min
scale whose B still moves does not pass (before issue 13's second pass such a check passed
and was dated at A | B: the simulator's H100, seed 1, at 461 s with the die 2.5 °C above
where it settles; V100 .42 GPU2 and GPU3 at −1.9 and −1.7 min of the reference, now +1.3
and +0.6). A fan cycle as wide as the tolerance (period 2W) never has both A ≈ B and B flat
on the 5-min scale (A − B ∝ cos φ, B₂ − B₁ ∝ sin φ, each up to 4a/π), so it passes on the
10-min scale ("Cycles"), after 20 min of load, dated no earlier than that scale's A | B.

The device's date is the latest of its signals' dates. Why not A's centre whenever B is flat:
a fan cycle of period near 2W (the simulator's fans hunt ±1 °C over 10 min) lowers one
window's mean and raises the next one's by up to 4a/π together; on a die still settling from
an overshoot it can cancel a real 1.2 °C fall from A to B for a few minutes, so that A and B
agree and B's halves agree while the die at A's centre is 1.5 °C from where it settles. The
half-window levels cancel less (the cycle turns inside A, so A's halves stand off B's level
where A's mean does not), and the first of them within the tolerance of B is dated instead.
A hunt that rises exactly as the die falls for a whole half period shows as a flat reading
for ten minutes and defeats every rule that looks at ten minutes (docs/equilibrium.md gives
the case and the figures).
The time is the one the evidence is about, not the time the rule could confirm it
(``Equilibrium.confirmed_s``, at its last needed pass).

**Cycles longer than the windows can average.** A device held at its thermal limit by the
governor has a flat temperature and a clock (and throughput) that follows every change of
cooling: the fans' hunt becomes a clock cycle of several % around a level that no longer
moves. Two 5-min windows see half cycles and their levels differ by up to 4a/π; the 1 %
tolerance is passed only at the instants the difference crosses zero, one check in each half
cycle, never ``eq_checks`` within a window's time, so the device is never confirmed. That is a
fault of the window length, not of the tolerance (1 % stays the contract's precision for
throughput): batch means need batches longer than the data's correlation, and the standard
remedy when they are not is longer batches. So a check that fails on the 5-min windows is made
again on two ``LONG_SCALE`` × W = 10-min windows, (t − 4W, t − 2W] and (t − 2W, t], once the
load is that long; their batches are still 30 s, and their noise is measured about each 5-min
part's own line, as on the short scale (a cycle's slow swing is a trend there, not noise). It
passes where the longer windows span whole cycles, and counts like any pass; it is dated the
same way at its own scale (no earlier than t − 2W where its newer window moves). For a drift
it is stricter than the short scale (a steady drift moves a 10-min level twice as far), so it
adds nothing for a device still warming.

**Withdrawal.** A plateau held flat for minutes (the fans' late catch-up and their hunt in
opposite phase hold the simulator's A100 2 °C above where it settles for six minutes and
more) passes every test above while it lasts: nothing in ten minutes of readings tells it
from equilibrium. What refutes it is what comes after. So the rule keeps watching once it
has dated equilibrium: at every check whose two ``LONG_SCALE`` windows (10 min each, batch
levels as above) both lie after the date, it compares their levels, and where one signal's
moved by more than its tolerance with the rule's confidence (``|Δ| − t₀.₉₅·se >
tolerance``, the other half of the two one-sided tests: the burden of proof now lies on
"moved", so noise cannot withdraw a date), the date is withdrawn (``Equilibrium.withdrawn``
says which, when and why) and the rule starts again, with the checks of the last window's
time made again (``eq_checks − 1`` of them, on data the online detector still holds), so
that a device settled since is found again at once. Adjacent 10-min windows average a fan
cycle of ~10 min out, so a hunt does not withdraw a date, and they see movement, not
accumulated drift: a room that warms the die 1.2 °C over 90 minutes moves a 10-min level
0.13 °C (a first version compared every later level with the one after the date and
withdrew a 2-hour soak's date for exactly that).

A withdrawal's evidence also says where the kept level is not: before the window whose level
refuted the date (the newer of the two 10-min windows; for a plateau that ends, below, the
newer window of the step). So no new date comes before that window's start (``floor_s``):
a passing check dated earlier does not count. Without it, a 10-min check made again at the
withdrawal, its windows straddling the fall, dated a 13-min plateau again on the plateau
(750 s, 2 °C above where the reading settles) until the adjacent windows withdrew that too.

**A plateau that ends.** A shorter plateau defeats adjacent 10-min windows: the simulator's
A100 (seed 6, GPU 5) reads flat for five minutes while its die, 1.2 °C outside the band its
fans' hunt sweeps, falls behind the hunt's rise; dated at 431 s, it then steps down 2 °C in
four minutes and hunts about its kept level, and the 10-min window holding the step and the
one after differ by only about 1 °C. So the date also answers for the level it was given
at: at the first watch, each judged signal's level over the 5 min from the date is kept
(``anchor``; batch levels as above): the date says that from it on the signal is within the
tolerance of where it stays. A later level that lies the tolerance or more from it refutes
the date, under two conditions that keep the test to plateaus that end:

- *The signal has stepped soon after the date*: at a check whose two 5-min windows both lie
  after the date, and whose newer window starts within 10 min of the end of the 5 min from
  the date (the same bound as the later level's, below), the level moved from A to B by
  more than the tolerance with confidence, and B is flat (its halves agree, as in "B"): a
  level that changed and stays changed. A slow wander does not step (the V100s of
  ``real-traces``, whose readings sink 1–1.5 °C over the quarter of an hour after the date,
  within the 1.5 °C the issue's reference allows for sensors that step by 1 °C); neither
  does a hunt of amplitude a whose 4a/π stays within the tolerance and its noise. A hunt
  whose 4a/π exceeds the tolerance does step, a half period at a time; the bound keeps a
  step seen 20 min after the date, which is movement (the adjacent windows' to judge),
  from reopening the date's level.
- *The later level is a 10-min one*, so that a fan cycle is averaged out of it (the 5 min
  from the date may hold a cycle's crest: up to 2a/π off the cycle's mean, 0.55 °C for the
  simulator's 0.87 °C hunt), and *its window starts within 10 min of the end of the 5 min
  from the date* (``LONG_SCALE`` windows): the test refutes the date's own level; what
  comes later is movement, which the adjacent windows judge, and comparing it with the
  date's level would withdraw a long soak's date for the room's drift. Measured on the
  simulator's healthy servers (1,360 devices, 40 min), a first version of this test with
  the comparison running on withdrew 111 dates and left the latest 971 s after the truth,
  against 93 and 506 s with the bound.

Why the estimate decides, with no confidence margin either way, where every other test of
the rule asks for 95 %: the step is the evidence, and it is shown with the burden on
"moved" (noise cannot make one). Once the level has changed by more than the tolerance and
stays changed, what is left to say is on which side of the tolerance the date's level lies
from the later one, and the estimate is the best answer: a margin towards "moved" keeps
dates whose level is the tolerance away and cannot be shown to be more (the simulator's
MI300X, seed 22, GPU 3: its fans' rise holds the reading at 67 °C for ten minutes while the
die falls, then it steps down 1.5 °C; the 5 min from its date lie 1.0–1.1 °C (± 0.12) from
every later 10-min level, and the date, 1.2 °C outside the band its hunt sweeps, stood); a
margin towards "settled" withdraws the correct dates of devices whose hunt steps (measured
in docs/equilibrium.md, sixth pass). A withdrawal only makes a date later, never a PASS.

Why the 5 min from the date and not the 5 min around it: a date at the top of a rise (the
simulator's H100, seed 16, GPU 3 under GEMM, dated at 311 s, 1.7 °C outside its band) has
the rise in the 5 min before it, which pulls that level down towards the one the reading
settles at, and the test missed it; the 5 min from the date are what the date vouches for.

A run that stops within 15 min of its date (``--until-steady`` stops 10 min after it)
keeps its date: online and offline see the same data.

Checks happen on a fixed schedule from the device's load start (``load_start + 2·window +
k·interval``) and look only at their windows' data, so that the online detector and the
offline pass over the store make the same checks and find the same time
(``EquilibriumRule`` is that shared part). A load shorter than the first confirmation
(``2·window + (eq_checks − 1)·interval``) reports "not reached" with that reason rather
than a time it could not confirm.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache

import numpy as np
from scipy import stats

from soak.config import Windows

MIN_POINTS = 10  # fewer readings in a window than this: the check cannot pass
BATCHES = 10  # batches per window (batch means; see the module docstring)
MIN_BATCH_SHARE = 0.8  # share of a window's batches that must hold a reading
CONFIDENCE = 0.95  # one-sided, of "moved less than the tolerance"
LONG_SCALE = 2  # the longer windows' length, in eq_window_s (the docstring's "Cycles")


@dataclass(frozen=True, slots=True)
class Series:
    """Samples of one quantity: times and values (NaN where unreadable)."""

    t: np.ndarray
    y: np.ndarray

    def window(self, start: float, end: float) -> Series:
        lo, hi = np.searchsorted(self.t, [start, end], side="right")
        return Series(self.t[lo:hi], self.y[lo:hi])


@dataclass(frozen=True, slots=True)
class Drift:
    """How far one signal's level moved from window A to window B, against its tolerance.
    ``bound`` is the most it can have moved at the rule's confidence; None where the windows
    hold too few readings to say (``note`` says why)."""

    signal: str  # "temperature", "power", "SM clock", "gemm throughput"
    unit: str  # "°C" for temperature; "%" (of B's level) for the others
    tolerance: float
    change: float | None = None  # B − A, in ``unit``
    noise: float | None = None  # standard error of ``change``
    bound: float | None = None  # |change| + t·noise
    level: float | None = None  # B's level, in the signal's own unit
    # Where the signal dates the check, in half-windows from A's start: 0 (A₁'s centre), 0.5
    # (A's centre), 1 (A₂'s), 1.5 (A | B), 2, 3 (B₂'s); None where it cannot say
    settled_from: float | None = None
    note: str = ""
    flat: bool | None = None  # B's halves agree (docstring, "B"); None where it cannot say

    @property
    def passed(self) -> bool:
        return self.bound is not None and self.bound < self.tolerance

    @property
    def stepped(self) -> bool:
        """A → B moved by more than the tolerance with the rule's confidence, and B is flat:
        a level that changed and stays changed (docstring, "Withdrawal")."""
        if self.change is None or self.bound is None or not self.flat:
            return False
        least = 2 * abs(self.change) - self.bound  # |Δ| − t·se
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
    centre_s: float  # the time the check's evidence is about (module docstring, "Dating")
    window_s: float = 300.0

    def drift(self, signal: str) -> Drift | None:
        return next((d for d in self.drifts if d.signal == signal), None)

    @property
    def reason(self) -> str:
        """Why the check failed ("" if it passed): the signals that had not stopped."""
        if self.passed:
            return ""
        if not self.drifts:
            return "no temperature, power or throughput to judge it by"
        return "; ".join(d.describe(self.window_s) for d in self.drifts if not d.passed)


@dataclass(frozen=True, slots=True)
class Fit:
    """T(t) = T∞ − ΔT·e^(−(t − t0)/τ), fitted to temperature since load start."""

    t0_s: float
    t_inf_c: float
    delta_c: float
    tau_s: float
    rms_c: float

    def predicted_check_s(self, windows: Windows) -> float:
        """The first check the model passes: when the difference of two adjacent window
        means, |ΔT|·(τ/W)·(e^(W/τ) − 1)²·e^(−(t − t0)/τ), falls under the tolerance (noise
        left out)."""
        w, tau = windows.eq_window_s, self.tau_s
        if abs(self.delta_c) <= 0 or tau <= 0 or w <= 0:
            return self.t0_s + 2 * w
        x = w / tau  # log(e^x - 1) without overflow: x + log(1 - e^-x) for a long window
        log_expm1 = math.log(math.expm1(x)) if x < 30 else x + math.log1p(-math.exp(-x))
        log_change = math.log(abs(self.delta_c)) + math.log(tau / w) + 2 * log_expm1
        settle = tau * (log_change - math.log(windows.eq_temp_tolerance_c))
        return self.t0_s + max(settle, 2 * w)

    def predicted_equilibrium_s(self, windows: Windows) -> float:
        """The time the rule will date equilibrium near: the boundary of its first passing
        check's windows (the date falls between A's centre, half a window earlier, and B's
        first half's centre, a quarter window later; module docstring, "Dating")."""
        return self.predicted_check_s(windows) - windows.eq_window_s


def _batch_levels(
    s: Series, t_check: float, window_s: float, robust: bool, per_window: int = BATCHES
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Batch levels over (t_check − 2W, t_check]: nominal centres, levels (NaN where a batch
    is empty) and reading counts, 2·per_window of each."""
    count = 2 * per_window
    edges = t_check - 2 * window_s + (2 * window_s / count) * np.arange(count + 1)
    span = s.window(edges[0], edges[-1])
    finite = np.isfinite(span.y)
    t, y = span.t[finite], span.y[finite]
    index = np.clip(np.searchsorted(edges, t, side="left") - 1, 0, count - 1)
    counts = np.bincount(index, minlength=count)
    filled = counts > 0
    levels = np.full(count, np.nan)
    if robust:  # every batch's median at once: sort by batch, then by value
        ordered = y[np.lexsort((y, index))]
        first = (np.cumsum(counts) - counts)[filled]
        n = counts[filled]
        levels[filled] = (ordered[first + (n - 1) // 2] + ordered[first + n // 2]) / 2
    else:
        levels[filled] = np.bincount(index, weights=y, minlength=count)[filled] / counts[filled]
    centres = (edges[:-1] + edges[1:]) / 2
    return centres, levels, counts


@cache
def _t_quantile(df: int) -> float:
    """Student's t at the rule's confidence (one-sided), for ``df`` degrees of freedom."""
    return float(stats.t.ppf(CONFIDENCE, df))


def _line(x: np.ndarray, y: np.ndarray) -> tuple[float, float, np.ndarray]:
    """Least-squares line of y in x: its slope, Σ(x − x̄)², and the residuals about it."""
    xc = x - x.mean()
    sxx = float(np.dot(xc, xc))
    slope = float(np.dot(xc, y - y.mean()) / sxx)
    return slope, sxx, y - y.mean() - slope * xc


def _detrended(
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
            _, _, resid = _line(x, y)
            squares += float(resid @ resid)
            df += y.size - 2
    return pieces, squares, df


def judged_signals(
    basis: str,
    temp: Series,
    power: Series,
    clock: Series,
    rates: Mapping[str, Series],
    windows: Windows,
    start_s: float,
    end_s: float,
) -> list[tuple[str, Series, float | None]]:
    """The signals the rule judges over (start, end]: (name, series, absolute tolerance, or
    None for a relative one). The basis, the SM clock where read, every throughput part."""
    out: list[tuple[str, Series, float | None]] = []
    if basis == "temperature":
        out.append(("temperature", temp, windows.eq_temp_tolerance_c))
    elif basis == "power":
        out.append(("power", power, None))
    if np.isfinite(clock.window(start_s, end_s).y).any():
        out.append(("SM clock", clock, None))
    out += [(f"{part} throughput", r, None) for part, r in rates.items()]
    return out


def drift(
    signal: str,
    s: Series,
    t_check: float,
    windows: Windows,
    *,
    absolute_c: float | None = None,
    robust: bool = True,
    window_s: float | None = None,
) -> Drift:
    """The rule's test on one signal at one check (module docstring). With ``absolute_c``
    the tolerance is in the signal's unit (temperature); otherwise it is
    ``eq_rel_tolerance_pct`` of window B's level and the change is in % of that level."""
    w = windows.eq_window_s if window_s is None else window_s
    relative = absolute_c is None
    tolerance = windows.eq_rel_tolerance_pct if relative else absolute_c
    unit = "%" if relative else "°C"
    # Batches are eq_window_s / BATCHES long at every scale; the longer scale's windows hold
    # ``segments`` short windows' worth, each detrended on its own (docstring, "Cycles").
    segments = max(1, round(w / windows.eq_window_s))
    per_window = BATCHES * segments
    centres, levels, counts = _batch_levels(s, t_check, w, robust, per_window)
    halves = (slice(0, per_window), slice(per_window, 2 * per_window))
    need = math.ceil(MIN_BATCH_SHARE * per_window)
    for name, half in zip(("earlier", "last"), halves, strict=True):
        readings = int(counts[half].sum())
        filled = int(np.isfinite(levels[half]).sum())
        if readings < MIN_POINTS or filled < need:
            note = (
                f"{readings} readings in {filled} of {per_window} stretches of the {name} "
                f"{w / 60:g} min (needs {MIN_POINTS} in {need})"
            )
            return Drift(signal, unit, tolerance, note=note)
    pieces, squares, df = _detrended(centres, levels, 2 * segments)
    if df < 2:
        return Drift(signal, unit, tolerance, note="too few batches to measure its noise")
    ya, yb = np.concatenate(pieces[:segments]), np.concatenate(pieces[segments:])
    level_a, level_b = float(ya.mean()), float(yb.mean())
    if relative and level_b == 0:
        return Drift(signal, unit, tolerance, note="its level is 0, so no relative change")
    scale = 100.0 / abs(level_b) if relative else 1.0
    variance = squares / df
    t_q = _t_quantile(df)
    change = (level_b - level_a) * scale
    noise = math.sqrt(variance * (1 / ya.size + 1 / yb.size)) * scale

    # The dating (module docstring, "Dating"): half-window levels against B's.
    halves = [float(h.mean()) for h in (*np.array_split(ya, 2), *np.array_split(yb, 2))]
    settled_from = float(len(halves) - 1)
    for k in range(len(halves) - 2, -1, -1):
        if abs(halves[k] - level_b) * scale >= tolerance:
            break
        settled_from = float(k)
    steps = np.diff(halves)
    b_half = yb.size // 2
    b_se = math.sqrt(variance * (1 / b_half + 1 / (yb.size - b_half)))
    b_flat = (abs(steps[-1]) + t_q * b_se) * scale < tolerance
    monotone = bool(np.all(steps <= 0) or np.all(steps >= 0))
    if not b_flat:  # B still moves: its level is not the kept one; no earlier than A | B
        settled_from = max(settled_from, 1.5)
    elif settled_from <= 1 and monotone:
        settled_from = 0.5  # a monotone approach: A's centre (docstring, "Dating")
    bound = abs(change) + t_q * noise
    note = ""
    if not b_flat and segments == 1 and bound < tolerance:
        # B still moves: A and B agreeing says nothing (a hump: rise in A, fall in B). Only
        # the longer scale, whose windows span a fan cycle, may pass it (docstring, "B").
        half_change = steps[-1] * scale
        note = (
            f"the last {w / 60:g} min still move: their halves differ by {half_change:+.2f} "
            f"{unit} (± {b_se * scale:.2f}); tolerance {tolerance:g} {unit}"
        )
        bound = max(bound, abs(half_change) + t_q * b_se * scale)
    return Drift(signal, unit, tolerance, change, noise, bound, level_b, settled_from, note, b_flat)


@dataclass(frozen=True, slots=True)
class Level:
    """A signal's level over two adjacent ``eq_window_s`` windows (10 min by default), with
    what its noise needs: batch count, and squared residuals about each window's line and
    their degrees of freedom (as in ``drift``)."""

    level: float
    batches: int
    squares: float
    df: int


def level_of(
    s: Series, end_s: float, windows: Windows, robust: bool = True, windows_n: int = 2
) -> Level | None:
    """The level of (end − n·W, end] (n = ``windows_n`` eq_window_s windows, two by default:
    the 10-min level); None where it holds too few readings to say."""
    w = windows.eq_window_s
    per_window = BATCHES * windows_n // 2
    centres, batch, counts = _batch_levels(s, end_s, w * windows_n / 2, robust, per_window)
    filled = int(np.isfinite(batch).sum())
    enough = math.ceil(MIN_BATCH_SHARE * BATCHES * windows_n)
    if int(counts.sum()) < MIN_POINTS * windows_n or filled < enough:
        return None
    pieces, squares, df = _detrended(centres, batch, windows_n)
    return Level(float(np.concatenate(pieces).mean()), filled, squares, df)


def moved_since(
    signal: str, before: Level, now: Level, windows: Windows, absolute_c: float | None = None
) -> Drift | None:
    """The withdrawal test (docstring, "Withdrawal"): has the level moved from ``before``
    (the older 10-min window) to ``now`` (the last 10 min) by more than the tolerance, with
    the rule's confidence? A Drift whose ``bound`` is the least it moved,
    ``|Δ| − t·se`` (it moved where that exceeds the tolerance); None where it cannot say."""
    relative = absolute_c is None
    tolerance = windows.eq_rel_tolerance_pct if relative else absolute_c
    df = before.df + now.df
    if df < 2 or (relative and now.level == 0):
        return None
    scale = 100.0 / abs(now.level) if relative else 1.0
    change = (now.level - before.level) * scale
    variance = (before.squares + now.squares) / df
    noise = math.sqrt(variance * (1 / before.batches + 1 / now.batches)) * scale
    least = abs(change) - _t_quantile(df) * noise
    unit = "%" if relative else "°C"
    return Drift(signal, unit, tolerance, change, noise, least, now.level)


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
    window_s: float | None = None,
) -> CheckResult:
    """Apply the equilibrium rule to the two windows that end at ``t_check``, each
    ``window_s`` long (``eq_window_s`` unless given: the longer scale is the module
    docstring's "Cycles")."""
    w = windows.eq_window_s if window_s is None else window_s
    signals = judged_signals(basis, temp, power, clock, rates, windows, t_check - 2 * w, t_check)
    drifts = [
        drift(name, series, t_check, windows, absolute_c=absolute, window_s=w)
        for name, series, absolute in signals
    ]
    passed = bool(drifts) and (basis != "throughput" or bool(rates))
    passed = passed and all(d.passed for d in drifts)
    # The centre of the first half-window from which on every signal stays within its
    # tolerance of its last half-window's level (docstring, "Dating").
    first = max((d.settled_from for d in drifts if d.settled_from is not None), default=3)
    centre = t_check - 2 * w + first * w / 2 + w / 4
    return CheckResult(t_check, passed, tuple(drifts), basis, centre, w)


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


class EquilibriumRule:
    """The rule's state from one check to the next: the basis and the streak of passing
    checks. The online detector and the offline pass both feed it, check by check."""

    def __init__(self, windows: Windows, load_start_s: float | None = None) -> None:
        self.windows = windows
        self.load_start_s = load_start_s  # the longer scale needs 4 windows of load
        self.basis: str | None = None
        self.streak: list[CheckResult] = []
        self.last: CheckResult | None = None
        self.time_s: float | None = None  # the first passing check's centre
        self.confirmed_s: float | None = None  # the check that completed the streak
        self.withdrawn: list[Withdrawal] = []  # dates a later level refuted (``watch``)
        # The level of the 5 min from the date, per signal (None until the first watch takes
        # it), and the signals that have stepped soon after (docstring, "A plateau that ends")
        self.anchor: dict[str, Level] | None = None
        self.stepped: dict[str, float] = {}  # signal -> the check it first stepped at
        # No date before this: where the window whose level withdrew a date starts
        self.floor_s: float | None = None

    @property
    def reached(self) -> bool:
        return self.time_s is not None

    def due(self, t_check: float) -> bool:
        """Whether ``watch`` tests at ``t_check``: once equilibrium is dated and the older
        of the check's two 5-min windows starts at the date or later."""
        w, date = self.windows.eq_window_s, self.time_s
        return date is not None and t_check >= date + 2 * w

    def watch(
        self,
        t_check: float,
        temp: Series,
        power: Series,
        clock: Series,
        rates: Mapping[str, Series],
    ) -> Withdrawal | None:
        """Once equilibrium is dated, test whether what came after refutes the date
        (docstring, "Withdrawal"); if it does, withdraw the date and start the rule again
        (returned; None otherwise)."""
        if not self.due(t_check):
            return None
        date, w = self.time_s, self.windows.eq_window_s
        assert date is not None
        assert self.basis is not None
        start = t_check - 2 * LONG_SCALE * w
        signals = judged_signals(
            self.basis, temp, power, clock, rates, self.windows, start, t_check
        )
        if self.anchor is None:  # the first watch: the 5 min from the date are in
            self.anchor = self._anchor(temp, power, clock, rates)
        anchor_end = date + w  # the end of the 5 min from the date
        moved, floors = [], []
        for name, series, absolute in signals:
            # A step on the 5-min scale, both windows after the date and the newer one
            # starting within 10 min of the end of the 5 min from it: noted, not judged.
            if t_check - w - anchor_end <= LONG_SCALE * w:
                step = drift(name, series, t_check, self.windows, absolute_c=absolute)
                if step.stepped:
                    self.stepped.setdefault(name, t_check)
            now = level_of(series, t_check, self.windows)
            if now is None:
                continue
            # The plateau that ended: within 10 min after the 5 min from the date, a 10-min
            # level the tolerance or more from theirs, once the signal has stepped.
            since = self.anchor.get(name)
            after = t_check - LONG_SCALE * w - anchor_end  # when the 10-min window starts
            if name in self.stepped and since is not None and 0 <= after <= LONG_SCALE * w:
                d = moved_since(name, since, now, self.windows, absolute)
                if d is not None and d.change is not None and abs(d.change) >= d.tolerance:
                    moved.append(
                        f"{name}'s level stepped: the 10 min to {t_check:.0f} s lie "
                        f"{d.change:+.2f} {d.unit} (± {d.noise:.2f}) from the 5 min from the "
                        f"date; tolerance {d.tolerance:g} {d.unit}"
                    )
                    floors.append(self.stepped[name] - w)  # the step's newer window
                    continue
            # Movement: two adjacent 10-min windows, both after the date.
            if t_check < date + 2 * LONG_SCALE * w:
                continue
            before = level_of(series, t_check - LONG_SCALE * w, self.windows)
            if before is None:
                continue
            d = moved_since(name, before, now, self.windows, absolute)
            if d is not None and d.bound is not None and d.bound > d.tolerance:
                moved.append(
                    f"{d.signal}'s level moved {d.change:+.2f} {d.unit} (± {d.noise:.2f}) from "
                    f"one 10-min window to the next; tolerance {d.tolerance:g} {d.unit}"
                )
                floors.append(t_check - LONG_SCALE * w)  # the newer 10-min window
        if not moved:
            return None
        gone = Withdrawal(date, t_check, "; ".join(moved))
        self.withdrawn.append(gone)
        self.time_s = self.confirmed_s = None
        self.streak = []
        # No new date before the window whose level refuted this one (docstring, "Withdrawal")
        self.floor_s = max([*floors, -math.inf if self.floor_s is None else self.floor_s])
        # Start again with the checks of the last window's time (their data is at hand
        # online too), so that a device that has settled since is found again now, not a
        # streak later; the caller makes the check at t_check itself.
        interval = self.windows.eq_check_interval_s
        for k in range(self.windows.eq_checks - 1, 0, -1):
            if not self.reached:
                self.check(t_check - k * interval, temp, power, clock, rates)
        return gone

    def _anchor(
        self, temp: Series, power: Series, clock: Series, rates: Mapping[str, Series]
    ) -> dict[str, Level]:
        """Each judged signal's level over the 5 min from the date: what the date says the
        signal had come to (docstring, "A plateau that ends")."""
        w, date = self.windows.eq_window_s, self.time_s
        assert date is not None and self.basis is not None
        lo, hi = date, date + w
        out = {}
        for name, series, _ in judged_signals(
            self.basis, temp, power, clock, rates, self.windows, lo, hi
        ):
            level = level_of(series, hi, self.windows, windows_n=1)
            if level is not None:
                out[name] = level
        return out

    def check(
        self,
        t_check: float,
        temp: Series,
        power: Series,
        clock: Series,
        rates: Mapping[str, Series],
    ) -> CheckResult:
        """Make the check at ``t_check`` on series holding at least its two windows."""
        start = t_check - 2 * self.windows.eq_window_s
        basis = choose_basis(temp.window(start, t_check), power.window(start, t_check), self.basis)
        if basis != self.basis:  # a better sensor came: its checks start their own streak
            self.basis, self.streak = basis, []
        result = check_window(t_check, temp, power, clock, rates, self.windows, basis)
        long_w = LONG_SCALE * self.windows.eq_window_s
        if (
            not result.passed
            and self.load_start_s is not None
            and t_check - 2 * long_w >= self.load_start_s
        ):
            longer = check_window(t_check, temp, power, clock, rates, self.windows, basis, long_w)
            if longer.passed:
                result = longer
        self.last = result
        # The passing checks of the last window's time: a failing check between them does
        # not reset the count (a fan cycle passes at some phases only), age does.
        recent = [r for r in self.streak if r.t_s > t_check - self.windows.eq_window_s]
        counts = result.passed and (self.floor_s is None or result.centre_s >= self.floor_s)
        self.streak = [*recent, result] if counts else recent
        if self.time_s is None and len(self.streak) >= self.windows.eq_checks:
            self.time_s = self.streak[0].centre_s
            self.confirmed_s = result.t_s
            self.anchor = None
            self.stepped = {}
        return result


@dataclass(frozen=True, slots=True)
class Withdrawal:
    """An equilibrium date that a later level refuted (docstring, "Withdrawal")."""

    time_s: float  # the date withdrawn
    at_s: float  # the check that withdrew it
    reason: str

    def describe(self) -> str:
        return f"the date {self.time_s:.0f} s was withdrawn at {self.at_s:.0f} s: {self.reason}"


@dataclass(frozen=True, slots=True)
class Equilibrium:
    reached: bool
    time_s: float | None  # the centre of the first of the passing checks (``centre_s``)
    basis: str
    fit: Fit | None
    last_check: CheckResult | None
    confirmed_s: float | None = None  # when the rule had its ``eq_checks`` passes
    reason: str = ""  # why it was not reached ("" when it was)
    withdrawn: tuple[Withdrawal, ...] = ()  # earlier dates later levels refuted


def not_reached_reason(
    load_s: float,
    last: CheckResult | None,
    windows: Windows,
    streak: int = 0,
    floor_s: float | None = None,
) -> str:
    """Why equilibrium was not reached over a load of ``load_s`` seconds (``floor_s``: the
    rule's floor after a withdrawal, docstring "Withdrawal")."""
    need = shortest_confirmation_s(windows)
    if load_s < need:
        return (
            f"load of {load_s / 60:.1f} min is too short to confirm equilibrium: the rule "
            f"compares two {windows.eq_window_s / 60:g}-min windows at {windows.eq_checks} "
            f"checks {windows.eq_check_interval_s:g} s apart, {need / 60:.1f} min at least"
        )
    if last is None:
        return "no check could be made"
    if last.passed and floor_s is not None and last.centre_s < floor_s:
        return (
            f"the last check passed but dates {last.centre_s:.0f} s, before {floor_s:.0f} s, "
            f"where the window that withdrew an earlier date starts; no date comes before it"
        )
    if last.passed:
        return (
            f"{streak} check(s) of the last {windows.eq_window_s / 60:g} min passed, fewer "
            f"than the {windows.eq_checks} it needs"
        )
    moved = any(d.change is not None and not d.passed for d in last.drifts)
    verdict = "still moving" if moved else "could not be judged"
    return f"{verdict} at the end of the load: {last.reason}"


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
    rule = EquilibriumRule(windows, load_start_s)
    for t_check in check_times(load_start_s, end_s, windows):
        if rule.reached:
            rule.watch(float(t_check), temp, power, clock, rates)
        if not rule.reached:
            rule.check(float(t_check), temp, power, clock, rates)
    basis = rule.basis or choose_basis(temp, power)
    since = temp.window(load_start_s, end_s)
    fit = fit_exponential(since.t, since.y, load_start_s) if basis == "temperature" else None
    reason = (
        ""
        if rule.reached
        else not_reached_reason(
            end_s - load_start_s, rule.last, windows, len(rule.streak), rule.floor_s
        )
    )
    return Equilibrium(
        rule.reached,
        rule.time_s,
        basis,
        fit,
        rule.last,
        rule.confirmed_s,
        reason,
        tuple(rule.withdrawn),
    )


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
        self._keep_s = (
            2 * LONG_SCALE * windows.eq_window_s + 2 * windows.eq_check_interval_s + lag_s
        )
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

    def reason(self, now_s: float) -> str:
        """Why equilibrium is not reached yet ("" once it is)."""
        if self.reached or self.load_start_s is None:
            return ""
        load_s = now_s - self.load_start_s
        rule = self.rule
        return not_reached_reason(load_s, rule.last, self.windows, len(rule.streak), rule.floor_s)

    def start(self, load_start_s: float) -> None:
        self.load_start_s = load_start_s
        self.rule.load_start_s = load_start_s
        self._next_check = first_check_s(load_start_s, self.windows)

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
        while self._next_check is not None and now_s >= self._next_check + self._lag_s:
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
        has. Confirmation comes at the model's first passing check, plus the further
        checks, plus the lag."""
        if self.reached:
            return 0.0
        if self.fit is None:
            return None
        w = self.windows
        after = (w.eq_checks - 1) * w.eq_check_interval_s + self._lag_s
        predicted = self.fit.predicted_check_s(w) + after
        # Never promise sooner than the checks still needed can be made.
        needed = w.eq_checks - 1 - len(self.rule.streak)
        earliest = (self._next_check or now_s) + needed * w.eq_check_interval_s + self._lag_s
        eta = max(predicted, earliest, now_s) - now_s
        return eta if math.isfinite(eta) else None  # a model that predicts nothing usable

    def _check(self, t_check: float) -> CheckResult | None:
        """The rule's check at ``t_check`` before equilibrium, its watch after (the same
        sequence as ``detect``); None where the watch had nothing to test."""
        rule = self.rule
        if rule.reached and not rule.due(t_check):
            return None
        tele = np.array(self._tele, dtype=float).reshape(-1, 4)
        t = tele[:, 0]
        temp, power, clock = (Series(t, tele[:, i]) for i in (1, 2, 3))
        rates = {
            part: Series(*np.array(q, dtype=float).reshape(-1, 2).T)
            for part, q in self._rates.items()
        }
        if rule.reached:
            rule.watch(t_check, temp, power, clock, rates)
        return None if rule.reached else rule.check(t_check, temp, power, clock, rates)

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
