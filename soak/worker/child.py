"""The worker process: one per device, running a workload and reporting through a pipe.

It sets up its workload, then loops timed steps and sends batches of work samples (which
double as heartbeats), failed verifications and, last, its outcome. It never outlives the
coordinator: the kernel kills it when the thread that started it exits
(``PR_SET_PDEATHSIG``), and a watch thread exits quietly when the parent pid changes or
the command pipe breaks.
"""

from __future__ import annotations

import ctypes
import math
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from multiprocessing.connection import Connection
from typing import Any

from soak.model import (
    WorkerOutcome,
)
from workloads import WORKLOADS, StepResult, Verification, Workload, WorkloadFactory
from workloads.base import WorkloadOptions

EXIT_OK = 0
EXIT_CRASHED = 1  # an exception while running
EXIT_SETUP_FAILED = 3
EXIT_OUT_OF_MEMORY = 4
EXIT_DEVICE_LOST = 5
EXIT_COORDINATOR_LOST = 75  # the worker saw its coordinator go and left quietly
EXIT_PEER_LOST = 6  # ddp: a collective failed because another rank died or hung

FLUSH_S = 0.25  # a worker sends samples at most this often (batched when steps are short)
WATCH_S = 0.5  # how often a worker looks for its parent and for commands
MAX_VERIFY_EVENTS = 20  # per worker; later failures are only counted, in the outcome
PR_SET_PDEATHSIG = 1

# Messages a CUDA runtime gives once its device is gone (XID 79, uncorrectable ECC, ...).
DEVICE_LOST_MARKERS = (
    "gpu is lost",
    "fallen off the bus",
    "uncorrectable ecc",
    "devices unavailable",
    "device not ready",
    "unspecified launch failure",
    "cuda error: unknown error",
    "no cuda-capable device",
)


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    """Everything a worker process needs, pickled once at spawn."""

    torch_device: str
    env: dict[str, str]
    workload: str
    options: WorkloadOptions
    seed: int
    t0: float  # the coordinator's time.monotonic() at the run's zero
    parent_pid: int
    factory: WorkloadFactory | None = None  # overrides the registry (tests, benchmarks)


# ----------------------------------------------------------------------------- worker side


def worker_main(spec: WorkerSpec, commands: Connection, data: Connection) -> None:
    """Entry point of a worker process: run the workload until told to stop, then report
    how it ended and exit with a code that says the same."""
    os.environ.update(spec.env)
    _die_with_parent(spec.parent_pid)
    _own_resource_tracker()
    stop = threading.Event()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the coordinator's to handle
    signal.signal(signal.SIGTERM, lambda _sig, _frame: stop.set())
    channel = _Channel(data, spec.t0)
    threading.Thread(
        target=_watch, args=(commands, stop, spec.parent_pid), name="soak-watch", daemon=True
    ).start()
    outcome, details, code = _run(spec, channel, stop)
    channel.send(("outcome", channel.now(), outcome.value, details))
    channel.close()
    sys.exit(code)


def _own_resource_tracker() -> None:
    """Give this worker a resource tracker of its own, quiet, in place of the coordinator's.

    Semaphores the workload creates (a DataLoader's queues) are registered with a tracker,
    which unlinks whatever is left when the last process holding it exits. Shared with the
    coordinator, a worker killed on a second Ctrl-C leaves them to the coordinator's
    tracker, which at soak's exit cleans them up *and* prints "leaked semaphore objects"
    after soak's own last line. A worker's own tracker does the same clean-up when the worker
    goes, with its stderr on /dev/null: a kill asked for is not a leak to report."""
    from multiprocessing import resource_tracker

    tracker = resource_tracker.ResourceTracker()
    devnull = os.open(os.devnull, os.O_WRONLY)
    saved = os.dup(2)
    try:
        os.dup2(devnull, 2)  # the tracker process inherits this stderr
        tracker.ensure_running()
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)
    resource_tracker._resource_tracker = tracker
    resource_tracker.ensure_running = tracker.ensure_running
    resource_tracker.register = tracker.register
    resource_tracker.unregister = tracker.unregister
    resource_tracker.getfd = tracker.getfd


