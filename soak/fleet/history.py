"""The per-GPU history: one SQLite file (stdlib ``sqlite3``) that every fleet report adds its
runs to, keyed by device serial and UUID, so that a later validation can say what a GPU has
lost since its first acceptance.

Writes are atomic: each report's runs go in under one ``BEGIN IMMEDIATE`` transaction (a
second writer waits for the lock, up to ``BUSY_TIMEOUT_S``), and a run already recorded
(same node and start) is skipped, so reporting a folder twice adds nothing. The rollback
journal is used rather than WAL, which needs shared memory that network file systems
(where a cluster keeps such a file) do not give.

The schema is versioned with ``PRAGMA user_version``; ``MIGRATIONS[i]`` takes version i to
i + 1, and a file written by a newer soak is refused.
"""

from __future__ import annotations

import datetime as dt
import math
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from soak.errors import ConfigError
from soak.fleet.collect import RUN_FIGURES, node_from_summary
from soak.units import si

BUSY_TIMEOUT_S = 120.0

MIGRATIONS: tuple[str, ...] = (
    # 0 -> 1: runs, their devices, and each device's steady figures per workload part.
    """
    CREATE TABLE runs (
        id INTEGER PRIMARY KEY,
        node TEXT NOT NULL,
        started_utc TEXT NOT NULL,
        workload TEXT,
        verdict TEXT,
        profile TEXT,
        summary TEXT,
        recorded_utc TEXT NOT NULL,
        UNIQUE (node, started_utc)
    );
    CREATE TABLE devices (
        id INTEGER PRIMARY KEY,
        run_id INTEGER NOT NULL REFERENCES runs (id),
        idx INTEGER,
        uuid TEXT,
        serial TEXT,
        sku TEXT,
        verdict TEXT,
        diagnosis TEXT,
        temp_c REAL,
        power_w REAL,
        sm_clock_mhz REAL
    );
    CREATE INDEX devices_uuid ON devices (uuid);
    CREATE INDEX devices_serial ON devices (serial);
    CREATE TABLE work (
        device_id INTEGER NOT NULL REFERENCES devices (id),
        part TEXT NOT NULL,
        steady REAL NOT NULL,
        retention REAL,
        unit TEXT,
        PRIMARY KEY (device_id, part)
    );
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)


def check_path(path: Path) -> None:
    """Refuse, before anything is written, a history that could not be opened."""
    path = Path(path)
    if path.exists() and not path.is_file():
        raise ConfigError(f"--history {path}: not a file")
    if not path.parent.is_dir():
        raise ConfigError(f"--history {path}: no folder {path.parent}")


def connect(path: Path) -> sqlite3.Connection:
    """Open (creating if needed) and migrate the history file."""
    path = Path(path)
    check_path(path)
    try:
        db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    except sqlite3.Error as exc:
        raise ConfigError(f"--history {path}: cannot open ({exc})") from exc
    try:
        db.execute("PRAGMA foreign_keys = ON")
        _migrate(db, path)
    except sqlite3.DatabaseError as exc:
        db.close()
        raise ConfigError(f"--history {path}: not a soak history ({exc})") from exc
    except BaseException:
        db.close()
        raise
    return db


def _migrate(db: sqlite3.Connection, path: Path) -> None:
    version = db.execute("PRAGMA user_version").fetchone()[0]
    if version == SCHEMA_VERSION:
        return
    db.execute("BEGIN IMMEDIATE")  # the version is read again under the lock
    try:
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise ConfigError(
                f"--history {path}: schema version {version} is newer than this soak's "
                f"{SCHEMA_VERSION}"
            )
        for step in range(version, SCHEMA_VERSION):
            for statement in MIGRATIONS[step].split(";"):
                if statement.strip():
                    db.execute(statement)
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def record_runs(path: Path, runs: Iterable[tuple[Path, Mapping[str, Any]]]) -> int:
    """Add every run (its summary path and content) in one transaction; returns how many were
    new. Runs without a start time cannot be placed in time and are not recorded."""
    db = connect(path)
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    added = 0
    try:
        db.execute("BEGIN IMMEDIATE")
        try:
            for summary_path, data in runs:
                added += _record(db, summary_path, data, now)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
    finally:
        db.close()
    return added


def _record(db: sqlite3.Connection, path: Path, data: Mapping[str, Any], now: str) -> int:
    node = node_from_summary(path, data)
    run = data.get("run") or {}
    if not node.started_utc:
        return 0
    cursor = db.execute(
        "INSERT OR IGNORE INTO runs (node, started_utc, workload, verdict, profile, summary, "
        "recorded_utc) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (
            node.name,
            node.started_utc,
            node.workload,
            node.verdict,
            run.get("profile"),
            str(path.resolve()),
            now,
        ),
    )
    if cursor.rowcount == 0:
        return 0  # recorded by an earlier report
    run_id = cursor.lastrowid
    units: dict[str, str] = {}
    for item in data.get("devices") or ():
        units.update(item.get("throughput_units") or {})
    for device in node.devices:
        if device.uuid is None and device.serial is None:
            continue  # nothing to key it by
        dev_id = db.execute(
            "INSERT INTO devices (run_id, idx, uuid, serial, sku, verdict, diagnosis, "
            f"{', '.join(RUN_FIGURES)}) VALUES (?, ?, ?, ?, ?, ?, ?{', ?' * len(RUN_FIGURES)})",
            (
                run_id,
                device.index,
                device.uuid,
                device.serial,
                device.sku,
                device.verdict,
                device.diagnosis,
                *(_num(device.sensors.get(k)) for k in RUN_FIGURES),
            ),
        ).lastrowid
        db.executemany(
            "INSERT INTO work (device_id, part, steady, retention, unit) VALUES (?, ?, ?, ?, ?)",
            [
                (dev_id, part, rate, device.retention.get(part), units.get(part))
                for part, rate in device.work.items()
            ],
        )
    return 1


@dataclass(frozen=True)
class Entry:
    """One run of one device, as the history keeps it."""

    started_utc: str
    node: str
    index: int | None
    uuid: str | None
    serial: str | None
    sku: str | None
    verdict: str | None
    temp_c: float | None
    work: Mapping[str, float]
    units: Mapping[str, str]


def device_runs(path: Path, key: str) -> list[Entry]:
    """Every recorded run of the device whose serial or UUID is ``key``, oldest first."""
    if not Path(path).is_file():
        raise ConfigError(f"--history {path}: no such file")
    db = connect(path)
    try:
        rows = db.execute(
            "SELECT d.id, r.started_utc, r.node, d.idx, d.uuid, d.serial, d.sku, d.verdict, "
            "d.temp_c FROM devices d JOIN runs r ON r.id = d.run_id "
            "WHERE d.uuid = ?1 OR d.serial = ?1 ORDER BY r.started_utc, d.id",
            (key,),
        ).fetchall()
        entries = []
        for dev_id, *fields in rows:
            work = db.execute(
                "SELECT part, steady, unit FROM work WHERE device_id = ? ORDER BY part", (dev_id,)
            ).fetchall()
            entries.append(
                Entry(*fields, {p: s for p, s, _ in work}, {p: u or "" for p, _, u in work})
            )
    finally:
        db.close()
    return entries


@dataclass(frozen=True)
class Drift:
    entry: Entry
    figure: str  # a part name, or "temp_c"
    change: float  # throughput: fraction lost; temperature: °C gained
    message: str


def drifts(entries: Sequence[Entry], min_loss: float, min_temp_c: float) -> list[Drift]:
    """Every later run that lost ``min_loss`` or more of steady throughput of a part, or ran
    ``min_temp_c`` or more hotter, against the device's first acceptance (its first run)."""
    if not entries:
        return []
    first, out = entries[0], []
    for entry in entries[1:]:
        for part, rate in entry.work.items():
            base = first.work.get(part)
            if not base or (loss := 1 - rate / base) < min_loss:
                continue
            unit = entry.units.get(part, "")
            message = (
                f"{entry.started_utc}: steady {part} {si(rate, unit)} is {100 * loss:.1f} % "
                f"below the first acceptance's {si(base, unit)} ({first.started_utc}); "
                f"limit {100 * min_loss:g} %"
            )
            out.append(Drift(entry, part, loss, message))
        if entry.temp_c is None or first.temp_c is None:
            continue
        if (rise := entry.temp_c - first.temp_c) >= min_temp_c:
            message = (
                f"{entry.started_utc}: steady temperature {entry.temp_c:.0f} °C is "
                f"{rise:.0f} °C above the first acceptance's {first.temp_c:.0f} °C "
                f"({first.started_utc}); limit {min_temp_c:g} °C"
            )
            out.append(Drift(entry, "temp_c", rise, message))
    return out


def format_history(key: str, entries: Sequence[Entry], found: Sequence[Drift]) -> list[str]:
    """The lines ``soak fleet history`` prints: one row per run, then each drift."""
    first = entries[0]
    parts = sorted({p for e in entries for p in e.work})
    lines = [
        f"device {key}: uuid {first.uuid or 'not available'}, serial "
        f"{first.serial or 'not available'}, {first.sku or 'unknown SKU'}; {len(entries)} runs"
    ]
    header = ["started (UTC)", "node", "GPU", "verdict", *parts, "temp"]
    rows = [header]
    for e in entries:
        cells = [e.started_utc, e.node, "—" if e.index is None else str(e.index), e.verdict or "—"]
        for part in parts:
            rate, base = e.work.get(part), first.work.get(part)
            text = si(rate, e.units.get(part, ""))
            if rate is not None and base and e is not first:
                text += f" ({100 * (rate / base - 1):+.1f} %)"
            cells.append(text)
        cells.append("not available" if e.temp_c is None else f"{e.temp_c:.0f} °C")
        rows.append(cells)
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines += [f"DRIFT  {d.message}" for d in found]
    if not found:
        lines.append("no drift against the first acceptance")
    return lines
