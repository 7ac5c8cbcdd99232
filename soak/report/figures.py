"""The report's figures, drawn with matplotlib and returned as SVG data URIs for ``<img>``.

An ``<img>`` keeps each SVG's ids and styles apart from the page's and from the other
figures', and a browser never runs anything inside one. Figures are built on ``Figure``
objects, not pyplot: no global state, no GUI backend. No user-supplied string (a device
name, a tag) is drawn into a figure; those stay in the HTML, where they are escaped.

Long runs are downsampled to ``MAX_POINTS`` bins per series, each drawn as its mean with the
band between its minimum and maximum, so a one-second throttling dip in a 24-hour soak is
still drawn at its full depth.

A run's figures read each device's series once (``run_figures``), one device at a time, and
keep of it only what they draw (its timeline, and its lines and rows of the server's
figures): a week-long run is drawn in the memory of one device's series.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

import matplotlib
import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_svg import RendererSVG
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator
from matplotlib.transforms import Bbox

from soak.analysis.analyze import DeviceResult
from soak.dataset import DeviceSeries, RunData, WorkColumns
from soak.fields import BY_NAME, HW_REASON_BITS, NOISE_METRICS, REASONS_BY_KEY
from soak.model import ClockReason
from soak.units import prefix

MAX_POINTS = 1000  # bins per plotted series; about one per pixel column of a figure
RASTER_DPI = 130  # of the rasterised data layers: sharp on screen and printed
WIDTH_IN = 11.0  # figure width: about the page's width at 96 CSS pixels per inch
LEGEND_RIGHT = {"loc": "center left", "bbox_to_anchor": (1.01, 0.5), "frameon": False}
HEATMAP_BINS = 400
GAP_FACTOR = 5.0  # bins further apart than this many typical spacings: the line breaks

COLD_COLOR, STEADY_COLOR = "#54aeff", "#fb8f44"
REASON_ROWS = (  # always drawn, so that their absence reads as "never set": the HW group first
    *((r.key, r.bits, "#cf222e") for r in HW_REASON_BITS),
    ("sw_thermal", REASONS_BY_KEY["sw_thermal"].bits, "#e16f24"),
    ("sw_power_cap", REASONS_BY_KEY["sw_power_cap"].bits, "#bf8700"),
)
OTHER_REASON_COLOR = "#8c959f"

_RC = {
    "svg.fonttype": "none",  # text stays text: smaller files, crisp and searchable
    "svg.hashsalt": "soak",  # stable ids: the same run gives the same file
    "font.size": 8,
    "axes.titlesize": 9,
    "axes.labelsize": 8,
    "xtick.labelsize": 7,
    "ytick.labelsize": 7,
    "legend.fontsize": 7,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "path.simplify": True,
}


@contextmanager
def _style() -> Iterator[None]:
    with matplotlib.rc_context(_RC):
        yield


def to_data_uri(fig: Figure) -> str:
    """The figure as an SVG data URI (no creation date: the same run gives the same bytes),
    cropped to what is drawn with the usual padding, as ``bbox_inches="tight"`` crops it."""
    buf = io.BytesIO()
    with _style():
        # A layout engine (constrained) places the axes while drawing: "tight" measures
        # after that. Without one, the box can be measured before any drawing.
        bbox: Bbox | str = "tight"
        if fig.get_layout_engine() is None:
            bbox = _tight_bbox(fig).padded(matplotlib.rcParams["savefig.pad_inches"])
        fig.savefig(buf, format="svg", dpi=RASTER_DPI, bbox_inches=bbox, metadata={"Date": None})
    return "data:image/svg+xml;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _tight_bbox(fig: Figure) -> Bbox:
    """The box (inches) around everything drawn, measured as the SVG backend measures it (72
    points per inch, its own text metrics), so the crop is the one ``bbox_inches="tight"``
    gives: the same bytes for 227 of the report tests' 231 figures, the other four 1e-6 pt
    apart. ``"tight"`` finds the box by drawing the whole figure once before the real
    drawing; measuring the artists' extents costs about half that pass (a device's timeline:
    550 -> 420 ms). Only for a figure with no layout engine; it leaves the figure at 72
    dpi, which the saving sets anew."""
    fig.set_dpi(72)
    width, height = fig.get_size_inches() * 72
    renderer = RendererSVG(width, height, io.StringIO(), image_dpi=RASTER_DPI)
    return fig.get_tightbbox(renderer)


@dataclass(frozen=True, slots=True)
class Envelope:
    """A downsampled series: per bin its mean time, mean, minimum and maximum. NaN rows
    mark gaps where nothing was read, so lines break there instead of bridging them."""

    t: np.ndarray
    mean: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    downsampled: bool = False

    @property
    def empty(self) -> bool:
        return not np.isfinite(self.mean).any()


def envelope(t: np.ndarray, y: np.ndarray, max_points: int = MAX_POINTS) -> Envelope:
    """Downsample to at most ``max_points`` bins of (t, mean, min, max) over readable values,
    so a short dip is still drawn as its bin's minimum rather than averaged away."""
    finite = np.isfinite(y) & np.isfinite(t)
    if not finite.all():  # else the columns as they are: a week's copies are not made
        t, y = t[finite], y[finite]
    del finite
    downsampled = t.size > max_points
    if downsampled:
        edges = np.linspace(0, t.size, max_points + 1).astype(int)
        starts, counts = edges[:-1], np.diff(edges)
        t_mean = np.add.reduceat(t, starts) / counts
        mean = np.add.reduceat(y, starts) / counts
        lo, hi = np.minimum.reduceat(y, starts), np.maximum.reduceat(y, starts)
        t, y = t_mean, mean
    else:
        lo = hi = y
    return _break_gaps(Envelope(t, y, lo, hi, downsampled))


