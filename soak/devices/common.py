"""What the vendor backends (NVML, amdsmi) share: the one door to a binding, the declared
reads, the capability probe, the per-tick snapshot, and lost-device marking, written once;
plus what a failed read means for a metric, which readings are plausible, logging each
problem once (not once per sample for two hours, STYLE.md), and the named fallback for
energy without a counter. A backend module keeps only its vendor calls and tables.

What "supported" means, for every backend: at the probe, a way of reading a metric is
supported on a device only when it answers **with a usable value**: no error, no sentinel
("N/A", all-ones, 0 °C), nothing implausible. A function that answers with a sentinel for
this device is *not supported* there, exactly as one that raises NotSupported, and the next
way is tried. So the capability table never calls a metric readable on the strength of a
"no reading" answer, and a better way behind a sentinel is not hidden. Any failure at the probe
other than no permission or a missing function (after a check that the device is alive) also
counts as not supported for that read. Mid-run, a planned read that fails or answers a
sentinel is one missing reading (None), never a value.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from soak.errors import ConfigError, FunctionMissing, GpuLost, NoPermission, NotSupported, SoakError
from soak.model import Capability, DeviceInfo, Event, EventKind, Telemetry

SUPPORTED = Capability.SUPPORTED
NOT_SUPPORTED = Capability.NOT_SUPPORTED

# A read that failed with one of these says the metric cannot be read on this device; any
# other failure is one missing reading of a readable metric.
CAPABILITY_OF: dict[type[SoakError], Capability] = {
    NotSupported: Capability.NOT_SUPPORTED,
    NoPermission: Capability.NO_PERMISSION,
    FunctionMissing: Capability.MISSING,
}


def why_not(failures: Iterable[Capability]) -> Capability:
    """The most useful reason among failed ways: permission, then support, then missing."""
    seen = set(failures)
    for cap in (Capability.NO_PERMISSION, Capability.NOT_SUPPORTED):
        if cap in seen:
            return cap
    return Capability.MISSING


def clean_number(v: float, sentinels: frozenset[int]) -> float | None:
    """A number from a vendor binding, or None for the binding's 'not available' sentinels
    and for numbers no reading can be: negative, not finite, or at the top of a 64-bit range
    (such as the ~9.2e18 an HBM sensor without a reading gives)."""
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return None if v in sentinels or not 0 <= v < 2**63 - 1 else v
    return v if math.isfinite(v) and 0 <= v < 9e18 else None


# Plausible readings, per kind of metric: a value outside is a sensor fault, read as None.


def any_value(v: float) -> bool:
    return True


def temp_ok(v: float) -> bool:
    """0 °C is 'no sensor' (NVML's HBM reading); anything over 200 °C is garbage (e.g. ~9.2e18)."""
    return 0 < v <= 200


def positive(v: float) -> bool:
    return v > 0


def pct(v: float) -> bool:
    return 0 <= v <= 100


def own_pids(root: Path = Path("/"), pid: int | None = None) -> frozenset[int]:
    """soak's own processes: this one (or ``pid``) and its descendants, found through each
    one's main-thread ``children`` file (soak starts its workers from its main thread); a
    process that ends between two reads is left out."""
    found: set[int] = set()
    todo = [os.getpid() if pid is None else pid]
    while todo:
        p = todo.pop()
        found.add(p)
        try:
            with open(root / f"proc/{p}/task/{p}/children", "rb") as f:
                todo += [int(c) for c in f.read().split() if int(c) not in found]
        except (OSError, ValueError):
            continue
    return frozenset(found)


@dataclass(frozen=True, slots=True)
class ComputeProcess:
    """One compute process the driver lists on a device; None where it does not say."""

    pid: int
    name: str | None = None
    used_mib: float | None = None


class ForeignProcesses:
    """The compute processes on each device that are not soak's, from the driver's lists.

    The driver's pids are trusted once it has listed one of soak's own processes on any
    device: before that (the baseline, before any worker has a context), or in a container
    whose pid namespace is not the driver's, no foreign figure is given (None), never 0.
    Each foreign process is announced once per device, with its pid, name and memory."""

    def __init__(self, names: Callable[[int], str | None] = lambda pid: None) -> None:
        self._names = names
        self._agree = False
        self._seen: dict[int, set[int]] = {}

    def read(
        self, device: int, listed: Sequence[ComputeProcess] | None, t_s: float
    ) -> tuple[int | None, float | None, list[Pending]]:
        """(foreign processes, their memory in MiB, events for the newly seen) this tick."""
        if listed is None:
            return None, None, []
        own = own_pids()
        self._agree = self._agree or any(p.pid in own for p in listed)
        if not self._agree:
            return None, None, []
        foreign = [p for p in listed if p.pid not in own]
        seen = self._seen.setdefault(device, set())
        events = []
        for p in foreign:
            if p.pid in seen:
                continue
            seen.add(p.pid)
            name = p.name or self._names(p.pid)
            mem = f", {p.used_mib:.0f} MiB" if p.used_mib is not None else ""
            message = f"another process on the device: pid {p.pid}{f' ({name})' if name else ''}"
            details = {"pid": p.pid, "name": name, "used_mib": p.used_mib}
            events.append(Pending(EventKind.FOREIGN_PROCESS, message + mem, device, details, t_s))
        known = [p.used_mib for p in foreign if p.used_mib is not None]
        mem_mib = float(sum(known)) if len(known) == len(foreign) else None
        return len(foreign), mem_mib, events


@dataclass(frozen=True, slots=True)
class Call:
    """One vendor function with constant arguments, by their names in the binding (resolved
    when called, so a binding without one makes a missing function, not an import error)."""

    func: str
    args: tuple[str, ...] = ()
    kwargs: tuple[tuple[str, str], ...] = ()

    @property
    def key(self) -> str:
        """The name of this read in capability tables and raw probe dumps."""
        parts = [*self.args, *(f"{k}={v}" for k, v in self.kwargs)]
        return f"{self.func}({', '.join(parts)})"


def _same(v: Any) -> Any:
    return v


@dataclass(frozen=True, slots=True)
class Way:
    """One way to read a value: the reads it needs (`Call`s, or a backend's own kind, such as
    NVML's batched field values) and how their answers become the value."""

    reads: tuple[Any, ...]
    convert: Callable[..., Any] = _same
    unit: str = ""  # the vendor unit and its conversion, for readers of the table

    @property
    def label(self) -> str:
        return " + ".join(r.key for r in self.reads)


def by_call(func: str, *args: str, convert: Callable[..., Any] = _same, unit: str = "") -> Way:
    """A way that is one vendor call, ``args`` named as the binding names them."""
    return Way((Call(func, args),), convert, unit)


@dataclass(frozen=True, slots=True)
class Metric:
    """A ``Telemetry`` (or ``DeviceInfo``) field and the backend's ways to read it, best first:
    the probe keeps, per device, the first way that answers with a usable value."""

    name: str
    ways: tuple[Way, ...]
    plausible: Callable[[Any], bool] = any_value
    integer: bool = False  # a count or bitmask: read as int
    raw: bool = False  # raw material for per-device state (a tuple), passed on unchecked

    def accept(self, value: Any, label: str, log_once: LogOnce) -> Any:
        """A converted reading as soak's value: None, text and raw values pass; a value that
        is no number, or a number this metric cannot have, is logged once and read as None."""
        if value is None or isinstance(value, str) or self.raw:
            return value
        if not isinstance(value, int | float) or not self.plausible(value):
            log_once(
                label,
                "implausible",
                f"{log_once.prefix}: {self.name} read {value!r} from {label}: "
                "not plausible, read as None",
            )
            return None
        return int(value) if self.integer else value


class LogOnce:
    """Logs a message the first time its ``(what, problem)`` key is seen, never again. The
    set of keys is bounded, so a flapping device cannot grow it without end; when it is
    full, one last line says that logging stopped. Thread-safe (the XID thread logs too)."""

    MAX_LOGGED = 256

    def __init__(self, logger: logging.Logger, prefix: str) -> None:
        self._log = logger
        self.prefix = prefix
        self._logged: set[tuple[str, str]] = set()
        self._lock = threading.Lock()
        self._full = False

    def __call__(self, what: str, problem: str, message: str, level: int = logging.INFO) -> None:
        key = (what, problem)
        with self._lock:
            if key in self._logged:
                return
            if len(self._logged) >= self.MAX_LOGGED:
                if self._full:
                    return
                self._full = True
                message = f"{self.prefix}: too many distinct problems, logging no more"
                level = logging.WARNING
            else:
                self._logged.add(key)
        self._log.log(level, "%s", message)

    def __len__(self) -> int:
        return len(self._logged)


def failed_read(
    log_once: LogOnce, key: str, exc: SoakError, error: str, where: str = ""
) -> Capability:
    """What a failed read means, logged once per read and problem: not supported, no
    permission (a WARNING: an operator can fix it) or missing for its metric; SUPPORTED for
    one missing reading of a readable metric (a WARNING per vendor error). ``error`` is the
    vendor's name for the failure, ``where`` e.g. " on device 3"."""
    cap = CAPABILITY_OF.get(type(exc), Capability.SUPPORTED)
    if cap is Capability.SUPPORTED:
        message = f"{log_once.prefix}: {key} failed{where} ({exc}); this reading is missing"
        log_once(key, error, message, logging.WARNING)
    else:
        why = exc if cap is Capability.MISSING else error
        level = logging.WARNING if cap is Capability.NO_PERMISSION else logging.INFO
        log_once(key, cap.value, f"{log_once.prefix}: {key} {cap.value}{where} ({why})", level)
    return cap


def confirm_alive(index: int, read: Callable[[], object]) -> None:
    """After an ambiguous failure (NVML's 'Unknown Error', amdsmi's I/O errors): a device
    that fails ``read``, one every live device answers, for any reason but support or
    permission is lost (GpuLost); otherwise the failure was a one-off."""
    try:
        read()
    except (NotSupported, NoPermission, FunctionMissing):
        return
    except SoakError as exc:
        raise GpuLost(index, f"stopped answering ({exc})") from exc


@dataclass(slots=True)
class EnergyIntegrator:
    """Energy integrated from power (trapezoid rule): the named fallback where a device has
    no energy counter (recorded as Capability.FALLBACK)."""

    total_j: float = 0.0
    last: tuple[float, float] | None = None

    def add(self, t_s: float, power_w: float | None) -> float | None:
        if power_w is None:
            return None
        if self.last is not None and t_s > self.last[0]:
            t0, p0 = self.last
            self.total_j += (t_s - t0) * (p0 + power_w) / 2
        self.last = (t_s, power_w)
        return self.total_j


# --------------------------------------------------------------------------------------------
# The one door to a vendor binding.


class Query:
    """Calls a vendor binding, translates its errors, and logs each problem once (a bounded
    set). The binding is looked up at each call, so tests can patch it where it is imported."""

    def __init__(
        self,
        log_once: LogOnce,
        package: str,
        binding: Callable[[], Any],
        error_class: Callable[[], type[Exception]],
        translate: Callable[[Exception, str, int | None], SoakError],
    ) -> None:
        self.log_once = log_once
        self._package = package
        self._binding = binding
        self._error_class = error_class
        self._translate = translate

    def call(self, func: str, *args: Any, device: int | None = None, **kwargs: Any) -> Any:
        """``<binding>.<func>(*args, **kwargs)``; any vendor error is raised as soak's."""
        try:
            fn = getattr(self._binding(), func)
        except AttributeError as exc:
            raise FunctionMissing(f"{func}: not in this {self._package}") from exc
        try:
            return fn(*args, **kwargs)
        except self._error_class() as exc:
            raise self._translate(exc, func, device) from exc

    def constant(self, path: str) -> Any:
        """A binding constant by (dotted) name, ``"AmdSmiClkType.GFX"``; a plain number is
        itself; one the binding lacks counts as a missing function."""
        if path.isdigit():
            return int(path)
        value: Any = self._binding()
        try:
            for part in path.split("."):
                value = getattr(value, part)
        except AttributeError as exc:
            raise FunctionMissing(f"{path}: not in this {self._package}") from exc
        return value


# --------------------------------------------------------------------------------------------
# Answers, devices, events.


@dataclass(frozen=True, slots=True)
class Answer:
    """What one read returned: a value, or None and why."""

    value: Any = None
    capability: Capability = SUPPORTED
    error: str | None = None  # the vendor's name for the failure when the read failed
    value_type: int | None = None  # the binding's type tag, where it gives one (NVML fields)


@dataclass(slots=True, eq=False)
class Device:
    """One vendor device and what the probe decided for it."""

    index: int = -1  # soak's index
    handle: Any = None
    lost: str | None = None  # why it could not be opened
    plan: dict[str, Way] = field(default_factory=dict)  # metric → the way it is read
    caps: dict[str, Capability] = field(default_factory=dict)  # metric → readable or why not
    calls: dict[str, Capability] = field(default_factory=dict)  # read key → what it answered
    energy: Any = None  # the backend's energy fallback state, where it has one


@dataclass(frozen=True, slots=True)
class Pending:
    """An event waiting for ``poll_events``: stamped with a run time, or with the time of the
    backend's ``time_fn`` when it arrived on another thread (placed back on the run clock)."""

    kind: EventKind
    message: str
    device: int | None
    details: dict[str, Any]
    t_s: float | None = None
    arrived: float | None = None

    def event(self, t_s: float, now: float) -> Event:
        when = self.t_s
        if when is None:
            when = t_s - max(0.0, now - (self.arrived if self.arrived is not None else now))
        return Event(
            t_s=when, kind=self.kind, message=self.message, device=self.device, details=self.details
        )


# --------------------------------------------------------------------------------------------
# The probe, the snapshot and lost devices, once for every vendor backend.


class VendorBackend:
    """The part of a vendor backend that is not about the vendor: the ``Backend`` protocol,
    the capability probe (see the module docstring for what "supported" means), the per-tick
    snapshot from the probe's plan, liveness after an ambiguous error, and lost devices
    (reported once as DEVICE_LOST, then left out of ``sample``; the others go on).

    A subclass declares its table and its vendor's calls, opens its binding, fills
    ``_devices`` and ``_info`` (each device through `_open_device`), and may derive values
    per tick (`_derive`) or add fallbacks after the probe (`_after_probe`).
    """

    name: ClassVar[str]
    METRICS: ClassVar[tuple[Metric, ...]]  # the per-tick snapshot, one per Telemetry field
    SUSPECT: ClassVar[type[SoakError]]  # an ambiguous failure: a lost device, or a one-off
    ALIVE: ClassVar[Call]  # a read every live device answers
    SHUTDOWN: ClassVar[str]  # the binding's shutdown function

    def __init__(self, query: Query, time_fn: Callable[[], float] = time.monotonic) -> None:
        self._q = query
        self._log = logging.getLogger(type(self).__module__)
        self._time_fn = time_fn
        self._lock = threading.Lock()
        self._pending: list[Pending] = []
        self._lost: set[int] = set()
        self._devices: list[Any] = []
        self._info: list[DeviceInfo] = []
        self._open = False
        self._foreign = ForeignProcesses(self._process_name)

    # -- Backend protocol ---------------------------------------------------------------------

    def devices(self) -> list[DeviceInfo]:
        return list(self._info)

    def capabilities(self) -> dict[int, dict[str, Capability]]:
        return {dev.index: dict(dev.caps) for dev in self._devices}

    def sample(self, t_s: float) -> list[Telemetry]:
        out: list[Telemetry] = []
        for dev in self._devices:
            if self._is_lost(dev.index):
                continue
            try:
                out.append(self._snapshot(dev, t_s))
            except GpuLost as exc:
                self._mark_lost(dev.index, f"stopped answering: {exc}", t_s=t_s)
        return out

    def poll_events(self, t_s: float) -> list[Event]:
        with self._lock:
            pending, self._pending = self._pending, []
        now = self._time_fn()
        return [p.event(t_s, now) for p in pending]

    def simulated_load(self, workload: str) -> None:
        return None

    def close(self) -> None:
        """Shut the binding down; safe to call twice."""
        if self._open:
            self._open = False
            try:
                self._q.call(self.SHUTDOWN)
            except SoakError as exc:
                self._log.warning("%s: shutdown failed: %s", self.name, exc)

    # -- hooks ----------------------------------------------------------------------------------

    def _describe(self, dev: Any) -> DeviceInfo:
        """The ``DeviceInfo`` of a probed device."""
        raise NotImplementedError

    def _lost_info(self, dev: Any) -> DeviceInfo:
        """The ``DeviceInfo`` of a device lost before or during its probe."""
        raise NotImplementedError

    def _after_probe(self, dev: Any) -> None:
        """Fallbacks and per-device state once the plan is known (e.g. energy from power)."""

    def _derive(self, dev: Any, t_s: float, values: dict[str, Any]) -> dict[str, Any]:
        """The tick's values from the table's (e.g. energy integrated from power)."""
        return values

    def _clean(self, value: Any) -> Any:
        """A raw answer or converted value with the vendor's sentinels made None."""
        return value

    def _process_name(self, pid: int) -> str | None:
        """The name of a process the driver lists, where its list does not give it."""
        return None

    def _error_name(self, exc: BaseException) -> str:
        """The vendor's name for a failure (its error class or status behind ``exc``)."""
        cause = exc.__cause__
        return type(cause).__name__ if cause is not None else type(exc).__name__

    # -- opening --------------------------------------------------------------------------------

    def _open_device(self, dev: Any) -> DeviceInfo:
        """Probe one device and describe it; a device lost at discovery or during its probe is
        listed and reported lost, and the other devices go on."""
        if dev.lost is None:
            try:
                self._probe(dev)
                return self._describe(dev)
            except GpuLost as exc:
                dev.lost, dev.caps = str(exc), {}
        self._mark_lost(dev.index, f"could not be opened: {dev.lost}", t_s=0.0)
        return self._lost_info(dev)

    def _probe(self, dev: Any) -> None:
        """Read every way of every metric once; per metric keep the first way that answers
        with a usable value, and record why the metric cannot be read where none does."""
        reads = [r for m in self.METRICS for w in m.ways for r in w.reads]
        answers = self._read(dev, reads, probing=True)
        for metric in self.METRICS:
            failures: list[Capability] = []
            for way in metric.ways:
                bad = [answers[r].capability for r in way.reads]
                bad = [c for c in bad if c is not SUPPORTED]
                if not bad and self._evaluate(metric, way, answers) is not None:
                    dev.plan[metric.name] = way
                    dev.caps[metric.name] = SUPPORTED
                    break
                failures.extend(bad or [Capability.NOT_SUPPORTED])  # answered a sentinel
            else:  # a metric with no way is one the vendor has no reading of
                dev.caps[metric.name] = why_not(failures) if metric.ways else NOT_SUPPORTED
        dev.calls = {r.key: answers[r].capability for r in dict.fromkeys(reads)}
        self._after_probe(dev)

    def _value(self, dev: Any, metric: Metric) -> Any:
        """The first way of an inventory (or system, ``dev`` None) metric with a value."""
        for way in metric.ways:
            answers = self._read(dev, way.reads, probing=True)
            if all(answers[r].capability is SUPPORTED for r in way.reads):
                value = self._evaluate(metric, way, answers)
                if value is not None:
                    return value
        return None

    # -- reading --------------------------------------------------------------------------------

    def _snapshot(self, dev: Any, t_s: float) -> Telemetry:
        """One consistent reading of every planned metric of one device."""
        answers = self._read(dev, [r for w in dev.plan.values() for r in w.reads])
        values = {m.name: self._evaluate(m, dev.plan.get(m.name), answers) for m in self.METRICS}
        values = self._derive(dev, t_s, values)
        # the driver's process list (raw): soak's own left out, the others counted
        listed = values.get("foreign_procs")
        procs, mem, events = self._foreign.read(dev.index, listed, t_s)
        values["foreign_procs"], values["foreign_mem_mib"] = procs, mem
        for event in events:
            self._event(event)
        return Telemetry(device=dev.index, t_s=t_s, **values)

    def _evaluate(self, metric: Metric, way: Way | None, answers: dict[Any, Answer]) -> Any:
        """Apply a way's conversion to its answers; sentinels and implausible values → None."""
        if way is None:
            return None
        raws = [self._clean(answers[r].value) for r in way.reads]
        if any(v is None for v in raws):
            return None
        return metric.accept(self._clean(way.convert(*raws)), way.label, self._q.log_once)

    def _read(self, dev: Any, reads: Iterable[Any], *, probing: bool = False) -> dict[Any, Answer]:
        """Answer each call once: its value, or None and why; a lost device raises GpuLost."""
        answers: dict[Any, Answer] = {}
        for c in dict.fromkeys(reads):
            try:
                answers[c] = Answer(self._call(dev, c))
            except GpuLost:
                raise
            except SoakError as exc:
                answers[c] = self._problem(dev, c.key, exc, probing)
        return answers

    def _call(self, dev: Any, c: Call) -> Any:
        """One declared call on a device (its handle first), or on the system (``dev`` None)."""
        args = [self._q.constant(a) for a in c.args]
        kwargs = {k: self._q.constant(v) for k, v in c.kwargs}
        head, index = ((), None) if dev is None else ((dev.handle,), dev.index)
        return self._q.call(c.func, *head, *args, device=index, **kwargs)

    def _problem(self, dev: Any, key: str, exc: SoakError, probing: bool) -> Answer:
        """A read that failed: None and why, logged once. An ambiguous failure first checks
        that the device is alive (GpuLost if not); at the probe, a failure that is neither
        permission nor a missing function means the read is not supported there."""
        error = self._error_name(exc)
        if isinstance(exc, self.SUSPECT) and dev is not None:
            confirm_alive(dev.index, lambda: self._call(dev, self.ALIVE))
        if probing and type(exc) not in CAPABILITY_OF:
            exc = NotSupported(str(exc))
        where = "" if dev is None else f" on device {dev.index}"
        return Answer(None, failed_read(self._q.log_once, key, exc, error, where), error)

    # -- events ---------------------------------------------------------------------------------

    def _event(self, pending: Pending) -> None:
        with self._lock:
            self._pending.append(pending)

    def _is_lost(self, index: int) -> bool:
        with self._lock:
            return index in self._lost

    def _mark_lost(
        self, index: int, reason: str, *, t_s: float | None = None, arrived: float | None = None
    ) -> None:
        """Leave a device out from now on and report it once (thread-safe)."""
        with self._lock:
            if index in self._lost:
                return
            self._lost.add(index)
            message = f"GPU {index} lost: {reason}"
            details = {"reason": reason}
            self._pending.append(
                Pending(EventKind.DEVICE_LOST, message, index, details, t_s, arrived)
            )
        self._log.error("%s: GPU %d lost: %s", self.name, index, reason)


def select(found: Sequence[int], wanted: Sequence[int] | None, backend: str) -> list[int]:
    """The device indices to use: all found, or the ones asked for, in the order asked; each
    must exist and be named once."""
    if wanted is None:
        return list(found)
    if not wanted:
        raise ConfigError("--devices: no device chosen")
    missing = [i for i in wanted if i not in found]
    if missing:
        have = ", ".join(map(str, found)) or "none"
        raise ConfigError(f"--devices: {backend} has no device {missing[0]} (found {have})")
    twice = [i for n, i in enumerate(wanted) if i in wanted[:n]]
    if twice:
        raise ConfigError(f"--devices: device {twice[0]} is listed twice")
    return list(wanted)
