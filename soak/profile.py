"""Acceptance profiles: what the analysis judges a run by.

Profiles are TOML files (``tomllib``) with two tables, ``[windows]`` and ``[checks]``; a SKU
profile adds ``device_names`` (the device names it is for), ``[floors.WORKLOAD.PART]``
tables, each a minimum steady throughput (``min_rate``, in the part's unit of work per
second) and where that number comes from (``source``), and ``[sku]``: what its devices are
(``SkuFacts``: slowdown temperatures, memory, maximum clock), for a log that does not say.
Every bad key or value gives a one-line ``ConfigError`` naming it. The built-in profiles
are ``soak/profiles/*.toml``. The analysis stands on this module and nothing of the engine:
the run's own configuration (``RunConfig``, what the engine needs) is ``soak.config``.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from soak.errors import ConfigError


def setting(default: Any, means: str) -> Any:
    """A profile setting with its default and what it means, as the report explains it."""
    return field(default=default, metadata={"meaning": means})


def meaning(f: dataclasses.Field) -> str:
    """What a profile setting means (``setting``)."""
    return f.metadata.get("meaning", "")


@dataclass(frozen=True, slots=True)
class Windows:
    """Where the cold and steady windows lie and what equilibrium means (docs/verdict.md,
    docs/equilibrium.md)."""

    cold_start_s: float = setting(
        5.0, "cold window starts this long after the device's load starts (s)"
    )  # past warm-up
    cold_length_s: float = setting(60.0, "length of the cold window (s)")  # before the sink warms
    eq_window_s: float = setting(
        300.0, "each of the two adjacent windows the equilibrium rule compares (s)"
    )
    eq_check_interval_s: float = setting(30.0, "time between equilibrium checks (s)")
    eq_checks: int = setting(3, "passing checks within one window that make equilibrium")
    eq_temp_tolerance_c: float = setting(  # one sensor step
        1.0, "settled: temperature level moved less than this between the windows (°C)"
    )
    eq_rel_tolerance_pct: float = setting(
        1.0, "settled: power, SM clock and throughput moved less than this (%)"
    )
    steady_length_s: float = setting(600.0, "length of the steady window after equilibrium (s)")
    min_steady_s: float = setting(
        300.0, "--until-steady: the shortest steady window a stop may judge its checks on (s)"
    )


@dataclass(frozen=True, slots=True)
class Checks:
    """Acceptance thresholds (docs/verdict.md)."""

    # steady / cold, with the power-capped drift taken out: thermal and unexplained loss
    min_throughput_retention: float = setting(
        0.95, "steady / cold throughput, without the power-capped drift, at least"
    )
    max_power_drift: float = setting(
        0.08, "power-capped (leakage) drift from cold to steady fails past this"
    )
    expected_power_drift: float = setting(  # 0: no expectation
        0.0, "the SKU's usual power-capped drift, shown for comparison"
    )
    max_sw_thermal_fraction: float = setting(
        0.01, "SW thermal slowdown: largest share of steady time"
    )
    min_temp_margin_c: float = setting(
        5.0, "steady temperature at least this far below slowdown (°C)"
    )
    outlier_mad_k: float = setting(3.0, "within-server rule: k in median − max(k·MAD, rel·median)")
    outlier_min_rel: float = setting(
        0.05, "within-server rule: rel in median − max(k·MAD, rel·median)"
    )
    max_jitter_cv: float = setting(
        0.05, "steady throughput coefficient of variation above this warns"
    )
    require_equilibrium: bool = setting(False, "fail (not warn) when equilibrium is not reached")
    # The least evidence a verdict is given on: a device that reached no thermal equilibrium
    # in a load shorter than this was never seen hot, so it is not accepted (INCOMPLETE).
    # 660 s is the shortest load the default windows can confirm equilibrium in
    # (2 × eq_window_s + (eq_checks − 1) × eq_check_interval_s); 0 judges any length.
    min_load_s: float = setting(
        660.0,
        "a device with no thermal equilibrium in a load shorter than this cannot be judged: "
        "INCOMPLETE (s; 0: judge any length)",
    )
    min_power_limit_fraction: float = setting(
        0.99, "an enforced power limit below this share of the default limit warns"
    )
    hot_spot_margin_c: float = setting(
        6.0, "a device hotter than the server's median by more than this warns (°C)"
    )
    # ddp (synchronous training): a rank that is the straggler in more than this share of
    # steady steps, computing more than warn (fail) above the median rank, warns (fails)
    ddp_straggler_share: float = setting(
        0.5, "ddp: share of steady steps a rank must set the pace in to be judged"
    )
    ddp_straggler_warn: float = setting(
        0.05, "ddp: its compute time above the median rank's that warns"
    )
    ddp_straggler_fail: float = setting(
        0.10, "ddp: its compute time above the median rank's that fails"
    )
    min_sync_retention: float = setting(0.95, "ddp: steady / cold server step rate at least")
    min_busbw_Bps: float = setting(0.0, "ddp: all-reduce bus bandwidth floor (B/s; 0: none)")
    min_busbw_source: str = setting(  # [datasheet], [assumed], ...
        "", "ddp: where the bus bandwidth floor comes from"
    )
    min_busbw_ranks: int = setting(
        2, "ddp: the bus bandwidth floor holds for at least this many ranks"
    )
    # Thermal headroom (soak.analysis.headroom): the inlet each device is projected to, °C
    # (ASHRAE A2 allowable: 35 °C), and the margin to the SW thermal slowdown it must keep
    # there, °C (0: no floor; a projection that crosses a slowdown threshold below the
    # design inlet warns either way).
    design_inlet_c: float = setting(
        35.0, "thermal headroom: the inlet each device is projected to (°C)"
    )
    min_headroom_c: float = setting(
        0.0, "thermal headroom: SW thermal margin at the design inlet at least (°C; 0: none)"
    )


@dataclass(frozen=True, slots=True)
class SkuFacts:
    """What a SKU's devices are, as ``nvidia-smi -q`` reports them: the facts an imported
    log lacks and the analysis needs (the slowdown temperatures ``temp_margin`` and
    ``slowdown_temp`` judge against), and those that tell the SKU from a log that does not
    name it (memory size, maximum SM clock). None: not known."""

    slowdown_temp_c: float | None = None  # HW slowdown ("GPU Slowdown Temp")
    shutdown_temp_c: float | None = None
    max_operating_temp_c: float | None = None  # SW thermal slowdown ("GPU Max Operating Temp")
    memory_total_mib: float | None = None
    max_sm_clock_mhz: float | None = None
    default_power_limit_w: float | None = None
    source: str = ""  # where the numbers come from


@dataclass(frozen=True, slots=True)
class Profile:
    name: str = "default"
    source: str = "built-in"
    windows: Windows = field(default_factory=Windows)
    checks: Checks = field(default_factory=Checks)
    # workload -> part -> minimum steady rate (work per second), and where it comes from
    floors: dict[str, dict[str, float]] = field(default_factory=dict)
    floor_sources: dict[str, dict[str, str]] = field(default_factory=dict)
    device_names: tuple[str, ...] = ()  # devices a SKU profile is for; () for any
    description: str = ""
    # part -> rate: floors of a run stored before they were per workload; not applied, and
    # a warning says so (``check_floors``)
    legacy_floors: dict[str, float] = field(default_factory=dict)
    sku: SkuFacts | None = None  # what its devices are ([sku]); None: any device

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def with_design_inlet(self, c: float) -> Profile:
        """This profile projecting thermal headroom to the inlet ``c`` (°C) instead of its
        own design inlet; every other setting as it is."""
        checks = dataclasses.replace(
            self.checks, design_inlet_c=check_design_inlet(c, "design inlet")
        )
        return dataclasses.replace(self, checks=checks)

    @classmethod
    def from_dict(cls, recorded: dict[str, Any]) -> Profile:
        """The profile a run stored with itself (``as_dict``), so that re-reporting an old
        run judges it as it was judged; keys this soak does not know are left out."""
        known_w = {f.name for f in dataclasses.fields(Windows)}
        known_c = {f.name for f in dataclasses.fields(Checks)}
        floors = recorded.get("floors") or {}
        sources = recorded.get("floor_sources") or {}
        return cls(
            name=recorded.get("name", "default"),
            source=recorded.get("source", "stored"),
            windows=Windows(
                **{k: v for k, v in recorded.get("windows", {}).items() if k in known_w}
            ),
            checks=Checks(**{k: v for k, v in recorded.get("checks", {}).items() if k in known_c}),
            floors={w: dict(p) for w, p in floors.items() if isinstance(p, dict)},
            floor_sources={w: dict(p) for w, p in sources.items() if isinstance(p, dict)},
            device_names=tuple(recorded.get("device_names") or ()),
            description=recorded.get("description", ""),
            legacy_floors={p: r for p, r in floors.items() if not isinstance(r, dict)}
            | (recorded.get("legacy_floors") or {}),
            sku=_stored_sku(recorded.get("sku")),
        )


def _stored_sku(recorded: Any) -> SkuFacts | None:
    """A stored profile's SKU facts; keys this soak does not know are left out."""
    if not isinstance(recorded, dict):
        return None
    known = {f.name for f in dataclasses.fields(SkuFacts)}
    return SkuFacts(**{k: v for k, v in recorded.items() if k in known})


