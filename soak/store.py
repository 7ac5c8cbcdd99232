"""The run store: one SQLite file per run.

Metadata (host, config, devices, capabilities) is written once; telemetry, work samples
and events are appended every tick, one transaction per tick, in WAL mode, so that the
file is readable while the run goes on and intact up to the last committed tick after a
crash. Read back as numpy arrays, with NaN where a value could not be read.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import math
import operator
import os
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

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
from soak.record import RUN_KEY, RunMeta, Salvage
from soak.validity import Implausible, screen_all

# Version of the table layout below. 1: first layout. 2: adds sync_steps and server_steps
# (the ddp workload's per-rank timing and the server's synchronous steps); a version-1 store
# reads as one without them. A version-2 store may hold an ``implausible`` table (readings
# outside their plausible range, soak.validity): one without it has none flagged, and a
# ``server_readings`` table (the BMC's server-level series: inlet, chassis temperatures): one
# without it has no BMC readings.
STORE_VERSION = 2
READABLE_VERSIONS = ("1", "2")
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
"""
_SYNC_COLUMNS = ("t_start_s", "t_end_s", "iterations", "compute_s", "wait_s", "step_s")
_SYNC_COLUMNS += ("allreduce_b", "allreduce_s")
_SERVER_COLUMNS = ("t_start_s", "t_end_s", "samples", "step_s", "straggler", "ranks")

