"""The host's CPU as one device, read from Linux sysfs and procfs.

Everything is found once at construction (``METRIC_SOURCES`` says where each metric comes
from) and each tick only opens and reads the few small files found then: this backend runs
every second for hours next to a CPU-bound workload on the same cores, so it starts no
subprocess and walks no directory while sampling. ``root`` points it at a fake tree in
tests. A metric with no source here is ``None`` with its capability saying why, never 0.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from soak.devices.common import LogOnce, own_pids, select, temp_ok
from soak.errors import BackendUnavailable, ConfigError
from soak.model import TELEMETRY_METRICS, Capability, DeviceInfo, Event, Telemetry

log = logging.getLogger(__name__)

Value = float | int | None

# hwmon drivers whose package (die) sensor stands for the CPU's temperature, best first,
# with the labels that mark that sensor on each (in order of preference within a chip).
PACKAGE_SENSORS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("coretemp", (r"Package id \d+",)),
    ("k10temp", ("Tdie", "Tctl")),  # Tctl may carry a fan-control offset; Tdie does not
    ("zenpower", ("Tdie", "Tctl")),
)
# Thermal zones used when no hwmon package sensor exists; acpitz is a board zone that only
# approximates the package, so it is a fallback.
PACKAGE_ZONES: tuple[str, ...] = ("x86_pkg_temp", "acpitz")
DIMM_SENSORS: tuple[str, ...] = ("jc42", "spd5118")  # DDR4 / DDR5 SPD hub thermal sensors

# Telemetry fields a CPU has no notion of (or Linux does not expose): always None.
NO_CPU_NOTION: tuple[str, ...] = (
    "mem_clock_mhz",
    "clock_reasons",  # thermal_throttle/*_count exist, but are counts, not reason bits
    "power_violation_s",
    "thermal_violation_s",
    "remap_pending",
    "remap_failure",
    "retired_pages",
    "pcie_replay",
    "foreign_procs",  # every process runs on the CPU: its foreign load is foreign_load_pct
    "foreign_mem_mib",
)


def _read_text(path: Path) -> str:
    """The whole of one small sysfs/procfs file: the one place this module reads a file."""
    with open(path, "rb") as f:
        return f.read().decode("utf-8", errors="replace")


def _read_number(path: Path) -> float:
    """A file holding one number; ValueError if it holds something else."""
    return float(_read_text(path).strip())


def _numbered(directory: Path, pattern: str) -> list[Path]:
    """Entries of ``directory`` whose full name matches ``pattern`` (one ``(\\d+)`` group),
    in numeric order (hwmon10 after hwmon9)."""
    regex = re.compile(pattern)
    try:
        names = [p.name for p in directory.iterdir()]
    except OSError:
        return []
    found = [(int(m.group(1)), name) for name in names if (m := regex.fullmatch(name))]
    return [directory / name for _, name in sorted(found)]


def _capability(paths: Sequence[Path]) -> Capability:
    """Whether every one of ``paths`` reads as a number now: a trial read at probe time."""
    if not paths:
        return Capability.NOT_SUPPORTED
    try:
        for path in paths:
            _read_number(path)
    except PermissionError:
        return Capability.NO_PERMISSION
    except (OSError, ValueError) as exc:
        log.info("cpu: %s is not readable: %s", path, exc)
        return Capability.NOT_SUPPORTED
    return Capability.SUPPORTED


def _optional_number(path: Path, scale: float) -> float | None:
    """A threshold or limit read once for DeviceInfo; None where missing, unreadable or
    not positive (unset trip points read 0)."""
    try:
        value = _read_number(path) * scale
    except (OSError, ValueError):
        return None
    return value if value > 0 else None


def _lowest(values: Sequence[float | None]) -> float | None:
    """The most conservative of several per-socket thresholds, None if none is known."""
    known = [v for v in values if v is not None]
    return min(known) if known else None


# --- readers: what one tick does for one source --------------------------------------------


class Reader(Protocol):
    def read(self, now: float) -> dict[str, Value]:
        """This tick's values of the reader's metrics; raises OSError/ValueError."""
        ...


@dataclass(frozen=True, slots=True)
class FileGroup:
    """Numeric files combined into one metric, e.g. the max of per-socket package
    temperatures. Any unreadable file fails the whole value: a partial max or sum would be
    a plausible wrong number."""

    metric: str
    paths: tuple[Path, ...]
    scale: float  # vendor unit -> ours, e.g. 0.001 for m°C -> °C
    combine: Callable[[Sequence[float]], float]
    plausible: Callable[[float], bool] | None = None  # e.g. a disconnected sensor's 0 °C

    def value(self) -> float:
        value = self.combine([_read_number(p) * self.scale for p in self.paths])
        if self.plausible is not None and not self.plausible(value):
            # Raised, not returned: the reader's failure path makes it None, logged once.
            raise ValueError(f"{self.metric}: implausible reading {value:g}")
        return value


@dataclass(frozen=True, slots=True)
class FilesReader:
    """Stateless reader of one or more file groups."""

    groups: tuple[FileGroup, ...]

    def read(self, now: float) -> dict[str, Value]:
        return {g.metric: g.value() for g in self.groups}


def _count(values: Sequence[float]) -> int:
    """Sum of error counters, as the integer they are."""
    return int(sum(values))


@dataclass(frozen=True, slots=True)
class CpuinfoMhzReader:
    """Mean of the per-CPU "cpu MHz" lines of /proc/cpuinfo, the fallback without cpufreq.
    It is a real reading, though on a VM it may be the fixed TSC rate."""

    path: Path

    def read(self, now: float) -> dict[str, Value]:
        return {"sm_clock_mhz": _cpuinfo_mhz(_read_text(self.path))}


def _cpuinfo_mhz(text: str) -> float:
    values = [float(v) for k, v in _cpuinfo_pairs(text) if k == "cpu MHz"]
    if not values:
        raise ValueError("no 'cpu MHz' line in /proc/cpuinfo")
    return statistics.fmean(values)


@dataclass(slots=True)
class ProcStatReader:
    """CPU utilisation from the deltas of /proc/stat's aggregate line; the first tick has no
    delta and gives None."""

    path: Path
    _last: tuple[int, int] | None = None  # (busy, total) jiffies

    def read(self, now: float) -> dict[str, Value]:
        busy, total = _proc_stat_jiffies(_read_text(self.path))
        last, self._last = self._last, (busy, total)
        if last is None or total <= last[1]:
            return {"util_pct": None}
        return {"util_pct": 100.0 * (busy - last[0]) / (total - last[1])}


def _proc_stat_jiffies(text: str) -> tuple[int, int]:
    """(busy, total) from the "cpu " line: user nice system idle iowait irq softirq steal.
    guest time is already inside user, so it is not added again."""
    for line in text.splitlines():
        if line.startswith("cpu "):
            ticks = [int(v) for v in line.split()[1:9]]
            if len(ticks) < 5:
                raise ValueError("short 'cpu' line in /proc/stat")
            total = sum(ticks)
            return total - ticks[3] - ticks[4], total
    raise ValueError("no 'cpu' line in /proc/stat")


@dataclass(slots=True)
class ForeignLoadReader:
    """The host's load that is not soak's, as a share of every CPU's time over the tick:
    /proc/stat's busy jiffies (steal included: the hypervisor ran another guest) less the
    CPU time of soak's own processes, this one and its descendants (/proc/PID/stat utime,
    stime and their reaped children's). The first tick has no delta and gives None."""

    root: Path
    pid: int
    _last: tuple[int, int] | None = None  # (busy, total) jiffies
    _own: dict[int, int] = field(default_factory=dict)  # pid -> its CPU jiffies then

    def read(self, now: float) -> dict[str, Value]:
        busy, total = _proc_stat_jiffies(_read_text(self.root / "proc/stat"))
        own = _own_jiffies(self.root, self.pid)
        last, self._last = self._last, (busy, total)
        before, self._own = self._own, own
        if last is None or total <= last[1]:
            return {"foreign_load_pct": None}
        # a process born since the last tick did all its work since
        mine = sum(max(0, j - before.get(p, 0)) for p, j in own.items())
        foreign = max(0, busy - last[0] - mine) / (total - last[1])
        return {"foreign_load_pct": min(100.0, 100.0 * foreign)}