# A room's air: colder than any data hall is kept, hotter than ASHRAE A4's 45 °C allowable.
DESIGN_INLET_RANGE_C = (-10.0, 60.0)


def check_design_inlet(value: Any, where: str) -> float:
    """``value`` as a design inlet (°C), or a ConfigError naming ``where``."""
    low, high = DESIGN_INLET_RANGE_C
    number = not isinstance(value, bool) and isinstance(value, int | float)
    if not number or not math.isfinite(value) or not low <= value <= high:
        shown = f"{value:g} °C" if number else repr(value)
        raise ConfigError(f"{where}: {shown} is not an inlet from {low:.0f} to {high:.0f} °C")
    return float(value)


def _check_value(where: str, value: Any, default: Any) -> Any:
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false, got {value!r}")
        return value
    if isinstance(default, str):
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        return value
    if isinstance(default, int | float):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        if not math.isfinite(value) or value < 0:
            raise ConfigError(f"{where}: must be a finite number >= 0, got {value!r}")
        if isinstance(default, int) and not isinstance(value, int):
            raise ConfigError(f"{where}: expected a whole number, got {value!r}")
        return value
    raise ConfigError(f"{where}: unsupported value {value!r}")


def _build(cls: type, table: Any, where: str) -> Any:
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: expected a table")
    defaults = cls()
    known = {f.name for f in dataclasses.fields(cls)}
    values = {}
    for key, value in table.items():
        if key not in known:
            raise ConfigError(f"{where}.{key}: unknown key (known: {', '.join(sorted(known))})")
        values[key] = _check_value(f"{where}.{key}", value, getattr(defaults, key))
    return dataclasses.replace(defaults, **values)


