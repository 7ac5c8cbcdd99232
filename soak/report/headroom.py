"""The report's view of thermal headroom (``soak.analysis.headroom``): the ``headroom``
block of ``summary.json`` and the rows and figure of ``report.html``'s headroom section.
The analysis computes every figure; this module only formats them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from soak.analysis.headroom import THRESHOLDS, DeviceHeadroom, Headroom
from soak.record import BmcProbe
from soak.report import figures
from soak.units import NOT_AVAILABLE, num, si

CURVE_SPAN_C = (-10.0, 15.0)  # the plot's inlets, around the run's and the design inlet


def headroom_summary(h: Headroom | None, bmc: BmcProbe | None) -> dict[str, Any]:
    """``headroom`` of summary.json (docs/summary-schema.md)."""
    if h is None:
        return {"checked": False, "reason": "not analysed", "devices": []}
    first = h.first_to_throttle()
    return {
        "checked": h.checked,
        "reason": h.reason,
        "design_inlet_c": h.design_inlet_c,
        "inlet_source": None if bmc is None else bmc.source,
        "inlet_sensor": None if bmc is None else bmc.inlet_sensor,
        "first_to_throttle": None if first is None else first.device,
        "devices": [_device(d) for d in h.devices],
        "not_checked": [{"device": i, "reason": r} for i, r in sorted(h.not_checked.items())],
    }


def _device(d: DeviceHeadroom) -> dict[str, Any]:
    m, p = d.model, d.projected
    return {
        "device": d.device,
        "inlet_c": m.steady.inlet_c,
        "steady_temp_c": m.steady.temp_c,
        "steady_power_w": m.steady.power_w,
        "theta_c_per_w": m.theta_c_per_w,
        "theta_interval_c_per_w": list(m.theta_interval) if m.theta_interval else None,
        "leakage_w_per_c": m.leakage_w_per_c,
        "clock_per_c_mhz": m.clock_per_c_mhz,
        "at_power_limit": m.at_power_limit,
        "fan_pct": m.fan_pct,
        "projected_temp_c": p.temp_c,
        "projected_power_w": p.power_w,
        "projected_sm_clock_mhz": p.clock_mhz,
        "projected_throughput": dict(p.throughput),
        "projected_limit": p.limit or None,
        "margins_c": dict(d.margins_c),
        "margin_c": d.margin_c,
        "throttle_inlet_c": d.throttle_inlet_c,
        "notes": list(d.notes),
    }


def headroom_context(
    h: Headroom | None, labels: Mapping[int, str], units: Mapping[str, str], part: str | None
) -> dict[str, Any]:
    """The report's section: the sentence, the table, the figure (or why not checked)."""
    if h is None or not h.checked:
        reason = "not analysed" if h is None else h.reason
        return {"checked": False, "sentence": f"not checked: {reason}", "rows": [], "figure": None}
    rows = []
    for d in h.devices:
        m, p = d.model, d.projected
        interval = m.theta_interval
        rate = p.throughput.get(part or "")
        unit = units.get(part or "", "")
        rows.append(
            {
                "device": labels.get(d.device, str(d.device)),
                "inlet": num(m.steady.inlet_c, ".1f", " °C"),
                "theta": num(m.theta_c_per_w * 1000, ".1f", " mK/W")
                + (f" ({interval[0] * 1000:.1f}–{interval[1] * 1000:.1f})" if interval else ""),
                "leakage": num(m.leakage_w_per_c, ".2f", " W/°C")
                if not m.at_power_limit
                else num(m.clock_per_c_mhz, ".2f", " MHz/°C at the power limit"),
                "temp": num(p.temp_c, ".1f", " °C"),
                "power": num(p.power_w, ".0f", " W"),
                "clock": num(p.clock_mhz, ".0f", " MHz"),
                "rate": si(rate, f"{unit}/s") if rate is not None else NOT_AVAILABLE,
                "limit": p.limit or "none",
                "margins": ", ".join(
                    f"{name} {num(d.margins_c.get(key), '.1f', ' °C')}"
                    for key, _, name in THRESHOLDS
                    if key in d.margins_c
                )
                or NOT_AVAILABLE,
                "throttle": num(d.throttle_inlet_c, ".1f", " °C")
                if d.throttle_inlet_c is not None
                else "beyond the range projected",
                "notes": "; ".join(d.notes),
            }
        )
    return {
        "checked": True,
        "sentence": h.sentence(labels),
        "design": num(h.design_inlet_c, ".0f", " °C"),
        "rows": rows,
        "figure": _figure(h, labels),
    }


def _figure(h: Headroom, labels: Mapping[int, str]) -> str:
    inlets = [d.model.steady.inlet_c for d in h.devices]
    lo = min(*inlets, h.design_inlet_c) + CURVE_SPAN_C[0]
    hi = max(*inlets, h.design_inlet_c) + CURVE_SPAN_C[1]
    grid = np.linspace(lo, hi, 60)
    curves = [
        (labels.get(d.device, str(d.device)), grid, np.array([d.model.at(x).temp_c for x in grid]))
        for d in h.devices
    ]
    sws = [
        d.model.thresholds_c["sw_thermal"]
        for d in h.devices
        if "sw_thermal" in d.model.thresholds_c
    ]
    return figures.headroom(
        curves, h.design_inlet_c, min(sws) if sws else None, float(np.mean(inlets))
    )
