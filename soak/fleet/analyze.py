"""The fleet's judgement: per-SKU distributions, outliers by median/MAD across every device
of one SKU and part (not within one server), nodes ranked worst first, missing nodes.

A device is a fleet outlier when it is further from its SKU's median than
``max(k_mad × 1.4826 × MAD, floor)``: 1.4826 × MAD estimates the standard deviation of
normal spread without letting the outliers widen it, and the floor keeps a very uniform
fleet from flagging differences nobody would reject a GPU for. Throughput is judged on the
slow side only (relative to the median), steady temperature on the hot side (in °C).
"""

from __future__ import annotations

import csv
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from soak.errors import ConfigError
from soak.fleet.collect import RUN_FIGURES, Collection, Device, Node, Part
from soak.units import si

MAD_TO_SIGMA = 1.4826  # MAD × this estimates σ of a normal distribution
MIN_COMPARED = 5  # fewer devices of a SKU than this are shown but not judged


@dataclass(frozen=True)
class Settings:
    k_mad: float = 3.0  # how many robust σ from the median make an outlier
    min_deficit: float = 0.03  # throughput: never flag less than 3 % slower than the median
    min_temp_excess_c: float = 5.0  # temperature: never flag less than 5 °C above the median


@dataclass(frozen=True)
class Metric:
    """One figure the fleet shows per SKU; ``judge`` says which side makes an outlier."""

    key: str
    label: str
    unit: str
    judge: str | None = None  # "slow" (work, relative) or "hot" (absolute °C)


# The registry: every per-SKU distribution, outlier and fleet.json key derives from it.
METRICS = (
    Metric("work", "steady throughput", "", judge="slow"),
    Metric("loss", "cold→steady loss", "%"),
    Metric("temp_c", "steady temperature", "°C", judge="hot"),
    Metric("power_w", "steady power", "W"),
    Metric("sm_clock_mhz", "steady SM clock", "MHz"),
)
METRIC = {m.key: m for m in METRICS}


@dataclass(frozen=True)
class Spread:
    """The distribution of one metric (and part) over every device of one SKU."""

    sku: str
    metric: str
    part: str | None
    unit: str
    n: int
    median: float
    sigma: float  # 1.4826 × MAD
    p10: float
    p90: float
    low: float
    high: float
    limit: float | None  # the outlier limit as a value of the metric; None when not judged
    values: tuple[tuple[Device, float], ...]


@dataclass(frozen=True)
class Outlier:
    device: Device
    metric: str
    part: str | None
    value: float
    median: float
    n: int
    deviation: float  # slow: fraction slower than the median; hot: °C above it
    limit: float  # the same kind of number as deviation
    status: str  # "fail" (throughput) or "warn" (temperature)
    message: str


@dataclass(frozen=True)
class RankedNode:
    rank: int  # 1 = the worst node
    node: Node
    status: str  # "fail", "warn" or "pass": the node's verdict and its fleet outliers together
    worst: Device | None
    worst_part: str | None
    worst_deviation: float | None  # fraction slower than the fleet median of its SKU and part
    outliers: tuple[Outlier, ...]


@dataclass(frozen=True)
class FleetResult:
    collection: Collection
    settings: Settings
    verdict: str
    spreads: tuple[Spread, ...]
    outliers: tuple[Outlier, ...]
    ranked: tuple[RankedNode, ...]
    missing: tuple[str, ...]
    slowness: Mapping[tuple[str, int], Mapping[str, float]]  # (node, position) -> part -> dev.


def device_label(device: Device) -> str:
    who = device.uuid or device.serial or "?"
    where = device.node if device.index is None else f"{device.node} GPU {device.index}"
    return who if where == who else f"{who} ({where})"


def _slowness(value: float, median: float, part: Part) -> float:
    return value / median - 1 if not part.higher_is_better else 1 - value / median


def _fmt(value: float, unit: str) -> str:
    return si(value, unit) if unit else f"{value:.4g}"


def _figures(device: Device, metric: str, parts: Mapping[str, Part]) -> dict[str | None, float]:
    if metric == "work":
        return {p: v for p, v in device.work.items() if p in parts}
    if metric == "loss":
        return {p: (1 - r) * 100 for p, r in device.retention.items()}
    value = device.sensors.get(metric)
    return {} if value is None else {None: value}


