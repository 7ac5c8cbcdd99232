"""``nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits] -l N`` output.

With a header, its names say which column is which (``power.draw [W]``: the unit in brackets
is then checked against every value); without one, ``--query`` gives the same list that was
passed to nvidia-smi. ``[N/A]`` and ``[Not Supported]`` are None. Without a ``timestamp``
column, time is the sample count × ``--interval`` (the ``-l`` period). Without an ``index``,
``uuid`` or ``pci.bus_id`` column the log is one GPU (device 0), where every time has one
row.

Every form of the clock-event reasons ``nvidia-smi --help-query-gpu`` documents is read:
the bitmask (``clocks_event_reasons.active``, before driver 535 ``clocks_throttle_reasons
.active``), one column per reason under either name (``Active`` / ``Not Active``), and the
cumulative counters newer drivers add (``clocks_event_reasons_counters.*``, in µs). A
partial set is read for what it has: a reason the log does not hold is "not available".
Where two columns give one field, ``RANKS`` says which is used (the lowest rank); every
column that is not used is named (``Trace.unused``).
"""

from __future__ import annotations

import re
from pathlib import Path

from soak.errors import ConfigError
from soak.importers.core import Column, Trace, parse_state, parse_time, parse_value, prefer
from soak.importers.source import ImportFailed, records
from soak.model import ClockReason

# nvidia-smi's query names → (soak's field, rank): where a log has two columns for one
# field the lower rank is used. Power: the averaged reading over the instantaneous one
# (power.draw averages over a second on Ampere and later; power.draw.instant's scatter at a
# fast -lms is several times the average's). Power limit: the enforced one over the one set.
RANKS: dict[str, tuple[str, int]] = {
    "temperature.gpu": ("temp_c", 0),
    "temperature.memory": ("mem_temp_c", 0),
    "clocks.sm": ("sm_clock_mhz", 0),
    "clocks.current.sm": ("sm_clock_mhz", 1),
    "clocks.mem": ("mem_clock_mhz", 0),
    "clocks.current.memory": ("mem_clock_mhz", 1),
    "power.draw.average": ("power_w", 0),
    "power.draw": ("power_w", 1),
    "power.draw.instant": ("power_w", 2),
    "enforced.power.limit": ("power_limit_w", 0),
    "power.limit": ("power_limit_w", 1),
    "utilization.gpu": ("util_pct", 0),
    "utilization.memory": ("mem_util_pct", 0),
    "fan.speed": ("fan_pct", 0),
    "clocks_event_reasons.active": ("clock_reasons", 0),
    "clocks_throttle_reasons.active": ("clock_reasons", 1),
    # what the log says of the device itself, for its inventory and its SKU
    "memory.total": ("memory_total_mib", 0),
    "clocks.max.sm": ("max_sm_clock_mhz", 0),
    "clocks.max.graphics": ("max_sm_clock_mhz", 1),
    "clocks.max.gr": ("max_sm_clock_mhz", 2),
    "power.default_limit": ("default_power_limit_w", 0),
}
# One column per reason (--help-query-gpu's names), under either era's prefix
REASON_SUFFIXES: dict[str, ClockReason] = {
    "gpu_idle": ClockReason.GPU_IDLE,
    "applications_clocks_setting": ClockReason.APPLICATIONS_CLOCKS_SETTING,
    "sw_power_cap": ClockReason.SW_POWER_CAP,
    "hw_slowdown": ClockReason.HW_SLOWDOWN,
    "hw_thermal_slowdown": ClockReason.HW_THERMAL,
    "hw_power_brake_slowdown": ClockReason.HW_POWER_BRAKE,
    "sw_thermal_slowdown": ClockReason.SW_THERMAL,
    "sync_boost": ClockReason.SYNC_BOOST,
}
# The cumulative time each reason was active, in µs (newer drivers; no hw_slowdown one)
COUNTER_SUFFIXES: dict[str, ClockReason] = {
    "sw_power_cap": ClockReason.SW_POWER_CAP,
    "sync_boost": ClockReason.SYNC_BOOST,
    "sw_thermal_slowdown": ClockReason.SW_THERMAL,
    "hw_thermal_slowdown": ClockReason.HW_THERMAL,
    "hw_power_brake_slowdown": ClockReason.HW_POWER_BRAKE,
}
EVENT, THROTTLE, COUNTERS = (
    "clocks_event_reasons",
    "clocks_throttle_reasons",
    "clocks_event_reasons_counters",
)
REASON_RANKS: dict[str, tuple[str, int]] = {
    **{f"{EVENT}.{s}": (f"reason:{int(b)}", 0) for s, b in REASON_SUFFIXES.items()},
    **{f"{THROTTLE}.{s}": (f"reason:{int(b)}", 1) for s, b in REASON_SUFFIXES.items()},
    **{f"{COUNTERS}.{s}": (f"reason:{int(b)}", 2) for s, b in COUNTER_SUFFIXES.items()},
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
    "memory_total_mib": "MiB",
    "max_sm_clock_mhz": "MHz",
    "default_power_limit_w": "W",
    "counter": "us",
}
KEYS = ("index", "uuid", "pci.bus_id", "gpu_uuid", "gpu_bus_id")
NAMES = ("name", "gpu_name")
UUIDS = ("uuid", "gpu_uuid")
TEXT = ("timestamp", *NAMES, "serial", "driver_version", "pstate", *KEYS)
_HEADER = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*(?:\[([^\]]*)\])?\s*$")
US = 1e-6  # a counter's µs in seconds


