"""``summary.json``: the part of a run other tools rely on.

Every key is described in docs/summary-schema.md; a test keeps that page complete.

Schema versions (a later version may add keys; removing or renaming one bumps the version):
  1: first version. Adds over the first sketch of the schema, as later keys are allowed:
     "checks" (every check with its status, also passing ones), per device "windows"
     (start/end of cold and steady), "counters", "reason_share", "outcome", and per run
     "tags", "profile", "soak_version". Then, still version 1: "host"; per device
     "inventory", "steady_noise", and per window "power_mean_w", "energy_basis",
     "energy_per_work" (tests/fixtures/summary/ keeps files from before and after); per
     device "diagnosis_evidence", per equilibrium "confirmed_s", per server "by_part", per
     window "util_pct", "p10", "p90" and "throughput_cv".
     Then, still version 1: check status "not_checked" (a check that could not run for want
     of a signal; in "checks", never in "reasons"), top-level "not_checked" (those checks),
     per device "diagnosis_next_step"; "server.ddp" (the ddp workload's synchronous step
     rate, pace setter, rank timing and busbw; null otherwise); "run.ddp_group" (a
     multi-node ddp group's rank map, soak.nodegroup; null otherwise).
     Then, still version 1: check status "incomplete" (a throughput figure that fell while
     something else used the device; in "checks" and "reasons"), diagnoses "host
     contention" and "another process on the device".
     Then, still version 1: per device "telemetry_quality" (samples, readings left out as
     implausible, gaps, frozen spans, counter resets; soak.validity).
     Then, still version 1: top-level "headroom" (thermal headroom at the design inlet from
     the BMC's inlet: per device θ, leakage, projection, margins; soak.analysis.headroom).
     Then, still version 1: top-level "stop_decision" (a run made with --until-steady, or
     an import replayed with --stop steady, only: why and when the sequential stop fell,
     soak.analysis.decision).
     Then, still version 1: per device "cold" null where the trace began under load (no
     cold window; check "cold_window") and "ratio" null where there is no cold window or
     it overlaps the steady one; diagnosis "thermal-limited (inferred from temperature)";
     check names "slowdown_temp", "cold_window", "implausible";
     per equilibrium "judged_by", "dated_by", "held_back_by" and
     "set_aside" (the signals that judged the date or held it back, and those whose own
     noise left them unable to judge; rule line 1 of docs/equilibrium.md).
     Then, still version 1: per equilibrium "window_s" and "windows_why" (the windows its
     checks compared, from its fitted τ and noise: rule line 16; null where the load ended
     before they were chosen), and in "stop_decision" "after_settled", "settled_at_s" and
     "after_settled_s" (how long the run went on after the last device's equilibrium date,
     and what held it: a confirmation, a least steady window, the checks' intervals).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from soak import __version__
from soak.analysis.analyze import Analysis, DeviceResult
from soak.analysis.diagnosis import NEXT_STEPS
from soak.analysis.equilibrium import Equilibrium
from soak.analysis.noise import Noise
from soak.analysis.windows import WindowStats
from soak.errors import ConfigError
from soak.fields import SUMMARY_METRICS
from soak.report.ddp_section import ddp_summary
from soak.report.headroom import headroom_summary
from soak.units import rate_unit

SUMMARY_NAME = "summary.json"
SCHEMA_VERSION = 1
SUPPORTED_VERSIONS = frozenset({1})
WINDOW_KEYS = SUMMARY_METRICS  # schema v1: cold, steady and ratio of each


def clean_json(value: Any) -> Any:
    """NaN and inf are not JSON: a value that could not be measured is null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: clean_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean_json(v) for v in value]
    return value


