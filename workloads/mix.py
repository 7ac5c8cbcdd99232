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

With ``--option mix_sync=1`` on two devices or more, the training part is the ddp step
(``workloads.ddp``: the model under DistributedDataParallel, the timed all-reduce, the
all-gather that names the straggler), so the hottest state exercises the links too and
the server's lock-step rate is recorded. Every per-device figure stays the device's own:
the training part's tokens are counted at this rank's own pace (its time less the wait
for the other ranks), and on a GPU the mix rate is over the step less that wait; the wait
is in the step's ``sync`` timing, not in any device's rate (docs/ddp.md).
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Iterator
from typing import Any

import torch

from workloads.base import PartWork, StepResult, Verification, WorkloadOptions
from workloads.ddp import DdpWorkload, rendezvous_set
from workloads.device import memory_budget_b, open_device, synchronize
from workloads.gemm import GemmWorkload
from workloads.membw import MembwWorkload
from workloads.train import TrainWorkload

PART_SHARE = 0.4  # of the memory share, each for the GEMM ring and the STREAM arrays
PARTS = ("train", "gemm", "membw")


def _own_pace(work: float, span_s: float, wait_s: float) -> float:
    """``work`` done in ``span_s`` that held ``wait_s`` of waiting for other ranks, counted
    at this device's own pace: as if done in ``span_s - wait_s``."""
    own = span_s - wait_s
    return work * span_s / own if own > 0 else work


