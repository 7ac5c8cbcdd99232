"""``soak compare RUN_A RUN_B``: what changed between two runs of the same server (before and
after an airflow fix, a firmware update, a re-seated heat sink), device by device, and
whether each change is larger than the noise of the measurement.

Both runs are read from their ``summary.json`` (a run folder, or the file itself). A change
is a steady-state figure of run B minus run A. Its noise is estimated from the spread inside
each run's steady window (batch means, ``soak/analysis/noise.py``: the standard error of the
steady value from 10 consecutive blocks of the window): the two standard errors are
combined as √(σ_A² + σ_B²), and a change counts as larger than the noise when it exceeds
``K_SIGMA`` times that, and at least one step of the sensor (two medians of a sensor that
reads whole °C cannot differ by less than 1 °C). This is the noise of the measurement within
a run; what differs between two days (room temperature, other load in the rack) is not in
it, and is the point of comparing.

A change beyond the noise is flagged (better, worse, changed) only when it is also at least
a practical threshold, ``--min-change`` (1 % of run A's figure by default): a long steady
window measures 0.1 % shifts precisely, and nobody acts on them.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from soak import __version__
from soak.errors import ConfigError
from soak.fields import BY_NAME, NOISE_METRICS
from soak.report import figures
from soak.report.html import render, write_html
from soak.report.summary import SUMMARY_NAME, load_summary
from soak.units import NOT_AVAILABLE, num, plural, si

K_SIGMA = 3.0
MIN_CHANGE = 0.01  # default practical threshold: a change smaller than 1 % is not flagged
WITHIN_NOISE = "within noise"
COMPARE_NAME = "compare.html"

# metric key -> (label, unit, which way is better: +1 higher, -1 lower, 0 neither)
METRICS: dict[str, tuple[str, str, int]] = {
    name: (BY_NAME[name].label, BY_NAME[name].unit, BY_NAME[name].better) for name in NOISE_METRICS
}


@dataclass(frozen=True, slots=True)
class Run:
    path: Path  # the summary.json read
    summary: dict[str, Any]

    @property
    def label(self) -> str:
        run = self.summary.get("run") or {}
        return f"{run.get('host') or 'unknown host'} {run.get('started_utc') or ''}".strip()


@dataclass(frozen=True, slots=True)
class Change:
    """One steady figure of one device in both runs."""

    device: int
    key: str  # "sm_clock_mhz", ..., or "throughput:gemm"
    label: str
    unit: str
    a: float | None
    b: float | None
    se: float | None  # combined standard error √(σ_A² + σ_B²)
    step: float | None  # the coarser sensor step of the two runs
    direction: int  # +1 higher is better, -1 lower is better, 0 neither
    min_change: float = MIN_CHANGE  # practical threshold, a fraction of run A's figure

    @property
    def delta(self) -> float | None:
        return self.b - self.a if self.a is not None and self.b is not None else None

    @property
    def rel(self) -> float | None:
        return self.delta / self.a if self.delta is not None and self.a else None

    @property
    def threshold(self) -> float | None:
        """How large a change must be to be more than noise; None: unknown."""
        if self.se is None:
            return None
        return max(K_SIGMA * self.se, self.step or 0.0)

    @property
    def significant(self) -> bool | None:
        if self.delta is None or self.threshold is None:
            return None
        return abs(self.delta) > self.threshold

    @property
    def practical(self) -> bool | None:
        """Whether the change reaches the practical threshold; a change from 0 always does."""
        if self.delta is None:
            return None
        if not self.a:
            return self.delta != 0
        return abs(self.delta / self.a) >= self.min_change

    @property
    def verdict(self) -> str:
        """ "better", "worse", "changed" (neither is better) for a change beyond the noise and
        the practical threshold; else which of the two it is within: "within noise" or
        "under 1 %"; or "not available" (a value or its noise could not be measured)."""
        if self.significant is None:
            return NOT_AVAILABLE
        if not self.significant:
            return WITHIN_NOISE
        if not self.practical:
            return under_label(self.min_change)
        if self.direction == 0:
            return "changed"
        return "better" if self.delta * self.direction > 0 else "worse"  # type: ignore[operator]


def under_label(min_change: float) -> str:
    """The verdict of a change beyond the noise but below the practical threshold."""
    return f"under {100 * min_change:g} %"


@dataclass(frozen=True, slots=True)
class Comparison:
    a: Run
    b: Run
    matched_by: str  # "uuid" or "index"
    pairs: list[tuple[dict[str, Any], dict[str, Any]]]
    changes: list[Change]
    notes: list[str] = field(default_factory=list)
    min_change: float = MIN_CHANGE
    # how the runs differ where they were compared although unlike ("backend cpu in A, sim
    # in B"); "" for two runs of one kind of server
    unlike: str = ""
    kind: str = "GPU"  # what the devices are: "GPU", "CPU", "device" (runs of both)


def kind_of(run: Run) -> str:
    """What a run's devices are, from its backend: "CPU" on the CPU backend, else "GPU"."""
    backend = (run.summary.get("run") or {}).get("backend")
    return "CPU" if backend == "cpu" else "GPU"


