"""The worker pool: one worker process per device (``soak.worker.child``), ranks joined by
``soak.worker.ranks``.

Worker processes: one per device, each running a workload and reporting through a pipe.

``WorkerPool`` is the ``Load`` for real backends. Each worker is a ``spawn``-ed process
pinned to its device by ``DeviceInfo.worker_env`` (applied before torch is imported) and
``torch_device``. It sets up its workload, then loops timed steps and sends batches of
work samples (which double as heartbeats), failed verifications and, last, its outcome.

Every worker ends as exactly one ``WorkerOutcome``, reported once as a WORKER_OUTCOME
event; one device failing never stops the others. A failed verification is reported at
once (VERIFICATION_FAILED event, device marked failed) and the worker **keeps running**, so
the chassis stays at full heat for the other devices and the report can count failures;
its outcome at stop is then VERIFICATION_FAILED instead of OK.

Workers never outlive the coordinator: on Linux the kernel kills them when the thread that
started them exits (``PR_SET_PDEATHSIG``), and a watch thread exits quietly when the parent
pid changes or the command pipe breaks. Start the pool from the main thread.
"""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing as mp
import os
import pickle
import signal
import socket
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from soak.devices.base import LoadUpdate
from soak.model import (
    DeviceInfo,
    Event,
    EventKind,
    ServerStep,
    SyncStep,
    WorkerOutcome,
    WorkSample,
)
from soak.nodegroup import Exchange, NodeGroup, RankMap
from soak.nodegroup import record as group_record
from soak.record import DdpGroup
from soak.worker.child import EXIT_COORDINATOR_LOST, WorkerSpec, worker_main
from soak.worker.ranks import rank_environments, sync_steps, synchronous
from workloads import WORKLOADS, WorkloadFactory
from workloads.base import WorkloadOptions

POLL_SLEEP_S = 0.05  # the pool's wait between drains while stopping


@dataclass(slots=True)
class _Worker:
    """The pool's running record of one worker process (mutable, private)."""

    device: DeviceInfo
    process: BaseProcess
    commands: Connection
    data: Connection
    started: float  # time.monotonic() at spawn
    last_progress: float
    ready: bool = False
    eof: bool = False
    done: bool = False
    info: dict[str, Any] = field(default_factory=dict)
    final: tuple[WorkerOutcome, dict[str, Any]] | None = None  # what the worker reported
    ending: tuple[WorkerOutcome, dict[str, Any]] | None = None  # reported, or what its end means

    @property
    def index(self) -> int:
        return self.device.index


