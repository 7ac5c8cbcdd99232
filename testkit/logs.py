"""The simulator's runs written as the logs real tools write, for the importer tests and
``bench/verdict_accuracy.py --log-forms``: nvidia-smi's CSV with every form of the
clock-event reasons (``nvidia-smi --help-query-gpu``: the bitmask under its new and old
name, one column per reason under either name, the cumulative counters, none at all) and
its power averaged or instantaneous, ``dcgmi dmon`` (field 112's bitmask, or the 1420-1424
counters), and a generic CSV with one column per reason. The column names and value
spellings are the documented ones; the readings are the simulator's (``testkit.sim``), a
log cut where a real one would start (``start_s``: a log begun under load).

Every log is telemetry only, as those tools' are: no throughput.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from soak.dataset import RunData
from soak.devices.sim.params import CHASSIS
from soak.fields import REASONS_BY_KEY
from soak.importers import csv as csv_import
from soak.importers import dcgmi, nvidia_smi
from soak.importers.core import Trace
from soak.model import ClockReason

EPOCH = dt.datetime(2026, 3, 2, 9, 0, 0, tzinfo=dt.UTC)  # the logs' first row's wall time
# The instantaneous power reading's scatter against the averaged one's: an instant read at a
# fast sampling rate sees the load's own ripple (issue 39: ~5x at 7-ms sampling).
INSTANT_SCATTER = 5.0
# A reason counter counts from the driver's load, long before the log starts (µs)
COUNTER_START_US = 3_600_000_000

# One column per reason, by the suffix --help-query-gpu gives it
REASON_COLUMNS: dict[str, ClockReason] = {
    "gpu_idle": ClockReason.GPU_IDLE,
    "applications_clocks_setting": ClockReason.APPLICATIONS_CLOCKS_SETTING,
    "sw_power_cap": ClockReason.SW_POWER_CAP,
    "hw_slowdown": ClockReason.HW_SLOWDOWN,
    "hw_thermal_slowdown": ClockReason.HW_THERMAL,
    "hw_power_brake_slowdown": ClockReason.HW_POWER_BRAKE,
    "sw_thermal_slowdown": ClockReason.SW_THERMAL,
    "sync_boost": ClockReason.SYNC_BOOST,
}
COUNTER_COLUMNS: dict[str, ClockReason] = {
    "sw_power_cap": ClockReason.SW_POWER_CAP,
    "sync_boost": ClockReason.SYNC_BOOST,
    "sw_thermal_slowdown": ClockReason.SW_THERMAL,
    "hw_thermal_slowdown": ClockReason.HW_THERMAL,
    "hw_power_brake_slowdown": ClockReason.HW_POWER_BRAKE,
}
DMON_COUNTERS: dict[str, ClockReason] = {
    "CLKPCNS": ClockReason.SW_POWER_CAP,
    "CLKBSTNS": ClockReason.SYNC_BOOST,
    "CLKSWTHNS": ClockReason.SW_THERMAL,
    "CLKHWTHNS": ClockReason.HW_THERMAL,
    "CLKEPBSNS": ClockReason.HW_POWER_BRAKE,
}
CSV_REASONS: dict[str, str] = {  # soak's --map name -> the generic CSV's column
    "clock_reasons.sw_power_cap": "sw_power_cap",
    "clock_reasons.sw_thermal": "sw_thermal",
    "clock_reasons.hw_slowdown": "hw_slowdown",
    "clock_reasons.hw_thermal": "hw_thermal",
    "clock_reasons.hw_power_brake": "hw_power_brake",
}


@dataclass(frozen=True)
class LogForm:
    """One way a tool writes a log: its format, how it holds the clock-event reasons and
    which power reading it has."""

    name: str
    format: str  # "nvidia-smi", "dcgmi-dmon" or "csv"
    reasons: str  # "bitmask", "bitmask-old", "per-reason", "per-reason-old", "counters",
    #               "partial" (per-reason, no sw_power_cap), "none"
    power: str = "average"  # "average", "instant" or "both"


FORMS: tuple[LogForm, ...] = (
    LogForm("nvidia-smi bitmask", "nvidia-smi", "bitmask"),
    LogForm("nvidia-smi bitmask (old name)", "nvidia-smi", "bitmask-old"),
    LogForm("nvidia-smi per-reason", "nvidia-smi", "per-reason"),
    LogForm("nvidia-smi per-reason (old names)", "nvidia-smi", "per-reason-old"),
    LogForm("nvidia-smi per-reason, no sw_power_cap", "nvidia-smi", "partial"),
    LogForm("nvidia-smi counters", "nvidia-smi", "counters"),
    LogForm("nvidia-smi no reasons", "nvidia-smi", "none"),
    LogForm("nvidia-smi instant power", "nvidia-smi", "bitmask", "instant"),
    LogForm("nvidia-smi both powers", "nvidia-smi", "bitmask", "both"),
    LogForm("dcgmi dmon bitmask", "dcgmi-dmon", "bitmask"),
    LogForm("dcgmi dmon counters", "dcgmi-dmon", "counters"),
    LogForm("csv per-reason", "csv", "per-reason"),
)
FORMS_BY_NAME = {f.name: f for f in FORMS}


def _na(value: float, fmt: Callable[[float], str], na: str = "[N/A]") -> str:
    return na if value is None or not math.isfinite(value) else fmt(value)


def _bits(value: float) -> int:
    return 0 if not math.isfinite(value) else int(value)


def _rows(run: RunData, start_s: float) -> list[tuple[int, float, int]]:
    """(device, time, row index) in time order, every device per time, from ``start_s``."""
    out = []
    for index, tele in run.telemetry.items():
        for k, t in enumerate(tele.t_s):
            if t >= start_s:
                out.append((index, float(t), k))
    return sorted(out, key=lambda r: (r[1], r[0]))


def _counters(run: RunData, bits: dict[str, ClockReason]) -> dict[int, dict[str, np.ndarray]]:
    """Per device, the cumulative time (µs) each reason was active up to each reading: the
    readings' reason bits held over the interval that ends at them."""
    out = {}
    for index, tele in run.telemetry.items():
        t = tele.t_s
        dt_s = np.diff(t, prepend=t[0])
        reasons = np.nan_to_num(tele.clock_reasons, nan=0.0).astype(np.int64)
        out[index] = {
            name: COUNTER_START_US + np.cumsum(((reasons & int(bit)) != 0) * dt_s * 1e6)
            for name, bit in bits.items()
        }
    return out