def _break_gaps(e: Envelope) -> Envelope:
    if e.t.size < 3:
        return e
    dt = np.diff(e.t)
    typical = float(np.median(dt))
    gaps = np.flatnonzero(dt > GAP_FACTOR * typical) + 1 if typical > 0 else np.empty(0, int)
    if not gaps.size:
        return e
    nan = np.full(gaps.size, np.nan)
    t_gap = (e.t[gaps - 1] + e.t[gaps]) / 2
    return Envelope(
        np.insert(e.t, gaps, t_gap),
        np.insert(e.mean, gaps, nan),
        np.insert(e.lo, gaps, nan),
        np.insert(e.hi, gaps, nan),
        e.downsampled,
    )


def time_scale(span_s: float) -> tuple[float, str]:
    """Minutes of load, the report's one unit of time, up to 3 hours; hours beyond (a
    24-hour axis in minutes is unreadable)."""
    if span_s > 3 * 3600:
        return 3600.0, "hours"
    return 60.0, "minutes"


def _plot(ax: Axes, e: Envelope, scale: float, color: str, label: str, factor: float = 1.0):
    # Data layers are rasterised inside the SVG (axes and text stay vector): thousands of
    # points per series as vector paths would make a 24-hour report tens of megabytes.
    x = e.t / scale
    ax.fill_between(
        x, e.lo * factor, e.hi * factor, color=color, alpha=0.2, linewidth=0, rasterized=True
    )
    if e.downsampled:  # outline the band, so a dip narrower than a pixel is still drawn
        for edge in (e.lo, e.hi):  # down to its full depth
            ax.plot(x, edge * factor, color=color, linewidth=0.35, alpha=0.6, rasterized=True)
    ax.plot(x, e.mean * factor, color=color, linewidth=0.8, label=label, rasterized=True)


def _not_available(ax: Axes, what: str) -> None:
    ax.text(
        0.5, 0.5, f"{what}: not available", transform=ax.transAxes, ha="center", color="#6e7781"
    )


def timeline_marks(d: DeviceResult) -> str:
    """What ``_shade`` draws on a device's timeline, for its caption to name only that:
    "Blue band: cold window; orange band: steady window; dotted line: equilibrium"."""
    marks = []
    if d.facts.cold is not None:
        marks.append("blue band: cold window")
    if d.facts.steady is not None:
        marks.append("orange band: steady window")
    if _equilibrium_drawn(d):
        marks.append("dotted line: equilibrium")
    return "; ".join(marks).capitalize()


def _equilibrium_drawn(d: DeviceResult) -> bool:
    eq = d.facts.equilibrium
    return eq is not None and eq.reached and eq.time_s is not None


def _shade(axes: Sequence[Axes], d: DeviceResult, t0: float, scale: float) -> None:
    windows = ((d.facts.cold, COLD_COLOR), (d.facts.steady, STEADY_COLOR))
    eq = d.facts.equilibrium
    for ax in axes:
        for stats, color in windows:
            if stats is not None:
                ax.axvspan(
                    (stats.window.start_s - t0) / scale,
                    (stats.window.end_s - t0) / scale,
                    color=color,
                    alpha=0.18,
                    linewidth=0,
                )
        if _equilibrium_drawn(d) and eq is not None and eq.time_s is not None:
            ax.axvline((eq.time_s - t0) / scale, color="#57606a", linewidth=0.8, linestyle=":")


