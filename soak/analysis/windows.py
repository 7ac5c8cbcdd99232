"""Cold and steady windows and the statistics taken over them.

The cold window is the first minute of real load after warm-up; the steady window is the
10 minutes after equilibrium, or the last 10 minutes of the run when equilibrium was not
reached (docs/verdict.md, Windows). Both are measured from each device's own load start:
the time of its first finished unit of work, so that a worker's set-up time is never counted
as load.
"""

from __future__ import annotations

import enum
import math
from array import array
from dataclasses import dataclass, field

import numpy as np

from soak.analysis.intervals import median_interval
from soak.fields import FIELDS, REASONS, WINDOW_METRICS, Columns, FieldStats
from soak.model import ClockReason
from soak.profile import Windows

MIN_SEPARATE_STEADY_S = 60.0  # shortest steady window worth keeping apart from the cold one
ENERGY_COUNTER, POWER_INTEGRAL = "energy counter", "power integral"


class WindowName(enum.StrEnum):
    """The windows a device's figures are taken over: the first minute of load after the
    warm-up, the steady window after equilibrium (or the end of the run), and the last
    minutes of the load where they are not the steady window."""

    COLD = "cold"
    STEADY = "steady"
    FINAL = "final"


@dataclass(frozen=True, slots=True)
class Window:
    start_s: float
    end_s: float

    @property
    def length_s(self) -> float:
        return self.end_s - self.start_s

    def mask(self, t: np.ndarray) -> np.ndarray:
        return (t >= self.start_s) & (t <= self.end_s)

    def select(self, t: np.ndarray) -> slice | np.ndarray:
        """The rows of ``t`` in the window: a slice where ``t`` runs in time order (a
        column indexed by it is a view, never a copy: a week's whole-load window is most of
        a device's series), else the mask. The same rows either way."""
        if t.size and not bool(np.all(t[1:] >= t[:-1])):  # NaN or out of order
            return self.mask(t)
        lo = int(np.searchsorted(t, self.start_s, side="left"))
        hi = int(np.searchsorted(t, self.end_s, side="right"))
        return slice(lo, max(lo, hi))


@dataclass(frozen=True, slots=True)
class WindowStats:
    window: Window
    median: FieldStats  # of each window field, by name or attribute (stats.median.temp_c)
    p10: FieldStats
    p90: FieldStats
    throughput: dict[str, float | None]  # part -> work per second over the window
    throughput_cv: dict[str, float | None]  # spread of per-sample rates
    samples: dict[str, int]
    reason_share: dict[str, float | None]  # None: reasons not readable
    unknown_reason_bits: int = 0
    power_mean_w: float | None = None
    energy_basis: str | None = None  # where power_mean_w came from (ENERGY_COUNTER, ...)
    # The clocks' medians' 95 % intervals (``intervals.median_interval``): a clock that
    # swings between its floor and its maximum has a median that says little alone.
    median_interval: dict[str, tuple[float, float] | None] = field(default_factory=dict)
    # The mean SM clock reading: the work follows the clock's time mean, and where the
    # reading scatters (a power cap under a mixed load: 11 % per read on an H200) the mean
    # of the window has a third of its median's noise.
    clock_mean_mhz: float | None = None
    # Joules per unit of work of each part, from the two above. With several parts running
    # at once (``mix``) each part is charged the whole device's energy.
    energy_per_work: dict[str, float | None] = field(init=False)

    def __post_init__(self) -> None:
        for name in ("median", "p10", "p90"):  # a mapping of window fields, typed
            values = getattr(self, name)
            if not isinstance(values, FieldStats):
                object.__setattr__(self, name, FieldStats(values))
        power = self.power_mean_w
        energy = {
            part: power / rate if power is not None and rate else None
            for part, rate in self.throughput.items()
        }
        object.__setattr__(self, "energy_per_work", energy)


def cold_window(load_start_s: float, windows: Windows) -> Window:
    start = load_start_s + windows.cold_start_s
    return Window(start, start + windows.cold_length_s)


