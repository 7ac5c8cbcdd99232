"""What a person watching a soak sees: a live ``rich`` table on a terminal, plain timestamped
lines anywhere else (a pipe, ``nohup``, a Slurm log).

Both read only the runner's ``Progress`` snapshots. ``Tracker`` keeps what a view derives
from the snapshots it has seen (each part's cold rate as the snapshot last gave it, the
temperature a minute ago, the latest snapshot) so that the two views say the same things.
Every message either prints comes from an event the runner stored (a clock-event reason
seen first, other work on a device, equilibrium, a lost device), so the report's event log
holds it at the same minute of load; the plain lines count time in minutes of load.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import re
import textwrap
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TextIO

from rich.console import Console, Group
from rich.live import Live
from rich.measure import Measurement
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from soak.model import NOTABLE_REASONS, ClockReason, EventKind
from soak.progress import DeviceProgress, Phase, Progress
from soak.units import NOT_AVAILABLE, rate_unit, si

# Reasons a watcher is told about: the device is held back by heat or by its board. Idle,
# application clocks and the power cap are the normal state of a loaded GPU.
NOTABLE: int = NOTABLE_REASONS
# Events worth a message line as they happen.
ANNOUNCED = frozenset(
    {
        EventKind.LOAD_START,
        EventKind.EQUILIBRIUM,
        EventKind.FAULT_INJECTED,
        EventKind.XID,
        EventKind.ECC,
        EventKind.DEVICE_LOST,
        EventKind.VERIFICATION_FAILED,
        EventKind.WARNING,
        EventKind.FOREIGN_PROCESS,
        EventKind.CLOCK_EVENT,
        EventKind.TELEMETRY,  # readings frozen under load: the device fails
        EventKind.STOP,
    }
)
TREND_S = 60.0  # temperature trend: change over the last minute
# What a device does before its load starts, in words: the state "warm-up 23 s" alone says
# nothing of why there is no throughput yet.
WARMUP_WORDS = (
    "its worker imports, sets up and does its first unit of work; on a CPU often half a "
    "minute; its load counts from then"
)
STAGES = ("baseline", "warm-up", "warming", "steady", "failed", "lost")  # in run order
# A warm-up shorter than this is not news: a simulated load has none.
WARMUP_NEWS_S = 5.0


def _num(value: float | None, fmt: str, unit: str) -> str:
    return NOT_AVAILABLE if value is None else f"{value:{fmt}} {unit}"


def reason_names(bits: int) -> str:
    return ", ".join(ClockReason(bits).names())


@dataclass
class _Seen:
    """One device's history as a view needs it."""

    temps: deque[tuple[float, float]] = field(default_factory=deque)
    cold: dict[str, float] = field(default_factory=dict)  # the snapshot's, once known