class WorkerPool:
    """One worker process per device running ``workload``: the ``Load`` of real backends.

    ``heartbeat_timeout_s``: a running worker that sends nothing (samples are heartbeats)
    for this long is HUNG and killed; it must exceed ``options.step_s`` plus a verification.
    ``setup_timeout_s``: the same for the time from spawn to the end of setup.
    ``stop_timeout_s``: how long ``stop`` waits before killing what is left.
    ``factory``: builds the workload instead of the registry; it must be importable by
    name in a fresh process (a top-level function or class).

    Besides the protocol's events, each worker's end of setup is a LOAD_START event with
    ``device`` set and the workload's ``describe()`` as details (dtype, sizes, FLOP per
    token): that device's load begins there.
    """

    def __init__(
        self,
        devices: Sequence[DeviceInfo],
        workload: str,
        options: WorkloadOptions,
        *,
        heartbeat_timeout_s: float = 60.0,
        setup_timeout_s: float = 600.0,
        seed: int = 0,
        stop_timeout_s: float = 10.0,
        factory: WorkloadFactory | None = None,
        group: NodeGroup | None = None,
        host: str | None = None,
    ) -> None:
        if factory is None and workload not in WORKLOADS:
            raise ValueError(f"workload: {workload!r} is not one of {', '.join(WORKLOADS)}")
        if heartbeat_timeout_s <= options.step_s:
            raise ValueError(
                f"heartbeat_timeout_s: {heartbeat_timeout_s} must exceed step_s {options.step_s}"
            )
        missing = [d.index for d in devices if d.torch_device is None]
        if missing:
            raise ValueError(f"devices {missing} have no torch_device to run a workload on")
        self._devices = list(devices)
        self._workload = workload
        self._options = options
        self._heartbeat_timeout_s = heartbeat_timeout_s
        self._setup_timeout_s = setup_timeout_s
        self._seed = seed
        self._stop_timeout_s = stop_timeout_s
        self._factory = factory
        self._workers: dict[int, _Worker] = {}
        self._sync_steps: list[SyncStep] = []
        self._server_steps: list[ServerStep] = []
        self._failed: set[int] = set()
        self._checked_groups: set[str] = set()
        # --across-nodes: every node's ranks join one group (soak.nodegroup); its record
        # (every global rank's host and device) goes into the run record as ``ddp_group``.
        self._group = group
        self._exchange: Exchange | None = None
        self._ranks: RankMap | None = None
        self.ddp_group: DdpGroup | None = None
        if group is not None:
            if workload != "ddp":
                raise ValueError(f"a node group is only for the ddp workload, not {workload!r}")
            self._exchange = Exchange(group, setup_timeout_s / 2)
            self._ranks = self._exchange.share(host or socket.gethostname(), self._indices())
            self.ddp_group = group_record(group, self._ranks)
        # ddp, and mix with --option mix_sync=1 on two devices or more: one process group
        self._group_env = (
            rank_environments(self._devices, heartbeat_timeout_s, group, self._ranks)
            if synchronous(workload, options, devices)
            else {}
        )

    # -- the Load protocol

    def start(self, t0: float) -> DdpGroup | None:
        """Spawn one worker per device; returns at once (setup goes on in the workers), with
        the multi-node group the ranks join (None: the pool is a group of its own)."""
        ctx = mp.get_context("spawn")
        for device in self._devices:
            self._workers[device.index] = self._spawn(ctx, device, t0)
        atexit.register(self._kill_all)
        return self.ddp_group

    def poll(self, t_s: float) -> LoadUpdate:
        """Drain every worker's pipe without blocking; report deaths and hangs."""
        samples: list[WorkSample] = []
        events: list[Event] = []
        for worker in self._live():
            alive = worker.process.is_alive()
            self._drain(worker, samples, events)
            if not alive:
                events.append(self._finish(worker, t_s, self._death(worker)))
            elif self._hung(worker):
                self._kill(worker, self._hang(worker))
                events.append(self._outcome_event(worker, t_s))
        events.extend(self._cross_check(t_s))
        return self._update(samples, events)

    def stop(self, t_s: float) -> LoadUpdate:
        """Ask every worker to stop, wait up to ``stop_timeout_s``, kill what is left."""
        samples: list[WorkSample] = []
        events: list[Event] = []
        for worker in self._live():
            with contextlib.suppress(BrokenPipeError, OSError):  # gone: reported below
                worker.commands.send("stop")
        ended: list[_Worker] = []
        deadline = time.monotonic() + self._stop_timeout_s
        while self._live() and time.monotonic() < deadline:
            for worker in self._live():
                alive = worker.process.is_alive()
                self._drain(worker, samples, events)
                if not alive:
                    self._close(worker, self._death(worker))
                    ended.append(worker)
            time.sleep(POLL_SLEEP_S)
        for worker in self._live():
            self._kill(worker, self._unstopped(worker))
            ended.append(worker)
        # The last cross-device check comes before the outcomes, so that a device it finds
        # odd ends as VERIFICATION_FAILED, not as "ok" beside a failed checksum.
        events.extend(self._cross_check(t_s, final=True))
        events.extend(self._outcome_event(worker, t_s) for worker in ended)
        atexit.unregister(self._kill_all)
        return self._update(samples, events)

    def kill(self, t_s: float, wait_s: float = 2.0) -> LoadUpdate:
        """Stop at once (a second Ctrl-C): SIGKILL every worker still running, wait at most
        ``wait_s`` in all for them to go, and return what they had sent. A worker killed
        this way before it reported an outcome gets none (its device did nothing wrong):
        a WARNING event says it was killed."""
        samples: list[WorkSample] = []
        events: list[Event] = []
        live = self._live()
        for worker in live:
            worker.process.kill()
        deadline = time.monotonic() + wait_s
        for worker in live:
            worker.process.join(timeout=max(0.0, deadline - time.monotonic()))
            self._drain(worker, samples, events)
            if worker.final is not None:
                events.append(self._finish(worker, t_s, worker.final))
                continue
            worker.done = True
            worker.commands.close()
            worker.data.close()
            gone = "" if worker.process.exitcode is not None else "; it has not exited yet"
            message = f"device {worker.index}: worker killed, soak stopped at once{gone}"
            details = {"phase": "stop", **_exit_details(worker.process)}
            events.append(Event(t_s, EventKind.WARNING, message, worker.index, details))
        atexit.unregister(self._kill_all)
        return self._update(samples, events)

    def failed_devices(self) -> frozenset[int]:
        return frozenset(self._failed)

    # -- extras for tests

    def worker_pids(self) -> dict[int, int | None]:
        """Process id of each device's worker."""
        return {i: w.process.pid for i, w in self._workers.items()}

    def rank_envs(self) -> dict[int, dict[str, str]]:
        """Each device's rank environment (ddp; empty for other workloads)."""
        return {i: dict(env) for i, env in self._group_env.items()}

    def close_exchange(self) -> None:
        """Let go of a node group's exchange (node 0's serves it)."""
        if self._exchange is not None:
            self._exchange.close()
            self._exchange = None

    # -- synchronous workloads (ddp)

    def _indices(self) -> list[int]:
        return [device.index for device in self._devices]

    def _update(self, samples: list[WorkSample], events: list[Event]) -> LoadUpdate:
        update = LoadUpdate(samples, events, self._sync_steps, self._server_steps)
        self._sync_steps, self._server_steps = [], []
        return update

    def _add_sync(self, worker: _Worker, rows: list[tuple[Any, ...]]) -> None:
        steps, server = sync_steps(worker.index, rows, self._devices, self._group)
        self._sync_steps += steps
        self._server_steps += server

    # -- spawning

    def _spawn(self, ctx: Any, device: DeviceInfo, t0: float) -> _Worker:
        assert device.torch_device is not None
        spec = WorkerSpec(
            torch_device=device.torch_device,
            env={**device.worker_env, **self._group_env.get(device.index, {})},
            workload=self._workload,
            options=self._options,
            seed=self._seed + device.index,
            t0=t0,
            parent_pid=os.getpid(),
            factory=self._factory,
        )
        commands_in, commands_out = ctx.Pipe(duplex=False)
        data_in, data_out = ctx.Pipe(duplex=False)
        process = ctx.Process(
            target=worker_main,
            args=(spec, commands_in, data_out),
            name=f"soak-worker-{device.index}",
        )
        with _environ(device.worker_env):  # in place before the child's first import
            process.start()
        commands_in.close()  # the child's ends: closing ours lets each side see EOF
        data_out.close()
        now = time.monotonic()
        return _Worker(device, process, commands_out, data_in, started=now, last_progress=now)

    # -- reading workers

    def _live(self) -> list[_Worker]:
        return [w for w in self._workers.values() if not w.done]

    def _drain(self, worker: _Worker, samples: list[WorkSample], events: list[Event]) -> None:
        while not worker.eof:
            try:
                if not worker.data.poll():
                    return
                message = worker.data.recv()
            except (EOFError, OSError, pickle.UnpicklingError):
                worker.eof = True  # gone, perhaps mid-message; liveness decides what it means
                return
            self._handle(worker, message, samples, events)

    def _handle(
        self,
        worker: _Worker,
        message: tuple[Any, ...],
        samples: list[WorkSample],
        events: list[Event],
    ) -> None:
        kind = message[0]
        worker.last_progress = time.monotonic()
        if kind == "samples":
            samples.extend(WorkSample(worker.index, *row) for row in message[1])
        elif kind == "ready":
            worker.ready = True
            worker.info = message[2]
            events.append(_ready_event(worker, message[1]))
        elif kind == "verify":
            self._failed.add(worker.index)
            events.append(_verify_event(worker, message[1], message[2]))
        elif kind == "sync":
            self._add_sync(worker, message[1])
        elif kind == "outcome":
            worker.final = (WorkerOutcome(message[2]), message[3])

    # -- endings

    def _hung(self, worker: _Worker) -> bool:
        now = time.monotonic()
        if worker.ready:
            return now - worker.last_progress > self._heartbeat_timeout_s
        return now - worker.started > self._setup_timeout_s

    def _hang(self, worker: _Worker) -> tuple[WorkerOutcome, dict[str, Any]]:
        if worker.ready:
            silent = round(time.monotonic() - worker.last_progress, 1)
            limit = self._heartbeat_timeout_s
            detail = f"no heartbeat for {silent:g} s (limit {limit:g} s); killed"
            return WorkerOutcome.HUNG, {"phase": "run", "silent_s": silent, "detail": detail}
        setup = round(time.monotonic() - worker.started, 1)
        detail = f"setup unfinished after {setup:g} s (limit {self._setup_timeout_s:g} s); killed"
        return WorkerOutcome.HUNG, {"phase": "setup", "setup_s": setup, "detail": detail}

    def _unstopped(self, worker: _Worker) -> tuple[WorkerOutcome, dict[str, Any]]:
        if worker.ready:
            limit = self._stop_timeout_s
            detail = f"did not stop within {limit:g} s; killed"
            return WorkerOutcome.HUNG, {"phase": "stop", "stop_timeout_s": limit, "detail": detail}
        note = f"setup unfinished after {time.monotonic() - worker.started:.0f} s, at stop"
        return WorkerOutcome.SETUP_FAILED, {"phase": "setup", "exception": note}

    def _death(self, worker: _Worker) -> tuple[WorkerOutcome, dict[str, Any]]:
        """What an exit without a reported outcome means."""
        code = worker.process.exitcode
        if code == EXIT_COORDINATOR_LOST:
            return WorkerOutcome.COORDINATOR_LOST, {}
        phase = "run" if worker.ready else "setup"
        return WorkerOutcome.CRASHED, {"phase": phase}

    def _kill(self, worker: _Worker, default: tuple[WorkerOutcome, dict[str, Any]]) -> None:
        worker.process.kill()
        worker.process.join(timeout=5.0)
        self._drain(worker, [], [])  # an outcome it sent before dying wins
        self._close(worker, default)

    def _finish(
        self, worker: _Worker, t_s: float, default: tuple[WorkerOutcome, dict[str, Any]]
    ) -> Event:
        """Close the worker and give its one WORKER_OUTCOME event."""
        self._close(worker, default)
        return self._outcome_event(worker, t_s)

    def _close(self, worker: _Worker, default: tuple[WorkerOutcome, dict[str, Any]]) -> None:
        """The worker has ended: reap it, close its pipes, keep how it ended."""
        worker.process.join(timeout=1.0)
        worker.ending = worker.final or default
        worker.done = True
        worker.commands.close()
        worker.data.close()

    def _outcome_event(self, worker: _Worker, t_s: float) -> Event:
        """The worker's one WORKER_OUTCOME event, judged with every check made so far."""
        assert worker.ending is not None
        outcome, details = worker.ending
        if outcome is WorkerOutcome.OK and worker.index in self._failed:
            outcome = WorkerOutcome.VERIFICATION_FAILED  # failed the cross-device check
        if outcome is not WorkerOutcome.OK:  # PEER_LOST too: its load has ended
            self._failed.add(worker.index)
        details = {"outcome": outcome.value, **details, **_exit_details(worker.process)}
        details.setdefault("detail", _detail(details))  # the report's reason names it
        suffix = f": {details['detail']}" if details["detail"] else ""
        message = f"device {worker.index}: worker {outcome.value}{suffix}"
        return Event(t_s, EventKind.WORKER_OUTCOME, message, worker.index, details)

    def _kill_all(self) -> None:
        """At interpreter exit without ``stop``: leave no worker behind."""
        for worker in self._live():
            worker.process.kill()

    # -- cross-device check

    def _cross_check(self, t_s: float, *, final: bool = False) -> list[Event]:
        """Compare fixed-product checksums among devices of one name, once per name, when
        every worker of that name is ready or ended (or at stop)."""
        events: list[Event] = []
        for name, workers in _groups(self._workers.values()).items():
            if name in self._checked_groups:
                continue
            if not final and any(not (w.ready or w.done) for w in workers):
                continue
            sums = {w.index: w.info["checksum"] for w in workers if w.info.get("checksum")}
            if len(sums) < 2:
                continue
            self._checked_groups.add(name)
            events.extend(self._checksum_events(t_s, name, sums))
        return events

    def _checksum_events(self, t_s: float, name: str, sums: Mapping[int, str]) -> list[Event]:
        odd, majority = odd_checksums(sums)
        base = {"check": "cross_device_checksum", "name": name, "checksums": dict(sums)}
        if majority is None:
            devices = ", ".join(map(str, sorted(sums)))
            message = f"devices {devices} ({name}) disagree on the fixed product; no majority"
            kind = EventKind.VERIFICATION_FAILED
            return [Event(t_s, kind, message, None, {**base, "ambiguous": True})]
        events = []
        for index in sorted(odd):
            self._failed.add(index)
            message = (
                f"device {index}: fixed-product checksum {sums[index]} differs from "
                f"{majority} on {len(sums) - len(odd)} of {len(sums)} {name} devices"
            )
            details = {**base, "checksum": sums[index], "majority": majority}
            events.append(Event(t_s, EventKind.VERIFICATION_FAILED, message, index, details))
        return events


