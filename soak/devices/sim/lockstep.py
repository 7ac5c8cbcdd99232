"""The simulated server's synchronous training (``--workload ddp``).

Every tick, each device's rate at its own simulated clock (the ``ddp`` part's tokens, with
the load's work noise) gives its compute time for one step of ``TOKENS_PER_RANK``; the
server's step is the slowest device's compute plus a gradient all-reduce whose time comes
from a link model: a bus bandwidth per device (``link:gpu=N:factor=F`` scales it) that
falls as the device heats, the ring limited by its slowest link. The server takes as many
steps as fit in the tick; each device's work sample counts the tokens at its own compute
pace (as ``workloads.ddp`` reports them), and one representative step per tick is stored.
The noise-free step rate of each tick is kept as the truth the accuracy tests compare with.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from soak.devices.sim.params import TRAIN_FLOP_PER_TOKEN
from soak.model import ServerStep, SyncStep

LINK_BUSBW_B_S = 3.6e11  # [assumed] 8-GPU NVLink all-reduce busbw (nccl-tests, H100 SXM)
LINK_HEAT_PER_C = 0.0005  # [assumed] share of link bandwidth lost per °C above LINK_COOL_C
LINK_COOL_C = 40.0
GRAD_BYTES = 2.0 * TRAIN_FLOP_PER_TOKEN / 6  # bf16 gradients of the simulated model
ALLREDUCE_B = 256 * 2**20  # the timed all-reduce buffer, as workloads.ddp on a GPU
SEQ = 1024
TOKENS_PER_RANK = 16 * SEQ  # batch 16 x 1024 tokens per rank and step


class SyncSim:
    """Synchronous steps of the selected devices, tick by tick."""

    def __init__(self, devices: Sequence[int], link_factor: np.ndarray) -> None:
        self.devices = list(devices)
        self.link_factor = link_factor
        self.truth: list[tuple[float, float, float]] = []  # (t_start, t_end, samples/s)

    def link_busbw(self, die_c: np.ndarray) -> float:
        """The ring's bus bandwidth: its slowest device link, heated."""
        heat = 1.0 - LINK_HEAT_PER_C * np.maximum(die_c - LINK_COOL_C, 0.0)
        links = LINK_BUSBW_B_S * self.link_factor * np.clip(heat, 0.1, 1.0)
        return float(links[self.devices].min())

    def _step(self, rates: np.ndarray, busbw: float) -> tuple[np.ndarray, float]:
        """Per device compute time of one step, and the gradient all-reduce time."""
        n = len(self.devices)
        compute = TOKENS_PER_RANK / np.maximum(rates[self.devices], 1e-9)
        allreduce = GRAD_BYTES * 2 * (n - 1) / n / busbw if n > 1 else 0.0
        return compute, allreduce

    def tick(
        self, t0: float, t1: float, work: np.ndarray, clean: np.ndarray, die_c: np.ndarray
    ) -> tuple[np.ndarray, list[SyncStep], ServerStep]:
        """The tokens every device did in (t0, t1], its SyncStep and the server's.
        ``work``: tokens each device could do at its own pace (noisy); ``clean``: the same
        without noise. The straggler is the device slowest at its clocks."""
        dt = t1 - t0
        n = len(self.devices)
        busbw = self.link_busbw(die_c)
        clean_compute, allreduce = self._step(clean / dt, busbw)
        clean_step = float(clean_compute.max()) + allreduce
        self.truth.append((t0, t1, TOKENS_PER_RANK / SEQ * n / clean_step))
        # The work noise of a tick is an average over its steps: it moves the whole
        # lock-step server (the mean of the devices' noise), not the max of each step, which
        # would bias the step time by the largest of n noisy draws.
        sel = self.devices
        ratio = work[sel] / np.maximum(clean[sel], 1e-12)
        compute = clean_compute / max(float(ratio.mean()), 1e-3)
        step = float(compute.max()) + allreduce
        steps = dt / step
        # Each device's tokens at its own compute pace: what the per-device tables judge
        # (its own speed); the lock-step rate is the server's row.
        tokens = np.zeros_like(work)
        tokens[self.devices] = steps * TOKENS_PER_RANK * step / compute
        timed = ALLREDUCE_B * 2 * (n - 1) / n / busbw if n > 1 else None
        # One representative step per tick (a tick holds a few): its compute, wait and time.
        rows = [
            SyncStep(
                device,
                t0,
                t1,
                1,
                float(c),
                step - float(c),
                step,
                ALLREDUCE_B if timed else None,
                timed,
            )
            for device, c in zip(self.devices, compute, strict=True)
        ]
        straggler = self.devices[int(np.argmax(compute))]
        server = ServerStep(t0, t1, TOKENS_PER_RANK / SEQ * n, step, straggler, n)
        return tokens, rows, server

    def truth_rate(self, start_s: float, end_s: float) -> float | None:
        """The noise-free server step rate over the ticks that end in [start_s, end_s]."""
        rates = [(t1 - t0, r) for t0, t1, r in self.truth if start_s <= t1 <= end_s]
        total = sum(dt for dt, _ in rates)
        return sum(dt * r for dt, r in rates) / total if total else None