def sku(run: Run) -> str:
    """The run's device model, the one most of its devices are (a server is one SKU; one
    device named apart, a renamed or replaced part, does not make it another), as named (a
    simulated one's "(simulated)" kept: a simulator is not the hardware it imitates)."""
    names = Counter(str(d.get("name") or NOT_AVAILABLE) for d in run.summary["devices"])
    return min(names, key=lambda n: (-names[n], n)) if names else NOT_AVAILABLE


def unlike(a: Run, b: Run) -> str:
    """How two runs differ in what they measured: their backends or their SKUs; "" where
    both are the same."""
    differ = []
    backend_a = (a.summary.get("run") or {}).get("backend")
    backend_b = (b.summary.get("run") or {}).get("backend")
    if backend_a != backend_b:
        differ.append(f"backend {backend_a} in A, {backend_b} in B")
    if sku(a) != sku(b):
        differ.append(f"devices {sku(a)} in A, {sku(b)} in B")
    return "; ".join(differ)


def load_run(path: str | Path) -> Run:
    """A run folder's summary.json, or a summary.json file; one-line ConfigError otherwise."""
    path = Path(path)
    if path.is_dir():
        file = path / SUMMARY_NAME
        if not file.is_file():
            hint = (
                f"; rebuild it with `soak report {path}`" if (path / "soak.sqlite").exists() else ""
            )
            raise ConfigError(f"{path}: no {SUMMARY_NAME} in this folder{hint}")
        path = file
    elif not path.exists():
        raise ConfigError(f"{path}: no such run folder or summary file")
    summary = load_summary(path)
    if not isinstance(summary.get("devices"), list):
        raise ConfigError(f"{path}: not a soak summary (no device list)")
    return Run(path, summary)


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _noise(device: dict[str, Any], kind: str, key: str) -> float | None:
    noise = device.get("steady_noise") or {}
    table = noise.get(kind) or {}
    if key.startswith("throughput:"):
        return _float((table.get("throughput") or {}).get(key.split(":", 1)[1]))
    return _float(table.get(key))


def _combine(x: float | None, y: float | None) -> float | None:
    return math.hypot(x, y) if x is not None and y is not None else None


def _coarser(x: float | None, y: float | None) -> float | None:
    known = [v for v in (x, y) if v is not None]
    return max(known) if known else None


def _pair(a: Run, b: Run, kind: str = "GPU") -> tuple[str, list[tuple[dict, dict]], list[str]]:
    """Match devices by UUID where every device of both runs has one, else by index."""
    da, db = a.summary["devices"], b.summary["devices"]
    notes = []
    uuids_a = [d.get("uuid") for d in da]
    uuids_b = [d.get("uuid") for d in db]
    if all(uuids_a) and all(uuids_b) and set(uuids_a) & set(uuids_b):
        by_uuid = {d["uuid"]: d for d in db}
        pairs = [(d, by_uuid[d["uuid"]]) for d in da if d["uuid"] in by_uuid]
        only_a = [str(d.get("index")) for d in da if d["uuid"] not in by_uuid]
        only_b = [str(d.get("index")) for d in db if d["uuid"] not in set(uuids_a)]
        if only_a:
            notes.append(f"devices only in run A (by UUID): {kind} {', '.join(only_a)}")
        if only_b:
            notes.append(f"devices only in run B (by UUID): {kind} {', '.join(only_b)}")
        moved = [
            f"{x.get('index')}→{y.get('index')}"
            for x, y in pairs
            if x.get("index") != y.get("index")
        ]
        if moved:
            notes.append(f"same GPUs at other indices in run B: {', '.join(moved)}")
        return "uuid", pairs, notes
    if any(uuids_a) and any(uuids_b):
        notes.append(
            "no device UUID is in both runs: these may be different GPUs; matched by index"
        )
    by_index = {d.get("index"): d for d in db}
    pairs = [(d, by_index[d.get("index")]) for d in da if d.get("index") in by_index]
    if len(pairs) != max(len(da), len(db)):
        notes.append(
            f"run A has {plural(len(da), 'device')}, run B {len(db)}: compared the common indices"
        )
    return "index", pairs, notes


