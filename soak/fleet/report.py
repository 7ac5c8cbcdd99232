"""``fleet.json`` and the self-contained ``fleet.html`` of a fleet report.

``fleet.json`` layout, schema version 1 (docs/fleet-schema.md; JSON Schema in
docs/fleet.schema.json). Version history: 1, first release.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Mapping, Sequence
from html import escape
from pathlib import Path
from typing import Any

from markupsafe import Markup

from soak import __version__
from soak.errors import ConfigError
from soak.fleet.analyze import (
    METRIC,
    METRICS,
    FleetResult,
    Outlier,
    Settings,
    Spread,
    analyze_fleet,
    device_label,
    placement,
)
from soak.fleet.collect import Collection, Device, Node
from soak.fleet.ddp_groups import Group, find_groups, group_json
from soak.report.html import render, write_html
from soak.report.summary import clean_json
from soak.units import NOT_AVAILABLE, si

SCHEMA_VERSION = 1
STATUS_COLOURS = {"fail": "#cf222e", "warn": "#bf8700", "pass": "#1a7f37", "missing": "#8c959f"}


def _rel(path: Path | None, folder: Path) -> str | None:
    return None if path is None else os.path.relpath(path, folder)


def _device_ref(device: Device) -> dict[str, Any]:
    return {
        "node": device.node,
        "index": device.index,
        "uuid": device.uuid,
        "serial": device.serial,
    }


def _outlier(o: Outlier) -> dict[str, Any]:
    return {
        **_device_ref(o.device),
        "sku": o.device.sku,
        "metric": o.metric,
        "part": o.part,
        "value": o.value,
        "median": o.median,
        "n": o.n,
        "deviation": o.deviation,
        "limit": o.limit,
        "status": o.status,
        "message": o.message,
    }


def _spread(s: Spread) -> dict[str, Any]:
    return {
        "sku": s.sku,
        "metric": s.metric,
        "part": s.part,
        "unit": s.unit,
        "n": s.n,
        "median": s.median,
        "sigma": s.sigma,
        "p10": s.p10,
        "p90": s.p90,
        "min": s.low,
        "max": s.high,
        "limit": s.limit,
    }


def _nodes_json(
    result: FleetResult, out_dir: Path, where: Mapping[str, tuple[str, str]]
) -> list[dict[str, Any]]:
    """fleet.json's ``nodes``: every node ranked, with its worst device and rack place."""
    nodes = []
    for r in result.ranked:
        rack, slot = where.get(r.node.name, (None, None))
        nodes.append(
            {
                "rank": r.rank,
                "node": r.node.name,
                "verdict": r.node.verdict,
                "status": r.status,
                "devices": len(r.node.devices),
                "worst": None
                if r.worst is None
                else {**_device_ref(r.worst), "part": r.worst_part, "slowness": r.worst_deviation},
                "outliers": len(r.outliers),
                "report": _rel(r.node.report, out_dir),
                "summary": _rel(r.node.summary, out_dir),
                "started_utc": r.node.started_utc,
                "workload": r.node.workload,
                "rack": rack,
                "slot": slot,
            }
        )
    return nodes


def _devices_json(result: FleetResult) -> list[dict[str, Any]]:
    """fleet.json's ``devices``: every device of every node, with its slowness."""
    devices = []
    for node in result.collection.nodes:
        for position, d in enumerate(node.devices):
            devices.append(
                {
                    **_device_ref(d),
                    "sku": d.sku,
                    "verdict": d.verdict,
                    "diagnosis": d.diagnosis,
                    "work": dict(d.work),
                    "retention": dict(d.retention),
                    "steady": dict(d.sensors),
                    "slowness": dict(result.slowness[(node.name, position)]),
                    "runs": d.runs,
                    "headroom_margin_c": d.headroom_margin_c,
                    "throttle_inlet_c": d.throttle_inlet_c,
                }
            )
    return devices


def build_fleet_json(
    result: FleetResult,
    out_dir: Path,
    where: Mapping[str, tuple[str, str]],
    groups: Sequence[Group] = (),
) -> dict[str, Any]:
    c = result.collection
    nodes = _nodes_json(result, out_dir, where)
    devices = _devices_json(result)
    data = {
        "schema_version": SCHEMA_VERSION,
        "soak_version": __version__,
        "generated_utc": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "source": {"kind": c.source, "path": str(c.path), "skipped_rows": c.skipped_rows},
        "verdict": result.verdict,
        "settings": {
            "k_mad": result.settings.k_mad,
            "min_deficit": result.settings.min_deficit,
            "min_temp_excess_c": result.settings.min_temp_excess_c,
        },
        "parts": {
            p.name: {"unit": p.unit, "higher_is_better": p.higher_is_better}
            for p in c.parts.values()
        },
        "counts": {
            "nodes": len(c.nodes),
            "devices": len(devices),
            "expected": (None if c.expected is None else len(dict.fromkeys(c.expected))),
            "missing": len(result.missing),
            "unreadable": len(c.unreadable),
            "outliers": len(result.outliers),
        },
        "distributions": [_spread(s) for s in result.spreads],
        "outliers": [_outlier(o) for o in result.outliers],
        "nodes": nodes,
        "missing": list(result.missing),
        "unreadable": [{"path": p, "error": e} for p, e in c.unreadable],
        "superseded": [_rel(p, out_dir) for p in c.superseded],
        "devices": devices,
        "ddp_groups": [group_json(g) for g in groups],
        "headroom": [
            {
                **_device_ref(d),
                "margin_c": d.headroom_margin_c,
                "throttle_inlet_c": d.throttle_inlet_c,
                "design_inlet_c": d.design_inlet_c,
            }
            for d in headroom_ranking(c)
        ],
    }
    return clean_json(data)