def reason_bins(
    t: np.ndarray, reasons: np.ndarray, max_points: int = MAX_POINTS
) -> tuple[np.ndarray, np.ndarray, dict[int, np.ndarray]]:
    """Per bin its start and end time and, per reason bit ever set, whether any tick in the
    bin had it: a single second under HW slowdown still marks its bin."""
    ok = np.isfinite(reasons)
    t, bits = t[ok], reasons[ok].astype(np.int64)
    if not t.size:
        return t, t, {}
    n = min(max_points, t.size)
    edges = np.linspace(0, t.size, n + 1).astype(int)
    starts = edges[:-1]
    t_start, t_end = t[starts], t[edges[1:] - 1]
    seen = int(np.bitwise_or.reduce(bits))
    out: dict[int, np.ndarray] = {}
    bit = 1
    while bit <= seen:
        if seen & bit:
            out[bit] = np.maximum.reduceat((bits & bit) != 0, starts)
        bit <<= 1
    return t_start, t_end, out


def _runs(active: np.ndarray) -> list[tuple[int, int]]:
    """(first, last) bin indices of each run of consecutive active bins."""
    padded = np.concatenate(([0], active.astype(np.int8), [0]))
    change = np.flatnonzero(np.diff(padded))
    return list(zip(change[::2], change[1::2] - 1, strict=True))


def _reason_strip(
    ax: Axes, t: np.ndarray, reasons: np.ndarray, t0: float, scale: float, unread: int = 0
) -> None:
    """The reasons as bands; a row whose reason was not read (``unread``: an imported log
    without its column) says so, so that its empty row cannot read as "never set"."""
    t_start, t_end, bins = reason_bins(t, reasons)
    min_width = 0.002 * float(t_end[-1] - t_start[0]) / scale if t_start.size else 0.0
    rows = [(name, int(bit), color) for name, bit, color in REASON_ROWS]
    known = {bit for _, bit, _ in rows}
    for bit in sorted(bins):
        if bit not in known:
            names = ClockReason(bit).names()
            rows.append((names[0] if names else f"{bit:#x}", bit, OTHER_REASON_COLOR))
    for y, (_, bit, color) in enumerate(rows):
        active = bins.get(bit)
        if active is None:
            continue
        spans = [
            ((t_start[a] - t0) / scale, max((t_end[b] - t_start[a]) / scale, min_width))
            for a, b in _runs(active)
        ]
        ax.broken_barh(spans, (y - 0.4, 0.8), facecolors=color, linewidth=0)
    names = [f"{name} (not read)" if bit & unread else name for name, bit, _ in rows]
    ax.set_yticks(range(len(rows)), names)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.grid(False, axis="y")
    ax.set_ylabel("clock-event\nreasons")
    if not np.isfinite(reasons).any():
        _not_available(ax, "clock-event reasons")


