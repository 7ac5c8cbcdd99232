"""Whether a reading can be true: every source's telemetry passes here before it is judged.

The rules, each a claim about hardware, with its constants declared in ``soak/fields.py``
(``Field.plausible``, ``Field.still``) or below:

1. A reading outside its field's plausible range is not a reading: it is left out (None) of
   what is judged, counted and named, and stored as read with a flag, so nothing is lost.
   Power above twice the enforced limit is out of range where the limit is known.
2. A device is frozen when, while its load runs, every signal that must move holds still
   for ``FROZEN_S`` and at least ``FROZEN_READINGS`` readings: the energy counter (``GROWS``)
   does not grow, and power (``MOVES``) repeats to the last digit, and where power is read
   only in whole watts, temperature repeats with it. A device with none of these signals
   (temperature alone) is never judged frozen: a whole-degree temperature holds still for
   hours on a healthy device.
3. A gap is a stretch between two readings longer than ``GAP_INTERVALS`` times the median
   interval (and at least ``GAP_MIN_S``): named, never bridged.
4. A cumulative counter that decreases has been reset (a driver reload): the reset is named
   with its time, and the counts on either side are added.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from operator import attrgetter

import numpy as np

from soak.fields import FIELDS, POWER_MAX_W, Kind, Still
from soak.model import TELEMETRY_METRICS, Telemetry
from soak.units import minutes

# Longest a healthy device's must-move signals were seen to hold still together under load:
# 4 readings in a row (18 s) over the 288 device-traces in the real traces, never two on
# the simulator's (its power is read to the milliwatt). Five minutes is over fifteen times
# that, and short enough that a freeze is caught before the steady window (10 minutes by
# default) is judged on it.
FROZEN_S = 300.0
# A slow logger (one reading a minute) needs this many identical readings besides.
FROZEN_READINGS = 20
GAP_INTERVALS = 5.0  # a sample missing now and then is jitter; five in a row is a gap
GAP_MIN_S = 10.0  # never a gap on a sub-second logger's hiccup

_INDEX = {name: k for k, name in enumerate(TELEMETRY_METRICS)}
_BOUNDS: tuple[tuple[str, float, float], ...] = tuple(
    (
        f.name,
        -math.inf if f.plausible[0] is None else f.plausible[0],
        math.inf if f.plausible[1] is None else f.plausible[1],
    )
    for f in FIELDS
    if f.plausible != (None, None)
)
_NAMES = tuple(name for name, _, _ in _BOUNDS)
_GET = attrgetter(*_NAMES)
_LOWS = tuple(low for _, low, _ in _BOUNDS)
_HIGHS = tuple(high for _, _, high in _BOUNDS)
_POWER = _NAMES.index("power_w")
MUST_MOVE = tuple(f.name for f in FIELDS if f.still is not Still.MAY)
COUNTERS = tuple(f.name for f in FIELDS if f.kind is Kind.COUNTER)


@dataclass(frozen=True, slots=True)
class Implausible:
    """One reading left out: the field, the value as read, when, and the bound it broke."""

    device: int
    t_s: float
    field: str
    value: float
    low: float
    high: float


def bounds(name: str, power_limit_w: float | None = None) -> tuple[float, float]:
    """The plausible range of one field; power's upper bound is twice the enforced limit
    where that is known and itself plausible."""
    for field, low, high in _BOUNDS:
        if field == name:
            if name == "power_w" and power_limit_w is not None and 0 < power_limit_w <= high:
                high = 2.0 * power_limit_w
            return low, high
    return -math.inf, math.inf


def screen(row: Telemetry, power_limit_w: float | None = None) -> list[Implausible]:
    """The readings of one row that cannot be true (rule 1); empty for nearly every row.
    ``power_limit_w``: the device's enforced limit where the row does not read one."""
    values = _GET(row)
    bad = [
        k
        for k, (v, low, high) in enumerate(zip(values, _LOWS, _HIGHS, strict=True))
        if v is not None and not low <= v <= high
    ]
    power = values[_POWER]
    if power is not None and power > 0:
        limit = row.power_limit_w
        if limit is None or not 0 < limit <= POWER_MAX_W:
            limit = power_limit_w
        if limit is not None and limit > 0 and power > 2.0 * limit and _POWER not in bad:
            bad = sorted([*bad, _POWER])
    out = []
    for k in bad:
        name, low, high = _BOUNDS[k]
        if k == _POWER:
            high = _power_high(row, power_limit_w)
        out.append(Implausible(row.device, row.t_s, name, float(values[k]), low, high))
    return out