def steady_window(
    equilibrium_s: float | None, load_start_s: float, end_s: float, windows: Windows
) -> Window:
    """After equilibrium, or the end of the run. Without equilibrium it starts after the cold
    window where at least a minute is left after it; a shorter run overlaps the two (its
    steady/cold ratio is then near 1 by construction, and the run-length check says so)."""
    if equilibrium_s is not None:
        return Window(equilibrium_s, min(equilibrium_s + windows.steady_length_s, end_s))
    cold = cold_window(load_start_s, windows)
    start = end_s - windows.steady_length_s
    if start < cold.end_s:
        start = cold.end_s if end_s - cold.end_s >= MIN_SEPARATE_STEADY_S else cold.start_s
    return Window(max(start, cold.start_s), end_s)


def final_window(
    equilibrium_s: float | None, load_start_s: float, end_s: float, windows: Windows
) -> Window:
    """The last minutes of the load (the steady window's rule without a date), never
    starting before a date: a run stopped soon after equilibrium judges its end on steady
    data only, and its final window is then the end of its steady window."""
    found = steady_window(None, load_start_s, end_s, windows)
    if equilibrium_s is not None and found.start_s < equilibrium_s < found.end_s:
        return Window(equilibrium_s, found.end_s)
    return found


def load_start(first_ends: list[float]) -> float | None:
    """A device's load start from each part's first finished unit of work: when every part
    has finished one (what comes before is warm-up); None before any has."""
    return max(first_ends) if first_ends else None


def window_throughput(
    window: Window, t_start: np.ndarray, t_end: np.ndarray, work: np.ndarray
) -> float | None:
    """One part's work per second over ``window``: the work of the samples whose middle
    falls inside it over their summed time; None where none does or they took no time."""
    inside = window.mask((t_start + t_end) / 2)
    durations = (t_end - t_start)[inside]
    if not inside.any() or durations.sum() <= 0:
        return None
    return float(work[inside].sum() / durations.sum())