def _power(run: RunData, power: str, seed: int) -> dict[int, dict[str, np.ndarray]]:
    """Per device, the averaged reading (the sim's) and an instantaneous one around it."""
    rng = np.random.default_rng([seed, 0x1257])
    out = {}
    for index, tele in run.telemetry.items():
        avg = tele.power_w
        sigma = INSTANT_SCATTER * (CHASSIS.power_noise_frac * avg + CHASSIS.power_noise_w)
        instant = np.round(avg + sigma * rng.standard_normal(avg.size), 2)
        out[index] = {"average": avg, "instant": instant}
    return out


def nvidia_smi_log(run: RunData, form: LogForm, start_s: float = 0.0, seed: int = 0) -> str:
    """``nvidia-smi --query-gpu=... --format=csv -l 1`` as it prints it, header and units."""
    power_cols = {
        "average": ["power.draw [W]"],
        "instant": ["power.draw.instant [W]"],
        "both": ["power.draw [W]", "power.draw.instant [W]"],
    }[form.power]
    prefix = "clocks_throttle_reasons" if form.reasons.endswith("-old") else "clocks_event_reasons"
    reason_cols: list[str] = []
    if form.reasons.startswith("bitmask"):
        reason_cols = [f"{prefix}.active"]
    elif form.reasons.startswith("per-reason"):
        reason_cols = [f"{prefix}.{s}" for s in REASON_COLUMNS]
    elif form.reasons == "partial":
        reason_cols = [f"{prefix}.{s}" for s in REASON_COLUMNS if s != "sw_power_cap"]
    elif form.reasons == "counters":
        reason_cols = [f"clocks_event_reasons_counters.{s} [us]" for s in COUNTER_COLUMNS]
    header = [
        "timestamp",
        "index",
        "name",
        "uuid",
        "memory.total [MiB]",
        "clocks.max.sm [MHz]",
        "temperature.gpu",
        "temperature.memory",
        "utilization.gpu [%]",
        *power_cols,
        "power.limit [W]",
        "clocks.sm [MHz]",
        "clocks.mem [MHz]",
        "pstate",
        *reason_cols,
    ]
    counters = _counters(run, COUNTER_COLUMNS) if form.reasons == "counters" else {}
    powers = _power(run, form.power, seed)
    infos = {d.index: d for d in run.devices}
    lines = [", ".join(header)]
    for index, t, k in _rows(run, start_s):
        tele, info = run.telemetry[index], infos[index]
        stamp = (EPOCH + dt.timedelta(seconds=t - start_s)).strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]
        reasons = _bits(tele.clock_reasons[k])
        cells = [
            stamp,
            str(index),
            info.name.removesuffix(" (simulated)"),
            info.uuid or "[N/A]",
            _na(
                info.memory_total_b / 2**20 if info.memory_total_b else math.nan,
                "{:.0f} MiB".format,
            ),
            _na(info.max_sm_clock_mhz or math.nan, "{:.0f} MHz".format),
            _na(tele.temp_c[k], "{:.0f}".format),
            _na(tele.mem_temp_c[k], "{:.0f}".format),
            _na(tele.util_pct[k], "{:.0f} %".format),
            *[_na(powers[index][p][k], "{:.2f} W".format) for p in _power_kinds(form.power)],
            _na(tele.power_limit_w[k], "{:.2f} W".format),
            _na(tele.sm_clock_mhz[k], "{:.0f} MHz".format),
            _na(tele.mem_clock_mhz[k], "{:.0f} MHz".format),
            "P0",
        ]
        if form.reasons.startswith("bitmask"):
            cells.append(f"0x{reasons:016X}")
        elif form.reasons.startswith("per-reason") or form.reasons == "partial":
            for suffix, bit in REASON_COLUMNS.items():
                if form.reasons == "partial" and suffix == "sw_power_cap":
                    continue
                cells.append("Active" if reasons & int(bit) else "Not Active")
        elif form.reasons == "counters":
            cells += [f"{counters[index][s][k]:.0f} us" for s in COUNTER_COLUMNS]
        lines.append(", ".join(cells))
    return "\n".join(lines) + "\n"


