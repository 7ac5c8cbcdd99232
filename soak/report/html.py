"""The self-contained ``report.html``: verdict and reasons first, then the server, each
device's cold vs steady table and timeline, and everything needed to check or reproduce the
run. Jinja2 autoescapes every value; figures are SVG data URIs (``figures.py``)."""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import jinja2
import markupsafe

from soak import __version__, fields
from soak.analysis.analyze import COMPLETE_STOPS, Analysis, DeviceResult, merge_windows
from soak.analysis.checks import CheckName, Finding, Status
from soak.analysis.diagnosis import MEANINGS, NEXT_STEPS
from soak.analysis.equilibrium.fit import TAU_MIN_S, Fit
from soak.analysis.windows import WindowName, WindowStats
from soak.dataset import RunData
from soak.fields import REASONS
from soak.model import DeviceInfo, EventKind
from soak.profile import Checks, Windows, meaning
from soak.record import BmcProbe, Salvage, StopDecision, StopRecord
from soak.report import figures
from soak.report.ddp_section import ddp_context
from soak.report.headroom import headroom_context
from soak.report.junit import case_names, run_cases
from soak.units import NOT_AVAILABLE, duration, minutes, num, pct, plural, rate_unit, si, small_si

REPORT_NAME = "report.html"
MAX_EVENTS = 2000  # event rows shown; the store keeps every one