def spreads(collection: Collection, settings: Settings) -> list[Spread]:
    groups: dict[tuple[str, str, str | None], list[tuple[Device, float]]] = defaultdict(list)
    for node in collection.nodes:
        for device in node.devices:
            for metric in METRICS:
                for part, value in _figures(device, metric.key, collection.parts).items():
                    groups[(device.sku, metric.key, part)].append((device, value))
    out = []
    for (sku, key, part), pairs in sorted(groups.items(), key=lambda kv: _group_order(kv[0])):
        values = np.fromiter((v for _, v in pairs), float, len(pairs))
        median = float(np.median(values))
        sigma = MAD_TO_SIGMA * float(np.median(np.abs(values - median)))
        metric = METRIC[key]
        unit = collection.parts[part].unit if key == "work" and part else metric.unit
        limit = None
        if metric.judge and len(pairs) >= MIN_COMPARED and median > 0:
            if metric.judge == "slow":
                rel = max(settings.k_mad * sigma / median, settings.min_deficit)
                better = collection.parts[part].higher_is_better  # type: ignore[index]
                limit = median * (1 - rel) if better else median * (1 + rel)
            else:
                limit = median + max(settings.k_mad * sigma, settings.min_temp_excess_c)
        p10, p90 = np.percentile(values, [10, 90])
        out.append(
            Spread(
                sku,
                key,
                part,
                unit,
                len(pairs),
                median,
                sigma,
                float(p10),
                float(p90),
                float(values.min()),
                float(values.max()),
                limit,
                tuple(pairs),
            )
        )
    return out


def _group_order(key: tuple[str, str, str | None]) -> tuple[str, int, str]:
    sku, metric, part = key
    return sku, [m.key for m in METRICS].index(metric), part or ""


def find_outliers(collection: Collection, table: Sequence[Spread]) -> list[Outlier]:
    out = []
    for spread in table:
        if spread.limit is None:
            continue
        metric = METRIC[spread.metric]
        for device, value in spread.values:
            if metric.judge == "slow":
                part = collection.parts[spread.part]  # type: ignore[index]
                deviation = _slowness(value, spread.median, part)
                limit = abs(spread.limit / spread.median - 1)
                if deviation <= limit:
                    continue
                word = "slower than" if not part.higher_is_better else "below"
                name = spread.part if collection.source == "table" else f"steady {spread.part}"
                message = (
                    f"{name} {_fmt(value, spread.unit)} is {100 * deviation:.1f} % {word} the "
                    f"fleet median {_fmt(spread.median, spread.unit)} of {_of(spread)}; "
                    f"limit {100 * limit:.1f} %{_sensors(device)}"
                )
                status = "fail"
            else:
                deviation = value - spread.median
                limit = spread.limit - spread.median
                if deviation <= limit:
                    continue
                message = (
                    f"steady temperature {value:.0f} °C is {deviation:.1f} °C above the fleet "
                    f"median {spread.median:.1f} °C of {_of(spread)}; limit {limit:.1f} °C"
                )
                status = "warn"
            out.append(
                Outlier(
                    device,
                    spread.metric,
                    spread.part,
                    value,
                    spread.median,
                    spread.n,
                    deviation,
                    limit,
                    status,
                    message,
                )
            )
    out.sort(key=lambda o: (o.status != "fail", -o.deviation if o.metric == "work" else 0))
    return out


def _of(spread: Spread) -> str:
    return f"{spread.n} devices" if spread.sku == "unknown" else f"{spread.n} {spread.sku} devices"


def _sensors(device: Device) -> str:
    """The device's own steady figures, the evidence beside a slow result."""
    shown = [
        f"{value:.0f} {METRIC[key].unit}"
        for key in RUN_FIGURES
        if (value := device.sensors.get(key)) is not None
    ]
    return f" (at {', '.join(shown)})" if shown else ""


def _node_class(node: Node, outliers: Sequence[Outlier]) -> tuple[int, str]:
    """How bad a node is (larger is worse) and its fleet status: a failed verdict, then a
    fleet throughput outlier, then an incomplete run, then a temperature outlier."""
    if node.verdict == "FAIL":
        return 4, "fail"
    if any(o.status == "fail" for o in outliers):
        return 3, "fail"
    if node.verdict == "INCOMPLETE":
        return 2, "warn"
    return (1, "warn") if outliers else (0, "pass")


