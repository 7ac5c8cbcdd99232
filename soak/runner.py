"""The soak loop (DESIGN.md, The run).

Discover devices, record an idle baseline, start the load, then every tick: read telemetry,
drain work samples and events, append them to the store in one transaction, feed each
device's online equilibrium detector, and publish a frozen ``Progress`` snapshot to the
watchers (terminal view, exporter). Stop at the duration, at
steady state (``--until-steady``), on a signal or when every device's load has ended;
then analyse the store and write the report.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import datetime as dt
import logging
import math
import os
import platform
import signal
import socket
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from types import FrameType

import numpy as np

from soak import __version__
from soak.analysis.contention import FOREIGN_MIN_PCT
from soak.analysis.decision import (
    Decision,
    LiveStop,
    digest_work,
    digest_work_columns,
    verdict_eta_s,
)
from soak.analysis.equilibrium import Dated, OnlineDetector, Withdrawn
from soak.analysis.windows import LiveWork
from soak.bmc import BmcOptions, ServerSensors, open_bmc
from soak.clock import Clock, VirtualClock, WallClock
from soak.config import RunConfig
from soak.dataset import WorkColumns
from soak.devices import BackendOptions, open_backend
from soak.devices.base import Backend, Load, LoadUpdate
from soak.errors import ConfigError, StoreError
from soak.fields import INTEGER_COLUMNS
from soak.model import (
    INLET_SERIES,
    NOTABLE_REASONS,
    TELEMETRY_METRICS,
    Capability,
    ClockReason,
    DeviceInfo,
    Event,
    EventKind,
    StopReason,
    Telemetry,
)
from soak.progress import DeviceProgress, Phase, Progress, Rate, Watcher
from soak.record import Prediction, RunRecord, SimRecord, StopRecord
from soak.store import STORE_NAME, RunStore, make_run_dir
from soak.units import minutes
from soak.validity import Frozen, FrozenWatch, Implausible, cleaned, screen_all, screen_columns

log = logging.getLogger(__name__)


# Ticks a simulated run steps at once on the virtual clock (``Runner.tick_block``).
BLOCK_TICKS = 300
PREDICTED_AT_S = (300.0, 600.0)  # load times whose verdict prediction the report keeps

# A test's hook into the run: called each tick, once stored, with the runner and its snapshot.
RunnerHook = Callable[["Runner", Progress], None]


@dataclass(frozen=True, slots=True)
class RunResult:
    run_dir: Path
    stop_reason: StopReason


class Stopper:
    """SIGINT/SIGTERM: the first asks for a clean stop, a second one stops at once.

    "At once" is a KeyboardInterrupt, held back while a tick is being written so that a
    tick lands whole (``holding``); later signals are ignored while soak stops.
    """

    def __init__(self) -> None:
        self.reason: StopReason | None = None
        self.count = 0
        self._holding = False
        self._pending: str | None = None  # a second signal that came during a write

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.count += 1
        self.reason = StopReason.INTERRUPTED
        name = signal.Signals(signum).name
        if self.count == 1:
            _say(f"soak: {name}: stopping cleanly (again to stop at once)")
        elif self.count == 2:
            _say(f"soak: second {name}: stopping at once")
            if self._holding:
                self._pending = name
            else:
                raise KeyboardInterrupt(f"second {name}")

    def __enter__(self) -> None:
        """``with stopper:`` holds a stop-at-once back until the block ends."""
        self._holding = True

    def __exit__(self, *exc: object) -> None:
        self._holding = False
        if self._pending:
            name, self._pending = self._pending, None
            raise KeyboardInterrupt(f"second {name}")

    @contextmanager
    def installed(self) -> Iterator[Stopper]:
        previous = {s: signal.signal(s, self) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield self
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)


def _say(message: str) -> None:
    """One line on stderr from a signal handler: ``os.write``, since ``print`` would raise
    when the handler interrupts another write to the same stream."""
    with contextlib.suppress(OSError):
        os.write(2, (message + "\n").encode())


def host_info() -> dict[str, str | None]:
    def version(dist: str) -> str | None:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return None

    cpu = None
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(
                (line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), None
            )
    except OSError:
        pass  # no /proc: not Linux; the CPU is then simply not named
    return {
        "hostname": socket.gethostname(),
        "os": platform.platform(),
        "cpu": cpu or platform.processor() or None,
        "cpu_count": str(os.cpu_count()),
        "python": platform.python_version(),
        "soak": __version__,
        "torch": version("torch"),
        "nvidia_ml_py": version("nvidia-ml-py"),
        "numpy": version("numpy"),
    }


def run_host() -> str:
    """The host a run is filed under: Slurm's node name where soak runs as a Slurm task
    (two node daemons on one machine share one host name), else the machine's."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def open_configured_backend(config: RunConfig) -> Backend:
    options = BackendOptions(
        devices=config.devices,
        sim_gpus=config.sim_gpus,
        sim_sku=config.sim_sku,
        sim_faults=config.sim_faults,
        sim_sensors=config.sim_sensors,
        seed=config.seed or 0,
        cpu_ranks=config.ranks,
    )
    return open_backend(config.backend, options)


