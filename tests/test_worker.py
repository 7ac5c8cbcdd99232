"""WorkerPool on the CPU: samples on the coordinator's clock, and every way a worker can
end reported as exactly one outcome while the other workers go on."""

from __future__ import annotations

import dataclasses
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable

import pytest

from soak.devices.base import LoadUpdate
from soak.model import DeviceInfo, Event, EventKind, WorkerOutcome, WorkSample
from soak.worker import WorkerPool, classify_exception, odd_checksums
from tests.reliability.helpers import REPO, alive
from tests.workloads.fakes import ENV_MARK, ScriptedWorkload
from workloads import WorkloadOptions
from workloads.device import cpu_flags, cpu_gemm_dtype


def cpu_devices(count: int, **extra: object) -> list[DeviceInfo]:
    return [
        DeviceInfo(index=i, backend="cpu", name="cpu", torch_device="cpu", **extra)  # type: ignore[arg-type]
        for i in range(count)
    ]


class Collector:
    """Polls a pool the way the runner does and keeps everything it returned."""

    def __init__(self, pool: WorkerPool, t0: float) -> None:
        self.pool = pool
        self.t0 = t0
        self.samples: list[WorkSample] = []
        self.events: list[Event] = []

    def poll(self) -> LoadUpdate:
        update = self.pool.poll(time.monotonic() - self.t0)
        self.samples += update.samples
        self.events += update.events
        return update

    def until(self, done: Callable[[], bool], timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not done():
            assert time.monotonic() < deadline, f"timed out; events: {self.events}"
            time.sleep(0.05)
            self.poll()

    def stop(self) -> None:
        update = self.pool.stop(time.monotonic() - self.t0)
        self.samples += update.samples
        self.events += update.events

    def outcomes(self) -> dict[int | None, list[Event]]:
        out: dict[int | None, list[Event]] = {}
        for event in self.events:
            if event.kind is EventKind.WORKER_OUTCOME:
                out.setdefault(event.device, []).append(event)
        return out

    def outcome(self, device: int) -> str | None:
        events = self.outcomes().get(device, [])
        assert len(events) <= 1, events
        return events[0].details["outcome"] if events else None

    def samples_of(self, device: int) -> list[WorkSample]:
        return [s for s in self.samples if s.device == device]


def start(pool: WorkerPool) -> Collector:
    t0 = time.monotonic()
    pool.start(t0)
    return Collector(pool, t0)


@pytest.fixture
def gemm_options() -> WorkloadOptions:
    return WorkloadOptions(step_s=0.1, gemm_n=128, gemm_ring=4, cpu_threads=1)


def test_samples_arrive_on_the_coordinators_clock(gemm_options: WorkloadOptions) -> None:
    run = start(WorkerPool(cpu_devices(1), "gemm", gemm_options, heartbeat_timeout_s=10))
    run.until(lambda: len(run.samples) >= 5)
    now = time.monotonic() - run.t0
    run.stop()
    ready = [e for e in run.events if e.kind is EventKind.LOAD_START]
    choice = cpu_gemm_dtype(cpu_flags())
    assert [e.device for e in ready] == [0] and ready[0].details["dtype"] == choice.name
    assert f"dtype={choice.name} ({choice.reason}), n=128 (asked)" in ready[0].message
    starts = [s.t_start_s for s in run.samples]
    assert starts == sorted(starts)
    assert all(0 < s.t_start_s < s.t_end_s <= now + 5 for s in run.samples)
    assert all((s.device, s.part, s.unit) == (0, "gemm", "FLOP") for s in run.samples)
    assert all(s.work > 0 for s in run.samples)
    assert run.samples[0].verified is True  # checked after the first step
    assert run.samples[0].t_start_s >= ready[0].t_s - 1.0
    assert run.outcome(0) == WorkerOutcome.OK
    assert run.pool.failed_devices() == frozenset()


def test_sigkilled_worker_is_crashed_and_the_other_goes_on(
    gemm_options: WorkloadOptions,
) -> None:
    run = start(WorkerPool(cpu_devices(2), "gemm", gemm_options, heartbeat_timeout_s=10))
    run.until(lambda: all(run.samples_of(i) for i in (0, 1)))
    pid = run.pool.worker_pids()[0]
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    run.until(lambda: run.outcome(0) is not None)
    killed_at = time.monotonic() - run.t0
    run.until(lambda: any(s.t_start_s > killed_at for s in run.samples_of(1)))
    (event,) = run.outcomes()[0]
    assert event.details["outcome"] == WorkerOutcome.CRASHED
    assert event.details["signal"] == "SIGKILL"
    assert run.pool.failed_devices() == {0}
    run.stop()
    assert run.outcome(1) == WorkerOutcome.OK
    assert len(run.outcomes()[0]) == 1


def test_each_failure_is_one_outcome_and_spares_the_others() -> None:
    """Seeds 0..5 of ScriptedWorkload: healthy, setup fails, raises, out of memory, hangs,
    wrong results."""
    options = WorkloadOptions(step_s=0.05)
    devices = cpu_devices(6, worker_env={ENV_MARK: "pinned"})
    pool = WorkerPool(
        devices, "scripted", options, heartbeat_timeout_s=1.5, factory=ScriptedWorkload
    )
    run = start(pool)
    run.until(lambda: all(run.outcome(i) for i in (1, 2, 3, 4)))
    healthy_before = len(run.samples_of(0))
    run.until(lambda: len(run.samples_of(0)) > healthy_before + 3)
    run.stop()

    assert run.outcome(0) == WorkerOutcome.OK
    assert run.outcome(1) == WorkerOutcome.SETUP_FAILED
    assert run.outcome(2) == WorkerOutcome.CRASHED
    assert run.outcome(3) == WorkerOutcome.OUT_OF_MEMORY
    assert run.outcome(4) == WorkerOutcome.HUNG
    assert run.outcome(5) == WorkerOutcome.VERIFICATION_FAILED
    details = {i: run.outcomes()[i][0].details for i in range(6)}
    assert details[1]["exception"] == "RuntimeError: no such device: cpu"
    assert details[2]["exception"] == "ValueError: kernel returned garbage"
    assert details[2]["exit_code"] == 1
    assert details[4]["phase"] == "run" and details[4]["signal"] == "SIGKILL"
    assert details[5]["verification_failures"] >= 1
    assert run.pool.failed_devices() == {1, 2, 3, 4, 5}

    failed_checks = [e for e in run.events if e.kind is EventKind.VERIFICATION_FAILED]
    assert failed_checks and {e.device for e in failed_checks} == {5}
    assert failed_checks[0].details["mismatched"] == 3
    assert failed_checks[0].details["max_rel_error"] == 0.25
    assert any(s.verified is False for s in run.samples_of(5))
    assert len(run.samples_of(5)) > 3  # it kept running after the failure

    ready = {e.device: e.details for e in run.events if e.kind is EventKind.LOAD_START}
    assert ready[0]["mark"] == "pinned"  # worker_env reached the worker
    assert ready[0]["torch_imported"] is False  # ...before anything imported torch
    for pid in run.pool.worker_pids().values():
        assert pid is not None and not alive(pid)


def test_a_failed_check_before_a_crash_still_reaches_the_samples() -> None:
    """Seed 6: the first step's check fails, the next step raises (the device is lost)."""
    options = WorkloadOptions(step_s=0.05)
    pool = WorkerPool(cpu_devices(1), "scripted", options, seed=6, factory=ScriptedWorkload)
    run = start(pool)
    run.until(lambda: run.outcome(0) is not None)
    run.stop()
    assert run.outcome(0) == WorkerOutcome.DEVICE_LOST
    assert [s.verified for s in run.samples_of(0)] == [False]


def test_odd_checksum_among_same_kind_devices_is_flagged() -> None:
    options = WorkloadOptions(step_s=0.05)
    pool = WorkerPool(cpu_devices(3), "scripted", options, seed=10, factory=ScriptedWorkload)
    run = start(pool)
    run.until(lambda: any(e.kind is EventKind.VERIFICATION_FAILED for e in run.events))
    run.stop()
    (flag,) = [e for e in run.events if e.kind is EventKind.VERIFICATION_FAILED]
    assert flag.device == 2
    assert flag.details["checksum"] == "bad0" and flag.details["majority"] == "600d"
    assert run.pool.failed_devices() == {2}
    assert run.outcome(2) == WorkerOutcome.VERIFICATION_FAILED
    assert run.outcome(0) == run.outcome(1) == WorkerOutcome.OK


def test_odd_checksum_found_only_at_stop_still_fails_that_workers_outcome() -> None:
    """The stop came before a poll compared the checksums: the final check at stop must
    decide the outcomes, not follow them (no "ok" beside a failed checksum)."""
    options = WorkloadOptions(step_s=0.05)
    pool = WorkerPool(cpu_devices(3), "scripted", options, seed=10, factory=ScriptedWorkload)
    check = pool._cross_check
    pool._cross_check = lambda t_s, final=False: check(t_s, final=True) if final else []
    run = start(pool)
    run.until(lambda: all(w.ready for w in pool._workers.values()))
    assert not any(e.kind is EventKind.VERIFICATION_FAILED for e in run.events)
    run.stop()
    (flag,) = [e for e in run.events if e.kind is EventKind.VERIFICATION_FAILED]
    assert flag.device == 2
    assert run.outcome(2) == WorkerOutcome.VERIFICATION_FAILED
    assert run.outcome(0) == run.outcome(1) == WorkerOutcome.OK


def test_odd_checksums_needs_a_majority_to_blame() -> None:
    assert odd_checksums({0: "a", 1: "a", 2: "b"}) == ({2}, "a")
    assert odd_checksums({0: "a", 1: "a"}) == (frozenset(), "a")
    assert odd_checksums({0: "a", 1: "b"}) == (frozenset(), None)
    assert odd_checksums({0: "a", 1: "a", 2: "b", 3: "b"}) == (frozenset(), None)


@pytest.mark.parametrize(
    ("exc", "outcome"),
    [
        (RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"), "out of memory"),
        (MemoryError(), "out of memory"),
        (RuntimeError("CUDA error: uncorrectable ECC error encountered"), "device lost"),
        (RuntimeError("CUDA error: unspecified launch failure"), "device lost"),
        (ValueError("shapes do not match"), None),
    ],
)
def test_exceptions_map_to_outcomes(exc: BaseException, outcome: str | None) -> None:
    assert classify_exception(exc) == outcome


def test_mix_runs_in_a_worker_with_its_data_loader(tiny: WorkloadOptions) -> None:
    options = dataclasses.replace(tiny, step_s=0.2, train_layers=1, train_loader_workers=1)
    run = start(WorkerPool(cpu_devices(1), "mix", options, heartbeat_timeout_s=20))
    run.until(lambda: {s.part for s in run.samples} == {"gemm", "membw", "train"}, 60)
    run.stop()
    assert run.outcome(0) == WorkerOutcome.OK
    units = {s.part: s.unit for s in run.samples}
    assert units == {"gemm": "FLOP", "membw": "B", "train": "token"}


COORDINATOR = """
import json, sys, time
from soak.model import DeviceInfo
from soak.worker import WorkerPool
from tests.workloads.fakes import ScriptedWorkload
from workloads import WorkloadOptions
from workloads.device import cpu_flags, cpu_gemm_dtype

devices = [DeviceInfo(index=i, backend="cpu", name="cpu", torch_device="cpu") for i in (0, 1)]
options = WorkloadOptions(step_s=0.05)
pool = WorkerPool(devices, "scripted", options, seed=20, factory=ScriptedWorkload)
pool.start(time.monotonic())
ready = 0
while ready < 2:
    ready += sum(e.kind == "load_start" for e in pool.poll(0.0).events)
    time.sleep(0.05)
print(json.dumps(list(pool.worker_pids().values())), flush=True)
time.sleep(600)
"""


def test_workers_die_with_their_coordinator() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    coordinator = subprocess.Popen(
        [sys.executable, "-c", COORDINATOR], cwd=REPO, env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert coordinator.stdout is not None
        readable, _, _ = select.select([coordinator.stdout], [], [], 30.0)
        assert readable, "the coordinator did not report its workers"
        pids = json.loads(coordinator.stdout.readline())
        assert len(pids) == 2 and all(alive(pid) for pid in pids)
        coordinator.kill()
        coordinator.wait(5)
        deadline = time.monotonic() + 5.0
        while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(alive(pid) for pid in pids)
    finally:
        coordinator.kill()