def headroom_ranking(c: Collection) -> list[Device]:
    """Devices whose headroom was checked, the least margin at the design inlet first."""
    checked = [d for n in c.nodes for d in n.devices if d.headroom_margin_c is not None]
    return sorted(checked, key=lambda d: (d.headroom_margin_c, d.node, d.index or 0))


def _node_margin(node: Node) -> float | None:
    """The node's least headroom margin; None where no device of it was checked."""
    margins = [d.headroom_margin_c for d in node.devices if d.headroom_margin_c is not None]
    return min(margins) if margins else None


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(path)


# --- fleet.html ---------------------------------------------------------------------------


PLAIN_FORMATS = {"": ".4g", "%": ".1f", "°C": ".1f", "W": ".0f", "MHz": ".0f"}


def _value(value: float | None, unit: str) -> str:
    if value is None:
        return NOT_AVAILABLE
    if unit in PLAIN_FORMATS:
        return f"{value:{PLAIN_FORMATS[unit]}} {unit}".strip()
    return si(value, unit)


def strip_plot(
    spread: Spread, flagged: set[tuple[int, str, str | None]], width: int = 900, height: int = 120
) -> Markup:
    """One SKU's devices on one metric: a dot per device (its node and index in the tooltip),
    the median and the outlier limit as lines; flagged devices drawn large in red."""
    lo, hi = spread.low, spread.high
    for extra in (spread.limit, spread.median):
        if extra is not None:
            lo, hi = min(lo, extra), max(hi, extra)
    pad = (hi - lo) * 0.05 or abs(hi) * 0.01 or 1.0
    lo, hi = lo - pad, hi + pad

    def x(v: float) -> float:
        return 10 + (v - lo) / (hi - lo) * (width - 20)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" class="strip">',
        f'<line x1="10" y1="{height - 18}" x2="{width - 10}" y2="{height - 18}" stroke="#d0d7de"/>',
    ]
    for label, v, colour in (
        ("median", spread.median, "#24292f"),
        ("limit", spread.limit, "#cf222e"),
    ):
        if v is None:
            continue
        right = x(v) > width * 0.7  # the label left of its line near the right edge
        tx, ty = (x(v) - 3 if right else x(v) + 3), (12 if label == "median" else 24)
        parts.append(
            f'<line x1="{x(v):.1f}" y1="4" x2="{x(v):.1f}" y2="{height - 18}" '
            f'stroke="{colour}" stroke-dasharray="4 3"/>'
            f'<text x="{tx:.1f}" y="{ty}" '
            f'font-size="10" fill="{colour}" text-anchor="{"end" if right else "start"}">'
            f"{label} {escape(_value(v, spread.unit))}</text>"
        )
    for k, (device, v) in enumerate(spread.values):
        big = (id(device), spread.metric, spread.part) in flagged
        y = 18 + ((k * 2654435761) % 997) / 997 * (height - 42)  # deterministic jitter
        title = escape(f"{device_label(device)}: {_value(v, spread.unit)}")
        parts.append(
            f'<circle cx="{x(v):.1f}" cy="{y:.1f}" r="{4 if big else 2}" '
            f'fill="{"#cf222e" if big else "#0969da"}" fill-opacity="0.7">'
            f"<title>{title}</title></circle>"
        )
    for v in (lo + pad, hi - pad):
        parts.append(
            f'<text x="{x(v):.1f}" y="{height - 4}" font-size="10" '
            f'text-anchor="middle" fill="#57606a">{escape(_value(v, spread.unit))}'
            "</text>"
        )
    parts.append("</svg>")
    return Markup("".join(parts))


def heat_map(result: FleetResult, where: Mapping[str, tuple[str, str]]) -> dict[str, Any] | None:
    """Racks as columns, slots as rows; each cell the node there and its fleet status."""
    if not where:
        return None
    status = {r.node.name: r for r in result.ranked}
    cells: dict[tuple[str, str], dict[str, Any]] = {}
    for host, (rack, slot) in where.items():
        ranked = status.get(host)
        if ranked is None and host not in result.missing:
            continue  # a layout line for a node not in this delivery
        state = "missing" if ranked is None else ranked.status
        slow = None if ranked is None else ranked.worst_deviation
        margin = None if ranked is None else _node_margin(ranked.node)
        cells[(rack, slot)] = {
            "host": host,
            "status": state,
            "colour": STATUS_COLOURS[state],
            "note": "missing"
            if ranked is None
            else ("" if slow is None else f"{-100 * slow:+.1f} %"),
            "headroom": "" if margin is None else f"{margin:.0f} °C headroom",
        }
    racks = sorted({r for r, _ in cells}, key=_natural)
    slots = sorted({s for _, s in cells}, key=_natural, reverse=True)  # top of the rack first
    return {"racks": racks, "rows": [(s, [cells.get((r, s)) for r in racks]) for s in slots]}


