"""What a fleet report reads: every run's ``summary.json`` under a folder, or a table of
per-device results from another tool, turned into the same flat device records.

A run folder is ``OUT/<host>/<UTC stamp>/``; where one host has several runs the latest
(by ``run.started_utc``) stands for it and the others are listed as superseded. A summary
that cannot be read is listed with its one-line reason, never silently dropped.
"""

from __future__ import annotations

import csv
import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from soak.errors import ConfigError
from soak.fields import FLEET_FIGURES
from soak.report.summary import load_summary

NODE_LIST_FILE = "fleet-nodes.txt"  # written by the sbatch script: one expected host a line
RUN_FIGURES = FLEET_FIGURES  # steady sensor figures a device carries (the registry's)


@dataclass(frozen=True)
class Part:
    """One measure of work compared across the fleet: a workload part's steady rate
    (higher is better) or a foreign table's time per work (lower is better)."""

    name: str
    unit: str
    higher_is_better: bool = True


@dataclass(frozen=True)
class Device:
    """One device of one run, flattened: what the fleet compares."""

    node: str
    index: int | None
    uuid: str | None
    serial: str | None
    sku: str
    verdict: str | None
    diagnosis: str | None
    work: Mapping[str, float]  # part -> steady figure (rate, or time per work)
    retention: Mapping[str, float]  # part -> steady / cold rate
    sensors: Mapping[str, float | None]  # RUN_FIGURES -> steady median
    runs: int = 1  # table mode: how many rows (runs) the figures are the median of
    # thermal headroom (summary.json "headroom"): margin to the first slowdown threshold at
    # the run's design inlet, °C, and the inlet where SW thermal slowdown begins; None: not
    # checked (no inlet read, an older summary, a table)
    headroom_margin_c: float | None = None
    throttle_inlet_c: float | None = None
    design_inlet_c: float | None = None


@dataclass(frozen=True)
class Node:
    """One host's run (the latest, where it has several)."""

    name: str
    verdict: str | None
    summary: Path | None
    report: Path | None
    started_utc: str | None
    workload: str | None
    tags: Mapping[str, str]
    devices: tuple[Device, ...]
    summary_data: Mapping[str, Any] | None = None  # kept for the history; not in fleet.json


@dataclass
class Collection:
    """Everything read for one fleet report."""

    source: str  # "summaries" or "table"
    path: Path
    parts: dict[str, Part]
    nodes: list[Node]
    expected: list[str] | None = None
    unreadable: list[tuple[str, str]] = field(default_factory=list)  # (path, why)
    superseded: list[Path] = field(default_factory=list)
    skipped_rows: int = 0


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def device_from_summary(
    node: str, item: Mapping[str, Any], headroom: Mapping[str, Any] | None = None
) -> Device:
    steady = item.get("steady") or {}
    ratio = item.get("ratio") or {}
    inventory = item.get("inventory") or {}
    work = {
        part: v
        for part, rate in (steady.get("throughput") or {}).items()
        if (v := _number(rate)) is not None and v > 0
    }
    retention = {
        part: v
        for part, r in (ratio.get("throughput") or {}).items()
        if (v := _number(r)) is not None
    }
    return Device(
        node=node,
        index=item.get("index"),
        uuid=item.get("uuid"),
        serial=inventory.get("serial"),
        sku=str(item.get("name") or "unknown"),
        verdict=item.get("verdict"),
        diagnosis=item.get("diagnosis"),
        work=work,
        retention=retention,
        sensors={key: _number(steady.get(key)) for key in RUN_FIGURES},
        headroom_margin_c=_number((headroom or {}).get("margin_c")),
        throttle_inlet_c=_number((headroom or {}).get("throttle_inlet_c")),
        design_inlet_c=_number((headroom or {}).get("design_inlet_c")),
    )


def _headroom_by_device(data: Mapping[str, Any]) -> dict[Any, dict[str, Any]]:
    """summary.json's headroom per device index, with the run's design inlet."""
    block = data.get("headroom")
    if not isinstance(block, Mapping) or not block.get("checked"):
        return {}
    design = block.get("design_inlet_c")
    return {
        d.get("device"): {**d, "design_inlet_c": design}
        for d in block.get("devices") or ()
        if isinstance(d, Mapping)
    }


def node_from_summary(path: Path, data: Mapping[str, Any]) -> Node:
    run = data.get("run") or {}
    name = str(run.get("host") or path.parent.parent.name)
    report = path.parent / "report.html"
    headroom = _headroom_by_device(data)
    return Node(
        name=name,
        verdict=data.get("verdict"),
        summary=path,
        report=report if report.is_file() else None,
        started_utc=run.get("started_utc"),
        workload=run.get("workload"),
        tags={str(k): str(v) for k, v in (run.get("tags") or {}).items()},
        devices=tuple(
            device_from_summary(name, d, headroom.get(d.get("index")))
            for d in data.get("devices") or ()
        ),
        summary_data=data,
    )


