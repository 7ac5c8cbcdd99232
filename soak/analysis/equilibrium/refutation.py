"""The refutation of a date: a later level that shows the date wrong (rule, lines 10–13)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from soak.analysis.equilibrium.levels import Level, t_quantile
from soak.profile import Windows
from soak.units import minutes

STEPPED = "stepped"  # a 10-min level the tolerance or more from the 5 min from the date
MOVED = "moved"  # two adjacent 10-min levels apart by more than the tolerance, with confidence


@dataclass(frozen=True, slots=True)
class Refutation:
    """How far one signal's level moved from a level the date stands on: ``least`` and
    ``most`` are the least and the most it moved at the rule's confidence (|Δ| ∓ t·se)."""

    signal: str
    unit: str  # "°C" for temperature; "%" (of the later level) for the others
    tolerance: float
    change: float  # later − earlier, in ``unit``
    noise: float  # standard error of ``change``
    least: float
    most: float
    kind: str = MOVED  # STEPPED or MOVED
    at_s: float = math.nan  # the check that found it
    window_s: float = 300.0  # the W of the windows it was found on (rule, line 16)

    @property
    def refutes(self) -> bool:
        """Whether it withdraws the date: a step decides on the estimate, movement on
        ``least`` (rule, lines 11–12)."""
        if self.kind == STEPPED:
            return abs(self.change) >= self.tolerance
        return self.least > self.tolerance

    def describe(self, origin_s: float) -> str:
        """Why it withdraws the date; times in minutes since ``origin_s`` (the device's load
        start, in store seconds)."""
        moved = f"{self.change:+.2f} {self.unit} (± {self.noise:.2f})"
        tolerance = f"tolerance {self.tolerance:g} {self.unit}"
        w = self.window_s / 60
        if self.kind == STEPPED:
            return (
                f"{self.signal}'s level stepped: the {2 * w:g} min to "
                f"{minutes(self.at_s - origin_s)} lie {moved} from the {w:g} min from the "
                f"date; {tolerance}"
            )
        return (
            f"{self.signal}'s level moved {moved} from one {2 * w:g}-min window to the next; "
            f"{tolerance}"
        )


@dataclass(frozen=True, slots=True)
class Withdrawal:
    """An equilibrium date that later levels refuted."""

    time_s: float  # the date withdrawn
    at_s: float  # the check that withdrew it
    refutations: tuple[Refutation, ...]

    def reason(self, origin_s: float) -> str:
        return "; ".join(r.describe(origin_s) for r in self.refutations)

    def describe(self, origin_s: float) -> str:
        """ "the date at 7.2 min was withdrawn at 22.5 min: …", in minutes since
        ``origin_s`` (the device's load start, in store seconds)."""
        date, at = minutes(self.time_s - origin_s), minutes(self.at_s - origin_s)
        return f"the date at {date} was withdrawn at {at}: {self.reason(origin_s)}"


def compare(
    signal: str,
    before: Level,
    now: Level,
    windows: Windows,
    absolute_c: float | None,
    kind: str,
    at_s: float,
) -> Refutation | None:
    """How far the level moved from ``before`` to ``now``, against the signal's tolerance,
    found at ``at_s`` (its ``kind`` as in Refutation); None where the noise cannot be
    measured."""
    relative = absolute_c is None
    tolerance = windows.eq_rel_tolerance_pct if relative else absolute_c
    df = before.df + now.df
    if df < 2 or (relative and now.level == 0):
        return None
    scale = 100.0 / abs(now.level) if relative else 1.0
    change = (now.level - before.level) * scale
    variance = (before.squares + now.squares) / df
    noise = math.sqrt(variance * (1 / before.batches + 1 / now.batches)) * scale
    margin = t_quantile(df) * noise
    unit = "%" if relative else "°C"
    least, most = abs(change) - margin, abs(change) + margin
    found = (tolerance, change, noise, least, most, kind, at_s, windows.eq_window_s)
    return Refutation(signal, unit, *found)