def open_server_sensors(options: BmcOptions, backend: Backend) -> ServerSensors:
    """The BMC a run reads its inlet from, probed: the one ``--bmc`` names, else the
    simulator's own on the sim backend, else in-band IPMI where there is one. A wrong
    ``--bmc-inlet-sensor`` is a ConfigError (it lists the sensors found)."""
    if options.host is None and backend.name == "sim":
        from soak.devices.sim import SimServer
        from soak.devices.sim.bmc import SimBmc

        if isinstance(backend, SimServer):
            return ServerSensors(SimBmc(backend), options.inlet_sensor)
    return ServerSensors(open_bmc(options), options.inlet_sensor, background=True)


def make_load(config: RunConfig, backend: Backend, devices: list[DeviceInfo]) -> Load:
    simulated = backend.simulated_load(config.workload)
    if simulated is not None:
        return simulated
    from soak.worker import WorkerPool
    from workloads.base import WorkloadOptions

    try:
        options = WorkloadOptions(**config.workload_options)
        return WorkerPool(
            devices,
            config.workload,
            options,
            heartbeat_timeout_s=config.heartbeat_timeout_s,
            seed=config.seed or 0,
            group=config.node_group,  # --across-nodes: the group the batch script exported
            host=run_host(),
        )
    except (TypeError, ValueError) as exc:  # the command line checks these first
        raise ConfigError(f"workload options: {exc}") from exc


def check_load(config: RunConfig, backend: Backend) -> None:
    """Raise ConfigError (exit 2) before anything is created when a CPU device cannot run the
    asked GEMM dtype (GPUs are checked in their workers: CUDA must not start here)."""
    dtype = config.workload_options.get("dtype")
    if not isinstance(dtype, str) or backend.name == "sim":
        return
    if not any(d.torch_device == "cpu" for d in backend.devices()):
        return
    import torch

    from workloads.device import check_dtype

    try:
        check_dtype(dtype, torch.device("cpu"))
    except ValueError as exc:
        raise ConfigError(f"--option {exc}") from exc


def equilibrium_event(t: float, device: int, change: Dated | Withdrawn, origin_s: float) -> Event:
    """The stored event for a change of a device's equilibrium state machine; its times in
    minutes since ``origin_s`` (the device's load start, in store seconds)."""
    if isinstance(change, Withdrawn):
        gone = change.withdrawal
        message = f"equilibrium withdrawn: {gone.describe(origin_s)}"
        return Event(
            t, EventKind.EQUILIBRIUM, message, device, {"time_s": None, "withdrawn_s": gone.time_s}
        )
    when = minutes(change.time_s - origin_s)
    message = f"equilibrium {when} after load start (basis {change.basis})"
    return Event(t, EventKind.EQUILIBRIUM, message, device, {"time_s": change.time_s})