def _run_notes(a: Run, b: Run) -> list[str]:
    notes = []
    ra, rb = a.summary.get("run") or {}, b.summary.get("run") or {}
    for key, what in (
        ("host", "host"),
        ("backend", "backend"),
        ("workload", "workload"),
        ("profile", "acceptance profile"),
    ):
        if ra.get(key) != rb.get(key):
            notes.append(f"different {what}: {ra.get(key)!r} in A, {rb.get(key)!r} in B")
    return notes


def _changes(index: int, da: dict[str, Any], db: dict[str, Any], min_change: float) -> list[Change]:
    sa, sb = da.get("steady") or {}, db.get("steady") or {}
    out = []
    for key, (label, unit, direction) in METRICS.items():
        out.append(
            Change(
                index,
                key,
                label,
                unit,
                _float(sa.get(key)),
                _float(sb.get(key)),
                _combine(_noise(da, "se", key), _noise(db, "se", key)),
                _coarser(_noise(da, "step", key), _noise(db, "step", key)),
                direction,
                min_change,
            )
        )
    ta, tb = sa.get("throughput") or {}, sb.get("throughput") or {}
    units = (da.get("throughput_units") or {}) | (db.get("throughput_units") or {})
    for part in sorted(set(ta) | set(tb)):
        key = f"throughput:{part}"
        out.append(
            Change(
                index,
                key,
                f"{part} throughput",
                units.get(part, ""),
                _float(ta.get(part)),
                _float(tb.get(part)),
                _combine(_noise(da, "se", key), _noise(db, "se", key)),
                None,
                +1,
                min_change,
            )
        )
    return out


def compare_runs(
    path_a: str | Path, path_b: str | Path, min_change: float = MIN_CHANGE, anyway: bool = False
) -> Comparison:
    """Pair the devices of two runs and compare their steady figures; ``min_change`` is the
    practical threshold, a fraction of run A's figure. Runs of different backends or device
    models measured different things: refused (a one-line ConfigError) unless ``anyway``."""
    if not (math.isfinite(min_change) and 0 <= min_change < 10):
        raise ConfigError(f"--min-change: {100 * min_change:g} % is not in [0, 1000)")
    a, b = load_run(path_a), load_run(path_b)
    differ = unlike(a, b)
    if differ and not anyway:
        raise ConfigError(
            f"{path_a} and {path_b} are runs of unlike servers ({differ}): their figures do "
            "not compare; --anyway compares them all the same"
        )
    kind = kind_of(a) if kind_of(a) == kind_of(b) else "device"
    matched_by, pairs, notes = _pair(a, b, kind)
    if not pairs:
        raise ConfigError(f"{path_a} and {path_b}: no device in common to compare")
    changes = [c for x, y in pairs for c in _changes(int(y.get("index", -1)), x, y, min_change)]
    notes = _run_notes(a, b) + notes
    return Comparison(a, b, matched_by, pairs, changes, notes, min_change, differ, kind)


def fmt_value(c: Change, value: float | None) -> str:
    if c.key.startswith("throughput:"):
        return si(value, c.unit)
    return num(value, ".0f" if c.unit != "W" else ".1f", f" {c.unit}")


def fmt_delta(c: Change) -> str:
    if c.delta is None:
        return NOT_AVAILABLE
    if c.key.startswith("throughput:"):
        text = ("+" if c.delta >= 0 else "−") + si(abs(c.delta), c.unit)
    else:
        text = num(c.delta, "+.1f", f" {c.unit}").replace("-", "−")
    if c.rel is None:
        return text
    return f"{text} ({100 * c.rel:+.2f} %)".replace("-", "−")


def fmt_threshold(c: Change) -> str:
    if c.threshold is None:
        return NOT_AVAILABLE
    if c.key.startswith("throughput:"):
        return "±" + si(c.threshold, c.unit)
    return "±" + num(c.threshold, ".2g" if c.threshold < 10 else ".0f", f" {c.unit}")