def _natural(text: str) -> tuple[Any, ...]:
    import re

    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text))


def _group_view(group: Group) -> dict[str, Any]:
    """A multi-node ddp group's lines in fleet.html."""
    g = group_json(group)
    loss = g["step_rate_loss"]
    size = si(g["allreduce_b"], "B") if g["allreduce_b"] else NOT_AVAILABLE
    return {
        "name": g["name"] or g["master"],
        "status": g["status"],
        "hosts": ", ".join(g["hosts"]),
        "world": g["world"],
        "server_node": g["server_node"],
        "rate": f"cold {si(g['cold_step_rate'], 'samples/s')}, steady "
        f"{si(g['steady_step_rate'], 'samples/s')}"
        + ("" if loss is None else f" ({loss * 100:.1f} % loss)"),
        "busbw": f"a {size} buffer over {g['world']} ranks: cold {si(g['busbw_cold_Bps'], 'B/s')}, "
        f"steady {si(g['busbw_steady_Bps'], 'B/s')}",
        "pace": g["pace"],
        "failed": g["failed"],
        "ranks": [
            {
                "rank": r["rank"],
                "where": f"{r['node']} device {r['device']}",
                "share": NOT_AVAILABLE if r["share"] is None else f"{r['share'] * 100:.0f} %",
                "compute": NOT_AVAILABLE
                if r["compute_excess"] is None
                else f"{r['compute_excess'] * 100:+.1f} %",
                "outcome": r["outcome"] or ("no summary" if not r["reported"] else NOT_AVAILABLE),
            }
            for r in g["ranks"]
        ],
    }


def write_fleet_html(
    path: Path,
    result: FleetResult,
    data: Mapping[str, Any],
    where: Mapping[str, tuple[str, str]],
    groups: Sequence[Group] = (),
) -> None:
    flagged = {(id(o.device), o.metric, o.part) for o in result.outliers}
    plots = []
    for spread in result.spreads:
        metric = METRIC[spread.metric]
        label = metric.label if spread.part is None else f"{metric.label}: {spread.part}"
        plots.append(
            {
                "sku": spread.sku,
                "label": label,
                "n": spread.n,
                "median": _value(spread.median, spread.unit),
                "p10": _value(spread.p10, spread.unit),
                "p90": _value(spread.p90, spread.unit),
                "limit": None if spread.limit is None else _value(spread.limit, spread.unit),
                "svg": strip_plot(spread, flagged),
            }
        )
    nodes = []
    for r in result.ranked:
        nodes.append(
            {
                "rank": r.rank,
                "name": r.node.name,
                "verdict": r.node.verdict or "—",
                "status": r.status,
                "devices": len(r.node.devices),
                "worst": "—" if r.worst is None else device_label(r.worst),
                "slowness": "—"
                if r.worst_deviation is None
                else f"{-100 * r.worst_deviation:+.1f} %",
                "part": r.worst_part or "",
                "report": _rel(r.node.report, path.parent),
                "outliers": [o.message for o in r.outliers],
            }
        )
    values = {
        "soak_version": __version__,
        "data": data,
        "verdict": result.verdict,
        "outliers": [
            {"who": device_label(o.device), "status": o.status, "message": o.message}
            for o in result.outliers
        ],
        "nodes": nodes,
        "plots": plots,
        "heat": heat_map(result, where),
        "colours": STATUS_COLOURS,
        "metrics": METRICS,
        "groups": [_group_view(g) for g in groups],
        "headroom": [
            {
                "who": device_label(d),
                "margin": f"{d.headroom_margin_c:.1f} °C",
                "design": "—" if d.design_inlet_c is None else f"{d.design_inlet_c:.0f} °C",
                "throttle": "beyond the range projected"
                if d.throttle_inlet_c is None
                else f"{d.throttle_inlet_c:.1f} °C",
            }
            for d in headroom_ranking(result.collection)
        ],
    }
    write_html(path, render("fleet.html.j2", values))


def make_report(
    collection: Collection,
    out_dir: Path,
    settings: Settings,
    layout: Mapping[str, tuple[str, str]] | None = None,
) -> tuple[FleetResult, Path]:
    """Analyse, then write ``fleet.json`` and ``fleet.html`` into ``out_dir``."""
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(f"{out_dir}: not a folder")
    result = analyze_fleet(collection, settings)
    where = placement(result, layout)
    out_dir.mkdir(parents=True, exist_ok=True)
    groups = find_groups(collection)
    data = build_fleet_json(result, out_dir, where, groups)
    write_json(out_dir / "fleet.json", data)
    html = out_dir / "fleet.html"
    write_fleet_html(html, result, data, where, groups)
    return result, html