def _worst(
    node: Node, slowness: Sequence[Mapping[str, float]], outliers: Sequence[Outlier]
) -> tuple[Device, str | None, float | None] | None:
    """The device to name for a node: its slowest fleet throughput outlier; else its slowest
    failing device; else its slowest device (part and slowness against the fleet median)."""
    flagged = [o for o in outliers if o.status == "fail"]
    if flagged:
        o = max(flagged, key=lambda o: o.deviation)
        return o.device, o.part, o.deviation
    candidates = [
        (device.verdict == "FAIL", s, part, device)
        for device, mine in zip(node.devices, slowness, strict=True)
        for part, s in (mine.items() or [(None, -math.inf)])
    ]
    if not candidates:
        return None
    _, s, part, device = max(candidates, key=lambda c: (c[0], c[1]))
    return device, part, s if math.isfinite(s) else None


def rank_nodes(
    collection: Collection, table: Sequence[Spread], outliers: Sequence[Outlier]
) -> tuple[list[RankedNode], dict[tuple[str, int], dict[str, float]]]:
    """Nodes worst first (``_node_class``); within a class, by the named device's distance
    below its SKU's fleet median. Also returns every device's slowness per part."""
    medians = {(s.sku, s.part): s.median for s in table if s.metric == "work"}
    by_node: dict[str, list[Outlier]] = defaultdict(list)
    for o in outliers:
        by_node[o.device.node].append(o)
    slowness: dict[tuple[str, int], dict[str, float]] = {}
    scored = []
    for node in collection.nodes:
        mine = []
        for position, device in enumerate(node.devices):
            slowness[(node.name, position)] = {
                part: _slowness(v, medians[(device.sku, part)], collection.parts[part])
                for part, v in device.work.items()
                if medians.get((device.sku, part))
            }
            mine.append(slowness[(node.name, position)])
        flagged = tuple(by_node.get(node.name, ()))
        cls, status = _node_class(node, flagged)
        worst = _worst(node, mine, flagged)
        severity = worst[2] if worst and worst[2] is not None else -math.inf
        scored.append((cls, severity, node, status, worst, flagged))
    scored.sort(key=lambda s: (-s[0], -s[1], s[2].name))
    ranked = [
        RankedNode(
            rank,
            node,
            status,
            worst[0] if worst else None,
            worst[1] if worst else None,
            worst[2] if worst else None,
            flagged,
        )
        for rank, (_, _, node, status, worst, flagged) in enumerate(scored, 1)
    ]
    return ranked, slowness


def analyze_fleet(collection: Collection, settings: Settings | None = None) -> FleetResult:
    settings = settings or Settings()
    table = spreads(collection, settings)
    outliers = find_outliers(collection, table)
    ranked, slowness = rank_nodes(collection, table, outliers)
    seen = {n.name for n in collection.nodes}
    missing = tuple(h for h in dict.fromkeys(collection.expected or ()) if h not in seen)
    verdicts = {n.verdict for n in collection.nodes}
    if "FAIL" in verdicts or any(o.status == "fail" for o in outliers):
        verdict = "FAIL"
    elif "INCOMPLETE" in verdicts or missing or collection.unreadable or not collection.nodes:
        verdict = "INCOMPLETE"
    else:
        verdict = "PASS"
    return FleetResult(
        collection,
        settings,
        verdict,
        tuple(table),
        tuple(outliers),
        tuple(ranked),
        missing,
        slowness,
    )


def read_layout(path: Path) -> dict[str, tuple[str, str]]:
    """``--layout FILE``: a CSV with columns host, rack, slot (a header line first)."""
    try:
        with Path(path).open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            missing = {"host", "rack", "slot"} - set(reader.fieldnames or ())
            if missing:
                raise ConfigError(f"--layout {path}: no column {', '.join(sorted(missing))}")
            return {
                row["host"].strip(): (row["rack"].strip(), row["slot"].strip())
                for row in reader
                if (row.get("host") or "").strip()
            }
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise ConfigError(f"--layout {path}: cannot read ({exc})") from exc


def placement(
    result: FleetResult, layout: Mapping[str, tuple[str, str]] | None
) -> dict[str, tuple[str, str]]:
    """Where each node sits (rack, slot): the layout file, else its run's tags."""
    if layout is not None:
        return dict(layout)
    return {
        n.name: (n.tags["rack"], n.tags["slot"])
        for n in result.collection.nodes
        if "rack" in n.tags and "slot" in n.tags
    }