def _own_jiffies(root: Path, pid: int) -> dict[int, int]:
    """CPU jiffies of ``pid`` and each of its descendants (``own_pids``); a process that
    ended between the two reads is left out."""
    out = {pid: _pid_jiffies(_read_text(root / f"proc/{pid}/stat"))}
    for p in own_pids(root, pid) - {pid}:
        try:
            out[p] = _pid_jiffies(_read_text(root / f"proc/{p}/stat"))
        except (OSError, ValueError):
            continue
    return out


def _pid_jiffies(text: str) -> int:
    """utime + stime + cutime + cstime of a /proc/PID/stat line (the name in parentheses
    may hold spaces: the fields are counted after its closing one)."""
    rest = text.rsplit(")", 1)[1].split()
    if len(rest) < 15:
        raise ValueError("short /proc/PID/stat line")
    return sum(int(v) for v in rest[11:15])


@dataclass(frozen=True, slots=True)
class MeminfoReader:
    """Memory in use, (MemTotal − MemAvailable) / MemTotal, from /proc/meminfo."""

    path: Path

    def read(self, now: float) -> dict[str, Value]:
        info = _meminfo_kib(_read_text(self.path))
        total, available = info["MemTotal"], info["MemAvailable"]
        return {"mem_util_pct": 100.0 * (total - available) / total}