def collect_summaries(folder: Path, expect: Sequence[str] | None = None) -> Collection:
    """Read ``folder/<host>/<run>/summary.json`` for every run. ``expect`` (or the node list
    the sbatch script wrote) names the hosts that should be there."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ConfigError(f"{folder}: not a folder")
    by_host: dict[str, list[Node]] = defaultdict(list)
    unreadable: list[tuple[str, str]] = []
    for path in sorted(folder.glob("*/*/summary.json")):
        try:
            node = node_from_summary(path, load_summary(path))
        except ConfigError as exc:
            unreadable.append((str(path.relative_to(folder)), str(exc)))
            continue
        except (AttributeError, TypeError, ValueError) as exc:  # a summary of the wrong shape
            unreadable.append((str(path.relative_to(folder)), f"{path}: malformed ({exc})"))
            continue
        by_host[node.name].append(node)
    nodes, superseded = [], []
    for runs in by_host.values():
        runs.sort(key=lambda n: (n.started_utc or "", str(n.summary)))
        nodes.append(runs[-1])
        superseded.extend(n.summary for n in runs[:-1] if n.summary is not None)
    parts: dict[str, Part] = {}
    for node in nodes:
        units = {}
        for d in node.summary_data.get("devices") or ():  # type: ignore[union-attr]
            units.update(d.get("throughput_units") or {})
        for device in node.devices:
            for part in device.work:
                parts.setdefault(part, Part(part, str(units.get(part, ""))))
    if expect is None and (folder / NODE_LIST_FILE).is_file():
        expect = read_node_list(folder / NODE_LIST_FILE)
    nodes.sort(key=lambda n: n.name)
    return Collection(
        source="summaries",
        path=folder,
        parts=parts,
        nodes=nodes,
        expected=list(expect) if expect is not None else None,
        unreadable=unreadable,
        superseded=superseded,
    )


def all_runs(folder: Path) -> Iterable[tuple[Path, dict[str, Any]]]:
    """Every readable summary under ``folder`` (superseded runs too), for the history."""
    for path in sorted(Path(folder).glob("*/*/summary.json")):
        try:
            yield path, load_summary(path)
        except ConfigError:
            continue  # listed as unreadable by collect_summaries


def read_node_list(path: Path) -> list[str]:
    """Host names, one a line (``scontrol show hostnames`` output); blanks and # ignored."""
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the node list ({exc})") from exc
    return [line.strip() for line in text.splitlines() if line.strip() and line[0] != "#"]


# --- foreign tables ---------------------------------------------------------------------

TABLE_FIELDS = {
    "node": "host name of the device's server",
    "sku": "device model",
    "serial": "device serial number",
    "throughput": "work per second (higher is better)",
    "time": "time per unit of work (lower is better)",
    "temp_c": "temperature (°C)",
    "power_w": "power (W)",
    "sm_clock_mhz": "SM clock (MHz)",
}


def parse_map(pairs: Sequence[str]) -> dict[str, str]:
    """``--map FIELD=COLUMN`` pairs checked against TABLE_FIELDS."""
    out: dict[str, str] = {}
    for text in pairs:
        key, sep, column = text.partition("=")
        if not sep or not column:
            raise ConfigError(f"--map: {text!r} is not FIELD=COLUMN")
        if key not in TABLE_FIELDS:
            raise ConfigError(f"--map {key}: unknown field (known: {', '.join(TABLE_FIELDS)})")
        out[key] = column
    if "throughput" in out and "time" in out:
        raise ConfigError("--map: give throughput or time, not both")
    return out


def collect_table(path: Path, id_col: str, mapping: Mapping[str, str]) -> Collection:
    """A CSV of per-device results (one row per device-run) as a fleet: each device's figures
        are the median over its rows. Only the columns ``mapping`` names are read: a column called
    ``node`` may hold anything (an anonymised -1), so nothing is guessed from names."""
    path = Path(path)
    try:
        with path.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            header = list(reader.fieldnames or ())
            rows = list(reader)
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise ConfigError(f"--table {path}: cannot read ({exc})") from exc
    columns = dict(mapping)
    for key, column in mapping.items():
        if column not in header:
            raise ConfigError(f"--map {key}={column}: no column {column!r} in {path}")
    if id_col not in header:
        raise ConfigError(f"--id-col {id_col}: no column {id_col!r} in {path}")
    measure = "time" if "time" in columns else "throughput"
    if measure not in columns:
        raise ConfigError(f"--table {path}: map a throughput or a time column, e.g. --map time=COL")
    part = Part(columns[measure], "", higher_is_better=measure == "throughput")
    grouped: dict[str, list[dict[str, str]]] = defaultdict(list)
    skipped = 0
    for row in rows:
        key = (row.get(id_col) or "").strip()
        if not key or _float(row.get(columns[measure])) is None:
            skipped += 1
            continue
        grouped[key].append(row)
    if not grouped:
        raise ConfigError(f"--table {path}: no row has both {id_col!r} and a positive {part.name}")
    nodes: dict[str, list[Device]] = defaultdict(list)
    for key, group in sorted(grouped.items()):
        node = _text(group, columns.get("node")) or key
        is_uuid = key.upper().startswith("GPU-")
        nodes[node].append(
            Device(
                node=node,
                index=None,
                uuid=key if is_uuid else None,
                serial=_text(group, columns.get("serial")) or (None if is_uuid else key),
                sku=_text(group, columns.get("sku")) or "unknown",
                verdict=None,
                diagnosis=None,
                work={part.name: _median(group, columns[measure])},  # type: ignore[dict-item]
                retention={},
                sensors={f: _median(group, columns.get(f)) for f in RUN_FIGURES},
                runs=len(group),
            )
        )
    return Collection(
        source="table",
        path=path,
        parts={part.name: part},
        nodes=[Node(n, None, None, None, None, None, {}, tuple(devs)) for n, devs in nodes.items()],
        skipped_rows=skipped,
    )


def _float(text: str | None) -> float | None:
    try:
        value = float(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) and value > 0 else None


def _median(rows: Sequence[Mapping[str, str]], column: str | None) -> float | None:
    if column is None:
        return None
    values = [v for row in rows if (v := _float(row.get(column))) is not None]
    return statistics.median(values) if values else None


def _text(rows: Sequence[Mapping[str, str]], column: str | None) -> str | None:
    if column is None:
        return None
    values = [v for row in rows if (v := (row.get(column) or "").strip())]
    return values[0] if values else None