def odd_checksums(sums: Mapping[int, str]) -> tuple[frozenset[int], str | None]:
    """Devices whose checksum differs from the majority, and the majority's checksum.

    All equal: no device, that checksum. With three or more devices and a strict majority:
    the others. Two that differ, or no strict majority: no device can be blamed, and the
    majority is None.
    """
    counts = Counter(sums.values())
    top, count = counts.most_common(1)[0]
    if len(counts) == 1:
        return frozenset(), top
    if len(sums) >= 3 and count * 2 > len(sums):
        return frozenset(d for d, s in sums.items() if s != top), top
    return frozenset(), None


def _groups(workers: Iterable[_Worker]) -> dict[str, list[_Worker]]:
    out: dict[str, list[_Worker]] = {}
    for worker in workers:
        out.setdefault(worker.device.name, []).append(worker)
    return out


# What a LOAD_START message says of a workload's set-up: (key, the key of its reason).
SETUP_KEYS = (("dtype", "dtype_reason"), ("n", "n_reason"), ("amp", "amp_reason"))


def _ready_event(worker: _Worker, t_s: float) -> Event:
    info = worker.info
    summary = ", ".join(_setup_items(info))
    message = f"device {worker.index}: {info.get('workload', 'workload')} running {summary}"
    return Event(t_s, EventKind.LOAD_START, message.rstrip(), worker.index, dict(info))


