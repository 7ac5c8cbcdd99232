"""Physics of the simulated server: every device's state and one exact step of it."""

from __future__ import annotations

import math

import numpy as np

from soak.devices.sim.params import (
    TRAIN_FLOP_PER_TOKEN,
    TRAIN_SM_WEIGHT,
    WORKLOADS,
    Chassis,
    Sku,
    Workload,
)
from soak.devices.sim.streams import Draws
from soak.model import ClockReason

# Times closer than this (seconds) are the same time.
EPS = 1e-9
# The reason bits as plain ints, converted once (the step is per tick).
_SW_POWER_CAP = int(ClockReason.SW_POWER_CAP)
_SW_THERMAL = int(ClockReason.SW_THERMAL)
_HW_SLOWDOWN = int(ClockReason.HW_SLOWDOWN)
_HW_POWER_BRAKE = int(ClockReason.HW_POWER_BRAKE)
_HW_THERMAL = int(ClockReason.HW_THERMAL)
_GPU_IDLE = int(ClockReason.GPU_IDLE)
_POWER_BITS = int(ClockReason.SW_POWER_CAP | ClockReason.HW_POWER_BRAKE)
_THERMAL_BITS = int(ClockReason.SW_THERMAL | ClockReason.HW_THERMAL)
_count = np.count_nonzero  # ``a.any()`` is ``_count(a) != 0``, and cheaper on 8 devices


def _upstream(n: int) -> np.ndarray:
    """Index of the GPU whose exhaust each GPU breathes, -1 for the front row."""
    front = (n + 1) // 2
    return np.array([i - front if i >= front else -1 for i in range(n)])