def table(comparison: Comparison) -> str:
    """The printed comparison: one line per device and figure."""
    rows = [(comparison.kind, "figure", "run A", "run B", "change", f"noise ({K_SIGMA:g}σ)", "")]
    for c in comparison.changes:
        rows.append(
            (
                str(c.device),
                c.label,
                fmt_value(c, c.a),
                fmt_value(c, c.b),
                fmt_delta(c),
                fmt_threshold(c),
                c.verdict,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for r in rows:
        cells = [r[0].rjust(widths[0]), r[1].ljust(widths[1])]
        cells += [cell.rjust(w) for cell, w in zip(r[2:6], widths[2:6], strict=True)]
        cells.append(r[6])
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def headline(comparison: Comparison) -> str:
    counts = {v: 0 for v in ("worse", "better", "changed")}
    for c in comparison.changes:
        if c.verdict in counts:
            counts[c.verdict] += 1
    threshold = f"{100 * comparison.min_change:g} %"
    small = sum(c.verdict == under_label(comparison.min_change) for c in comparison.changes)
    tail = f" ({small} beyond the noise but under {threshold})" if small else ""
    head = f"unlike servers compared all the same ({comparison.unlike}): " * bool(comparison.unlike)
    if not any(counts.values()):
        return f"{head}no change beyond the noise and {threshold}{tail}"
    flagged = ", ".join(f"{n} {v}" for v, n in counts.items() if n)
    return f"{head}{flagged} beyond the noise and {threshold}{tail}"


def _context(comparison: Comparison) -> dict[str, Any]:
    devices = []
    for x, y in comparison.pairs:
        index = int(y.get("index", -1))
        rows = [
            {
                "label": c.label,
                "a": fmt_value(c, c.a),
                "b": fmt_value(c, c.b),
                "delta": fmt_delta(c),
                "threshold": fmt_threshold(c),
                "verdict": c.verdict,
            }
            for c in comparison.changes
            if c.device == index
        ]
        devices.append(
            {
                "index": index,
                "index_a": x.get("index"),
                "name": y.get("name") or NOT_AVAILABLE,
                "uuid": y.get("uuid") or NOT_AVAILABLE,
                "verdict_a": x.get("verdict") or NOT_AVAILABLE,
                "verdict_b": y.get("verdict") or NOT_AVAILABLE,
                "diagnosis_a": x.get("diagnosis") or NOT_AVAILABLE,
                "diagnosis_b": y.get("diagnosis") or NOT_AVAILABLE,
                "rows": rows,
            }
        )
    runs = []
    for name, run in (("A", comparison.a), ("B", comparison.b)):
        r = run.summary.get("run") or {}
        runs.append(
            {
                "name": name,
                "path": str(run.path),
                "host": r.get("host") or NOT_AVAILABLE,
                "started": r.get("started_utc") or NOT_AVAILABLE,
                "verdict": run.summary.get("verdict") or NOT_AVAILABLE,
                "workload": r.get("workload") or NOT_AVAILABLE,
                "command": r.get("command") or NOT_AVAILABLE,
                "tags": r.get("tags") or {},
            }
        )
    highlights = [
        {"device": c.device, "label": c.label, "delta": fmt_delta(c), "verdict": c.verdict}
        for c in comparison.changes
        if c.verdict in ("better", "worse", "changed")
    ]
    return {
        "runs": runs,
        "highlights": highlights,
        "notes": comparison.notes,
        "matched_by": comparison.matched_by,
        "headline": headline(comparison),
        "devices": devices,
        "figure": figures.comparison(comparison.changes, comparison.kind),
        "kind": comparison.kind,
        "k_sigma": f"{K_SIGMA:g}",
        "min_change": f"{100 * comparison.min_change:g}",
        "soak_version": __version__,
    }


def default_output(path_b: str | Path) -> Path:
    path_b = Path(path_b)
    return (path_b if path_b.is_dir() else path_b.parent) / COMPARE_NAME


def write_comparison(comparison: Comparison, out: Path) -> Path:
    out = Path(out)
    try:
        write_html(out, render("compare.html.j2", _context(comparison)))
    except OSError as exc:
        raise ConfigError(f"--out {out}: cannot write ({exc.strerror})") from exc
    return out