def device_timeline(d: DeviceResult, series: DeviceSeries) -> str:
    """Temperature, clocks, power and throughput of one device over the run, the cold and
    steady windows shaded, equilibrium dotted, clock-event reasons as bands underneath. A
    panel with nothing readable in it is not drawn; the figure names it once at the top."""
    t0 = d.load_start_s or 0.0
    tele = series.telemetry
    t = tele.t_s
    scale, unit = time_scale(float(t[-1] - t[0]) if t.size else 0.0)
    rel = t - t0
    temp, hbm = envelope(rel, tele.temp_c), envelope(rel, tele.mem_temp_c)
    sm, mem = envelope(rel, tele.sm_clock_mhz), envelope(rel, tele.mem_clock_mhz)
    power = envelope(rel, tele.power_w)
    has = {
        "temperature": not (temp.empty and hbm.empty),
        "clock": not (sm.empty and mem.empty),
        "power": not power.empty,
        "throughput": True,  # says "not available" itself: the load's own measure
        "clock-event reasons": bool(np.isfinite(tele.clock_reasons).any()),
    }
    heights = {"temperature": 1, "clock": 1, "power": 1, "throughput": 1.1}
    heights["clock-event reasons"] = 0.12 * (len(REASON_ROWS) + 2)
    drawn = [name for name in heights if has[name]]
    fig = Figure(figsize=(WIDTH_IN, 1.2 + 1.8 * sum(heights[n] for n in drawn)))
    axes = fig.subplots(
        len(drawn),
        1,
        sharex=True,
        squeeze=False,
        gridspec_kw={"height_ratios": [heights[n] for n in drawn]},
    )[:, 0]
    ax = dict(zip(drawn, axes, strict=True))
    missing = [name for name in heights if not has[name]]
    if missing:
        fig.suptitle(
            f"not drawn, nothing readable: {', '.join(missing)}",
            x=0.01,
            ha="left",
            fontsize=7,
            color="#6e7781",
        )
    first = axes[0]
    if "temperature" in ax:
        _temperature_panel(ax["temperature"], d, temp, hbm, scale)
    if "clock" in ax:
        _clock_panel(ax["clock"], d, sm, mem, scale)
    if "power" in ax:
        _power_panel(ax["power"], power, envelope(rel, tele.power_limit_w), scale)
    _throughput_panel(ax["throughput"], d, series.work, t0, scale)
    if "clock-event reasons" in ax:
        strip = ax["clock-event reasons"]
        _reason_strip(strip, t, tele.clock_reasons, t0, scale, d.facts.reasons_unread)
    handles, _ = first.get_legend_handles_labels()
    handles += [
        Patch(color=COLD_COLOR, alpha=0.35, label="cold window"),
        Patch(color=STEADY_COLOR, alpha=0.35, label="steady window"),
    ]
    first.legend(handles=handles, **LEGEND_RIGHT)
    axes[-1].set_xlabel(f"{unit} since load start")
    _shade(axes, d, t0, scale)
    fig.align_ylabels(axes)
    return to_data_uri(fig)


def _temperature_panel(ax: Axes, d: DeviceResult, temp: Envelope, hbm: Envelope, scale: float):
    if not temp.empty:
        _plot(ax, temp, scale, "#cf222e", d.info.kind)
    if not hbm.empty:
        _plot(ax, hbm, scale, "#8250df", "memory" if d.info.kind == "CPU" else "HBM")
    slowdown = d.info.slowdown_temp_c
    if slowdown is not None:
        ax.axhline(slowdown, color="#cf222e", linestyle="--", linewidth=0.8)
        low, high = ax.get_ylim()
        # room above the line, so that the line is not the frame and its label below it
        # stays inside the panel
        ax.set_ylim(min(low, slowdown - 10), max(high, slowdown + 0.08 * (high - low) + 1))
        ax.annotate(
            f"slowdown {slowdown:.0f} °C",
            (0.005, slowdown),
            xycoords=("axes fraction", "data"),
            xytext=(0, -2),
            textcoords="offset points",
            va="top",
            fontsize=6.5,
            color="#cf222e",
        )
    ax.set_ylabel("temperature (°C)")


def _clock_panel(ax: Axes, d: DeviceResult, sm: Envelope, mem: Envelope, scale: float):
    name = d.info.clock_label
    if sm.empty:
        _not_available(ax, name)
    else:
        _plot(ax, sm, scale, "#0969da", name)
    ax.set_ylabel(f"{name} (MHz)", color="#0969da")
    if not mem.empty:
        ax_mem = ax.twinx()
        ax_mem.grid(False)
        _plot(ax_mem, mem, scale, "#1a7f37", "memory")
        ax_mem.set_ylabel("memory\nclock (MHz)", color="#1a7f37")


def _power_panel(ax: Axes, power: Envelope, limit: Envelope, scale: float):
    _plot(ax, power, scale, "#bc4c00", "power")
    if not limit.empty:
        ax.plot(
            limit.t / scale, limit.hi, color="#57606a", linestyle="--", linewidth=0.8, label="limit"
        )
    ax.legend(**LEGEND_RIGHT)
    ax.set_ylabel("power (W)")


def _throughput_panel(
    ax: Axes, d: DeviceResult, work: Mapping[str, WorkColumns], t0: float, scale: float
) -> None:
    """Each part's rate against its cold figure; one part's rates at a time."""
    colors = ("#0969da", "#1a7f37", "#8250df", "#bc4c00")
    basis = "cold"
    drawn = False
    for i, part in enumerate(sorted(work)):
        r = work[part].rates()
        ref = d.facts.cold.throughput.get(part) if d.facts.cold else None
        if not ref:
            finite = r.rate[np.isfinite(r.rate)]
            ref = float(np.median(finite)) if finite.size else None
            basis = "run median"
        if not ref:
            continue
        e = envelope(r.t_s - t0, r.rate)
        if not e.empty:
            _plot(ax, e, scale, colors[i % len(colors)], part, factor=100.0 / ref)
            drawn = True
    if drawn:
        ax.legend(**LEGEND_RIGHT)
        ax.axhline(100.0, color="#57606a", linewidth=0.6)
    else:
        _not_available(ax, "throughput")
    ax.set_ylabel(f"throughput\n(% of {basis})")