def _power_high(row: Telemetry, power_limit_w: float | None) -> float:
    limit = row.power_limit_w
    if limit is None or not 0 < limit <= POWER_MAX_W:
        limit = power_limit_w
    high = _HIGHS[_POWER]
    return min(high, 2.0 * limit) if limit is not None and limit > 0 else high


def screen_all(
    rows: Sequence[Telemetry], power_limits: Mapping[int, float | None] | None = None
) -> list[Implausible]:
    """``screen`` of a tick's rows (what the store and the runner call each tick)."""
    limits = power_limits or {}
    return [f for row in rows for f in screen(row, limits.get(row.device))]


def screen_columns(
    device: int, columns: Mapping[str, np.ndarray], power_limit_w: float | None = None
) -> list[Implausible]:
    """``screen`` of many ticks of one device at once, over its column arrays (``t_s`` and any
    fields, NaN where a value was not read, as the store's block write takes them): the same
    ranges and the same readings, in the same order as ``screen`` of each row in turn."""
    t = np.asarray(columns["t_s"], dtype=float)
    rows: list[np.ndarray] = []
    highs: list[np.ndarray] = []
    for k, (name, low, high) in enumerate(_BOUNDS):
        if name not in columns:
            continue
        values = np.asarray(columns[name], dtype=float)
        with np.errstate(invalid="ignore"):
            bad = ~np.isnan(values) & ~((values >= low) & (values <= high))
            top = np.full(t.size, high)
            if k == _POWER:  # above twice the enforced limit, where one is known
                limit = _limits(columns, t.size, power_limit_w)
                bad |= (values > 0) & (limit > 0) & (values > 2.0 * limit)
                top = np.where(limit > 0, np.minimum(high, 2.0 * limit), high)
        rows.append(np.flatnonzero(bad))
        highs.append(top)
    names = [(k, name, low) for k, (name, low, _) in enumerate(_BOUNDS) if name in columns]
    found = [
        (int(i), j)
        for j, at in enumerate(rows)
        for i in at  # few: nearly every block holds none
    ]
    found.sort()  # by row, then by field as ``screen`` lists a row's
    out = []
    for i, j in found:
        _, name, low = names[j]
        value = float(np.asarray(columns[name], dtype=float)[i])
        out.append(Implausible(device, float(t[i]), name, value, low, float(highs[j][i])))
    return out


def _limits(
    columns: Mapping[str, np.ndarray], size: int, power_limit_w: float | None
) -> np.ndarray:
    """Each row's enforced power limit as ``screen`` takes it: the row's own where it reads
    one in range, else the device's (NaN: none known)."""
    fallback = np.nan if power_limit_w is None else float(power_limit_w)
    own = columns.get("power_limit_w")
    if own is None:
        return np.full(size, fallback)
    own = np.asarray(own, dtype=float)
    with np.errstate(invalid="ignore"):
        return np.where((own > 0) & (own <= POWER_MAX_W), own, fallback)


def cleaned(row: Telemetry, found: Sequence[Implausible]) -> Telemetry:
    """The row with the readings ``found`` left out (None)."""
    if not found:
        return row
    return replace(row, **{f.field: None for f in found})