def _window(stats: WindowStats | None) -> dict[str, Any]:
    if stats is None:
        out: dict[str, Any] = {key: None for key in WINDOW_KEYS} | {"throughput": {}}
        out |= {"p10": dict.fromkeys(WINDOW_KEYS), "p90": dict.fromkeys(WINDOW_KEYS)}
        out |= {"throughput_cv": {}, "power_mean_w": None, "energy_basis": None}
        out["energy_per_work"] = {}
        return out
    out = {key: stats.median.get(key) for key in WINDOW_KEYS}
    out["throughput"] = dict(stats.throughput)
    out["p10"] = {key: stats.p10.get(key) for key in WINDOW_KEYS}
    out["p90"] = {key: stats.p90.get(key) for key in WINDOW_KEYS}
    out["throughput_cv"] = dict(stats.throughput_cv)
    out["power_mean_w"] = stats.power_mean_w
    out["energy_basis"] = stats.energy_basis
    out["energy_per_work"] = dict(stats.energy_per_work)
    return out


def _ratio(cold: dict[str, Any], steady: dict[str, Any]) -> dict[str, Any]:
    def div(a: float | None, b: float | None) -> float | None:
        return a / b if a is not None and b else None

    out: dict[str, Any] = {key: div(steady[key], cold[key]) for key in WINDOW_KEYS}
    parts = set(cold["throughput"]) | set(steady["throughput"])
    out["throughput"] = {
        p: div(steady["throughput"].get(p), cold["throughput"].get(p)) for p in sorted(parts)
    }
    energy = set(cold["energy_per_work"]) | set(steady["energy_per_work"])
    out["energy_per_work"] = {
        p: div(steady["energy_per_work"].get(p), cold["energy_per_work"].get(p))
        for p in sorted(energy)
    }
    return out


INVENTORY_KEYS = (
    "serial",
    "pci_bus_id",
    "vbios",
    "driver_version",
    "cuda_version",
    "memory_total_b",
    "power_limit_w",
    "default_power_limit_w",
    "max_sm_clock_mhz",
    "max_mem_clock_mhz",
    "slowdown_temp_c",
    "shutdown_temp_c",
    "max_operating_temp_c",
    "mem_max_temp_c",
)


def _noise(n: Noise | None) -> dict[str, Any] | None:
    if n is None:
        return None
    return {
        "method": "batch means",
        "blocks": n.blocks,
        "se": dict(n.se) | {"throughput": dict(n.throughput_se)},
        "step": dict(n.step),
    }


def _judges(eq: Equilibrium | None) -> dict[str, Any]:
    """Which signals judged the equilibrium's outcome, set or held back its date, and which
    could not judge it (the pass that set the date, or the last check where none stands)."""
    check = eq.deciding_check if eq else None
    if eq is None or check is None:
        return {"judged_by": [], "dated_by": [], "held_back_by": [], "set_aside": []}
    return {
        "judged_by": [d.signal for d in check.judging],
        "dated_by": list(check.dated_by) if eq.reached else [],
        "held_back_by": [] if eq.reached else list(check.held_back_by),
        "set_aside": [
            {"signal": d.signal, "floor": d.floor, "tolerance": d.tolerance, "unit": d.unit}
            for d in check.set_aside
        ],
    }