@dataclass(frozen=True, slots=True)
class Extent:
    """One device's telemetry times as the server's figures need them before any is drawn:
    the first and last reading, and how many from the server's load start ``t0`` on."""

    first_s: float | None
    last_s: float | None
    after_t0: int

    @classmethod
    def of(cls, t: np.ndarray, t0: float) -> Extent:
        if not t.size:
            return cls(None, None, 0)
        return cls(float(t[0]), float(t[-1]), int(np.sum(t >= t0)))


@dataclass(frozen=True, slots=True)
class ServerLine:
    """One device's lines in the server view: its temperature and its rate of the primary
    part downsampled (``envelope``), and that rate's largest reading (for the axis's
    prefix; None: no rate read)."""

    temp: Envelope
    rate: Envelope | None
    rate_max: float | None


def server_line(series: DeviceSeries, part: str | None, t0: float) -> ServerLine:
    """What the server view draws of one device."""
    tele = series.telemetry
    temp = envelope(tele.t_s - t0, tele.temp_c)
    work = series.work.get(part) if part is not None else None
    if work is None:
        return ServerLine(temp, None, None)
    r = work.rates()
    finite = r.rate[np.isfinite(r.rate)]
    return ServerLine(
        temp, envelope(r.t_s - t0, r.rate), float(finite.max()) if finite.size else None
    )


def server_view(
    results: Sequence[DeviceResult],
    lines: Mapping[int, ServerLine],
    extents: Mapping[int, Extent],
    part: str | None,
    rate_unit: str,
    t0: float,
) -> str:
    """Every device's temperature and throughput of the main workload part together."""
    spans = [e.last_s - t0 for e in extents.values() if e.last_s is not None]
    scale, unit = time_scale(max(spans, default=0.0))
    with_temp = any(not lines[d.index].temp.empty for d in results)
    fig = Figure(figsize=(WIDTH_IN, 5.4 if with_temp else 3.0))
    # no device reads a temperature: no empty frame for it
    axes = fig.subplots(2 if with_temp else 1, 1, sharex=True, squeeze=False)[:, 0]
    ax_temp, ax_rate = (axes[0], axes[1]) if with_temp else (None, axes[0])
    cmap = matplotlib.colormaps["tab10" if len(results) <= 10 else "tab20"]
    highest = [lines[d.index].rate_max for d in results]
    prefix_scale, name = prefix(max((r for r in highest if r is not None), default=0.0))
    for i, d in enumerate(results):
        color = cmap(i % cmap.N)
        line = lines[d.index]
        if ax_temp is not None and not line.temp.empty:
            _plot(ax_temp, line.temp, scale, color, d.info.label)
        if line.rate is not None and not line.rate.empty:
            _plot(ax_rate, line.rate, scale, color, d.info.label, factor=1.0 / prefix_scale)
    if ax_temp is not None:
        ax_temp.set_ylabel("temperature (°C)")
    rate_label = f"{name}{rate_unit}"
    ax_rate.set_ylabel(f"{part or 'throughput'}" + (f" ({rate_label})" if rate_label else ""))
    if not ax_rate.lines:
        _not_available(ax_rate, "throughput")
    ax_rate.set_xlabel(f"{unit} since load start")
    if axes[0].lines:
        axes[0].legend(
            loc="lower left", bbox_to_anchor=(0, 1.0), ncols=min(len(results), 8), frameon=False
        )
    fig.align_ylabels(axes)
    return to_data_uri(fig)


def binned(
    t: np.ndarray, y: np.ndarray, edges: np.ndarray, how: Literal["max", "min"]
) -> np.ndarray:
    """Per time bin the max or min of the readable values (``t`` ascending); NaN where a bin
    has none."""
    ok = np.isfinite(y)
    if not ok.all():  # else the columns themselves, not a copy of each
        t, y = t[ok], y[ok]
    del ok
    out = np.full(edges.size - 1, np.nan)
    # t ascending: the rows inside the edges are one slice (views)
    inside = slice(np.searchsorted(t, edges[0], "left"), np.searchsorted(t, edges[-1], "left"))
    t, y = t[inside], y[inside]
    if not t.size:
        return out
    idx = np.searchsorted(t, edges)
    nonempty = np.flatnonzero(idx[1:] > idx[:-1])
    reduce = np.maximum if how == "max" else np.minimum
    out[nonempty] = reduce.reduceat(y, idx[nonempty])
    return out