class Runner:
    """One soak run: owns the store, the load and the detectors while it goes on."""

    def __init__(
        self,
        config: RunConfig,
        backend: Backend,
        clock: Clock,
        run_dir: Path,
        watchers: Sequence[Watcher] = (),
        on_tick: RunnerHook | None = None,
        sensors: ServerSensors | None = None,
        block_ticks: int | None = None,
    ) -> None:
        self.config = config
        # ticks a block may hold on the virtual clock (1: tick by tick)
        self.block_ticks = BLOCK_TICKS if block_ticks is None else block_ticks
        self.sensors = sensors
        self.backend = backend
        self.clock = clock
        self.run_dir = run_dir
        self.watchers = list(watchers)
        self.on_tick = on_tick
        self.host = run_host()
        self.capabilities = backend.capabilities()  # probed once, at the backend's start
        self.reads_xids = {
            i
            for i, table in self.capabilities.items()
            if table.get("xid_events") == Capability.SUPPORTED
        }
        self.devices = backend.devices()
        # On a virtual clock, commit ticks in groups of a tenth of a second of wall time.
        delay = 0.1 if isinstance(clock, VirtualClock) else 0.0
        self.store = RunStore.create(run_dir / STORE_NAME, max_commit_delay_s=delay)
        self.detectors = {d.index: OnlineDetector(config.profile.windows) for d in self.devices}
        self.load_start_by_device: dict[int, float] = {}
        self.live_work = {d.index: LiveWork(config.profile.windows) for d in self.devices}
        self.t0 = clock.now()
        self.load_started_s: float | None = None
        self.running_since_s: float | None = None  # every device has finished work
        self.inlet_c: float | None = None  # the BMC's latest inlet reading; None: not read
        self.lost: set[int] = set()  # devices the backend reported lost
        # devices whose readings froze under load (soak.validity): failed as a lost one is
        self.frozen: set[int] = set()
        self.freeze_watch = {d.index: FrozenWatch(d.index) for d in self.devices}
        self.power_limits = {d.index: d.power_limit_w for d in self.devices}
        self.latest: dict[int, Telemetry] = {}
        self.reasons_seen: dict[int, int] = {}  # notable clock-event reasons shown so far
        self.contended: set[int] = set()  # devices whose foreign load was named already
        self.latest_rate: dict[int, dict[str, Rate]] = {}
        self.load: Load | None = None
        self.phase = Phase.BASELINE
        self.stopper = Stopper()
        # --until-steady: the sequential stop, judged on what the online state holds
        self.stop: LiveStop | None = None
        self.stop_detail = ""  # why --until-steady stopped, for the stop record
        self.predictions: dict[float, float | None] = {}  # load s -> predicted verdict load s

    def now_s(self) -> float:
        return self.clock.now() - self.t0

    def record_start(self) -> None:
        config = self.config
        sim = SimRecord(
            gpus=config.sim_gpus,
            sku=config.sim_sku,
            faults=tuple(config.sim_faults),
            sensors=config.sim_sensors,
        )
        run = RunRecord(
            backend=self.backend.name,
            workload=config.workload,
            started_utc=dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            seed=config.seed,
            command=config.command,
            host=self.host,
            tags=config.tags,
            duration_asked_s=config.duration_s,
            until_steady=config.until_steady,
            interval_s=config.interval_s,
            t0_monotonic_s=None if isinstance(self.clock, VirtualClock) else self.t0,
            sim=sim if self.backend.name == "sim" else None,
            workload_options=config.workload_options,
        )
        self.store.set_meta(run=run.to_json(), host=host_info(), profile=config.profile.as_dict())
        if config.until_steady:
            self.stop = LiveStop(
                config.profile,
                run,
                self.devices,
                self.detectors,
                self.live_work,
                {i: {k: str(v) for k, v in t.items()} for i, t in self.capabilities.items()},
            )
        self.store.add_devices(self.devices)
        self.store.add_capabilities(self.capabilities)
        if self.sensors is not None:
            self.store.set_meta(bmc=self.sensors.probe.as_dict())
        message = (
            f"{len(self.devices)} device(s) on {self.backend.name}, workload {config.workload}"
        )
        self.store.append(events=[Event(self.now_s(), EventKind.RUN_START, message)])

    def tick(self, load: Load | None) -> None:
        """Read, store and digest one tick."""
        t = self.now_s()
        telemetry = self.backend.sample(t)
        server = self.sensors.sample(t) if self.sensors is not None else []
        for reading in server:
            if reading.series == INLET_SERIES:
                self.inlet_c = reading.value
        update = load.poll(t) if load is not None else LoadUpdate()
        events = self.backend.poll_events(t) + update.events
        # what is judged live leaves out readings that cannot be true; the store keeps them
        implausible = self.screen(telemetry)
        judged = _left_out(telemetry, implausible)
        events += self._digest(t, judged, update)
        if self.stop is not None:
            for row in judged:
                self.stop.add_reading(row)
            self.stop.forget(t)
        self._note_lost(events)
        with self.stopper:  # a tick lands whole, even on a second Ctrl-C
            self.store.append(
                telemetry,
                update.samples,
                events,
                update.sync_steps,
                update.server_steps,
                implausible,
                server,
            )
        # The snapshot costs a fifth of a simulated tick: built only where something reads
        # it (a watcher, the test hook, or a verdict prediction due now).
        if self.watchers or self.on_tick is not None or self._prediction_due(t):
            progress = self.progress(t, events)
            self._note_prediction(progress)
            self.publish(progress)

    def _note_lost(self, events: Sequence[Event]) -> None:
        """The devices these events say were lost, kept out of the stop's active set."""
        self.lost.update(
            e.device for e in events if e.kind is EventKind.DEVICE_LOST and e.device is not None
        )

    def _prediction_due(self, t: float) -> bool:
        """--until-steady: whether a ``PREDICTED_AT_S`` mark of load has passed unkept."""
        if self.running_since_s is None:
            return False
        return bool(self._marks_due(max(0.0, t - self.running_since_s)))

    def _marks_due(self, load_s: float) -> list[float]:
        """The ``PREDICTED_AT_S`` marks of load passed by ``load_s`` and not yet kept."""
        if not self.config.until_steady:
            return []
        return [m for m in PREDICTED_AT_S if load_s >= m and m not in self.predictions]

    def _note_prediction(self, progress: Progress) -> None:
        """--until-steady: keep the predicted load time of the verdict as it stood after
        ``PREDICTED_AT_S`` of load, for the report to set against the outcome."""
        load = progress.load_elapsed_s
        if load is None:
            return
        for mark in self._marks_due(load):
            eta = progress.verdict_eta_s
            self.predictions[mark] = None if eta is None else load + eta

    def progress(self, t: float, events: Sequence[Event] = ()) -> Progress:
        """The frozen snapshot of the run at ``t``: all a watcher may read."""
        failed = set(self.load.failed_devices()) if self.load is not None else set()
        devices = tuple(
            DeviceProgress(
                index=info.index,
                name=info.name,
                uuid=info.uuid,
                clock_label=info.clock_label,
                telemetry=self.latest.get(info.index),
                rates=tuple(
                    sorted(self.latest_rate.get(info.index, {}).values(), key=lambda r: r.part)
                ),
                cold=self._figures(info.index, self.live_work[info.index].cold(t)),
                steady=self._figures(
                    info.index,
                    self.live_work[info.index].steady(self.detectors[info.index].equilibrium_s, t),
                ),
                work_start_s=self.load_start_by_device.get(info.index),
                equilibrium_s=self.detectors[info.index].equilibrium_s,
                equilibrium_basis=self.detectors[info.index].basis,
                eta_s=self.detectors[info.index].eta_s(t)
                if info.index in self.load_start_by_device
                else None,
                verdict_eta_s=self.verdict_eta_s(info.index, t),
                lost=info.index in self.lost,
                failed=info.index in failed or info.index in self.frozen,
                frozen=info.index in self.frozen,
                reads_xids=info.index in self.reads_xids,
            )
            for info in self.devices
        )
        return Progress(
            t_s=t,
            phase=self.phase,
            backend=self.backend.name,
            workload=self.config.workload,
            host=self.host,
            planned_s=self.config.duration_s,
            until_steady=self.config.until_steady,
            load_start_s=self.load_started_s,
            running_since_s=self.running_since_s,
            devices=devices,
            events=tuple(events),
            inlet_c=self.inlet_c,
        )

    def verdict_eta_s(self, index: int, t: float) -> float | None:
        """--until-steady: predicted seconds until the device's checks can be decided."""
        if not self.config.until_steady or index not in self.load_start_by_device:
            return None
        return verdict_eta_s(self.detectors[index], t, self.config.profile.windows)

    def _figures(self, index: int, rates: dict[str, float | None]) -> tuple[Rate, ...]:
        work = self.live_work[index]
        return tuple(
            Rate(part, rate, work.unit(part))
            for part, rate in sorted(rates.items())
            if rate is not None
        )

    def publish(self, progress: Progress) -> None:
        """Hand the snapshot to the test hook, then to every watcher. A watcher that raises is
        logged and dropped: watching must never stop a soak."""
        if self.on_tick is not None:
            self.on_tick(self, progress)
        for watcher in list(self.watchers):
            try:
                watcher.update(progress)
            except Exception:
                log.exception("a progress watcher failed and is dropped: %r", watcher)
                self.watchers.remove(watcher)

    def _digest(self, t: float, telemetry: list[Telemetry], update: LoadUpdate) -> list[Event]:
        events = self._watch_freeze(telemetry)
        for row in telemetry:
            self.latest[row.device] = row
            events += self._clock_events(row) + self._contention_event(row)
            self.detectors[row.device].add_telemetry(
                row.t_s, row.temp_c, row.power_w, row.sm_clock_mhz
            )
        # the work into the live figures and the detectors, as a replayed stop takes it
        digest_work(t, update.samples, self.detectors, self.live_work, self.load_start_by_device)
        for s in update.samples:
            if s.device in self.detectors and s.t_end_s > s.t_start_s:
                self.latest_rate.setdefault(s.device, {})[s.part] = Rate(s.part, s.rate, s.unit)
        for index, detector in self.detectors.items():
            for change in detector.update(t):
                events.append(equilibrium_event(t, index, change, self.origin_s(index)))
        return events

    def _clock_events(self, row: Telemetry) -> list[Event]:
        """The first reading of each notable clock-event reason on a device, as an event:
        what the live view announces is in the report's event log too."""
        if row.clock_reasons is None:
            return []
        seen = self.reasons_seen.get(row.device, 0)
        new = row.clock_reasons & NOTABLE_REASONS & ~seen
        if not new:
            return []
        self.reasons_seen[row.device] = seen | new
        message = f"clock event: {', '.join(ClockReason(new).names())}"
        return [Event(row.t_s, EventKind.CLOCK_EVENT, message, row.device, {"bits": new})]

    def _contention_event(self, row: Telemetry) -> list[Event]:
        """The first reading of other work on a device (a CPU: the host's busy time less
        soak's own), as a warning event: named live from the first second, the baseline
        included, as the analysis names it in the verdict."""
        load = row.foreign_load_pct
        if load is None or load < FOREIGN_MIN_PCT or row.device in self.contended:
            return []
        self.contended.add(row.device)
        when = "before the load started" if self.phase is Phase.BASELINE else "during the load"
        message = (
            f"host contention: other work used {load:.0f} % of the host's CPU time {when} "
            "(soak's own processes left out); figures taken beside it are not the device's alone"
        )
        details = {"contention": "host", "foreign_load_pct": load}
        return [Event(row.t_s, EventKind.WARNING, message, row.device, details)]

    def origin_s(self, device: int) -> float:
        """Where a device's event texts count from: its load start as the analysis finds it
        (every part's first unit of work done), else the run's start."""
        start = self.live_work[device].load_start_s if device in self.live_work else None
        return start if start is not None else self.load_start_by_device.get(device, 0.0)

    def screen(self, telemetry: list[Telemetry]) -> list[Implausible]:
        """The readings of this tick that cannot be true (``soak.validity``)."""
        return screen_all(telemetry, self.power_limits)

    def _watch_freeze(self, telemetry: list[Telemetry]) -> list[Event]:
        """A device whose must-move readings hold still while its load runs is failed, with
        the span and the repeated values; the rest of the server goes on."""
        if self.load is None or self.phase is not Phase.LOAD:
            return []
        failed = self.load.failed_devices()
        events = []
        for row in telemetry:
            device = row.device
            if device in self.frozen or device not in self.freeze_watch:
                continue
            loaded = device in self.load_start_by_device and device not in failed
            values = {"power_w": row.power_w, "temp_c": row.temp_c, "energy_j": row.energy_j}
            found = self.freeze_watch[device].add(row.t_s, values, loaded)
            if found is not None:
                self.frozen.add(device)
                text = found.describe(self.origin_s(device))
                events.append(Event(row.t_s, EventKind.TELEMETRY, text, device, found.as_dict()))
        return events

    def active_devices(self, load: Load) -> set[int]:
        """Devices still under test: not failed by their load, not lost to the backend, not
        frozen."""
        return (
            {d.index for d in self.devices} - set(load.failed_devices()) - self.lost - self.frozen
        )

    def should_stop(self, load: Load, stopper: Stopper) -> StopReason | None:
        if stopper.reason:
            return stopper.reason
        active = self.active_devices(load)
        if not active:
            return StopReason.ERROR
        t = self.now_s()
        if self.running_since_s is None:
            if active <= set(self.load_start_by_device):
                self.running_since_s = t
            return None
        if self.config.until_steady:
            limit_s = min(self.config.duration_s, self.config.max_s)
            if t - self.running_since_s >= limit_s:
                self._keep_decision(self._decide(active, t), limit_s)
                return StopReason.DURATION
            if self.stop is not None and self.stop.due(active, t):
                decision = self._decide(active, t)
                if decision.decided:
                    self._keep_decision(decision, None)
                    return StopReason.STEADY
        elif t - self.running_since_s >= self.config.duration_s:
            return StopReason.DURATION
        return None

    def _decide(self, active: set[int], t: float) -> Decision:
        """The sequential stop's look at ``t`` (soak.analysis.decision) on what the online
        state holds: nothing is read back from the store."""
        assert self.stop is not None  # --until-steady
        return self.stop.decide(active, t)

    def _load_s(self, t: float) -> float | None:
        """Seconds of load at ``t``, counted as the plan counts them."""
        return None if self.running_since_s is None else t - self.running_since_s

    def _keep_decision(self, decision: Decision, limit_s: float | None) -> None:
        """Store the decision the run stopped on; ``limit_s``: it stopped at its limit."""
        predicted = tuple(Prediction(mark, self.predictions.get(mark)) for mark in PREDICTED_AT_S)
        found = decision.record(limit_s)
        actual = self._load_s(decision.t_s)
        self.store.set_stop_decision(
            dataclasses.replace(found, predicted=predicted, actual_load_s=actual)
        )
        decided = "every check decided" if decision.decided else "checks undecided"
        self.stop_detail = decided if limit_s is None else f"the {limit_s / 60:g}-min limit"

    def run(self, stopper: Stopper) -> StopReason:
        """Baseline, load and loop; then stop the load, record why and close the store,
        whatever happened.

        A store that cannot be written (disk full) stops the load with reason "error"; the
        store keeps every tick committed before. A KeyboardInterrupt (a second Ctrl-C) kills
        the workers without waiting, records the stop where it can and is raised again.
        """
        self.stopper = stopper
        reason, detail = StopReason.ERROR, ""
        try:
            try:
                reason = self._soak(stopper)
                t_stop = self.now_s()
                self.phase = Phase.STOPPING
                self.publish(self.progress(t_stop))
                if self.load is not None:
                    self._stop_load(self.load, store_ok=True)
            except StoreError as exc:
                log.error("%s", exc)
                print(f"soak: {exc}; stopping the load", file=sys.stderr)
                reason, detail, t_stop = StopReason.ERROR, str(exc), self.now_s()
                if self.load is not None:
                    self._stop_load(self.load, store_ok=False)
            self._record_stop(reason, detail or self.stop_detail, t_stop)
        except StoreError as exc:
            print(f"soak: {exc}; the store keeps every tick before it", file=sys.stderr)
        except BaseException as exc:
            self._abort(exc)
            raise
        finally:
            self._close()
        return reason

    def _soak(self, stopper: Stopper) -> StopReason:
        self.record_start()
        self._baseline(stopper)
        if stopper.reason:
            return stopper.reason
        self.load = make_load(self.config, self.backend, self.devices)
        self.phase = Phase.LOAD
        self.load_started_s = self.now_s()
        self.store.set_meta(load_start_s=self.load_started_s)
        if self.stop is not None:
            self.stop.load_started(self.load_started_s)
        message = f"load {self.config.workload} started"
        self.store.append(events=[Event(self.load_started_s, EventKind.LOAD_START, message)])
        group = self.load.start(self.t0)  # a multi-node ddp group's rank map
        if group is not None:
            self.store.set_meta(ddp_group=group.to_json())
        return self._loop(self.load, stopper)

    def _baseline(self, stopper: Stopper) -> None:
        end = self.now_s() + self.config.baseline_s
        self.store.append(events=[Event(self.now_s(), EventKind.BASELINE_START, "idle baseline")])
        while self.now_s() < end and not stopper.reason:
            times = self._block_times(None, end)
            if times:
                self.tick_block(None, times)
            else:
                self.tick(None)
            self._sleep_to_next_tick()

    def _loop(self, load: Load, stopper: Stopper) -> StopReason:
        while True:
            times = self._block_times(load)
            if times:
                self.tick_block(load, times)
            else:
                self.tick(load)
            reason = self.should_stop(load, stopper)
            if reason:
                return reason
            self._sleep_to_next_tick()

    def _block_times(self, load: Load | None, end_s: float | None = None) -> list[float]:
        """The ticks the next block may step (a virtual clock and a simulated server: up to
        ``BLOCK_TICKS``, each where a tick by tick loop would take it, the last the one the
        run stops after); [] where this tick is taken alone: a real clock (a killed run
        loses at most one tick), a test's hook (it acts on each tick), ``--until-steady``
        (a look may fall on any tick), a load not yet running everywhere, a backend that
        cannot step in blocks now."""
        step_block = getattr(self.backend, "step_block", None)
        if (
            self.block_ticks < 2
            or not isinstance(self.clock, VirtualClock)
            or step_block is None
            or not self.backend.block_ready()  # type: ignore[attr-defined]
            or self.on_tick is not None
            or self.config.until_steady
        ):
            return []
        if load is not None:
            if getattr(load, "server", None) is not self.backend or self.running_since_s is None:
                return []
            end_s = self.running_since_s + self.config.duration_s
        clock, interval = VirtualClock(self.clock.now()), self.config.interval_s
        times: list[float] = []
        while len(times) < self.block_ticks:
            t = clock.now() - self.t0
            if load is None and end_s is not None and t >= end_s:  # the baseline's end
                break
            times.append(t)
            if load is not None and end_s is not None and t >= end_s:  # the run's last
                break
            clock.sleep((t // interval + 1) * interval - t)
        return times

    def tick_block(self, load: Load | None, times: list[float]) -> None:
        """Step, store and digest many ticks at once (``_block_times``): the simulated
        server reads them as columns (``SimServer.step_block``: the block ends early at a
        tick where anything but the physics happens), screened over the columns, digested
        as the ticks would be one at a time (the same events at the same times, the same
        detectors' checks, the same live figures), written with one ``append_block``, and
        one ``Progress`` published. The clock ends at the block's last tick."""
        readings: list = []

        def each(t: float) -> None:
            for reading in self.sensors.sample(t) if self.sensors is not None else []:
                readings.append(reading)
                if reading.series == INLET_SERIES:
                    self.inlet_c = reading.value

        block = self.backend.step_block(times, each)  # type: ignore[attr-defined]
        done = block.times
        for _ in done[1:]:
            self._sleep_to_next_tick()
        t = done[-1]
        at = {tick: k for k, tick in enumerate(done)}
        # what the backend and the load said, at the block's last tick (the only one where
        # either can say anything: ``step_block``)
        said = self.backend.poll_events(t) + block.events
        telemetry = block.telemetry
        implausible = [
            found
            for device, columns in telemetry.items()
            for found in screen_columns(device, columns, self.power_limits.get(device))
        ]
        judged = _columns_left_out(telemetry, implausible)
        ordered = [(len(done) - 1, 0, e) for e in said]
        ordered += self._digest_block(done, at, judged, block.work)
        if self.stop is not None:  # what a look would judge (none is made within a block)
            for device, columns in judged.items():
                self.stop.add_columns(device, columns)
            self.stop.forget(t)
        ordered.sort(key=lambda item: (item[0], item[1]))
        events = [e for _, _, e in ordered]
        self._note_lost(events)
        with self.stopper:  # a block lands whole, even on a second Ctrl-C
            self.store.append_block(
                telemetry,
                block.work,
                events,
                implausible=implausible,
                server_readings=readings,
            )
        if self.watchers:
            self.publish(self.progress(t, events))

    def _digest_block(
        self,
        times: list[float],
        at: dict[float, int],
        telemetry: dict[int, dict[str, np.ndarray]],
        work: Sequence[WorkColumns],
    ) -> list[tuple[int, int, Event]]:
        """``_digest`` of a block: its events, each with the index of the tick it comes at
        and its place among that tick's (the freeze watch, then each reading's clock and
        contention events, then the equilibrium's), as a tick by tick loop stores them."""
        out: list[tuple[int, int, Event]] = []
        failed_before = set(self.load.failed_devices()) if self.load is not None else set()
        failed_after = failed_before
        for device, columns in telemetry.items():
            t = columns["t_s"]
            if device in self.freeze_watch and device not in self.frozen:
                found = self._watch_freeze_block(device, columns, failed_before, failed_after)
                if found is not None:
                    self.frozen.add(device)
                    text = found.describe(self.origin_s(device))
                    row_t = found.to_s
                    out.append(
                        (
                            at[row_t],
                            1,
                            Event(row_t, EventKind.TELEMETRY, text, device, found.as_dict()),
                        )
                    )
            self.latest[device] = _last_reading(device, columns)
            out += [(at[e.t_s], 2, e) for e in self._clock_events_block(device, columns)]
            out += [(at[e.t_s], 2, e) for e in self._contention_block(device, columns)]
            nan = np.full(t.size, np.nan)
            self.detectors[device].add_columns(
                t,
                columns.get("temp_c", nan),
                columns.get("power_w", nan),
                columns.get("sm_clock_mhz", nan),
            )
        digest_work_columns(
            times[-1], work, self.detectors, self.live_work, self.load_start_by_device
        )
        for part in work:
            if part.device in self.detectors and part.size:
                took = part.t_end_s > part.t_start_s
                if took.any():
                    rate = float(part.work[took][-1] / (part.t_end_s - part.t_start_s)[took][-1])
                    self.latest_rate.setdefault(part.device, {})[part.part] = Rate(
                        part.part, rate, part.unit
                    )
        # each detector's update at every tick, skipping the ticks before it is due (where
        # an update does nothing: ``OnlineDetector.due_s``)
        for index, detector in self.detectors.items():
            k = bisect.bisect_left(times, detector.due_s())
            while k < len(times):
                tick = times[k]
                for change in detector.update(tick):
                    event = equilibrium_event(tick, index, change, self.origin_s(index))
                    out.append((k, 3, event))
                k = max(k + 1, bisect.bisect_left(times, detector.due_s()))
        return out

    def _watch_freeze_block(
        self,
        device: int,
        columns: dict[str, np.ndarray],
        failed_before: set[int],
        failed_after: set[int],
    ) -> Frozen | None:
        """``_watch_freeze`` of one device's block of readings."""
        if self.load is None or self.phase is not Phase.LOAD:
            return None
        t = columns["t_s"]
        started = device in self.load_start_by_device
        loaded = np.full(t.size, started and device not in failed_before)
        loaded[-1] = started and device not in failed_after
        return self.freeze_watch[device].add_block(t, columns, loaded)

    def _clock_events_block(self, device: int, columns: dict[str, np.ndarray]) -> list[Event]:
        """``_clock_events`` of one device's block of readings."""
        reasons = columns.get("clock_reasons")
        if reasons is None:
            return []
        read = ~np.isnan(reasons)
        bits = np.where(read, reasons, 0).astype(np.int64) & NOTABLE_REASONS
        seen = self.reasons_seen.get(device, 0)
        out = []
        while True:
            fresh = np.flatnonzero(read & ((bits & ~seen) != 0))
            if not fresh.size:
                break
            k = int(fresh[0])
            new = int(bits[k]) & ~seen
            seen |= new
            self.reasons_seen[device] = seen
            message = f"clock event: {', '.join(ClockReason(new).names())}"
            t = float(columns["t_s"][k])
            out.append(Event(t, EventKind.CLOCK_EVENT, message, device, {"bits": new}))
        return out

    def _contention_block(self, device: int, columns: dict[str, np.ndarray]) -> list[Event]:
        """``_contention_event`` of one device's block of readings."""
        load = columns.get("foreign_load_pct")
        if load is None or device in self.contended:
            return []
        with np.errstate(invalid="ignore"):
            over = np.flatnonzero(~np.isnan(load) & (load >= FOREIGN_MIN_PCT))
        if not over.size:
            return []
        k = int(over[0])
        row = _last_reading(device, {name: values[k : k + 1] for name, values in columns.items()})
        return self._contention_event(row)

    def _sleep_to_next_tick(self) -> None:
        interval = self.config.interval_s
        t = self.now_s()
        next_tick = (t // interval + 1) * interval
        self.clock.sleep(next_tick - t)

    def _stop_load(self, load: Load, store_ok: bool) -> LoadUpdate:
        try:
            update = load.stop(self.now_s())
        except Exception as exc:  # a failing stop must not lose the run's data
            log.exception("stopping the load failed")
            update = LoadUpdate(
                events=[Event(self.now_s(), EventKind.WARNING, f"load stop failed: {exc}")]
            )
        if store_ok:
            self.store.append(
                samples=update.samples,
                events=update.events,
                sync_steps=update.sync_steps,
                server_steps=update.server_steps,
            )
        return update

    def _abort(self, exc: BaseException) -> None:
        """Stop at once: kill the load without waiting for it and record the stop where the
        store still takes it. The exception in flight is the one to report."""
        try:
            if self.load is not None:
                update = self.load.kill(self.now_s())
                self.store.append(
                    samples=update.samples,
                    events=update.events,
                    sync_steps=update.sync_steps,
                    server_steps=update.server_steps,
                )
            if isinstance(exc, KeyboardInterrupt):
                self._record_stop(StopReason.INTERRUPTED, "stopped at once", self.now_s())
            else:
                self._record_stop(StopReason.ERROR, f"{type(exc).__name__}: {exc}", self.now_s())
        except Exception:
            log.exception("stopping at once after %r", exc)

    def _record_stop(self, reason: StopReason, detail: str, t_stop: float) -> None:
        duration = None if self.load_started_s is None else t_stop - self.load_started_s
        message = f"stopped: {reason}" + (f" ({detail})" if detail else "")
        self.store.append(events=[Event(self.now_s(), EventKind.STOP, message)])
        record = StopRecord(reason, load_stop_s=t_stop, duration_s=duration, detail=detail)
        self.store.set_meta(stop=record.to_json())

    def _close(self) -> None:
        try:
            self.store.close()
        except StoreError as exc:
            print(f"soak: {exc}; the store keeps every tick before it", file=sys.stderr)
        finally:
            for watcher in self.watchers:
                try:
                    watcher.close()
                except Exception:
                    log.exception("closing a progress watcher failed: %r", watcher)


def _columns_left_out(
    telemetry: dict[int, dict[str, np.ndarray]], found: list[Implausible]
) -> dict[int, dict[str, np.ndarray]]:
    """The columns with the readings ``found`` left out (NaN)."""
    if not found:
        return telemetry
    out = {device: dict(columns) for device, columns in telemetry.items()}
    for f in found:
        columns = out[f.device]
        values = columns[f.field] = np.array(columns[f.field], dtype=float)
        values[columns["t_s"] == f.t_s] = np.nan
    return out


def _last_reading(device: int, columns: dict[str, np.ndarray]) -> Telemetry:
    """A device's last reading of a block of columns, as a ``Telemetry`` (None: not read)."""
    values: dict[str, float | int | None] = {}
    for name in TELEMETRY_METRICS:
        column = columns.get(name)
        value = None if column is None else float(column[-1])
        if value is not None and math.isnan(value):
            value = None
        if value is not None and name in INTEGER_COLUMNS:
            value = int(value)
        values[name] = value
    return Telemetry(device, float(columns["t_s"][-1]), **values)


def _left_out(telemetry: list[Telemetry], found: list[Implausible]) -> list[Telemetry]:
    """The rows with the readings ``found`` left out (None)."""
    if not found:
        return telemetry
    return [cleaned(row, [f for f in found if f.device == row.device]) for row in telemetry]


def run(
    config: RunConfig,
    *,
    backend: Backend | None = None,
    clock: Clock | None = None,
    watchers: Sequence[Watcher] = (),
    on_tick: RunnerHook | None = None,
    block_ticks: int | None = None,
) -> RunResult:
    """Run one soak and leave its store in a new run folder; the caller builds the report.

    ``watchers`` see each tick's ``Progress`` snapshot (the CLI passes the terminal view and
    the exporter); ``on_tick`` is for tests that act on the run itself (kill a worker, fill
    the disk) and gets the runner with the snapshot. ``block_ticks``: the most ticks a block
    holds on the virtual clock (``BLOCK_TICKS``; 1 steps tick by tick, as a real clock does,
    and leaves the store a real run's layout)."""
    backend = backend or open_configured_backend(config)
    sensors: ServerSensors | None = None
    try:
        check_load(config, backend)
        if clock is None:
            clock = VirtualClock() if backend.name == "sim" else WallClock()
        sensors = open_server_sensors(config.bmc, backend)
        if config.bmc.host is not None:
            print(f"soak: {sensors.probe.line}", file=sys.stderr)
        run_dir = make_run_dir(config.out, run_host(), dt.datetime.now(dt.UTC))
        with Stopper().installed() as stopper:
            runner = Runner(
                config, backend, clock, run_dir, watchers, on_tick, sensors, block_ticks
            )
            try:
                reason = runner.run(stopper)
            except KeyboardInterrupt:
                print(
                    f"soak: stopped at once; the store in {run_dir} is closed and "
                    f"`soak report {run_dir}` builds its report",
                    file=sys.stderr,
                )
                raise
    finally:
        backend.close()
        if sensors is not None:
            sensors.close()
    return RunResult(run_dir, reason)