class LiveWork:
    """One device's work samples as a run receives them, for the live cold and steady
    figures: the analysis's own load start, windows and ``window_throughput``, so that the
    live view, the exporter and the report give one figure. Samples are kept compactly
    (three doubles each) and looked up by time, since each part's arrive in order; those no
    figure can need any more are dropped (``forget``), so a week-long soak does not grow it.
    A window's figure is asked for every tick but changes only when the samples under it do:
    it is computed again only then (the cold window is whole a minute into the load, the
    steady one ten minutes after equilibrium)."""

    def __init__(self, windows: Windows) -> None:
        self.windows = windows
        self._parts: dict[str, tuple[array, array, array]] = {}
        self._units: dict[str, str] = {}
        self._first_end: dict[str, float] = {}  # each part's first end: the load start's
        self._compact_at = _COMPACT_MIN
        self._compactions = 0  # samples move only when dropped: a slice's indices name it
        self._figures: dict[Window, dict[str, _Figure]] = {}  # the last few windows asked

    def add(self, part: str, unit: str, t_start_s: float, t_end_s: float, work: float) -> None:
        starts, ends, done = self._parts.setdefault(part, (array("d"), array("d"), array("d")))
        starts.append(t_start_s)
        ends.append(t_end_s)
        done.append(work)
        self._units[part] = unit
        self._first_end.setdefault(part, t_end_s)

    def add_columns(
        self, part: str, unit: str, t_start_s: np.ndarray, t_end_s: np.ndarray, work: np.ndarray
    ) -> None:
        """Many samples of one part at once, in time order: ``add`` of each."""
        if not np.size(t_end_s):
            return
        arrays = self._parts.setdefault(part, (array("d"), array("d"), array("d")))
        for held, values in zip(arrays, (t_start_s, t_end_s, work), strict=True):
            held.frombytes(np.ascontiguousarray(values, dtype=float).tobytes())
        self._units[part] = unit
        self._first_end.setdefault(part, float(t_end_s[0]))

    @property
    def load_start_s(self) -> float | None:
        return load_start(list(self._first_end.values()))

    @property
    def samples_held(self) -> int:
        return sum(len(ends) for _, ends, _ in self._parts.values())

    def cold(self, now_s: float) -> dict[str, float | None]:
        """Each part's cold throughput once the cold window is over, else nothing."""
        start = self.load_start_s
        if start is None:
            return {}
        window = cold_window(start, self.windows)
        return self._over(window) if now_s >= window.end_s else {}

    def steady(self, equilibrium_s: float | None, now_s: float) -> dict[str, float | None]:
        """Each part's throughput over the steady window so far, once equilibrium is dated."""
        start = self.load_start_s
        if start is None or equilibrium_s is None or now_s <= equilibrium_s:
            return {}
        return self._over(steady_window(equilibrium_s, start, now_s, self.windows))

    def forget(self, before_s: float, equilibrium_s: float | None) -> None:
        """Drop the samples that ended before ``before_s`` (no equilibrium is dated earlier:
        the detector's look-back) and lie in neither the cold window nor the steady window
        of the date held. Done in batches, so that it costs little per sample."""
        if self.samples_held < self._compact_at:
            return
        start = self.load_start_s
        keep = [] if start is None else [cold_window(start, self.windows)]
        if equilibrium_s is not None and start is not None:
            keep.append(steady_window(equilibrium_s, start, math.inf, self.windows))
        for part, arrays in self._parts.items():
            t0, t1, w = (np.frombuffer(a, dtype=float) for a in arrays)
            held = t1 >= before_s
            for window in keep:  # as ``_over`` slices: every sample whose middle may be in it
                held |= (t1 >= window.start_s) & (t0 <= window.end_s)
            if not held.all():
                self._parts[part] = tuple(array("d", a[held].tobytes()) for a in (t0, t1, w))
                self._compactions += 1
        self._compact_at = max(_COMPACT_MIN, 2 * self.samples_held)

    def unit(self, part: str) -> str:
        return self._units[part]

    @property
    def units(self) -> dict[str, str]:
        """Each part's unit of work, in the order the parts first came."""
        return dict(self._units)

    def columns(self) -> dict[str, dict[str, np.ndarray]]:
        """The samples held, per part, as the analysis reads a device's work (``t_start_s``,
        ``t_end_s``, ``work``): copies, valid after later samples come."""
        return {
            part: {
                name: np.array(a, dtype=float)
                for name, a in zip(("t_start_s", "t_end_s", "work"), arrays, strict=True)
            }
            for part, arrays in self._parts.items()
        }

    def _over(self, window: Window) -> dict[str, float | None]:
        before = self._figures.pop(window, {})
        figures = {}
        for part, arrays in self._parts.items():
            held = before.get(part)
            if held is not None and held.compactions != self._compactions:
                held = None  # the samples moved: its indices name others
            if held is None or not held.whole:
                held = self._figure(window, arrays, held)
            figures[part] = held
        self._figures[window] = figures
        while len(self._figures) > _WINDOWS_HELD:  # the oldest first
            del self._figures[next(iter(self._figures))]
        return {part: figure.value for part, figure in figures.items()}

    def _figure(
        self, window: Window, arrays: tuple[array, array, array], held: _Figure | None
    ) -> _Figure:
        """One part's figure over ``window``: ``held``'s value again while the samples under
        the window are the same ones (``held`` is from the present compaction, and samples
        are only appended between compactions)."""
        t0, t1, w = (np.frombuffer(a, dtype=float) for a in arrays)
        # samples arrive in time order: a slice a little wider than the window holds
        # every sample whose middle is inside it
        lo = int(np.searchsorted(t1, window.start_s, side="left"))
        hi = int(np.searchsorted(t0, window.end_s, side="right"))
        whole = hi < len(t0)  # a sample starts after the window: none later falls in it
        if held is not None and (held.lo, held.hi) == (lo, hi):
            value = held.value
        else:
            value = window_throughput(window, t0[lo:hi], t1[lo:hi], w[lo:hi])
        return _Figure(lo, hi, self._compactions, whole, value)


_COMPACT_MIN = 4096  # samples held before the first look for ones to drop
_WINDOWS_HELD = 4  # windows whose figures are kept: the cold one, the steady one, a margin


@dataclass(frozen=True, slots=True)
class _Figure:
    """A part's throughput over a window and the samples it was taken over: indices
    ``lo:hi`` between the same compactions; ``whole`` once no later sample can fall in."""

    lo: int
    hi: int
    compactions: int
    whole: bool
    value: float | None


