"""A first self-contained ``report.html``: verdict, reasons, cold vs steady per device and a
timeline per device, figures inlined as SVG. Jinja2 autoescapes every value."""

from __future__ import annotations

import io
import platform
from pathlib import Path
from typing import Any

import jinja2
import numpy as np
from matplotlib.figure import Figure

from soak import __version__
from soak.analysis.analyze import Analysis, DeviceResult
from soak.analysis.equilibrium import Equilibrium
from soak.model import RATE_UNITS
from soak.store import RunStore
from soak.units import NOT_AVAILABLE, num, pct, si

MAX_POINTS = 1500  # per plotted series; min/max envelope kept when downsampling

_env = jinja2.Environment(
    loader=jinja2.PackageLoader("soak.report", "templates"),
    autoescape=jinja2.select_autoescape(["html", "j2"]),
    undefined=jinja2.StrictUndefined,
)


def envelope(t: np.ndarray, y: np.ndarray, max_points: int = MAX_POINTS) -> tuple[np.ndarray, ...]:
    """Downsample to at most ``max_points`` bins of (t, mean, min, max), so a short dip is
    still drawn as the bin's minimum rather than averaged away."""
    finite = np.isfinite(y)
    t, y = t[finite], y[finite]
    if t.size <= max_points:
        return t, y, y, y
    edges = np.linspace(0, t.size, max_points + 1).astype(int)
    starts = edges[:-1]
    tm = np.add.reduceat(t, starts) / np.diff(edges)
    ym = np.add.reduceat(y, starts) / np.diff(edges)
    return tm, ym, np.minimum.reduceat(y, starts), np.maximum.reduceat(y, starts)


def _svg(fig: Figure) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    text = buf.getvalue()
    return text[text.index("<svg") :]


def _timeline(d: DeviceResult, tele: dict[str, np.ndarray], work: dict, units: dict) -> str:
    panels = [
        ("temp_c", "temperature (°C)"),
        ("sm_clock_mhz", "SM clock (MHz)"),
        ("power_w", "power (W)"),
    ]
    # Figure without pyplot: no global state, no GUI backend, nothing to close.
    fig = Figure(figsize=(9, 6.4))
    axes = fig.subplots(4, 1, sharex=True)
    t0 = d.load_start_s or 0.0
    for ax, (key, label) in zip(axes, panels, strict=False):
        tm, ym, lo, hi = envelope(tele["t_s"] - t0, tele[key])
        if tm.size:
            ax.fill_between(tm / 60, lo, hi, color="tab:blue", alpha=0.25, linewidth=0)
            ax.plot(tm / 60, ym, color="tab:blue", linewidth=0.8)
        else:
            ax.text(0.5, 0.5, NOT_AVAILABLE, transform=ax.transAxes, ha="center", color="gray")
        ax.set_ylabel(label, fontsize=8)
    ax = axes[-1]
    for part, w in work.items():
        mid = (w["t_start_s"] + w["t_end_s"]) / 2 - t0
        rate = w["work"] / (w["t_end_s"] - w["t_start_s"])
        tm, ym, lo, hi = envelope(mid, rate)
        if not tm.size:
            continue
        scale = float(np.nanmax(ym)) or 1.0
        ax.plot(
            tm / 60,
            ym / scale,
            linewidth=0.8,
            label=f"{part} (÷ {si(scale, RATE_UNITS.get(units.get(part, ''), ''))})",
        )
    ax.set_ylabel("throughput (rel.)", fontsize=8)
    if work:
        ax.legend(fontsize=7, loc="lower right")
    ax.set_xlabel("minutes since load start", fontsize=8)
    for axis in axes:
        axis.tick_params(labelsize=7)
        axis.grid(alpha=0.3)
        for stats, color in ((d.facts.cold, "tab:cyan"), (d.facts.steady, "tab:orange")):
            if stats is not None:
                axis.axvspan(
                    (stats.window.start_s - t0) / 60,
                    (stats.window.end_s - t0) / 60,
                    color=color,
                    alpha=0.15,
                    linewidth=0,
                )
    fig.suptitle(f"GPU {d.index}: {d.info.name}", fontsize=9)
    return _svg(fig)


def _device_rows(d: DeviceResult, units: dict[str, str]) -> list[dict[str, str]]:
    f = d.facts
    rows = []
    metrics = (
        ("temperature", "temp_c", lambda v: num(v, ".0f", " °C")),
        ("HBM temperature", "mem_temp_c", lambda v: num(v, ".0f", " °C")),
        ("SM clock", "sm_clock_mhz", lambda v: num(v, ".0f", " MHz")),
        ("memory clock", "mem_clock_mhz", lambda v: num(v, ".0f", " MHz")),
        ("power", "power_w", lambda v: num(v, ".0f", " W")),
        ("utilisation", "util_pct", lambda v: num(v, ".0f", " %")),
    )
    for label, key, fmt in metrics:
        cold = f.cold.median.get(key) if f.cold else None
        steady = f.steady.median.get(key) if f.steady else None
        ratio = steady / cold if cold and steady is not None else None
        rows.append(
            {"label": label, "cold": fmt(cold), "steady": fmt(steady), "ratio": num(ratio, ".3f")}
        )
    for part in sorted(f.units):
        unit = RATE_UNITS.get(units.get(part, ""), "")
        cold = f.cold.throughput.get(part) if f.cold else None
        steady = f.steady.throughput.get(part) if f.steady else None
        ratio = steady / cold if cold and steady is not None else None
        rows.append(
            {
                "label": f"{part} throughput",
                "cold": si(cold, unit),
                "steady": si(steady, unit),
                "ratio": num(ratio, ".3f"),
            }
        )
    return rows


def _equilibrium_text(eq: Equilibrium | None) -> str:
    if eq is None or not eq.reached or eq.time_s is None:
        return "not reached"
    return f"{eq.time_s / 60:.1f} min after start"


def _context(analysis: Analysis, summary: dict[str, Any], store: RunStore) -> dict[str, Any]:
    devices = []
    for d in analysis.devices:
        tele = store.telemetry(d.index)
        work = store.work(d.index)
        eq = d.facts.equilibrium
        shares = d.facts.steady.reason_share if d.facts.steady else {}
        devices.append(
            {
                "index": d.index,
                "info": d.info,
                "verdict": d.verdict,
                "diagnosis": d.diagnosis,
                "rows": _device_rows(d, analysis.units),
                "equilibrium": _equilibrium_text(eq),
                "tau": num(eq.fit.tau_s / 60 if eq and eq.fit else None, ".1f", " min"),
                "basis": eq.basis if eq else NOT_AVAILABLE,
                "reason_share": {k: pct(v, 2) for k, v in shares.items()},
                "figure": _timeline(d, tele, work, analysis.units),
            }
        )
    loss, slowest = analysis.sync_loss()
    return {
        "summary": summary,
        "analysis": analysis,
        "devices": devices,
        "sync_loss": pct(loss, 2),
        "slowest": slowest,
        "reasons": analysis.reasons,
        "events": analysis.events,
        "capabilities": analysis.capabilities,
        "meta": analysis.meta,
        "soak_version": __version__,
        "python": platform.python_version(),
    }


def write_report(path: Path, analysis: Analysis, summary: dict[str, Any], store: RunStore) -> None:
    html = _env.get_template("report.html.j2").render(**_context(analysis, summary, store))
    tmp = path.with_suffix(".html.tmp")
    tmp.write_text(html)
    tmp.replace(path)
