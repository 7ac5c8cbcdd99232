"""What every importer shares: the parsed trace, value and unit parsing, load segments, and
writing a normal run folder (same store, same report) from a trace.

A trace's time axis starts at its first sample (t = 0 s); ``--load-start``/``--load-end``
are seconds on that axis. Idle before the load is stored as the run's baseline, as a live run
records one; nothing after the load's end is stored, as a live run stops there.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from soak import __version__
from soak.errors import ConfigError
from soak.fields import IMPORTABLE, REASON_CAPABILITY, SINGLE_REASONS
from soak.importers.sku import Sku, settle_sku
from soak.importers.source import ImportFailed, Source
from soak.model import (
    INLET_SERIES,
    Capability,
    ClockReason,
    DeviceInfo,
    Event,
    EventKind,
    ServerReading,
    StopReason,
    Telemetry,
    WorkSample,
)
from soak.profile import Profile, load_profile
from soak.record import BmcProbe, RunRecord, StopRecord
from soak.store import STORE_NAME, RunStore
from soak.validity import Frozen, frozen_spans

# soak's own fields a trace column may be mapped onto (``--map FIELD=COLUMN``).
TELEMETRY_IMPORTED = IMPORTABLE  # the registry's importable telemetry fields
# Server-level series a column may be mapped onto: the inlet a BMC column logged (IPMI's
# inlet sensor), stored in ``server_readings`` as a live run's BMC readings are.
SERVER_IMPORTED: tuple[str, ...] = (INLET_SERIES,)
# One clock-event reason per column, where a log has no bitmask (``--map
# clock_reasons.sw_thermal=COLUMN``; nvidia-smi's per-reason columns): Active / Not Active.
REASON_IMPORTED: dict[str, ClockReason] = {
    REASON_CAPABILITY.format(key=r.key): r.bits for r in SINGLE_REASONS
}
FIELDS: tuple[str, ...] = (
    *TELEMETRY_IMPORTED,
    "throughput",
    *SERVER_IMPORTED,
    *REASON_IMPORTED,
)
# A per-reason column's spellings (nvidia-smi: "Active" / "Not Active"; others 1/0, yes/no)
ACTIVE = frozenset({"active", "1", "yes", "true"})
INACTIVE = frozenset({"not active", "0", "no", "false"})
EVERY_REASON = ~0  # the reasons a bitmask column reads: all of them, bits NVML may add too
# What a device's static columns may give its DeviceInfo (memory.total, clocks.max.sm...)
DEVICE_FACTS = (
    "memory_total_mib",
    "max_sm_clock_mhz",
    "default_power_limit_w",
    "slowdown_temp_c",
    "max_operating_temp_c",
)

# Throughput units a trace may give its rate in: the unit of work soak stores, and the scale.
THROUGHPUT_UNITS: dict[str, tuple[str, float]] = {
    "flop/s": ("FLOP", 1.0),
    "gflop/s": ("FLOP", 1e9),
    "tflop/s": ("FLOP", 1e12),
    "b/s": ("B", 1.0),
    "gb/s": ("B", 1e9),
    "token/s": ("token", 1.0),
}

# Spellings of "cannot be read" in the tools' outputs: None, never a number.
UNREADABLE = frozenset(
    {"", "[n/a]", "n/a", "na", "[not supported]", "not supported", "[unknown error]", "nan", "-"}
)

_VALUE = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-z%/°]*)\s*$")

# Below these a device is idle; the load segment detector's thresholds.
LOADED_UTIL_PCT = 50.0
MIN_SEGMENT_S = 30.0  # shorter bursts are not a load segment
MAX_GAP_S = 30.0  # dips shorter than this do not split a segment


@dataclass(slots=True)
class Column:
    """One value column's unit, fixed by its header or its first value: a second unit in the
    same column is a mixed-units error."""

    name: str
    unit: str | None = None


def parse_value(text: str, column: Column, path: Path, line: int) -> float | None:
    """A number, with or without its unit ("250.43 W"); unreadable spellings are None."""
    stripped = text.strip()
    if stripped.lower() in UNREADABLE:
        return None
    if stripped.lower().startswith("0x"):  # clock-event reason bitmasks
        try:
            bits = int(stripped, 16)
        except ValueError:
            bits = None
        if bits is not None:
            if bits >= 1 << 63:
                raise ImportFailed(
                    path, line, f"column {column.name!r}: {stripped[:40]!r} is over 64 bits"
                )
            return float(bits)
    match = _VALUE.match(stripped)
    if match is None:
        raise ImportFailed(path, line, f"column {column.name!r}: {stripped[:40]!r} is not a number")
    unit = match.group(2) or None
    if unit is not None:
        if column.unit is None:
            column.unit = unit
        elif unit != column.unit:
            raise ImportFailed(
                path, line, f"column {column.name!r}: mixed units ({unit!r} after {column.unit!r})"
            )
    value = float(match.group(1))
    return value if math.isfinite(value) else None


def parse_state(text: str, column: Column, path: Path, line: int) -> float | None:
    """One clock-event reason's column: 1.0 active, 0.0 not, None unreadable ("[N/A]")."""
    stripped = text.strip().lower()
    if stripped in UNREADABLE:
        return None
    if stripped in ACTIVE:
        return 1.0
    if stripped in INACTIVE:
        return 0.0
    raise ImportFailed(
        path, line, f"column {column.name!r}: {text.strip()[:40]!r} is not Active or Not Active"
    )