@dataclass(frozen=True, slots=True)
class Frozen:
    """A span of a device's readings that held still under load (rule 2)."""

    device: int
    from_s: float
    to_s: float  # the last identical reading seen
    values: tuple[tuple[str, float], ...]  # the repeated must-move signals and their value

    @property
    def length_s(self) -> float:
        return self.to_s - self.from_s

    def describe(self, origin_s: float) -> str:
        """ "telemetry frozen from 31.0 min: power 301.47 W, temperature 61 °C unchanged
        for 10 min while the load ran", in minutes since ``origin_s`` (the device's load
        start, in store seconds)."""
        from soak.fields import BY_NAME  # the labels and units are the registry's

        held = ", ".join(
            f"{BY_NAME[name].label} {_number(value)}{_unit(BY_NAME[name].unit)}"
            if name in BY_NAME
            else f"{name} {_number(value)}"
            for name, value in self.values
        )
        return (
            f"telemetry frozen from {minutes(self.from_s - origin_s)}: {held} unchanged for "
            f"{_minutes(self.length_s)} while the load ran"
        )

    def as_dict(self) -> dict[str, object]:
        return {
            "episode": "frozen",
            "from_s": self.from_s,
            "to_s": self.to_s,
            "values": dict(self.values),
        }


def _number(value: float) -> str:
    return f"{value:,.2f}".rstrip("0").rstrip(".") if value != int(value) else f"{value:,.0f}"


def _unit(unit: str) -> str:
    return f" {unit}" if unit else ""


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"


class FrozenWatch:
    """Rule 2 read one row at a time, the same online (the runner) and offline (an import).

    ``add`` takes each row with whether the device's load ran at it, and returns the frozen
    span once, when it first reaches ``FROZEN_S`` and ``FROZEN_READINGS``; ``span`` is the
    span as it stands (growing while the readings stay still)."""

    def __init__(self, device: int) -> None:
        self.device = device
        self.fine_power = False  # power read below whole watts at least once under load
        self._since: float | None = None
        self._last_t: float | None = None
        self._held: tuple[tuple[str, float], ...] = ()
        self._count = 0
        self.span: Frozen | None = None  # reached FROZEN_S; None: not (or no longer) frozen

    def add(self, t_s: float, values: Mapping[str, float | None], loaded: bool) -> Frozen | None:
        power = values.get("power_w")
        if loaded and power is not None and power != round(power):
            self.fine_power = True
        held = self._signals(values) if loaded else ()
        if not held or held != self._held:
            self._since, self._held, self._count = (t_s, held, 1) if held else (None, (), 0)
            self.span = None
            self._last_t = t_s
            return None
        self._count += 1
        self._last_t = t_s
        assert self._since is not None
        long_enough = t_s - self._since >= FROZEN_S and self._count >= FROZEN_READINGS
        if not long_enough:
            return None
        first = self.span is None
        self.span = Frozen(self.device, self._since, t_s, held)
        return self.span if first else None

    def add_block(
        self, t_s: np.ndarray, values: Mapping[str, np.ndarray], loaded: np.ndarray
    ) -> Frozen | None:
        """``add`` of many rows at once (columns, NaN: not read; ``loaded`` per row): the
        same state after and the same span found. Where every loaded row's energy counter
        moved from the row before, no row holds still and only the last row's state
        stands; else each row is added in turn."""
        t = np.asarray(t_s, dtype=float)
        if not t.size:
            return None
        nan = np.full(t.size, np.nan)
        power = np.asarray(values.get("power_w", nan), dtype=float)
        temp = np.asarray(values.get("temp_c", nan), dtype=float)
        energy = np.asarray(values.get("energy_j", nan), dtype=float)
        loaded = np.asarray(loaded, dtype=bool)
        moved = ~np.isnan(energy[1:]) & ~np.isnan(energy[:-1]) & (energy[1:] != energy[:-1])
        held_energy = dict(self._held).get("energy_j")
        first_moved = not self._held or (
            held_energy is not None and not np.isnan(energy[0]) and energy[0] != held_energy
        )
        if (loaded[0] and not first_moved) or np.any(loaded[1:] & loaded[:-1] & ~moved):
            found = None
            for k in range(t.size):
                row = {
                    "power_w": None if np.isnan(power[k]) else float(power[k]),
                    "temp_c": None if np.isnan(temp[k]) else float(temp[k]),
                    "energy_j": None if np.isnan(energy[k]) else float(energy[k]),
                }
                span = self.add(float(t[k]), row, bool(loaded[k]))
                found = found or span
            return found
        with np.errstate(invalid="ignore"):
            fine = loaded & ~np.isnan(power) & (power != np.round(power))
        self.fine_power = self.fine_power or bool(fine.any())
        last = {
            "power_w": None if np.isnan(power[-1]) else float(power[-1]),
            "temp_c": None if np.isnan(temp[-1]) else float(temp[-1]),
            "energy_j": None if np.isnan(energy[-1]) else float(energy[-1]),
        }
        held = self._signals(last) if loaded[-1] else ()
        self._since, self._held, self._count = (float(t[-1]), held, 1) if held else (None, (), 0)
        self.span = None
        self._last_t = float(t[-1])
        return None

    def _signals(self, values: Mapping[str, float | None]) -> tuple[tuple[str, float], ...]:
        """The must-move signals this row reads, or () where they cannot tell a freeze."""
        power, temp = values.get("power_w"), values.get("temp_c")
        energy, rate = values.get("energy_j"), values.get("throughput")
        out: list[tuple[str, float]] = []
        if power is not None and (self.fine_power or temp is not None):
            out.append(("power_w", float(power)))
        if energy is not None:
            out.append(("energy_j", float(energy)))
        if rate is not None and temp is not None:
            out.append(("throughput", float(rate)))
        if out and temp is not None:
            out.append(("temp_c", float(temp)))
        return tuple(out)