def held(t: np.ndarray, y: np.ndarray, edges: np.ndarray, how: Literal["max", "min"]) -> np.ndarray:
    """Per time bin the max or min of the readable samples that cover it, each sample
    covering the time halfway to its neighbours (``t`` ascending): a rate measured once per
    step, or once per turn of a part that takes turns with others (a CPU's mix), colours
    every bin it stands for, not only the one its mid time falls in. Across a gap (more
    than ``GAP_FACTOR`` typical spacings) a sample covers half a typical spacing; a bin no
    sample covers is NaN."""
    ok = np.isfinite(y) & np.isfinite(t)
    if not ok.all():  # else the columns themselves, not a copy of each
        t, y = t[ok], y[ok]
    del ok
    out = np.full(edges.size - 1, np.nan)
    if not t.size:
        return out
    spacing = np.diff(t)
    typical = float(np.median(spacing)) if spacing.size else 0.0
    half = np.where(spacing > GAP_FACTOR * typical, typical / 2, spacing / 2)
    del spacing  # a week's arrays: as few at once as the steps need
    reach = np.concatenate(([typical / 2], half, [typical / 2]))
    del half
    lo, hi = t - reach[:-1], t + reach[1:]
    del reach
    first = np.searchsorted(hi, edges[:-1], side="right")  # first sample ending in the bin
    last = np.searchsorted(lo, edges[1:], side="left")  # past the last one starting in it
    reduce = np.max if how == "max" else np.min
    for k, (a, b) in enumerate(zip(first, last, strict=True)):
        if b > a:
            out[k] = reduce(y[a:b])
    return out


@dataclass(frozen=True, slots=True)
class HeatMap:
    """The device × time heat map and what it shows, for its caption to say no more: which
    maps are drawn, and whether any cell inside the load is blank (nothing readable)."""

    uri: str
    temperature: bool
    throughput: bool
    blank: bool


@dataclass(frozen=True, slots=True)
class HeatGrid:
    """The heat map's time bins, from the server's load start ``t0`` to its last reading,
    never more than readings: set before any device's row is binned."""

    t0: float
    t_end: float
    edges: np.ndarray

    @classmethod
    def of(cls, extents: Mapping[int, Extent], t0: float) -> HeatGrid:
        t_end = max(e.last_s for e in extents.values() if e.last_s is not None)
        ticks = max(e.after_t0 for e in extents.values())
        bins = max(min(HEATMAP_BINS, ticks), 1)  # never more bins than readings: no stripes
        return cls(t0, t_end, np.linspace(t0, t_end + 1e-9, bins + 1))

    @property
    def bins(self) -> int:
        return self.edges.size - 1


def heat_reference(results: Sequence[DeviceResult], part: str | None) -> float | None:
    """The throughput map's 100 %: the server's median cold throughput of ``part``."""
    colds = [
        d.facts.cold.throughput.get(part)
        for d in results
        if part and d.facts.cold is not None and d.facts.cold.throughput.get(part)
    ]
    return float(np.median(colds)) if colds else None


def heat_rows(
    series: DeviceSeries, part: str | None, ref: float | None, grid: HeatGrid
) -> tuple[np.ndarray, np.ndarray]:
    """One device's rows of the heat maps: its hottest temperature and its lowest rate (per
    cent of ``ref``) in each bin."""
    tele = series.telemetry
    temps = binned(tele.t_s, tele.temp_c, grid.edges, "max")
    work = series.work.get(part) if part is not None else None
    if work is None or not ref:
        return temps, np.full(grid.bins, np.nan)
    r = work.rates()
    return temps, held(r.t_s, r.rate, grid.edges, "min") * 100.0 / ref