def parse_time(text: str, unit: str, path: Path, line: int) -> float:
    """Seconds on the file's own axis: a number in s or ms, or an ISO-8601 (or nvidia-smi
    ``YYYY/MM/DD HH:MM:SS.mmm``) stamp as seconds since the epoch (UTC where unzoned)."""
    stripped = text.strip()
    try:
        if unit == "s":
            value = float(stripped)
        elif unit == "ms":
            value = float(stripped) / 1000.0
        else:
            stamp = dt.datetime.fromisoformat(stripped.replace("/", "-"))
            if stamp.tzinfo is None:
                stamp = stamp.replace(tzinfo=dt.UTC)
            value = stamp.timestamp()
    except ValueError:
        kind = "an ISO-8601 time" if unit == "iso" else f"a time in {unit}"
        raise ImportFailed(path, line, f"time {stripped[:40]!r} is not {kind}") from None
    if not math.isfinite(value):
        raise ImportFailed(path, line, f"time {stripped[:40]!r} is not finite")
    return value


@dataclass(slots=True)
class DeviceTrace:
    t: list[float] = field(default_factory=list)
    values: dict[str, list[float | None]] = field(
        default_factory=lambda: {f: [] for f in TELEMETRY_IMPORTED}
    )
    rate: list[float | None] = field(default_factory=list)  # throughput, unit/s
    rate_interval: list[float | None] = field(default_factory=list)  # when the trace says
    # Clock-event reasons read one at a time, per reason bit and row: a per-reason column's
    # state (1.0 active, 0.0 not, None unread), and a cumulative counter of the time the
    # reason was active (seconds), where the log has no bitmask (``resolve_reasons``).
    reason_states: dict[int, list[float | None]] = field(default_factory=dict)
    reason_counters: dict[int, list[float | None]] = field(default_factory=dict)
    # What the log says of the device itself (DEVICE_FACTS), its first reading of each
    facts: dict[str, float] = field(default_factory=dict)
    # The reason bits read (``resolve_reasons``): None until resolved
    reasons_read: int | None = None

    def resolve_reasons(self) -> int:
        """Fold the per-reason columns and counters into ``clock_reasons``, the bitmask the
        store holds, and return the bits read. A bitmask column wins; else each reason comes
        from its column, or from its counter (active over the interval since the row before
        for at least half of it). A row is unread (None) where a reason read elsewhere in
        the log is unread in it. Without any, no bit is read."""
        if self.reasons_read is not None:
            return self.reasons_read
        if any(v is not None for v in self.values["clock_reasons"]):
            self.reasons_read = EVERY_REASON
            return self.reasons_read
        states = {b: v for b, v in self.reason_states.items() if any(x is not None for x in v)}
        for bit, counter in self.reason_counters.items():
            if bit not in states and any(x is not None for x in counter):
                states[bit] = _counter_states(self.t, counter)
        self.reasons_read = 0
        for bit in states:
            self.reasons_read |= bit
        if states:
            rows: list[float | None] = []
            for k in range(len(self.t)):
                row = [v[k] for v in states.values()]
                if any(v is None for v in row):
                    rows.append(None)
                else:
                    rows.append(float(sum(b for b, v in zip(states, row, strict=True) if v)))
            self.values["clock_reasons"] = rows
        return self.reasons_read