class MixWorkload:
    """The three workloads interleaved; reports parts "gemm", "membw" and "train"."""

    name = "mix"

    def __init__(self, options: WorkloadOptions) -> None:
        self.options = options
        self.rounds: dict[str, int] = {}
        # lock-step training where the coordinator set up a process group (mix_sync)
        self.ddp = DdpWorkload(options) if options.mix_sync and rendezvous_set() else None
        self.sync_rounds = 0  # rounds per step on a GPU, the same on every rank

    def bind_stop(self, requested: threading.Event) -> threading.Event:
        """In lock-step, the event every rank agrees on (``DdpWorkload.bind_stop``)."""
        return self.ddp.bind_stop(requested) if self.ddp is not None else requested

    def setup(self, device: str, seed: int) -> None:
        self.device = open_device(device, self.options)
        budget = memory_budget_b(self.device, self.options)
        part_options = dataclasses.replace(self.options, mem_bytes=int(PART_SHARE * budget))
        self.train = self.ddp if self.ddp is not None else TrainWorkload(self.options)
        self.gemm = GemmWorkload(part_options)
        self.membw = MembwWorkload(part_options)
        for part in self.parts:
            part.setup(str(self.device), seed)
        base_s = self.ddp.iteration_s if self.ddp is not None else self.train.sizer.unit_s
        self.rounds = {
            "train": 1,
            "gemm": max(1, round(base_s / self.gemm.sizer.unit_s)),
            "membw": max(1, round(base_s / self.membw.sizer.unit_s)),
        }
        cuda = self.device.type == "cuda"
        self.streams = {name: torch.cuda.Stream(self.device) if cuda else None for name in PARTS}
        # on a CPU, whole rounds per step: each part one block of about step_s / 3
        self.repeats = max(1, round(self.options.step_s / (len(self.parts) * base_s)))
        if self.ddp is not None:  # every rank runs the same training iterations per step
            self.repeats = self.ddp.agree(self.repeats)
            if self.concurrent:
                self.sync_rounds = self.ddp.agree(self._rounds_per_step())

    @property
    def parts(self) -> tuple[TrainWorkload | DdpWorkload, GemmWorkload, MembwWorkload]:
        return (self.train, self.gemm, self.membw)

    @property
    def named(self) -> dict[str, TrainWorkload | DdpWorkload | GemmWorkload | MembwWorkload]:
        return dict(zip(PARTS, self.parts, strict=True))

    def _rounds_per_step(self) -> int:
        """Rounds that fill about ``step_s`` on this rank (lock-step on a GPU: a fixed
        count, agreed by the ranks, in place of rounds until the time is up)."""
        work = dict.fromkeys(self.rounds, 0.0)
        t0 = time.monotonic()
        self._enqueue_round(work)
        synchronize(self.device)
        assert self.ddp is not None
        self.ddp.take_timing()  # the calibration round is no step's
        return max(1, round(self.options.step_s / max(time.monotonic() - t0, 1e-6)))

    @property
    def concurrent(self) -> bool:
        """Whether the parts overlap (their own CUDA streams) rather than take turns."""
        return any(stream is not None for stream in self.streams.values())

    def step(self) -> StepResult:
        if self.ddp is not None:
            return self._sync_concurrent() if self.concurrent else self._sync_in_turn()
        return self._step_concurrent() if self.concurrent else self._step_in_turn()

    def _step_in_turn(self) -> StepResult:
        """Each part in one block, timed on its own."""
        t0 = time.monotonic()
        parts = []
        for name, part in self.named.items():
            t_part = time.monotonic()
            work = part.enqueue(self.rounds[name] * self.repeats)
            synchronize(self.device)
            parts.append(PartWork(name, work, part.unit, t_part, time.monotonic()))
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

    def _sync_in_turn(self) -> StepResult:
        """GEMM and memory blocks timed on their own, then the training block as ddp
        iterations, counted at this rank's own pace (its block less the wait for the
        others, who may still be in their own GEMM or memory blocks)."""
        assert self.ddp is not None
        t0 = time.monotonic()
        parts = []
        for name in ("gemm", "membw"):
            part = self.named[name]
            t_part = time.monotonic()
            work = part.enqueue(self.rounds[name] * self.repeats)
            synchronize(self.device)
            parts.append(PartWork(name, work, part.unit, t_part, time.monotonic()))
        t_train = time.monotonic()
        _, wait = self.ddp.run_iterations(self.repeats)
        t_end = time.monotonic()
        tokens = _own_pace(self.repeats * self.ddp.tokens_per_iteration, t_end - t_train, wait)
        parts.insert(0, PartWork("train", tokens, self.ddp.unit, t_train, t_end))
        sync, checks = self.ddp.end_step(self.repeats, t_end - t0 - wait, wait, t_end - t0)
        return StepResult(t0, time.monotonic(), tuple(parts), checks, sync)

    def _sync_concurrent(self) -> StepResult:
        """The agreed number of rounds on the parts' streams, the training's on DDP; the
        mix rate over the step less the training stream's wait for the other ranks (the
        rounds wait on it, so the device idles about that long)."""
        assert self.ddp is not None
        work = dict.fromkeys(self.rounds, 0.0)
        in_flight: list[torch.cuda.Event] = []
        t0 = time.monotonic()
        for _ in range(self.sync_rounds):
            queued = self._enqueue_round(work)
            for event in in_flight:
                event.synchronize()
            in_flight = queued
        synchronize(self.device)
        t1 = time.monotonic()
        _, wait = self.ddp.take_timing()
        flop = _own_pace(work["gemm"], t1 - t0, wait)
        sync, checks = self.ddp.end_step(self.sync_rounds, t1 - t0 - wait, wait, t1 - t0)
        parts = (PartWork(self.name, flop, self.gemm.unit),)
        return StepResult(t0, time.monotonic(), parts, checks, sync)

    def _enqueue_round(self, work: dict[str, float]) -> list[torch.cuda.Event]:
        """Queue one round, each part on its own stream; the events that mark its end."""
        events: list[torch.cuda.Event] = []
        for name, part in self.named.items():
            stream = self.streams[name]
            with _on(stream):
                work[name] += part.enqueue(self.rounds[name])
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
            "rounds_per_step": (self.sync_rounds or 1) if self.concurrent else self.repeats,
            "lock_step": self.ddp is not None,
            "parts": {name: self._describe(name) for name in PARTS},
            "checksum": self.checksum(),
        }

    def _describe(self, name: str) -> dict[str, Any]:
        described = self.named[name].describe()
        if name == "train" and self.ddp is not None:  # mix sets the count, not ddp's own
            iterations = self.sync_rounds if self.concurrent else self.repeats
            described = {**described, "iterations_per_step": iterations}
        return described

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
