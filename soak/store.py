"""The run store: one SQLite file per run.

Metadata (host, config, devices, capabilities) is written once; telemetry, work samples
and events are appended every tick, one transaction per tick, in WAL mode, so that the
file is readable while the run goes on and intact up to the last committed tick after a
crash. Read back as numpy arrays, with NaN where a value could not be read.

The series that grow with the run (telemetry, work samples, ddp steps) are columnar: a
tick's rows land in its table (the *tail*, in the order written, rowids given by the writer),
and once one key (a device; a device's part) holds ``BLOCK_ROWS`` rows there, every tail row
so far is packed into column blocks (``soak.blocks``), one device a tick, each pack in the
transaction of its tick. A block says up to which tail rowid it holds its device's rows:
readers read those from the blocks and the rest from the tail, and the rows packed are then
deleted from the tail a range of rowids at a time. ``append_block`` writes many ticks as
blocks at once. Reading one device is its blocks (``np.frombuffer`` on a few dozen BLOBs)
and then its tail, in one read transaction, into arrays allocated once per column that
moves.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import itertools
import json
import math
import operator
import os
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from soak.blocks import Assembler, Block, decode, encode
from soak.dataset import WORK_COLUMNS, DeviceSeries, WorkColumns, work_of
from soak.errors import ConfigError, StoreError
from soak.fields import INTEGER_COLUMNS, Columns
from soak.model import (
    TELEMETRY_FIELDS,
    TELEMETRY_METRICS,
    Capability,
    DeviceInfo,
    Event,
    EventKind,
    ServerReading,
    ServerStep,
    SyncStep,
    Telemetry,
    WorkSample,
)
from soak.record import DECISION_KEY, RUN_KEY, RunMeta, Salvage, StopDecision
from soak.validity import Implausible, screen_all, screen_columns

# Version of the table layout below. 1: first layout. 2: adds sync_steps and server_steps
# (the ddp workload's per-rank timing and the server's synchronous steps); a version-1 store
# reads as one without them. A version-2 store may hold an ``implausible`` table (readings
# outside their plausible range, soak.validity): one without it has none flagged, and a
# ``server_readings`` table (the BMC's server-level series: inlet, chassis temperatures): one
# without it has no BMC readings. 3: columnar: adds telemetry_blocks, work_blocks and
# sync_steps_blocks (a key's rows as one BLOB, soak.blocks; ``tail_rowid``: its device's rows
# of the row table up to that rowid are in blocks, and read from them); the row tables keep
# each device's newest rows (a run shorter than ``BLOCK_ROWS`` ticks is stored as version 2
# stored it). A version-1 or -2 store reads as one without blocks.
STORE_VERSION = 3
READABLE_VERSIONS = ("1", "2", "3")
STORE_NAME = "soak.sqlite"


_SCHEMA = f"""
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE devices (idx INTEGER PRIMARY KEY, info TEXT NOT NULL);
CREATE TABLE capabilities (
    device INTEGER NOT NULL, metric TEXT NOT NULL, status TEXT NOT NULL,
    PRIMARY KEY (device, metric));
CREATE TABLE telemetry (
    device INTEGER NOT NULL, t_s REAL NOT NULL,
    {", ".join(f"{m} {'INTEGER' if m in INTEGER_COLUMNS else 'REAL'}" for m in TELEMETRY_METRICS)});
CREATE INDEX telemetry_device_t ON telemetry (device, t_s);
CREATE TABLE work (
    device INTEGER NOT NULL, t_start_s REAL NOT NULL, t_end_s REAL NOT NULL,
    part TEXT NOT NULL, work REAL NOT NULL, unit TEXT NOT NULL,
    verified INTEGER, verify_error REAL);
CREATE INDEX work_device_t ON work (device, t_end_s);
CREATE TABLE events (
    t_s REAL NOT NULL, device INTEGER, kind TEXT NOT NULL, message TEXT NOT NULL,
    details TEXT NOT NULL);
CREATE TABLE sync_steps (
    device INTEGER NOT NULL, t_start_s REAL NOT NULL, t_end_s REAL NOT NULL,
    iterations INTEGER NOT NULL, compute_s REAL NOT NULL, wait_s REAL NOT NULL,
    step_s REAL NOT NULL, allreduce_b INTEGER, allreduce_s REAL);
CREATE INDEX sync_steps_device_t ON sync_steps (device, t_end_s);
CREATE TABLE implausible (
    device INTEGER NOT NULL, t_s REAL NOT NULL, metric TEXT NOT NULL, value REAL NOT NULL,
    low REAL, high REAL);
CREATE TABLE server_readings (t_s REAL NOT NULL, series TEXT NOT NULL, value REAL);
CREATE INDEX server_readings_series_t ON server_readings (series, t_s);
CREATE TABLE server_steps (
    t_start_s REAL NOT NULL, t_end_s REAL NOT NULL, samples REAL NOT NULL,
    step_s REAL NOT NULL, straggler INTEGER NOT NULL, ranks INTEGER NOT NULL);
CREATE TABLE telemetry_blocks (
    device INTEGER NOT NULL, first_s REAL NOT NULL, last_s REAL NOT NULL,
    rows INTEGER NOT NULL, tail_rowid INTEGER NOT NULL, data BLOB NOT NULL);
CREATE INDEX telemetry_blocks_device ON telemetry_blocks (device, tail_rowid);
CREATE TABLE work_blocks (
    device INTEGER NOT NULL, part TEXT NOT NULL, unit TEXT NOT NULL, first_s REAL NOT NULL,
    last_s REAL NOT NULL, rows INTEGER NOT NULL, tail_rowid INTEGER NOT NULL, data BLOB NOT NULL);
CREATE INDEX work_blocks_device ON work_blocks (device, tail_rowid);
CREATE TABLE sync_steps_blocks (
    device INTEGER NOT NULL, first_s REAL NOT NULL, last_s REAL NOT NULL,
    rows INTEGER NOT NULL, tail_rowid INTEGER NOT NULL, data BLOB NOT NULL);