def frozen_spans(
    device: int,
    t: Sequence[float] | np.ndarray,
    columns: Mapping[str, Sequence[float | None] | np.ndarray],
    loaded: Sequence[bool] | np.ndarray,
) -> list[Frozen]:
    """Every frozen span of one device's readings (rule 2), each to its last still reading:
    what ``FrozenWatch`` fed every row finds, read over the columns at once (a week of 1-s
    readings in a fraction of a second, not one Python call per row)."""
    times = np.asarray(t, dtype=float)
    n = times.size
    if not n:
        return []
    on = np.asarray(loaded, dtype=bool)

    nothing = np.zeros(n, dtype=bool)

    def column(name: str) -> tuple[np.ndarray, np.ndarray]:
        """The column (as given where it is float: a stored column is not copied; an
        infinite reading is held by no row, as NaN) and the rows that read it."""
        found = columns.get(name)
        if found is None:  # never read: no row holds it, and its values are never looked at
            return np.zeros(1), nothing
        values = np.asarray(found, dtype=float)
        return values, np.isfinite(values)

    (power, read_power), (temp, has_temp) = column("power_w"), column("temp_c")
    (energy, read_energy), (rate, read_rate) = column("energy_j"), column("throughput")
    # the watch's fine_power: a loaded power reading below whole watts, from its row on
    fine = np.maximum.accumulate(on & read_power & (power != np.round(power)))
    held = {  # each signal a row holds, in the watch's order (``FrozenWatch._signals``)
        "power_w": read_power & (fine | has_temp),
        "energy_j": read_energy,
        "throughput": read_rate & has_temp,
    }
    some = on & (held["power_w"] | held["energy_j"] | held["throughput"])
    held["temp_c"] = some & has_temp
    values = {"power_w": power, "energy_j": energy, "throughput": rate, "temp_c": temp}
    same = some[1:] & some[:-1]  # a row that holds what the row before held
    for name, mask in held.items():
        if not mask.any():  # a signal no row holds constrains none
            continue
        a, b = mask[1:] & some[1:], mask[:-1] & some[:-1]
        same &= (a == b) & (~a | (values[name][1:] == values[name][:-1]))
    firsts = np.flatnonzero(some & ~np.concatenate(([False], same)))
    ends = np.concatenate((np.flatnonzero(~same), [n - 1]))  # rows the next does not continue
    lasts = ends[np.searchsorted(ends, firsts)]
    frozen = (times[lasts] - times[firsts] >= FROZEN_S) & (lasts - firsts + 1 >= FROZEN_READINGS)
    out = []
    for first, last in zip(firsts[frozen].tolist(), lasts[frozen].tolist(), strict=True):
        signals = tuple(
            (name, float(values[name][first])) for name, mask in held.items() if mask[first]
        )
        out.append(Frozen(device, float(times[first]), float(times[last]), signals))
    return out