class Tracker:
    """Derives trends, cold rates and new messages from successive snapshots."""

    def __init__(self) -> None:
        self.seen: dict[int, _Seen] = {}
        self.latest: Progress | None = None

    def add(self, progress: Progress) -> list[str]:
        """Take one snapshot; returns the messages it brings, in order."""
        return [message for _, message in self.add_timed(progress)]

    def add_timed(self, progress: Progress) -> list[tuple[float, str]]:
        """``add``, each message with its event's time (a snapshot of a block of ticks
        brings events of several)."""
        self.latest = progress
        messages = [
            (e.t_s, _event_text(e.device, e.message))
            for e in progress.events
            if e.kind in ANNOUNCED or (e.kind is EventKind.WORKER_OUTCOME and _bad_outcome(e))
        ]
        for d in progress.devices:
            self._device(d, self.seen.setdefault(d.index, _Seen()))
        return messages

    def _device(self, d: DeviceProgress, seen: _Seen) -> None:
        row = d.telemetry
        if row is not None and row.temp_c is not None:
            if not seen.temps or seen.temps[-1][0] != row.t_s:
                seen.temps.append((row.t_s, row.temp_c))
            while len(seen.temps) > 2 and seen.temps[1][0] <= row.t_s - TREND_S:
                seen.temps.popleft()
        seen.cold = {r.part: r.rate for r in d.cold} or seen.cold

    def trend(self, index: int) -> str:
        """The temperature change over about the last minute: "↑ 2 °C/min", "→"."""
        temps = self.seen.get(index, _Seen()).temps
        if len(temps) < 2 or temps[-1][0] - temps[0][0] < TREND_S / 2:
            return ""
        (t0, y0), (t1, y1) = temps[0], temps[-1]
        per_min = (y1 - y0) / (t1 - t0) * 60
        if abs(per_min) < 0.5:
            return "→"
        return f"{'↑' if per_min > 0 else '↓'} {abs(per_min):.0f} °C/min"

    def cold_rate(self, index: int, part: str) -> float | None:
        """The device's cold throughput of ``part`` as the snapshot gives it (the analysis's
        figure, once the cold window is over)."""
        seen = self.seen.get(index)
        return seen.cold.get(part) if seen is not None else None

    def rates(self, d: DeviceProgress, short: bool = False) -> str:
        """Each part's latest rate in its unit, against its cold mean where one is known
        ("gemm 336 TFLOP/s (97.1 % of cold)"; ``short``: "gemm 336 TFLOP/s 97.1 %")."""
        out = []
        for r in d.rates:
            text = f"{r.part} {si(r.rate, rate_unit(r.unit))}"
            cold = self.cold_rate(d.index, r.part)
            if cold:
                ratio = 100 * r.rate / cold
                text += f" {ratio:.1f} %" if short else f" ({ratio:.1f} % of cold)"
            out.append(text)
        return "  ".join(out) or "-"

    def percents(self, d: DeviceProgress) -> list[tuple[str, float | None]]:
        """Each part and its latest rate as a % of its cold figure (the snapshot's, given once
        the cold window is over); None until then."""
        out = []
        for r in d.rates:
            cold = self.cold_rate(d.index, r.part)
            out.append((r.part, 100 * r.rate / cold if cold else None))
        return out

    def settled_percents(self, d: DeviceProgress) -> list[tuple[str, float | None, bool]]:
        """Each part as a % of its cold figure, on the steady window so far where the
        device is dated (the analysis's own figure, the one the report gives: True), else
        on its latest rate (one unit of work, which a mix's parts make noisy: False)."""
        steady = {r.part: r.rate for r in d.steady}
        out = []
        for r in d.rates:
            cold = self.cold_rate(d.index, r.part)
            rate = steady.get(r.part, r.rate)
            out.append((r.part, 100 * rate / cold if cold else None, r.part in steady))
        return out

    def stage(self, d: DeviceProgress) -> str:  # one of STAGES
        """Where the device is in its soak, one word: "baseline", "warm-up" (its worker
        sets up, no unit of work done yet), "warming", "steady", "failed" or "lost"."""
        if d.lost:
            return "lost"
        if d.failed:
            return "failed"
        if d.equilibrium_s is not None:
            return "steady"
        if d.work_start_s is not None:
            return "warming"
        p = self.latest
        return "baseline" if p is not None and p.phase is Phase.BASELINE else "warm-up"

    def warmup_s(self) -> float | None:
        """Seconds since the load was started (its workers launched), before any work."""
        p = self.latest
        if p is None or p.load_start_s is None:
            return None
        return max(0.0, p.t_s - p.load_start_s)

    def state(self, d: DeviceProgress) -> str:
        stage = self.stage(d)
        if stage in ("lost", "failed"):
            return stage
        row = d.telemetry
        if row is not None and row.clock_reasons and row.clock_reasons & NOTABLE:
            return f"throttled: {reason_names(row.clock_reasons & NOTABLE)}"
        if d.equilibrium_s is not None:  # timed from the device's load start, as the report
            since = d.equilibrium_s - (d.work_start_s or 0.0)
            return f"steady at {since / 60:.1f} min"
        if stage == "baseline":
            return "idle baseline"
        if stage == "warm-up":
            warm = self.warmup_s()
            return "warm-up" if warm is None else f"warm-up {warm:.0f} s"
        return "warming" if d.eta_s is None else f"warming, ~{d.eta_s / 60:.0f} min to go"


def _bad_outcome(event) -> bool:
    return event.details.get("outcome") not in (None, "ok")


def _event_text(device: int | None, message: str) -> str:
    prefix = f"device {device}: "
    return message if device is None or message.startswith(prefix) else prefix + message


def clock_header(p: Progress) -> str:
    """The clock column's name: the devices' own (DeviceInfo.clock_label), "clock" where
    a run mixes kinds."""
    labels = {d.clock_label for d in p.devices}
    return labels.pop() if len(labels) == 1 else "clock"