def _die_with_parent(parent_pid: int) -> None:
    """Ask the kernel to SIGKILL this process when its parent goes (Linux); leave at once if
    it already has."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:
        os._exit(EXIT_COORDINATOR_LOST)


def _watch(commands: Connection, stop: threading.Event, parent_pid: int) -> None:
    """Watch thread: take "stop" from the coordinator; exit quietly when it is gone."""
    while True:
        if os.getppid() != parent_pid:
            os._exit(EXIT_COORDINATOR_LOST)
        try:
            if commands.poll(WATCH_S) and commands.recv() == "stop":
                stop.set()
        except (EOFError, OSError):
            os._exit(EXIT_COORDINATOR_LOST)


class _Channel:
    """The worker's end of the data pipe: thread-safe sends, times on the run's clock, and
    a quiet exit when the coordinator is gone."""

    def __init__(self, conn: Connection, t0: float) -> None:
        self._conn = conn
        self._t0 = t0
        self._lock = threading.Lock()

    def now(self) -> float:
        return time.monotonic() - self._t0

    def run_time(self, monotonic_s: float) -> float:
        return monotonic_s - self._t0

    def send(self, message: tuple[Any, ...]) -> None:
        try:
            with self._lock:
                self._conn.send(message)
        except (BrokenPipeError, ConnectionResetError, EOFError, OSError):
            os._exit(EXIT_COORDINATOR_LOST)

    def close(self) -> None:
        self._conn.close()


def _run(
    spec: WorkerSpec, channel: _Channel, stop: threading.Event
) -> tuple[WorkerOutcome, dict[str, Any], int]:
    """Set up, loop, close: the outcome, its details and the exit code."""
    try:
        workload = _build(spec)
        # A synchronous workload (ddp) sees the stop request and hands back the event the
        # loop ends on: set once every rank has agreed, so that all leave after one step.
        bind_stop = getattr(workload, "bind_stop", None)
        loop_stop = bind_stop(stop) if bind_stop is not None else stop
        workload.setup(spec.torch_device, spec.seed)
        channel.send(("ready", channel.now(), workload.describe()))
    except BaseException as exc:  # every ending is reported, whatever raised
        return _failure(exc, "setup")
    try:
        failures = _loop(workload, spec, channel, loop_stop)
        workload.close()
    except BaseException as exc:  # every ending is reported, whatever raised
        return _failure(exc, "run")
    if failures:
        return WorkerOutcome.VERIFICATION_FAILED, {"verification_failures": failures}, EXIT_OK
    return WorkerOutcome.OK, {"verification_failures": 0}, EXIT_OK


def _build(spec: WorkerSpec) -> Workload:
    factory = spec.factory or WORKLOADS[spec.workload]
    return factory(spec.options)


def _loop(workload: Workload, spec: WorkerSpec, channel: _Channel, stop: threading.Event) -> int:
    """Steps until stopped; verify every ``verify_interval_s`` (and after the first step).
    Returns how many checks failed. The samples taken are sent even when a step raises, so
    a failed check just before a crash still counts."""
    batch = _SampleBatch(channel)
    failures = 0
    next_verify = -math.inf
    try:
        while not stop.is_set():
            result = workload.step()
            checks = list(result.verifications)
            if result.t_end >= next_verify:
                checks.extend(workload.verify())
                next_verify = time.monotonic() + spec.options.verify_interval_s
            batch.add(result, checks)
            for check in checks:
                if not check.ok:
                    failures += 1
                    if failures <= MAX_VERIFY_EVENTS:
                        channel.send(("verify", channel.now(), asdict(check)))
            batch.flush(force=False)
    finally:
        batch.flush(force=True)
    return failures


class _SampleBatch:
    """Samples waiting to be sent: plain tuples, sent at most every FLUSH_S."""

    def __init__(self, channel: _Channel) -> None:
        self._channel = channel
        self._rows: list[tuple[Any, ...]] = []
        self._sync: list[tuple[Any, ...]] = []
        self._last_send = time.monotonic()

    def add(self, result: StepResult, checks: Sequence[Verification]) -> None:
        run_time = self._channel.run_time
        rows = _checks_by_part(result, checks)
        for part in result.parts:
            # a part timed on its own (mix on a CPU) is stored over its own span
            t_start = run_time(result.t_start if part.t_start is None else part.t_start)
            t_end = run_time(result.t_end if part.t_end is None else part.t_end)
            mine = rows[part.part]
            verified = all(c.ok for c in mine) if mine else None
            errors = [c.max_rel_error for c in mine if c.max_rel_error is not None]
            error = max(errors) if errors else None
            self._rows.append((t_start, t_end, part.part, part.work, part.unit, verified, error))
        if result.sync is not None:
            self._sync.append((t_start, t_end, asdict(result.sync)))

    def flush(self, *, force: bool) -> None:
        now = time.monotonic()
        if not force and now - self._last_send < FLUSH_S:
            return
        if self._sync:
            self._channel.send(("sync", self._sync))
            self._sync = []
        self._channel.send(("samples", self._rows) if self._rows else ("hb", now))
        self._rows = []
        self._last_send = now


def _checks_by_part(
    result: StepResult, checks: Sequence[Verification]
) -> dict[str, list[Verification]]:
    """Each stored part's checks: its own, and in the step's first part's row those of a
    part the step does not report on its own (mix on a GPU reports its three parts as one,
    "mix"; the lock-step mix's replica checks are the training part's). Every check lands
    in exactly one row."""
    rows: dict[str, list[Verification]] = {p.part: [] for p in result.parts}
    if rows:
        first = rows[result.parts[0].part]
        for check in checks:
            rows.get(check.part, first).append(check)
    return rows


def _failure(exc: BaseException, phase: str) -> tuple[WorkerOutcome, dict[str, Any], int]:
    """The outcome an exception means, with its last line and the end of its traceback."""
    details = {
        "phase": phase,
        "exception": traceback.format_exception_only(exc)[-1].strip(),
        "traceback": "".join(traceback.format_exception(exc))[-4000:],
    }
    kind = classify_exception(exc)
    if kind is WorkerOutcome.OUT_OF_MEMORY:
        return kind, details, EXIT_OUT_OF_MEMORY
    if kind is WorkerOutcome.DEVICE_LOST:
        return kind, details, EXIT_DEVICE_LOST
    if kind is WorkerOutcome.PEER_LOST:
        return kind, details, EXIT_PEER_LOST
    if phase == "setup":
        return WorkerOutcome.SETUP_FAILED, details, EXIT_SETUP_FAILED
    return WorkerOutcome.CRASHED, details, EXIT_CRASHED


def classify_exception(exc: BaseException) -> WorkerOutcome | None:
    """OUT_OF_MEMORY, DEVICE_LOST or PEER_LOST (ddp's ``PeerLost``: a collective failed
    because another rank died or hung) where the exception says so, else None. By name and
    message, so that the worker need not import torch to tell."""
    text = str(exc).lower()
    if type(exc).__name__ == "PeerLost":  # workloads.ddp: another rank died or hung
        return WorkerOutcome.PEER_LOST
    if (
        isinstance(exc, MemoryError)
        or type(exc).__name__ == "OutOfMemoryError"
        or "out of memory" in text
        or "can't allocate memory" in text
    ):
        return WorkerOutcome.OUT_OF_MEMORY
    if any(marker in text for marker in DEVICE_LOST_MARKERS):
        return WorkerOutcome.DEVICE_LOST
    return None


# ---------------------------------------------------------------------------- coordinator side