def _finite(value: float | None) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return float(value)


@dataclass(frozen=True, slots=True)
class Gap:
    """No readings from ``from_s`` (the last before) to ``to_s`` (the first after)."""

    from_s: float
    to_s: float

    @property
    def length_s(self) -> float:
        return self.to_s - self.from_s

    def describe(self, origin_s: float) -> str:
        """ "no readings for 2 min from 15.2 min", since ``origin_s`` as Frozen's."""
        return f"no readings for {_minutes(self.length_s)} from {minutes(self.from_s - origin_s)}"


def gaps(t: np.ndarray | Sequence[float], interval_s: float | None = None) -> list[Gap]:
    """Stretches without readings (rule 3); ``interval_s`` defaults to the median step."""
    times = np.asarray(t, dtype=float)
    if times.size < 2:
        return []
    steps = np.diff(times)
    step = float(np.median(steps)) if interval_s is None else interval_s
    limit = max(GAP_INTERVALS * step, GAP_MIN_S)
    return [Gap(float(times[k]), float(times[k + 1])) for k in np.flatnonzero(steps > limit)]


def missing_s(found: Iterable[Gap], start_s: float, end_s: float) -> float:
    """How much of [start_s, end_s] lies in the gaps."""
    return sum(max(0.0, min(g.to_s, end_s) - max(g.from_s, start_s)) for g in found)


@dataclass(frozen=True, slots=True)
class Reset:
    """A cumulative counter that went back: from ``before`` to ``after`` at ``t_s``."""

    field: str
    t_s: float
    before: float
    after: float

    def describe(self, origin_s: float) -> str:
        """ "energy counter reset at 21.8 min (…)", since ``origin_s`` as Frozen's."""
        from soak.fields import BY_NAME

        return (
            f"{BY_NAME[self.field].label} reset at {minutes(self.t_s - origin_s)} "
            f"({_number(self.before)} → {_number(self.after)}): the counts on either side added"
        )


def counter_resets(name: str, t: np.ndarray, values: np.ndarray) -> list[Reset]:
    """Every decrease of a cumulative counter (rule 4)."""
    ok = np.flatnonzero(np.isfinite(values))
    if ok.size < 2:
        return []
    v = values[ok]
    drops = np.flatnonzero(np.diff(v) < 0)
    return [Reset(name, float(t[ok[k + 1]]), float(v[k]), float(v[k + 1])) for k in drops]


def unreset(values: np.ndarray) -> np.ndarray:
    """A cumulative counter with each reset undone: after a decrease, the count before it is
    added to every later reading (rule 4). NaN stays NaN."""
    out = values.astype(float).copy()
    ok = np.flatnonzero(np.isfinite(out))
    if ok.size < 2:
        return out
    v = out[ok]
    add = np.zeros_like(v)
    drops = np.flatnonzero(np.diff(v) < 0)
    for k in drops:
        add[k + 1 :] += v[k]
    out[ok] = v + add
    return out