env = jinja2.Environment(
    loader=jinja2.PackageLoader("soak.report", "templates"),
    autoescape=True,  # every template, whatever its name
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def _cell(value: Any) -> Any:
    """A table cell whose "not available" may wrap (a narrow column of them keeps a wide
    table inside the page); any other value as it is."""
    if value == NOT_AVAILABLE:
        return markupsafe.Markup('<span class="na">not available</span>')
    return value


env.filters["cell"] = _cell

DIAGNOSES = {cause: f"{text}. Next: {NEXT_STEPS[cause]}" for cause, text in MEANINGS.items()}

NOTABLE_EVENTS = frozenset(
    {
        EventKind.XID,
        EventKind.ECC,
        EventKind.DEVICE_LOST,
        EventKind.VERIFICATION_FAILED,
        EventKind.FAULT_INJECTED,
        EventKind.WARNING,
        EventKind.TELEMETRY,
        EventKind.CLOCK_EVENT,
    }
)


def text(value: Any) -> str:
    """A value for a table cell: None and NaN are "not available", never 0 or blank."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return NOT_AVAILABLE
    return str(value)


def load_minutes(seconds: float) -> str:
    """A time since the load start in minutes of load, the one unit of the report, the
    terminal log and the verdict's texts: "14.1 min", "−0.6 min" (before it)."""
    sign = "−" if seconds < 0 and round(seconds / 60, 1) != 0 else ""
    return f"{sign}{abs(seconds) / 60:.1f} min"


def _ratio(cold: float | None, steady: float | None) -> str:
    return num(steady / cold if cold and steady is not None else None, ".3f")


NOT_ON_BACKEND = "not supported"  # the capability status of a metric the device lacks
COUNTER_CAPABILITY = {"remap_pending": "remap_pending", "remap_failure": "remap_failure"}


def words(devices: Iterable[DeviceInfo]) -> dict[str, str]:
    """The report's names for what ``devices`` have: a CPU has no SM and no HBM. The clock
    is each device's own ``clock_label`` ("clock" where they differ)."""
    infos = list(devices)
    clocks = {d.clock_label for d in infos}
    clock = clocks.pop() if len(clocks) == 1 else "clock"
    if infos and all(d.kind == "CPU" for d in infos):
        return {"sm_clock": clock, "mem_temp": "memory temperature", "mem_max": "memory max"}
    return {"sm_clock": clock, "mem_temp": "HBM temperature", "mem_max": "HBM max"}


def _lacks(analysis: Analysis, index: int, metric: str) -> bool:
    """The device cannot read ``metric`` at all on its backend (probed at the start)."""
    return analysis.capabilities.get(index, {}).get(metric) == NOT_ON_BACKEND


def _stat(stats: WindowStats | None, attr: str, key: str) -> float | None:
    return getattr(stats, attr).get(key) if stats is not None else None


def _metric_rows(d: DeviceResult, analysis: Analysis, missing: list[str]) -> list[dict[str, str]]:
    """The cold vs steady rows of the readings; one the backend cannot read at all is left
    out and named in ``missing``."""
    f = d.facts
    word = words([d.info])
    metrics: tuple[tuple[str, str, Callable[[float | None], str]], ...] = (
        (word["sm_clock"], "sm_clock_mhz", lambda v: num(v, ".0f", " MHz")),
        ("memory clock", "mem_clock_mhz", lambda v: num(v, ".0f", " MHz")),
        ("temperature", "temp_c", lambda v: num(v, ".0f", " °C")),
        (word["mem_temp"], "mem_temp_c", lambda v: num(v, ".0f", " °C")),
        ("power", "power_w", lambda v: num(v, ".0f", " W")),
        ("utilisation", "util_pct", lambda v: num(v, ".0f", " %")),
    )
    rows = []
    for label, key, fmt in metrics:
        cold, steady = _stat(f.cold, "median", key), _stat(f.steady, "median", key)
        if cold is None and steady is None and _lacks(analysis, d.index, key):
            missing.append(label)
            continue
        lo, hi = _stat(f.steady, "p10", key), _stat(f.steady, "p90", key)
        spread = f"{fmt(lo)} – {fmt(hi)}" if lo is not None and hi is not None else NOT_AVAILABLE
        rows.append(
            {
                "label": label,
                "cold": fmt(cold),
                "steady": fmt(steady),
                # windows that overlap (or no cold window) give no ratio
                "ratio": _change(key, cold, steady) if f.windows_apart else NOT_AVAILABLE,
                "spread": spread,
            }
        )
    return rows


def _change(key: str, cold: float | None, steady: float | None) -> str:
    """Steady against cold: a ratio, except for a temperature, whose ratio means nothing
    (°C has no true zero): the difference in °C, "+16 °C"."""
    if not key.endswith("_c"):
        return _ratio(cold, steady)
    if cold is None or steady is None:
        return NOT_AVAILABLE
    return f"{steady - cold:+.0f} °C"


def _part_rows(
    d: DeviceResult, units: dict[str, str], with_energy: bool = True
) -> list[dict[str, str]]:
    f = d.facts
    cold_energy = f.cold.energy_per_work if f.cold else {}
    steady_energy = f.steady.energy_per_work if f.steady else {}
    rows = []
    for part in sorted(f.units):
        unit = units.get(part, "")
        per_s = rate_unit(unit)
        cold, steady = _stat(f.cold, "throughput", part), _stat(f.steady, "throughput", part)
        cv = _stat(f.steady, "throughput_cv", part)
        rows.append(
            {
                "label": f"{part} throughput",
                "cold": si(cold, per_s),
                "steady": si(steady, per_s),
                "ratio": _ratio(cold, steady) if f.windows_apart else NOT_AVAILABLE,
                "spread": f"CV {pct(cv, 2)}" if cv is not None else NOT_AVAILABLE,
            }
        )
        e_cold, e_steady = cold_energy.get(part), steady_energy.get(part)
        if e_cold is None and e_steady is None and not with_energy:
            continue  # the energy note says why, once
        rows.append(
            {
                "label": f"energy per {unit or 'unit'} ({part})",
                "cold": small_si(e_cold, f"J/{unit}"),
                "steady": small_si(e_steady, f"J/{unit}"),
                "ratio": _ratio(e_cold, e_steady) if f.windows_apart else NOT_AVAILABLE,
                "spread": "",
            }
        )
    return rows


def _reason_rows(d: DeviceResult, analysis: Analysis, missing: list[str]) -> list[dict[str, str]]:
    f = d.facts
    if _lacks(analysis, d.index, "clock_reasons"):
        missing.append("clock-event reasons")
        return []
    rows = []
    for reason in REASONS:
        name = reason.key
        rows.append(
            {
                "label": reason.label,
                "cold": pct(_stat(f.cold, "reason_share", name), 2),
                "steady": pct(_stat(f.steady, "reason_share", name), 2),
                "whole": pct(_stat(f.whole, "reason_share", name), 2),
            }
        )
    return rows


def _counter_rows(d: DeviceResult, analysis: Analysis, missing: list[str]) -> list[dict[str, str]]:
    rows = []
    for key, c in d.facts.counters.items():
        if not c.readable and _lacks(analysis, d.index, key):
            missing.append(fields.label(key))
            continue
        rows.append(
            {
                "label": fields.label(key),
                "first": num(c.first, ".0f"),
                "last": num(c.last, ".0f"),
                "change": num(c.delta, "+.0f") if c.readable else NOT_AVAILABLE,
                "bad": bool(c.delta) and key != "ecc_corrected" and key != "pcie_replay",
            }
        )
    return rows


def _checks(checks: list[Finding]) -> list[dict[str, str]]:
    return [
        {"status": str(c.status), "name": name, "message": c.message}
        for c, name in zip(checks, case_names(checks), strict=True)
    ]


def _tau(fit: Fit | None) -> str:
    if fit is None:
        return NOT_AVAILABLE
    if fit.bound == "lower":  # settled before the readings could show the rise
        return f"under {duration(TAU_MIN_S)}"
    if fit.bound == "upper":
        return f"{NOT_AVAILABLE}: no bend in the temperature yet"
    return duration(fit.tau_s)


def _equilibrium(d: DeviceResult) -> dict[str, str]:
    eq = d.facts.equilibrium
    t0 = d.load_start_s or 0.0
    fit = eq.fit if eq else None
    reached = eq is not None and eq.reached and eq.time_s is not None
    check = eq.deciding_check if eq else None
    judged = ", ".join(d.signal for d in check.judging) if check else ""
    if check is None:
        decided = ""
    elif reached:
        decided = f"dated by {', '.join(check.dated_by)}"
    else:
        decided = f"held back by {', '.join(check.held_back_by) or 'no signal that could judge'}"
    return {
        "time": minutes(eq.time_s - t0) if reached else "not reached",
        "tau": _tau(fit),
        "t_inf": num(fit.measured_t_inf_c, ".1f", " °C") if fit else NOT_AVAILABLE,
        "basis": eq.basis if eq else NOT_AVAILABLE,
        "judged": f"{judged}; {decided}" if judged else NOT_AVAILABLE,
        "set_aside": [d.set_aside_reason() for d in check.set_aside] if check else [],
    }


def _device(d: DeviceResult, analysis: Analysis, timeline: str) -> dict[str, Any]:
    f = d.facts
    energy_basis = {s.energy_basis for s in (f.cold, f.steady) if s is not None and s.energy_basis}
    windows = {}
    missing: list[str] = []  # what the backend cannot read: named once, drawn nowhere
    t0 = d.load_start_s or 0.0
    for name, stats in (("cold", f.cold), ("steady", f.steady)):
        windows[name] = (
            f"{load_minutes(stats.window.start_s - t0)} – {load_minutes(stats.window.end_s - t0)}"
            if stats is not None
            else NOT_AVAILABLE
        )
    if f.warm_start is not None and f.warm_start.begun:
        windows["cold"] = "none: the trace begins under load"
    return {
        "index": d.index,
        "info": d.info,
        "verdict": d.verdict,
        "diagnosis": d.diagnosis,
        "diagnosis_text": DIAGNOSES.get(d.diagnosis, ""),
        "diagnosis_evidence": list(d.diagnosis_evidence),
        "rows": _metric_rows(d, analysis, missing),
        "quality": d.quality.line() if d.quality is not None else None,
        "left_out": d.quality.left_out() if d.quality is not None else [],
        "part_rows": _part_rows(d, analysis.units, with_energy=bool(energy_basis)),
        "mixed": len(f.units) > 1,
        "energy_shown": bool(energy_basis),
        "energy_note": f"Energy from the {', '.join(sorted(energy_basis))}"
        if energy_basis
        else "Energy: not available (neither an energy counter nor power readings)",
        "windows": windows,
        # τ and T∞ are fitted to the temperature: no rows for them without one
        "equilibrium": _equilibrium(d) | {"fitted": not _lacks(analysis, d.index, "temp_c")},
        "reason_rows": _reason_rows(d, analysis, missing),
        "unknown_bits": f"{f.steady.unknown_reason_bits:#x}"
        if f.steady is not None and f.steady.unknown_reason_bits
        else None,
        "counters": _counter_rows(d, analysis, missing),
        "missing": missing,
        "checks": _checks(d.checks),
        "outcome": f.outcome.value if f.outcome else NOT_AVAILABLE,
        "outcome_detail": f.outcome_detail,
        "figure": timeline,
        "marks": figures.timeline_marks(d),  # what the timeline draws, for its caption
    }


def _overview(d: DeviceResult, part: str | None, units: dict[str, str]) -> dict[str, Any]:
    f = d.facts
    per_s = rate_unit(units.get(part or ""))
    cold = _stat(f.cold, "throughput", part) if part else None
    steady = _stat(f.steady, "throughput", part) if part else None
    temp = _stat(f.steady, "median", "temp_c")
    hot = _stat(f.steady, "p90", "temp_c")  # the margin as the temp_margin check judges it
    margin = (
        d.info.slowdown_temp_c - hot
        if d.info.slowdown_temp_c is not None and hot is not None
        else None
    )
    eq = _equilibrium(d)
    return {
        "index": d.index,
        "verdict": d.verdict,
        "diagnosis": d.diagnosis,
        "cold": si(cold, per_s),
        "steady": si(steady, per_s),
        "ratio": pct(steady / cold if cold and steady is not None and f.windows_apart else None),
        "temp": num(temp, ".0f", " °C"),
        "margin": num(margin, ".0f", " °C"),
        "clock": num(_stat(f.steady, "median", "sm_clock_mhz"), ".0f", " MHz"),
        "power": num(_stat(f.steady, "median", "power_w"), ".0f", " W"),
        "equilibrium": eq["time"],
        "hw": pct(_stat(f.steady, "reason_share", "hw_any"), 2),
        "thermal": pct(_stat(f.steady, "reason_share", "sw_thermal"), 2),
    }


def _host_rows(analysis: Analysis) -> list[tuple[str, str]]:
    host = analysis.meta.host
    run = analysis.run

    def distinct(attr: str) -> str:
        values = sorted({str(getattr(d.info, attr)) for d in analysis.devices} - {"None"})
        return ", ".join(values) or NOT_AVAILABLE

    cpu = text(host.get("cpu"))
    if host.get("cpu_count"):
        cpu += f" ({host['cpu_count']} logical CPUs)"
    return [
        ("host", text(host.get("hostname") or run.host)),
        ("CPU", cpu),
        ("OS", text(host.get("os"))),
        ("backend", text(run.backend)),
        ("driver", distinct("driver_version")),
        ("CUDA", distinct("cuda_version")),
        ("torch", text(host.get("torch"))),
        ("Python", text(host.get("python"))),
        ("numpy", text(host.get("numpy"))),
        ("nvidia-ml-py", text(host.get("nvidia_ml_py"))),
        ("soak (run)", text(host.get("soak"))),
        ("soak (this report)", __version__),
    ]


def _inventory(analysis: Analysis) -> list[dict[str, str]]:
    def watts(v: float | None) -> str:
        return num(v, ".0f", " W")

    def celsius(v: float | None) -> str:
        return num(v, ".0f", " °C")

    rows = []
    for d in analysis.devices:
        i = d.info
        memory = i.memory_total_b / 2**30 if i.memory_total_b is not None else None
        rows.append(
            {
                "index": str(i.index),
                "name": i.name,
                "serial": text(i.serial),
                "uuid": text(i.uuid),
                "bus": text(i.pci_bus_id),
                "vbios": text(i.vbios),
                "memory": num(memory, ".1f", " GiB"),
                "power": _limit(watts(i.power_limit_w), watts(i.default_power_limit_w)),
                "clocks": _all_or_none(
                    [num(i.max_sm_clock_mhz, ".0f"), num(i.max_mem_clock_mhz, ".0f")]
                ),
                "temps": _all_or_none(
                    [
                        celsius(v)
                        for v in (
                            i.slowdown_temp_c,
                            i.shutdown_temp_c,
                            i.max_operating_temp_c,
                            i.mem_max_temp_c,
                        )
                    ]
                ),
            }
        )
    return rows


def _limit(enforced: str, default: str) -> str:
    if enforced == default == NOT_AVAILABLE:
        return NOT_AVAILABLE
    return f"{enforced} (default {default})"


def _all_or_none(values: list[str]) -> str:
    """ "89 °C / 92 °C"; one "not available" where none is, not one per value."""
    if all(v == NOT_AVAILABLE for v in values):
        return NOT_AVAILABLE
    return " / ".join(values)


def _overview_columns(analysis: Analysis) -> dict[str, Any]:
    """The server table's columns of readings some device of the run can take; one no
    device's backend can read is left out and named."""

    def some(metric: str) -> bool:
        return not analysis.devices or any(
            not _lacks(analysis, d.index, metric) for d in analysis.devices
        )

    shown = {"power": some("power_w"), "temp": some("temp_c"), "reasons": some("clock_reasons")}
    names = {"power": "power", "temp": "temperature", "reasons": "clock-event reasons"}
    return {
        **shown,
        "missing": [names[k] for k, v in shown.items() if not v],
        "span": 1 + shown["power"] + 2 * shown["temp"] + 2 * shown["reasons"] + 1,
    }


def _capabilities(analysis: Analysis) -> dict[str, Any]:
    caps = analysis.capabilities
    devices = sorted(caps)
    metrics = sorted({m for table in caps.values() for m in table})
    return {
        "devices": devices,
        "rows": [(m, [caps[i].get(m, NOT_AVAILABLE) for i in devices]) for m in metrics],
    }


def _bmc(bmc: BmcProbe | None) -> dict[str, str | None]:
    """The BMC's row of the capability table: the inlet read, or why not."""
    if bmc is None:
        return {"status": NOT_AVAILABLE, "detail": "no BMC was probed"}
    if bmc.supported:
        return {"status": "supported", "detail": f"{bmc.inlet_sensor!r} from {bmc.source}"}
    return {"status": str(bmc.capability or NOT_AVAILABLE), "detail": bmc.reason}


def _events(analysis: Analysis, t0: float) -> dict[str, Any]:
    rows = [
        {
            "t": load_minutes(e.t_s - t0),
            "device": "server" if e.device is None else _label(analysis, e.device),
            "kind": str(e.kind),
            "message": e.message,
            "notable": e.kind in NOTABLE_EVENTS
            or (e.kind is EventKind.WORKER_OUTCOME and e.details.get("outcome") != "ok"),
        }
        for e in analysis.events[:MAX_EVENTS]
    ]
    return {"rows": rows, "hidden": max(len(analysis.events) - MAX_EVENTS, 0)}


def _profile(analysis: Analysis) -> dict[str, Any]:
    p = analysis.profile
    clock = words(d.info for d in analysis.devices)["sm_clock"]
    windows = [
        (f.name, getattr(p.windows, f.name), meaning(f).replace("SM clock", clock))
        for f in dataclasses.fields(Windows)
    ]
    checks = [(f.name, getattr(p.checks, f.name), meaning(f)) for f in dataclasses.fields(Checks)]
    floors = [
        (workload, part, floor, p.floor_sources.get(workload, {}).get(part, ""))
        for workload, parts in sorted(p.floors.items())
        for part, floor in sorted(parts.items())
    ]
    return {
        "name": p.name,
        "source": p.source,
        "windows": windows,
        "checks": checks,
        "floors": floors,
    }


def _setups(analysis: Analysis) -> list[tuple[str, str]]:
    """Per device, what its workload set up and why (dtype, size), from its LOAD_START."""
    return [
        (_label(analysis, e.device), e.message.removeprefix(f"device {e.device}: "))
        for e in analysis.events
        if e.kind is EventKind.LOAD_START and e.device is not None
    ]


def _reproduce(analysis: Analysis, run_dir: Path) -> dict[str, Any]:
    run = analysis.run
    stop = analysis.stop or StopRecord()
    rebuild, from_start = rebuild_command(run.command, run_dir, host=run.host)
    return {
        "command": text(run.command),
        "seed": _seed(run),
        "started": text(run.started_utc),
        "stop": text(stop.reason),
        "stop_detail": stop.detail or "",
        "asked": duration(run.duration_asked_s),
        "load": _load_length(analysis, stop),
        "interval": num(run.interval_s, "g", " s"),
        "until_steady": "yes" if run.until_steady else "no",
        "tags": dict(run.tags),
        "workload_options": dict(run.workload_options),
        "sim": run.sim,
        "rebuild": rebuild,
        "rebuild_from_start": from_start,
    }


def _seed(run) -> str:
    """The seed, or what is true where none was given: a real run's workers seed their
    inputs with 0 plus the device's index."""
    if run.seed is not None:
        return str(run.seed)
    if run.backend in ("sim", "import", None):
        return NOT_AVAILABLE
    return "none given (the workloads' inputs are seeded with 0 + the device's index)"


def rebuild_command(
    command: str | None, run_dir: Path, host: str | None = None
) -> tuple[str, bool]:
    """``soak report DIR`` as it runs from the folder the run was started in (the run's
    ``--out``, default ``reports``, joined with its host and stamp folders), and True; a
    store that no longer lies in a folder named after its ``host`` was moved: DIR is
    where it lies, and False."""
    import shlex

    if host and run_dir.parent.name != host:
        return shlex.join(["soak", "report", str(run_dir)]), False

    out = "reports"
    try:
        argv = shlex.split(command or "")
    except ValueError:
        argv = []
    for i, arg in enumerate(argv):
        if arg == "--out" and i + 1 < len(argv):
            out = argv[i + 1]
        elif arg.startswith("--out="):
            out = arg.removeprefix("--out=")
    if not command or argv[1:2] != ["run"]:
        return shlex.join(["soak", "report", str(run_dir)]), True
    where = Path(out) / run_dir.parent.name / run_dir.name
    return shlex.join(["soak", "report", str(where)]), True


def _header(analysis: Analysis) -> dict[str, Any]:
    meta = analysis.meta
    run = analysis.run
    stop = analysis.stop or StopRecord()
    names = Counter(d.info.name for d in analysis.devices)
    return {
        "host": text(run.host or meta.host.get("hostname")),
        "models": ", ".join(f"{n} × {name}" for name, n in sorted(names.items())) or "no devices",
        "workload": text(run.workload),
        "backend": text(run.backend),
        "started": text(run.started_utc),
        "load": _load_length(analysis, stop),
        "warmup": _warmup(analysis),
        # no stop record: the coordinator died (the analysis calls that "error")
        "stop": analysis.stop_reason,
        "stop_detail": stop.detail or "",
        "stop_decision": _decision_line(meta.stop_decision),
        "incomplete": analysis.stop_reason not in COMPLETE_STOPS,
        "imported": _imported(run.source),
        "damaged": _damage(meta.salvage),
    }


def _decision_line(found: StopDecision | None) -> str:
    """The line under the header: why --until-steady stopped, or where it would have (an
    import replayed with --stop steady)."""
    if found is None or not found.reason:
        return ""
    head = "--until-steady would have stopped" if found.replayed else "stopped"
    went_on = f"; it {text(found.after_settled)}" if found.after_settled else ""
    return f"{head}: {text(found.reason)}{went_on}"


def _decision(analysis: Analysis) -> dict[str, Any] | None:
    """The sequential stop of --until-steady: its reason, every check judged with its
    interval, and the predicted time of the verdict against the actual one."""
    found = analysis.meta.stop_decision
    if found is None:
        return None

    def figure(value: float | None, unit: str | None) -> str:
        """A ratio (no unit) in %, a rate with its unit."""
        if value is None:
            return text(None)
        return si(value, unit) if unit else pct(value)

    rows = [
        {
            "where": f"{device_kind(analysis)} {c.device}",
            "check": text(c.check),
            "value": figure(c.value, c.unit),
            "ci": "± " + figure(c.ci, c.unit) if c.ci is not None else "",
            "floor": figure(c.floor, c.unit),
            "outcome": text(c.outcome),
        }
        for c in found.checks or ()
    ]
    predicted = [
        f"after {p.at_load_s / 60:.0f} min of load: "
        + ("not predicted" if p.verdict_load_s is None else f"{p.verdict_load_s / 60:.1f} min")
        for p in found.predicted or ()
        if p.at_load_s is not None
    ]
    actual = found.actual_load_s
    after = found.after_settled
    return {
        "reason": text(found.reason) + (f". The run {text(after)}" if after else ""),
        "rows": rows,
        "predicted": "; ".join(predicted),
        "actual": f"{actual / 60:.1f} min" if actual is not None else "",
    }


def _imported(source: Any) -> str:
    """The header line of an imported trace: file, format, size, sha256, how time was
    obtained and which load segment was taken; empty for a live run."""
    if not isinstance(source, dict):
        return ""
    parts = [
        f"{text(source.get('file'))} ({text(source.get('format'))}, "
        f"{text(source.get('size_b'))} B, sha256 {text(source.get('sha256'))})"
    ]
    if source.get("member"):
        parts.append(f"member {source['member']}")
    if source.get("time_basis"):
        parts.append(f"time: {source['time_basis']}")
    segment = source.get("load_segment") or {}
    if segment:
        parts.append(
            f"load segment {num(segment.get('start_s'), '.1f', ' s')} to "
            f"{num(segment.get('end_s'), '.1f', ' s')} after the first sample "
            f"({text(segment.get('basis'))})"
        )
    others = source.get("other_segments") or []
    if others:
        parts.append(f"{len(others)} other load segment(s) not imported")
    if "sku" in source and not source["sku"]:
        parts.append("SKU not known (slowdown temperatures not available; give --profile)")
    for sku in source.get("sku") or []:
        devices = ", ".join(str(i) for i in sku.get("devices") or [])
        parts.append(f"SKU {text(sku.get('profile'))}, {text(sku.get('basis'))}, devices {devices}")
    if source.get("column_precedence"):
        parts.append(f"column precedence: {'; '.join(source['column_precedence'])}")
    if source.get("columns_not_used"):
        parts.append(f"columns not used: {', '.join(source['columns_not_used'])}")
    return " · ".join(parts)


def _damage(found: Salvage | None) -> str | None:
    """ "store damaged: recovered 6,012 samples up to t = 1.7 h" for a salvaged store."""
    if found is None:
        return None
    lost = ", ".join(found.incomplete_tables) or "none"
    return (
        f"store damaged: recovered {found.samples:,} samples up to t = "
        f"{duration(found.last_t_s)} (tables not read whole: {lost})"
    )


def device_kind(analysis: Analysis) -> str:
    """What the run's devices are, from their backend: "GPU", "CPU", "APU"; "device" when a
    run mixes kinds."""
    kinds = {d.info.kind for d in analysis.devices}
    return kinds.pop() if len(kinds) == 1 else "device"


def _label(analysis: Analysis, index: int) -> str:
    """ "GPU 3", "CPU 0": a device of the run by its index."""
    info = next((d.info for d in analysis.devices if d.index == index), None)
    return info.label if info is not None else f"{device_kind(analysis)} {index}"


def _load_length(analysis: Analysis, stop: StopRecord) -> str:
    """How long the devices were under load: from each one's load start (after its warm-up)
    to its last work, the longest; the recorded stop without work measured."""
    spans = [
        d.end_s - d.load_start_s
        for d in analysis.devices
        if d.load_start_s is not None and d.end_s is not None
    ]
    if spans:
        return duration(max(spans))
    return duration(stop.duration_s)


def _warmup(analysis: Analysis) -> str | None:
    """ "worker ready after 38 s" (or "workers ready after 31–38 s"); None where no device
    measured one (a simulated load has none)."""
    found = sorted(d.warmup_s for d in analysis.devices if d.warmup_s is not None)
    if not found:
        return None
    if len(found) == 1 or found[-1] - found[0] < 1:
        return f"worker{'s' if len(found) > 1 else ''} ready after {duration(found[-1])}"
    return f"workers ready after {found[0]:.0f}–{duration(found[-1])}"


def _reasons(analysis: Analysis) -> list[dict[str, Any]]:
    return [
        {
            "status": str(c.status),
            "where": "server" if c.device is None else _label(analysis, c.device),
            "anchor": None if c.device is None else f"gpu{c.device}",
            "check": c.check,
            "message": c.message,
        }
        for c in merge_windows(analysis.reasons)
    ]


def _counts(analysis: Analysis, reasons: list[dict[str, Any]]) -> dict[str, str]:
    """The reasons' summary line: failures, incomplete checks and warnings as the rows listed
    under it (a check about the steady and the final window that says the same is one row,
    and counted once), of every check made (as the devices' tables and junit.xml list them)."""
    judged = [c for c in analysis.checks if c.status is not Status.NOT_CHECKED]
    n_checks = len(judged) + len(run_cases(analysis))
    n_fail = sum(r["status"] == str(Status.FAIL) for r in reasons)
    n_warn = sum(r["status"] == str(Status.WARN) for r in reasons)
    n_incomplete = sum(r["status"] == str(Status.INCOMPLETE) for r in reasons)
    not_checked = len(_not_checked(analysis))
    incomplete = [r["check"] for r in reasons if r["status"] == str(Status.INCOMPLETE)]
    why = [  # a run_length too short to judge; any other, contention (analysis/contention.py)
        "too short a load to judge" if CheckName.RUN_LENGTH in incomplete else "",
        "something else used the device" if set(incomplete) - {CheckName.RUN_LENGTH} else "",
    ]
    return {
        "n_checks": plural(n_checks, "check"),
        "n_fail": plural(n_fail, "failure"),
        "n_incomplete": plural(n_incomplete, "incomplete check") if n_incomplete else "",
        "incomplete_why": "; ".join(w for w in why if w),
        "n_warn": plural(n_warn, "warning"),
        "n_not_checked": f"{not_checked:,}",
    }


def _not_checked(analysis: Analysis) -> list[dict[str, Any]]:
    """Checks that could not run for want of a signal, each listed once with the devices
    it concerns."""
    rows: dict[tuple[str, str], list[str]] = {}
    for c in analysis.not_checked:
        where = "server" if c.device is None else _label(analysis, c.device)
        rows.setdefault((c.check, c.message), []).append(where)
    return [
        {"check": check, "message": message, "where": ", ".join(where)}
        for (check, message), where in rows.items()
    ]


def _hot_spots(analysis: Analysis) -> dict[int, str]:
    """The heat map's row labels for devices the hot-spot rule flagged in their steady
    window: their status and message."""
    return {
        c.device: str(c.status)
        for c in analysis.server_checks + [c for d in analysis.devices for c in d.checks]
        if c.check is CheckName.HOT_SPOT
        and c.device is not None
        and c.status in (Status.WARN, Status.FAIL)
        and c.window is WindowName.STEADY
    }


def context(analysis: Analysis, data: RunData, run_dir: Path) -> dict[str, Any]:
    """Everything the report's template shows, formatted: the template only lays it out.
    ``data``: the run's dataset, whose series the figures read one device at a time."""
    meta = analysis.meta
    part = analysis.primary_part
    starts = [d.load_start_s for d in analysis.devices if d.load_start_s is not None]
    t0 = min(starts) if starts else (meta.load_start_s or 0.0)
    per_s = rate_unit(analysis.units.get(part or ""))
    drawn = figures.run_figures(analysis.devices, data, part, per_s, t0, _hot_spots(analysis))
    server: dict[str, Any] = {"view": drawn.view, "heatmap": drawn.heatmap}
    host_rows = _host_rows(analysis)
    reasons = _reasons(analysis)
    return {
        "verdict": analysis.verdict,
        "kind": device_kind(analysis),
        "words": words(d.info for d in analysis.devices),
        "header": _header(analysis),
        "reasons": reasons,
        **_counts(analysis, reasons),
        "not_checked": _not_checked(analysis),
        "profile_hot_spot_margin": f"{analysis.profile.checks.hot_spot_margin_c:g} °C",
        # the hot-spot rule judged this run (three devices with a temperature, or more)
        "hot_spot_rule": any(
            c.check is CheckName.HOT_SPOT for d in analysis.devices for c in d.checks
        ),
        "overview": [_overview(d, part, analysis.units) for d in analysis.devices],
        "overview_columns": _overview_columns(analysis),
        "part": part,
        "sync_loss": pct(analysis.sync_loss.loss, 2),
        "slowest": analysis.sync_loss.slowest,
        "server_checks": _checks(analysis.server_checks),
        "ddp": ddp_context(analysis.sync),
        "server_figures": server,
        "devices": [_device(d, analysis, drawn.timelines[d.index]) for d in analysis.devices],
        "host_rows": host_rows,
        "inventory": _inventory(analysis),
        "capabilities": _capabilities(analysis),
        "bmc": _bmc(meta.bmc),
        "headroom": headroom_context(
            analysis.headroom,
            {d.index: d.info.label for d in analysis.devices},
            analysis.units,
            part,
        ),
        "events": _events(analysis, t0),
        "decision": _decision(analysis),
        "profile": _profile(analysis),
        "reproduce": _reproduce(analysis, run_dir),
        "setups": _setups(analysis),
        "versions": [row for row in host_rows if row[0] not in ("host", "CPU", "OS", "backend")],
        "soak_version": __version__,
    }


def render(template: str, values: dict[str, Any]) -> str:
    return env.get_template(template).render(**values)


def write_html(path: Path, html: str) -> None:
    tmp = path.with_suffix(".html.tmp")
    tmp.write_text(html, encoding="utf-8")
    tmp.replace(path)


def write_report(path: Path, analysis: Analysis, data: RunData) -> None:
    """The report of the run in ``path``'s folder."""
    write_html(path, render("report.html.j2", context(analysis, data, path.parent)))
