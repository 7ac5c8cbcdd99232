"""The signals a device is judged by, as one bundle (rule, line 1)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from soak.analysis.equilibrium.levels import MIN_POINTS, Series
from soak.profile import Windows

_EMPTY = Series(np.empty(0), np.empty(0))


@dataclass(frozen=True, slots=True)
class Signals:
    """One device's series: temperature, power, SM clock and each part's throughput."""

    temp: Series = _EMPTY
    power: Series = _EMPTY
    clock: Series = _EMPTY
    rates: Mapping[str, Series] = field(default_factory=dict)

    def cached(self, horizon_s: float) -> Signals:
        """The same series, each keeping its levels in rings (``Series.cached``)."""
        rates = {part: r.cached(horizon_s) for part, r in self.rates.items()}
        return Signals(
            self.temp.cached(horizon_s),
            self.power.cached(horizon_s),
            self.clock.cached(horizon_s),
            rates,
        )

    def without_clock_beside_rates(self) -> Signals:
        """The same signals, the SM clock left out where some part's throughput is read."""
        if not self.rates:
            return self
        return Signals(self.temp, self.power, _EMPTY, self.rates)

    def basis(self, start_s: float, end_s: float, previous: str | None = None) -> str:
        """The basis over (start, end] (``choose_basis``)."""
        temp, power = self.temp.window(start_s, end_s), self.power.window(start_s, end_s)
        return choose_basis(temp, power, previous)

    def judged(
        self, basis: str, windows: Windows, start_s: float, end_s: float
    ) -> list[tuple[str, Series, float | None]]:
        """The signals the rule judges over (start, end]: (name, series, absolute tolerance,
        or None for a relative one). The basis, the SM clock where read, every part's
        throughput."""
        out: list[tuple[str, Series, float | None]] = []
        if basis == "temperature":
            out.append(("temperature", self.temp, windows.eq_temp_tolerance_c))
        elif basis == "power":
            out.append(("power", self.power, None))
        if np.isfinite(self.clock.window(start_s, end_s).y).any():
            out.append(("SM clock", self.clock, None))
        out += [(f"{part} throughput", r, None) for part, r in self.rates.items()]
        return out


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