def _counter_states(t: list[float], counter: list[float | None]) -> list[float | None]:
    """A cumulative reason counter (seconds) as a state per row: active where it grew by at
    least half the time since the row before; unread on the first row, around an unread
    value and where it went back (a reset)."""
    out: list[float | None] = [None]
    for k in range(1, len(t)):
        a, b, dt = counter[k - 1], counter[k], t[k] - t[k - 1]
        if a is None or b is None or b < a or dt <= 0:
            out.append(None)
        else:
            out.append(1.0 if b - a >= 0.5 * dt else 0.0)
    return out


@dataclass(slots=True)
class Trace:
    """A foreign trace parsed into soak's fields, per device, on one time axis."""

    path: Path
    format: str
    time_basis: str  # how the time axis was obtained, for the report
    devices: dict[int, DeviceTrace] = field(default_factory=dict)
    names: dict[int, str] = field(default_factory=dict)
    uuids: dict[int, str] = field(default_factory=dict)
    epoch_s: float | None = None  # the first sample's wall time, where the trace has one
    work_unit: str | None = None  # FLOP, B, token; None: no throughput
    work_scale: float = 1.0
    # server-level series (SERVER_IMPORTED) -> time -> value: one value per time, from the
    # first device row that gives one; and the column each came from
    server: dict[str, dict[float, float | None]] = field(default_factory=dict)
    server_columns: dict[str, str] = field(default_factory=dict)
    # Where the trace has no device column and is read as one device: what to give instead,
    # named when a time has two rows ("add index to --query-gpu").
    one_device: str | None = None
    # The columns soak did not use, by name (the import's output and the report list them),
    # and where two columns gave one field, which was used over which ("power.draw over
    # power.draw.instant"): no column is dropped without a word.
    unused: list[str] = field(default_factory=list)
    preferred: list[str] = field(default_factory=list)
    serials: dict[int, str] = field(default_factory=dict)
    drivers: dict[int, str] = field(default_factory=dict)

    def add(
        self,
        device: int,
        t: float,
        values: Mapping[str, float | None],
        line: int,
        rate_interval_s: float | None = None,
        stamp: str | None = None,
        reasons: Mapping[int, float | None] | None = None,
        counters: Mapping[int, float | None] | None = None,
    ) -> None:
        """One row: the time must not go backwards and a device appears once per time.
        ``stamp`` is the time as the file writes it, for the error messages; ``reasons`` and
        ``counters`` the clock-event reasons read one at a time (by bit: a state, a
        cumulative time in seconds)."""
        trace = self.devices.setdefault(device, DeviceTrace())
        if trace.t:
            if t < trace.t[-1]:
                raise ImportFailed(
                    self.path,
                    line,
                    f"time goes backwards for device {device} "
                    f"({t:.3f} s after {trace.t[-1]:.3f} s)",
                )
            if t == trace.t[-1] and self.one_device is not None:
                raise ImportFailed(
                    self.path,
                    line,
                    f"no device column, so read as one device, but time "
                    f"{stamp.strip() if stamp else f'{t:.3f} s'} has two rows: {self.one_device}",
                )
            if t == trace.t[-1]:
                raise ImportFailed(
                    self.path, line, f"device {device} appears twice at the same time"
                )
        rows = len(trace.t)
        trace.t.append(t)
        for name in TELEMETRY_IMPORTED:
            trace.values[name].append(values.get(name))
        _append(trace.reason_states, reasons or {}, rows)
        _append(trace.reason_counters, counters or {}, rows)
        for name in DEVICE_FACTS:
            value = values.get(name)
            if value is not None:
                trace.facts.setdefault(name, value)
        rate = values.get("throughput")
        trace.rate.append(None if rate is None else rate * self.work_scale)
        trace.rate_interval.append(rate_interval_s)
        for name in SERVER_IMPORTED:
            if name in values:
                # 0 °C is a BMC column's "not read yet" (every sensor column of the B200
                # sweep's logs reads 0.0 until its first IPMI poll), never an inlet
                value = values[name] or None
                series = self.server.setdefault(name, {})
                if series.get(t) is None:
                    series[t] = value

    def resolve_reasons(self) -> None:
        """Every device's reasons folded into its bitmask (``DeviceTrace.resolve_reasons``):
        a reader calls it once its rows are in."""
        for device in self.devices.values():
            device.resolve_reasons()

    def check_not_empty(self) -> None:
        if not any(d.t for d in self.devices.values()):
            raise ImportFailed(
                self.path, None, "no samples: the file is empty or holds only a header"
            )