def device_line(tracker: Tracker, d: DeviceProgress) -> str:
    """One device in one plain line, every field named: temperature and trend, clock, power
    against the limit, throughput against cold, state."""
    row = d.telemetry
    trend = tracker.trend(d.index)
    temp = _num(row and row.temp_c, ".0f", "°C") + (f" {trend}" if trend else "")
    limit = row and row.power_limit_w
    power = _num(row and row.power_w, ".0f", "W") + (f" (limit {limit:.0f} W)" if limit else "")
    clock = _num(row and row.sm_clock_mhz, ".0f", "MHz")
    state = tracker.state(d)
    if tracker.stage(d) == "warm-up":
        state += f" ({WARMUP_WORDS})"
    return (
        f"device {d.index}: temperature {temp}, {d.clock_label} {clock}, power {power}, "
        f"throughput {tracker.rates(d)}, state {state}"
    )


def header_text(p: Progress) -> str:
    """The run in one line: "soak sim · mix · node1 · load 13.8 of 60 min · inlet 25.0 °C";
    every time in minutes of load (the baseline and the warm-up come before any)."""
    # minutes of load as every line counts them (``load_s``: from the first device's load
    # start); the plan counts from when every device worked, a tick or a warm-up later
    first = load_s(p)
    load = None if first is None else max(0.0, first)
    planned = "until steady" if p.until_steady else f"{p.planned_s / 60:.0f} min"
    if p.phase is Phase.BASELINE:
        where = "idle baseline"
    elif load is None:
        warm = 0.0 if p.load_start_s is None else max(0.0, p.t_s - p.load_start_s)
        where = f"warm-up {warm:.0f} s"
    else:
        where = f"load {load / 60:.1f} of {planned}"
        eta = p.verdict_eta_s
        if p.until_steady and eta is not None and p.phase is Phase.LOAD:
            where += f", verdict in ~{math.ceil(eta / 60):.0f} min"
    if p.phase is Phase.STOPPING:
        where = f"stopping · {where}"
    text = f"soak {p.backend} · {p.workload} · {p.host} · {where}"
    if p.inlet_c is not None:
        text += f" · inlet {p.inlet_c:.1f} °C"
    return text


def load_s(p: Progress) -> float | None:
    """Seconds since the first device's load start (its first finished unit of work), the
    origin of the report's event log; None before it."""
    starts = [d.work_start_s for d in p.devices if d.work_start_s is not None]
    return p.t_s - min(starts) if starts else None


def load_stamp(p: Progress) -> str:
    """When a line is written, in minutes of load (``load_s``), as the report's event log
    gives it; before any, the phase ("baseline", "warm-up")."""
    load = load_s(p)
    if load is not None and load >= 0:
        return f"load {load / 60:.1f} min"
    return "baseline" if p.phase is Phase.BASELINE else "warm-up"


def server_line(tracker: Tracker, p: Progress) -> str:
    """The run and its devices in one line: the header, how many devices are in which
    stage, their temperatures and the lowest part's % of cold."""
    stages = [tracker.stage(d) for d in p.devices]
    counts = ", ".join(f"{stages.count(s)} {s}" for s in STAGES if s in stages)
    parts = [
        header_text(p),
        f"{len(p.devices)} device{'s' if len(p.devices) != 1 else ''}: {counts}",
    ]
    temps = [
        d.telemetry.temp_c
        for d in p.devices
        if d.telemetry is not None and d.telemetry.temp_c is not None
    ]
    if temps:
        low, high = min(temps), max(temps)
        parts.append(f"{low:.0f} °C" if round(low) == round(high) else f"{low:.0f}–{high:.0f} °C")
    lowest = [
        (pct, part, d.index, steady)
        for d in p.devices
        for part, pct, steady in tracker.settled_percents(d)
        if pct is not None
    ]
    if lowest:
        pct, part, index, steady = min(lowest)
        which = f"steady {part}" if steady else part
        parts.append(f"lowest {which} {pct:.1f} % of cold (device {index})")
    return " · ".join(parts)


# A number and the word after it ("87 °C", "640 s") stay on one line when a message wraps.
_NUMBER_UNIT = re.compile(r"(?<=\d) (?=[^\s\d])")
_GLUE = "\x00"


def wrap_message(prefix: str, message: str, width: int) -> list[str]:
    """A message in lines of at most ``width`` columns, continued under its first word, never
    parting a number from its unit."""
    indent = " " * len(prefix)
    room = max(20, width - len(prefix))
    glued = _NUMBER_UNIT.sub(_GLUE, message)
    lines = textwrap.wrap(glued, room, break_on_hyphens=False) or [""]
    return [
        (prefix if i == 0 else indent) + line.replace(_GLUE, " ") for i, line in enumerate(lines)
    ]