def heatmap(
    results: Sequence[DeviceResult],
    rows: Mapping[int, tuple[np.ndarray, np.ndarray]],
    extents: Mapping[int, Extent],
    grid: HeatGrid,
    part: str | None,
    hot_spots: dict[int, str] | None = None,
) -> HeatMap | None:
    """Device × time: the hottest reading and the lowest throughput (percent of the
    server's median cold throughput) in each time bin, so a brief event still colours its
    cell. ``hot_spots`` (device → "warn" or "fail") marks the devices the hot-spot rule
    flagged on the temperature map. A map with nothing readable is left out; None when
    neither has anything."""
    t0, t_end = grid.t0, grid.t_end
    scale, unit = time_scale(t_end - t0)
    temps = np.vstack([rows[d.index][0] for d in results])
    rates = np.vstack([rows[d.index][1] for d in results])
    height = max(1.5, 0.9 + 0.2 * len(results))  # room for a colour bar with its labels
    extent = (0.0, (t_end - t0) / scale, len(results) - 0.5, -0.5)
    panels = (
        (temps, "inferno", "hottest temperature in each bin (°C)", None, None),
        (
            rates,
            "RdYlGn",
            f"lowest {part or 'throughput'} in each bin (% of the server's median cold)",
            85,
            105,
        ),
    )
    panels = tuple(p for p in panels if np.isfinite(p[0]).any())  # nothing readable: no map
    if not panels:
        return None
    fig = Figure(figsize=(WIDTH_IN, len(panels) * height), layout="constrained")
    axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
    hot_spots = hot_spots or {}
    for ax, (data, cmap, label, vmin, vmax) in zip(axes, panels, strict=True):
        number = 0 if data is temps else 1
        finite = data[np.isfinite(data)]
        if vmin is not None:
            vmin, vmax = min(vmin, float(finite.min())), max(vmax, float(finite.max()))
        image = ax.imshow(
            np.ma.masked_invalid(data),
            aspect="auto",
            interpolation="nearest",
            cmap=cmap,
            extent=extent,
            vmin=vmin,
            vmax=vmax,
        )
        fig.colorbar(image, ax=ax, pad=0.01, ticks=MaxNLocator(nbins=4))
        ax.set_title(label, loc="left")
        _device_ticks(ax, results, hot_spots if number == 0 else {})
        ax.grid(False)
    axes[-1].set_xlabel(f"{unit} since load start")
    drawn = [p[0] for p in panels]
    return HeatMap(
        to_data_uri(fig),
        temperature=any(p is temps for p in drawn),
        throughput=any(p is rates for p in drawn),
        blank=any(_blank_inside(data, results, grid.edges, extents) for data in drawn),
    )


def _blank_inside(
    data: np.ndarray,
    results: Sequence[DeviceResult],
    edges: np.ndarray,
    extents: Mapping[int, Extent],
) -> bool:
    """Whether a map has a blank cell between a device's first and last readings: a
    device that reads nothing at all is named elsewhere, its blank row is no gap."""
    for row, d in zip(data, results, strict=True):
        first, last = extents[d.index].first_s, extents[d.index].last_s
        if not np.isfinite(row).any() or first is None or last is None:
            continue
        inside = (edges[1:] > first) & (edges[:-1] < last)
        filled = np.flatnonzero(np.isfinite(row))
        inside[: filled[0]] = False  # before its first value (a warm-up) and after its last
        inside[filled[-1] + 1 :] = False
        if np.isnan(row[inside]).any():
            return True
    return False


@dataclass(frozen=True, slots=True)
class RunFigures:
    """A run's figures: each device's timeline, the server view and the heat map (None
    where no device read anything)."""

    timelines: dict[int, str]
    view: str | None
    heatmap: HeatMap | None


def run_figures(
    results: Sequence[DeviceResult],
    data: RunData,
    part: str | None,
    rate_unit: str,
    t0: float,
    hot_spots: dict[int, str] | None = None,
) -> RunFigures:
    """Every figure of a run's report from its dataset: each device's times first (the
    server's figures' time axis and bins), then each device's series once, one at a time,
    keeping only what is drawn of it."""
    extents = {d.index: Extent.of(data.times(d.index), t0) for d in results}
    server = bool(results) and any(e.last_s is not None for e in extents.values())
    grid = HeatGrid.of(extents, t0) if server else None
    ref = heat_reference(results, part)
    timelines, lines, rows = {}, {}, {}
    for d in results:
        series = data.device(d.index)
        timelines[d.index] = device_timeline(d, series)
        if grid is not None:
            lines[d.index] = server_line(series, part, t0)
            rows[d.index] = heat_rows(series, part, ref, grid)
        del series  # one device's series at a time
    if grid is None:
        return RunFigures(timelines, None, None)
    view = server_view(results, lines, extents, part, rate_unit, t0)
    return RunFigures(timelines, view, heatmap(results, rows, extents, grid, part, hot_spots))


