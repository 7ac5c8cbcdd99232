"""Random streams of the simulated server: everything random comes from the seed."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from soak.devices.sim.params import Chassis


class Bank:
    """Random numbers from one generator per device, drawn in blocks so that a tick costs
    a slice, not one call per device. Row k of every draw is the k-th number of each
    device's own stream, so a device's numbers do not depend on how many devices exist."""

    def __init__(
        self,
        seeds: Sequence[np.random.SeedSequence],
        kind: str,
        block: int = 2048,
        dof: float = 1.0,
    ):
        self._gens = [np.random.Generator(np.random.PCG64(s)) for s in seeds]
        self._kind = kind
        self._dof = dof
        self._block = block
        self._rows = np.empty((0, len(seeds)))
        self._next = 0

    def take(self, rows: int) -> np.ndarray:
        """The next ``rows`` x n numbers (standard normal, uniform in [0, 1), or chi-square
        with ``dof`` degrees of freedom)."""
        if self._next + rows > len(self._rows):
            size = max(self._block, rows)
            fresh = [self._draw(g, size) for g in self._gens]
            self._rows = np.concatenate([self._rows[self._next :], np.stack(fresh, axis=1)])
            self._next = 0
        out = self._rows[self._next : self._next + rows]
        self._next += rows
        return out

    def _draw(self, gen: np.random.Generator, size: int) -> np.ndarray:
        if self._kind == "normal":
            return gen.standard_normal(size)
        if self._kind == "chisquare":
            return gen.chisquare(self._dof, size)
        return gen.random(size)


@dataclass(frozen=True, slots=True)
class Draws:
    """Everything drawn once from the seed."""

    efficiency: np.ndarray  # dynamic-power multiplier per device (silicon lottery)
    leakage: np.ndarray  # leakage multiplier per device (silicon lottery)
    energy_offset_j: np.ndarray
    inlet_phase: float
    inlet_period_s: float
    fan_phase: float
    hunt_phase: float  # the fan controller's slow cycle
    sensor_phase: np.ndarray  # where each temperature sensor's refresh falls, in [0, 1)
    ripple_phase: np.ndarray  # where each device's load ripple cycle starts, in [0, 1)


def seed_streams(seed: int, n: int, chassis: Chassis) -> tuple[Draws, dict[str, Bank]]:
    """Static draws and per-device banks (telemetry noise, dithering, work jitter and its
    heavy tail, checks, the load's ripple). Draws added later come after the earlier ones,
    so that the earlier ones stay the same for a seed."""
    root = np.random.SeedSequence(seed)
    chassis_seq, *device_seqs = root.spawn(n + 1)
    per_device = [s.spawn(8) for s in device_seqs]
    static = [np.random.Generator(np.random.PCG64(s[0])) for s in per_device]
    eff = np.array([g.standard_normal() for g in static])
    leak = np.array([g.standard_normal() for g in static])
    offset = np.array([g.uniform(*chassis.energy_offset_j) for g in static])
    sensor_phase = np.array([g.random() for g in static])
    ripple_phase = np.array([g.random() for g in static])
    room = np.random.Generator(np.random.PCG64(chassis_seq))
    draws = Draws(
        efficiency=1.0 + np.clip(chassis.efficiency_spread * eff, -0.05, 0.05),
        leakage=1.0 + np.clip(chassis.leakage_spread * leak, -0.25, 0.25),
        energy_offset_j=np.round(offset),
        inlet_phase=float(room.uniform(0, 2 * math.pi)),
        inlet_period_s=float(room.uniform(*chassis.inlet_period_s)),
        fan_phase=float(room.uniform(0, 2 * math.pi)),
        hunt_phase=float(room.uniform(0, 2 * math.pi)),
        sensor_phase=sensor_phase,
        ripple_phase=ripple_phase,
    )
    banks = {
        "noise": Bank([s[1] for s in per_device], "normal"),
        "dither": Bank([s[2] for s in per_device], "uniform"),
        "work": Bank([s[3] for s in per_device], "normal"),
        "verify": Bank([s[4] for s in per_device], "uniform"),
        "work_tail": Bank([s[5] for s in per_device], "chisquare", dof=chassis.work_noise_dof or 1),
        "ripple": Bank([s[6] for s in per_device], "normal"),  # the load's power and die
        "ripple_clock": Bank([s[7] for s in per_device], "uniform"),  # the clock a limit holds
    }
    return draws, banks