def _floors(
    table: Any, where: str
) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, str]]]:
    """``[floors.WORKLOAD.PART]`` tables of ``min_rate`` (> 0) and ``source``."""
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: expected a table")
    floors: dict[str, dict[str, float]] = {}
    sources: dict[str, dict[str, str]] = {}
    for workload, parts in table.items():
        if not isinstance(parts, dict):
            raise ConfigError(f"{where}.{workload}: expected [floors.WORKLOAD.PART] tables")
        for part, entry in parts.items():
            at = f"{where}.{workload}.{part}"
            if not isinstance(entry, dict):
                raise ConfigError(f"{at}: expected {{min_rate = N, source = '...'}}")
            unknown = sorted(set(entry) - {"min_rate", "source"})
            if unknown:
                raise ConfigError(f"{at}.{unknown[0]}: unknown key (known: min_rate, source)")
            if "min_rate" not in entry:
                raise ConfigError(f"{at}.min_rate: missing")
            rate = _check_value(f"{at}.min_rate", entry["min_rate"], 0.0)
            if rate <= 0:
                raise ConfigError(f"{at}.min_rate: must be > 0, got {rate!r}")
            source = entry.get("source", "")
            if not isinstance(source, str):
                raise ConfigError(f"{at}.source: expected a string")
            floors.setdefault(workload, {})[part] = float(rate)
            sources.setdefault(workload, {})[part] = source
    return floors, sources


