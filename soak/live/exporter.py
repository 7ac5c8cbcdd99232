"""The Prometheus exporter of a running soak (``soak run --metrics-port PORT``).

A watcher like the terminal view: each tick it keeps the runner's ``Progress`` snapshot and
adds the tick's time to the clock-event counters; the collector turns the latest snapshot into
metrics only when Prometheus scrapes. Nothing of the exposition runs in the sampling loop, and
a slow or failing scrape never reaches it. Names follow Prometheus conventions: base units in
the name (seconds, celsius, watts, hertz, ratio), ``_total`` for counters, and labels bounded by
the server (host, device, uuid, sku, workload; part and reason come from fixed tables). A value
the device cannot report is absent from the scrape, never 0.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client.core import (
    CollectorRegistry,
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
)
from prometheus_client.exposition import start_http_server

from soak import __version__
from soak.errors import ConfigError
from soak.fields import FIELDS, Kind
from soak.model import HW_REASONS, ClockReason, EventKind, Telemetry
from soak.progress import DeviceProgress, Phase, Progress

DEVICE_LABELS = ("host", "device", "uuid", "sku", "workload")

# Each telemetry field with a Prometheus name (the registry's ``prom``): counters as
# counters (``_total`` added), every other kind as a gauge in its base unit.
GAUGES = tuple(f for f in FIELDS if f.prom and f.kind is not Kind.COUNTER)
COUNTERS = tuple(f for f in FIELDS if f.prom and f.kind is Kind.COUNTER)
REASONS: tuple[ClockReason, ...] = tuple(r for r in ClockReason if r.value and r.name)
KNOWN_BITS = int(ClockReason.known_mask())
HW_BITS = int(HW_REASONS)


def _reason_label(reason: ClockReason) -> str:
    return (reason.name or hex(reason.value)).lower()


@dataclass
class _DeviceTally:
    """What the exporter adds up from tick to tick for one device."""

    last_t_s: float | None = None
    reason_s: dict[int, float] | None = None  # seconds under each reason bit
    xid: int = 0
    protection_after_warmup: bool = False


class _State:
    """The latest snapshot and the running tallies, shared by the tick and the scrape. The
    tick's part is a few integer operations per device: the sampling loop pays for nothing
    else."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.progress: Progress | None = None
        self.tally: dict[int, _DeviceTally] = defaultdict(_DeviceTally)

    def add(self, progress: Progress) -> None:
        with self.lock:
            for device in progress.devices:
                self._count(device, self.tally[device.index])
            for event in progress.events:
                if event.kind is EventKind.XID and event.device is not None:
                    self.tally[event.device].xid += 1
            self.progress = progress

    @staticmethod
    def _count(device: DeviceProgress, tally: _DeviceTally) -> None:
        row = device.telemetry
        if row is None or row.clock_reasons is None or row.t_s == tally.last_t_s:
            return
        bits = row.clock_reasons & KNOWN_BITS
        if tally.reason_s is None:
            tally.reason_s = dict.fromkeys((int(r) for r in REASONS), 0.0)
        elif tally.last_t_s is not None and row.t_s > tally.last_t_s:
            dt = row.t_s - tally.last_t_s
            rest = bits
            while rest:  # only the set bits: usually one or two
                low = rest & -rest
                tally.reason_s[low] += dt
                rest ^= low
        tally.last_t_s = row.t_s
        if bits & HW_BITS and device.work_start_s is not None and row.t_s >= device.work_start_s:
            tally.protection_after_warmup = True


class _Collector:
    """Turns the latest snapshot into metric families at scrape time."""

    def __init__(self, state: _State) -> None:
        self.state = state

    def collect(self) -> Iterator[Metric]:
        with self.state.lock:
            progress = self.state.progress
            tally = {i: _copy(t) for i, t in self.state.tally.items()}
        if progress is None:
            return
        yield from _run_metrics(progress)
        yield from _device_metrics(progress, tally)


def _copy(t: _DeviceTally) -> _DeviceTally:
    return _DeviceTally(
        t.last_t_s,
        None if t.reason_s is None else dict(t.reason_s),
        t.xid,
        t.protection_after_warmup,
    )


def _run_metrics(p: Progress) -> Iterator[Metric]:
    info = GaugeMetricFamily(
        "soak_run_info",
        "the run: host, backend, workload, soak version",
        labels=("host", "backend", "workload", "version"),
    )
    info.add_metric([p.host, p.backend, p.workload, __version__], 1)
    yield info
    phase = GaugeMetricFamily(
        "soak_run_phase", "1 for the phase the run is in", labels=("host", "phase")
    )
    for ph in Phase:
        phase.add_metric([p.host, ph.value], 1.0 if p.phase is ph else 0.0)
    yield phase
    for name, value, text in (
        ("soak_run_elapsed_seconds", p.t_s, "seconds since the run started (baseline included)"),
        ("soak_run_load_seconds", p.load_elapsed_s, "seconds of load counted towards the plan"),
        ("soak_run_planned_seconds", p.planned_s, "load length asked for (--hours/--minutes)"),
        ("soak_inlet_temperature_celsius", p.inlet_c, "the server's inlet air, from its BMC"),
    ):
        if value is not None:
            yield _one(name, text, p.host, value)
    steady = sum(d.reached for d in p.devices)
    yield _one(
        "soak_run_devices_at_equilibrium", "devices whose equilibrium is confirmed", p.host, steady
    )


def _one(name: str, text: str, host: str, value: float) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, text, labels=("host",))
    family.add_metric([host], value)
    return family


def _labels(p: Progress, d: DeviceProgress) -> list[str]:
    return [p.host, str(d.index), d.uuid or "", d.name, p.workload]