_INSERT_TELEMETRY = (
    f"INSERT INTO telemetry ({', '.join(TELEMETRY_FIELDS)}) "
    f"VALUES ({', '.join('?' * len(TELEMETRY_FIELDS))})"
)
_INSERT_WORK = "INSERT INTO work VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
_INSERT_EVENT = "INSERT INTO events VALUES (?, ?, ?, ?, ?)"
_INSERT_SYNC = "INSERT INTO sync_steps VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
_INSERT_SERVER = "INSERT INTO server_steps VALUES (?, ?, ?, ?, ?, ?)"
_INSERT_IMPLAUSIBLE = "INSERT INTO implausible VALUES (?, ?, ?, ?, ?, ?)"
_INSERT_READING = "INSERT INTO server_readings VALUES (?, ?, ?)"


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
        self, path: Path, conn: sqlite3.Connection, max_commit_delay_s: float = 0.0
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

    # -- writing ---------------------------------------------------------------------

    @classmethod
    def create(cls, path: str | Path, max_commit_delay_s: float = 0.0) -> RunStore:
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
        return cls(path, conn, max_commit_delay_s)

    def set_meta(self, **values: Any) -> None:
        """Record run-level metadata once (config, host, versions, stop reason...)."""
        rows = [(key, _dumps(value)) for key, value in values.items()]
        self._write("INSERT OR REPLACE INTO meta VALUES (?, ?)", rows)

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
        those readings where the caller has screened the rows already (the runner)."""
        telemetry = list(telemetry)
        if implausible is None:
            implausible = screen_all(telemetry, self._power_limits)
        flagged = [
            (f.device, f.t_s, f.field, f.value, _bound(f.low), _bound(f.high)) for f in implausible
        ]
        cur = self._conn.cursor()
        try:
            if not self._conn.in_transaction:
                cur.execute("BEGIN")
            cur.execute("SAVEPOINT tick")
        except sqlite3.Error as exc:
            raise _translate(exc, self.path) from exc
        try:
            cur.executemany(_INSERT_TELEMETRY, map(_telemetry_row, telemetry))
            if flagged:
                cur.executemany(_INSERT_IMPLAUSIBLE, flagged)
            cur.executemany(_INSERT_WORK, map(_work_row, samples))
            cur.executemany(_INSERT_EVENT, map(_event_row, events))
            cur.executemany(_INSERT_SYNC, map(dataclasses.astuple, sync_steps))
            cur.executemany(_INSERT_SERVER, map(dataclasses.astuple, server_steps))
            cur.executemany(_INSERT_READING, map(_reading_row, server_readings))
            cur.execute("RELEASE tick")
        except sqlite3.Error as exc:
            self._undo_tick()
            raise _translate(exc, self.path) from exc
        except BaseException:
            self._undo_tick()  # a second Ctrl-C is held back while writing; a last resort
            raise
        now = time.monotonic()
        if now - self._last_commit >= self.max_commit_delay_s:
            self.commit()

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
        """Commit, checkpoint the WAL into the main file and close."""
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
        implausible), unless ``as_read``."""
        with _reading(self.path):
            present = set(_table_columns(self._conn, "telemetry"))
            names = [m for m in TELEMETRY_FIELDS[1:] if m in present]
            (count,) = self._conn.execute(
                "SELECT COUNT(*) FROM telemetry WHERE device=?", (device,)
            ).fetchone()
            array = self._float_rows(
                f"SELECT {', '.join(names)} FROM telemetry WHERE device=? ORDER BY t_s",
                (device,),
                len(names),
                count,
            )
        found = {name: array[:, i] for i, name in enumerate(names)}
        # A column a store written before its field existed lacks: not read, NaN throughout.
        columns = {m: found.get(m, np.full(len(array), np.nan)) for m in TELEMETRY_FIELDS[1:]}
        if not as_read:
            t = columns["t_s"]
            for flag in self.implausible(device):
                k = int(np.searchsorted(t, flag.t_s))
                if k < t.size and t[k] == flag.t_s and flag.field in columns:
                    columns[flag.field][k] = math.nan
        return Columns({name: _compact(column) for name, column in columns.items()})

    def implausible(self, device: int) -> list[Implausible]:
        """The readings of one device flagged as impossible, in time order."""
        with _reading(self.path):
            known = self._conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type='table' AND name='implausible'"
            ).fetchone()
            if known is None:
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
        """Per workload part: t_start_s, t_end_s, work, verified (1/0/NaN), verify_error."""
        columns = ("t_start_s", "t_end_s", "work", "verified", "verify_error")
        with _reading(self.path):
            # SQLite gives the rowid of the row holding the MIN: parts in the order of their
            # first unit of work, as one read in time order finds them
            found = self._conn.execute(
                "SELECT part, COUNT(*), MIN(t_end_s), rowid FROM work WHERE device=? GROUP BY part",
                (device,),
            ).fetchall()
            found.sort(key=lambda row: (row[2], row[3]))
            parts = [row[0] for row in found]
            _text(*parts)
            if not parts:
                return {}
            # every part in one pass, each row's part as its place in ``parts``
            code = "CASE part " + " ".join(f"WHEN ? THEN {k}" for k in range(len(parts))) + " END"
            array = self._float_rows(
                f"SELECT {code}, {', '.join(columns)} FROM work WHERE device=? ORDER BY t_end_s",
                (*parts, device),
                len(columns) + 1,
                sum(row[1] for row in found),
            )
        out = {}
        for k, part in enumerate(parts):
            rows = array[array[:, 0] == k]  # in time order, as read
            out[part] = {name: _compact(rows[:, i + 1]) for i, name in enumerate(columns)}
        return out

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
        where = "WHERE device=? ORDER BY t_end_s"
        return self._columns("sync_steps", _SYNC_COLUMNS, where, (device,))

    def server_steps(self) -> dict[str, np.ndarray]:
        """The server's synchronous steps by column, in time order (empty where none)."""
        return self._columns("server_steps", _SERVER_COLUMNS, "ORDER BY t_end_s", ())

    def _columns(
        self,
        table: str,
        columns: tuple[str, ...],
        where: str,
        args: tuple[Any, ...],
    ) -> dict[str, np.ndarray]:
        with _reading(self.path):
            known = self._conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (table,)
            ).fetchone()
            if known is None:
                return {name: np.empty(0) for name in columns}
            # A missing optional value (no all-reduce that step) reads as NaN; not counted
            # first (a few rows per step): the array grows as the rows come.
            select = f"SELECT {', '.join(columns)} FROM {table} {where}"
            array = self._float_rows(select, args, len(columns), 0)
        return {name: array[:, i] for i, name in enumerate(columns)}

    def server_readings(self) -> dict[str, dict[str, np.ndarray]]:
        """The server-level series (``soak.model.ServerReading``) by name: ``t_s`` and
        ``value`` (NaN: not read), in time order; empty for a store written before them."""
        with _reading(self.path):
            known = self._conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type='table' AND name='server_readings'"
            ).fetchone()
            if known is None:
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
        """The unit of each workload part's work."""
        with _reading(self.path):
            rows = self._conn.execute("SELECT DISTINCT part, unit FROM work").fetchall()
            for row in rows:
                _text(*row)
        return dict(rows)

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
        with _reading(self.path):
            (value,) = self._conn.execute("SELECT MAX(t_s) FROM telemetry").fetchone()
        return value

    def telemetry_rows(self) -> int:
        with _reading(self.path):
            (count,) = self._conn.execute("SELECT COUNT(*) FROM telemetry").fetchone()
        return int(count)


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
    """Every row of ``table`` that SQLite can still read, by rowid range around damage."""
    try:
        (top,) = src.execute(f"SELECT MAX(rowid) FROM {table}").fetchone()
    except sqlite3.DatabaseError:
        top = size_b // 8  # no row is smaller than 8 bytes: an upper bound
    if top is None:
        return [], True
    sql = f"SELECT * FROM {table} WHERE rowid BETWEEN ? AND ?"
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
    whole: dict[str, bool] = {}
    try:
        for table in (*_TABLES, *_OPTIONAL_TABLES):
            try:
                rows, whole[table] = _salvage_table(src, table, size)
                columns = _table_columns(src, table)
            except sqlite3.DatabaseError:  # the table's own schema is unreadable
                rows, whole[table] = [], False
            if rows:
                _insert(dst, table, rows, columns or _table_columns(dst, table))
    finally:
        src.close()
    store = RunStore(path, dst)
    try:
        entries = store._meta_entries()
        store.meta()  # every entry of its type
        (count, last) = dst.execute("SELECT COUNT(*), MAX(t_s) FROM telemetry").fetchone()
    except (StoreError, sqlite3.Error) as exc:
        dst.close()
        raise StoreError(f"{path}: damaged run store, its metadata unreadable ({exc})") from exc
    if entries.get("store_version") != STORE_VERSION or RUN_KEY not in entries:
        dst.close()
        raise StoreError(f"{path}: damaged run store, the run's own metadata is lost")
    missing = tuple(t for t in _TABLES if not whole[t])
    found = Salvage(int(count), None if last is None else float(last), missing)
    store.salvaged = found
    return store, found
