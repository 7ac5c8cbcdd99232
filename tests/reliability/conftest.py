from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from soak.worker import WorkerPool
from tests.reliability.fakes import Sleeper
from tests.reliability.helpers import SoakRun, write_profile
from workloads import WorkloadOptions


@pytest.fixture
def profile(tmp_path: Path) -> Path:
    """The short-window acceptance profile of helpers.SHORT_PROFILE, as a file."""
    return write_profile(tmp_path)


@pytest.fixture
def soak_run(tmp_path: Path) -> Iterator[Callable[..., SoakRun]]:
    """Start ``soak run`` subprocesses writing under tmp_path; each is killed, with every
    process under it, when the test ends."""
    runs: list[SoakRun] = []

    def start(*args: str, out: str = "reports") -> SoakRun:
        run = SoakRun(tmp_path / out, *args)
        runs.append(run)
        return run

    yield start
    for run in runs:
        run.kill()


@pytest.fixture
def sleeper_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    """The runner's load: real worker processes running the CPU-free Sleeper workload."""

    def make_load(config, backend, devices):
        options = WorkloadOptions(step_s=0.05, verify_interval_s=0.5)
        return WorkerPool(
            devices,
            "sleeper",
            options,
            heartbeat_timeout_s=config.heartbeat_timeout_s,
            factory=Sleeper,
            stop_timeout_s=5.0,
        )

    monkeypatch.setattr("soak.runner.make_load", make_load)


@pytest.fixture(autouse=True)
def _no_cuda_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers here run on the CPU whatever the machine has."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
