"""The simulated server's backend: devices, faults applied, time, sensor readings.

``SimServer`` owns the physics (``physics.py``), the random streams (``streams.py``) and the
faults (``faults.py``); its load (``load.py``) drives it only through its public methods:
``request_load``, ``end_load``, ``advance``, ``take_work``, ``random`` and the read-only
``selected``, ``lost_at``, ``sdc_rate`` and ``chassis``.
"""

from __future__ import annotations

import hashlib
import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from soak.dataset import WorkColumns
from soak.devices.common import select
from soak.devices.sim.faults import Fault, fault_error, parse_fault, swinging, swung_clock
from soak.devices.sim.load import SimLoad
from soak.devices.sim.params import (
    CHASSIS,
    DEFAULT_SKU,
    SKUS,
    WORKLOADS,
    Chassis,
    Ripple,
)
from soak.devices.sim.physics import EPS, Physics
from soak.devices.sim.streams import seed_streams
from soak.errors import ConfigError
from soak.model import (
    TELEMETRY_METRICS,
    Capability,
    ClockReason,
    DeviceInfo,
    Event,
    EventKind,
    Telemetry,
    WorkSample,
)

MAX_GPUS = 64
# The Telemetry metrics the sim reads (``_read``); the fan belongs to the chassis (no reading).
# The share of a GPU another process takes is not a reading NVML gives (its processes are).
SIM_METRICS = frozenset(TELEMETRY_METRICS) - {"fan_pct", "foreign_load_pct"}
# The process a contention fault starts: what NVML would list for it.
FOREIGN_PID, FOREIGN_NAME, FOREIGN_MEM_MIB = 4242, "python3", 8192.0
XID_FALLEN_OFF_BUS = 79


@dataclass(frozen=True, slots=True)
class SimBlock:
    """Many ticks stepped at once (``SimServer.step_block``): the times stepped (a prefix of
    those asked: a block ends at the first tick where anything but the physics happens),
    each device's readings as columns (``t_s`` and the fields it reads; a tick where a
    device read nothing has no row), and its load's work and events over those ticks."""

    times: list[float]
    telemetry: dict[int, dict[str, np.ndarray]]
    work: list[WorkColumns]
    events: list[Event]