CREATE INDEX sync_steps_blocks_device ON sync_steps_blocks (device, tail_rowid);
"""
_SYNC_COLUMNS = ("t_start_s", "t_end_s", "iterations", "compute_s", "wait_s", "step_s")
_SYNC_COLUMNS += ("allreduce_b", "allreduce_s")
_SERVER_COLUMNS = ("t_start_s", "t_end_s", "samples", "step_s", "straggler", "ranks")


def _insert_sql(table: str, columns: Sequence[str]) -> str:
    """A tail's insert, each row's rowid given last (``RunStore._keyed``)."""
    return f"INSERT INTO {table} ({', '.join(columns)}, rowid) VALUES (?{', ?' * len(columns)})"


_WORK_ROW = ("device", "t_start_s", "t_end_s", "part", "work", "unit", "verified", "verify_error")
_INSERT_TELEMETRY = _insert_sql("telemetry", TELEMETRY_FIELDS)
_INSERT_WORK = _insert_sql("work", _WORK_ROW)
_INSERT_EVENT = "INSERT INTO events VALUES (?, ?, ?, ?, ?)"
_INSERT_SYNC = _insert_sql("sync_steps", [f.name for f in dataclasses.fields(SyncStep)])
_INSERT_SERVER = "INSERT INTO server_steps VALUES (?, ?, ?, ?, ?, ?)"
_INSERT_IMPLAUSIBLE = "INSERT INTO implausible VALUES (?, ?, ?, ?, ?, ?)"
_INSERT_READING = "INSERT INTO server_readings VALUES (?, ?, ?)"

# A key's tail rows that begin an epoch of packing: 4.6 hours of one device at 1-s ticks. A
# week is 37 blocks a device, read in a fraction of a second; packing one device's (reading
# its rows back) takes about a tenth of a second, inside one tick; a tail holds under two
# epochs (read as rows: a few tenths of a second), and a run shorter than one holds no block.
BLOCK_ROWS = 16384


@dataclass(frozen=True, slots=True, eq=False)  # one of each: hashed as itself, at once
class _Series:
    """A series the store keeps columnar: its row table (the tail), the columns a block of
    it holds (in their declared order), what a block is of (``keys``), and the time column
    its rows are read in the order of."""

    table: str
    keys: tuple[str, ...]
    time: str
    columns: tuple[str, ...]

    @property
    def blocks(self) -> str:
        return f"{self.table}_blocks"

    @property
    def where(self) -> str:
        return " AND ".join(f"{key}=?" for key in self.keys)


_WORK_COLUMNS = WORK_COLUMNS
_TELEMETRY = _Series("telemetry", ("device",), "t_s", TELEMETRY_FIELDS[1:])
_WORK = _Series("work", ("device", "part", "unit"), "t_end_s", _WORK_COLUMNS)
_SYNC = _Series("sync_steps", ("device",), "t_end_s", _SYNC_COLUMNS)
_SERIES = (_TELEMETRY, _WORK, _SYNC)
Key = tuple[Any, ...]  # one block's key: (device,) or (device, part, unit)


_KEY_OF = {series: operator.attrgetter(*series.keys) for series in _SERIES}


@dataclass(frozen=True, slots=True)
class _Packing:
    """Where the writer's packing stands: each key's rows in its tail not yet in a block,
    the epoch being packed (every tail row up to ``epoch`` goes into blocks, one device
    of one series a tick: ``todo``), and the tail rows trimmed so far (deleted once
    packed). A plan only: which rows a block holds, and so which rows a pack starts from
    and a trim may delete, is read from the blocks, so that a group of ticks rolled back
    (a commit that failed) can never have rows deleted that no block holds."""

    tail: dict[_Series, dict[Key, int]]
    epoch: int | None = None
    todo: tuple[tuple[_Series, int], ...] = ()
    trim_to: int = 0  # the tail rows up to here are in blocks (where the blocks say so)
    trimmed: int = 0  # the tail rows up to here are deleted (where the blocks hold them)


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def _dumps(value: Any) -> str:
    return json.dumps(value, default=_json_default, sort_keys=True)


_CHUNK_ROWS = 4096  # rows read at a time into a store's arrays

# One C-level call per row on the per-tick path, in the column order of _INSERT_TELEMETRY.
_telemetry_row = operator.attrgetter(*TELEMETRY_FIELDS)


def _bound(value: float) -> float | None:
    """A range's bound for the store: None where there is none (infinite)."""
    return value if math.isfinite(value) else None


def _compact(column: np.ndarray) -> np.ndarray:
    """A column that holds one value throughout (a limit, a counter that never moved, a
    field the device does not read: NaN) as a read-only view of that value, which takes no
    memory per row; any other as its own contiguous array, so that the rows it was read
    with are freed. Most of a device's columns hold still: a week of 1-s readings holds
    5 MiB per column per device."""
    if column.size and (column.view(np.int64) == column[:1].view(np.int64)).all():
        return np.broadcast_to(column[:1].copy(), column.shape)  # the same bits throughout
    return np.ascontiguousarray(column)


def _reading_row(r: ServerReading) -> tuple[Any, ...]:
    value = None if r.value is None or not math.isfinite(r.value) else r.value
    return (r.t_s, r.series, value)


def _work_row(w: WorkSample) -> tuple[Any, ...]:
    verified = None if w.verified is None else int(w.verified)
    return (w.device, w.t_start_s, w.t_end_s, w.part, w.work, w.unit, verified, w.verify_error)


def _event_row(e: Event) -> tuple[Any, ...]:
    return (e.t_s, e.device, str(e.kind), e.message, _dumps(e.details))


class StoreDamaged(StoreError):
    """The store's file is there but SQLite, or its content, says it is damaged: what is
    left may be salvaged (``salvage``)."""


def _translate(exc: sqlite3.Error, path: Path) -> StoreError:
    text = str(exc)
    if "full" in text:
        return StoreError(f"{path}: disk full ({text})")
    return StoreError(f"{path}: {text}")


def _text(*values: Any) -> None:
    """Columns that must hold text: SQLite would hand back a BLOB written there as bytes."""
    for value in values:
        if not isinstance(value, str):
            raise TypeError(f"{value!r:.40} where text belongs")


@contextlib.contextmanager
def _reading(path: Path) -> Iterator[None]:
    """Damage found while reading (a torn copy, a flipped bit, a hand-edited file) is one
    StoreError naming the file, never a traceback from deep inside the report."""
    try:
        yield
    except (sqlite3.Error, ValueError, TypeError) as exc:  # ValueError: JSON, UTF-8, enums
        raise StoreDamaged(f"{path}: damaged run store ({exc})") from exc