def _append(
    table: dict[int, list[float | None]], row: Mapping[int, float | None], rows: int
) -> None:
    """One row of per-reason values, every reason's list one longer (None where the row has
    none; a reason first seen now is None for the rows before)."""
    for bit in row:
        table.setdefault(bit, [None] * rows)
    for bit, values in table.items():
        values.append(row.get(bit))


def prefer(
    names: list[str], ranks: Mapping[str, tuple[str, int]]
) -> tuple[dict[int, str], list[str], list[str]]:
    """Which column gives each field where several could (``ranks``: column name ->
    (field, rank), the lowest rank wins): column index -> field for the winners, the
    losers' names ("power.draw.instant (power.draw preferred)"), and the precedence used
    ("power_w from power.draw over power.draw.instant")."""
    best: dict[str, tuple[int, int]] = {}
    for k, name in enumerate(names):
        if name in ranks:
            target, rank = ranks[name]
            if target not in best or rank < best[target][1]:
                best[target] = (k, rank)
    chosen = {k: target for target, (k, _) in best.items()}
    unused, preferred = [], []
    for target, (k, _) in best.items():
        losers = [n for j, n in enumerate(names) if n in ranks and ranks[n][0] == target and j != k]
        if losers:
            unused += [f"{n} ({names[k]} preferred)" for n in losers]
            preferred.append(f"{target} from {names[k]} over {', '.join(losers)}")
    return chosen, unused, preferred


def throughput_unit(text: str | None) -> tuple[str, float]:
    if text is None:
        return "FLOP", 1.0
    try:
        return THROUGHPUT_UNITS[text.lower()]
    except KeyError:
        raise ConfigError(
            f"--throughput-unit: {text!r} is not one of {', '.join(THROUGHPUT_UNITS)}"
        ) from None


# -- load segments ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Segment:
    start_s: float
    end_s: float
    basis: str  # what said "loaded": utilisation, power, throughput, or "given"

    @property
    def length_s(self) -> float:
        return self.end_s - self.start_s


def loaded_mask(trace: DeviceTrace) -> tuple[np.ndarray, str]:
    """Which of one device's samples are under load, and from what signal: utilisation where
    it is read, else power (above half-way from its idle floor to its loaded ceiling), else a
    reported throughput, else every sample (a trace without any load signal is all load)."""
    util = _array(trace.values["util_pct"])
    if np.isfinite(util).sum() >= 2:
        return np.nan_to_num(util, nan=0.0) >= LOADED_UTIL_PCT, "utilisation"
    power = _array(trace.values["power_w"])
    if np.isfinite(power).sum() >= 2:
        lo, hi = np.nanpercentile(power, [5, 95])
        if hi - lo > 0.25 * hi:
            return np.nan_to_num(power, nan=0.0) > lo + 0.5 * (hi - lo), "power"
    rate = _array(trace.rate)
    if np.isfinite(rate).any():
        return np.nan_to_num(rate, nan=0.0) > 0, "throughput"
    return np.ones(len(trace.t), dtype=bool), "none (whole trace)"


def _array(values: Sequence[float | None]) -> np.ndarray:
    return np.array([math.nan if v is None else v for v in values], dtype=float)


