"""Any CSV trace with a header: long (one row per device and time, ``--device-col``), wide
(one row per time, ``--devices N`` and ``{i}`` in the mapped column names), or neither: one
device, one row per time.

The clock-event reasons come from a bitmask column (``--map clock_reasons=COLUMN``) or one
column per reason (``--map clock_reasons.sw_thermal=COLUMN``: Active / Not Active, 1 / 0);
a reason not mapped is "not available". Every column that is not mapped (nor the time or
device column) is named as not used (``Trace.unused``)."""

from __future__ import annotations

import csv
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from soak.errors import ConfigError
from soak.importers.core import (
    FIELDS,
    REASON_IMPORTED,
    SERVER_IMPORTED,
    Column,
    Trace,
    parse_state,
    parse_time,
    parse_value,
    throughput_unit,
)
from soak.importers.source import ImportFailed, Record, records


@dataclass(frozen=True, slots=True)
class CsvOptions:
    time_col: str
    time_unit: str  # s, ms or iso
    mapping: Mapping[str, str]  # soak field -> column (may hold {i})
    device_col: str | None = None
    devices: int | None = None
    throughput_unit: str | None = None

    def __post_init__(self) -> None:
        if self.device_col is not None and self.devices is not None:
            raise ConfigError("give at most one of --device-col COL and --devices N")
        if self.time_unit not in ("s", "ms", "iso"):
            raise ConfigError(f"--time-unit: {self.time_unit!r} is not s, ms or iso")
        if not self.mapping:
            raise ConfigError("--map: give at least one FIELD=COLUMN")
        for name in self.mapping:
            if name not in FIELDS:
                raise ConfigError(f"--map {name}: not a soak field ({', '.join(FIELDS)})")
        if self.devices is None and any("{i}" in c for c in self.mapping.values()):
            raise ConfigError("--map: {i} in a column name needs --devices N (a wide file)")


def parse_map(pairs: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        name, sep, column = pair.partition("=")
        if not sep or not name or not column:
            raise ConfigError(f"--map: {pair!r} is not FIELD=COLUMN")
        if name in out:
            raise ConfigError(f"--map {name}: given twice")
        out[name] = column
    return out


def _rows(path: Path, state: list[Record]) -> Iterator[str]:
    for record in records(path):
        state[0] = record
        yield record.text


def read(path: Path, options: CsvOptions) -> Trace:
    unit, scale = throughput_unit(options.throughput_unit)
    has_rate = "throughput" in options.mapping
    trace = Trace(
        path,
        "csv",
        f"the file's {options.time_col!r} column ({options.time_unit})",
        work_unit=unit if has_rate else None,
        work_scale=scale,
    )
    state = [Record(0, "", True)]
    reader = csv.reader(_rows(path, state), skipinitialspace=True)
    try:
        header = [h.strip().lstrip("\ufeff") for h in next(reader)]  # a BOM from Excel
    except StopIteration:
        raise ImportFailed(path, 1, "empty file (no header line)") from None
    except csv.Error as exc:
        raise ImportFailed(path, 1, f"not CSV ({exc})") from None
    index = {name: k for k, name in enumerate(header)}
    if options.device_col is None and options.devices is None:
        device_ids: list[int | None] = [0]
        trace.one_device = "give --device-col COL (or --devices N for a wide file)"
    else:
        device_ids = [None] if options.devices is None else list(range(options.devices))
    columns = _columns(path, index, options, device_ids)
    trace.server_columns = {n: c for n, c in options.mapping.items() if n in SERVER_IMPORTED}
    trace.unused = _unused(header, columns, options)
    reasons_unused = "clock_reasons" in options.mapping  # the bitmask holds them all
    time_k = _need(path, index, options.time_col, "--time-col")
    device_k = (
        None
        if options.device_col is None
        else _need(path, index, options.device_col, "--device-col")
    )
    units: dict[int, Column] = {k: Column(header[k]) for k in index.values()}
    t_first: float | None = None
    while True:
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            raise ImportFailed(path, state[0].line, f"not CSV ({exc})") from None
        line = state[0].line
        if not row or all(not cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            what = "truncated last line" if not state[0].complete else "wrong number of fields"
            raise ImportFailed(path, line, f"{what} ({len(row)} of {len(header)} fields)")
        t = parse_time(row[time_k], options.time_unit, path, line)
        if t_first is None:
            t_first = t
            if options.time_unit == "iso":
                trace.epoch_s = t
        for device in device_ids:
            if device is None:
                device = _device(path, line, row[device_k])  # type: ignore[index]
                cols = columns[None]
            else:
                cols = columns[device]
            values = {
                name: parse_value(row[k], units[k], path, line)
                for name, k in cols.items()
                if name not in REASON_IMPORTED
            }
            states = {
                int(REASON_IMPORTED[name]): parse_state(row[k], units[k], path, line)
                for name, k in cols.items()
                if name in REASON_IMPORTED and not reasons_unused
            }
            trace.add(device, t - t_first, values, line, stamp=row[time_k], reasons=states)
    trace.check_not_empty()
    trace.resolve_reasons()
    return trace


def _unused(
    header: list[str], columns: dict[int | None, dict[str, int]], options: CsvOptions
) -> list[str]:
    """The columns soak does not use: not mapped (nor the time or device column), and the
    per-reason ones where a bitmask is mapped too."""
    mapped = {k for cols in columns.values() for k in cols.values()}
    by_reason = {k for cols in columns.values() for n, k in cols.items() if n in REASON_IMPORTED}
    given = {options.time_col, options.device_col}
    out = [h for k, h in enumerate(header) if h not in given and k not in mapped]
    if "clock_reasons" in options.mapping:
        bitmask = options.mapping["clock_reasons"]
        out += [f"{header[k]} ({bitmask} preferred)" for k in sorted(by_reason)]
    return out


def _columns(
    path: Path, index: dict[str, int], options: CsvOptions, devices: list[int | None]
) -> dict[int | None, dict[str, int]]:
    out: dict[int | None, dict[str, int]] = {}
    for device in devices:
        cols = {}
        for name, column in options.mapping.items():
            actual = column.replace("{i}", str(device)) if device is not None else column
            if actual not in index:
                known = ", ".join(list(index)[:12])
                raise ImportFailed(
                    path, 1, f"--map {name}={column}: no column {actual!r} (columns: {known})"
                )
            cols[name] = index[actual]
        out[device] = cols
    return out


def _need(path: Path, index: dict[str, int], column: str, option: str) -> int:
    if column not in index:
        raise ImportFailed(path, 1, f"{option} {column}: no such column")
    return index[column]


def _device(path: Path, line: int, text: str) -> int:
    try:
        value = int(float(text.strip()))
    except ValueError:
        raise ImportFailed(path, line, f"device {text.strip()[:20]!r} is not an index") from None
    if value < 0:
        raise ImportFailed(path, line, f"device {value} is negative")
    return value
