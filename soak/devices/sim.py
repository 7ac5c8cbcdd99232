"""The simulated server (``--backend sim``): N accelerators of one SKU in one chassis.

A real backend, not a test mock. Per device and vectorised over devices:

- a two-node thermal RC network (die -> heat sink -> air) integrated exactly with the
  matrix exponential over each substep, plus an HBM node that lags the die and heat sink;
- chassis air: a slowly drifting inlet temperature, a small chassis-fan cycle, and
  **neighbour heating**: the server has two rows of GPUs in the airflow, the front row
  ``0 .. ceil(N/2)-1`` and the rear row after it; rear GPU ``i`` breathes the exhaust of
  front GPU ``i - ceil(N/2)``, warmed by that GPU's heat flow into its air;
- power = board base + memory + dynamic ``C V(f)^2 f`` + leakage rising exponentially with
  die temperature; a DVFS governor picks the highest clock whose power fits under the
  enforced limit and under the thermal limit near the max-operating temperature, and
  sets NVML's clock-event reason bits as it goes; HW slowdown, power brake and HW thermal
  halve the clocks;
- throughput proportional to the SM clock (GEMM) or the memory clock (memory bandwidth),
  quantised noisy sensors, ECC/XID/verification faults.

Deterministic for a seed and a tick schedule: every random number comes from per-device
``numpy`` generators spawned from the seed. Times are seconds on the run's clock; faults
with ``at=`` count from the load's start. The tables are in ``soak.devices.sim_params``.
"""

from __future__ import annotations

import hashlib
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from soak.devices import select
from soak.devices.base import LoadUpdate
from soak.devices.sim_params import (
    CHASSIS,
    DEFAULT_SKU,
    SKUS,
    TRAIN_FLOP_PER_TOKEN,
    TRAIN_SM_WEIGHT,
    WORKLOADS,
    Chassis,
    Sku,
    Workload,
)
from soak.errors import ConfigError
from soak.model import (
    TELEMETRY_METRICS,
    Capability,
    ClockReason,
    DeviceInfo,
    Event,
    EventKind,
    Telemetry,
    WorkerOutcome,
    WorkSample,
)

__all__ = ["FAULT_KINDS", "SKUS", "Fault", "SimLoad", "SimServer", "parse_fault"]

MAX_GPUS = 64
# The Telemetry metrics the sim reads (``_read``); the fan belongs to the chassis (no reading).
SIM_METRICS = frozenset(TELEMETRY_METRICS) - {"fan_pct"}
XID_FALLEN_OFF_BUS = 79
_EPS = 1e-9

# ---------------------------------------------------------------------------------------
# Faults: KIND[:key=value]...
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Rule:
    """What one key accepts: a number, maybe whole, within an optional range."""

    integer: bool = False
    low: float | None = None
    low_open: bool = False  # True: must be > low, else >= low
    high: float | None = None

    def problem(self, key: str, value: float) -> str | None:
        if self.integer and value != int(value):
            return f"{key} must be a whole number"
        too_low = self.low is not None and (
            value <= self.low if self.low_open else value < self.low
        )
        too_high = self.high is not None and value > self.high
        if not (too_low or too_high):
            return None
        if self.high is None:
            return f"{key} must be {'>' if self.low_open else '>='} {self.low:g}"
        side = "above" if self.low_open else "at least"
        return f"{key} must be {side} {self.low:g} and at most {self.high:g}"


@dataclass(frozen=True, slots=True)
class _Kind:
    """One fault kind: its keys and what it does."""

    about: str
    required: dict[str, _Rule]
    optional: dict[str, _Rule] = field(default_factory=dict)


_GPU = _Rule(integer=True, low=0)
_AT = _Rule(low=0)
_FOR = _Rule(low=0, low_open=True)

FAULT_KINDS: dict[str, _Kind] = {
    "airflow": _Kind(
        "heat-sink-to-air thermal resistance x factor (blocked or weak airflow)",
        {"gpu": _GPU, "factor": _Rule(low=0, low_open=True, high=20)},
    ),
    "power-cap": _Kind(
        "enforced power limit lowered to watts", {"gpu": _GPU, "watts": _Rule(low=0, low_open=True)}
    ),
    "hw-slowdown": _Kind(
        "HW_SLOWDOWN from at= (for for= seconds): clocks halved",
        {"gpu": _GPU, "at": _AT},
        {"for": _FOR},
    ),
    "power-brake": _Kind(
        "HW_POWER_BRAKE from at= (for for= seconds): clocks halved",
        {"gpu": _GPU, "at": _AT},
        {"for": _FOR},
    ),
    "hw-thermal": _Kind(
        "HW_THERMAL from at= (for for= seconds): a board thermal alert, clocks halved",
        {"gpu": _GPU, "at": _AT},
        {"for": _FOR},
    ),
    "ecc": _Kind(
        "count uncorrectable ECC errors at at=, row remap pending",
        {"gpu": _GPU, "at": _AT},
        {"count": _Rule(integer=True, low=1)},
    ),
    "xid": _Kind(
        "XID code at at=; 79 (fallen off the bus) loses the device",
        {"gpu": _GPU, "code": _Rule(integer=True, low=1, high=999), "at": _AT},
    ),
    "sdc": _Kind(
        "fraction rate of result checks fail (silent data corruption)",
        {"gpu": _GPU, "rate": _Rule(low=0, low_open=True, high=1)},
    ),
    "stall": _Kind(
        "input pipeline supplies only 1-fraction of what the device can consume",
        {"gpu": _GPU, "fraction": _Rule(low=0, low_open=True, high=1)},
        {"at": _AT, "for": _FOR},
    ),
    "inlet": _Kind(
        "inlet air warmer by delta °C (every GPU, or gpu=)",
        {"delta": _Rule(low=-20, high=40)},
        {"gpu": _GPU},
    ),
    "slow": _Kind(
        "throughput x factor at the same clocks (a weak part)",
        {"gpu": _GPU, "factor": _Rule(low=0, low_open=True, high=1)},
    ),
    "leaky": _Kind(
        "leakage power x factor (a leaky die)",
        {"gpu": _GPU, "factor": _Rule(low=0, low_open=True, high=10)},
    ),
}

# Kinds that act at a time after the load starts; the others hold from the start.
_TIMED_KINDS = frozenset({"hw-slowdown", "power-brake", "hw-thermal", "ecc", "xid", "stall"})


@dataclass(frozen=True, slots=True)
class Fault:
    """One injected fault, parsed from ``KIND[:key=value]...``; keys not given are None.

    ``at_s`` counts from the load's start; ``for_s`` None means until the end.
    """

    kind: str
    spec: str
    gpu: int | None = None
    at_s: float | None = None
    for_s: float | None = None
    factor: float | None = None
    watts: float | None = None
    count: int | None = None
    code: int | None = None
    rate: float | None = None
    fraction: float | None = None
    delta_c: float | None = None

    @property
    def timed(self) -> bool:
        return self.kind in _TIMED_KINDS


