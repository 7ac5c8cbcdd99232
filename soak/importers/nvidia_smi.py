"""``nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits] -l N`` output.

With a header, its names say which column is which (``power.draw [W]``: the unit in brackets
is then checked against every value); without one, ``--query`` gives the same list that was
passed to nvidia-smi. ``[N/A]`` and ``[Not Supported]`` are None. Without a ``timestamp``
column, time is the sample count × ``--interval`` (the ``-l`` period). Without an ``index``,
``uuid`` or ``pci.bus_id`` column the log is one GPU (device 0), where every time has one
row.
"""

from __future__ import annotations

import re
from pathlib import Path

from soak.errors import ConfigError
from soak.importers.core import Column, Trace, parse_time, parse_value
from soak.importers.source import ImportFailed, records

# nvidia-smi's query names (and their aliases) → soak's fields.
QUERY_FIELDS: dict[str, str] = {
    "temperature.gpu": "temp_c",
    "temperature.memory": "mem_temp_c",
    "clocks.sm": "sm_clock_mhz",
    "clocks.current.sm": "sm_clock_mhz",
    "clocks.mem": "mem_clock_mhz",
    "clocks.current.memory": "mem_clock_mhz",
    "power.draw": "power_w",
    "power.draw.instant": "power_w",
    "power.limit": "power_limit_w",
    "enforced.power.limit": "power_limit_w",
    "utilization.gpu": "util_pct",
    "utilization.memory": "mem_util_pct",
    "fan.speed": "fan_pct",
    "clocks_throttle_reasons.active": "clock_reasons",
    "clocks_event_reasons.active": "clock_reasons",
}
# Units nvidia-smi prints for each soak field: a different one is a mixed-units error.
FIELD_UNITS = {
    "temp_c": None,
    "mem_temp_c": None,
    "sm_clock_mhz": "MHz",
    "mem_clock_mhz": "MHz",
    "power_w": "W",
    "power_limit_w": "W",
    "util_pct": "%",
    "mem_util_pct": "%",
    "fan_pct": "%",
    "clock_reasons": None,
}
KEYS = ("index", "uuid", "pci.bus_id", "gpu_uuid", "gpu_bus_id")
TEXT = ("timestamp", "name", "gpu_name", "serial", "driver_version", "pstate", *KEYS)
_HEADER = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*(?:\[([^\]]*)\])?\s*$")


def parse_query(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise ConfigError("--query: empty field list")
    return names


def read(path: Path, query: list[str] | None, interval_s: float) -> Trace:
    trace = Trace(path, "nvidia-smi", "")
    names: list[str] | None = None
    columns: list[Column] = []
    key_k = time_k = name_k = uuid_k = -1
    fields: dict[int, str] = {}
    keys: dict[str, int] = {}
    sample = -1
    seen: set[int] = set()
    t_first: float | None = None
    for record in records(path):
        line, text = record.line, record.text
        if not text.strip():
            continue
        cells = [c.strip() for c in text.split(",")]
        if names is None:
            header = _header(cells)
            if header is not None:
                names = [n for n, _ in header]
                columns = [Column(n, u) for n, u in header]
                # A unit in the header fixes the column's unit: a value must carry it.
                continue
            if query is None:
                raise ImportFailed(
                    path,
                    line,
                    "no header line: give the fields with --query "
                    "(as passed to nvidia-smi --query-gpu)",
                )
            names = query
            columns = [Column(n) for n in names]
        if names is not None and not fields and key_k == -1:
            key_k, time_k, name_k, uuid_k, fields = _layout(path, line, names)
        if len(cells) != len(names):
            what = "truncated last line" if not record.complete else "wrong number of fields"
            raise ImportFailed(path, line, f"{what} ({len(cells)} of {len(names)} fields)")
        if key_k < 0:  # no device column: one GPU (a workstation, a one-GPU VM)
            device = 0
            trace.one_device = "add index to --query-gpu to tell the GPUs apart"
        else:
            key = cells[key_k]
            device = keys.setdefault(key, len(keys)) if not key.isdigit() else int(key)
        if time_k >= 0:
            t_abs = parse_time(cells[time_k], "iso", path, line)
            if t_first is None:
                t_first = trace.epoch_s = t_abs
            t = t_abs - t_first
        else:
            if device in seen or sample < 0:
                sample, seen = sample + 1, set()
            seen.add(device)
            t = sample * interval_s
        if name_k >= 0:
            trace.names.setdefault(device, cells[name_k])
        if uuid_k >= 0:
            trace.uuids.setdefault(device, cells[uuid_k])
        values = {}
        for k, field in fields.items():
            value = parse_value(cells[k], columns[k], path, line)
            _check_unit(path, line, columns[k], field)
            values[field] = value
        trace.add(device, t, values, line, stamp=cells[time_k] if time_k >= 0 else None)
    if names is None:
        raise ImportFailed(path, 1, "empty file")
    trace.check_not_empty()
    trace.time_basis = (
        "nvidia-smi's timestamp column"
        if time_k >= 0
        else f"sample count × {interval_s:g} s (no timestamp column; --interval)"
    )
    return trace


def _header(cells: list[str]) -> list[tuple[str, str | None]] | None:
    """The header's (name, unit) pairs, or None where the line is data."""
    out = []
    for cell in cells:
        match = _HEADER.match(cell)
        if match is None:
            return None
        out.append((match.group(1), match.group(2)))
    known = set(QUERY_FIELDS) | set(TEXT)
    return out if any(name in known for name, _ in out) else None


def _layout(path: Path, line: int, names: list[str]) -> tuple[int, int, int, int, dict[int, str]]:
    key_k = next((names.index(k) for k in KEYS if k in names), -1)
    time_k = names.index("timestamp") if "timestamp" in names else -1
    name_k = names.index("name") if "name" in names else -1
    uuid_k = names.index("uuid") if "uuid" in names else -1
    fields = {k: QUERY_FIELDS[n] for k, n in enumerate(names) if n in QUERY_FIELDS}
    if not fields:
        raise ImportFailed(
            path, line, f"none of the columns is a known metric ({', '.join(names)})"
        )
    return key_k, time_k, name_k, uuid_k, fields


def _check_unit(path: Path, line: int, column: Column, field: str) -> None:
    expected = FIELD_UNITS[field]
    if column.unit is not None and expected is not None and column.unit != expected:
        raise ImportFailed(
            path, line, f"column {column.name!r}: unit {column.unit!r}, expected {expected!r}"
        )
