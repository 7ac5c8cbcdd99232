"""What the live stop decision holds of one device's telemetry: bounded by the windows, not
by the run's length.

A look of ``--until-steady`` judges a device on its cold window, its steady window (from
its equilibrium date, ``steady_length_s`` long) and its final window (the last
``steady_length_s`` of its load), and on the smallest step its clocks read in over the
whole run. ``HeldTelemetry`` keeps the readings those can still need (the idle baseline
before the run's load start and a trace's first ``HEAD_S``, which tell a warm start; the
cold window; the steady window of the date held; the readings since ``keep_from``) and
drops the rest in batches; ``Steps`` keeps the distinct values a clock has read, which a
sensor's bins bound. Both are fed as the run goes (a tick's rows, or a block's columns).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from operator import attrgetter

import numpy as np

from soak.analysis.warmstart import HEAD_S
from soak.analysis.windows import Window
from soak.fields import COLUMNS, Columns

_COMPACT_MIN = 2048  # rows held before the first look for rows to drop


class Steps:
    """The distinct values each of a few fields has read (NaN left out): what
    ``noise._step`` takes of the whole run's readings, kept as a sorted array per field.
    Readings gather in a list and join the array when the step is asked for or the list
    grows long, so a tick costs an append."""

    def __init__(self, keys: Iterable[str]) -> None:
        self._distinct = {key: np.empty(0) for key in keys}
        self._pending: dict[str, list[np.ndarray]] = {key: [] for key in self._distinct}
        self._count = 0
        self._at = [(key, COLUMNS.index(key)) for key in self._distinct]
        self._rows: list[tuple[float, ...]] = []

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(self._distinct)

    def add(self, columns: Mapping[str, np.ndarray]) -> None:
        for key, pending in self._pending.items():
            values = columns.get(key)
            if values is not None:
                pending.append(np.asarray(values, dtype=float).ravel())
        self._count += 1
        if self._count >= 256:
            self._fold()

    def add_row(self, row: tuple[float, ...]) -> None:
        """One reading in ``COLUMNS`` order."""
        self._rows.append(row)
        if len(self._rows) >= 4096:
            self._fold()

    def step(self, key: str) -> float | None:
        """The smallest step between two distinct readings; None with fewer than two."""
        self._fold()
        distinct = self._distinct[key]
        return float(np.diff(distinct).min()) if distinct.size >= 2 else None

    def held(self) -> int:
        return sum(v.size for v in self._distinct.values())

    def _fold(self) -> None:
        if self._rows:
            rows = np.array([[row[i] for _, i in self._at] for row in self._rows], dtype=float)
            for k, (key, _) in enumerate(self._at):
                self._pending[key].append(rows[:, k])
            self._rows = []
        for key, pending in self._pending.items():
            if pending:
                new = np.concatenate(pending)
                self._distinct[key] = np.union1d(self._distinct[key], new[np.isfinite(new)])
                pending.clear()
        self._count = 0


class HeldTelemetry:
    """One device's telemetry rows the stop decision can still judge (see the module).

    ``load_start_s`` (the run's, where its baseline ends) and the device's own load start
    are given when known; rows come in time order."""

    def __init__(self) -> None:
        self._rows: list[tuple[float, ...]] = []  # a tick's rows, before they join the arrays
        self._blocks: list[np.ndarray] = []  # column-major blocks, (len(COLUMNS), n)
        self._data = np.empty((len(COLUMNS), 0))
        self._compact_at = _COMPACT_MIN
        self._blocked_rows = 0  # rows in ``_blocks``
        self.run_load_start_s: float | None = None  # rows before it: the idle baseline
        self.first_s: float | None = None  # the first reading's time (a trace's head)

    def __len__(self) -> int:
        return self._data.shape[1] + len(self._rows) + self._blocked_rows

    def add_row(self, row: tuple[float, ...]) -> None:
        """One reading, its values in ``COLUMNS`` order (NaN: not read)."""
        if self.first_s is None:
            self.first_s = row[0]
        self._rows.append(row)

    def add_columns(self, columns: Mapping[str, np.ndarray]) -> None:
        """Many readings as columns (``t_s`` and any fields; a field not given: not read)."""
        t = np.asarray(columns["t_s"], dtype=float)
        if not t.size:
            return
        self._flush_rows()
        block = np.full((len(COLUMNS), t.size), np.nan)
        for i, name in enumerate(COLUMNS):
            values = columns.get(name)
            if values is not None:
                block[i] = values
        if self.first_s is None:
            self.first_s = float(t[0])
        self._blocks.append(block)
        self._blocked_rows += t.size

    def columns(self) -> Columns:
        """The rows held, as the analysis reads a device's series."""
        self._join()
        return Columns(dict(zip(COLUMNS, self._data, strict=True)))

    def forget(self, keep_from_s: float, keep: Iterable[Window]) -> None:
        """Drop the rows before ``keep_from_s`` that lie in none of ``keep``, the baseline
        or a trace's head; in batches, so it costs little per row."""
        if len(self) < self._compact_at:
            return
        self._join()
        t = self._data[0]
        held = t >= keep_from_s
        if self.run_load_start_s is not None:
            held |= t < self.run_load_start_s
        if self.first_s is not None:
            held |= t <= self.first_s + HEAD_S
        for window in keep:
            held |= window.mask(t)
        if not held.all():
            self._data = self._data[:, held].copy()
        self._compact_at = max(_COMPACT_MIN, 2 * self._data.shape[1])

    def _flush_rows(self) -> None:
        if self._rows:
            self._blocks.append(np.array(self._rows, dtype=float).T)
            self._blocked_rows += len(self._rows)
            self._rows = []

    def _join(self) -> None:
        self._flush_rows()
        if self._blocks:
            self._data = np.concatenate([self._data, *self._blocks], axis=1)
            self._blocks = []
            self._blocked_rows = 0


_FIELDS = attrgetter(*COLUMNS)


def row_of(reading: object) -> tuple[float, ...]:
    """A reading's (a ``Telemetry``'s) values in ``COLUMNS`` order, NaN where not read."""
    nan = math.nan
    return tuple(nan if v is None else v for v in _FIELDS(reading))