class RunStore:
    """One run's SQLite file. Use ``create`` to start a run and ``open`` to read one."""

    def __init__(
        self,
        path: Path,
        conn: sqlite3.Connection,
        max_commit_delay_s: float = 0.0,
        block_rows: int = BLOCK_ROWS,
    ) -> None:
        self.path = path
        self._conn = conn
        # 0 commits every append (every tick of a real run). A simulated run on a virtual
        # clock ticks thousands of times a second, and sets a small wall-time delay so that
        # its ticks are committed in groups: a crash then loses at most that much wall time.
        self.max_commit_delay_s = max_commit_delay_s
        self._last_commit = time.monotonic()
        self._power_limits: dict[int, float | None] = {}  # as probed: validity's power bound
        self.salvaged: Salvage | None = None  # what a salvage got back (``salvage``)
        self.block_rows = block_rows
        # The writer's packing (a count of each key's tail rows not yet packed: keys in the
        # order they first came, the order their blocks are packed in), and its count of each
        # key's rows in the blocks ``append_block`` wrote smaller than a block. Counts are
        # hints: a pack reads what is there.
        self._packing = _Packing({series: {} for series in _SERIES})
        self._small: dict[_Series, dict[Key, int]] = {series: {} for series in _SERIES}
        self._schema: dict[str, list[str]] = {}  # each table's columns, read once
        # The tail's rowids, given by the writer in the order written and never used twice
        # (SQLite's own start again at 1 in an emptied table): a block says up to which
        # tail rowid of its device it holds.
        self._seq = 1

    # -- writing ---------------------------------------------------------------------

    @classmethod
    def create(
        cls, path: str | Path, max_commit_delay_s: float = 0.0, block_rows: int | None = None
    ) -> RunStore:
        """A new store at ``path``; ``block_rows``: rows of one key per block (tests and
        benches change it; None: ``BLOCK_ROWS``)."""
        path = Path(path)
        if path.exists():
            raise StoreError(f"{path}: a run store already exists here; refusing to overwrite")
        try:
            conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            # NORMAL in WAL: a committed tick survives a crash of the process (not of the
            # machine's power), at a fraction of FULL's cost.
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.executescript(_SCHEMA)
            conn.execute("INSERT INTO meta VALUES ('store_version', ?)", (str(STORE_VERSION),))
        except sqlite3.Error as exc:
            raise _translate(exc, path) from exc
        rows = BLOCK_ROWS if block_rows is None else block_rows
        return cls(path, conn, max_commit_delay_s, rows)

    def set_meta(self, **values: Any) -> None:
        """Record run-level metadata once (config, host, versions, stop reason...)."""
        rows = [(key, _dumps(value)) for key, value in values.items()]
        self._write("INSERT OR REPLACE INTO meta VALUES (?, ?)", rows)

    def set_stop_decision(self, decision: StopDecision) -> None:
        """Keep the sequential stop the run stopped on (or an import's replayed one): the
        one writer of meta ``stop_decision``, read back typed in ``RunMeta.stop_decision``."""
        self.set_meta(**{DECISION_KEY: decision.to_json()})

    def add_devices(self, infos: Iterable[DeviceInfo]) -> None:
        infos = list(infos)
        rows = [(info.index, _dumps(dataclasses.asdict(info))) for info in infos]
        self._write("INSERT OR REPLACE INTO devices VALUES (?, ?)", rows)
        self._power_limits.update({info.index: info.power_limit_w for info in infos})

    def add_capabilities(self, table: Mapping[int, Mapping[str, Capability | str]]) -> None:
        rows = [
            (device, metric, str(status))
            for device, metrics in table.items()
            for metric, status in metrics.items()
        ]
        self._write("INSERT OR REPLACE INTO capabilities VALUES (?, ?, ?)", rows)

    def append(
        self,
        telemetry: Iterable[Telemetry] = (),
        samples: Iterable[WorkSample] = (),
        events: Iterable[Event] = (),
        sync_steps: Iterable[SyncStep] = (),
        server_steps: Iterable[ServerStep] = (),
        implausible: Sequence[Implausible] | None = None,
        server_readings: Iterable[ServerReading] = (),
    ) -> None:
        """Append one tick's data; a tick lands whole or not at all. Committed at once, or
        with the next tick past ``max_commit_delay_s`` of wall time.

        Each tick is its own savepoint inside the open transaction: a tick that fails half
        way (disk full, a KeyboardInterrupt) is undone alone, and the ticks grouped before it
        still land with the next commit.

        Telemetry is stored as read; each reading that cannot be true (``soak.validity``) is
        flagged beside it, and ``telemetry`` reads it back as not available. ``implausible``:
        those readings where the caller has screened the rows already (the runner).

        Once a key's tail holds ``block_rows`` rows, every tail row written so far is packed
        into blocks, one device of one series a tick (``_pack_due``), each pack in the
        transaction of its tick: a block is there and says which rows it holds, or it is
        not, and those rows are read from the tail."""
        telemetry = list(telemetry)
        samples = list(samples)
        sync_steps = list(sync_steps)
        if implausible is None:
            implausible = screen_all(telemetry, self._power_limits)
        flagged = [
            (f.device, f.t_s, f.field, f.value, _bound(f.low), _bound(f.high)) for f in implausible
        ]
        added: dict[_Series, dict[Key, int]] = {}
        tele_rows = self._keyed(_TELEMETRY, telemetry, map(_telemetry_row, telemetry), added)
        work_rows = self._keyed(_WORK, samples, map(_work_row, samples), added)
        sync_rows = self._keyed(_SYNC, sync_steps, map(dataclasses.astuple, sync_steps), added)
        brought = len(telemetry) + len(samples) + len(sync_steps)
        packing = self._packing
        tail = packing.tail
        due = (
            packing.epoch is not None
            or packing.trimmed < packing.trim_to
            or _fills_a_block(tail, added, self.block_rows)
        )
        with self._tick() as cur:
            cur.executemany(_INSERT_TELEMETRY, tele_rows)
            if flagged:
                cur.executemany(_INSERT_IMPLAUSIBLE, flagged)
            cur.executemany(_INSERT_WORK, work_rows)
            cur.executemany(_INSERT_EVENT, map(_event_row, events))
            cur.executemany(_INSERT_SYNC, sync_rows)
            cur.executemany(_INSERT_SERVER, map(dataclasses.astuple, server_steps))
            cur.executemany(_INSERT_READING, map(_reading_row, server_readings))
            if due:
                packing = self._pack_due(cur, added, brought >= self.block_rows)
        if due:  # the tick landed: so did its packing
            self._packing = packing
        else:
            for series, counts in added.items():
                for key, rows in counts.items():
                    tail[series][key] = tail[series].get(key, 0) + rows
        self._commit_due()

    def append_block(
        self,
        telemetry: Mapping[int, Mapping[str, np.ndarray]] | None = None,
        work: Iterable[WorkColumns] = (),
        events: Iterable[Event] = (),
        sync_steps: Mapping[int, Mapping[str, np.ndarray]] | None = None,
        server_steps: Iterable[ServerStep] = (),
        implausible: Sequence[Implausible] | None = None,
        server_readings: Iterable[ServerReading] = (),
    ) -> None:
        """Append many ticks at once, in one transaction, as ``append`` takes one: each
        device's telemetry as column arrays (``t_s`` and any of the registry's fields; a field
        not given, or NaN, is not read), its work per part (``WorkColumns``) and its ddp steps
        (``SyncStep``'s fields but ``device``) each written as one block, the events, server
        steps and readings as rows. Lands whole or not at all, committed as ``append``'s.

        Readings that cannot be true are flagged as ``append`` flags them (screened here by
        ``soak.validity.screen_columns`` unless ``implausible`` is given). Blocks smaller than
        ``block_rows`` are merged, once a key's reach ``block_rows`` rows, into one."""
        blocks: list[tuple[_Series, Key, dict[str, np.ndarray]]] = []
        for device, columns in (telemetry or {}).items():
            blocks.append((_TELEMETRY, (device,), _checked(_TELEMETRY, columns)))
        for part in work:
            key = (part.device, part.part, part.unit)
            _text(part.part, part.unit)
            blocks.append((_WORK, key, _checked(_WORK, part.columns())))
        for device, columns in (sync_steps or {}).items():
            blocks.append((_SYNC, (device,), _checked(_SYNC, columns)))
        blocks = [block for block in blocks if block[2][block[0].time].size]
        if implausible is None:
            implausible = [
                found
                for series, key, columns in blocks
                if series is _TELEMETRY
                for found in screen_columns(key[0], columns, self._power_limits.get(key[0]))
            ]
        flagged = [
            (f.device, f.t_s, f.field, f.value, _bound(f.low), _bound(f.high)) for f in implausible
        ]
        small: dict[tuple[_Series, Key], int] = {}  # each key's rows in small blocks now
        with self._tick() as cur:
            for series, key, columns in blocks:
                rows = self._write_block(cur, series, key, columns)
                if rows >= self.block_rows:
                    continue
                loose = small.get((series, key), self._small[series].get(key, 0)) + rows
                if loose >= self.block_rows:
                    self._merge(cur, series, key)
                    loose = 0
                small[series, key] = loose
            cur.executemany(_INSERT_IMPLAUSIBLE, flagged)
            cur.executemany(_INSERT_EVENT, map(_event_row, events))
            cur.executemany(_INSERT_SERVER, map(dataclasses.astuple, server_steps))
            cur.executemany(_INSERT_READING, map(_reading_row, server_readings))
        for (series, key), rows in small.items():
            self._small[series][key] = rows
        self._commit_due()

    @contextlib.contextmanager
    def _tick(self) -> Iterator[sqlite3.Cursor]:
        """One tick's (or one block's) writes as a savepoint inside the open transaction:
        undone alone where they fail, and the StoreError names the file."""
        cur = self._conn.cursor()
        try:
            if not self._conn.in_transaction:
                cur.execute("BEGIN")
            cur.execute("SAVEPOINT tick")
        except sqlite3.Error as exc:
            raise _translate(exc, self.path) from exc
        try:
            yield cur
            cur.execute("RELEASE tick")
        except sqlite3.Error as exc:
            self._undo_tick()
            raise _translate(exc, self.path) from exc
        except BaseException:
            self._undo_tick()  # a second Ctrl-C is held back while writing; a last resort
            raise

    def _keyed(
        self,
        series: _Series,
        records: Sequence[Any],
        rows: Iterable[tuple[Any, ...]],
        added: dict[_Series, dict[Key, int]],
    ) -> list[tuple[Any, ...]]:
        """Each row with its tail rowid last, and the rows of each key counted into
        ``added``."""
        if not records:
            return []
        counts = added.setdefault(series, {})
        get, single = _KEY_OF[series], len(series.keys) == 1
        for key in map(get, records):
            key = (key,) if single else key
            counts[key] = counts.get(key, 0) + 1
        first = self._seq
        self._seq += len(records)  # rows rolled back leave their rowids unused
        return list(map(tuple.__add__, rows, zip(itertools.count(first))))

    def _commit_due(self) -> None:
        if time.monotonic() - self._last_commit >= self.max_commit_delay_s:
            self.commit()

    def _pack_due(
        self, cur: sqlite3.Cursor, added: Mapping[_Series, Mapping[Key, int]], all_due: bool
    ) -> _Packing:
        """The packing after this tick: once a key's tail holds a block, an epoch begins
        (every tail row written so far), and each tick packs one device of one series of it
        (all of them, where the tick brought a block's rows or more: an import); once the
        epoch is packed, each tick deletes a block's worth of its rows from the tails, a
        range of rowids, whole pages. So no tick holds more than one device's pack."""
        old = self._packing
        tail = {series: dict(counts) for series, counts in old.tail.items()}
        for series, counts in added.items():
            for key, rows in counts.items():
                tail[series][key] = tail[series].get(key, 0) + rows
        epoch, todo = old.epoch, list(old.todo)
        trim_to, trimmed = old.trim_to, old.trimmed
        if epoch is None and _holds_a_block(tail, self.block_rows):
            epoch = self._seq - 1
            todo = [
                (series, device)
                for series in _SERIES
                for device in dict.fromkeys(key[0] for key, rows in tail[series].items() if rows)
            ]
        packing = epoch is not None
        if epoch is not None:
            for series, device in todo[: len(todo) if all_due else 1]:
                low = self._packed_to(series, device)
                keys = [key for key in tail[series] if key[0] == device]  # as they came
                found = self._pack(cur, series, keys, low, epoch)
                for key, rows in found.items():
                    tail[series][key] = max(0, tail[series].get(key, 0) - rows)
            todo = todo[len(todo) if all_due else 1 :]
            if not todo:
                epoch, trim_to = None, epoch
        if trimmed < trim_to and (all_due or not packing):
            upto = trim_to if all_due else min(trim_to, trimmed + self.block_rows)
            trimmed = self._trim(cur, upto)
        return _Packing(tail, epoch, tuple(todo), trim_to, trimmed)

    def _trim(self, cur: sqlite3.Cursor, upto: int) -> int:
        """Delete the tail rows up to rowid ``upto`` that their device's blocks hold: a range
        of rowids in each tail, whole pages freed."""
        for series in _SERIES:
            held = f"SELECT MAX(tail_rowid) FROM {series.blocks} b WHERE b.device = t.device"
            cur.execute(
                f"DELETE FROM {series.table} AS t WHERE rowid <= ? AND rowid <= ({held})", (upto,)
            )
        return upto

    def _pack(
        self, cur: sqlite3.Cursor, series: _Series, keys: list[Key], low: int, high: int
    ) -> dict[Key, int]:
        """One device's tail rows of one series with rowids in (low, high] as blocks, one a
        key (``keys``: the device's, in the order they came; an import's rows in blocks of
        twice ``block_rows`` at most), each saying up to which tail rowid its device's rows
        are in blocks: the rows stay in the tail until their epoch is trimmed, hidden from
        readers by that. Returns the rows packed per key."""
        device = keys[0][0]
        names = [name for name in series.columns if name in self._table_columns(series.table)]
        chunk = 2 * self.block_rows * len(keys)  # an import's rows: blocks of 2 blocks' rows
        found: dict[Key, int] = {}
        while True:
            array = self._tail_rows(series, keys, names, (device, low, high, chunk))
            if len(array) and np.isnan(array[:, 1]).any():  # a key the writer did not count
                more = [k for k in self._tail_keys(series, device, low, high) if k not in keys]
                if not more:
                    raise StoreDamaged(f"{self.path}: damaged run store (a tail row's key)")
                keys, chunk = keys + more, 2 * self.block_rows * (len(keys) + len(more))
                continue
            if not len(array):
                return found
            last = int(array[-1, 0]) if len(array) == chunk else high
            for k, key in enumerate(keys):
                rows = array[array[:, 1] == k]
                if len(rows):
                    columns = {name: rows[:, i + 2] for i, name in enumerate(names)}
                    self._write_block(cur, series, key, columns, last)
                    found[key] = found.get(key, 0) + len(rows)
            if len(array) < chunk:
                return found
            low = last

    def _tail_rows(
        self, series: _Series, keys: list[Key], names: list[str], args: tuple[int, ...]
    ) -> np.ndarray:
        """A device's tail rows in a rowid range, in rowid order: rowid, the row's key as
        its place in ``keys`` (NaN: none of them), and ``names``."""
        if len(series.keys) > 1:
            code = (
                "CASE "
                + " ".join(f"WHEN part=? AND unit=? THEN {k}" for k in range(len(keys)))
                + " END"
            )
            codes = tuple(value for key in keys for value in key[1:])
        else:
            code, codes = "0", ()
        select = (
            f"SELECT rowid, {code}, {', '.join(names)} FROM {series.table} "
            f"INDEXED BY {series.table}_device_t "
            "WHERE device=? AND rowid > ? AND rowid <= ? ORDER BY rowid LIMIT ?"
        )
        try:
            return self._float_rows(select, (*codes, *args), len(names) + 2, 0)
        except (ValueError, TypeError) as exc:  # a value no number: damage
            raise StoreDamaged(f"{self.path}: damaged run store ({exc})") from exc

    def _tail_keys(self, series: _Series, device: int, low: int, high: int) -> list[Key]:
        """A device's keys in a tail's rowid range, as the rows say."""
        found = self._conn.execute(
            f"SELECT DISTINCT {', '.join(series.keys)} FROM {series.table} "
            "WHERE device=? AND rowid > ? AND rowid <= ?",
            (device, low, high),
        ).fetchall()
        return [tuple(row) for row in found]

    def _write_block(
        self,
        cur: sqlite3.Cursor,
        series: _Series,
        key: Key,
        columns: Mapping[str, np.ndarray],
        tail_rowid: int = 0,
    ) -> int:
        """One block of ``key``'s rows; ``tail_rowid``: its device's tail rows up to it are
        in blocks (0: a block write's, of no tail)."""
        t = columns[series.time]
        names = ", ".join((*series.keys, "first_s", "last_s", "rows", "tail_rowid", "data"))
        marks = ", ".join("?" * (len(series.keys) + 5))
        row = (*key, float(t.min()), float(t.max()), int(t.size), tail_rowid, encode(columns))
        cur.execute(f"INSERT INTO {series.blocks} ({names}) VALUES ({marks})", row)
        return int(t.size)

    def _merge(self, cur: sqlite3.Cursor, series: _Series, key: Key) -> None:
        """A key's blocks from the block write smaller than ``block_rows`` as one block, in
        time order."""
        found = cur.execute(
            f"SELECT rowid, rows, data FROM {series.blocks} WHERE {series.where} "
            "AND rows < ? AND tail_rowid = 0 ORDER BY first_s, rowid",
            (*key, self.block_rows),
        ).fetchall()
        try:
            blocks = [_block(rows, data) for _, rows, data in found]
        except ValueError as exc:
            raise StoreDamaged(f"{self.path}: damaged run store ({exc})") from exc
        assembler = Assembler(series.columns, sum(block.rows for block in blocks))
        for block in blocks:
            assembler.add(block.rows, block.columns, block.still)
        columns = _in_time_order(assembler.columns(compact=False), series.time)
        self._write_block(cur, series, key, columns)
        cur.executemany(
            f"DELETE FROM {series.blocks} WHERE rowid=?", [(rowid,) for rowid, _, _ in found]
        )

    def commit(self) -> None:
        """Commit whatever is pending."""
        if self._conn.in_transaction:
            try:
                self._conn.execute("COMMIT")
            except sqlite3.Error as exc:
                self._rollback()
                raise _translate(exc, self.path) from exc
        self._last_commit = time.monotonic()

    def _write(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        self.commit()
        try:
            self._conn.execute("BEGIN")
            self._conn.executemany(sql, rows)
            self._conn.execute("COMMIT")
        except sqlite3.Error as exc:
            self._rollback()
            raise _translate(exc, self.path) from exc
        except BaseException:  # interrupted: all of it or none
            self._rollback()
            raise

    def _undo_tick(self) -> None:
        # A connection too broken to roll back has already failed; the caller reports that.
        with contextlib.suppress(sqlite3.Error):
            self._conn.execute("ROLLBACK TO tick")
            self._conn.execute("RELEASE tick")

    def _rollback(self) -> None:
        if self._conn.in_transaction:
            # A failed rollback means the connection is already broken; the caller reports
            # the first error.
            with contextlib.suppress(sqlite3.Error):
                self._conn.execute("ROLLBACK")

    def close(self) -> None:
        """Commit, delete the tail rows already packed, checkpoint the WAL into the main file
        and close. Each key's rows not packed stay rows (under about a block of them): a run
        shorter than a block is stored as rows."""
        self.commit()
        packing = self._packing
        if packing.trimmed < packing.trim_to:
            # a store that cannot take the delete (a full disk) keeps them, hidden: no loss
            with contextlib.suppress(StoreError), self._tick() as cur:
                trimmed = self._trim(cur, packing.trim_to)
                self._packing = dataclasses.replace(packing, trimmed=trimmed)
            with contextlib.suppress(StoreError):
                self.commit()
        # A failed checkpoint loses nothing: the WAL is replayed on the next open.
        with contextlib.suppress(sqlite3.Error):
            self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self._conn.close()

    def close_read(self) -> None:
        """Close a store opened for reading (no checkpoint: a writer may still be on it)."""
        self._conn.close()

    # -- reading ---------------------------------------------------------------------

    @classmethod
    def open(cls, path: str | Path) -> RunStore:
        """Open a store for reading, also one whose writer is running or was killed."""
        given = Path(path)
        path = given / STORE_NAME if given.is_dir() else given
        if not path.is_file():
            raise StoreError(f"{given}: not a soak run folder (no {STORE_NAME})")
        conn = None
        try:
            conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            row = conn.execute("SELECT value FROM meta WHERE key='store_version'").fetchone()
        except (sqlite3.Error, ValueError) as exc:
            if conn is not None:
                conn.close()
            raise StoreDamaged(f"{path}: not a soak run store ({exc})") from exc
        found = None if row is None else row[0]
        if found not in READABLE_VERSIONS:
            conn.close()
            raise StoreError(
                f"{path}: store version {found!r} is not one this soak reads ({STORE_VERSION})"
            )
        return cls(path, conn)

    @contextlib.contextmanager
    def _snapshot(self) -> Iterator[None]:
        """Reads that see one state of the file: a writer that packs a tail into a block
        between a read of the blocks and a read of the tail would have those rows read twice
        or not at all. The writer's own connection, in its transaction, is one state."""
        if self._conn.in_transaction:
            yield
            return
        self._conn.execute("BEGIN")
        try:
            yield
        finally:
            with contextlib.suppress(sqlite3.Error):
                self._conn.execute("ROLLBACK")

    def _table_columns(self, table: str) -> list[str]:
        """The columns ``table`` has in this store (none: no such table), read once."""
        if table not in self._schema:
            self._schema[table] = _table_columns(self._conn, table)
        return self._schema[table]

    def meta(self) -> RunMeta:
        """The meta table, typed (``soak.record.RunMeta``); a salvaged store's says what the
        salvage got back. An entry of the wrong type is damage."""
        try:
            meta = RunMeta.from_json(self._meta_entries())
        except ValueError as exc:
            raise StoreDamaged(f"{self.path}: damaged run store ({exc})") from exc
        return meta if self.salvaged is None else dataclasses.replace(meta, salvage=self.salvaged)

    def _meta_entries(self) -> dict[str, Any]:
        with _reading(self.path):
            rows = self._conn.execute("SELECT key, value FROM meta").fetchall()
            return {key: json.loads(value) for key, value in rows}

    def devices(self) -> list[DeviceInfo]:
        known = {f.name for f in dataclasses.fields(DeviceInfo)}
        out = []
        with _reading(self.path):
            rows = self._conn.execute("SELECT info FROM devices ORDER BY idx").fetchall()
            for (text,) in rows:
                data = json.loads(text)
                if not isinstance(data, dict):
                    raise TypeError(f"device record {text[:40]!r} is not an object")
                out.append(DeviceInfo(**{k: v for k, v in data.items() if k in known}))
        return out

    def capabilities(self) -> dict[int, dict[str, str]]:
        table: dict[int, dict[str, str]] = {}
        with _reading(self.path):
            rows = self._conn.execute(
                "SELECT device, metric, status FROM capabilities ORDER BY 1, 2"
            ).fetchall()
            for device, metric, status in rows:
                _text(metric, status)
                table.setdefault(device, {})[metric] = status
        return table

    def telemetry(self, device: int, as_read: bool = False) -> Columns:
        """Every telemetry column of one device as float arrays ordered by time; NaN where
        the value could not be read, and where it was read but cannot be true (flagged
        implausible), unless ``as_read``. Memory: this device's columns that move, once."""
        with _reading(self.path), self._snapshot():
            columns = self._series(_TELEMETRY, (device,))
            flags = [] if as_read else self.implausible(device)
        t = columns["t_s"]
        for flag in flags:
            k = int(np.searchsorted(t, flag.t_s))
            if k < t.size and t[k] == flag.t_s and flag.field in columns:
                column = columns[flag.field]
                if not column.flags.writeable:  # one value throughout: one reading apart now
                    column = columns[flag.field] = np.array(column)
                column[k] = math.nan
        flagged = {flag.field for flag in flags if flag.field in columns}
        return Columns({name: _compact(c) if name in flagged else c for name, c in columns.items()})

    def device_series(self, info: DeviceInfo, units: Mapping[str, str]) -> DeviceSeries:
        """One device's series for the run dataset (``soak.dataset``): its telemetry, its
        work per part (``units``: each part's unit), its ddp steps and its readings flagged
        impossible. Memory: this device's columns that move, once."""
        index = info.index
        return DeviceSeries(
            info,
            self.telemetry(index),
            work_of(index, self.work(index), units),
            self.sync_steps(index),
            tuple(self.implausible(index)),
        )

    def telemetry_times(self, device: int) -> np.ndarray:
        """One device's telemetry times alone, in order (its one column read and decoded):
        what sets a figure's time axis before any device's series is read."""
        with _reading(self.path), self._snapshot():
            return self._series(_TELEMETRY, (device,), names=("t_s",))["t_s"]

    def _series(
        self,
        series: _Series,
        key: Key,
        compact: bool = True,
        names: Sequence[str] | None = None,
    ) -> dict[str, np.ndarray]:
        """One key's columns (``names``: those only, the time column among them; None:
        all): its blocks in time order, then its tail's rows, read in chunks into arrays
        allocated once (a still column as one value where ``compact``). Rows out of time
        order (blocks written out of order) are put in it, ties as written."""
        wanted = tuple(series.columns if names is None else names)
        blocks = self._block_list(series, key)
        tail = [name for name in wanted if name in self._table_columns(series.table)]
        where = f"WHERE {series.where} AND rowid > ?"
        key = (*key, self._packed_to(series, key[0]))
        (count,) = self._conn.execute(
            f"SELECT COUNT(*) FROM {series.table} {where}", key
        ).fetchone()
        assembler = Assembler(wanted, count + sum(rows for _, rows in blocks))
        for rowid, rows in blocks:
            block = self._block(series, rowid, rows, names)
            assembler.add(block.rows, block.columns, block.still)
        select = f"SELECT {', '.join(tail)} FROM {series.table} {where} ORDER BY {series.time}"
        cursor = self._conn.execute(select, key)
        while rows := cursor.fetchmany(_CHUNK_ROWS):
            chunk = np.array(rows, dtype=float).reshape(len(rows), len(tail))
            assembler.add(len(chunk), {name: chunk[:, i] for i, name in enumerate(tail)})
        return _in_time_order(assembler.columns(compact), series.time)

    def _block_list(self, series: _Series, key: Key) -> list[tuple[int, int]]:
        """Each block of one key (rowid, rows), in time order; none in a store before v3."""
        if not self._table_columns(series.blocks):
            return []
        found = self._conn.execute(
            f"SELECT rowid, rows FROM {series.blocks} WHERE {series.where} ORDER BY first_s, rowid",
            key,
        ).fetchall()
        return [(int(rowid), int(rows)) for rowid, rows in found]

    def _packed_to(self, series: _Series, device: int) -> int:
        """Up to which tail rowid a device's rows of a series are in blocks: those rows are
        read from the blocks (the tail keeps them until their epoch is trimmed)."""
        if "tail_rowid" not in self._table_columns(series.blocks):
            return 0  # a store before version 3
        (top,) = self._conn.execute(
            f"SELECT MAX(tail_rowid) FROM {series.blocks} WHERE device=?", (device,)
        ).fetchone()
        return int(top or 0)

    def _block(
        self, series: _Series, rowid: int, rows: int, names: Sequence[str] | None = None
    ) -> Block:
        (data,) = self._conn.execute(
            f"SELECT data FROM {series.blocks} WHERE rowid=?", (rowid,)
        ).fetchone()
        return _block(rows, data, names)

    def implausible(self, device: int) -> list[Implausible]:
        """The readings of one device flagged as impossible, in time order."""
        with _reading(self.path):
            if not self._table_columns("implausible"):
                return []
            rows = self._conn.execute(
                "SELECT t_s, metric, value, low, high FROM implausible WHERE device=? "
                "ORDER BY t_s, rowid",
                (device,),
            ).fetchall()
        out = []
        for t_s, name, value, low, high in rows:
            _text(name)
            low = -math.inf if low is None else float(low)
            high = math.inf if high is None else float(high)
            out.append(Implausible(device, float(t_s), name, float(value), low, high))
        return out

    def work(self, device: int) -> dict[str, dict[str, np.ndarray]]:
        """Per workload part: t_start_s, t_end_s, work, verified (1/0/NaN), verify_error; the
        parts in the order of their first unit of work."""
        with _reading(self.path), self._snapshot():
            packed = self._packed_to(_WORK, device)
            parts, counts = self._parts(device, packed)
            if not parts:
                return {}
            blocks = {part: self._work_blocks(device, part) for part in parts}
            assemblers = {
                part: Assembler(
                    _WORK_COLUMNS, counts.get(part, 0) + sum(rows for _, rows in blocks[part])
                )
                for part in parts
            }
            for part in parts:
                for rowid, rows in blocks[part]:
                    block = self._block(_WORK, rowid, rows)
                    assemblers[part].add(block.rows, block.columns, block.still)
            # the tail in one pass, every part at once, each row's part as its place in parts
            code = "CASE part " + " ".join(f"WHEN ? THEN {k}" for k in range(len(parts))) + " END"
            cursor = self._conn.execute(
                f"SELECT {code}, {', '.join(_WORK_COLUMNS)} FROM work "
                "WHERE device=? AND rowid > ? ORDER BY t_end_s",
                (*parts, device, packed),
            )
            width = len(_WORK_COLUMNS) + 1
            while rows := cursor.fetchmany(_CHUNK_ROWS):
                chunk = np.array(rows, dtype=float).reshape(len(rows), width)
                for k, part in enumerate(parts):
                    mine = chunk[chunk[:, 0] == k]  # in time order, as read
                    columns = {name: mine[:, i + 1] for i, name in enumerate(_WORK_COLUMNS)}
                    assemblers[part].add(len(mine), columns)
        return {part: _in_time_order(assemblers[part].columns(), "t_end_s") for part in parts}

    def _work_blocks(self, device: int, part: str) -> list[tuple[int, int]]:
        """A device's blocks of one part (rowid, rows), in time order, whatever their unit."""
        if not self._table_columns(_WORK.blocks):
            return []
        found = self._conn.execute(
            "SELECT rowid, rows FROM work_blocks WHERE device=? AND part=? ORDER BY first_s, rowid",
            (device, part),
        ).fetchall()
        return [(int(rowid), int(rows)) for rowid, rows in found]

    def _parts(self, device: int, packed: int) -> tuple[list[str], dict[str, int]]:
        """A device's parts in the order of their first unit of work, as one read in time
        order finds them (blocks before the tail at the same time, each as written), and
        each part's rows in the tail (past ``packed``)."""
        # SQLite gives the rowid of the row holding the MIN
        first: dict[str, tuple[float, int, int]] = {}
        if self._table_columns(_WORK.blocks):
            found = self._conn.execute(
                "SELECT part, MIN(first_s), rowid FROM work_blocks WHERE device=? GROUP BY part",
                (device,),
            ).fetchall()
            first.update({part: (t, 0, rowid) for part, t, rowid in found})
        found = self._conn.execute(
            "SELECT part, COUNT(*), MIN(t_end_s), rowid FROM work WHERE device=? AND rowid > ? "
            "GROUP BY part",
            (device, packed),
        ).fetchall()
        for part, _, t, rowid in found:
            first[part] = min(first.get(part, (math.inf, 2, 0)), (t, 1, rowid))
        _text(*first)
        return sorted(first, key=first.__getitem__), {row[0]: row[1] for row in found}

    def _float_rows(
        self, select: str, args: tuple[Any, ...], width: int, expected: int
    ) -> np.ndarray:
        """The rows of ``select`` as one float array (rows, width), None read as NaN, taken
        in chunks: a week-long run's rows never exist as Python objects all at once (they
        take several times the array's memory). ``expected`` rows, as counted before (0:
        not counted): rows beyond it, such as a running writer's after the count, are taken
        too."""
        out = np.empty((int(expected), width))
        filled = 0
        cursor = self._conn.execute(select, args)
        while rows := cursor.fetchmany(_CHUNK_ROWS):
            chunk = np.array(rows, dtype=float).reshape(len(rows), width)
            if filled + len(chunk) > len(out):  # grown since counted: room for as much again
                grown = np.empty((max(filled + len(chunk), 2 * len(out)), width))
                grown[:filled] = out[:filled]
                out = grown
            out[filled : filled + len(chunk)] = chunk
            filled += len(chunk)
        return out if filled == len(out) else out[:filled].copy()

    def sync_steps(self, device: int) -> dict[str, np.ndarray]:
        """One device's synchronous (ddp) steps by column, in time order; empty arrays in a
        run without them (or a version-1 store)."""
        with _reading(self.path), self._snapshot():
            if not self._table_columns("sync_steps"):
                return {name: np.empty(0) for name in _SYNC_COLUMNS}
            # A missing optional value (no all-reduce that step) reads as NaN.
            return self._series(_SYNC, (device,), compact=False)

    def server_steps(self) -> dict[str, np.ndarray]:
        """The server's synchronous steps by column, in time order (empty where none)."""
        with _reading(self.path):
            if not self._table_columns("server_steps"):
                return {name: np.empty(0) for name in _SERVER_COLUMNS}
            # not counted first (a row per step): the array grows as the rows come
            select = f"SELECT {', '.join(_SERVER_COLUMNS)} FROM server_steps ORDER BY t_end_s"
            array = self._float_rows(select, (), len(_SERVER_COLUMNS), 0)
        return {name: array[:, i] for i, name in enumerate(_SERVER_COLUMNS)}

    def server_readings(self) -> dict[str, dict[str, np.ndarray]]:
        """The server-level series (``soak.model.ServerReading``) by name: ``t_s`` and
        ``value`` (NaN: not read), in time order; empty for a store written before them."""
        with _reading(self.path):
            if not self._table_columns("server_readings"):
                return {}
            rows = self._conn.execute(
                "SELECT series, t_s, value FROM server_readings ORDER BY series, t_s, rowid"
            ).fetchall()
        by_series: dict[str, list[tuple[float, float]]] = {}
        for series, t_s, value in rows:
            _text(series)
            by_series.setdefault(series, []).append(
                (float(t_s), math.nan if value is None else float(value))
            )
        return {
            name: {"t_s": np.array([r[0] for r in rs]), "value": np.array([r[1] for r in rs])}
            for name, rs in by_series.items()
        }

    def units(self) -> dict[str, str]:
        """The unit of each workload part's work, the parts in the order they first came
        (those packed into blocks first)."""
        with _reading(self.path), self._snapshot():
            pairs = []
            if self._table_columns(_WORK.blocks):
                pairs += self._conn.execute(
                    "SELECT part, unit FROM work_blocks GROUP BY part, unit ORDER BY MIN(rowid)"
                ).fetchall()
            pairs += self._conn.execute("SELECT DISTINCT part, unit FROM work").fetchall()
            for pair in pairs:
                _text(*pair)
        return dict(pairs)

    def events(self) -> list[Event]:
        with _reading(self.path):
            rows = self._conn.execute(
                "SELECT t_s, device, kind, message, details FROM events ORDER BY t_s, rowid"
            ).fetchall()
            events = []
            for t, dev, kind, msg, det in rows:
                _text(kind, msg)
                details = json.loads(det)
                if not isinstance(details, dict):
                    raise TypeError(f"event details {det[:40]!r} are not an object")
                events.append(Event(t, EventKind(kind), msg, dev, details))
        return events

    def last_t_s(self) -> float | None:
        """Time of the last stored telemetry tick, or None for an empty store."""
        with _reading(self.path), self._snapshot():
            (value,) = self._conn.execute("SELECT MAX(t_s) FROM telemetry").fetchone()
            if self._table_columns(_TELEMETRY.blocks):
                (packed,) = self._conn.execute(
                    "SELECT MAX(last_s) FROM telemetry_blocks"
                ).fetchone()
                found = [v for v in (value, packed) if v is not None]
                value = max(found) if found else None
        return value

    def telemetry_rows(self) -> int:
        """Telemetry samples stored, of every device: in blocks and in rows."""
        with _reading(self.path), self._snapshot():
            if "tail_rowid" not in self._table_columns(_TELEMETRY.blocks):
                (count,) = self._conn.execute("SELECT COUNT(*) FROM telemetry").fetchone()
                return int(count)
            (count,) = self._conn.execute(
                "SELECT COUNT(*) FROM telemetry t LEFT JOIN (SELECT device, MAX(tail_rowid) "
                "AS packed FROM telemetry_blocks GROUP BY device) b ON b.device = t.device "
                "WHERE t.rowid > COALESCE(b.packed, 0)"
            ).fetchone()
            (packed,) = self._conn.execute(
                "SELECT COALESCE(SUM(rows), 0) FROM telemetry_blocks"
            ).fetchone()
        return int(count + packed)


def _holds_a_block(tail: Mapping[_Series, Mapping[Key, int]], block_rows: int) -> bool:
    return any(rows >= block_rows for counts in tail.values() for rows in counts.values())


def _fills_a_block(
    tail: Mapping[_Series, Mapping[Key, int]],
    added: Mapping[_Series, Mapping[Key, int]],
    block_rows: int,
) -> bool:
    """Whether the rows ``added`` bring a key's tail to a block."""
    for series, counts in added.items():
        known = tail[series]
        for key, rows in counts.items():
            if known.get(key, 0) + rows >= block_rows:
                return True
    return False


def _checked(series: _Series, columns: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A block's columns as ``append_block`` takes them: known names, float arrays of one
    length, the time column there and finite."""
    unknown = sorted(set(columns) - set(series.columns))
    if unknown:
        raise ValueError(f"not {series.table} columns: {', '.join(unknown)}")
    if series.time not in columns:
        raise ValueError(f"{series.table} block without its time column {series.time}")
    out = {
        name: np.asarray(columns[name], dtype=float) for name in series.columns if name in columns
    }
    sizes = {column.shape for column in out.values()}
    if len(sizes) != 1 or len(next(iter(sizes))) != 1:
        raise ValueError(f"{series.table} block columns of shapes {sorted(sizes)}")
    if not np.isfinite(out[series.time]).all():
        raise ValueError(f"{series.table} block with a time that is not a number")
    return out


def _block(rows: int, data: Any, names: Sequence[str] | None = None) -> Block:
    """A block as read (``names``: those columns only), checked against the row count its
    table gives it."""
    block = decode(data, names)
    if block.rows != rows:
        raise ValueError(f"a column block of {block.rows} rows where its table says {rows}")
    return block


def _in_time_order(columns: dict[str, np.ndarray], time_column: str) -> dict[str, np.ndarray]:
    """The columns with their rows in the order of ``time_column``, ties in the order read
    (only blocks written out of order need it: a still column stays as it is)."""
    t = columns[time_column]
    if t.size < 2 or not (t[1:] < t[:-1]).any():
        return columns
    order = np.argsort(t, kind="stable")
    return {name: c if c.strides == (0,) else c[order] for name, c in columns.items()}


MIN_FREE_BYTES = 64 * 2**20  # refuse to start a soak on a disk with less free space


def make_run_dir(out: Path, host: str, now: dt.datetime) -> Path:
    """Create ``OUT/<host>/<UTC stamp>/`` after checking it can be written; never reuses a
    folder. Raises ConfigError (exit 2) before anything is created when it cannot."""
    out = Path(out)
    probe = out
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
        raise ConfigError(f"--out {out}: not a writable folder ({probe} is not writable)")
    usage = shutil.disk_usage(probe)
    if usage.total == 0:  # /proc, /sys: a filesystem that holds no files
        raise ConfigError(
            f"--out {out}: cannot create the folder: {probe} is on a filesystem that holds no files"
        )
    free = usage.free
    if free < MIN_FREE_BYTES:
        raise ConfigError(
            f"--out {out}: only {free / 2**20:.0f} MiB free; soak needs at least 64 MiB"
        )
    stamp = now.strftime("%Y%m%dT%H%M%SZ")
    base = out / host
    run_dir = base / stamp
    suffix = 1
    while run_dir.exists():
        run_dir = base / f"{stamp}-{suffix}"
        suffix += 1
    try:
        run_dir.mkdir(parents=True)
    except OSError as exc:
        raise ConfigError(f"--out {out}: cannot create {run_dir} ({exc.strerror})") from exc
    except ValueError as exc:  # a NUL in the path
        raise ConfigError(f"--out {str(out)!r}: not a usable path ({exc})") from exc
    return run_dir


# -- salvage ---------------------------------------------------------------------------------

_TABLES = ("meta", "devices", "capabilities", "telemetry", "work", "events")
# a store written before them has none: not damage
_OPTIONAL_TABLES = ("implausible", "server_readings")
# version 3's blocks, salvaged beside their tails (a block whole, or left out); the ddp steps
# are not salvaged, neither their rows nor their blocks
_BLOCK_TABLES = (_TELEMETRY.blocks, _WORK.blocks)
SALVAGE_FAILED_READS = 4000  # reads of damaged rows tried per table before giving it up


def is_sqlite_file(path: Path) -> bool:
    """Whether the file starts as an SQLite database does (then damage may be salvaged)."""
    try:
        with open(path, "rb") as f:
            return f.read(16) == b"SQLite format 3\x00"
    except OSError:
        return False


def truncated(path: Path) -> bool:
    """Whether the file is shorter than its own header says (a copy that stopped, a disk
    that filled). Unknown (an old header, a WAL beside it) reads as not truncated."""
    try:
        with open(path, "rb") as f:
            header = f.read(100)
        size = path.stat().st_size
    except OSError:
        return False
    if len(header) < 100 or Path(f"{path}-wal").exists():
        return len(header) < 100
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    valid = header[24:28] == header[92:96]  # the page count is kept up to date
    return valid and pages > 0 and size < pages * page_size


def _read_range(
    conn: sqlite3.Connection, sql: str, lo: int, hi: int, budget: list[int]
) -> tuple[list[tuple[Any, ...]], bool]:
    """Rows of ``sql`` (a rowid range query) from ``lo`` to ``hi``; where a range cannot be
    read, its halves are, down to single rows, until ``budget`` failed reads are spent.
    Returns the rows and whether every row in the range was read."""
    try:
        return conn.execute(sql, (lo, hi)).fetchall(), True
    except sqlite3.DatabaseError:
        budget[0] -= 1
        if lo >= hi or budget[0] <= 0:
            return [], False
    mid = (lo + hi) // 2
    first, ok_first = _read_range(conn, sql, lo, mid, budget)
    second, ok_second = _read_range(conn, sql, mid + 1, hi, budget)
    return first + second, ok_first and ok_second


def _salvage_table(
    src: sqlite3.Connection, table: str, size_b: int
) -> tuple[list[tuple[Any, ...]], bool]:
    """Every row of ``table`` that SQLite can still read (its rowid first), by rowid range
    around damage."""
    try:
        (top,) = src.execute(f"SELECT MAX(rowid) FROM {table}").fetchone()
    except sqlite3.DatabaseError:
        top = size_b // 8  # no row is smaller than 8 bytes: an upper bound
    if top is None:
        return [], True
    # with its rowid: a tail's rowids say which of its rows a block holds
    sql = f"SELECT rowid, * FROM {table} WHERE rowid BETWEEN ? AND ?"
    return _read_range(src, sql, 1, int(top), [SALVAGE_FAILED_READS])


def _table_columns(conn: sqlite3.Connection, table: str) -> list[str]:
    """The columns ``table`` has in this store, in order (a store written before a
    telemetry field existed has no column for it)."""
    return [row[1] for row in conn.execute(f"PRAGMA table_info({table})").fetchall()]


def _insert(
    dst: sqlite3.Connection, table: str, rows: list[tuple[Any, ...]], columns: list[str]
) -> None:
    """Rows into the salvaged copy, by the source's column names; one row too damaged to
    keep (a NULL where the table forbids it) is left out alone."""
    names = ", ".join(columns[: len(rows[0])])
    sql = f"INSERT OR IGNORE INTO {table} ({names}) VALUES ({', '.join('?' * len(rows[0]))})"
    try:
        dst.executemany(sql, rows)
    except sqlite3.Error:
        for row in rows:
            with contextlib.suppress(sqlite3.Error):
                dst.execute(sql, row)


def salvage(path: str | Path) -> tuple[RunStore, Salvage]:
    """Read what SQLite can still read of a damaged store, table by table and row range by
    row range, into a store in memory that reads like the original; and what was got back.

    Raises StoreError (one line) when even the run's own metadata cannot be read."""
    path = Path(path)
    path = path / STORE_NAME if path.is_dir() else path
    with tempfile.TemporaryDirectory(prefix="soak-salvage-") as tmp:
        copy = Path(tmp) / STORE_NAME
        wal = Path(f"{path}-wal")
        try:
            shutil.copyfile(path, copy)
            if wal.exists():  # committed ticks not yet checkpointed into the file
                shutil.copyfile(wal, f"{copy}-wal")
            _fit_header(copy, keep_wal=wal.exists())
        except OSError as exc:
            raise StoreError(f"{path}: damaged run store, cannot be copied ({exc})") from exc
        return _salvage_copy(path, copy)


def _fit_header(copy: Path, keep_wal: bool) -> None:
    """Make a copy's header agree with what is left of it: the page count of the pages
    present (SQLite refuses every read of a file shorter than its header says), and the
    rollback journal instead of WAL where no -wal file came with it."""
    size = copy.stat().st_size
    with open(copy, "r+b") as f:
        header = bytearray(f.read(100))
        if len(header) < 100:
            return
        page_size = int.from_bytes(header[16:18], "big")
        page_size = 65536 if page_size == 1 else page_size
        if page_size < 512 or page_size & (page_size - 1):
            return  # the header itself is damaged: SQLite will say so
        pages = size // page_size
        header[28:32] = pages.to_bytes(4, "big")
        header[92:96] = header[24:28]  # the page count is valid for this change counter
        if not keep_wal:
            header[18] = header[19] = 1
        f.seek(0)
        f.write(header)
        f.truncate(pages * page_size)


def _salvage_copy(path: Path, copy: Path) -> tuple[RunStore, Salvage]:
    try:
        src = sqlite3.connect(copy, isolation_level=None, check_same_thread=False)
    except sqlite3.Error as exc:
        raise StoreError(f"{path}: damaged run store, nothing recoverable ({exc})") from exc
    size = copy.stat().st_size
    dst = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    dst.executescript(_SCHEMA)
    store = RunStore(path, dst)
    whole: dict[str, bool] = {}
    try:
        listed = _tables_listed(src)
        for table in (*_TABLES, *_OPTIONAL_TABLES, *_BLOCK_TABLES):
            if table not in _TABLES and listed is not None and table not in listed:
                whole[table] = table in _OPTIONAL_TABLES  # blocks: the version says below
                continue
            whole[table] = _salvage_into(dst, src, table, size)
            if table == "meta":  # without the run's own, the rest is not worth reading
                version = _salvaged_version(store)
        count, last = store.telemetry_rows(), store.last_t_s()
    except BaseException:
        dst.close()
        raise
    finally:
        src.close()
    tables = _TABLES + (_BLOCK_TABLES if version == STORE_VERSION else ())
    missing = tuple(t for t in tables if not whole[t])
    found = Salvage(count, None if last is None else float(last), missing)
    store.salvaged = found
    return store, found


def _salvage_into(dst: sqlite3.Connection, src: sqlite3.Connection, table: str, size: int) -> bool:
    """What SQLite can still read of one table, into the salvaged copy (of a block table,
    the blocks that read whole); whether all of it was read."""
    try:
        rows, whole = _salvage_table(src, table, size)
        columns = ["rowid", *(_table_columns(src, table) or _table_columns(dst, table))]
    except sqlite3.DatabaseError:  # the table's own schema is unreadable
        rows, whole, columns = [], False, []
    if table in _BLOCK_TABLES:
        kept = _whole_blocks(rows, columns)
        whole = whole and len(kept) == len(rows)
        rows = kept
    if rows:
        _insert(dst, table, rows, columns)
    return whole


def _salvaged_version(store: RunStore) -> int:
    """The salvaged meta's store version; StoreError (one line) where the run's own
    metadata cannot be read or is lost."""
    try:
        entries = store._meta_entries()
        store.meta()  # every entry of its type
    except StoreError as exc:
        raise StoreError(
            f"{store.path}: damaged run store, its metadata unreadable ({exc})"
        ) from exc
    version = entries.get("store_version")
    if str(version) not in READABLE_VERSIONS or RUN_KEY not in entries:
        raise StoreError(f"{store.path}: damaged run store, the run's own metadata is lost")
    return int(version)


def _tables_listed(conn: sqlite3.Connection) -> set[str] | None:
    """The tables the store's schema lists; None where the schema cannot be read."""
    try:
        rows = conn.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall()
    except sqlite3.DatabaseError:
        return None
    return {name for (name,) in rows}


def _whole_blocks(rows: list[tuple[Any, ...]], columns: list[str]) -> list[tuple[Any, ...]]:
    """The salvaged rows of a block table whose block reads whole (its checksum, its
    lengths): a block is kept whole or left out, so the samples counted are the samples
    read."""
    if not rows or "rows" not in columns or "data" not in columns:
        return []
    count, data = columns.index("rows"), columns.index("data")
    kept = []
    for row in rows:
        try:
            _block(row[count], row[data])
        except (ValueError, TypeError):
            continue
        kept.append(row)
    return kept
