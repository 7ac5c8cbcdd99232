"""The online driver: feeds one device's readings to the state machine as checks fall due."""

from __future__ import annotations

import math

import numpy as np

from soak.analysis.equilibrium.check import CheckResult, first_check_s
from soak.analysis.equilibrium.fit import CoarseHistory, Fit, fit_exponential
from soak.analysis.equilibrium.levels import Rings, Series
from soak.analysis.equilibrium.machine import Clauses, Dated, Event, Machine, look_back_s
from soak.analysis.equilibrium.scale import Scale, chosen_at_s
from soak.analysis.equilibrium.signals import Signals
from soak.profile import Windows


class OnlineDetector:
    """Per-device equilibrium detector fed every tick; memory stays bounded (the trailing
    windows plus a coarse history for the fit), so a week-long soak does not grow it."""

    def __init__(
        self,
        windows: Windows,
        fit_every_s: float = 60.0,
        lag_s: float = 5.0,
        clauses: Clauses | None = None,
    ) -> None:
        self.windows = windows
        self.load_start_s: float | None = None
        self.fit: Fit | None = None
        self._machine = Machine(windows, clauses=clauses)  # clauses: None, all on
        self._dated: Dated | None = None
        # A check runs lag_s after its time, so that work finished before it but delivered
        # a little later by a worker is in, as it is in the offline pass.
        self._lag_s = lag_s
        self._keep_s = look_back_s(windows) + lag_s
        self._tele = _Recent(4)  # time, temperature, power, SM clock
        self._rates: dict[str, _Recent] = {}  # part -> time, rate
        # Batch levels already computed, per signal: each is computed once
        horizon = self._keep_s + windows.eq_window_s
        self._caches = {name: Rings(horizon) for name in ("temp", "power", "clock")}
        self._history = CoarseHistory()
        self._next_check: float | None = None
        self._fit_every_s = fit_every_s
        self._next_fit = 0.0

    @property
    def equilibrium_s(self) -> float | None:
        """The equilibrium date, once the rule has confirmed it (None before)."""
        return None if self._dated is None else self._dated.time_s

    @property
    def confirmed_s(self) -> float | None:
        return None if self._dated is None else self._dated.confirmed_s

    @property
    def basis(self) -> str | None:
        return self._machine.basis

    @property
    def last_check(self) -> CheckResult | None:
        return self._machine.last

    @property
    def scale(self) -> Scale | None:
        """The windows the device is judged on, once chosen (rule, line 16)."""
        return self._machine.scale

    @property
    def judged_windows(self) -> Windows:
        """The windows its checks compare: the profile's until the scale is chosen."""
        return self._machine.windows

    @property
    def reached(self) -> bool:
        return self._dated is not None

    @property
    def reach_s(self) -> float:
        """How far before now a date this detector makes can lie: what it reads back."""
        return self._keep_s + self.windows.eq_window_s

    @property
    def rows_held(self) -> int:
        """Telemetry rows held for the checks still to come (bounded by the windows)."""
        return len(self._tele)

    def reason(self, now_s: float) -> str:
        """Why equilibrium is not reached yet ("" once it is)."""
        if self.reached or self.load_start_s is None:
            return ""
        return self._machine.reason(now_s - self.load_start_s)

    def start(self, load_start_s: float) -> None:
        self.load_start_s = load_start_s
        self._machine.load_start_s = load_start_s
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
        if t_s <= self._tele.last_t:  # out of order: levels holding its time may be stale
            for cache in self._caches.values():
                cache.forget_from(t_s)
        self._tele.append(row)
        if self.load_start_s is not None and t_s >= self.load_start_s and temp_c is not None:
            self._history.add(t_s, temp_c)

    def add_columns(
        self, t_s: np.ndarray, temp_c: np.ndarray, power_w: np.ndarray, sm_clock_mhz: np.ndarray
    ) -> None:
        """Many readings at once, in time order after those held (NaN: not read): what
        ``add_telemetry`` of each row does, without a call per row."""
        t = np.asarray(t_s, dtype=float)
        if not t.size:
            return
        if t[0] <= self._tele.last_t or (t.size > 1 and not np.all(np.diff(t) > 0)):
            for row in zip(t, temp_c, power_w, sm_clock_mhz, strict=True):
                self.add_telemetry(*(None if math.isnan(v) else float(v) for v in row))
            return
        self._tele.extend(np.vstack((t, temp_c, power_w, sm_clock_mhz)))
        if self.load_start_s is not None:
            keep = (t >= self.load_start_s) & ~np.isnan(temp_c)
            self._history.add_many(t[keep], np.asarray(temp_c, dtype=float)[keep])

    def add_rates(self, part: str, t_mid_s: np.ndarray, rate: np.ndarray) -> None:
        """Many of one part's rates at once, in time order: ``add_rate`` of each."""
        t = np.asarray(t_mid_s, dtype=float)
        if not t.size:
            return
        recent = self._rates.get(part)
        ordered = t.size == 1 or bool(np.all(np.diff(t) > 0))
        if recent is None or t[0] <= recent.last_t or not ordered:
            for ti, ri in zip(t.tolist(), np.asarray(rate).tolist(), strict=True):
                self.add_rate(part, ti, ri)
            return
        recent.extend(np.vstack((t, rate)))

    def add_rate(self, part: str, t_mid_s: float, rate: float) -> None:
        if part not in self._rates:
            self._rates[part] = _Recent(2)
            self._caches[part] = Rings(self._caches["temp"].horizon_s)
        recent = self._rates[part]
        if t_mid_s <= recent.last_t:  # out of order: levels holding its time may be stale
            self._caches[part].forget_from(t_mid_s)
        recent.append((t_mid_s, rate))

    def due_s(self) -> float:
        """The earliest time ``update`` has anything to do (a check, the scale's choice, or
        rows to move into the array): a call before it changes nothing and returns no
        events, so a caller stepping many ticks at once may skip it. Valid until the next
        reading or ``start``."""
        if self._tele.pending >= _FLUSH_ROWS:
            return -math.inf
        due = math.inf if self._next_check is None else self._next_check + self._lag_s
        start = self.load_start_s
        if start is not None and self._machine.scale is None:
            due = min(due, chosen_at_s(start, self.windows) + self._lag_s)
        return due

    def update(self, now_s: float) -> list[Event]:
        """Make every check whose time has passed; returns what they changed, in order."""
        due = self._next_check is not None and now_s >= self._next_check + self._lag_s
        if due or self._tele.pending >= _FLUSH_ROWS:
            self._trim(now_s)
        start = self.load_start_s
        if (
            start is not None
            and self._machine.scale is None
            and now_s >= chosen_at_s(start, self.windows) + self._lag_s
        ):  # rule, line 16: the windows chosen once, before the first check
            self._machine.choose_scale(self._signals())
            self._next_check = first_check_s(start, self._machine.windows)
        events: list[Event] = []
        while self._next_check is not None and now_s >= self._next_check + self._lag_s:
            if not self._machine.idle(self._next_check):
                events += self._machine.step(self._next_check, self._signals())
            self._next_check = self._machine.next_check_s(self._next_check)
        for event in events:
            self._dated = event if isinstance(event, Dated) else None
        return events

    def _refit(self, now_s: float) -> Fit | None:
        """The exponential fit of the temperature so far, made again where ``fit_every_s``
        has passed since the last: only where a prediction is asked for (a watcher, the
        sequential stop), so that a run no one watches does not pay for it."""
        if now_s >= self._next_fit and self.load_start_s is not None:
            self._next_fit = now_s + self._fit_every_s
            t, y = self._history.arrays()
            self.fit = fit_exponential(t, y, self.load_start_s)
        return self.fit

    def eta_s(self, now_s: float) -> float | None:
        """Predicted seconds until the rule confirms equilibrium, from the fit; 0 once it
        has. Confirmation comes at the model's first passing check, plus the further
        checks, plus the lag."""
        if self.reached:
            return 0.0
        fit = self._refit(now_s)
        if fit is None:
            return None
        w = self._machine.windows
        after = (w.eq_checks - 1) * w.eq_check_interval_s + self._lag_s
        predicted = fit.predicted_check_s(w) + after
        # Never promise sooner than the checks still needed can be made.
        needed = self._machine.passes_needed() - 1
        earliest = (self._next_check or now_s) + needed * w.eq_check_interval_s + self._lag_s
        eta = max(predicted, earliest, now_s) - now_s
        return eta if math.isfinite(eta) else None  # a model that predicts nothing usable

    def _signals(self) -> Signals:
        tele, caches = self._tele.columns(), self._caches
        t = tele[0]
        temp, power, clock = (
            Series(t, tele[i], caches[name])
            for i, name in ((1, "temp"), (2, "power"), (3, "clock"))
        )
        rates = {}
        for part, recent in self._rates.items():
            columns = recent.columns()
            rates[part] = Series(columns[0], columns[1], caches[part])
        return Signals(temp, power, clock, rates)

    def _trim(self, now_s: float) -> None:
        horizon = now_s - self._keep_s
        self._tele.trim(horizon)
        for recent in self._rates.values():
            recent.trim(horizon)