@dataclass(frozen=True)
class _Layout:
    """One way of drawing the device table; ``LAYOUTS`` goes from the widest to the
    narrowest, each giving up the least important detail still shown."""

    trend: str  # "full" ("↑ 2 °C/min"), "short" ("↑2"), "none"
    power: str  # "limit" ("700 W / 700"), "power" ("700 W"), "none"
    throughput: str  # "rates" (rate and % of cold), "percents" (% only), "lowest", "none"


LAYOUTS = (
    _Layout("full", "limit", "rates"),
    _Layout("full", "limit", "percents"),
    _Layout("full", "power", "percents"),
    _Layout("short", "power", "percents"),
    _Layout("short", "power", "lowest"),
    _Layout("short", "none", "lowest"),
    _Layout("none", "none", "lowest"),
    _Layout("none", "none", "none"),
)
_THROUGHPUT_HEADER = {
    "rates": "throughput, % of cold",
    "percents": "% of cold",
    "lowest": "lowest % of cold",
}


def _short_trend(trend: str) -> str:
    """ "↑ 2 °C/min" → "↑2"; "→" stays."""
    return trend.replace(" °C/min", "").replace(" ", "")


def _percents_text(tracker: Tracker, d: DeviceProgress, lowest: bool) -> str:
    known = [(part, pct) for part, pct in tracker.percents(d) if pct is not None]
    if not known:
        return "measuring cold" if d.rates else "-"
    if lowest:
        known = [min(known, key=lambda kv: kv[1])]
    return "  ".join(f"{part} {pct:.1f} %" for part, pct in known)


def device_table(tracker: Tracker, p: Progress, layout: _Layout) -> Table:
    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("dev", no_wrap=True)
    table.add_column("temp", no_wrap=True)
    if layout.trend != "none":
        table.add_column("trend" if layout.trend == "full" else "°C/min", no_wrap=True)
    table.add_column(clock_header(p), no_wrap=True)
    if layout.power != "none":
        table.add_column("power / limit" if layout.power == "limit" else "power", no_wrap=True)
    if layout.throughput != "none":
        table.add_column(_THROUGHPUT_HEADER[layout.throughput], no_wrap=True)
    table.add_column("state")  # the only column that may wrap, at the narrowest layout
    for d in p.devices:
        row = d.telemetry
        cells = [str(d.index), _num(row and row.temp_c, ".0f", "°C")]
        trend = tracker.trend(d.index)
        if layout.trend != "none":
            cells.append(trend if layout.trend == "full" else _short_trend(trend))
        cells.append(_num(row and row.sm_clock_mhz, ".0f", "MHz"))
        power = _num(row and row.power_w, ".0f", "W")
        limit = row and row.power_limit_w
        if layout.power == "limit":
            cells.append(power + (f" / {limit:.0f}" if limit else ""))
        elif layout.power == "power":
            cells.append(power)
        if layout.throughput == "rates":
            cells.append(tracker.rates(d, short=True))
        elif layout.throughput != "none":
            cells.append(_percents_text(tracker, d, lowest=layout.throughput == "lowest"))
        state = tracker.state(d)
        style = "red" if state in ("lost", "failed") or state.startswith("throttled") else ""
        table.add_row(*cells, Text(state, style=style))
    return table


def fitting_table(console: Console, tracker: Tracker, p: Progress, width: int) -> Table:
    """The widest layout of the device table that fits ``width`` columns."""
    wide = console.options.update_width(10_000)
    for layout in LAYOUTS:
        table = device_table(tracker, p, layout)
        if Measurement.get(console, wide, table).maximum <= width:
            return table
    return table  # the narrowest: its state column wraps


