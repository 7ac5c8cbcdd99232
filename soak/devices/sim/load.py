"""The simulated server's own load: the work its devices do at their simulated clocks."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from soak.dataset import WorkColumns
from soak.devices.base import LoadUpdate
from soak.devices.sim.lockstep import SyncSim
from soak.devices.sim.params import Chassis, Workload
from soak.devices.sim.physics import EPS
from soak.model import Event, EventKind, WorkerOutcome, WorkSample


class LoadedServer(Protocol):
    """The server as its load sees it: the public methods the load drives it through
    (``SimServer`` keeps this; the load never touches the server's private state)."""

    selected: Sequence[int]  # devices under test
    lost_at: dict[int, float]  # device -> time it was lost
    chassis: Chassis
    link_factor: np.ndarray  # per device: ddp's all-reduce link bandwidth factor

    @property
    def sdc_rate(self) -> np.ndarray: ...

    def request_load(self, load: SimLoad) -> None: ...

    def end_load(self, load: SimLoad) -> None: ...

    def advance(self, t_s: float) -> None: ...

    def take_work(self) -> np.ndarray: ...

    def random(self, stream: str, rows: int) -> np.ndarray: ...

    def die_truth(self) -> np.ndarray: ...


class SimLoad:
    """The simulated server's own load: the work its devices do at their simulated clocks.

    ``start`` switches the load on at the time of the next call that moves the server
    (the runner ticks right after ``start``), so the server's load start and the runner's
    agree. Each ``poll`` returns one WorkSample per device per workload part since the
    last poll; result checks happen every ``verify_interval_s`` of load.
    """

    def __init__(self, server: LoadedServer, workload: Workload) -> None:
        self.server = server
        self.workload = workload
        self.started_s: float | None = None
        self._last_s = 0.0
        self._checks_done = 0
        self._verify_failed: set[int] = set()
        self._ended: set[int] = set()
        self._stopped = False
        self.sync = SyncSim(server.selected, server.link_factor) if workload.name == "ddp" else None

    def start(self, t0: float) -> None:
        """Switch the load on; ``t0`` (the run's zero) is not needed: sim time is run time.
        The simulated server is one node: no group across nodes."""
        del t0
        if self.started_s is not None or self._stopped:
            raise RuntimeError("sim: this load was already started")
        self.server.request_load(self)

    def began(self, t_s: float) -> None:
        """Called by the server when the load switches on."""
        self.started_s = self._last_s = t_s

    def poll(self, t_s: float, checks: list[tuple[float, np.ndarray]] | None = None) -> LoadUpdate:
        """Work and events since the last poll; ``checks``: the result checks due by
        ``t_s`` where already drawn (``due_checks``)."""
        self.server.advance(t_s)
        if self.started_s is None or self._stopped:
            return LoadUpdate()
        return self._collect(t_s, checks)

    @property
    def collecting(self) -> bool:
        """Whether the load is on: started and not stopped."""
        return self.started_s is not None and not self._stopped

    def due_checks(self, t_s: float) -> list[tuple[float, np.ndarray]]:
        """The result checks due by ``t_s`` (drawn now: each is drawn once)."""
        return self._checks(t_s)

    def alone(self, checks: list[tuple[float, np.ndarray]]) -> bool:
        """Whether a tick with these checks must be taken alone, not in a block: a check
        failed, or a device still running was lost (either makes events)."""
        running = [d for d in self.server.selected if d not in self._ended]
        if any(d in self.server.lost_at for d in running):
            return True
        return any(bool(np.any(error[:, running] > 0)) for _, error in checks)

    def collect_block(
        self,
        times: list[float],
        works: list[np.ndarray],
        checks: list[list[tuple[float, np.ndarray]]],
    ) -> tuple[list[WorkColumns], list[Event]]:
        """``poll`` of many ticks at once, none taken alone (``alone``): each tick's work
        (``works``, taken from the server at it) with its noise, each device's samples per
        part as columns. The same samples and random numbers as a poll at each tick."""
        if not times:
            return [], []
        t = np.array(times)
        t0 = np.concatenate(([self._last_s], t[:-1]))
        self._last_s = times[-1]
        took = t > t0 + EPS  # a poll where no time passed returns nothing
        t, t0 = t[took], t0[took]
        work = np.array(works)[took]
        ticks, parts = len(t), len(self.workload.parts)
        if not ticks:
            return [], []
        c, n = self.server.chassis, work.shape[2]
        noise = self.server.random("work", parts * ticks).reshape(ticks, parts, n)
        if c.work_noise_dof is not None:
            chi2 = self.server.random("work_tail", parts * ticks).reshape(ticks, parts, n)
            noise = noise / np.sqrt(chi2 / c.work_noise_dof)
        scale = c.work_noise_frac / np.sqrt(np.maximum(t - t0, 0.1))
        jitter = scale[:, None, None] * noise
        if c.work_noise_dof is not None:
            jitter = np.clip(jitter, -c.work_noise_clip, c.work_noise_clip)
        noisy = work * np.maximum(1.0 + jitter, 0.0)
        checked = np.array([bool(due) for due, ok in zip(checks, took, strict=True) if ok])
        verified = np.where(checked, 1.0, np.nan)  # none failed: ``alone`` took those
        out = []
        for device in self.server.selected:
            if device in self._ended:
                continue
            for k, part in enumerate(self.workload.parts):
                out.append(
                    WorkColumns(
                        device,
                        part.name,
                        part.unit,
                        t0,
                        t,
                        noisy[:, k, device],
                        verified,
                        np.full(ticks, np.nan),
                    )
                )
        return out, []

    def stop(self, t_s: float) -> LoadUpdate:
        """Switch the load off; the work left and one WORKER_OUTCOME per device still running."""
        self.server.advance(t_s)
        if self._stopped:
            return LoadUpdate()
        update = self._collect(t_s) if self.started_s is not None else LoadUpdate()
        self._stopped = True
        self.server.end_load(self)
        if self.started_s is None:
            return update
        events = list(update.events)
        for device in self.server.selected:
            if device in self._ended:
                continue
            self._ended.add(device)
            failed = device in self._verify_failed
            outcome = WorkerOutcome.VERIFICATION_FAILED if failed else WorkerOutcome.OK
            events.append(self._outcome(t_s, device, outcome))
        return LoadUpdate(update.samples, events, update.sync_steps, update.server_steps)

    def kill(self, t_s: float) -> LoadUpdate:
        """The simulated devices have no process to wait for: at once is the same as a stop."""
        return self.stop(t_s)

    def failed_devices(self) -> frozenset[int]:
        """Devices lost, or whose result checks failed."""
        lost = {d for d in self.server.lost_at if d in self.server.selected}
        return frozenset(lost | self._verify_failed)

    # -- internals --------------------------------------------------------------------------

    def _outcome(self, t_s: float, device: int, outcome: WorkerOutcome) -> Event:
        return Event(
            t_s,
            EventKind.WORKER_OUTCOME,
            f"load ended: {outcome.value}",
            device,
            {"outcome": outcome.value},
        )

    def _collect(
        self, t_s: float, checks: list[tuple[float, np.ndarray]] | None = None
    ) -> LoadUpdate:
        """Samples and events for (last poll, t_s]."""
        server, t0 = self.server, self._last_s
        work = server.take_work()
        self._last_s = t_s
        if t_s <= t0 + EPS:
            return LoadUpdate()
        checks = self._checks(t_s) if checks is None else checks
        noisy = work * np.maximum(1.0 + self._jitter(t_s - t0), 0.0)
        update = LoadUpdate()
        if self.sync is not None:  # lock-step: every device does the slowest's work
            die_c = self.server.die_truth()
            tokens, rows, step = self.sync.tick(t0, t_s, noisy[0], work[0], die_c)
            noisy = tokens[None, :]
            update.sync_steps.extend(rows)
            update.server_steps.append(step)
        amounts = noisy.tolist()
        for device in server.selected:
            if device in self._ended:
                continue
            lost_s = server.lost_at.get(device)
            end = t_s if lost_s is None else min(t_s, lost_s)
            if end > t0 + EPS:
                self._add_samples(update, device, t0, end, [a[device] for a in amounts], checks)
            if lost_s is not None:
                self._ended.add(device)
                update.events.append(self._outcome(end, device, WorkerOutcome.DEVICE_LOST))
        return update

    def _add_samples(
        self,
        update: LoadUpdate,
        device: int,
        t0: float,
        end: float,
        amounts: list[float],
        checks: list[tuple[float, np.ndarray]],
    ) -> None:
        """One device's samples (one per part) for (t0, end], with its check results."""
        for k, part in enumerate(self.workload.parts):
            verified, error = self._verdict(checks, k, device, end) if checks else (None, None)
            update.samples.append(
                WorkSample(device, t0, end, part.name, amounts[k], part.unit, verified, error)
            )
            if verified is False:
                self._verify_failed.add(device)
                update.events.append(self._failure_event(end, device, part.name, error))

    def _jitter(self, dt: float) -> np.ndarray:
        """Relative noise of each part's work per device; shrinks for longer samples. With
        ``work_noise_dof`` it is heavy-tailed: a Student-t (a normal over the root of an
        independent chi-square over its degrees of freedom), clipped."""
        c, parts = self.server.chassis, len(self.workload.parts)
        noise = self.server.random("work", parts)
        if c.work_noise_dof is not None:
            chi2 = self.server.random("work_tail", parts)
            noise = noise / np.sqrt(chi2 / c.work_noise_dof)
        jitter = c.work_noise_frac / math.sqrt(max(dt, 0.1)) * noise
        if c.work_noise_dof is not None:
            jitter = np.clip(jitter, -c.work_noise_clip, c.work_noise_clip)
        return jitter

    def _checks(self, t_s: float) -> list[tuple[float, np.ndarray]]:
        """Result checks due by t_s: (time, per part and device: error or 0 if it matched)."""
        assert self.started_s is not None
        server = self.server
        every = server.chassis.verify_interval_s
        due = math.floor((t_s - self.started_s) / every + EPS)
        out = []
        rate = server.sdc_rate
        parts = len(self.workload.parts)
        while self._checks_done < due:
            self._checks_done += 1
            u = server.random("verify", 2 * parts)
            bad = u[:parts] < rate
            error = np.where(bad, 10.0 ** (-3.0 + 3.0 * u[parts:]), 0.0)
            out.append((self.started_s + self._checks_done * every, error))
        return out

    @staticmethod
    def _verdict(
        checks: list[tuple[float, np.ndarray]], part: int, device: int, end: float
    ) -> tuple[bool | None, float | None]:
        """Whether the checks in a sample matched: None if there were none."""
        errors = [float(e[part, device]) for t, e in checks if t <= end + EPS]
        if not errors:
            return None, None
        worst = max(errors)
        return (False, worst) if worst > 0 else (True, None)

    def _failure_event(self, t_s: float, device: int, part: str, error: float | None) -> Event:
        return Event(
            t_s,
            EventKind.VERIFICATION_FAILED,
            f"{part} result check failed (max relative error {error:.2g})",
            device,
            {"part": part, "max_rel_error": error},
        )