def _device_ticks(ax: Axes, results: Sequence[DeviceResult], hot_spots: dict[int, str]) -> None:
    """A row label per device; those in ``hot_spots`` marked, red for "fail"."""
    labels = [
        f"{d.info.label} ▲ hot spot" if d.index in hot_spots else d.info.label for d in results
    ]
    ax.set_yticks(range(len(results)), labels)
    for tick, d in zip(ax.get_yticklabels(), results, strict=True):
        if d.index in hot_spots:
            tick.set_color("#b00020" if hot_spots[d.index] == "fail" else "#b36b00")
            tick.set_fontweight("bold")


def comparison(changes: Sequence, kind: str = "GPU") -> str:
    """Per device, run B's change against run A: throughput and SM clock in percent, and
    temperature in °C, each with its noise threshold as an error bar; changes within the
    noise are drawn pale."""
    devices = sorted({c.device for c in changes})
    rel_keys = sorted({c.key for c in changes if c.key.startswith("throughput:")})
    rel_keys.append("sm_clock_mhz")
    temp_keys = [k for k in NOISE_METRICS if BY_NAME[k].unit == "°C"]
    fig = Figure(figsize=(WIDTH_IN, 5.2))
    ax_rel, ax_temp = fig.subplots(2, 1, sharex=True)
    rel_colors = ("#0969da", "#1a7f37", "#8250df", "#57606a", "#bc4c00")
    panels = (
        (ax_rel, rel_keys, True, "change (%)", rel_colors),
        (ax_temp, temp_keys, False, "change (°C)", ("#cf222e", "#8250df")),
    )
    by_key = {(c.device, c.key): c for c in changes}
    for ax, keys, relative, ylabel, colors in panels:
        width = 0.8 / max(len(keys), 1)
        handles = []
        for k, key in enumerate(keys):
            xs, ys, errs, alphas = [], [], [], []
            label = None
            for i, device in enumerate(devices):
                c = by_key.get((device, key))
                if c is None or c.delta is None or (relative and not c.a):
                    continue
                label = c.label
                scale = 100.0 / c.a if relative else 1.0
                xs.append(i - 0.4 + width * (k + 0.5))
                ys.append(c.delta * scale)
                errs.append(c.threshold * abs(scale) if c.threshold is not None else 0.0)
                alphas.append(1.0 if c.significant and c.practical else 0.35)
            if not xs:
                continue
            color = colors[k % len(colors)]
            bars = ax.bar(xs, ys, width * 0.9, color=color)
            handles.append(Patch(color=color, label=label))
            for bar, alpha in zip(bars, alphas, strict=True):
                bar.set_alpha(alpha)
            ax.errorbar(xs, ys, yerr=errs, fmt="none", ecolor="#1f2328", capsize=2, linewidth=0.7)
        ax.axhline(0, color="#57606a", linewidth=0.6)
        ax.set_ylabel(ylabel)
        if handles:
            ax.legend(handles=handles, **LEGEND_RIGHT)
        else:
            _not_available(ax, ylabel)
    ax_temp.set_xticks(range(len(devices)), [f"{kind} {d}" for d in devices])
    return to_data_uri(fig)


def headroom(
    curves: Sequence[tuple[str, np.ndarray, np.ndarray]],
    design_inlet_c: float,
    sw_c: float | None,
    run_inlet_c: float | None,
) -> str:
    """Projected steady die temperature against inlet, one line per device (labels are
    "GPU 3", soak's own), with the design inlet, the run's inlet and the SW thermal
    slowdown marked."""
    fig = Figure(figsize=(WIDTH_IN, 3.6))
    ax = fig.subplots()
    for label, inlet, temp in curves:
        ax.plot(inlet, temp, linewidth=1.2, label=label)
    design = f"design inlet {design_inlet_c:.0f} °C"
    ax.axvline(design_inlet_c, color="#cf222e", linestyle="--", linewidth=0.8, label=design)
    if run_inlet_c is not None:
        ax.axvline(run_inlet_c, color="#57606a", linestyle=":", linewidth=0.8, label="this run")
    if sw_c is not None:
        ax.axhline(sw_c, color="#bc4c00", linewidth=0.8, label="SW thermal slowdown")
    ax.set_xlabel("inlet (°C)")
    ax.set_ylabel("projected die (°C)")
    ax.legend(**LEGEND_RIGHT)
    return to_data_uri(fig)