def find_segments(t: np.ndarray, loaded: np.ndarray, basis: str) -> list[Segment]:
    """Runs of loaded samples, joined across dips shorter than MAX_GAP_S and kept when they
    last at least MIN_SEGMENT_S."""
    runs: list[list[float]] = []
    for time, on in zip(t, loaded, strict=True):
        if not on:
            continue
        if runs and time - runs[-1][1] <= MAX_GAP_S:
            runs[-1][1] = float(time)
        else:
            runs.append([float(time), float(time)])
    return [Segment(a, b, basis) for a, b in runs if b - a >= MIN_SEGMENT_S]


def server_segments(trace: Trace) -> list[Segment]:
    """Load segments of the whole server: the union of every device's, longest first."""
    spans: list[Segment] = []
    for device in trace.devices.values():
        mask, basis = loaded_mask(device)
        spans += find_segments(np.asarray(device.t), mask, basis)
    spans.sort(key=lambda s: s.start_s)
    merged: list[Segment] = []
    for s in spans:
        if merged and s.start_s - merged[-1].end_s <= MAX_GAP_S:
            last = merged[-1]
            merged[-1] = Segment(last.start_s, max(last.end_s, s.end_s), last.basis)
        else:
            merged.append(s)
    return sorted(merged, key=lambda s: -s.length_s)


def choose_segment(
    trace: Trace, load_start: float | None, load_end: float | None
) -> tuple[Segment, list[Segment]]:
    """The segment to import and the other detected ones. Given bounds override detection;
    a bound not given comes from the longest detected segment (or the trace's ends)."""
    t_end = max(d.t[-1] for d in trace.devices.values() if d.t)
    found = server_segments(trace)
    longest = found[0] if found else None
    if load_start is None and load_end is None:
        if longest is None:
            raise ImportFailed(
                trace.path,
                None,
                "no load segment found (no 30 s of load by utilisation, "
                "power or throughput); give --load-start/--load-end",
            )
        return longest, found[1:]
    start = load_start if load_start is not None else (longest.start_s if longest else 0.0)
    end = load_end if load_end is not None else (longest.end_s if longest else t_end)
    if start >= t_end:
        raise ConfigError(f"--load-start: {start:g} s is past the trace's end ({t_end:.1f} s)")
    if not 0 <= start < end:
        raise ConfigError(f"--load-start/--load-end: {start:g} s to {end:g} s is not a segment")
    return Segment(start, min(end, t_end), "given"), found


# -- the run ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ImportOptions:
    workload: str
    host: str | None
    out: Path
    tags: dict[str, str]
    command: str
    load_start_s: float | None = None
    load_end_s: float | None = None
    name: str | None = None  # device model, where the trace does not name it
    profile: Profile | None = None  # --profile: judged by it, its [sku] over any guess


@dataclass(frozen=True, slots=True)
class ImportResult:
    run_dir: Path
    segment: Segment
    others: list[Segment]
    frozen: Frozen | None = None  # the freeze the judged load ends at
    frozen_text: str = ""  # what the freeze's event says
    skus: dict[int, Sku | None] = field(default_factory=dict)  # each device's SKU, or none
    unused: tuple[str, ...] = ()  # the columns soak did not use
    preferred: tuple[str, ...] = ()  # where two columns gave one field, which was used

    def sku_lines(self) -> list[str]:
        """ "SKU h100-sxm for devices 0-7: guessed from the name column (...)", one line per
        SKU and basis; "SKU: none ..." where none was found."""
        groups: dict[str, list[int]] = {}
        for index, sku in sorted(self.skus.items()):
            key = (
                f"SKU {sku.profile}: {sku.basis}"
                if sku is not None
                else "SKU: not known (no name, memory and clock of a known SKU in the log): "
                "slowdown temperatures not available; give --profile"
            )
            groups.setdefault(key, []).append(index)
        if len(groups) == 1:
            return list(groups)
        return [f"{text} (devices {', '.join(map(str, found))})" for text, found in groups.items()]