@dataclass(slots=True)
class _Snapshots:
    """The state a reading reads, per plain tick of a block (a row per tick)."""

    t: list[float]
    power: list[np.ndarray]  # the 1-s average before noise
    t_die: list[np.ndarray]
    t_mem: list[np.ndarray]
    energy: list[np.ndarray]
    sm_mhz: list[np.ndarray]
    mem_mhz: list[np.ndarray]
    util: list[np.ndarray]
    reasons: list[np.ndarray]
    power_violation: list[np.ndarray]
    thermal_violation: list[np.ndarray]
    loaded: list[np.ndarray]
    # what changes only at an event (so only at a block's last tick, read alone): as the
    # block began
    constant: dict[str, np.ndarray]

    @classmethod
    def empty(cls, constant: dict[str, np.ndarray]) -> _Snapshots:
        return cls([], [], [], [], [], [], [], [], [], [], [], [], constant)


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
    ``faults`` are ``--sim-fault`` specs or parsed ``Fault``s. ``chassis`` sets the air,
    fans and sensors (``IDEAL_CHASSIS``: the ideal sensors some tests need).
    """

    name = "sim"

    def __init__(
        self,
        gpus: int = 8,
        sku: str = DEFAULT_SKU,
        faults: Sequence[str | Fault] = (),
        seed: int = 0,
        devices: Sequence[int] | None = None,
        chassis: Chassis = CHASSIS,
    ) -> None:
        if not 1 <= gpus <= MAX_GPUS:
            raise ConfigError(f"--sim-gpus: must be between 1 and {MAX_GPUS}, got {gpus}")
        if sku not in SKUS:
            raise ConfigError(f"--sim-sku: unknown SKU {sku!r} (choose from {', '.join(SKUS)})")
        self.sku = SKUS[sku]
        self.gpus, self.seed = gpus, seed
        self.chassis = chassis
        self.selected = sorted(select(range(gpus), devices, self.name))
        self.faults = [f if isinstance(f, Fault) else parse_fault(f) for f in faults]
        for fault in self.faults:
            self._check_fits(fault)
        draws, self._banks = seed_streams(seed, gpus, self.chassis)
        self._draws = draws
        self.physics = Physics(self.sku, gpus, draws, self.chassis)
        self.link_factor = np.ones(gpus)  # ddp's all-reduce link bandwidth (link fault)
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
        # Temperature sensors: the readings held since each one's last refresh, and when.
        self._held_temps: tuple[list[float], list[float]] | None = None
        self._refresh_index = np.full(gpus, -1)
        # Telemetry metrics in field order; "" where this SKU cannot read one (None).
        self._readable = [
            m if m in SIM_METRICS and m not in self.sku.unsupported else ""
            for m in TELEMETRY_METRICS
        ]
        for fault in self.faults:
            if not fault.timed:
                self._fault_event(0.0, fault)
        # Telemetry faults: a device's held row (frozen), its glitch rate, its counters'
        # zero (reset), and the span without readings (gap).
        self._frozen: dict[int, Telemetry | None] = {}
        self._glitch = np.zeros(gpus)
        self._glitch_rng = np.random.default_rng([seed, 0x611C, gpus])
        self._counter_zero: dict[int, Telemetry | None] = {}
        self._gap_until: float | None = None
        # SW thermal slowdown as the driver does it (sw-thermal): the clock reads swing
        self._swing = swinging(self.faults, gpus)
        self._swing_rng = np.random.default_rng([seed, 0x5377, gpus])

    # -- construction helpers ---------------------------------------------------------------

    def _check_fits(self, fault: Fault) -> None:
        """Checks that need the server: the GPU exists, the power cap suits the SKU."""
        if fault.gpu is not None and fault.gpu >= self.gpus:
            raise fault_error(fault.spec, f"gpu={fault.gpu} but the server has {self.gpus} GPUs")
        s = self.sku
        if fault.watts is not None and not s.min_power_limit_w <= fault.watts <= s.tdp_w:
            raise fault_error(
                fault.spec,
                f"watts must be between {s.min_power_limit_w:g} and {s.tdp_w:g} for {s.key}",
            )

    def _apply_static_faults(self) -> None:
        """Faults that hold for the whole run: airflow, power cap, inlet, slow, leaky, sdc,
        link (ddp's all-reduce bandwidth)."""
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
            elif f.kind == "link":
                self.link_factor[g] *= f.factor
            elif f.kind == "sdc":
                p.sdc_rate[g] = 1 - (1 - p.sdc_rate[g]) * (1 - f.rate)
            elif f.kind == "sw-thermal":  # a sink that cannot shed the heat: held hot
                airflow[g] *= f.factor
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
        readable["xid_events"] = Capability.SUPPORTED  # the sim raises XIDs (xid: faults)
        return {i: dict(readable) for i in self.selected}

    def sample(self, t_s: float) -> list[Telemetry]:
        """One snapshot per selected device still on the bus, after advancing to t_s."""
        self.advance(t_s)
        if self._snapshot is not None and self._snapshot[0] == t_s:
            return list(self._snapshot[1])
        if self._gap_until is not None and t_s < self._gap_until:
            return []
        rows = self._tamper(self._read(t_s))
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
        (``die_truth``) and the one it would settle to at the present operating point
        (``Physics.asymptote_die_c``)."""
        return self.die_truth(), self.physics.asymptote_die_c(self.now_s)

    def die_truth(self) -> np.ndarray:
        """Per GPU, the die temperature now: no sensor noise or rounding, and without the
        fans' slow hunt, which swings it around its equilibrium (no fixed point to solve,
        unlike the settling temperature of ``thermal_truth``)."""
        p = self.physics
        return p.t_die - p.hunt_die

    def hunt_truth(self) -> np.ndarray:
        """Truth for accuracy benchmarks: per GPU, the part of the die temperature that the
        fans' slow hunt adds now (°C; the die is ``die_truth()`` plus this)."""
        return self.physics.hunt_die.copy()

    # -- blocks of ticks -------------------------------------------------------------------

    def block_ready(self) -> bool:
        """Whether ticks can be stepped as a block: no telemetry fault applies to the
        readings (frozen, glitch, reset, a gap, a swinging clock) and the load, if any, is
        the server's own and not lock-step (ddp). Otherwise each tick is read alone."""
        load = self._load or self._pending_load
        if any(getattr(type(self), name) is not getattr(SimServer, name) for name in _READS):
            return False  # a subclass that reads otherwise (a test's): read each tick alone
        return not (
            self._frozen
            or np.count_nonzero(self._glitch)
            or self._counter_zero
            or self._gap_until is not None
            or np.count_nonzero(self._swing)
            or (load is not None and load.sync is not None)
        )

    def step_block(
        self, times: Sequence[float], each: Callable[[float], None] | None = None
    ) -> SimBlock:
        """Step through ``times`` (ticks, in order) as the runner's ticks would, each tick's
        physics as ``advance`` makes it, and read every tick at once: the same readings,
        work and events, the same random numbers, as ``sample``, the load's ``poll`` and
        ``poll_events`` at each tick in turn. The block ends after the first tick where
        anything but the physics happens (an event, a load switched on, a result check
        failed, a telemetry fault): that tick is read as a single tick is. ``each`` is
        called at each tick once the server stands there (the BMC reads it)."""
        load = self._load if self._load is not None and self._load.collecting else None
        p = self.physics
        snaps = _Snapshots.empty(
            {
                "ecc_uncorrected": self.ecc_uncorrected.copy(),
                "remap_pending": self.remap_pending.copy(),
                "foreign": p.foreign.copy(),
                "limit_w": p.limit_w.copy(),
                "lost": p.lost.copy(),
            }
        )
        works: list[np.ndarray] = []
        checks: list[list[tuple[float, np.ndarray]]] = []
        last: float | None = None  # a tick read alone, ending the block
        last_checks: list[tuple[float, np.ndarray]] | None = None
        for t in times:
            switching = self._pending_load is not None
            self.advance(t)
            if each is not None:
                each(t)
            if switching or self._events or not self.block_ready():
                last = t
                break
            if load is not None:
                due = load.due_checks(t)
                if load.alone(due):
                    last, last_checks = t, due
                    break
                works.append(self.physics.take_work())
                checks.append(due)
            self._snapshot_state(t, snaps)
        telemetry = self._read_block(snaps, load)
        work, events = load.collect_block(snaps.t, works, checks) if load is not None else ([], [])
        if last is not None:
            self._snapshot = None
            rows = self.sample(last)
            for column in _columns(rows).items():
                _extend(telemetry, *column)
            if self._load is not None:
                update = self._load.poll(last, last_checks)
                work += _work_columns(update.samples)
                events += update.events
        times_done = snaps.t + ([last] if last is not None else [])
        return SimBlock(times_done, telemetry, work, events)

    def _snapshot_state(self, t_s: float, snaps: _Snapshots) -> None:
        p = self.physics
        window = min(1.0, t_s - self._energy_log[0][0])
        power = p.power_w
        if window > EPS:
            power = (p.energy_j - self._energy_at(t_s - window)) / window
        snaps.t.append(t_s)
        snaps.power.append(power)
        snaps.t_die.append(p.t_die)
        snaps.t_mem.append(p.t_mem)
        snaps.energy.append(p.energy_j)
        snaps.sm_mhz.append(p.sm_mhz)
        snaps.mem_mhz.append(p.mem_mhz)
        snaps.util.append(p.util)
        snaps.reasons.append(p.reasons)
        snaps.power_violation.append(p.power_violation_s)
        snaps.thermal_violation.append(p.thermal_violation_s)
        snaps.loaded.append(p.loaded.copy())  # a lost device's is cleared in place

    def _read_block(
        self, snaps: _Snapshots, load: SimLoad | None
    ) -> dict[int, dict[str, np.ndarray]]:
        """``_read`` of many plain ticks at once (a row per tick, a column per device)."""
        ticks = len(snaps.t)
        if not ticks:
            return {}
        c, n = self.chassis, self.gpus
        t = np.array(snaps.t)
        noise = self._banks["noise"].take(3 * ticks).reshape(ticks, 3, n)
        loaded = np.array(snaps.loaded)
        reasons = np.array(snaps.reasons)
        ripple = self._ripple_block(t, loaded, reasons, load)
        power = np.array(snaps.power)
        if ripple is not None:
            power = power * (1.0 + ripple[0])
        power = power + (c.power_noise_frac * power + c.power_noise_w) * noise[:, 0]
        duty = np.array(snaps.util)
        mem_util = load.workload.mem_util_pct if load is not None else 0.0
        die, mem = self._temperatures_block(
            t, np.array(snaps.t_die), np.array(snaps.t_mem), noise, ripple
        )
        zeros = np.zeros((ticks, n))
        held = snaps.constant
        foreign = np.broadcast_to(held["foreign"], (ticks, n))
        columns: dict[str, np.ndarray] = {
            "temp_c": die,
            "mem_temp_c": mem,
            "sm_clock_mhz": self._clock_block(np.array(snaps.sm_mhz), loaded, ripple),
            "mem_clock_mhz": np.array(snaps.mem_mhz),
            "power_w": np.rint(power * 1000) / 1000,
            "power_limit_w": np.broadcast_to(held["limit_w"], (ticks, n)),
            "energy_j": self._draws.energy_offset_j + np.array(snaps.energy),
            "util_pct": np.rint(100.0 * duty),
            "mem_util_pct": np.rint(mem_util * duty),
            "clock_reasons": reasons,
            "power_violation_s": np.array(snaps.power_violation),
            "thermal_violation_s": np.array(snaps.thermal_violation),
            "ecc_corrected": zeros,
            "ecc_uncorrected": np.broadcast_to(held["ecc_uncorrected"], (ticks, n)),
            "remap_pending": np.broadcast_to(held["remap_pending"], (ticks, n)),
            "remap_failure": zeros,
            "retired_pages": zeros,
            "pcie_replay": zeros,
            "foreign_procs": (foreign > 0).astype(float),
            "foreign_mem_mib": np.where(foreign > 0, FOREIGN_MEM_MIB, 0.0),
        }
        read = [m for m in self._readable if m]
        return {
            i: {"t_s": t, **{m: np.array(columns[m][:, i], dtype=float) for m in read}}
            for i in self.selected
            if not held["lost"][i]
        }

    def _ripple_block(
        self, t: np.ndarray, loaded: np.ndarray, reasons: np.ndarray, load: SimLoad | None
    ) -> np.ndarray | None:
        """``_ripple`` of many ticks: (3, ticks, devices), or None where nothing ripples."""
        if load is None or not self.chassis.ripple or load.workload.ripple == Ripple():
            return None
        r, ticks, n = load.workload.ripple, len(t), self.gpus
        z = self._banks["ripple"].take(2 * ticks).reshape(ticks, 2, n)
        u = self._banks["ripple_clock"].take(ticks)
        cycle = np.sin(2 * math.pi * (t[:, None] / r.temp_cycle_s + self._draws.ripple_phase))
        share = r.temp_cycle_share
        temp = math.sqrt(2 * share) * cycle + math.sqrt(1 - share) * z[:, 1]
        held = (reasons & int(ClockReason.SW_POWER_CAP | ClockReason.SW_THERMAL)) != 0
        return np.stack(
            (
                np.where(loaded, r.power * z[:, 0], 0.0),
                np.where(loaded, r.temp_c * temp, 0.0),
                np.where(loaded & held, r.clock * math.sqrt(3.0) * (2.0 * u - 1.0), 0.0),
            )
        )

    def _temperatures_block(
        self,
        t: np.ndarray,
        t_die: np.ndarray,
        t_mem: np.ndarray,
        noise: np.ndarray,
        ripple: np.ndarray | None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """``_temperatures`` of many ticks: each sensor's value held from its refresh."""
        c = self.chassis
        die = t_die + c.temp_noise_c * noise[:, 1]
        die = np.rint(die if ripple is None else die + ripple[1])
        mem = np.rint(t_mem + c.temp_noise_c * noise[:, 2])
        if not c.temp_refresh:
            return die, mem
        index = np.floor(t[:, None] / self.sku.temp_refresh_s + self._draws.sensor_phase)
        before = np.vstack((self._refresh_index[None, :], index[:-1]))
        fresh = index != before
        self._refresh_index = index[-1]
        rows = np.arange(len(t))[:, None]
        if self._held_temps is None:
            fresh[0] = True  # the first reading is taken as read
        source = np.maximum.accumulate(np.where(fresh, rows, -1), axis=0)
        cols = np.arange(self.gpus)
        if self._held_temps is not None:
            held_die, held_mem = (np.asarray(v) for v in self._held_temps)
            die = np.where(source >= 0, die[np.maximum(source, 0), cols], held_die)
            mem = np.where(source >= 0, mem[np.maximum(source, 0), cols], held_mem)
        else:
            die, mem = die[source, cols], mem[source, cols]
        self._held_temps = (die[-1], mem[-1])
        return die, mem

    def _clock_block(
        self, sm_mhz: np.ndarray, loaded: np.ndarray, ripple: np.ndarray | None
    ) -> np.ndarray:
        """``_dithered_clock`` of many ticks (no swinging clock: ``block_ready``)."""
        s = self.sku
        u = self._banks["dither"].take(len(sm_mhz))
        f = sm_mhz
        if ripple is not None:
            f = np.clip(f * (1.0 + ripple[2]), s.idle_sm_clock_mhz, s.max_sm_clock_mhz)
        below = (s.max_sm_clock_mhz - f) / s.clock_step_mhz
        bins = np.floor(below + u)
        clock = s.max_sm_clock_mhz - bins * s.clock_step_mhz
        return np.where(loaded, clock, f)

    # -- time ---------------------------------------------------------------------------

    def advance(self, t_s: float) -> None:
        """Run the physics up to t_s in exact substeps, splitting at fault transitions."""
        if t_s < self.now_s - EPS:
            raise ValueError(f"sim: time went backwards ({t_s} < {self.now_s})")
        while self.now_s < t_s - EPS:
            self._apply_due()
            target = t_s
            if self._schedule and self._schedule[0].t_s < target:
                target = self._schedule[0].t_s
            pieces = max(1, math.ceil((target - self.now_s) / self.chassis.max_substep_s - EPS))
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

    def request_load(self, load: SimLoad) -> None:
        """Switch ``load`` on at the next call that moves time (the runner's next tick)."""
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

    def end_load(self, load: SimLoad) -> None:
        """Switch ``load`` off now, or withdraw it if it has not switched on yet."""
        if self._pending_load is load:
            self._pending_load = None
        elif self._load is load:
            self._load = None
            self.physics.set_load(None, np.zeros(self.gpus, dtype=bool))

    def take_work(self) -> np.ndarray:
        """Work done per workload part and device since the last call."""
        return self.physics.take_work()

    def random(self, stream: str, rows: int) -> np.ndarray:
        """The next ``rows`` numbers of each device's ``stream`` ("work", "verify", ...)."""
        return self._banks[stream].take(rows)

    @property
    def sdc_rate(self) -> np.ndarray:
        """Per device, the fraction of result checks that fail (the ``sdc`` fault)."""
        return self.physics.sdc_rate

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
        while self._schedule and self._schedule[0].t_s <= self.now_s + EPS:
            tr = self._schedule.pop(0)
            if tr.starts:
                self._fault_starts(tr.fault, tr.t_s)
            else:
                self._fault_ends(tr.fault, tr.t_s)

    def _fault_starts(self, f: Fault, t_s: float) -> None:
        p, g = self.physics, f.gpu
        if f.kind == "gap":
            self._fault_event(t_s, f)
            self._gap_until = t_s + (f.for_s or 0.0)
            return
        assert g is not None  # every other timed kind names its GPU
        if p.lost[g]:
            return
        self._fault_event(t_s, f)
        if f.kind == "frozen":
            self._frozen[g] = None  # the next reading is held
        elif f.kind == "glitch":
            self._glitch[g] = f.rate or 0.0
        elif f.kind == "reset":
            self._counter_zero[g] = None  # taken at the next reading
        elif f.kind == "hw-slowdown":
            p.hw_slowdown[g] += 1
        elif f.kind == "power-brake":
            p.power_brake[g] += 1
        elif f.kind == "hw-thermal":
            p.thermal_alert[g] += 1
        elif f.kind == "stall":
            p.stall[g] = max(p.stall[g], f.fraction or 0.0)
        elif f.kind == "contention":
            p.foreign[g] = max(p.foreign[g], f.fraction or 0.0)
            details = {"pid": FOREIGN_PID, "name": FOREIGN_NAME, "used_mib": FOREIGN_MEM_MIB}
            message = (
                f"another process on the device: pid {FOREIGN_PID} ({FOREIGN_NAME}), "
                f"{FOREIGN_MEM_MIB:.0f} MiB"
            )
            self._events.append(Event(t_s, EventKind.FOREIGN_PROCESS, message, g, details))
        elif f.kind == "ecc":
            self._ecc(g, f.count or 1, t_s)
        elif f.kind == "xid":
            self._xid(g, f.code or 0, t_s)

    def _fault_ends(self, f: Fault, t_s: float) -> None:
        p, g = self.physics, f.gpu
        if f.kind == "gap":
            self._fault_event(t_s, f, ended=True)
            return
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
        elif f.kind == "contention":
            p.foreign[g] = 0.0

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
        hot = p.t_die >= self.sku.shutdown_temp_c
        if not np.count_nonzero(hot):  # the usual case, at every substep
            return
        for g in np.flatnonzero(hot & ~p.lost).tolist():
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
        if window > EPS:
            power = (p.energy_j - self._energy_at(t_s - window)) / window
        ripple = self._ripple(t_s)
        if ripple is not None:
            power = power * (1.0 + ripple[0])
        power = power + (c.power_noise_frac * power + c.power_noise_w) * noise[0]
        duty = p.util
        mem_util = self._load.workload.mem_util_pct if self._load is not None else 0.0
        zeros = [0] * n
        columns: dict[str, list] = {
            **self._temperatures(t_s, noise, None if ripple is None else ripple[1]),
            "sm_clock_mhz": self._dithered_clock(None if ripple is None else ripple[2]).tolist(),
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
            "foreign_procs": (p.foreign > 0).astype(int).tolist(),
            "foreign_mem_mib": np.where(p.foreign > 0, FOREIGN_MEM_MIB, 0.0).tolist(),
        }
        missing = [None] * n
        table = [columns.get(m, missing) for m in self._readable]
        rows = list(zip(*table, strict=True))
        return [Telemetry(i, t_s, *rows[i]) for i in self.selected if not p.lost[i]]

    def _tamper(self, rows: list[Telemetry]) -> list[Telemetry]:
        """The telemetry faults applied to the sensors' readings."""
        out = []
        draws = self._glitch_rng.random(self.gpus) if self._glitch.any() else None
        for row in rows:
            g = row.device
            if g in self._counter_zero:
                zero = self._counter_zero[g]
                if zero is None:
                    zero = self._counter_zero[g] = row
                row = replace(row, **_counters_since(row, zero))
            if draws is not None and draws[g] < self._glitch[g] and row.temp_c is not None:
                row = replace(row, temp_c=GLITCH_TEMP_C)
            if g in self._frozen:
                held = self._frozen[g]
                if held is None:
                    self._frozen[g] = row
                else:
                    row = replace(held, t_s=row.t_s)
            out.append(row)
        return out

    def _ripple(self, t_s: float) -> np.ndarray | None:
        """What the load's sub-second variation adds to this reading (``Ripple``): per
        device, the power (relative), the die (°C) and the clock a limit holds (relative,
        spread evenly); None where nothing ripples (no load, or ``chassis.ripple`` off)."""
        load, p = self._load, self.physics
        if load is None or not self.chassis.ripple or load.workload.ripple == Ripple():
            return None
        r = load.workload.ripple
        z = self._banks["ripple"].take(2)
        u = self._banks["ripple_clock"].take(1)[0]
        cycle = np.sin(2 * math.pi * (t_s / r.temp_cycle_s + self._draws.ripple_phase))
        share = r.temp_cycle_share
        temp = math.sqrt(2 * share) * cycle + math.sqrt(1 - share) * z[1]
        on = p.loaded
        held = (p.reasons & int(ClockReason.SW_POWER_CAP | ClockReason.SW_THERMAL)) != 0
        return np.stack(
            (
                np.where(on, r.power * z[0], 0.0),
                np.where(on, r.temp_c * temp, 0.0),
                np.where(on & held, r.clock * math.sqrt(3.0) * (2.0 * u - 1.0), 0.0),
            )
        )

    def _temperatures(
        self, t_s: float, noise: np.ndarray, ripple_c: np.ndarray | None = None
    ) -> dict[str, list[float]]:
        """Die and HBM temperature readings: whole °C, and with a refresh period, the
        value taken at the first reading after each sensor's latest refresh, held until
        its next one. ``ripple_c``: what the load's ripple adds to the die's."""
        p, c = self.physics, self.chassis
        die = p.t_die + c.temp_noise_c * noise[1]
        die = np.rint(die if ripple_c is None else die + ripple_c)
        mem = np.rint(p.t_mem + c.temp_noise_c * noise[2])
        if c.temp_refresh:
            index = np.floor(t_s / self.sku.temp_refresh_s + self._draws.sensor_phase)
            fresh = index != self._refresh_index
            self._refresh_index = index
            if self._held_temps is not None:
                held_die, held_mem = self._held_temps
                die = np.where(fresh, die, held_die)
                mem = np.where(fresh, mem, held_mem)
            self._held_temps = (die, mem)
        return {"temp_c": die.tolist(), "mem_temp_c": mem.tolist()}

    def _dithered_clock(self, ripple: np.ndarray | None = None) -> np.ndarray:
        """The clock as NVML reads it: one of the two supported bins around the clock of
        the instant, picked in proportion, so that the reading averages to it; the clock
        of the instant is the mean clock, moved by the load's ``ripple`` (relative) where a
        limit holds it, within the idle and the maximum clock."""
        p, s = self.physics, self.sku
        u = self._banks["dither"].take(1)[0]
        f = p.sm_mhz
        if ripple is not None:
            f = np.clip(f * (1.0 + ripple), s.idle_sm_clock_mhz, s.max_sm_clock_mhz)
        below = (s.max_sm_clock_mhz - f) / s.clock_step_mhz
        bins = np.floor(below + u)
        clock = s.max_sm_clock_mhz - bins * s.clock_step_mhz
        clock = np.where(p.loaded, clock, f)
        if self._swing.any():  # sw-thermal: held by SW thermal slowdown, the clock swings
            held = self._swing & p.loaded & ((p.reasons & int(ClockReason.SW_THERMAL)) != 0)
            swung = swung_clock(p.sm_mhz, s.idle_sm_clock_mhz, s.max_sm_clock_mhz, self._swing_rng)
            clock = np.where(held, swung, clock)
        return clock


# What a block reads in its own way: a subclass that changes one reads tick by tick.
_READS = ("sample", "poll_events", "advance", "_read", "_tamper", "_ripple", "_temperatures")


def _columns(rows: Sequence[Telemetry]) -> dict[int, dict[str, np.ndarray]]:
    """One tick's rows as one-row columns per device (None: NaN, a field not read)."""
    out = {}
    for row in rows:
        values = {
            name: np.array([math.nan if v is None else float(v)])
            for name in TELEMETRY_METRICS
            if (v := getattr(row, name)) is not None
        }
        out[row.device] = {"t_s": np.array([row.t_s]), **values}
    return out


def _extend(
    telemetry: dict[int, dict[str, np.ndarray]], device: int, columns: dict[str, np.ndarray]
) -> None:
    """Append one device's columns to a block's (a field one of them lacks: NaN there)."""
    held = telemetry.get(device)
    if held is None:
        telemetry[device] = columns
        return
    size, more = held["t_s"].size, columns["t_s"].size
    names = set(held) | set(columns)
    telemetry[device] = {
        name: np.concatenate(
            (held.get(name, np.full(size, math.nan)), columns.get(name, np.full(more, math.nan)))
        )
        for name in names
    }


def _work_columns(samples: Sequence[WorkSample]) -> list[WorkColumns]:
    """Work samples as columns per device and part, in the order they came."""
    grouped: dict[tuple[int, str, str], list[WorkSample]] = {}
    for s in samples:
        grouped.setdefault((s.device, s.part, s.unit), []).append(s)
    out = []
    for (device, part, unit), rows in grouped.items():
        out.append(
            WorkColumns(
                device,
                part,
                unit,
                np.array([r.t_start_s for r in rows]),
                np.array([r.t_end_s for r in rows]),
                np.array([r.work for r in rows]),
                np.array([math.nan if r.verified is None else float(r.verified) for r in rows]),
                np.array([math.nan if r.verify_error is None else r.verify_error for r in rows]),
            )
        )
    return out


GLITCH_TEMP_C = -75.0  # what a glitching sensor reads: below any room a server runs in
_COUNTERS = ("energy_j", "ecc_corrected", "ecc_uncorrected", "retired_pages", "pcie_replay")


def _counters_since(row: Telemetry, zero: Telemetry) -> dict[str, float | int | None]:
    """The row's cumulative counters counted from ``zero``'s (a driver reload)."""
    out: dict[str, float | int | None] = {}
    for name in _COUNTERS:
        now, base = getattr(row, name), getattr(zero, name)
        out[name] = None if now is None else now - (base or 0)
    return out