def _meminfo_kib(text: str) -> dict[str, int]:
    """The "kB" lines of /proc/meminfo; ValueError (not KeyError) where the two we need lack."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if len(parts) == 2 and parts[1] == "kB":
            out[key] = int(parts[0])
    if out.get("MemTotal", 0) <= 0 or "MemAvailable" not in out:
        raise ValueError("/proc/meminfo lacks MemTotal or MemAvailable")
    return out


@dataclass(frozen=True, slots=True)
class RaplDomain:
    """One package power domain of the powercap RAPL driver (one per socket)."""

    name: str  # e.g. "intel-rapl:1 (package-1)"
    energy_uj: Path
    max_energy_range_uj: int  # the counter wraps back to 0 past this


@dataclass(slots=True)
class RaplReader:
    """Package power and energy from RAPL energy counters summed over sockets.

    Power is the energy delta over the ``now`` delta, so the first tick has no power.
    Energy is the sum of the first raw counters plus every unwrapped delta since: a
    monotonic counter like NVML's, whose differences are what anyone should use.
    """

    domains: tuple[RaplDomain, ...]
    _last_raw: tuple[int, ...] | None = None
    _last_t: float = 0.0
    _total_uj: int = 0

    def read(self, now: float) -> dict[str, Value]:
        raw = tuple(int(_read_text(d.energy_uj).strip()) for d in self.domains)
        if self._last_raw is None:
            self._last_raw, self._last_t, self._total_uj = raw, now, sum(raw)
            return {"power_w": None, "energy_j": self._total_uj / 1e6}
        delta_uj = sum(
            _unwrap(old, new, d.max_energy_range_uj)
            for old, new, d in zip(self._last_raw, raw, self.domains, strict=True)
        )
        dt = now - self._last_t
        self._last_raw, self._last_t = raw, now
        self._total_uj += delta_uj
        power_w = delta_uj / 1e6 / dt if dt > 0 else None
        return {"power_w": power_w, "energy_j": self._total_uj / 1e6}


def _unwrap(old: int, new: int, max_range: int) -> int:
    """Counter increase from ``old`` to ``new`` where the counter wraps at ``max_range``."""
    return new - old if new >= old else new + max_range - old


# --- probes: what is there, found once ----------------------------------------------------


@dataclass(frozen=True, slots=True)
class Probe:
    """What probing one source found: whether its metrics read, from where, how to read
    them each tick, and any DeviceInfo fields learned on the way (thresholds, limits)."""

    capability: Capability
    source: str | None = None  # where values come from, e.g. "cpufreq scaling_cur_freq"
    reader: Reader | None = None
    info: dict[str, Any] = field(default_factory=dict)


NOT_FOUND = Probe(Capability.NOT_SUPPORTED)


@dataclass(frozen=True, slots=True)
class HwmonChip:
    name: str  # the driver, e.g. "coretemp"
    path: Path


def _hwmon_chips(root: Path) -> list[HwmonChip]:
    chips = []
    for path in _numbered(root / "sys/class/hwmon", r"hwmon(\d+)"):
        try:
            chips.append(HwmonChip(_read_text(path / "name").strip(), path))
        except OSError:
            continue
    return chips


def _labelled_inputs(chip: Path, label_patterns: Sequence[str]) -> list[tuple[str, Path]]:
    """(label, temp*_input) of ``chip`` for the first pattern that matches any label (Tdie
    before Tctl), every match of it (coretemp has one "Package id N" per chip)."""
    labels: list[tuple[str, Path]] = []
    for label_file in _numbered(chip, r"temp(\d+)_label"):
        try:
            labels.append((_read_text(label_file).strip(), label_file))
        except OSError:
            continue
    for pattern in label_patterns:
        hits = [(text, f) for text, f in labels if re.fullmatch(pattern, text)]
        if hits:
            return [(text, f.with_name(f.name.replace("_label", "_input"))) for text, f in hits]
    return []


def _probe_package_temp(root: Path) -> Probe:
    """Package temperature: an hwmon package sensor, else a thermal zone."""
    chips = _hwmon_chips(root)
    for driver, patterns in PACKAGE_SENSORS:
        found = [
            hit for c in chips if c.name == driver for hit in _labelled_inputs(c.path, patterns)
        ]
        if found:
            inputs = [path for _, path in found]
            source = f"hwmon {driver} " + ", ".join(repr(label) for label, _ in found)
            return _temp_probe(inputs, source, Capability.SUPPORTED, _hwmon_thresholds(inputs))
    return _probe_thermal_zone(root)


def _hwmon_thresholds(inputs: Sequence[Path]) -> dict[str, Any]:
    """temp*_crit is TjMax, where the CPU throttles itself (slowdown); temp*_max is the
    "high" mark, where cooling should be at full (max operating)."""

    def sibling(suffix: str) -> float | None:
        return _lowest([_optional_number(_swap(p, suffix), 0.001) for p in inputs])

    return {"slowdown_temp_c": sibling("_crit"), "max_operating_temp_c": sibling("_max")}


def _swap(input_file: Path, suffix: str) -> Path:
    return input_file.with_name(input_file.name.replace("_input", suffix))


def _probe_thermal_zone(root: Path) -> Probe:
    """x86_pkg_temp zones (one per package), else acpitz (a board zone: FALLBACK)."""
    zones = _numbered(root / "sys/class/thermal", r"thermal_zone(\d+)")
    kinds = {z: _zone_type(z) for z in zones}
    for kind in PACKAGE_ZONES:
        chosen = [z for z in zones if kinds[z] == kind]
        if chosen:
            cap = Capability.SUPPORTED if kind == "x86_pkg_temp" else Capability.FALLBACK
            source = f"thermal_zone {kind} " + ", ".join(z.name for z in chosen)
            inputs = [z / "temp" for z in chosen]
            return _temp_probe(inputs, source, cap, _zone_thresholds(chosen))
    return NOT_FOUND


def _zone_type(zone: Path) -> str | None:
    try:
        return _read_text(zone / "type").strip()
    except OSError:
        return None


def _zone_thresholds(zones: Sequence[Path]) -> dict[str, Any]:
    """Trip points: "passive" is where the kernel starts throttling (slowdown), "critical"
    where it shuts the machine down. Unset trips read 0 and are ignored."""
    found: dict[str, list[float | None]] = {"passive": [], "critical": []}
    for zone in zones:
        for trip_type in _numbered(zone, r"trip_point_(\d+)_type"):
            try:
                kind = _read_text(trip_type).strip()
            except OSError:
                continue
            if kind in found:
                temp_file = trip_type.with_name(trip_type.name.replace("_type", "_temp"))
                found[kind].append(_optional_number(temp_file, 0.001))
    return {
        "slowdown_temp_c": _lowest(found["passive"]),
        "shutdown_temp_c": _lowest(found["critical"]),
    }


def _temp_probe(
    inputs: Sequence[Path], source: str, found: Capability, info: dict[str, Any]
) -> Probe:
    """A probe for the hottest of several temperature inputs in m°C."""
    cap = _capability(inputs)
    if cap is not Capability.SUPPORTED:
        return Probe(cap, source)
    reader = FilesReader((FileGroup("temp_c", tuple(inputs), 0.001, max, temp_ok),))
    return Probe(found, source, reader, info)


def _probe_dimm_temp(root: Path) -> Probe:
    """Memory temperature from DIMM thermal sensors (jc42, spd5118), the hottest DIMM."""
    chips = [c for c in _hwmon_chips(root) if c.name in DIMM_SENSORS]
    inputs = tuple(i for c in chips for i in _numbered(c.path, r"temp(\d+)_input"))
    cap = _capability(inputs)
    if cap is not Capability.SUPPORTED:
        return Probe(cap)
    source = "hwmon " + ", ".join(sorted({c.name for c in chips}))
    reader = FilesReader((FileGroup("mem_temp_c", inputs, 0.001, max, temp_ok),))
    return Probe(Capability.SUPPORTED, source, reader)


def _cpu_dirs(root: Path) -> list[Path]:
    return _numbered(root / "sys/devices/system/cpu", r"cpu(\d+)")


def _probe_cpu_clock(root: Path) -> Probe:
    """Mean current frequency over CPUs from cpufreq, else /proc/cpuinfo "cpu MHz"."""
    cpus = _cpu_dirs(root)
    current = tuple(c / "cpufreq/scaling_cur_freq" for c in cpus if (c / "cpufreq").is_dir())
    info = {"max_sm_clock_mhz": _max_freq_mhz(cpus)}
    if current and _capability(current) is Capability.SUPPORTED:
        reader = FilesReader((FileGroup("sm_clock_mhz", current, 0.001, statistics.fmean),))
        return Probe(Capability.SUPPORTED, "cpufreq scaling_cur_freq", reader, info)
    cpuinfo = root / "proc/cpuinfo"
    try:
        _cpuinfo_mhz(_read_text(cpuinfo))
    except (OSError, ValueError):
        return Probe(Capability.NOT_SUPPORTED, info=info)
    return Probe(Capability.FALLBACK, "cpuinfo", CpuinfoMhzReader(cpuinfo), info)


def _max_freq_mhz(cpus: Sequence[Path]) -> float | None:
    values = [_optional_number(c / "cpufreq/cpuinfo_max_freq", 0.001) for c in cpus]
    known = [v for v in values if v is not None]
    return max(known) if known else None


def _rapl_packages(root: Path) -> list[Path]:
    """Top-level RAPL package domains (intel-rapl:N named package-N; AMD uses the same
    driver). Subdomains (intel-rapl:N:M: core, uncore, dram) and the MMIO twin are left out
    so nothing is counted twice."""
    packages = []
    for domain in _numbered(root / "sys/class/powercap", r"intel-rapl:(\d+)"):
        try:
            if _read_text(domain / "name").startswith("package"):
                packages.append(domain)
        except OSError:
            continue
    return packages


def _probe_rapl_energy(root: Path) -> Probe:
    """Package power and energy from RAPL energy_uj, root-only on many kernels."""
    packages = _rapl_packages(root)
    cap = _capability([p / "energy_uj" for p in packages])
    if cap is not Capability.SUPPORTED:
        return Probe(cap, "powercap intel-rapl energy_uj" if packages else None)
    try:
        domains = tuple(_rapl_domain(p) for p in packages)
    except (OSError, ValueError) as exc:
        log.info("cpu: RAPL counter range not readable: %s", exc)
        return Probe(Capability.NOT_SUPPORTED)
    source = "powercap " + ", ".join(d.name for d in domains)
    return Probe(Capability.SUPPORTED, source, RaplReader(domains))


def _rapl_domain(package: Path) -> RaplDomain:
    name = f"{package.name} ({_read_text(package / 'name').strip()})"
    max_range = int(_read_text(package / "max_energy_range_uj").strip())
    return RaplDomain(name, package / "energy_uj", max_range)


def _probe_rapl_limit(root: Path) -> Probe:
    """The long-term package power limit summed over sockets."""
    limits = tuple(p / "constraint_0_power_limit_uw" for p in _rapl_packages(root))
    cap = _capability(limits)
    if cap is not Capability.SUPPORTED:
        return Probe(cap)
    group = FileGroup("power_limit_w", limits, 1e-6, sum)
    info = {"power_limit_w": group.value()}
    source = "powercap constraint_0_power_limit_uw"
    return Probe(Capability.SUPPORTED, source, FilesReader((group,)), info)


def _probe_proc_stat(root: Path) -> Probe:
    path = root / "proc/stat"
    try:
        _proc_stat_jiffies(_read_text(path))
    except (OSError, ValueError):
        return NOT_FOUND
    return Probe(Capability.SUPPORTED, "/proc/stat", ProcStatReader(path))


def _probe_foreign_load(root: Path) -> Probe:
    """Foreign load needs soak's own CPU time: this process's stat and children files."""
    pid = os.getpid()
    try:
        _proc_stat_jiffies(_read_text(root / "proc/stat"))
        _pid_jiffies(_read_text(root / f"proc/{pid}/stat"))
        _read_text(root / f"proc/{pid}/task/{pid}/children")
    except (OSError, ValueError) as exc:
        log.info("cpu: soak's own CPU time is not readable, no foreign load: %s", exc)
        return NOT_FOUND
    source = "/proc/stat busy and steal less /proc/PID/stat of soak's processes"
    return Probe(Capability.SUPPORTED, source, ForeignLoadReader(root, pid))


def _probe_meminfo(root: Path) -> Probe:
    path = root / "proc/meminfo"
    try:
        total_kib = _meminfo_kib(_read_text(path))["MemTotal"]
    except (OSError, ValueError):
        return NOT_FOUND
    info = {"memory_total_b": total_kib * 1024}
    return Probe(Capability.SUPPORTED, "/proc/meminfo", MeminfoReader(path), info)


def _probe_fan(root: Path) -> Probe:
    """Fan duty from hwmon pwmN (0-255) where the chip also has fanN_input: the mean duty."""
    pwms = tuple(
        pwm
        for chip in _hwmon_chips(root)
        for pwm in _numbered(chip.path, r"pwm(\d+)")
        if pwm.with_name(f"fan{pwm.name[3:]}_input").exists()
    )
    cap = _capability(pwms)
    if cap is not Capability.SUPPORTED:
        return Probe(cap)
    reader = FilesReader((FileGroup("fan_pct", pwms, 100 / 255, statistics.fmean),))
    return Probe(Capability.SUPPORTED, "hwmon pwm", reader)


def _probe_edac(root: Path) -> Probe:
    """Corrected/uncorrected memory errors summed over EDAC memory controllers."""
    controllers = _numbered(root / "sys/devices/system/edac/mc", r"mc(\d+)")
    ce = tuple(mc / "ce_count" for mc in controllers)
    ue = tuple(mc / "ue_count" for mc in controllers)
    cap = _capability(ce + ue)
    if cap is not Capability.SUPPORTED:
        return Probe(cap)
    groups = (
        FileGroup("ecc_corrected", ce, 1, _count),
        FileGroup("ecc_uncorrected", ue, 1, _count),
    )
    return Probe(
        Capability.SUPPORTED, "edac " + ", ".join(c.name for c in controllers), FilesReader(groups)
    )


def _no_source(root: Path) -> Probe:
    """The probe of metrics a CPU has no notion of: never found."""
    return NOT_FOUND


@dataclass(frozen=True, slots=True)
class MetricSource:
    """One row of the sources table: the metrics one source yields, and its probe."""

    metrics: tuple[str, ...]
    where: str  # for people: where the values come from, in order of preference
    probe: Callable[[Path], Probe]


METRIC_SOURCES: tuple[MetricSource, ...] = (
    MetricSource(
        ("temp_c",),
        "hwmon coretemp 'Package id N' / k10temp, zenpower Tdie|Tctl (max over sockets); "
        "else thermal_zone x86_pkg_temp; else acpitz (fallback)",
        _probe_package_temp,
    ),
    MetricSource(("mem_temp_c",), "hwmon jc42 / spd5118 DIMM sensors (max)", _probe_dimm_temp),
    MetricSource(
        ("sm_clock_mhz",),
        "cpufreq scaling_cur_freq (mean over CPUs); else /proc/cpuinfo 'cpu MHz' (fallback)",
        _probe_cpu_clock,
    ),
    MetricSource(
        ("power_w", "energy_j"),
        "powercap intel-rapl:N package energy_uj, summed, wrap at max_energy_range_uj",
        _probe_rapl_energy,
    ),
    MetricSource(
        ("power_limit_w",), "powercap intel-rapl:N constraint_0_power_limit_uw", _probe_rapl_limit
    ),
    MetricSource(("util_pct",), "/proc/stat aggregate cpu line deltas", _probe_proc_stat),
    MetricSource(
        ("foreign_load_pct",),
        "/proc/stat busy + steal deltas less soak's own processes' /proc/PID/stat CPU time "
        "(found through /proc/PID/task/PID/children)",
        _probe_foreign_load,
    ),
    MetricSource(("mem_util_pct",), "/proc/meminfo MemTotal, MemAvailable", _probe_meminfo),
    MetricSource(("fan_pct",), "hwmon pwmN with fanN_input (mean duty)", _probe_fan),
    MetricSource(
        ("ecc_corrected", "ecc_uncorrected"),
        "EDAC /sys/devices/system/edac/mc/mc*/ce_count, ue_count (summed)",
        _probe_edac,
    ),
    MetricSource(NO_CPU_NOTION, "none: a CPU has no such reading on Linux", _no_source),
)


# --- the backend --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CpuInventory:
    model: str
    vendor: str | None
    threads: int
    cores: int | None
    sockets: int | None


def _cpuinfo_pairs(text: str) -> list[tuple[str, str]]:
    pairs = []
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            pairs.append((key.strip(), value.strip()))
    return pairs


def _inventory(text: str) -> CpuInventory:
    """Model, thread/core/socket counts from /proc/cpuinfo. Cores and sockets are None
    where the kernel gives no topology lines (some VMs, ARM)."""
    pairs = _cpuinfo_pairs(text)
    first: dict[str, str] = {}
    for key, value in pairs:
        first.setdefault(key, value)
    threads = sum(1 for key, _ in pairs if key == "processor")
    sockets_seen: set[str] = set()
    cores_seen: set[tuple[str, str]] = set()
    socket = ""
    for key, value in pairs:
        if key == "physical id":
            socket = value
            sockets_seen.add(value)
        elif key == "core id":
            cores_seen.add((socket, value))
    return CpuInventory(
        model=first.get("model name", "unknown CPU"),
        vendor=first.get("vendor_id"),
        threads=threads,
        cores=len(cores_seen) or None,
        sockets=len(sockets_seen) or None,
    )


class CpuBackend:
    """The host CPU as device 0, for the same real workloads run by torch on "cpu".

    With ``ranks`` > 1 (``soak run --workload ddp --ranks N``) the CPU shows as N devices,
    one per ddp rank, each a worker with its share of the cores; they share one package,
    so each reads the same telemetry (``extra["shares_telemetry_with"]`` says so)."""

    name = "cpu"

    def __init__(
        self,
        devices: Sequence[int] | None = None,
        *,
        root: str | Path = "/",
        time_fn: Callable[[], float] = time.monotonic,
        ranks: int = 1,
    ) -> None:
        """Probe every source once. ``time_fn`` times the power deltas (not the run's
        clock, which may be virtual); tests inject it."""
        if ranks < 1:
            raise ConfigError(f"--ranks: {ranks} is below 1")
        self._indices = select(list(range(ranks)), devices, self.name)
        self._ranks = ranks
        self._root = Path(root)
        self._time_fn = time_fn
        self._log_once = LogOnce(log, "cpu")
        self._inventory = self._read_inventory()
        probes = [(src, src.probe(self._root)) for src in METRIC_SOURCES]
        self._caps = self._capability_table(probes)
        self._active = [(src, p.reader) for src, p in probes if p.reader is not None]
        self._info = self._device_info(probes)

    def _read_inventory(self) -> CpuInventory:
        try:
            _proc_stat_jiffies(_read_text(self._root / "proc/stat"))
            return _inventory(_read_text(self._root / "proc/cpuinfo"))
        except (OSError, ValueError) as exc:
            raise BackendUnavailable(f"no Linux /proc to read the CPU from ({exc})") from exc

    @staticmethod
    def _capability_table(probes: Sequence[tuple[MetricSource, Probe]]) -> dict[str, Capability]:
        caps = dict.fromkeys(TELEMETRY_METRICS, Capability.NOT_SUPPORTED)
        for src, probe in probes:
            for metric in src.metrics:
                caps[metric] = probe.capability
        return caps

    def _device_info(self, probes: Sequence[tuple[MetricSource, Probe]]) -> DeviceInfo:
        inv = self._inventory
        learned: dict[str, Any] = {}
        sources: dict[str, str] = {}
        for src, probe in probes:
            learned.update({k: v for k, v in probe.info.items() if v is not None})
            if probe.source is not None and probe.reader is not None:
                sources.update(dict.fromkeys(src.metrics, probe.source))
        extra = {
            "vendor": inv.vendor,
            "cores": inv.cores,
            "threads": inv.threads,
            "sockets": inv.sockets,
            "sources": sources,
        }
        return DeviceInfo(
            index=0, backend=self.name, name=inv.model, torch_device="cpu", extra=extra, **learned
        )

    def devices(self) -> list[DeviceInfo]:
        if self._ranks == 1:
            return [self._info]
        threads = max(1, (self._inventory.threads or 1) // self._ranks)
        env = {"OMP_NUM_THREADS": str(threads)}
        return [
            dataclasses.replace(
                self._info,
                index=i,
                worker_env=env,
                extra={**self._info.extra, "rank": i, "shares_telemetry_with": "the CPU"},
            )
            for i in self._indices
        ]

    def capabilities(self) -> dict[int, dict[str, Capability]]:
        return {i: dict(self._caps) for i in self._indices}

    def sample(self, t_s: float) -> list[Telemetry]:
        """One snapshot: every found source read once, at one ``time_fn`` instant."""
        now = self._time_fn()
        values: dict[str, Value] = {}
        for src, reader in self._active:
            values.update(self._read_source(src, reader, now))
        return [Telemetry(device=i, t_s=t_s, **values) for i in self._indices]

    def _read_source(self, src: MetricSource, reader: Reader, now: float) -> dict[str, Value]:
        """One source's values; None for its metrics this tick if a read fails, logged once
        per source rather than once a second for hours."""
        try:
            return reader.read(now)
        except (OSError, ValueError) as exc:
            names = ", ".join(src.metrics)
            message = f"cpu: {names} stopped reading ({exc}); reported as None"
            self._log_once(src.where, "unreadable", message, logging.WARNING)
            return dict.fromkeys(src.metrics)

    def poll_events(self, t_s: float) -> list[Event]:
        """Nothing to report: the CPU this process runs on cannot be lost."""
        return []

    def simulated_load(self, workload: str) -> None:
        return None

    def close(self) -> None:
        """Nothing to release: no file is held open between ticks."""
