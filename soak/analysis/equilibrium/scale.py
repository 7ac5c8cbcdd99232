"""The confirming scale: each device's windows from its own evidence (rule, line 16).

The rule compares two windows of W; a date falls at best at A's centre, 1.5 W before the
check that shows it, and the sequential stop then waits for the steady window. With the
profile's W of 5 min a device dated at its reference stops 8.5 min later at best. How
long the windows must be is a property of the device's approach: for T∞ − ΔT·e^(−t/τ)
two adjacent windows of W ≥ 2τ differ by at least the distance left at A's centre, so a
pass there dates a monotone approach no earlier than the tolerance allows
(docs/equilibrium.md, "The confirming scale").

At ``chosen_at_s`` (load start + 2 × ``SHORTEST_S``, when the shortest windows' first check
falls) the temperature since the load start is fitted (``fit_exponential``). Where its τ is
measured (the readings show the bend; a temperature settled before the readings could show
its rise counts as τ = ``TAU_MIN_S``), the device is judged on the shortest windows, a
whole number of ``GRAIN_S`` and never under ``SHORTEST_S``, that are at least
``TAU_WINDOWS``·τ long and on which the margin its noise takes, t·σ·√(2/``BATCHES``)·
√(``SHORTEST_S``/W) with σ the rms of the shortest windows' batch levels about the fitted
approach, is at most ``QUIET`` of the tolerance, where those are shorter than the
profile's; its check interval, least steady window and relative tolerance scale with them
(each the same share of W as the profile's), and its watch (lines 10-13) reads the
profile's windows. Otherwise (slow, noisy, a ramp, no temperature) the profile's
windows stand. The choice reads only the data up to ``chosen_at_s``, once, so the online
detector and ``detect`` make the same choice, and a run cut at any later time the same.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass

import numpy as np

from soak.analysis.equilibrium.fit import TAU_MIN_S, Fit, fit_exponential
from soak.analysis.equilibrium.levels import BATCHES, Series, t_quantile
from soak.profile import Windows

SHORTEST_S = 240.0  # the floor: the real traces' (docs/equilibrium.md, "The confirming scale")
TAU_WINDOWS = 3.0  # W ≥ 3τ: 2τ dates a first-order approach within the tolerance; 1.5× margin
QUIET = 0.5  # the noise's margin on the shortest windows, as a share of the tolerance
GRAIN_S = 30.0  # the scaled W is a whole number of these


@dataclass(frozen=True, slots=True)
class Scale:
    """The windows a device is judged on, and what chose them."""

    windows: Windows
    # the fitted τ at ``chosen_at_s`` (``TAU_MIN_S`` where it settled faster than the
    # readings show; None: not measured)
    tau_s: float | None = None
    scatter_c: float | None = None  # the batch levels' rms about the fit (°C)
    why: str = ""  # why the profile's windows stand ("" where scaled)

    @property
    def window_s(self) -> float:
        return self.windows.eq_window_s

    @property
    def scaled(self) -> bool:
        return not self.why

    def describe(self) -> str:
        w = self.window_s / 60
        if self.why:
            return f"{w:g}-min windows (the profile's: {self.why})"
        return (
            f"{w:g}-min windows (its fitted τ {self.tau_s:.0f} s, its batch levels "
            f"{self.scatter_c:.2f} °C about the fit)"
        )


def floor_factor(scale: Windows, profile: Windows) -> float:
    """What a signal's floor (rule, line 1) on ``scale``'s batches is multiplied by so that
    it stands aside on ``scale`` exactly where it would on the profile's windows: a batch
    level's noise goes as one over the root of the batch's length (√k to the profile's
    batches, k = W / the profile's W), and the relative tolerance it is weighed against is
    k times the profile's (``scaled``). Only a signal other than the basis stands aside,
    and those are all relative."""
    k = scale.eq_window_s / profile.eq_window_s
    return k * math.sqrt(k)


def chosen_at_s(load_start_s: float, windows: Windows) -> float:
    """When the scale is chosen: the shortest windows' first check."""
    return load_start_s + 2 * min(SHORTEST_S, windows.eq_window_s)


def scaled(windows: Windows, window_s: float) -> Windows:
    """The profile's windows with W = ``window_s``; the check interval, the least steady
    window and the relative tolerance (power, SM clock, throughput) the same share of W as
    the profile's: a signal other than the temperature whose approach chose W is held to
    the same rate of change as on the profile's windows (a clock sliding 0.2 %/min under a
    flat temperature moves 1 % between adjacent 5-min windows and 0.4 % between 2-min
    ones), so shorter windows date no slide the profile's would not."""
    k = window_s / windows.eq_window_s
    return dataclasses.replace(
        windows,
        eq_window_s=window_s,
        eq_check_interval_s=windows.eq_check_interval_s * k,
        min_steady_s=windows.min_steady_s * k,
        eq_rel_tolerance_pct=windows.eq_rel_tolerance_pct * k,
    )


def choose(windows: Windows, load_start_s: float, temp: Series) -> Scale:
    """The device's scale from its temperature over (load start, ``chosen_at_s``]."""
    if windows.eq_window_s <= SHORTEST_S:
        return Scale(windows, why="the profile's windows are the shortest already")
    until = chosen_at_s(load_start_s, windows)
    since = temp.window(load_start_s, until)
    fit = fit_exponential(since.t, since.y, load_start_s)
    if fit is None:
        return Scale(windows, why="no temperature to fit")
    tau = fit.measured_tau_s
    if fit.bound == "upper":  # a ramp: no bend yet, neither τ nor T∞ known
        return Scale(windows, scatter_c=fit.rms_c, why="τ not measured (no bend yet)")
    if tau is None:  # settled before the readings could show its rise: τ under TAU_MIN_S
        tau = TAU_MIN_S
    scatter = batch_scatter(since, fit, until - SHORTEST_S, until)
    if scatter is None:
        return Scale(windows, tau, None, "too few batches to measure its scatter")
    # The margin its noise takes on windows of W: t·σ·√(2/BATCHES) on the shortest, and a
    # batch level's noise goes as 1/√(its length), so the margin as √(SHORTEST_S / W).
    margin = t_quantile(2 * BATCHES - 2) * scatter * math.sqrt(2 / BATCHES)
    quiet = QUIET * windows.eq_temp_tolerance_c
    for_tau = TAU_WINDOWS * tau
    for_noise = SHORTEST_S * (margin / quiet) ** 2
    wanted = max(SHORTEST_S, GRAIN_S * math.ceil(max(for_tau, for_noise) / GRAIN_S - 1e-9))
    if wanted >= windows.eq_window_s:
        why = (
            f"{TAU_WINDOWS:g} × τ of {tau:.0f} s reaches them"
            if for_tau >= for_noise
            else f"its noise, ± {margin:.2f} °C on the shortest windows, asks for as long"
        )
        return Scale(windows, tau, scatter, why)
    return Scale(scaled(windows, wanted), tau, scatter)


def batch_scatter(since: Series, fit: Fit, start_s: float, end_s: float) -> float | None:
    """The rms of the shortest windows' batch levels (medians of ``SHORTEST_S`` / BATCHES)
    about the fitted approach: what a level of the shortest windows is made of, so that a
    ripple faster than a batch (the mix's die) averages down as it does in the rule."""
    width = SHORTEST_S / BATCHES
    edges = np.arange(start_s, end_s + width / 2, width)
    out = []
    for lo, hi in itertools.pairwise(edges):
        inside = since.window(lo, hi)
        ok = np.isfinite(inside.y)
        if ok.sum() < 2:
            continue
        t_mid = float(inside.t[ok].mean())
        curve = fit.t_inf_c - fit.delta_c * math.exp(-(t_mid - fit.t0_s) / fit.tau_s)
        out.append(float(np.median(inside.y[ok])) - curve)
    if len(out) < BATCHES:
        return None
    return float(np.sqrt(np.mean(np.square(out))))