def _finite(values: np.ndarray) -> np.ndarray:
    return values[np.isfinite(values)]


def _quantile(values: np.ndarray, q: float) -> float | None:
    finite = _finite(values)
    return float(np.quantile(finite, q)) if finite.size else None


def _mean_power(
    t: np.ndarray, energy: np.ndarray, power: np.ndarray
) -> tuple[float | None, str | None]:
    """Mean power over a window's readings: from the energy counter where it advanced over
    them, else the power readings integrated; and which of the two."""
    ok = np.isfinite(energy)
    if ok.sum() >= 2 and t[ok][-1] > t[ok][0]:
        joules = float(energy[ok][-1] - energy[ok][0])
        if joules >= 0:  # a counter that went backwards (reset) is not believed
            return joules / float(t[ok][-1] - t[ok][0]), ENERGY_COUNTER
    ok = np.isfinite(power)
    if ok.sum() >= 2 and t[ok][-1] > t[ok][0]:
        tp, yp = t[ok], power[ok]
        joules = float(np.sum((yp[1:] + yp[:-1]) / 2 * np.diff(tp)))
        return joules / float(tp[-1] - tp[0]), POWER_INTEGRAL
    if ok.sum() == 1:
        return float(power[ok][0]), POWER_INTEGRAL
    return None, None


# The clocks, whose medians get an interval: a clock may swing between two levels.
INTERVAL_METRICS = tuple(f.name for f in FIELDS if f.unit == "MHz")


def window_stats(
    window: Window,
    tele: Columns,
    work: dict[str, dict[str, np.ndarray]],
    unread: int = 0,
) -> WindowStats:
    """A window's statistics. ``unread`` holds the clock-event reason bits the readings
    could not tell (``fields.unread_reasons``: a log with some reasons' columns only): a
    reason among them has no share (None, "not available"), never 0."""
    t = tele.t_s
    mask = window.select(t)  # a slice where t runs in time order: views, not copies
    median, p10, p90 = {}, {}, {}
    for name in WINDOW_METRICS:
        values = _finite(tele[name][mask])  # one copy for the three quantiles
        found = values.size > 0
        median[name] = float(np.quantile(values, 0.5)) if found else None
        p10[name] = float(np.quantile(values, 0.1)) if found else None
        p90[name] = float(np.quantile(values, 0.9)) if found else None
        del values

    throughput, cv, counts = {}, {}, {}
    for part, w in work.items():
        mid = (w["t_start_s"] + w["t_end_s"]) / 2
        inside = window.select(mid)
        del mid
        durations = w["t_end_s"][inside] - w["t_start_s"][inside]
        done = w["work"][inside]
        counts[part] = int(durations.size)
        throughput[part] = window_throughput(window, w["t_start_s"], w["t_end_s"], w["work"])
        if throughput[part] is None:
            cv[part] = None
            continue
        rates = done / durations
        mean = float(np.mean(rates))
        cv[part] = float(np.std(rates)) / mean if rates.size > 1 and mean > 0 else None

    reasons = tele.clock_reasons[mask]
    readable = reasons[np.isfinite(reasons)].astype(np.int64)
    share: dict[str, float | None] = {}
    unknown = 0
    for reason in REASONS:
        hit = readable & int(reason.bits) != 0
        known = readable.size and not int(reason.bits) & unread
        share[reason.key] = float(np.mean(hit)) if known else None
    if readable.size:
        unknown = int(np.bitwise_or.reduce(readable) & ~ClockReason.known_mask())

    power, basis = _mean_power(t[mask], tele.energy_j[mask], tele.power_w[mask])
    intervals = {name: median_interval(tele[name][mask]) for name in INTERVAL_METRICS}
    clocks = tele.sm_clock_mhz[mask]
    clocks = clocks[np.isfinite(clocks)]
    clock = float(np.mean(clocks)) if clocks.size else None
    return WindowStats(
        window,
        median,
        p10,
        p90,
        throughput,
        cv,
        counts,
        share,
        unknown,
        power,
        basis,
        intervals,
        clock,
    )