def _power_kinds(power: str) -> list[str]:
    return ["average", "instant"] if power == "both" else [power]


def dmon_log(run: RunData, form: LogForm, start_s: float = 0.0, seed: int = 0) -> str:
    """``dcgmi dmon -e 150,140,155,160,100,101,203[,112 | 1420-1424]``: the header, the ID
    line, a row per GPU and second."""
    names = ["TMPTR", "MMTMP", "POWER", "PMLMT", "SMCLK", "MMCLK", "GPUTL"]
    names += ["DVCCTR"] if form.reasons == "bitmask" else list(DMON_COUNTERS)
    counters = _counters(run, DMON_COUNTERS) if form.reasons == "counters" else {}
    lines = ["#Entity   " + "  ".join(names), "ID"]
    for index, _t, k in _rows(run, start_s):
        tele = run.telemetry[index]
        cells = [
            _na(tele.temp_c[k], "{:.0f}".format, "N/A"),
            _na(tele.mem_temp_c[k], "{:.0f}".format, "N/A"),
            _na(tele.power_w[k], "{:.3f}".format, "N/A"),
            _na(tele.power_limit_w[k], "{:.3f}".format, "N/A"),
            _na(tele.sm_clock_mhz[k], "{:.0f}".format, "N/A"),
            _na(tele.mem_clock_mhz[k], "{:.0f}".format, "N/A"),
            _na(tele.util_pct[k], "{:.0f}".format, "N/A"),
        ]
        if form.reasons == "bitmask":
            cells.append(str(_bits(tele.clock_reasons[k])))
        else:  # ns
            cells += [f"{counters[index][n][k] * 1000:.0f}" for n in DMON_COUNTERS]
        lines.append(f"GPU {index}  " + "  ".join(cells))
    return "\n".join(lines) + "\n"


def csv_log(run: RunData, form: LogForm, start_s: float = 0.0, seed: int = 0) -> str:
    """A generic long CSV: time, device, readings, and one 1/0 column per reason."""
    header = ["t", "gpu", "temp", "power", "limit", "clock", "util", *CSV_REASONS.values()]
    lines = [",".join(header)]
    bits = {c: REASONS_BY_KEY[m.split(".")[1]].bits for m, c in CSV_REASONS.items()}
    for index, t, k in _rows(run, start_s):
        tele = run.telemetry[index]
        reasons = _bits(tele.clock_reasons[k])
        cells = [
            f"{t - start_s:.3f}",
            str(index),
            _na(tele.temp_c[k], "{:.0f}".format, ""),
            _na(tele.power_w[k], "{:.3f}".format, ""),
            _na(tele.power_limit_w[k], "{:.1f}".format, ""),
            _na(tele.sm_clock_mhz[k], "{:.0f}".format, ""),
            _na(tele.util_pct[k], "{:.0f}".format, ""),
            *["1" if reasons & int(b) else "0" for b in bits.values()],
        ]
        lines.append(",".join(cells))
    return "\n".join(lines) + "\n"


CSV_MAPPING = {  # soak's fields -> the generic CSV's columns
    "temp_c": "temp",
    "power_w": "power",
    "power_limit_w": "limit",
    "sm_clock_mhz": "clock",
    "util_pct": "util",
    **CSV_REASONS,
}


def csv_options() -> csv_import.CsvOptions:
    """How the generic CSV is read: long, a column per reason."""
    return csv_import.CsvOptions("t", "s", CSV_MAPPING, device_col="gpu")


def write_log(run: RunData, form: LogForm, path: Path, start_s: float = 0.0, seed: int = 0) -> Path:
    """``run`` written in ``form`` to ``path`` (from ``start_s`` on); the path back."""
    writer = {"nvidia-smi": nvidia_smi_log, "dcgmi-dmon": dmon_log, "csv": csv_log}[form.format]
    path.write_text(writer(run, form, start_s, seed))
    return path


def read_log(path: Path, form: LogForm) -> Trace:
    """The log read back by soak's own importer for its format."""
    if form.format == "nvidia-smi":
        return nvidia_smi.read(path, None, 1.0)
    if form.format == "dcgmi-dmon":
        return dcgmi.read(path, 1.0)
    return csv_import.read(path, csv_options())