_Row = tuple[list[str], DeviceProgress, Telemetry | None]


def _device_metrics(p: Progress, tally: dict[int, _DeviceTally]) -> Iterator[Metric]:
    # a frozen device's readings repeat what it read once: dropped, never served as fresh
    rows: list[_Row] = [(_labels(p, d), d, None if d.frozen else d.telemetry) for d in p.devices]
    yield from _field_metrics(rows)
    yield from _rate_metrics(rows)
    yield from _state_metrics(rows, tally)


def _field_metrics(rows: list[_Row]) -> Iterator[Metric]:
    """One family per telemetry field the registry exports, in its base unit."""
    for fields, family_type in ((GAUGES, GaugeMetricFamily), (COUNTERS, CounterMetricFamily)):
        for field in fields:
            family = family_type(f"soak_device_{field.prom}", field.meaning, labels=DEVICE_LABELS)
            for labels, _, row in rows:
                value = None if row is None else getattr(row, field.name)
                if value is not None:
                    family.add_metric(labels, value * field.prom_scale)
            yield family


def _rate_metrics(rows: list[_Row]) -> Iterator[Metric]:
    """Each part's latest, cold and steady throughput."""
    rate = GaugeMetricFamily(
        "soak_device_work_units_per_second",
        "latest measured throughput of a workload part, in its work unit per second",
        labels=(*DEVICE_LABELS, "part", "unit"),
    )
    cold = GaugeMetricFamily(
        "soak_device_cold_work_units_per_second",
        "throughput of a workload part over the cold window, as the report gives it (once "
        "the window is over)",
        labels=(*DEVICE_LABELS, "part", "unit"),
    )
    steady = GaugeMetricFamily(
        "soak_device_steady_work_units_per_second",
        "throughput of a workload part over the steady window so far, as the report takes "
        "it (once equilibrium is dated)",
        labels=(*DEVICE_LABELS, "part", "unit"),
    )
    for labels, d, _ in rows:
        for family, figures in ((rate, d.rates), (cold, d.cold), (steady, d.steady)):
            for r in figures:
                family.add_metric([*labels, r.part, r.unit], r.rate)
    yield from (rate, cold, steady)


def _state_metrics(rows: list[_Row], tally: dict[int, _DeviceTally]) -> Iterator[Metric]:
    """Clock-event reasons, XIDs, equilibrium and whether something fails the device."""
    active = GaugeMetricFamily(
        "soak_device_clock_event_active",
        "1 while the clock-event (throttle) reason is set on the device",
        labels=(*DEVICE_LABELS, "reason"),
    )
    seconds = CounterMetricFamily(
        "soak_device_clock_event_seconds",
        "time the clock-event (throttle) reason has been set during the run",
        labels=(*DEVICE_LABELS, "reason"),
    )
    xid = CounterMetricFamily("soak_device_xid_events", "XID events seen", labels=DEVICE_LABELS)
    eq = GaugeMetricFamily(
        "soak_device_equilibrium",
        "0 warming, 1 steady (equilibrium confirmed)",
        labels=DEVICE_LABELS,
    )
    eta = GaugeMetricFamily(
        "soak_device_equilibrium_eta_seconds",
        "predicted seconds until equilibrium is confirmed (0 once it is; absent before a fit)",
        labels=DEVICE_LABELS,
    )
    at = GaugeMetricFamily(
        "soak_device_equilibrium_time_seconds",
        "equilibrium time, seconds from the run's start",
        labels=DEVICE_LABELS,
    )
    failing = GaugeMetricFamily(
        "soak_device_failing",
        "1 once something fails the device: lost, its worker failed, or a HW slowdown, HW "
        "thermal or power brake after its warm-up; 0 so far (the verdict comes with the report)",
        labels=DEVICE_LABELS,
    )
    for labels, d, row in rows:
        t = tally.get(d.index, _DeviceTally())
        if row is not None and row.clock_reasons is not None:
            for reason in REASONS:
                on = row.clock_reasons & reason.value
                active.add_metric([*labels, _reason_label(reason)], 1.0 if on else 0.0)
        if t.reason_s is not None:
            for reason in REASONS:
                seconds.add_metric([*labels, _reason_label(reason)], t.reason_s[int(reason)])
        if d.reads_xids:  # a device that cannot report XIDs has no count, not 0
            xid.add_metric(labels, t.xid)
        eq.add_metric(labels, 1.0 if d.reached else 0.0)
        if d.eta_s is not None:
            eta.add_metric(labels, d.eta_s)
        if d.equilibrium_s is not None:
            at.add_metric(labels, d.equilibrium_s)
        bad = d.lost or d.failed or t.protection_after_warmup
        failing.add_metric(labels, 1.0 if bad else 0.0)
    yield from (active, seconds, xid, eq, eta, at, failing)


class MetricsExporter:
    """Serves the latest snapshot on ``http://ADDR:PORT/metrics`` for the whole run.

    The port is bound at construction, before the soak starts, so a port in use is a one-line
    configuration error and never a traceback an hour in. Port 0 picks a free one (``port``).
    """

    def __init__(self, port: int, addr: str = "127.0.0.1") -> None:
        self._state = _State()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(self._state))  # type: ignore[arg-type]
        try:
            self._server, self._thread = start_http_server(port, addr, registry=self.registry)
        except OSError as exc:
            raise ConfigError(
                f"--metrics-port {port}: cannot listen on {addr}:{port} ({exc.strerror or exc})"
            ) from None
        self.addr = addr
        self.port: int = self._server.server_port

    @property
    def url(self) -> str:
        host = f"[{self.addr}]" if ":" in self.addr else self.addr
        return f"http://{host}:{self.port}/metrics"

    def update(self, progress: Progress) -> None:
        self._state.add(progress)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