def _device(d: DeviceResult, units: dict[str, str], noise: Noise | None) -> dict[str, Any]:
    f = d.facts
    eq = f.equilibrium
    cold = _window(f.cold)
    steady = _window(f.steady)
    # a trace begun under load has no cold window: null, not a window of nulls
    began = f.warm_start is not None and f.warm_start.begun
    return {
        "index": d.info.index,
        "name": d.info.name,
        "uuid": d.info.uuid,
        "verdict": d.verdict,
        "diagnosis": d.diagnosis,
        "diagnosis_evidence": list(d.diagnosis_evidence),
        "diagnosis_next_step": NEXT_STEPS.get(d.diagnosis),
        "equilibrium": {
            "reached": bool(eq and eq.reached),
            "time_s": eq.time_s if eq else None,
            "tau_s": eq.fit.measured_tau_s if eq and eq.fit else None,
            "t_inf_c": eq.fit.measured_t_inf_c if eq and eq.fit else None,
            "basis": eq.basis if eq else None,
            "confirmed_s": eq.confirmed_s if eq else None,
            # the windows its checks compared (equilibrium rule, line 16), and why those
            "window_s": eq.scale.window_s if eq and eq.scale else None,
            "windows_why": eq.scale.describe() if eq and eq.scale else None,
            **_judges(eq),
        },
        "cold": None if began else cold,
        "steady": steady,
        # no ratio where the windows do not lie apart (or there is no cold window)
        "ratio": _ratio(cold, steady) if f.windows_apart else None,
        "throughput_units": {p: rate_unit(units.get(p)) for p in f.units},
        "windows": {
            name: None if s is None else {"start_s": s.window.start_s, "end_s": s.window.end_s}
            for name, s in (("cold", f.cold), ("steady", f.steady))
        },
        "reason_share": dict(f.steady.reason_share) if f.steady else {},
        "counters": {
            k: {"first": c.first, "last": c.last, "peak": c.peak} for k, c in f.counters.items()
        },
        "outcome": f.outcome.value if f.outcome else None,
        "load_start_s": d.load_start_s,
        "warmup_s": d.warmup_s,
        "load_end_s": d.end_s,
        "inventory": {key: getattr(d.info, key) for key in INVENTORY_KEYS},
        "steady_noise": _noise(noise),
        "telemetry_quality": d.quality.as_dict() if d.quality is not None else None,
    }


def build_summary(analysis: Analysis) -> dict[str, Any]:
    """The summary of an analysed run, the noise of each device's steady figures included."""
    meta = analysis.meta
    run, stop = analysis.run, analysis.stop
    summary = {
        "schema_version": SCHEMA_VERSION,
        "soak_version": __version__,
        "verdict": analysis.verdict,
        "reasons": [
            {"device": c.device, "check": c.check, "status": str(c.status), "message": c.message}
            for c in analysis.reasons
        ],
        "run": {
            "backend": run.backend,
            "workload": run.workload,
            "started_utc": run.started_utc,
            "duration_s": None if stop is None else stop.duration_s,
            "stop_reason": analysis.stop_reason,
            "seed": run.seed,
            "command": run.command,
            "host": run.host,
            "tags": dict(run.tags),
            "profile": analysis.profile.name,
            "store_damage": None if meta.salvage is None else meta.salvage.as_dict(),
            "ddp_group": None if meta.ddp_group is None else meta.ddp_group.to_json(),
        },
        "host": dict(meta.host),
        "devices": [_device(d, analysis.units, d.noise) for d in analysis.devices],
        "server": {
            "sync_loss": analysis.sync_loss.loss,
            "slowest_device": analysis.sync_loss.slowest,
            "part": analysis.primary_part,
            "by_part": [
                {"part": s.part, "sync_loss": s.loss, "slowest_device": s.slowest}
                for s in analysis.sync_losses
            ],
            "ddp": ddp_summary(analysis.sync),
        },
        "checks": [
            {"device": c.device, "check": c.check, "status": str(c.status), "message": c.message}
            for c in analysis.checks
        ],
        "not_checked": [
            {"device": c.device, "check": c.check, "status": str(c.status), "message": c.message}
            for c in analysis.not_checked
        ],
        "headroom": headroom_summary(analysis.headroom, meta.bmc),
    }
    decision = meta.stop_decision
    if run.until_steady or decision is not None:
        summary["stop_decision"] = None if decision is None else decision.to_json()
    return clean_json(summary)


def write_summary(path: Path, summary: dict[str, Any]) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(summary, indent=2, sort_keys=False) + "\n")
    tmp.replace(path)


def load_summary(path: str | Path) -> dict[str, Any]:
    """Read a summary.json, rejecting versions this soak does not know in one line."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror})") from exc
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not JSON (not UTF-8 text at byte {exc.start})") from exc
    version = data.get("schema_version") if isinstance(data, dict) else None
    # An exact int: a list would not hash, and true or 1.0 would pass for 1.
    if type(version) is not int or version not in SUPPORTED_VERSIONS:
        known = ", ".join(map(str, sorted(SUPPORTED_VERSIONS)))
        raise ConfigError(f"{path}: summary schema_version {version!r} is not supported ({known})")
    return data
