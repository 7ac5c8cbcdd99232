"""mix: GEMM, memory traffic and training at once, for the hottest realistic state.

Work goes in rounds: one training iteration plus as many products and copy/triad cycles as
take the same time alone. On a GPU each part has its own CUDA stream, so the three run
concurrently (tensor cores, HBM and a host-fed pipeline busy together) and at most two
rounds are in flight; on a CPU the parts run one after the other.

No figure is derived from another. On a CPU each part runs as one block of the step and is
timed on its own: its rate is its own work over its own time. On a GPU the parts overlap,
so no part has a time of its own (and with fixed rounds, per-part rates over the shared
step would all move together by construction): the mix is reported as one rate, part
"mix", counted in the GEMM FLOP it completes per second while sharing the device.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Iterator
from typing import Any

import torch

from workloads.base import PartWork, StepResult, Verification, WorkloadOptions
from workloads.device import memory_budget_b, open_device, synchronize
from workloads.gemm import GemmWorkload
from workloads.membw import MembwWorkload
from workloads.train import TrainWorkload

PART_SHARE = 0.4  # of the memory share, each for the GEMM ring and the STREAM arrays


class MixWorkload:
    """The three workloads interleaved; reports parts "gemm", "membw" and "train"."""

    name = "mix"

    def __init__(self, options: WorkloadOptions) -> None:
        self.options = options
        self.rounds: dict[str, int] = {}

    def setup(self, device: str, seed: int) -> None:
        self.device = open_device(device, self.options)
        budget = memory_budget_b(self.device, self.options)
        part_options = dataclasses.replace(self.options, mem_bytes=int(PART_SHARE * budget))
        self.train = TrainWorkload(self.options)
        self.gemm = GemmWorkload(part_options)
        self.membw = MembwWorkload(part_options)
        for part in self.parts:
            part.setup(str(self.device), seed)
        base_s = self.train.sizer.unit_s
        self.rounds = {
            "train": 1,
            "gemm": max(1, round(base_s / self.gemm.sizer.unit_s)),
            "membw": max(1, round(base_s / self.membw.sizer.unit_s)),
        }
        cuda = self.device.type == "cuda"
        self.streams = {
            p.name: torch.cuda.Stream(self.device) if cuda else None for p in self.parts
        }
        # on a CPU, whole rounds per step: each part one block of about step_s / 3
        self.repeats = max(1, round(self.options.step_s / (len(self.parts) * base_s)))

    @property
    def parts(self) -> tuple[TrainWorkload, GemmWorkload, MembwWorkload]:
        return (self.train, self.gemm, self.membw)

    @property
    def concurrent(self) -> bool:
        """Whether the parts overlap (their own CUDA streams) rather than take turns."""
        return any(stream is not None for stream in self.streams.values())

    def step(self) -> StepResult:
        return self._step_concurrent() if self.concurrent else self._step_in_turn()

    def _step_in_turn(self) -> StepResult:
        """Each part in one block, timed on its own."""
        t0 = time.monotonic()
        parts = []
        for part in self.parts:
            t_part = time.monotonic()
            work = part.enqueue(self.rounds[part.name] * self.repeats)
            synchronize(self.device)
            parts.append(PartWork(part.name, work, part.unit, t_part, time.monotonic()))
        checks = self.train.finish_step()
        return StepResult(t0, time.monotonic(), tuple(parts), checks)

    def _step_concurrent(self) -> StepResult:
        """Rounds on the parts' streams until step_s has passed; one rate for the mix."""
        work = dict.fromkeys(self.rounds, 0.0)
        in_flight: list[torch.cuda.Event] = []
        t0 = time.monotonic()
        while True:
            queued = self._enqueue_round(work)
            for event in in_flight:
                event.synchronize()
            in_flight = queued
            if time.monotonic() - t0 >= self.options.step_s:
                break
        synchronize(self.device)
        t1 = time.monotonic()
        checks = self.train.finish_step()
        return StepResult(t0, t1, (PartWork(self.name, work["gemm"], self.gemm.unit),), checks)

    def _enqueue_round(self, work: dict[str, float]) -> list[torch.cuda.Event]:
        """Queue one round, each part on its own stream; the events that mark its end."""
        events: list[torch.cuda.Event] = []
        for part in self.parts:
            stream = self.streams[part.name]
            with _on(stream):
                work[part.name] += part.enqueue(self.rounds[part.name])
                if stream is not None:
                    event = torch.cuda.Event()
                    event.record(stream)
                    events.append(event)
        return events

    def verify(self) -> list[Verification]:
        return [check for part in self.parts for check in part.verify()]

    def checksum(self) -> str | None:
        return self.gemm.checksum()

    def describe(self) -> dict[str, Any]:
        return {
            "workload": self.name,
            "concurrent_streams": self.concurrent,
            "rates": "one rate for the mix, its GEMM FLOP/s while sharing the device: the "
            "parts run concurrently, so no part has a time of its own"
            if self.concurrent
            else "per part, each over its own time",
            "round": dict(self.rounds),
            "rounds_per_step": 1 if self.concurrent else self.repeats,
            "parts": {part.name: part.describe() for part in self.parts},
            "checksum": self.checksum(),
        }

    def close(self) -> None:
        for part in self.parts:
            part.close()


@contextlib.contextmanager
def _on(stream: torch.cuda.Stream | None) -> Iterator[None]:
    """Make ``stream`` current for the block; no-op without one (CPU)."""
    if stream is None:
        yield
        return
    with torch.cuda.stream(stream):
        yield
