"""Workloads and a backend for the reliability tests: real worker processes, no torch.

A spawned worker imports its workload factory by name, so these live in a module.
"""

from __future__ import annotations

import os
import time
from typing import Any

from soak.model import Capability, DeviceInfo, Event, Telemetry
from workloads.base import PartWork, StepResult, Verification, WorkloadOptions

LOST_FLAG = "SOAK_TEST_LOST_FLAG"  # worker_env: a file whose existence means "GPU lost"


class Sleeper:
    """One unit of work per ``step_s`` of sleep: a steady load that costs no CPU, so a test
    can run several workers on a 2-core CI runner without starving any of them. Where its
    device's ``LOST_FLAG`` file appears, a step fails as CUDA does on a lost GPU."""

    name = "sleeper"

    def __init__(self, options: WorkloadOptions) -> None:
        self.options = options
        self.flag = os.environ.get(LOST_FLAG)

    def setup(self, device: str, seed: int) -> None:
        return None

    def step(self) -> StepResult:
        if self.flag and os.path.exists(self.flag):
            raise RuntimeError("CUDA error: GPU is lost")
        t0 = time.monotonic()
        time.sleep(self.options.step_s)
        return StepResult(t0, time.monotonic(), (PartWork("gemm", 1e9, "FLOP"),))

    def verify(self) -> list[Verification]:
        return [Verification("gemm", True, 16, 0, 0.0, 0.0, 0.01)]

    def checksum(self) -> str | None:
        return None

    def describe(self) -> dict[str, Any]:
        return {"workload": self.name, "pid": os.getpid()}

    def close(self) -> None:
        return None


class QueueHolder(Sleeper):
    """A Sleeper that holds a multiprocessing queue, as a DataLoader with worker processes
    does: named semaphores registered with a resource tracker, never released if the
    worker is killed."""

    name = "queue-holder"

    def setup(self, device: str, seed: int) -> None:
        import multiprocessing

        self.queue = multiprocessing.get_context("spawn").Queue()


class CpuServer:
    """A backend presenting ``n`` devices, each a real worker process on this host's CPU.
    Telemetry holds only what a CPU-only test can honestly say: nothing (None)."""

    name = "cpu"

    def __init__(self, n: int, worker_env: dict[int, dict[str, str]] | None = None) -> None:
        env = worker_env or {}
        self._devices = [
            DeviceInfo(i, "cpu", "test cpu", torch_device="cpu", worker_env=env.get(i, {}))
            for i in range(n)
        ]

    def devices(self) -> list[DeviceInfo]:
        return list(self._devices)

    def capabilities(self) -> dict[int, dict[str, Capability]]:
        return {d.index: {"temp_c": Capability.NOT_SUPPORTED} for d in self._devices}

    def sample(self, t_s: float) -> list[Telemetry]:
        return [Telemetry(d.index, t_s) for d in self._devices]

    def poll_events(self, t_s: float) -> list[Event]:
        return []

    def simulated_load(self, workload: str) -> None:
        return None

    def close(self) -> None:
        return None