def _work_samples(
    device: int, trace: DeviceTrace, part: str, unit: str, start: float, end: float
) -> list[WorkSample]:
    """A rate reported at t covers the interval since the device's previous row (or the
    interval the trace states). Zero rates before the first reported one are "not yet
    reported" (gpu-burn prints 0 until its first batch), not a stall; later zeros stay."""
    out = []
    seen_rate = False
    prev = None
    for t, rate, interval in zip(trace.t, trace.rate, trace.rate_interval, strict=True):
        t0 = t - interval if interval is not None else prev
        prev = t
        if rate is None or t0 is None or t0 < start or t > end or t <= t0:
            continue
        if rate <= 0 and not seen_rate:
            continue
        seen_rate = True
        out.append(WorkSample(device, t0, t, part, rate * (t - t0), unit))
    return out


def write_run(trace: Trace, source: Source, options: ImportOptions) -> ImportResult:
    """Write the trace as a normal run folder; on any failure the folder is removed."""
    from soak.store import make_run_dir  # the one place run folders are named

    trace.check_not_empty()
    trace.resolve_reasons()
    segment, others = choose_segment(trace, options.load_start_s, options.load_end_s)
    frozen = first_freeze(trace, segment)
    if frozen is not None:
        segment, others = _cut_at_freeze(trace, segment, others, frozen)
    host = options.host or source.file.split(".")[0]
    started = (
        dt.datetime.fromtimestamp(trace.epoch_s + segment.start_s, dt.UTC)
        if trace.epoch_s is not None
        else None
    )
    freeze = None if frozen is None else _freeze_event(frozen, trace, options.workload, segment)
    skus = {
        i: settle_sku(
            options.profile,
            trace.names.get(i) or options.name,
            d.facts.get("memory_total_mib"),
            d.facts.get("max_sm_clock_mhz"),
        )
        for i, d in sorted(trace.devices.items())
    }
    run_dir = make_run_dir(options.out, host, dt.datetime.now(dt.UTC))
    try:
        _fill_store(run_dir, trace, source, options, segment, others, host, started, freeze, skus)
    except BaseException:
        shutil.rmtree(run_dir, ignore_errors=True)
        raise
    return ImportResult(
        run_dir,
        segment,
        others,
        frozen,
        freeze.message if freeze else "",
        skus,
        tuple(trace.unused),
        tuple(trace.preferred),
    )


def first_freeze(trace: Trace, segment: Segment) -> Frozen | None:
    """The earliest frozen span of any device that overlaps the load segment
    (``soak.validity``, rule 2), judged where the device was loaded."""
    found = []
    for i, device in sorted(trace.devices.items()):
        mask, _ = loaded_mask(device)
        columns: dict[str, Sequence[float | None]] = dict(device.values)
        if trace.work_unit is not None:
            columns["throughput"] = device.rate
        found += [
            f
            for f in frozen_spans(i, device.t, columns, mask)
            if f.from_s < segment.end_s and f.to_s > segment.start_s
        ]
    return min(found, key=lambda f: f.from_s, default=None)


def _cut_at_freeze(
    trace: Trace, segment: Segment, others: list[Segment], frozen: Frozen
) -> tuple[Segment, list[Segment]]:
    """The judged load ends where the freeze starts; the frozen span is another segment."""
    if frozen.from_s - segment.start_s < MIN_SEGMENT_S:
        raise ImportFailed(
            trace.path,
            None,
            f"device {frozen.device}: {frozen.describe(segment.start_s)}, from the load's "
            f"start ({segment.start_s:.1f} s into the trace): no load before it to judge",
        )
    span = Segment(frozen.from_s, min(frozen.to_s, segment.end_s), FROZEN_BASIS)
    return Segment(segment.start_s, frozen.from_s, segment.basis), [span, *others]


FROZEN_BASIS = "frozen telemetry (not judged)"