def _names(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise ConfigError(f"{where}: expected a list of device names")
    return tuple(v.strip() for v in value)


def _sku(table: Any, where: str) -> SkuFacts | None:
    """``[sku]``: each fact a number > 0, ``source`` a string."""
    if table is None:
        return None
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: expected a table")
    known = {f.name for f in dataclasses.fields(SkuFacts)}
    values: dict[str, Any] = {}
    for key, value in table.items():
        if key not in known:
            raise ConfigError(f"{where}.{key}: unknown key (known: {', '.join(sorted(known))})")
        if key == "source":
            values[key] = _check_value(f"{where}.{key}", value, "")
            continue
        number = _check_value(f"{where}.{key}", value, 0.0)
        if number <= 0:
            raise ConfigError(f"{where}.{key}: must be > 0, got {number!r}")
        values[key] = float(number)
    return SkuFacts(**values)


def parse_profile(text: str, source: str) -> Profile:
    """Parse a profile's TOML text; ``source`` names it in errors."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: not valid TOML ({exc})") from exc
    allowed = {"name", "description", "device_names", "windows", "checks", "floors", "sku"}
    for key in data:
        if key not in allowed:
            raise ConfigError(
                f"{source}: unknown key {key!r} (known: {', '.join(sorted(allowed))})"
            )
    name = data.get("name", Path(source).stem)
    if not isinstance(name, str):
        raise ConfigError(f"{source}: name must be a string")
    description = data.get("description", "")
    if not isinstance(description, str):
        raise ConfigError(f"{source}: description must be a string")
    device_names = _names(data.get("device_names", []), f"{source}: device_names")
    windows = _build(Windows, data.get("windows", {}), f"{source}: windows")
    checks = _build(Checks, data.get("checks", {}), f"{source}: checks")
    floors, floor_sources = _floors(data.get("floors", {}), f"{source}: floors")
    sku = _sku(data.get("sku"), f"{source}: sku")
    if windows.eq_checks < 1:
        raise ConfigError(f"{source}: windows.eq_checks must be >= 1")
    if windows.cold_length_s <= 0 or windows.steady_length_s <= 0 or windows.eq_window_s <= 0:
        raise ConfigError(f"{source}: window lengths must be > 0")
    if not 0 < windows.min_steady_s <= windows.steady_length_s:
        raise ConfigError(f"{source}: windows.min_steady_s must be > 0 and <= steady_length_s")
    # Checks more often than once a second would never end on a long run; a zero
    # threshold would divide by zero.
    if windows.eq_check_interval_s < 1:
        raise ConfigError(f"{source}: windows.eq_check_interval_s must be >= 1 (seconds)")
    # The rule cuts each window in batches of readings: a window under a second holds none.
    if windows.eq_window_s < 1:
        raise ConfigError(f"{source}: windows.eq_window_s must be >= 1 (seconds)")
    for key in ("eq_temp_tolerance_c", "eq_rel_tolerance_pct"):
        if getattr(windows, key) <= 0:
            raise ConfigError(f"{source}: windows.{key} must be > 0")
    check_design_inlet(checks.design_inlet_c, f"{source}: checks.design_inlet_c")
    return Profile(
        name, source, windows, checks, floors, floor_sources, device_names, description, sku=sku
    )


def builtin_profiles() -> list[str]:
    folder = resources.files("soak") / "profiles"
    return sorted(
        p.name.removesuffix(".toml") for p in folder.iterdir() if p.name.endswith(".toml")
    )


def load_profile(spec: str | None) -> Profile:
    """A profile by file path or built-in name; None gives the default profile."""
    if spec is None:
        spec = "default"
    path = Path(spec)
    if path.suffix == ".toml" or path.exists():
        try:
            text = path.read_text()
        except OSError as exc:
            raise ConfigError(f"--profile {spec}: cannot read ({exc.strerror})") from exc
        except UnicodeDecodeError as exc:
            raise ConfigError(f"--profile {spec}: not UTF-8 text (byte {exc.start})") from exc
        except ValueError as exc:  # a NUL in the path
            raise ConfigError(f"--profile {spec!r}: not a usable path ({exc})") from exc
        return parse_profile(text, str(path))
    if spec not in builtin_profiles():
        known = ", ".join(builtin_profiles())
        raise ConfigError(f"--profile {spec}: no such file or built-in profile ({known})")
    text = (resources.files("soak") / "profiles" / f"{spec}.toml").read_text()
    return parse_profile(text, f"built-in:{spec}")