def _fault_error(spec: str, problem: str) -> ConfigError:
    return ConfigError(f"--sim-fault {spec!r}: {problem}")


def _parse_pairs(spec: str, kind: str, parts: list[str]) -> dict[str, float]:
    """The key=value pairs of a spec, each checked against its kind's rules."""
    rules = FAULT_KINDS[kind]
    allowed = {**rules.required, **rules.optional}
    values: dict[str, float] = {}
    for part in parts:
        key, sep, raw = (s.strip() for s in part.partition("="))
        if not sep or not key:
            raise _fault_error(spec, f"{part!r} is not key=value")
        if key not in allowed:
            raise _fault_error(
                spec, f"unknown key {key!r} for {kind} (allowed: {', '.join(allowed)})"
            )
        if key in values:
            raise _fault_error(spec, f"{key} given twice")
        try:
            value = float(raw)
        except ValueError:
            raise _fault_error(spec, f"{key}={raw!r} is not a number") from None
        if not math.isfinite(value):
            raise _fault_error(spec, f"{key}={raw!r} is not a finite number")
        problem = allowed[key].problem(key, value)
        if problem:
            raise _fault_error(spec, problem)
        values[key] = value
    missing = [k for k in rules.required if k not in values]
    if missing:
        needs = ", ".join(f"{k}=" for k in rules.required)
        raise _fault_error(spec, f"missing {missing[0]}= ({kind} needs {needs})")
    return values


def parse_fault(spec: str) -> Fault:
    """Parse one ``--sim-fault`` spec, e.g. ``airflow:gpu=3:factor=2.2``.

    Raises ConfigError with a one-line message naming the spec and the part that is wrong.
    Whether ``gpu`` exists on the server and ``watts`` suits the SKU is checked by SimServer.
    """
    spec = spec.strip()
    kind, *parts = (p.strip() for p in spec.split(":"))
    if not kind:
        raise _fault_error(spec, "empty fault kind")
    if kind not in FAULT_KINDS:
        raise _fault_error(spec, f"unknown kind {kind!r} (choose from {', '.join(FAULT_KINDS)})")
    v = _parse_pairs(spec, kind, parts)

    def whole(key: str) -> int | None:
        return int(v[key]) if key in v else None

    at_s = v.get("at")
    if kind == "stall" and at_s is None:
        at_s = 0.0
    return Fault(
        kind=kind,
        spec=spec,
        gpu=whole("gpu"),
        at_s=at_s,
        for_s=v.get("for"),
        factor=v.get("factor"),
        watts=v.get("watts"),
        count=int(v.get("count", 1)) if kind == "ecc" else None,
        code=whole("code"),
        rate=v.get("rate"),
        fraction=v.get("fraction"),
        delta_c=v.get("delta"),
    )


# ---------------------------------------------------------------------------------------
# Random streams
# ---------------------------------------------------------------------------------------


class _Bank:
    """Random numbers from one generator per device, drawn in blocks so that a tick costs
    a slice, not one call per device. Row k of every draw is the k-th number of each
    device's own stream, so a device's numbers do not depend on how many devices exist."""

    def __init__(self, seeds: Sequence[np.random.SeedSequence], kind: str, block: int = 2048):
        self._gens = [np.random.Generator(np.random.PCG64(s)) for s in seeds]
        self._kind = kind
        self._block = block
        self._rows = np.empty((0, len(seeds)))
        self._next = 0

    def take(self, rows: int) -> np.ndarray:
        """The next ``rows`` x n numbers (standard normal or uniform in [0, 1))."""
        if self._next + rows > len(self._rows):
            size = max(self._block, rows)
            fresh = [
                g.standard_normal(size) if self._kind == "normal" else g.random(size)
                for g in self._gens
            ]
            self._rows = np.concatenate([self._rows[self._next :], np.stack(fresh, axis=1)])
            self._next = 0
        out = self._rows[self._next : self._next + rows]
        self._next += rows
        return out


@dataclass(frozen=True, slots=True)
class _Draws:
    """Everything drawn once from the seed."""

    efficiency: np.ndarray  # dynamic-power multiplier per device (silicon lottery)
    leakage: np.ndarray  # leakage multiplier per device (silicon lottery)
    energy_offset_j: np.ndarray
    inlet_phase: float
    inlet_period_s: float
    fan_phase: float


def _seed_streams(seed: int, n: int, chassis: Chassis) -> tuple[_Draws, dict[str, _Bank]]:
    """Static draws and per-device banks (telemetry noise, dithering, work jitter, checks)."""
    root = np.random.SeedSequence(seed)
    chassis_seq, *device_seqs = root.spawn(n + 1)
    per_device = [s.spawn(5) for s in device_seqs]
    static = [np.random.Generator(np.random.PCG64(s[0])) for s in per_device]
    eff = np.array([g.standard_normal() for g in static])
    leak = np.array([g.standard_normal() for g in static])
    offset = np.array([g.uniform(*chassis.energy_offset_j) for g in static])
    room = np.random.Generator(np.random.PCG64(chassis_seq))
    draws = _Draws(
        efficiency=1.0 + np.clip(chassis.efficiency_spread * eff, -0.05, 0.05),
        leakage=1.0 + np.clip(chassis.leakage_spread * leak, -0.25, 0.25),
        energy_offset_j=np.round(offset),
        inlet_phase=float(room.uniform(0, 2 * math.pi)),
        inlet_period_s=float(room.uniform(*chassis.inlet_period_s)),
        fan_phase=float(room.uniform(0, 2 * math.pi)),
    )
    banks = {
        "noise": _Bank([s[1] for s in per_device], "normal"),
        "dither": _Bank([s[2] for s in per_device], "uniform"),
        "work": _Bank([s[3] for s in per_device], "normal"),
        "verify": _Bank([s[4] for s in per_device], "uniform"),
    }
    return draws, banks


# ---------------------------------------------------------------------------------------
# Physics
# ---------------------------------------------------------------------------------------


def _upstream(n: int) -> np.ndarray:
    """Index of the GPU whose exhaust each GPU breathes, -1 for the front row."""
    front = (n + 1) // 2
    return np.array([i - front if i >= front else -1 for i in range(n)])