def _fill_store(
    run_dir: Path,
    trace: Trace,
    source: Source,
    options: ImportOptions,
    segment: Segment,
    others: list[Segment],
    host: str,
    started: dt.datetime | None,
    freeze: Event | None = None,
    skus: Mapping[int, Sku | None] | None = None,
) -> None:
    """A run store holding the trace as a live run of the load segment would have."""
    store = RunStore.create(run_dir / STORE_NAME, max_commit_delay_s=3600.0)
    skus = skus or {}
    try:
        run = _run_record(trace, source, options, segment, others, host, started, skus)
        store.set_meta(
            run=run.to_json(),
            host={"hostname": host, "soak": __version__},
            profile=(options.profile or load_profile(None)).as_dict(),
            load_start_s=segment.start_s,
        )
        infos = [
            _device_info(i, trace, options, source, skus.get(i)) for i in sorted(trace.devices)
        ]
        store.add_devices(infos)
        store.add_capabilities(_capabilities(trace))
        store.append(events=[Event(0.0, EventKind.RUN_START, f"imported from {source.file}")])
        if segment.start_s > 0:
            store.append(events=[Event(0.0, EventKind.BASELINE_START, "idle before the load")])
        store.append(events=[Event(segment.start_s, EventKind.LOAD_START, "load segment start")])
        _store_devices(store, trace, options.workload, segment)
        _store_server(store, trace, segment.end_s)
        if freeze is not None:
            store.append(events=[freeze])
        store.append(events=[Event(segment.end_s, EventKind.STOP, "stopped: end of load segment")])
        stop = StopRecord(
            StopReason.DURATION,
            load_stop_s=segment.end_s,
            duration_s=segment.end_s - segment.start_s,
            detail="end of the imported load segment",
        )
        store.set_meta(stop=stop.to_json())
    finally:
        store.close()


def _device_info(
    index: int, trace: Trace, options: ImportOptions, source: Source, sku: Sku | None
) -> DeviceInfo:
    """A device as the log names it, with what the log says of it and, for what it does
    not, its SKU's facts (``soak.importers.sku``)."""
    facts = trace.devices[index].facts
    known = sku.facts if sku is not None else None

    def fact(name: str) -> float | None:
        value = facts.get(name)
        return value if value is not None else getattr(known, name, None)

    memory = fact("memory_total_mib")
    extra = {} if sku is None else {"sku": sku.profile, "sku_basis": sku.basis}
    return DeviceInfo(
        index=index,
        backend="import",
        name=trace.names.get(index) or options.name or f"unknown ({source.format} trace)",
        uuid=trace.uuids.get(index),
        serial=trace.serials.get(index),
        driver_version=trace.drivers.get(index),
        memory_total_b=None if memory is None else int(memory * 2**20),
        default_power_limit_w=fact("default_power_limit_w"),
        max_sm_clock_mhz=fact("max_sm_clock_mhz"),
        slowdown_temp_c=fact("slowdown_temp_c"),
        shutdown_temp_c=getattr(known, "shutdown_temp_c", None),
        max_operating_temp_c=fact("max_operating_temp_c"),
        extra=extra,
    )


def _sku_record(skus: Mapping[int, Sku | None]) -> list[dict[str, Any]]:
    """Each SKU the import settled, with how and for which devices (``source.sku``)."""
    groups: dict[tuple[str, str], list[int]] = {}
    for index, sku in sorted(skus.items()):
        if sku is not None:
            groups.setdefault((sku.profile, sku.basis), []).append(index)
    return [{"profile": p, "basis": b, "devices": d} for (p, b), d in groups.items()]


def _run_record(
    trace: Trace,
    source: Source,
    options: ImportOptions,
    segment: Segment,
    others: list[Segment],
    host: str,
    started: dt.datetime | None,
    skus: Mapping[int, Sku | None] | None = None,
) -> RunRecord:
    """The run record of an import: its source, time basis, load segments, the columns it
    did not use and the precedence it applied, and the SKU of its devices."""
    steps = [np.diff(d.t) for d in trace.devices.values() if len(d.t) > 1]
    return RunRecord(
        backend="import",
        workload=options.workload,
        started_utc=started.strftime("%Y-%m-%dT%H:%M:%SZ") if started else None,
        command=options.command,
        host=host,
        tags=options.tags,
        until_steady=False,
        interval_s=float(np.median(np.concatenate(steps))) if steps else None,
        # the trace's own choice, not a fault: without a throughput column the analysis
        # says "not measured" for throughput and never "hardware-fault"
        records_throughput=trace.work_unit is not None,
        source=source.as_dict()
        | {
            "time_basis": trace.time_basis,
            "load_segment": _segment_dict(segment),
            "other_segments": [_segment_dict(s) for s in others],
            "columns_not_used": list(trace.unused),
            "column_precedence": list(trace.preferred),
            "sku": _sku_record(skus or {}),
        },
    )