@dataclass(frozen=True, slots=True)
class Quality:
    """How far one device's readings can be trusted: the report's telemetry-quality line and
    summary.json's ``telemetry_quality``."""

    samples: int  # readings taken (rows stored)
    implausible: tuple[Implausible, ...] = ()
    gaps: tuple[Gap, ...] = ()
    frozen: tuple[Frozen, ...] = ()
    resets: tuple[Reset, ...] = ()
    missing_cold_s: float = 0.0  # of the cold window, in gaps
    missing_steady_s: float = 0.0
    origin_s: float = 0.0  # the device's load start (else the run's): what its texts count from

    @property
    def missing_s(self) -> float:
        return sum(g.length_s for g in self.gaps)

    def left_out(self) -> list[str]:
        """Per field: "18 temperature readings outside −20…150 °C (−75 °C at 5.2 min, …) were
        left out"."""
        from soak.fields import BY_NAME

        by_field: dict[str, list[Implausible]] = {}
        for f in self.implausible:
            by_field.setdefault(f.field, []).append(f)
        out = []
        for name, found in by_field.items():
            field = BY_NAME[name]
            unit = _unit(field.unit)
            lows = {f.low for f in found}
            highs = {f.high for f in found}
            span = _range(min(lows), max(highs), unit) if len(highs) == 1 else "its range"
            shown = ", ".join(f"{_signed(f.value)}{unit} at {self._at(f.t_s)}" for f in found[:3])
            more = ", …" if len(found) > 3 else ""
            word = "reading" if len(found) == 1 else "readings"
            verb = "was" if len(found) == 1 else "were"
            out.append(
                f"{len(found)} {field.label} {word} outside {span} ({shown}{more}) {verb} left out"
            )
        return out

    def line(self) -> str:
        """One line for the cold/steady table: samples, left out, missing, frozen."""
        parts = [f"{self.samples:,} samples", f"{len(self.implausible):,} left out as implausible"]
        if self.gaps:
            within = [
                f"{_minutes(s)} of the {name} window"
                for name, s in (("cold", self.missing_cold_s), ("steady", self.missing_steady_s))
                if s > 0
            ]
            word = "gap" if len(self.gaps) == 1 else "gaps"
            text = f"{_minutes(self.missing_s)} missing in {len(self.gaps)} {word}"
            parts.append(text + (f" ({', '.join(within)})" if within else ""))
        else:
            parts.append("none missing")
        if self.frozen:
            parts.append("frozen from " + ", ".join(self._at(f.from_s) for f in self.frozen))
        else:
            parts.append("not frozen")
        if self.resets:
            parts.append("counter reset at " + ", ".join(self._at(r.t_s) for r in self.resets))
        return "; ".join(parts)

    def _at(self, t_s: float) -> str:
        return minutes(t_s - self.origin_s)

    def as_dict(self) -> dict[str, object]:
        by_field: dict[str, int] = {}
        for f in self.implausible:
            by_field[f.field] = by_field.get(f.field, 0) + 1
        return {
            "samples": self.samples,
            "implausible": len(self.implausible),
            "implausible_by_field": by_field,
            "left_out": self.left_out(),
            "gaps": [{"from_s": g.from_s, "to_s": g.to_s} for g in self.gaps],
            "missing_s": self.missing_s,
            "missing_cold_s": self.missing_cold_s,
            "missing_steady_s": self.missing_steady_s,
            "frozen": [{"from_s": f.from_s, "to_s": f.to_s} for f in self.frozen],
            "resets": [
                {"field": r.field, "t_s": r.t_s, "before": r.before, "after": r.after}
                for r in self.resets
            ],
        }


def _signed(value: float) -> str:
    """A number with a true minus sign: "−75"."""
    text = _number(abs(value))
    return f"−{text}" if value < 0 else text


def _range(low: float, high: float, unit: str) -> str:
    if math.isinf(high):
        return f"{_signed(low)}{unit} and above"
    return f"{_signed(low)}…{_signed(high)}{unit}"
