"""Workloads for the worker-pool tests: no torch, failures on a script.

A spawned worker imports its workload factory by name, so these live in a module rather
than in a test. Behaviour is chosen by the worker's seed (the pool's seed plus the device
index), so one pool can hold a healthy worker next to each kind of failure.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from workloads.base import PartWork, StepResult, Verification, WorkloadOptions

ENV_MARK = "SOAK_TEST_MARK"  # set through DeviceInfo.worker_env; echoed in describe()

SCRIPT = {
    1: "setup_fails",
    2: "raises",
    3: "out_of_memory",
    4: "hangs",
    5: "wrong_results",
    6: "wrong_then_raises",
    12: "odd_checksum",
}
"""Seed -> what the worker does; any other seed runs healthy steps."""


class ScriptedWorkload:
    """Sleeps ``step_s`` per step and reports one unit of work, unless its seed says to
    fail in one of the ways a real device can."""

    name = "scripted"

    def __init__(self, options: WorkloadOptions) -> None:
        self.options = options
        self.behaviour = "healthy"
        self.failed_a_check = False

    def setup(self, device: str, seed: int) -> None:
        self.behaviour = SCRIPT.get(seed, "healthy")
        if self.behaviour == "setup_fails":
            raise RuntimeError(f"no such device: {device}")

    def step(self) -> StepResult:
        if self.behaviour == "raises":
            raise ValueError("kernel returned garbage")
        if self.behaviour == "out_of_memory":
            raise MemoryError("fake allocation of 80 GiB")
        if self.behaviour == "hangs":
            time.sleep(3600)
        if self.failed_a_check:
            raise RuntimeError("CUDA error: unspecified launch failure")
        t0 = time.monotonic()
        time.sleep(self.options.step_s)
        return StepResult(t0, time.monotonic(), (PartWork(self.name, 1.0, "FLOP"),))

    def verify(self) -> list[Verification]:
        if self.behaviour in ("wrong_results", "wrong_then_raises"):
            self.failed_a_check = self.behaviour == "wrong_then_raises"
            return [Verification(self.name, False, 100, 3, 0.5, 0.25, 0.01, "injected")]
        return [Verification(self.name, True, 100, 0, 0.0, 0.0, 0.01)]

    def checksum(self) -> str | None:
        return "bad0" if self.behaviour == "odd_checksum" else "600d"

    def describe(self) -> dict[str, Any]:
        return {
            "workload": self.name,
            "checksum": self.checksum(),
            "mark": os.environ.get(ENV_MARK),
            "torch_imported": "torch" in sys.modules,
        }

    def close(self) -> None:
        return None