def parse_query(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise ConfigError("--query: empty field list")
    return names


class _Layout:
    """Which column is which: the device key, the time, the name and identity columns, the
    fields (with precedence applied), the reasons one at a time, and the columns unused."""

    def __init__(self, path: Path, line: int, names: list[str]) -> None:
        self.key_k = next((names.index(k) for k in KEYS if k in names), -1)
        self.time_k = names.index("timestamp") if "timestamp" in names else -1
        self.name_k = next((names.index(k) for k in NAMES if k in names), -1)
        self.uuid_k = next((names.index(k) for k in UUIDS if k in names), -1)
        self.serial_k = names.index("serial") if "serial" in names else -1
        self.driver_k = names.index("driver_version") if "driver_version" in names else -1
        fields, unused, preferred = prefer(names, RANKS)
        bitmask = any(f == "clock_reasons" for f in fields.values())
        reasons, r_unused, r_preferred = prefer(names, REASON_RANKS)
        if bitmask:  # the bitmask holds every reason: the columns one at a time add nothing
            k = next(k for k, f in fields.items() if f == "clock_reasons")
            r_unused = [f"{n} ({names[k]} preferred)" for n in names if n in REASON_RANKS]
            reasons, r_preferred = {}, []
        self.fields = fields
        self.states = {
            k: int(t.split(":")[1]) for k, t in reasons.items() if not _is_counter(names[k])
        }
        self.counters = {
            k: int(t.split(":")[1]) for k, t in reasons.items() if _is_counter(names[k])
        }
        used = {
            self.key_k,
            self.time_k,
            self.name_k,
            self.uuid_k,
            self.serial_k,
            self.driver_k,
            *fields,
            *reasons,
        }
        loser = {u.split(" (")[0] for u in [*unused, *r_unused]}
        self.unused = [*unused, *r_unused] + [
            n for k, n in enumerate(names) if k not in used and n not in loser
        ]
        self.preferred = preferred + r_preferred
        if not fields and not reasons:
            raise ImportFailed(
                path, line, f"none of the columns is a known metric ({', '.join(names)})"
            )


def _is_counter(name: str) -> bool:
    return name.startswith(f"{COUNTERS}.")


def read(path: Path, query: list[str] | None, interval_s: float) -> Trace:
    trace = Trace(path, "nvidia-smi", "")
    names: list[str] | None = None
    columns: list[Column] = []
    layout: _Layout | None = None
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
        if layout is None:
            layout = _Layout(path, line, names)
            trace.unused, trace.preferred = layout.unused, layout.preferred
        if len(cells) != len(names):
            what = "truncated last line" if not record.complete else "wrong number of fields"
            raise ImportFailed(path, line, f"{what} ({len(cells)} of {len(names)} fields)")
        if layout.key_k < 0:  # no device column: one GPU (a workstation, a one-GPU VM)
            device = 0
            trace.one_device = "add index to --query-gpu to tell the GPUs apart"
        else:
            key = cells[layout.key_k]
            device = keys.setdefault(key, len(keys)) if not key.isdigit() else int(key)
        time_k = layout.time_k
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
        for k, table in (
            (layout.name_k, trace.names),
            (layout.uuid_k, trace.uuids),
            (layout.serial_k, trace.serials),
            (layout.driver_k, trace.drivers),
        ):
            if k >= 0 and cells[k].strip().lower() not in ("", "[n/a]", "n/a"):
                table.setdefault(device, cells[k])
        values = {}
        for k, field in layout.fields.items():
            value = parse_value(cells[k], columns[k], path, line)
            _check_unit(path, line, columns[k], field)
            values[field] = value
        states = {
            b: parse_state(cells[k], columns[k], path, line) for k, b in layout.states.items()
        }
        counters = {}
        for k, bit in layout.counters.items():
            value = parse_value(cells[k], columns[k], path, line)
            _check_unit(path, line, columns[k], "counter")
            counters[bit] = None if value is None else value * US
        stamp = cells[time_k] if time_k >= 0 else None
        trace.add(device, t, values, line, stamp=stamp, reasons=states, counters=counters)
    if names is None:
        raise ImportFailed(path, 1, "empty file")
    trace.check_not_empty()
    trace.resolve_reasons()
    trace.time_basis = (
        "nvidia-smi's timestamp column"
        if layout is not None and layout.time_k >= 0
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
    known = set(RANKS) | set(REASON_RANKS) | set(TEXT)
    return out if any(name in known for name, _ in out) else None


def _check_unit(path: Path, line: int, column: Column, field: str) -> None:
    expected = FIELD_UNITS[field]
    if column.unit is not None and expected is not None and column.unit != expected:
        raise ImportFailed(
            path, line, f"column {column.name!r}: unit {column.unit!r}, expected {expected!r}"
        )
