"""``summary.json``: the part of a run other tools rely on (DESIGN.md documents the schema).

Schema versions:
  1: first version (DESIGN.md). Adds over the DESIGN.md sketch, as later keys are allowed:
     "checks" (every check with its status, also passing ones), per device "windows"
     (start/end of cold and steady), "counters", "reason_share", "outcome", and per run
     "tags", "profile", "soak_version".
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from soak import __version__
from soak.analysis.analyze import Analysis, DeviceResult
from soak.analysis.windows import WindowStats
from soak.errors import ConfigError
from soak.model import RATE_UNITS

SCHEMA_VERSION = 1
SUPPORTED_VERSIONS = frozenset({1})
WINDOW_KEYS = ("temp_c", "mem_temp_c", "sm_clock_mhz", "mem_clock_mhz", "power_w")


def _clean(value: Any) -> Any:
    """NaN and inf are not JSON: a value that could not be measured is null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def _window(stats: WindowStats | None) -> dict[str, Any]:
    if stats is None:
        return {key: None for key in WINDOW_KEYS} | {"throughput": {}}
    out: dict[str, Any] = {key: stats.median.get(key) for key in WINDOW_KEYS}
    out["throughput"] = dict(stats.throughput)
    return out


def _ratio(cold: dict[str, Any], steady: dict[str, Any]) -> dict[str, Any]:
    def div(a: float | None, b: float | None) -> float | None:
        return a / b if a is not None and b else None

    out: dict[str, Any] = {key: div(steady[key], cold[key]) for key in WINDOW_KEYS}
    parts = set(cold["throughput"]) | set(steady["throughput"])
    out["throughput"] = {
        p: div(steady["throughput"].get(p), cold["throughput"].get(p)) for p in parts
    }
    return out


def _device(d: DeviceResult, units: dict[str, str]) -> dict[str, Any]:
    f = d.facts
    eq = f.equilibrium
    cold, steady = _window(f.cold), _window(f.steady)
    return {
        "index": d.info.index,
        "name": d.info.name,
        "uuid": d.info.uuid,
        "verdict": d.verdict,
        "diagnosis": d.diagnosis,
        "equilibrium": {
            "reached": bool(eq and eq.reached),
            "time_s": eq.time_s if eq else None,
            "tau_s": eq.fit.tau_s if eq and eq.fit else None,
            "t_inf_c": eq.fit.t_inf_c if eq and eq.fit else None,
            "basis": eq.basis if eq else None,
        },
        "cold": cold,
        "steady": steady,
        "ratio": _ratio(cold, steady),
        "throughput_units": {p: RATE_UNITS.get(units.get(p, ""), "") for p in f.units},
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
        "load_end_s": d.end_s,
    }


def build_summary(analysis: Analysis) -> dict[str, Any]:
    meta = analysis.meta
    run = meta.get("run", {})
    stop = meta.get("stop") or {}
    sync_loss, slowest = analysis.sync_loss()
    summary = {
        "schema_version": SCHEMA_VERSION,
        "soak_version": __version__,
        "verdict": analysis.verdict,
        "reasons": [
            {"device": c.device, "check": c.check, "status": str(c.status), "message": c.message}
            for c in analysis.reasons
        ],
        "run": {
            "backend": run.get("backend"),
            "workload": run.get("workload"),
            "started_utc": run.get("started_utc"),
            "duration_s": stop.get("duration_s"),
            "stop_reason": analysis.stop_reason,
            "seed": run.get("seed"),
            "command": run.get("command"),
            "host": run.get("host"),
            "tags": run.get("tags", {}),
            "profile": analysis.profile.name,
        },
        "devices": [_device(d, analysis.units) for d in analysis.devices],
        "server": {
            "sync_loss": sync_loss,
            "slowest_device": slowest,
            "part": analysis.primary_part(),
        },
        "checks": [
            {"device": c.device, "check": c.check, "status": str(c.status), "message": c.message}
            for c in analysis.checks
        ],
    }
    return _clean(summary)


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
    version = data.get("schema_version") if isinstance(data, dict) else None
    if version not in SUPPORTED_VERSIONS:
        known = ", ".join(map(str, sorted(SUPPORTED_VERSIONS)))
        raise ConfigError(f"{path}: summary schema_version {version!r} is not supported ({known})")
    return data