class Physics:
    """Every device's state and one exact step of it: numbers only, no events or records."""

    def __init__(self, sku: Sku, n: int, draws: Draws, chassis: Chassis) -> None:
        self.sku, self.n, self.chassis, self.draws = sku, n, chassis, draws
        self.cooling = sku.cooling
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
        points: the idle power at ~30 °C, and the power the cap holds (its share of the
        TDP) at the GEMM clock the SKU table gives for a die at the leakage reference
        temperature."""
        s, c = self.sku, self.chassis
        gemm = WORKLOADS["gemm"]
        g_idle = float(self._g_dyn(s.idle_sm_clock_mhz)) * c.idle_activity
        g_ref = float(self._g_dyn(s.gemm_clock_at_tdp_mhz))
        leak_idle = s.leak_w_ref * float(self._g_leak(s.idle_sm_clock_mhz) * self._leak_temp(30))
        leak_ref = s.leak_w_ref * float(self._g_leak(s.gemm_clock_at_tdp_mhz))
        mem = gemm.mem_power_frac * s.hbm_power_w
        held = s.tdp_w * s.cap_share
        self.p_dyn_w = (held - s.idle_power_w + leak_idle - mem - leak_ref) / (g_ref - g_idle)
        self.p_base_w = s.idle_power_w - self.p_dyn_w * g_idle - leak_idle
        if self.p_dyn_w <= 0 or self.p_base_w <= 0:
            raise ValueError(f"sim SKU {s.key}: inconsistent power table")

    def _setup_devices(self, n: int) -> None:
        s = self.sku
        self.up = _upstream(n)
        self.rear = np.flatnonzero(self.up >= 0)
        self._rear_up = self.up[self.rear]  # the device upstream of each rear one
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
        # fraction of the device another process's compute takes (contention): soak's work
        # slows by it while the device stays as busy and as hot
        self.foreign = np.zeros(n)
        self.util = np.zeros(n)  # fraction of the last step with fresh input (NVML util)
        self.activity = 0.0
        self.mem_power_frac = 0.0
        self.ramp_s = 0.0  # how long the load's activity takes to build up
        self.load_since: float | None = None  # when the present load began
        self.work_coef = np.zeros((0, 2))  # per part: (per SM MHz, per memory MHz)
        self.work = np.zeros((0, n))
        self._expm_cache: dict[float, tuple[np.ndarray, ...]] = {}
        # The fan controller: 0 at idle fan speed, 1 at load speed; and the die and sink
        # temperatures' response to its slow hunting alone (linear, for the truth).
        self.fan_level = 0.0
        self.hunt_die = np.zeros(n)
        self.hunt_sink = np.zeros(n)
        self._fans = self.chassis.fans and self.cooling.moves
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
            if self._fans:  # the fans at their idle speed
                self.t_sink = self.t_sink + p * self.r_sa * self.fan_lag(self.fan_level)
            self.t_die = self.t_sink + p * self.r_ds
        self.t_mem = self.mem_target(no_mem)
        self.power_w = p

    def asymptote_die_c(self, t_s: float) -> np.ndarray:
        """Truth for accuracy benchmarks, never read by the simulation: the die temperature
        each device would settle to if its present load, faults and room air held, with
        the fans at the speed they are heading for (their short cycle and their slow hunt
        left out: they swing around the equilibrium, they do not move it).
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
        r_sa = self.r_sa * (1.0 + self.fan_lag(self.fan_target())) if self._fans else self.r_sa
        try:
            for _ in range(200):
                terms = self.power_terms(activity, mem_w)
                f = np.where(self.loaded, self.govern(terms)[0], s.idle_sm_clock_mhz)
                f = np.where(halved, np.maximum(0.5 * f, s.idle_sm_clock_mhz), f)
                power = np.where(self.lost, 0.0, self.power_of(f, terms))
                air = room.copy()
                air[self.rear] += self.chassis.preheat_k_w * power[self.up[self.rear]]
                self.t_sink = self.t_sink + damping * (air + power * r_sa - self.t_sink)
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
        self.ramp_s = workload.ramp_s
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

    def air_temp(
        self,
        t_s: float,
        heat_to_air: np.ndarray | None = None,
        fan_rise: np.ndarray | None = None,
    ) -> np.ndarray:
        """Air at each heat sink: inlet, plus the upstream GPU's heat for the rear row.
        ``fan_rise`` is what slow fans add: the sink's resistance to air above its value
        at load speed, times the heat flow, counted as warmer air (same first-order effect
        on the sink, and the network's matrix exponential stays cached)."""
        air = self.inlet_c(t_s) + self.inlet_delta
        if fan_rise is not None:
            air = air + fan_rise
        if heat_to_air is None:
            heat_to_air = (self.t_sink - air) / self.r_sa  # front row's air is final
        air[self.rear] += self.chassis.preheat_k_w * heat_to_air[self._rear_up]
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
        held = self.limit_w * s.cap_share  # what the power controller holds
        limit = np.minimum(held, p_thermal)
        fits = (p_grid <= limit).sum(axis=0)
        k = np.minimum(np.maximum(fits - 1, 0), len(self.f_grid) - 2)
        above = k + 1
        lo, hi = p_grid[k, self._cols], p_grid[above, self._cols]
        frac = np.minimum(np.maximum((limit - lo) / (hi - lo), 0.0), 1.0)
        f_lo = self.f_grid[k]
        f = f_lo + frac * (self.f_grid[above] - f_lo)
        capped = p_grid[-1] > limit
        power_bound = capped & (held <= p_thermal * 1.02)
        thermal_bound = capped & (p_thermal <= held * 1.02)
        bits = power_bound * _SW_POWER_CAP
        bits |= thermal_bound * _SW_THERMAL
        return f, bits

    def hw_bits(self) -> np.ndarray:
        """HW slowdown, power brake and HW thermal (with 3 K hysteresis) as reason bits."""
        s = self.sku
        hot = (self.t_die >= s.slowdown_temp_c) | (self.t_mem >= s.mem_max_temp_c)
        if not (_count(hot) or _count(self.hw_thermal) or self._hw_faults):
            return self._no_bits
        cool = (self.t_die < s.slowdown_temp_c - 3) & (self.t_mem < s.mem_max_temp_c - 3)
        self.hw_thermal = hot | (self.hw_thermal & ~cool)
        bits = (self.hw_slowdown > 0) * _HW_SLOWDOWN
        bits |= (self.power_brake > 0) * _HW_POWER_BRAKE
        bits |= (self.hw_thermal | (self.thermal_alert > 0)) * _HW_THERMAL
        return bits

    @property
    def _hw_faults(self) -> bool:
        return bool(
            _count(self.hw_slowdown) or _count(self.power_brake) or _count(self.thermal_alert)
        )

    def step(self, t_s: float, h: float) -> None:
        """Advance every device by h seconds from t_s with the clocks chosen at t_s."""
        s = self.sku
        self.util = self.duty()
        self._track_load(t_s)
        busy = self._busy(h)
        if self.ramp_s > 0 and self.load_since is not None and t_s < self.load_since + self.ramp_s:
            busy = busy * self._ramp(t_s, h)
        activity = np.where(self.loaded, self.activity * busy, self.chassis.idle_activity)
        mem_w = self.loaded * busy * (self.mem_power_frac * s.hbm_power_w)
        terms = self.power_terms(activity, mem_w)
        self._set_clocks(*self.govern(terms), self.hw_bits())
        power = self.power_of(self.sm_mhz, terms)
        if _count(self.lost):  # off the bus or shut down: powered off
            power = np.where(self.lost, 0.0, power)
        self._heat(t_s + 0.5 * h, h, power, mem_w)
        self._account(h, power, busy)

    def _track_load(self, t_s: float) -> None:
        """When the present load began: the start of the first step with a device loaded."""
        if not _count(self.loaded):
            self.load_since = None
        elif self.load_since is None:
            self.load_since = t_s

    def _ramp(self, t_s: float, h: float) -> float:
        """The share of its full activity the load reaches over (t_s, t_s + h) on average,
        building up evenly over ``ramp_s`` from its start."""
        assert self.load_since is not None

        def built(t: float) -> float:  # ∫ of min(1, (t − start) / ramp) from the start
            u = max(t - self.load_since, 0.0) / self.ramp_s  # type: ignore[operator]
            return self.ramp_s * (u * u / 2 if u <= 1 else u - 0.5)

        return (built(t_s + h) - built(t_s)) / h

    def _set_clocks(self, f: np.ndarray, bits: np.ndarray, hw: np.ndarray) -> None:
        """Clocks and reasons from the governor's choice, idle devices and HW slowdowns."""
        s = self.sku
        if _count(self.loaded) != self.loaded.size:
            f = np.where(self.loaded, f, s.idle_sm_clock_mhz)
            bits = np.where(self.loaded, bits, _GPU_IDLE)
        if hw is self._no_bits:
            self.sm_mhz, self.mem_mhz, self.reasons = f, self._full_mem_mhz, bits
            return
        halved = hw != 0
        self.sm_mhz = np.where(halved, np.maximum(0.5 * f, s.idle_sm_clock_mhz), f)
        self.mem_mhz = np.where(halved, 0.5 * s.mem_clock_mhz, s.mem_clock_mhz)
        # Halved clocks draw far less than the cap: the power cap no longer holds them.
        self.reasons = np.where(halved, bits & ~_SW_POWER_CAP, bits) | hw

    def _heat(self, t_mid: float, h: float, power: np.ndarray, mem_w: np.ndarray) -> None:
        """Exact two-node update for power held over h, then the HBM node's lag."""
        m11, m12, m21, m22 = self._expm(h)
        fan_rise = None
        if self._fans:
            lag, hunt = self._fan_step(t_mid, h)
            heat = power * self.r_sa
            fan_rise = heat * (lag + hunt)
            # The hunt's own response, by the same exact update (the network is linear).
            f = heat * hunt
            hd, hs = self.hunt_die - f, self.hunt_sink - f
            self.hunt_die = f + m11 * hd + m12 * hs
            self.hunt_sink = f + m21 * hd + m22 * hs
        air = self.air_temp(t_mid, fan_rise=fan_rise)
        sink_inf = air + power * self.r_sa
        die_inf = sink_inf + power * self.r_ds
        dd, ds = self.t_die - die_inf, self.t_sink - sink_inf
        self.t_die = die_inf + m11 * dd + m12 * ds
        self.t_sink = sink_inf + m21 * dd + m22 * ds
        target = self.mem_target(mem_w)
        self.t_mem = target + (self.t_mem - target) * math.exp(-h / self.sku.mem_tau_s)

    def fan_target(self, t_s: float | None = None) -> float:
        """Where the fan controller heads at t_s: load speed from ``fan_delay_s`` after a
        load begins (None: where it heads in the end)."""
        if not _count(self.loaded):
            return 0.0
        if t_s is None:
            return 1.0
        since = self.load_since
        return 1.0 if since is not None and t_s >= since + self.cooling.delay_s else 0.0

    def fan_lag(self, level: float) -> float:
        """The sink's resistance to air above its load-speed value, as a fraction."""
        return self.cooling.idle_excess * (1.0 - level)

    def _fan_step(self, t_mid: float, h: float) -> tuple[float, float]:
        """Move the fans by h; their lag and hunt over the step as fractions of the
        sink's resistance to air (the lag's exact mean over the step)."""
        c = self.cooling
        target, level = self.fan_target(t_mid), self.fan_level
        decay = math.exp(-h / c.lag_s)
        mean = target + (level - target) * (c.lag_s / h) * (1.0 - decay)
        self.fan_level = target + (level - target) * decay
        phase = 2 * math.pi * t_mid / c.hunt_period_s + self.draws.hunt_phase
        return self.fan_lag(mean), c.hunt_frac * math.sin(phase)

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
        self.power_violation_s = self.power_violation_s + h * ((r & _POWER_BITS) != 0)
        self.thermal_violation_s = self.thermal_violation_s + h * ((r & _THERMAL_BITS) != 0)
        if len(self.work):
            rate = self.work_coef[:, :1] * self.sm_mhz + self.work_coef[:, 1:] * self.mem_mhz
            self.work += rate * (self.perf * busy * (1.0 - self.foreign) * self.loaded) * h

    def _busy(self, h: float) -> np.ndarray:
        """Fraction of the next h the device computes at full rate: all of it while the
        prefetch queue lasts, then only what the stalled input pipeline supplies."""
        if not _count(self.stall):
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