def _setup_items(info: Mapping[str, Any]) -> list[str]:
    """``dtype=bf16 (CPU has amx_bf16)``, ``n=1024 (...)``, ``held_b=...`` from a workload's
    ``describe()``; a mix's parts in turn."""
    items = []
    for key, reason in SETUP_KEYS:
        if key in info:
            items.append(f"{key}={info[key]}" + (f" ({info[reason]})" if info.get(reason) else ""))
    if "held_b" in info:
        items.append(f"held_b={info['held_b']}")
    for name, part in (info.get("parts") or {}).items():
        items += [f"{name} {item}" for item in _setup_items(part)]
    return items


def _verify_event(worker: _Worker, t_s: float, check: dict[str, Any]) -> Event:
    message = (
        f"device {worker.index}: {check['part']} verification failed: "
        f"{check['mismatched']} of {check['checked']} values off"
    )
    if check.get("max_rel_error") is not None:
        message += f", max error {check['max_rel_error']:.3g} of RMS"
    if check.get("detail"):
        message += f" ({check['detail']})"
    return Event(t_s, EventKind.VERIFICATION_FAILED, message, worker.index, dict(check))


def _exit_details(process: BaseProcess) -> dict[str, Any]:
    code = process.exitcode
    if code is None:
        return {"pid": process.pid, "exit_code": None}
    if code < 0:
        return {"pid": process.pid, "exit_code": None, "signal": signal.Signals(-code).name}
    return {"pid": process.pid, "exit_code": code}


def _detail(details: Mapping[str, Any]) -> str:
    """What ended a worker, in a few words: its exception, the signal that killed it, its
    exit code, or its failed result checks."""
    if details.get("exception"):
        return str(details["exception"])
    if details.get("signal"):
        return f"killed by {details['signal']}"
    if details.get("exit_code"):
        return f"exit code {details['exit_code']}"
    if details.get("verification_failures"):
        return f"{details['verification_failures']} failed result checks"
    return ""


@contextlib.contextmanager
def _environ(env: Mapping[str, str]) -> Iterator[None]:
    """``os.environ`` with ``env`` applied for the block, so a spawned child starts with it."""
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