class _Physics:
    """Every device's state and one exact step of it: numbers only, no events or records."""

    def __init__(self, sku: Sku, n: int, draws: _Draws, chassis: Chassis) -> None:
        self.sku, self.n, self.chassis, self.draws = sku, n, chassis, draws
        self._setup_vf()
        self._setup_devices(n)
        self._setup_power()
        self._setup_state(n)

    # -- V/f curve and leakage ------------------------------------------------------------

    def _volts(self, f_mhz: np.ndarray | float) -> np.ndarray:
        """Core voltage along the V/f curve: a floor up to the knee, then linear."""
        s = self.sku
        slope = (s.v_max - s.v_min) / (s.max_sm_clock_mhz - s.v_knee_mhz)
        return np.maximum(s.v_min, s.v_min + slope * (np.asarray(f_mhz) - s.v_knee_mhz))

    def _g_dyn(self, f_mhz: np.ndarray | float) -> np.ndarray:
        """Dynamic power at clock f relative to max clock and max voltage: (V/Vmax)^2 f/fmax."""
        v = self._volts(f_mhz) / self.sku.v_max
        return v * v * (np.asarray(f_mhz) / self.sku.max_sm_clock_mhz)

    def _g_leak(self, f_mhz: np.ndarray | float) -> np.ndarray:
        """Leakage at clock f relative to max voltage (leakage current x V)."""
        return self._volts(f_mhz) / self.sku.v_max

    def _leak_temp(self, temp_c: np.ndarray | float) -> np.ndarray:
        """Leakage at a die temperature relative to the reference temperature."""
        s = self.sku
        hot = np.minimum(temp_c, 150.0)  # beyond any shutdown temperature
        return np.exp2((hot - s.leak_ref_c) / s.leak_doubling_c)

    # -- setup ----------------------------------------------------------------------------

    def _setup_vf(self) -> None:
        """The governor's clock grid and the power shape factors on it."""
        s = self.sku
        steps = round((s.max_sm_clock_mhz - s.idle_sm_clock_mhz) / s.clock_step_mhz)
        self.f_grid = np.linspace(s.idle_sm_clock_mhz, s.max_sm_clock_mhz, steps + 1)
        self.g_dyn_grid = self._g_dyn(self.f_grid)[:, None]
        self.g_leak_grid = self._g_leak(self.f_grid)[:, None]

    def _setup_power(self) -> None:
        """Solve board base power and GEMM's full-clock dynamic power from two stated
        points: the idle power at ~30 °C, and the TDP at the GEMM clock the SKU table
        gives for a die at the leakage reference temperature."""
        s, c = self.sku, self.chassis
        gemm = WORKLOADS["gemm"]
        g_idle = float(self._g_dyn(s.idle_sm_clock_mhz)) * c.idle_activity
        g_ref = float(self._g_dyn(s.gemm_clock_at_tdp_mhz))
        leak_idle = s.leak_w_ref * float(self._g_leak(s.idle_sm_clock_mhz) * self._leak_temp(30))
        leak_ref = s.leak_w_ref * float(self._g_leak(s.gemm_clock_at_tdp_mhz))
        mem = gemm.mem_power_frac * s.hbm_power_w
        self.p_dyn_w = (s.tdp_w - s.idle_power_w + leak_idle - mem - leak_ref) / (g_ref - g_idle)
        self.p_base_w = s.idle_power_w - self.p_dyn_w * g_idle - leak_idle
        if self.p_dyn_w <= 0 or self.p_base_w <= 0:
            raise ValueError(f"sim SKU {s.key}: inconsistent power table")

    def _setup_devices(self, n: int) -> None:
        s = self.sku
        self.up = _upstream(n)
        self.rear = np.flatnonzero(self.up >= 0)
        self.r_ds = np.full(n, s.r_die_sink_k_w)
        self.r_sa = np.full(n, s.r_sink_air_k_w)
        self.c_d = np.full(n, s.c_die_j_k)
        self.c_s = np.full(n, s.c_sink_j_k)
        self.limit_w = np.full(n, s.tdp_w)
        self.inlet_delta = np.zeros(n)
        self.perf = np.ones(n)
        self.ceff = self.draws.efficiency.copy()
        self.leak_mult = self.draws.leakage.copy()
        self.sdc_rate = np.zeros(n)

    def _setup_state(self, n: int) -> None:
        s = self.sku
        self.t_die = np.zeros(n)
        self.t_sink = np.zeros(n)
        self.t_mem = np.zeros(n)
        self.energy_j = np.zeros(n)
        self.power_w = np.zeros(n)
        self.sm_mhz = np.full(n, s.idle_sm_clock_mhz)
        self.mem_mhz = np.full(n, s.mem_clock_mhz)
        self.reasons = np.full(n, int(ClockReason.GPU_IDLE), dtype=np.int64)
        self.power_violation_s = np.zeros(n)
        self.thermal_violation_s = np.zeros(n)
        self.hw_slowdown = np.zeros(n, dtype=np.int64)  # active fault count
        self.power_brake = np.zeros(n, dtype=np.int64)
        self.thermal_alert = np.zeros(n, dtype=np.int64)  # hw-thermal faults active
        self.hw_thermal = np.zeros(n, dtype=bool)  # latched with hysteresis
        self.loaded = np.zeros(n, dtype=bool)
        self.lost = np.zeros(n, dtype=bool)
        self.stall = np.zeros(n)  # fraction of demand the input pipeline cannot supply
        self.queue_s = np.full(n, self.chassis.prefetch_s)
        self.util = np.zeros(n)  # fraction of the last step with fresh input (NVML util)
        self.activity = 0.0
        self.mem_power_frac = 0.0
        self.work_coef = np.zeros((0, 2))  # per part: (per SM MHz, per memory MHz)
        self.work = np.zeros((0, n))
        self._expm_cache: dict[float, tuple[np.ndarray, ...]] = {}
        self._cols = np.arange(n)
        self._no_bits = np.zeros(n, dtype=np.int64)
        self._ones = np.ones(n)
        self._full_mem_mhz = np.full(n, s.mem_clock_mhz)

    def settle_idle(self, t_s: float) -> None:
        """Start every device at its idle equilibrium (the server has been on a while)."""
        self.t_sink[:] = self.t_die[:] = self.inlet_c(t_s) + self.inlet_delta
        idle_activity = np.full(self.n, self.chassis.idle_activity)
        no_mem = np.zeros(self.n)
        for _ in range(30):  # leakage and neighbour heating: a fixed point, converges fast
            p = self.power_of(self.sm_mhz, self.power_terms(idle_activity, no_mem))
            air = self.air_temp(t_s, heat_to_air=p)
            self.t_sink = air + p * self.r_sa
            self.t_die = self.t_sink + p * self.r_ds
        self.t_mem = self.mem_target(no_mem)
        self.power_w = p

    def asymptote_die_c(self, t_s: float) -> np.ndarray:
        """Truth for accuracy benchmarks, never read by the simulation: the die temperature
        each device would settle to if its present load, faults and room air held (the
        fans' short cycle left out: it swings around the equilibrium, it does not move it).
        It is the fixed point of temperature -> leakage -> governor -> power ->
        temperature, reached in damped steps (a thermal limit makes plain steps overshoot);
        the HW-thermal latch is left out."""
        s = self.sku
        saved = (self.t_die, self.t_sink)
        busy = np.where(self.loaded, 1.0 - self.stall, 1.0)  # once the input queue ran dry
        activity = np.where(self.loaded, self.activity * busy, self.chassis.idle_activity)
        mem_w = self.loaded * busy * (self.mem_power_frac * s.hbm_power_w)
        room = self.inlet_c(t_s, fans=False) + self.inlet_delta
        halved = (self.hw_slowdown > 0) | (self.power_brake > 0) | (self.thermal_alert > 0)
        damping = 1.0 / (1.0 + self.r_sa / self.r_ds)
        try:
            for _ in range(200):
                terms = self.power_terms(activity, mem_w)
                f = np.where(self.loaded, self.govern(terms)[0], s.idle_sm_clock_mhz)
                f = np.where(halved, np.maximum(0.5 * f, s.idle_sm_clock_mhz), f)
                power = np.where(self.lost, 0.0, self.power_of(f, terms))
                air = room.copy()
                air[self.rear] += self.chassis.preheat_k_w * power[self.up[self.rear]]
                self.t_sink = self.t_sink + damping * (air + power * self.r_sa - self.t_sink)
                die, self.t_die = self.t_die, self.t_sink + power * self.r_ds
                if np.max(np.abs(self.t_die - die)) < 1e-6:
                    break
            return self.t_die.copy()
        finally:
            self.t_die, self.t_sink = saved

    def set_airflow(self, factor: np.ndarray) -> None:
        """Scale the heat-sink-to-air resistance; the sink's heat capacity stays."""
        self.r_sa = self.sku.r_sink_air_k_w * factor
        self._expm_cache.clear()

    # -- load --------------------------------------------------------------------------

    def set_load(self, workload: Workload | None, on: np.ndarray) -> None:
        """Switch a workload on for the devices in ``on``, or every device off (None)."""
        if workload is None:
            self.loaded = np.zeros(self.n, dtype=bool)
            return
        self.loaded = on & ~self.lost
        self.activity = workload.core_activity
        self.mem_power_frac = workload.mem_power_frac
        coef = [np.array(self._part_coef(part.name)) * part.share for part in workload.parts]
        self.work_coef = np.array(coef)
        self.work = np.zeros((len(workload.parts), self.n))

    def _part_coef(self, part: str) -> tuple[float, float]:
        """Work per second per MHz of (SM clock, memory clock) of one part at full share."""
        s = self.sku
        flop_per_mhz = s.flop_per_clock * 1e6
        if part == "gemm":
            return (flop_per_mhz * s.gemm_efficiency, 0.0)
        if part == "membw":
            return (0.0, s.mem_bw_b_s * s.membw_efficiency / s.mem_clock_mhz)
        tokens_per_mhz = s.train_mfu * flop_per_mhz / TRAIN_FLOP_PER_TOKEN
        mem_share = (1 - TRAIN_SM_WEIGHT) * s.max_sm_clock_mhz / s.mem_clock_mhz
        return (tokens_per_mhz * TRAIN_SM_WEIGHT, tokens_per_mhz * mem_share)

    def duty(self) -> np.ndarray:
        """Fraction of time the device has fresh input: what NVML's utilisation shows.
        It falls the moment the input pipeline stalls, before the queue runs dry."""
        return np.where(self.loaded, 1.0 - self.stall, 0.0)

    # -- physics -------------------------------------------------------------------------

    def inlet_c(self, t_s: float, fans: bool = True) -> float:
        """Cold-aisle air: a slow room drift plus the chassis fans' small cycle (left out
        with ``fans=False``)."""
        c, d = self.chassis, self.draws
        drift = c.inlet_drift_c * math.sin(2 * math.pi * t_s / d.inlet_period_s + d.inlet_phase)
        if not fans:
            return c.inlet_c + drift
        cycle = c.fan_cycle_c * math.sin(2 * math.pi * t_s / c.fan_period_s + d.fan_phase)
        return c.inlet_c + drift + cycle

    def air_temp(self, t_s: float, heat_to_air: np.ndarray | None = None) -> np.ndarray:
        """Air at each heat sink: inlet, plus the upstream GPU's heat for the rear row."""
        air = self.inlet_c(t_s) + self.inlet_delta
        if heat_to_air is None:
            heat_to_air = (self.t_sink - air) / self.r_sa  # front row's air is final
        air[self.rear] += self.chassis.preheat_k_w * heat_to_air[self.up[self.rear]]
        return air

    def power_terms(
        self, activity: np.ndarray, mem_w: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Power = fixed + dyn x (V/Vmax)^2 f/fmax + leak x V/Vmax, at the present die
        temperature: the three coefficients, per device."""
        fixed = self.p_base_w + mem_w
        dyn = self.ceff * (self.p_dyn_w * activity)
        leak = (self.sku.leak_w_ref * self.leak_mult) * self._leak_temp(self.t_die)
        return fixed, dyn, leak

    def power_of(
        self, f_mhz: np.ndarray, terms: tuple[np.ndarray, np.ndarray, np.ndarray]
    ) -> np.ndarray:
        """Power at clock f from the coefficients of ``power_terms``."""
        fixed, dyn, leak = terms
        v = self._volts(f_mhz) * (1.0 / self.sku.v_max)
        return fixed + dyn * (v * v * f_mhz * (1.0 / self.sku.max_sm_clock_mhz)) + leak * v

    def mem_target(self, mem_w: np.ndarray) -> np.ndarray:
        """Where the HBM settles: between die and sink, plus its own power's rise."""
        return 0.5 * (self.t_die + self.t_sink) + self.sku.r_mem_k_w * mem_w

    def govern(
        self, terms: tuple[np.ndarray, np.ndarray, np.ndarray]
    ) -> tuple[np.ndarray, np.ndarray]:
        """The highest clock whose power fits under the enforced limit and the thermal
        limit, and the reason bits that say which of them holds it down. Power is
        evaluated on the clock grid and interpolated between the two bins around the
        limit: the mean clock of a governor that dithers between them."""
        s = self.sku
        fixed, dyn, leak = terms
        p_grid = fixed + self.g_dyn_grid * dyn + self.g_leak_grid * leak
        # Power at which the (fast) die settles just under the max-operating temperature.
        p_thermal = (s.max_operating_temp_c - 0.3 - self.t_sink) / self.r_ds
        limit = np.minimum(self.limit_w, p_thermal)
        fits = np.count_nonzero(p_grid <= limit, axis=0)
        k = np.minimum(np.maximum(fits - 1, 0), len(self.f_grid) - 2)
        lo, hi = p_grid[k, self._cols], p_grid[k + 1, self._cols]
        frac = np.minimum(np.maximum((limit - lo) / (hi - lo), 0.0), 1.0)
        f = self.f_grid[k] + frac * (self.f_grid[k + 1] - self.f_grid[k])
        capped = p_grid[-1] > limit
        power_bound = capped & (self.limit_w <= p_thermal * 1.02)
        thermal_bound = capped & (p_thermal <= self.limit_w * 1.02)
        bits = power_bound * int(ClockReason.SW_POWER_CAP)
        bits |= thermal_bound * int(ClockReason.SW_THERMAL)
        return f, bits

    def hw_bits(self) -> np.ndarray:
        """HW slowdown, power brake and HW thermal (with 3 K hysteresis) as reason bits."""
        s = self.sku
        hot = (self.t_die >= s.slowdown_temp_c) | (self.t_mem >= s.mem_max_temp_c)
        if not (hot.any() or self.hw_thermal.any() or self._hw_faults):
            return self._no_bits
        cool = (self.t_die < s.slowdown_temp_c - 3) & (self.t_mem < s.mem_max_temp_c - 3)
        self.hw_thermal = hot | (self.hw_thermal & ~cool)
        bits = (self.hw_slowdown > 0) * int(ClockReason.HW_SLOWDOWN)
        bits |= (self.power_brake > 0) * int(ClockReason.HW_POWER_BRAKE)
        bits |= (self.hw_thermal | (self.thermal_alert > 0)) * int(ClockReason.HW_THERMAL)
        return bits

    @property
    def _hw_faults(self) -> bool:
        return bool(self.hw_slowdown.any() or self.power_brake.any() or self.thermal_alert.any())

    def step(self, t_s: float, h: float) -> None:
        """Advance every device by h seconds from t_s with the clocks chosen at t_s."""
        s = self.sku
        self.util = self.duty()
        busy = self._busy(h)
        activity = np.where(self.loaded, self.activity * busy, self.chassis.idle_activity)
        mem_w = self.loaded * busy * (self.mem_power_frac * s.hbm_power_w)
        terms = self.power_terms(activity, mem_w)
        self._set_clocks(*self.govern(terms), self.hw_bits())
        power = self.power_of(self.sm_mhz, terms)
        if self.lost.any():  # off the bus or shut down: powered off
            power = np.where(self.lost, 0.0, power)
        self._heat(t_s + 0.5 * h, h, power, mem_w)
        self._account(h, power, busy)

    def _set_clocks(self, f: np.ndarray, bits: np.ndarray, hw: np.ndarray) -> None:
        """Clocks and reasons from the governor's choice, idle devices and HW slowdowns."""
        s = self.sku
        if not self.loaded.all():
            f = np.where(self.loaded, f, s.idle_sm_clock_mhz)
            bits = np.where(self.loaded, bits, int(ClockReason.GPU_IDLE))
        if hw is self._no_bits:
            self.sm_mhz, self.mem_mhz, self.reasons = f, self._full_mem_mhz, bits
            return
        halved = hw != 0
        self.sm_mhz = np.where(halved, np.maximum(0.5 * f, s.idle_sm_clock_mhz), f)
        self.mem_mhz = np.where(halved, 0.5 * s.mem_clock_mhz, s.mem_clock_mhz)
        # Halved clocks draw far less than the cap: the power cap no longer holds them.
        self.reasons = np.where(halved, bits & ~int(ClockReason.SW_POWER_CAP), bits) | hw

    def _heat(self, t_mid: float, h: float, power: np.ndarray, mem_w: np.ndarray) -> None:
        """Exact two-node update for power held over h, then the HBM node's lag."""
        air = self.air_temp(t_mid)
        sink_inf = air + power * self.r_sa
        die_inf = sink_inf + power * self.r_ds
        m11, m12, m21, m22 = self._expm(h)
        dd, ds = self.t_die - die_inf, self.t_sink - sink_inf
        self.t_die = die_inf + m11 * dd + m12 * ds
        self.t_sink = sink_inf + m21 * dd + m22 * ds
        target = self.mem_target(mem_w)
        self.t_mem = target + (self.t_mem - target) * math.exp(-h / self.sku.mem_tau_s)

    def _expm(self, h: float) -> tuple[np.ndarray, ...]:
        """exp(A h) of the die/sink network, per device, cached by step length."""
        cached = self._expm_cache.get(h)
        if cached is not None:
            return cached
        a = 1.0 / (self.r_ds * self.c_d)
        b = 1.0 / (self.r_ds * self.c_s)
        c = 1.0 / (self.r_sa * self.c_s)
        trace, det = -(a + b + c), a * c
        root = np.sqrt(trace * trace - 4 * det)
        l1, l2 = 0.5 * (trace + root), 0.5 * (trace - root)
        e1, e2, d = np.exp(l1 * h), np.exp(l2 * h), l1 - l2
        m11 = (e1 * (-a - l2) - e2 * (-a - l1)) / d
        m12 = (e1 - e2) * a / d
        m21 = (e1 - e2) * b / d
        m22 = (e1 * (-(b + c) - l2) - e2 * (-(b + c) - l1)) / d
        if len(self._expm_cache) > 64:
            self._expm_cache.clear()
        self._expm_cache[h] = (m11, m12, m21, m22)
        return self._expm_cache[h]

    def _account(self, h: float, power: np.ndarray, busy: np.ndarray) -> None:
        """Energy, violation time and work done over the step."""
        self.power_w = power
        self.energy_j = self.energy_j + power * h
        r = self.reasons
        power_bits = int(ClockReason.SW_POWER_CAP | ClockReason.HW_POWER_BRAKE)
        thermal_bits = int(ClockReason.SW_THERMAL | ClockReason.HW_THERMAL)
        self.power_violation_s = self.power_violation_s + h * ((r & power_bits) != 0)
        self.thermal_violation_s = self.thermal_violation_s + h * ((r & thermal_bits) != 0)
        if len(self.work):
            rate = self.work_coef[:, :1] * self.sm_mhz + self.work_coef[:, 1:] * self.mem_mhz
            self.work += rate * (self.perf * busy * self.loaded) * h

    def _busy(self, h: float) -> np.ndarray:
        """Fraction of the next h the device computes at full rate: all of it while the
        prefetch queue lasts, then only what the stalled input pipeline supplies."""
        if not self.stall.any():
            return self._ones
        drain = self.stall * self.loaded
        starved = drain > 0
        lasts = self.queue_s / np.where(starved, drain, 1.0)
        full = np.where(starved, np.minimum(lasts, h), h)
        self.queue_s = np.where(starved, np.maximum(self.queue_s - drain * h, 0.0), self.queue_s)
        return (full + (h - full) * (1.0 - drain)) / h

    def take_work(self) -> np.ndarray:
        """Work done per part and device since the last call."""
        work, self.work = self.work, np.zeros_like(self.work)
        return work


# ---------------------------------------------------------------------------------------
# The backend
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Transition:
    t_s: float
    order: int
    fault: Fault
    starts: bool  # False: the fault's for= ended


class SimServer:
    """A simulated server of ``gpus`` accelerators of one SKU: the ``Backend`` for
    ``--backend sim``, and the source of its own load (``simulated_load``).

    Time starts at 0 with every device at its idle equilibrium and moves only forward, to
    the times ``sample``/``poll``/``poll_events`` are called with. ``devices`` picks the
    devices reported; the others still run (idle) and still heat their neighbours.
    ``faults`` are ``--sim-fault`` specs or parsed ``Fault``s.
    """

    name = "sim"

    def __init__(
        self,
        gpus: int = 8,
        sku: str = DEFAULT_SKU,
        faults: Sequence[str | Fault] = (),
        seed: int = 0,
        devices: Sequence[int] | None = None,
    ) -> None:
        if not 1 <= gpus <= MAX_GPUS:
            raise ConfigError(f"--sim-gpus: must be between 1 and {MAX_GPUS}, got {gpus}")
        if sku not in SKUS:
            raise ConfigError(f"--sim-sku: unknown SKU {sku!r} (choose from {', '.join(SKUS)})")
        self.sku = SKUS[sku]
        self.gpus, self.seed = gpus, seed
        self.chassis = CHASSIS
        self.selected = sorted(select(range(gpus), devices, self.name))
        self.faults = [f if isinstance(f, Fault) else parse_fault(f) for f in faults]
        for fault in self.faults:
            self._check_fits(fault)
        draws, self._banks = _seed_streams(seed, gpus, self.chassis)
        self._draws = draws
        self.physics = _Physics(self.sku, gpus, draws, self.chassis)
        self._apply_static_faults()
        self.physics.settle_idle(0.0)
        self.now_s = 0.0
        self._events: list[Event] = []
        self._schedule: list[_Transition] = []
        self._load: SimLoad | None = None
        self._pending_load: SimLoad | None = None
        self.load_start_s: float | None = None
        self.lost_at: dict[int, float] = {}
        self.ecc_uncorrected = np.zeros(gpus, dtype=np.int64)
        self.remap_pending = np.zeros(gpus, dtype=np.int64)
        self._energy_log: deque[tuple[float, np.ndarray]] = deque([(0.0, np.zeros(gpus))])
        self._snapshot: tuple[float, list[Telemetry]] | None = None
        # Telemetry metrics in field order; "" where this SKU cannot read one (None).
        self._readable = [
            m if m in SIM_METRICS and m not in self.sku.unsupported else ""
            for m in TELEMETRY_METRICS
        ]
        for fault in self.faults:
            if not fault.timed:
                self._fault_event(0.0, fault)

    # -- construction helpers ---------------------------------------------------------------

    def _check_fits(self, fault: Fault) -> None:
        """Checks that need the server: the GPU exists, the power cap suits the SKU."""
        if fault.gpu is not None and fault.gpu >= self.gpus:
            raise _fault_error(fault.spec, f"gpu={fault.gpu} but the server has {self.gpus} GPUs")
        s = self.sku
        if fault.watts is not None and not s.min_power_limit_w <= fault.watts <= s.tdp_w:
            raise _fault_error(
                fault.spec,
                f"watts must be between {s.min_power_limit_w:g} and {s.tdp_w:g} for {s.key}",
            )

    def _apply_static_faults(self) -> None:
        """Faults that hold for the whole run: airflow, power cap, inlet, slow, leaky, sdc."""
        p = self.physics
        airflow = np.ones(self.gpus)
        for f in self.faults:
            g = slice(None) if f.gpu is None else f.gpu
            if f.kind == "airflow":
                airflow[g] *= f.factor
            elif f.kind == "power-cap":
                p.limit_w[g] = np.minimum(p.limit_w[g], f.watts)
            elif f.kind == "inlet":
                p.inlet_delta[g] += f.delta_c
            elif f.kind == "slow":
                p.perf[g] *= f.factor
            elif f.kind == "leaky":
                p.leak_mult[g] *= f.factor
            elif f.kind == "sdc":
                p.sdc_rate[g] = 1 - (1 - p.sdc_rate[g]) * (1 - f.rate)
        p.set_airflow(airflow)

    # -- Backend protocol -------------------------------------------------------------------

    def devices(self) -> list[DeviceInfo]:
        return [self._device_info(i) for i in self.selected]

    def _device_info(self, index: int) -> DeviceInfo:
        s = self.sku
        digest = hashlib.sha256(f"soak-sim:{self.seed}:{index}".encode()).hexdigest()
        uuid = f"GPU-sim-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:28]}"
        bus = s.pci_bus_ids[index % len(s.pci_bus_ids)]
        if index >= len(s.pci_bus_ids):  # another baseboard: the next PCI domain
            domain, rest = bus.split(":", 1)
            bus = f"{int(domain, 16) + index // len(s.pci_bus_ids):0{len(domain)}X}:{rest}"
        up = int(self.physics.up[index])
        return DeviceInfo(
            index=index,
            backend=self.name,
            name=f"{s.name} (simulated)",
            uuid=uuid,
            serial=f"SIM{int(digest[28:38], 16) % 10**10:010d}",
            pci_bus_id=bus,
            driver_version="sim",
            memory_total_b=s.memory_total_b,
            power_limit_w=float(self.physics.limit_w[index]),
            default_power_limit_w=s.tdp_w,
            max_sm_clock_mhz=s.max_sm_clock_mhz,
            max_mem_clock_mhz=s.mem_clock_mhz,
            slowdown_temp_c=s.slowdown_temp_c,
            shutdown_temp_c=s.shutdown_temp_c,
            max_operating_temp_c=s.max_operating_temp_c,
            mem_max_temp_c=s.mem_max_temp_c,
            torch_device=None,
            extra={
                "sku": s.key,
                "airflow_row": "rear" if up >= 0 else "front",
                "upstream_device": up if up >= 0 else None,
                "sim_faults": [f.spec for f in self.faults if f.gpu in (None, index)],
            },
        )

    def capabilities(self) -> dict[int, dict[str, Capability]]:
        """Every metric the sim reads, less what the SKU lacks (e.g. an SXM board's fan)."""
        readable = {
            m: Capability.SUPPORTED if m in self._readable else Capability.NOT_SUPPORTED
            for m in TELEMETRY_METRICS
        }
        return {i: dict(readable) for i in self.selected}

    def sample(self, t_s: float) -> list[Telemetry]:
        """One snapshot per selected device still on the bus, after advancing to t_s."""
        self.advance(t_s)
        if self._snapshot is not None and self._snapshot[0] == t_s:
            return list(self._snapshot[1])
        rows = self._read(t_s)
        self._snapshot = (t_s, rows)
        return list(rows)

    def poll_events(self, t_s: float) -> list[Event]:
        """Faults injected, ECC errors, XIDs and lost devices since the last call."""
        self.advance(t_s)
        events = sorted((e for e in self._events if self._visible(e.device)), key=lambda e: e.t_s)
        self._events = []
        return events

    def simulated_load(self, workload: str) -> SimLoad:
        """The load source: this server's devices running ``workload`` at their clocks."""
        if workload not in WORKLOADS:
            raise ConfigError(
                f"--workload: unknown workload {workload!r} (choose from {', '.join(WORKLOADS)})"
            )
        return SimLoad(self, WORKLOADS[workload])

    def close(self) -> None:
        """Nothing to release: the server is numbers in memory."""

    def thermal_truth(self) -> tuple[np.ndarray, np.ndarray]:
        """Truth for accuracy benchmarks, not telemetry: per GPU, the die temperature now
        (no sensor noise or rounding) and the one it would settle to at the present
        operating point (``_Physics.asymptote_die_c``)."""
        p = self.physics
        return p.t_die.copy(), p.asymptote_die_c(self.now_s)

    # -- time ---------------------------------------------------------------------------

    def advance(self, t_s: float) -> None:
        """Run the physics up to t_s in exact substeps, splitting at fault transitions."""
        if t_s < self.now_s - _EPS:
            raise ValueError(f"sim: time went backwards ({t_s} < {self.now_s})")
        while self.now_s < t_s - _EPS:
            self._apply_due()
            target = t_s
            if self._schedule and self._schedule[0].t_s < target:
                target = self._schedule[0].t_s
            pieces = max(1, math.ceil((target - self.now_s) / self.chassis.max_substep_s - _EPS))
            h = (target - self.now_s) / pieces
            for i in range(pieces):
                self.physics.step(self.now_s + i * h, h)
                self._log_energy(self.now_s + (i + 1) * h)
                self._shut_down_overheated(self.now_s + (i + 1) * h)
            self.now_s = target
        self.now_s = max(self.now_s, t_s)
        self._apply_due()
        if self._pending_load is not None:
            self._begin_load(self._pending_load)

    def _log_energy(self, t_s: float) -> None:
        """Energy at substep ends for the 1-s power average; a few seconds suffice."""
        log = self._energy_log
        log.append((t_s, self.physics.energy_j))
        while len(log) > 2 and log[1][0] <= t_s - 1.0:
            log.popleft()

    def _energy_at(self, t_s: float) -> np.ndarray:
        """Energy at t_s by linear interpolation (power is constant within a substep)."""
        log = self._energy_log
        if t_s <= log[0][0]:
            return log[0][1]
        for (t0, e0), (t1, e1) in zip(log, list(log)[1:], strict=False):
            if t0 <= t_s <= t1:
                return e0 + (e1 - e0) * ((t_s - t0) / (t1 - t0))
        return log[-1][1]

    # -- load and faults --------------------------------------------------------------------

    def _request_load(self, load: SimLoad) -> None:
        if self._load is not None or self._pending_load is not None:
            raise RuntimeError("sim: a load is already running")
        self._pending_load = load

    def _begin_load(self, load: SimLoad) -> None:
        """Switch the load on now: the runner's first tick after ``start``."""
        self._pending_load = None
        self._load = load
        on = np.zeros(self.gpus, dtype=bool)
        on[self.selected] = True
        self.physics.set_load(load.workload, on)
        load.began(self.now_s)
        if self.load_start_s is None:
            self.load_start_s = self.now_s
            self._schedule_faults(self.now_s)

    def _end_load(self) -> None:
        self._pending_load = None
        self._load = None
        self.physics.set_load(None, np.zeros(self.gpus, dtype=bool))

    def _schedule_faults(self, t0: float) -> None:
        out = []
        for order, f in enumerate(self.faults):
            if not f.timed:
                continue
            start = t0 + (f.at_s or 0.0)
            out.append(_Transition(start, order, f, True))
            if f.for_s is not None:
                out.append(_Transition(start + f.for_s, order, f, False))
        self._schedule = sorted(out, key=lambda tr: (tr.t_s, tr.order, not tr.starts))

    def _apply_due(self) -> None:
        while self._schedule and self._schedule[0].t_s <= self.now_s + _EPS:
            tr = self._schedule.pop(0)
            if tr.starts:
                self._fault_starts(tr.fault, tr.t_s)
            else:
                self._fault_ends(tr.fault, tr.t_s)

    def _fault_starts(self, f: Fault, t_s: float) -> None:
        p, g = self.physics, f.gpu
        assert g is not None  # every timed kind names its GPU
        if p.lost[g]:
            return
        self._fault_event(t_s, f)
        if f.kind == "hw-slowdown":
            p.hw_slowdown[g] += 1
        elif f.kind == "power-brake":
            p.power_brake[g] += 1
        elif f.kind == "hw-thermal":
            p.thermal_alert[g] += 1
        elif f.kind == "stall":
            p.stall[g] = max(p.stall[g], f.fraction or 0.0)
        elif f.kind == "ecc":
            self._ecc(g, f.count or 1, t_s)
        elif f.kind == "xid":
            self._xid(g, f.code or 0, t_s)

    def _fault_ends(self, f: Fault, t_s: float) -> None:
        p, g = self.physics, f.gpu
        assert g is not None
        if p.lost[g]:
            return
        self._fault_event(t_s, f, ended=True)
        if f.kind == "hw-slowdown":
            p.hw_slowdown[g] -= 1
        elif f.kind == "power-brake":
            p.power_brake[g] -= 1
        elif f.kind == "hw-thermal":
            p.thermal_alert[g] -= 1
        elif f.kind == "stall":
            p.stall[g] = 0.0
            p.queue_s[g] = self.chassis.prefetch_s  # refilled once the input keeps up

    def _ecc(self, g: int, count: int, t_s: float) -> None:
        self.ecc_uncorrected[g] += count
        self.remap_pending[g] = 1
        total = int(self.ecc_uncorrected[g])
        details = {"uncorrected": total, "new": count, "remap_pending": True}
        self._events.append(
            Event(t_s, EventKind.ECC, f"{count} uncorrectable ECC error(s)", g, details)
        )

    def _xid(self, g: int, code: int, t_s: float) -> None:
        self._events.append(Event(t_s, EventKind.XID, f"XID {code}", g, {"code": code}))
        if code != XID_FALLEN_OFF_BUS:
            return
        self._lose(g, t_s, "GPU has fallen off the bus (XID 79)", {"xid": code})

    def _shut_down_overheated(self, t_s: float) -> None:
        """A die at its shutdown temperature powers off: the device is lost."""
        p = self.physics
        for g in np.flatnonzero((p.t_die >= self.sku.shutdown_temp_c) & ~p.lost).tolist():
            details = {"reason": "thermal shutdown", "temp_c": round(float(p.t_die[g]), 1)}
            self._lose(g, t_s, "thermal shutdown: the GPU powered off", details)

    def _lose(self, g: int, t_s: float, message: str, details: dict[str, object]) -> None:
        """The device stops answering and draws nothing; its load ends DEVICE_LOST."""
        p = self.physics
        p.lost[g] = True
        p.loaded[g] = False
        self.lost_at[g] = t_s
        self._events.append(Event(t_s, EventKind.DEVICE_LOST, message, g, details))

    def _fault_event(self, t_s: float, f: Fault, ended: bool = False) -> None:
        details = {"fault": f.kind, "spec": f.spec, "phase": "end" if ended else "start"}
        message = f"fault {'ended' if ended else 'injected'}: {f.spec}"
        self._events.append(Event(t_s, EventKind.FAULT_INJECTED, message, f.gpu, details))

    def _visible(self, gpu: int | None) -> bool:
        return gpu is None or gpu in self.selected

    # -- readings -------------------------------------------------------------------------

    def _read(self, t_s: float) -> list[Telemetry]:
        """Sensor readings at t_s: quantised temperatures, noisy 1-s average power,
        dithered clock bins, exact counters; unsupported metrics are None."""
        p, c, n = self.physics, self.chassis, self.gpus
        noise = self._banks["noise"].take(3)
        window = min(1.0, t_s - self._energy_log[0][0])
        power = p.power_w
        if window > _EPS:
            power = (p.energy_j - self._energy_at(t_s - window)) / window
        power = power + (c.power_noise_frac * power + c.power_noise_w) * noise[0]
        duty = p.util
        mem_util = self._load.workload.mem_util_pct if self._load is not None else 0.0
        zeros = [0] * n
        columns: dict[str, list] = {
            "temp_c": np.rint(p.t_die + c.temp_noise_c * noise[1]).tolist(),
            "mem_temp_c": np.rint(p.t_mem + c.temp_noise_c * noise[2]).tolist(),
            "sm_clock_mhz": self._dithered_clock().tolist(),
            "mem_clock_mhz": p.mem_mhz.tolist(),
            "power_w": (np.rint(power * 1000) / 1000).tolist(),  # NVML reads mW
            "power_limit_w": p.limit_w.tolist(),
            "energy_j": (self._draws.energy_offset_j + p.energy_j).tolist(),
            "util_pct": np.rint(100.0 * duty).tolist(),
            "mem_util_pct": np.rint(mem_util * duty).tolist(),
            "clock_reasons": p.reasons.tolist(),
            "power_violation_s": p.power_violation_s.tolist(),
            "thermal_violation_s": p.thermal_violation_s.tolist(),
            "ecc_corrected": zeros,
            "ecc_uncorrected": self.ecc_uncorrected.tolist(),
            "remap_pending": self.remap_pending.tolist(),
            "remap_failure": zeros,
            "retired_pages": zeros,
            "pcie_replay": zeros,
        }
        missing = [None] * n
        table = [columns.get(m, missing) for m in self._readable]
        rows = list(zip(*table, strict=True))
        return [Telemetry(i, t_s, *rows[i]) for i in self.selected if not p.lost[i]]

    def _dithered_clock(self) -> np.ndarray:
        """The clock as NVML reads it: one of the two supported bins around the mean
        clock, picked in proportion, so that the reading averages to the true clock."""
        p, s = self.physics, self.sku
        u = self._banks["dither"].take(1)[0]
        below = (s.max_sm_clock_mhz - p.sm_mhz) / s.clock_step_mhz
        bins = np.floor(below + u)
        clock = s.max_sm_clock_mhz - bins * s.clock_step_mhz
        return np.where(p.loaded, clock, p.sm_mhz)


# ---------------------------------------------------------------------------------------
# The load
# ---------------------------------------------------------------------------------------


class SimLoad:
    """The simulated server's own load: the work its devices do at their simulated clocks.

    ``start`` switches the load on at the time of the next call that moves the server
    (the runner ticks right after ``start``), so the server's load start and the runner's
    agree. Each ``poll`` returns one WorkSample per device per workload part since the
    last poll; result checks happen every ``verify_interval_s`` of load.
    """

    def __init__(self, server: SimServer, workload: Workload) -> None:
        self.server = server
        self.workload = workload
        self.started_s: float | None = None
        self._last_s = 0.0
        self._checks_done = 0
        self._verify_failed: set[int] = set()
        self._ended: set[int] = set()
        self._stopped = False

    def start(self, t0: float) -> None:
        """Switch the load on; ``t0`` (the run's zero) is not needed: sim time is run time."""
        del t0
        if self.started_s is not None or self._stopped:
            raise RuntimeError("sim: this load was already started")
        self.server._request_load(self)

    def began(self, t_s: float) -> None:
        """Called by the server when the load switches on."""
        self.started_s = self._last_s = t_s

    def poll(self, t_s: float) -> LoadUpdate:
        self.server.advance(t_s)
        if self.started_s is None or self._stopped:
            return LoadUpdate()
        return self._collect(t_s)

    def stop(self, t_s: float) -> LoadUpdate:
        """Switch the load off; the work left and one WORKER_OUTCOME per device still running."""
        self.server.advance(t_s)
        if self._stopped:
            return LoadUpdate()
        update = self._collect(t_s) if self.started_s is not None else LoadUpdate()
        self._stopped = True
        if self.started_s is None:
            self.server._pending_load = None
            return update
        self.server._end_load()
        events = list(update.events)
        for device in self.server.selected:
            if device in self._ended:
                continue
            self._ended.add(device)
            failed = device in self._verify_failed
            outcome = WorkerOutcome.VERIFICATION_FAILED if failed else WorkerOutcome.OK
            events.append(self._outcome(t_s, device, outcome))
        return LoadUpdate(update.samples, events)

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

    def _collect(self, t_s: float) -> LoadUpdate:
        """Samples and events for (last poll, t_s]."""
        server, t0 = self.server, self._last_s
        work = server.physics.take_work()
        self._last_s = t_s
        if t_s <= t0 + _EPS:
            return LoadUpdate()
        checks = self._checks(t_s)
        amounts = (work * np.maximum(1.0 + self._jitter(t_s - t0), 0.0)).tolist()
        update = LoadUpdate()
        for device in server.selected:
            if device in self._ended:
                continue
            lost_s = server.lost_at.get(device)
            end = t_s if lost_s is None else min(t_s, lost_s)
            if end > t0 + _EPS:
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
        """Relative run-to-run noise per part and device; shrinks for longer samples."""
        noise = self.server._banks["work"].take(len(self.workload.parts))
        return self.server.chassis.work_noise_frac / math.sqrt(max(dt, 0.1)) * noise

    def _checks(self, t_s: float) -> list[tuple[float, np.ndarray]]:
        """Result checks due by t_s: (time, per part and device: error or 0 if it matched)."""
        assert self.started_s is not None
        server = self.server
        every = server.chassis.verify_interval_s
        due = math.floor((t_s - self.started_s) / every + _EPS)
        out = []
        rate = server.physics.sdc_rate
        parts = len(self.workload.parts)
        while self._checks_done < due:
            self._checks_done += 1
            u = server._banks["verify"].take(2 * parts)
            bad = u[:parts] < rate
            error = np.where(bad, 10.0 ** (-3.0 + 3.0 * u[parts:]), 0.0)
            out.append((self.started_s + self._checks_done * every, error))
        return out

    @staticmethod
    def _verdict(
        checks: list[tuple[float, np.ndarray]], part: int, device: int, end: float
    ) -> tuple[bool | None, float | None]:
        """Whether the checks in a sample matched: None if there were none."""
        errors = [float(e[part, device]) for t, e in checks if t <= end + _EPS]
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
