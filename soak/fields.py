"""The registry of what soak measures: each telemetry field declared once, with its kind, unit,
label and meaning, and the uses each part of soak makes of it (pyperf's ``METADATA``).

Every list of metric names elsewhere is derived from here: the store's column types, the
window statistics, the summary's cold/steady keys, the noise estimate, the counters the
analysis follows, the report's labels and the Prometheus exporter's names. Adding a metric is
one field on ``Telemetry`` (``soak/model.py``), one line in ``FIELDS``, and the backends that
can read it; ``tests/test_fields.py`` fails until both agree.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np

from soak.model import HW_REASONS, ClockReason


class Kind(enum.StrEnum):
    GAUGE = "gauge"  # a level read at the tick: temperature, clock, power
    COUNTER = "counter"  # a count that only grows while the device runs: ECC errors
    FLAG = "flag"  # 0/1 state: a row remap pending
    BITMASK = "bitmask"  # bits tested with &: clock-event reasons


class Still(enum.StrEnum):
    """How a field may legitimately hold still while its device is under load."""

    MAY = "may"  # constant for hours on a healthy device: a clock pinned at its maximum
    MOVES = "moves"  # a level read finely enough that a load always moves it: power, temperature
    GROWS = "grows"  # a counter the load always adds to: energy


class Use(enum.Flag):
    """What soak does with a field besides storing it."""

    NONE = 0
    WINDOW = enum.auto()  # median, p10, p90 per cold/steady/final window
    SUMMARY = enum.auto()  # cold, steady and ratio in summary.json (schema v1)
    NOISE = enum.auto()  # batch-means noise of its steady median (soak compare)
    FOLLOWED = enum.auto()  # a counter or flag whose first/last/peak the analysis follows
    FAILS = enum.auto()  # any new count during the run fails the device
    FLEET = enum.auto()  # its steady median is carried per device into fleet reports/history
    IMPORT = enum.auto()  # a foreign trace's column may be mapped onto it (soak import --map)


@dataclass(frozen=True, slots=True)
class Field:
    name: str  # the Telemetry attribute and store column: the unit is in the name
    kind: Kind
    unit: str  # for people: "°C", "MHz", "W"; "" for a count
    label: str  # for people: "HBM temperature"
    meaning: str  # one sentence, for the report and the exporter's HELP
    uses: Use = Use.NONE
    # Prometheus: name after "soak_device_" (base unit in it) and the scale to that unit;
    # None where the exporter gives the field another shape (clock reasons).
    prom: str | None = None
    prom_scale: float = 1.0
    better: int = 0  # which way is better in a comparison: +1 higher, -1 lower, 0 neither
    # The values the hardware can report, inclusive; a reading outside is not a reading
    # (soak/validity.py). None: no bound on that side.
    plausible: tuple[float | None, float | None] = (None, None)
    still: Still = Still.MAY

    @property
    def integer(self) -> bool:
        """Stored as an integer: flags, bitmasks and counts (a counter with a unit, such as
        energy in joules, is real)."""
        return self.kind in (Kind.FLAG, Kind.BITMASK) or (
            self.kind is Kind.COUNTER and not self.unit
        )


# The most power any one device can draw, with margin (a GB300 board is rated 1.4 kW): a
# reading above it is not a reading even where the enforced limit is unknown. Where the limit
# is known, twice it is the bound (soak/validity.py).
POWER_MAX_W = 5000.0

W, S, N, F, X = Use.WINDOW, Use.SUMMARY, Use.NOISE, Use.FOLLOWED, Use.FAILS
FL, IM = Use.FLEET, Use.IMPORT

FIELDS: tuple[Field, ...] = (
    Field("temp_c", Kind.GAUGE, "°C", "temperature", "GPU (die) temperature",
          W | S | N | FL | IM, "temperature_celsius", better=-1,
          plausible=(-20.0, 150.0), still=Still.MOVES),
    Field("mem_temp_c", Kind.GAUGE, "°C", "HBM temperature", "memory (HBM) temperature",
          W | S | N | IM, "memory_temperature_celsius", better=-1,
          plausible=(-20.0, 150.0)),
    Field("sm_clock_mhz", Kind.GAUGE, "MHz", "SM clock", "SM (graphics) clock",
          W | S | N | FL | IM, "sm_clock_hertz", 1e6, better=+1,
          plausible=(0.0, 10_000.0)),
    Field("mem_clock_mhz", Kind.GAUGE, "MHz", "memory clock", "memory clock", W | S | N | IM,
          "memory_clock_hertz", 1e6, better=+1,
          plausible=(0.0, 40_000.0)),
    Field("power_w", Kind.GAUGE, "W", "power", "power draw", W | S | N | FL | IM, "power_watts",
          plausible=(0.0, POWER_MAX_W), still=Still.MOVES),
    Field("power_limit_w", Kind.GAUGE, "W", "power limit", "enforced power limit", W | IM,
          "power_limit_watts",
          plausible=(0.0, POWER_MAX_W)),
    Field("energy_j", Kind.COUNTER, "J", "energy counter", "energy counter since the driver "
          "loaded", prom="energy_joules",
          plausible=(0.0, None), still=Still.GROWS),
    Field("util_pct", Kind.GAUGE, "%", "utilisation", "compute utilisation", W | S | IM,
          "utilization_ratio", 0.01,
          plausible=(0.0, 100.0)),
    Field("mem_util_pct", Kind.GAUGE, "%", "memory utilisation", "memory-controller "
          "utilisation", W | IM, "memory_utilization_ratio", 0.01,
          plausible=(0.0, 100.0)),
    Field("fan_pct", Kind.GAUGE, "%", "fan", "fan speed, of its maximum", IM, "fan_ratio", 0.01,
          plausible=(0.0, None)),  # NVML: "may exceed 100 % in certain cases"
    Field("clock_reasons", Kind.BITMASK, "", "clock-event reasons", "why the clocks are below "
          "their maximum (NVML's bits)", IM,
          plausible=(0.0, None)),
    Field("power_violation_s", Kind.GAUGE, "s", "power violation time", "time held back by "
          "the power limit, as the device counts it",
          plausible=(0.0, None)),
    Field("thermal_violation_s", Kind.GAUGE, "s", "thermal violation time", "time held back "
          "by temperature, as the device counts it",
          plausible=(0.0, None)),
    Field("ecc_corrected", Kind.COUNTER, "", "correctable ECC errors", "corrected ECC errors "
          "(volatile count)", F, "ecc_corrected_errors",
          plausible=(0.0, None)),
    Field("ecc_uncorrected", Kind.COUNTER, "", "uncorrectable ECC errors", "uncorrected ECC "
          "errors (volatile count)", F | X, "ecc_uncorrected_errors",
          plausible=(0.0, None)),
    Field("remap_pending", Kind.FLAG, "", "pending row remap", "a memory row remap waits for a "
          "reset", F, "remap_pending",
          plausible=(0.0, 1.0)),
    Field("remap_failure", Kind.FLAG, "", "row remap failure", "a memory row remap failed", F,
          "remap_failure",
          plausible=(0.0, 1.0)),
    Field("retired_pages", Kind.COUNTER, "", "retired pages", "memory pages retired", F | X,
          "retired_pages",
          plausible=(0.0, None)),
    Field("pcie_replay", Kind.COUNTER, "", "PCIe replays", "PCIe replay counter", F,
          "pcie_replay",
          plausible=(0.0, None)),
    Field("foreign_load_pct", Kind.GAUGE, "%", "foreign load", "share of the device's "
          "capacity used by work that is not soak's (a CPU: other processes and steal time)",
          W, "foreign_load_ratio", 0.01),
    Field("foreign_procs", Kind.GAUGE, "", "foreign processes", "compute processes on the "
          "device that are not soak's", W, "foreign_processes"),
    Field("foreign_mem_mib", Kind.GAUGE, "MiB", "foreign memory", "device memory used by "
          "compute processes that are not soak's", W, "foreign_memory_bytes", 2**20),
)  # fmt: skip

BY_NAME: dict[str, Field] = {f.name: f for f in FIELDS}


def named(use: Use) -> tuple[str, ...]:
    """The fields with ``use``, in declaration order."""
    return tuple(f.name for f in FIELDS if use in f.uses)


WINDOW_METRICS = named(Use.WINDOW)
SUMMARY_METRICS = named(Use.SUMMARY)
NOISE_METRICS = named(Use.NOISE)
FOLLOWED = named(Use.FOLLOWED)
FAILING_COUNTERS = named(Use.FAILS)
FLEET_FIGURES = named(Use.FLEET)
IMPORTABLE = named(Use.IMPORT)
INTEGER_COLUMNS = frozenset(f.name for f in FIELDS if f.integer)
COLUMNS: tuple[str, ...] = ("t_s", *(f.name for f in FIELDS))  # a device's stored series


class Columns(Mapping[str, np.ndarray]):
    """One device's telemetry as the store reads it back: an array per field of the
    registry, ordered by time ``t_s``, read as attributes (``tele.temp_c``); NaN where a
    value could not be read, and throughout a column a store written before its field
    existed lacks. A read-only mapping too, for code that goes by the registry's names.
    The store reads a column that holds one value throughout as that value broadcast over
    the run (a read-only array): arrays are never written into, only replaced."""

    __slots__ = COLUMNS

    def __init__(self, arrays: Mapping[str, np.ndarray]) -> None:
        unknown = sorted(set(arrays) - set(COLUMNS))
        if unknown:
            raise KeyError(f"not telemetry columns: {', '.join(unknown)}")
        t = np.asarray(arrays["t_s"], dtype=float)
        for name in COLUMNS:
            column = arrays.get(name)
            value = np.full(t.size, np.nan) if column is None else np.asarray(column)
            object.__setattr__(self, name, t if name == "t_s" else value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"telemetry columns are read-only ({name})")

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in _COLUMN_NAMES:
            raise KeyError(name)
        return getattr(self, name)

    def __iter__(self) -> Iterator[str]:
        return iter(COLUMNS)

    def __len__(self) -> int:
        return len(COLUMNS)

    def __getattr__(self, name: str) -> np.ndarray:  # for type checkers: every field's column
        raise AttributeError(name)

    def replace(self, **arrays: np.ndarray) -> Columns:
        """A copy with the columns named replaced."""
        return Columns({**self, **arrays})


_COLUMN_NAMES = frozenset(COLUMNS)


class FieldStats(Mapping[str, float | None]):
    """One statistic of a window (its median, 10th or 90th percentile) for each window field
    of the registry (``WINDOW_METRICS``), read as attributes (``stats.median.temp_c``);
    None where not available. A read-only mapping of the window fields too, for code that
    goes by the registry's names (summary.json's keys, a clock chosen by unit of work)."""

    __slots__ = WINDOW_METRICS

    def __init__(self, values: Mapping[str, float | None] | None = None) -> None:
        values = values or {}
        unknown = sorted(set(values) - _WINDOW_NAMES)
        if unknown:
            raise KeyError(f"not window fields: {', '.join(unknown)}")
        for name in WINDOW_METRICS:
            object.__setattr__(self, name, values.get(name))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"window statistics are read-only ({name})")

    def __getitem__(self, name: str) -> float | None:
        if name not in _WINDOW_NAMES:
            raise KeyError(name)
        return getattr(self, name)

    def __iter__(self) -> Iterator[str]:
        return iter(WINDOW_METRICS)

    def __len__(self) -> int:
        return len(WINDOW_METRICS)

    def __getattr__(self, name: str) -> float | None:  # for type checkers: every window field
        raise AttributeError(name)

    def __or__(self, other: Mapping[str, float | None]) -> FieldStats:
        """A copy with the fields of ``other`` replaced."""
        return FieldStats({**self, **other})

    def __repr__(self) -> str:
        return f"FieldStats({dict(self)!r})"


_WINDOW_NAMES = frozenset(WINDOW_METRICS)


@dataclass(frozen=True, slots=True)
class Reason:
    key: str  # the name in windows' reason shares and in the report
    bits: ClockReason
    label: str


# The clock-event reasons whose share of each window is reported; "hw_any" is the HW group.
REASONS: tuple[Reason, ...] = (
    Reason("sw_power_cap", ClockReason.SW_POWER_CAP, "SW power cap"),
    Reason("sw_thermal", ClockReason.SW_THERMAL, "SW thermal slowdown"),
    Reason("hw_slowdown", ClockReason.HW_SLOWDOWN, "HW slowdown"),
    Reason("hw_thermal", ClockReason.HW_THERMAL, "HW thermal slowdown"),
    Reason("hw_power_brake", ClockReason.HW_POWER_BRAKE, "HW power brake"),
    Reason("hw_any", HW_REASONS, "any HW reason"),
)
REASONS_BY_KEY: dict[str, Reason] = {r.key: r for r in REASONS}
# The HW group one reason at a time (HW slowdown, HW thermal slowdown, HW power brake).
HW_REASON_BITS: tuple[Reason, ...] = tuple(
    r for r in REASONS if r.bits != HW_REASONS and r.bits & HW_REASONS == r.bits
)


# An imported log may hold some reasons and not others (per-reason columns without
# ``sw_power_cap``): its capability table then has one row per reason under this name, and
# a reason whose row is not "supported" was not read ("not available", never "inactive").
# A live run's backend reads NVML's whole bitmask: no such rows, every reason read.
REASON_CAPABILITY = "clock_reasons.{key}"
# The reasons read one at a time (the HW group's key is their union, not a reason of its own).
SINGLE_REASONS: tuple[Reason, ...] = tuple(r for r in REASONS if r.key != "hw_any")


def unread_reasons(capabilities: Mapping[str, str] | None) -> int:
    """The reason bits a device's readings could not tell: those whose per-reason capability
    row (``REASON_CAPABILITY``) is there and not "supported"; 0 where the table has no such
    rows (NVML's bitmask reads them all)."""
    caps = capabilities or {}
    bits = 0
    for reason in SINGLE_REASONS:
        status = caps.get(REASON_CAPABILITY.format(key=reason.key))
        if status is not None and status != "supported":
            bits |= int(reason.bits)
    return bits


def label(name: str) -> str:
    """The label of a field or reason key, for people; the key itself if unknown."""
    field = BY_NAME.get(name)
    if field is not None:
        return field.label
    return next((r.label for r in REASONS if r.key == name), name)