def _store_devices(store: RunStore, trace: Trace, workload: str, segment: Segment) -> None:
    """Each device's telemetry up to the segment's end, and its work within the segment."""
    for i in sorted(trace.devices):
        device = trace.devices[i]
        rows = [
            Telemetry(i, t, **_row_values(device, k))
            for k, t in enumerate(device.t)
            if t <= segment.end_s
        ]
        samples = (
            _work_samples(i, device, workload, trace.work_unit, segment.start_s, segment.end_s)
            if trace.work_unit
            else []
        )
        store.append(telemetry=rows, samples=samples)


def _freeze_event(frozen: Frozen, trace: Trace, workload: str, segment: Segment) -> Event:
    """The freeze the judged load was cut at, as the runner's watch records one: its time
    since the device's load start as the analysis finds it (its first work done, else the
    segment's start)."""
    origin = segment.start_s
    if trace.work_unit:
        device = trace.devices[frozen.device]
        unit = trace.work_unit
        done = _work_samples(frozen.device, device, workload, unit, origin, segment.end_s)
        origin = done[0].t_end_s if done else origin
    message = (
        f"{frozen.describe(origin)}; the judged load ends where the freeze starts, "
        "the frozen span is not judged"
    )
    details = frozen.as_dict() | {"judged": False}
    return Event(frozen.from_s, EventKind.TELEMETRY, message, frozen.device, details)


def _store_server(store: RunStore, trace: Trace, end_s: float) -> None:
    """The server-level series, and the inlet's probe record as a live run's BMC writes it
    (meta ``"bmc"``): read from the mapped column, or why not."""
    inlet = trace.server.get(INLET_SERIES)
    if inlet is None:
        return
    column = trace.server_columns.get(INLET_SERIES, INLET_SERIES)
    readings = [ServerReading(t, INLET_SERIES, v) for t, v in sorted(inlet.items()) if t <= end_s]
    store.append(server_readings=readings)
    read = any(r.value is not None for r in readings)
    probe = BmcProbe(
        source=f"imported column {column!r}",
        capability=Capability.SUPPORTED if read else Capability.NOT_SUPPORTED,
        inlet_sensor=column,
        sensors=(column,),
        reason=None if read else f"the imported column {column!r} holds no reading",
    )
    store.set_meta(bmc=probe.as_dict())


def _row_values(device: DeviceTrace, k: int) -> dict[str, float | int | None]:
    values: dict[str, float | int | None] = {f: device.values[f][k] for f in TELEMETRY_IMPORTED}
    reasons = values["clock_reasons"]
    if reasons is not None:  # a bitmask: an integer in the store
        values["clock_reasons"] = int(reasons)
    return values


def _segment_dict(s: Segment) -> dict[str, Any]:
    return {"start_s": s.start_s, "end_s": s.end_s, "basis": s.basis}


def _capabilities(trace: Trace) -> dict[int, dict[str, Capability]]:
    """A field the trace never reads is "not supported" once, in the table. Where the
    clock-event reasons were read one at a time, each reason has its row too: one the log
    did not hold is "not supported" ("not available" in every figure, never inactive)."""
    table = {}
    for i, device in trace.devices.items():
        row = {
            f: Capability.SUPPORTED
            if any(v is not None for v in device.values[f])
            else Capability.NOT_SUPPORTED
            for f in TELEMETRY_IMPORTED
        }
        read = device.resolve_reasons()
        if read not in (0, EVERY_REASON):  # some reasons, not the whole bitmask
            for reason in SINGLE_REASONS:
                known = int(reason.bits) & read
                status = Capability.SUPPORTED if known else Capability.NOT_SUPPORTED
                row[REASON_CAPABILITY.format(key=reason.key)] = status
        table[i] = row
    return table