class LiveView:
    """The terminal view: a header with a progress bar and one row per device, redrawn in
    place at most ``refresh_s`` of wall time apart; messages scroll above it."""

    def __init__(
        self,
        stream: TextIO,
        tracker: Tracker | None = None,
        refresh_s: float = 0.25,
        wall: Callable[[], float] = time.monotonic,
        width: int | None = None,
    ) -> None:
        self.tracker = tracker or Tracker()
        self.console = Console(file=stream, force_terminal=True, highlight=False, width=width)
        self.live = Live(console=self.console, auto_refresh=False, transient=False)
        self.refresh_s = refresh_s
        self._wall = wall
        self._last: float | None = None
        self._latest: Progress | None = None
        self._started = False

    def render(self, p: Progress, width: int | None = None) -> Group:
        table = fitting_table(self.console, self.tracker, p, width or self.console.width)
        parts: list = [Text(header_text(p), style="bold")]
        if p.load_elapsed_s is not None and not p.until_steady and p.planned_s > 0:
            done = min(p.load_elapsed_s, p.planned_s)
            # a bare bar ends without a line break: the empty Text gives it one
            parts += [ProgressBar(total=p.planned_s, completed=done), Text("")]
        parts += [
            table,
            Text("Ctrl-C stops and reports; a second Ctrl-C stops at once", style="dim"),
        ]
        return Group(*parts)

    def update(self, progress: Progress) -> None:
        self._latest = progress
        for message in self.tracker.add(progress):
            prefix = f"[{load_stamp(progress)}] "
            for line in wrap_message(prefix, message, self.console.width):
                self.console.print(line, markup=False, overflow="ignore", crop=False)
        now = self._wall()
        if self._last is not None and now - self._last < self.refresh_s:
            return
        self._last = now
        if not self._started:
            self.live.start()
            self._started = True
        self.live.update(self.render(progress), refresh=True)

    def close(self) -> None:
        if self._started:
            if self._latest is not None:  # the last state, not the last redraw's
                self.live.update(self.render(self._latest), refresh=True)
            self.live.stop()


class PlainView:
    """Timestamped lines for a log: every message as it happens, one line per device when
    its stage changes (warm-up, warming, steady, failed, lost), and the server in one line
    when the phase changes and at most once per ``every_s`` of run time (a 2-hour soak of 8
    GPUs leaves about 150 lines)."""

    def __init__(
        self,
        stream: TextIO,
        tracker: Tracker | None = None,
        every_s: float = 60.0,
        now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ) -> None:
        self.stream: TextIO | None = stream
        self.tracker = tracker or Tracker()
        self.every_s = every_s
        self._now = now
        self._next = 0.0
        self._phase: Phase | None = None
        self._loading = False  # a device's load has started: lines count minutes of load
        self._stages: dict[int, str] = {}

    def _write(self, lines: list[str]) -> None:
        """Write and flush; a stream that fails (a closed terminal, a log pipe whose reader
        died) is dropped, so that losing the view never stops a soak."""
        if self.stream is None or not lines:
            return
        try:
            self.stream.write("".join(line + "\n" for line in lines))
            self.stream.flush()
        except (OSError, ValueError):  # ValueError: the stream was closed
            self.stream = None

    def update(self, progress: Progress) -> None:
        now = f"{self._now():%Y-%m-%dT%H:%M:%SZ}"
        stamp = f"{now} {load_stamp(progress)}"
        lines = [  # an event at its own minute of load
            f"{now} {load_stamp(dataclasses.replace(progress, t_s=t))} {m}"
            for t, m in self.tracker.add_timed(progress)
        ]
        load = load_s(progress)  # a progress line at each whole minute of load
        clock = progress.t_s if load is None else load
        started = load is not None and not self._loading  # the minutes count from here
        self._loading = self._loading or started
        if progress.phase is not self._phase or started or clock >= self._next:
            self._phase = progress.phase
            self._next = (clock // self.every_s + 1) * self.every_s
            lines.append(f"{stamp} {server_line(self.tracker, progress)}")
        for d in progress.devices:
            if self._changed(d):
                lines.append(f"{stamp} {device_line(self.tracker, d)}")
        self._write(lines)

    def _changed(self, d: DeviceProgress) -> bool:
        """Whether the device entered a stage this tick that is news: not the baseline,
        and a warm-up only once it has lasted ``WARMUP_NEWS_S``."""
        stage = self.tracker.stage(d)
        if stage == self._stages.get(d.index) or stage == "baseline":
            return False
        if stage == "warm-up" and (self.tracker.warmup_s() or 0.0) < WARMUP_NEWS_S:
            return False
        self._stages[d.index] = stage
        return True

    def close(self) -> None:
        self._write([])


def make_view(stream: TextIO):
    """The live table on a terminal, plain lines anywhere else."""
    tracker = Tracker()
    if stream.isatty():
        return LiveView(stream, tracker)
    return PlainView(stream, tracker)