_FLUSH_ROWS = 64  # rows gathered in a list before they join the array


class _Recent:
    """The latest rows of a few columns, time first: gathered in a list as they come, moved
    into one array (a row per column, so that each column is contiguous) when read or
    trimmed; the array grows only while the rows held (those since the trim horizon) do,
    and is reused after."""

    def __init__(self, columns: int, capacity: int = 256) -> None:
        self._data = np.empty((columns, capacity))
        self._start = self._end = 0
        self._pending: list[tuple[float, ...]] = []
        self.last_t = -math.inf

    def __len__(self) -> int:
        return self._end - self._start + len(self._pending)

    @property
    def pending(self) -> int:
        return len(self._pending)

    def append(self, row: tuple[float, ...]) -> None:
        self._pending.append(row)
        if row[0] > self.last_t:
            self.last_t = row[0]

    def extend(self, block: np.ndarray) -> None:
        """Many rows at once, a row per column (times after those held, in order)."""
        self._flush()
        self._put(block)
        self.last_t = max(self.last_t, float(block[0, -1]))

    def trim(self, horizon_s: float) -> None:
        """Drop the rows before ``horizon_s`` (rows come in time order)."""
        self._flush()
        if self._end == self._start or self._data[0, self._start] >= horizon_s:
            return
        times = self._data[0, self._start : self._end]
        self._start += int(np.searchsorted(times, horizon_s, side="left"))

    def columns(self) -> np.ndarray:
        """The rows held, a row per column: a view, valid until the next trim or read."""
        self._flush()
        return self._data[:, self._start : self._end]

    def _flush(self) -> None:
        if not self._pending:
            return
        new = np.array(self._pending, dtype=float)
        self._pending = []
        self._put(new.T)

    def _put(self, block: np.ndarray) -> None:
        """Rows (a row per column) after those held, into the array."""
        rows = block.shape[1]
        held = self._end - self._start
        capacity = self._data.shape[1]
        if self._end + rows > capacity:
            size = capacity
            while held + rows > size // 2:  # mostly live: make room
                size *= 2
            data = np.empty((self._data.shape[0], size)) if size > capacity else self._data
            data[:, :held] = self._data[:, self._start : self._end].copy()
            self._data, self._start, self._end = data, 0, held
        self._data[:, self._end : self._end + rows] = block
        self._end += rows
