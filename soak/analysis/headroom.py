"""Thermal headroom: what each device would do at the hottest inlet the room allows.

The rule, per device, where the BMC read the inlet over the device's steady window:

1. θ, the device's thermal resistance to the air it breathes, is (T_die − T_inlet) / P per
   telemetry sample of the steady window (the inlet interpolated to it), its mean with a 95 %
   interval from ``BATCHES`` batch means. A rear-row device's θ holds the exhaust of the one
   in front of it: the projection moves both with the inlet.
2. The warm-up (load start to the steady window, the die within ``WARMUP_SPAN_C`` of its
   steady temperature: the slope near where it will be used) shows how power answers the die
   temperature, as least-squares parabolas over ``BIN_S`` bins of time (leakage grows
   faster than linearly with temperature; a straight line with fewer than 2 x ``MIN_BINS``
   bins), their slope taken at the steady temperature and their curvature kept:
   - a device below its power limit, clock held (within ``FIXED_CLOCK_FRAC`` of its steady
     clock): the leakage L = dP/dT at that clock, W/°C;
   - a device at its power limit (within ``AT_LIMIT_FRAC``): power is held, and the clock the
     governor gives up per °C, dF/dT, MHz/°C, is the same leakage seen through the governor.
   Fewer than ``MIN_POINTS`` samples or a span under ``MIN_SPAN_C``: not measured (None), and
   the projection says it left leakage out.
3. At an inlet warmer by ΔT than the steady window's:
   - below the limit, the fixed point of temperature and power: T = T_ss + ΔT / (1 − θL),
     P = P_ss + L (T − T_ss) (with the fit's curvature, solved by iteration); from the
     inlet where P reaches the limit, power stays there and the clock sheds what leakage
     adds;
   - at the limit: T = T_ss + ΔT, the clock moves along the fitted dF/dT;
   - above the SW thermal slowdown (the max operating temperature) the die is held there
     and power falls to (T_sw − T_inlet) / θ.
   Where the clock must shed power no slope measured, it is taken proportional to the power
   above idle: real dynamic power grows faster than the clock, so this projects a lower clock
   than the device will keep (conservative, and said).
4. Throughput follows the clock by each part's elasticity (ln rate on ln clock over the load,
   binned; 1 where the clock did not move enough to measure it: conservative).
5. Fans below ``FAN_MAX_PCT`` at steady have room to spin up: the projection is then
   conservative, and says so where the fan speed is known.
6. Margins at the design inlet to each threshold (SW thermal slowdown, HW slowdown,
   shutdown), and the inlet at which the SW thermal slowdown begins (bisection over
   ``SEARCH_C``). A device that reaches it below the design inlet warns; below the
   profile's ``min_headroom_c`` (0: off) it fails.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from soak.analysis.checks import DeviceFacts, Finding, Status
from soak.fields import Columns
from soak.model import INLET_SERIES, DeviceInfo
from soak.record import BmcProbe

BATCHES = 10  # batch means for θ's interval: the steady window's samples are correlated
T95 = {10: 2.262, 9: 2.306, 8: 2.365, 7: 2.447, 6: 2.571, 5: 2.776, 4: 3.182, 3: 4.303}
WARMUP_SPAN_C = 15.0  # the warm-up's slope is taken this close to the steady temperature
FIXED_CLOCK_FRAC = 0.005  # "the clock held": within 0.5 % of its steady level
AT_LIMIT_FRAC = 0.02  # at the power limit: within 2 % of it over the steady window
MIN_POINTS = 20  # samples for a slope
BIN_S = 20.0  # slopes are fitted to means over bins of this many seconds
MIN_BINS = 5
MIN_SPAN_C = 3.0  # °C of die temperature a slope must span
MIN_CLOCK_SPAN = 0.01  # relative clock span for a throughput elasticity
FAN_MAX_PCT = 95.0  # a fan below this at steady could still spin up
HELD_C = 0.5  # a steady die this close to the SW thermal slowdown is held there already
SEARCH_C = (-20.0, 60.0)  # inlets searched for the throttle point, relative to the run's

THRESHOLDS = (
    ("sw_thermal", "max_operating_temp_c", "SW thermal slowdown"),
    ("hw_slowdown", "slowdown_temp_c", "HW slowdown"),
    ("shutdown", "shutdown_temp_c", "shutdown"),
)


@dataclass(frozen=True, slots=True)
class Point:
    """A device's steady state at one inlet: die temperature, power, SM clock, throughput
    per part, and what limits it ("power limit", "SW thermal", "" for neither)."""

    inlet_c: float
    temp_c: float
    power_w: float
    clock_mhz: float | None
    throughput: dict[str, float | None]
    limit: str = ""


@dataclass(frozen=True, slots=True)
class DeviceModel:
    """What the run measured of one device: the steady state and how it would move."""

    device: int
    steady: Point
    theta_c_per_w: float
    theta_interval: tuple[float, float] | None
    leakage_w_per_c: float | None  # dP/dT at a fixed clock; None: not measured
    clock_per_c_mhz: float | None  # dF/dT at the power limit; None: not measured
    power_limit_w: float | None
    at_power_limit: bool
    idle_power_w: float | None
    elasticity: dict[str, float | None]  # part -> d ln rate / d ln clock (None: not measured)
    thresholds_c: dict[str, float]  # THRESHOLDS key -> °C, those the device reports
    fan_pct: float | None
    # half the second derivative of the warm-up's fit (clock, MHz/°C²; power, W/°C²): the
    # curvature leakage gives them; 0 where too few points to fit one
    clock_curve: float = 0.0
    leakage_curve: float = 0.0

    def at(self, inlet_c: float) -> Point:
        """The projected steady state at ``inlet_c`` (rule, step 3)."""
        s = self.steady
        d_in = inlet_c - s.inlet_c
        clock = s.clock_mhz
        limit = ""
        if self.at_power_limit:
            temp, power = s.temp_c + d_in, s.power_w
            if clock is not None and self.clock_per_c_mhz is not None:
                rise = temp - s.temp_c
                clock = clock + self.clock_per_c_mhz * rise + self.clock_curve * rise * rise
            limit = "power limit"
        else:
            leak = self.leakage_w_per_c or 0.0
            gain = 1.0 / max(1.0 - self.theta_c_per_w * leak, 0.1)
            rise = d_in * gain
            for _ in range(50):  # the fixed point with the leakage's curvature
                extra = self.leakage_curve * rise * rise
                rise = (d_in + self.theta_c_per_w * extra) * gain
            temp = s.temp_c + rise
            power = s.power_w + leak * rise + self.leakage_curve * rise * rise
            cap = self.power_limit_w
            if cap is not None and power > cap and leak > 0:
                crossed = (cap - s.power_w) / (leak * gain)  # inlet rise where P meets the cap
                temp = s.temp_c + crossed * gain + (d_in - crossed)
                uncapped = s.power_w + leak * (temp - s.temp_c)
                clock = self._shed(clock, uncapped, cap)
                power, limit = cap, "power limit"
        hold = self.hold_c
        if hold is not None and temp > hold:
            held = max((hold - inlet_c) / self.theta_c_per_w, 0.0)
            clock = self._shed(clock, power, held)
            temp, power, limit = hold, held, "SW thermal"
        return Point(inlet_c, temp, power, clock, self._rates(clock), limit)

    @property
    def already_held(self) -> bool:
        """At or past its SW thermal slowdown over the steady window already."""
        sw = self.thresholds_c.get("sw_thermal")
        return sw is not None and self.steady.temp_c >= sw - HELD_C

    @property
    def hold_c(self) -> float | None:
        """Where the SW thermal slowdown holds the die: its threshold, or where the die
        already is for a device held there (or past it) at this run's inlet."""
        sw = self.thresholds_c.get("sw_thermal")
        if sw is None:
            return None
        return max(sw, self.steady.temp_c) if self.already_held else sw

    def _shed(self, clock: float | None, power: float, target: float) -> float | None:
        """The clock that draws ``target`` where ``clock`` drew ``power``: proportional to
        the power above idle (conservative, rule step 3)."""
        if clock is None:
            return None
        idle = self.idle_power_w if self.idle_power_w is not None else 0.0
        if power - idle <= 0:
            return clock
        return clock * max(target - idle, 0.0) / (power - idle)

    def _rates(self, clock: float | None) -> dict[str, float | None]:
        s = self.steady
        out: dict[str, float | None] = {}
        for part, rate in s.throughput.items():
            if rate is None or clock is None or not s.clock_mhz:
                out[part] = None if clock is None else rate
                continue
            e = self.elasticity.get(part)
            out[part] = rate * (1.0 + (1.0 if e is None else e) * (clock / s.clock_mhz - 1.0))
        return out

    def throttle_inlet_c(self) -> float | None:
        """The inlet at which the SW thermal slowdown begins (None: no threshold known, or
        not within ``SEARCH_C`` of the run's inlet)."""
        sw = self.thresholds_c.get("sw_thermal")
        if sw is None:
            return None
        if self.already_held:
            return self.steady.inlet_c
        lo, hi = self.steady.inlet_c + SEARCH_C[0], self.steady.inlet_c + SEARCH_C[1]
        if self._free_temp(lo) >= sw:
            return lo
        if self._free_temp(hi) < sw:
            return None
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if self._free_temp(mid) < sw else (lo, mid)
        return 0.5 * (lo + hi)

    def _free_temp(self, inlet_c: float) -> float:
        """The die temperature at ``inlet_c`` with no thermal slowdown."""
        return replace(self, thresholds_c={}).at(inlet_c).temp_c


@dataclass(frozen=True, slots=True)
class DeviceHeadroom:
    """One device's headroom: the model, and the projection to the design inlet."""

    model: DeviceModel
    projected: Point
    margins_c: dict[str, float]  # THRESHOLDS key -> threshold − projected temperature
    throttle_inlet_c: float | None
    notes: tuple[str, ...] = ()

    @property
    def device(self) -> int:
        return self.model.device

    def throttle_phrase(self) -> str:
        """ "reaches SW thermal slowdown at inlet ≥ 29 °C", or "is held by ..." already."""
        if self.model.already_held:
            return (
                f"is held by its SW thermal slowdown already at this run's inlet "
                f"({self.model.steady.inlet_c:.0f} °C)"
            )
        return f"reaches SW thermal slowdown at inlet ≥ {self.throttle_inlet_c:.0f} °C"

    @property
    def margin_c(self) -> float | None:
        """Margin at the design inlet to the first threshold the device reports."""
        for key, _, _ in THRESHOLDS:
            if key in self.margins_c:
                return self.margins_c[key]
        return None


@dataclass(frozen=True, slots=True)
class Headroom:
    """The run's headroom: per device, or why none was checked."""

    design_inlet_c: float
    devices: tuple[DeviceHeadroom, ...] = ()
    reason: str | None = None  # "inlet not available: ..." where nothing was checked
    not_checked: dict[int, str] = field(default_factory=dict)  # device -> why

    @property
    def checked(self) -> bool:
        return bool(self.devices)

    def first_to_throttle(self) -> DeviceHeadroom | None:
        """The device whose SW thermal slowdown begins at the lowest inlet, where one
        would begin within the range searched."""
        found = [d for d in self.devices if d.throttle_inlet_c is not None]
        return min(found, key=lambda d: d.throttle_inlet_c or 0.0) if found else None

    def sentence(self, label: Mapping[int, str]) -> str:
        """ "GPU 3 reaches SW thermal slowdown at inlet ≥ 29 °C; the others keep ≥ 6 °C of
        margin at 35 °C." (or why nothing was checked)."""
        if not self.devices:
            return f"not checked: {self.reason}"
        design = self.design_inlet_c
        hot = [
            d
            for d in self.devices
            if d.throttle_inlet_c is not None and d.throttle_inlet_c <= design
        ]
        hot.sort(key=lambda d: d.throttle_inlet_c or 0.0)
        rest = [d for d in self.devices if d not in hot and d.margin_c is not None]
        parts = [f"{label.get(d.device, d.device)} {d.throttle_phrase()}" for d in hot]
        if rest:
            least = min(d.margin_c or 0.0 for d in rest)
            who = "the others keep" if hot else "every device keeps"
            parts.append(f"{who} ≥ {least:.0f} °C of margin at {design:.0f} °C")
        unknown = [d for d in self.devices if d not in hot and d.margin_c is None]
        if unknown:
            temps = [d.projected.temp_c for d in unknown]
            span = f"{min(temps):.0f}–{max(temps):.0f}" if len(temps) > 1 else f"{temps[0]:.0f}"
            parts.append(
                f"{len(unknown)} device(s) report no slowdown threshold: projected die "
                f"{span} °C at {design:.0f} °C, margin not known"
            )
        return "; ".join(parts) + "."


def _interp_inlet(inlet: Mapping[str, np.ndarray], t: np.ndarray) -> np.ndarray:
    """The inlet at times ``t`` (linear between BMC readings, NaN outside them)."""
    ok = np.isfinite(inlet["value"])
    ti, vi = inlet["t_s"][ok], inlet["value"][ok]
    if ti.size < 2:
        return np.full(t.shape, np.nan)
    return np.interp(t, ti, vi, left=np.nan, right=np.nan)


def _theta(temp: np.ndarray, power: np.ndarray, air: np.ndarray) -> tuple[float, tuple | None]:
    ok = np.isfinite(temp) & np.isfinite(power) & np.isfinite(air) & (power > 0)
    theta = (temp[ok] - air[ok]) / power[ok]
    batches = [b.mean() for b in np.array_split(theta, BATCHES) if b.size]
    mean = float(theta.mean())
    if len(batches) < 3:
        return mean, None
    half = T95[len(batches)] * float(np.std(batches, ddof=1)) / math.sqrt(len(batches))
    return mean, (mean - half, mean + half)


def _bins(t: np.ndarray, values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """The mean of ``values`` per bin of ``t`` (NaN for a bin without a finite value)."""
    ok = np.isfinite(values) & np.isfinite(t)
    index = np.digitize(t[ok], edges) - 1
    n = len(edges) - 1
    keep = (index >= 0) & (index < n)
    sums = np.bincount(index[keep], values[ok][keep], minlength=n)
    counts = np.bincount(index[keep], minlength=n)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / counts, np.nan)


def _ols(x: np.ndarray, y: np.ndarray) -> float | None:
    ok = np.isfinite(x) & np.isfinite(y)
    if ok.sum() < MIN_BINS:
        return None
    x, y = x[ok], y[ok]
    return float(np.polyfit(x, y, 1)[0])


def _slope(
    t: np.ndarray, x: np.ndarray, y: np.ndarray, mask: np.ndarray, at: float
) -> tuple[float, float] | None:
    """d y / d x at ``x = at`` and half the second derivative, over the samples in
    ``mask``, from ``BIN_S`` bins of time (a whole-°C sensor and a clock read between two
    bins both average out in a bin). Leakage grows faster than linearly with temperature:
    a parabola keeps that curvature where the fit's data show it (rule, step 2)."""
    t, x, y = t[mask], x[mask], y[mask]
    ok = np.isfinite(x) & np.isfinite(y)
    if ok.sum() < MIN_POINTS or float(np.ptp(x[ok])) < MIN_SPAN_C:
        return None
    edges = np.arange(t[ok].min(), t[ok].max() + BIN_S, BIN_S)
    if len(edges) < 2:
        return None
    bx = _bins(t, np.where(ok, x, np.nan), edges)
    by = _bins(t, np.where(ok, y, np.nan), edges)
    fine = np.isfinite(bx) & np.isfinite(by)
    if fine.sum() < MIN_BINS or float(np.ptp(bx[fine])) < MIN_SPAN_C / 2:
        return None
    if fine.sum() >= 2 * MIN_BINS:
        c2, c1, _ = np.polyfit(bx[fine] - at, by[fine], 2)
        return float(c1), float(c2)
    return float(np.polyfit(bx[fine], by[fine], 1)[0]), 0.0


def _elasticity(
    work: Mapping[str, Mapping[str, np.ndarray]], t: np.ndarray, clock: np.ndarray, span: tuple
) -> dict[str, float | None]:
    """Per part, d ln rate / d ln clock over ``span``, from ``BIN_S`` bins of time."""
    out: dict[str, float | None] = {}
    edges = np.arange(span[0], span[1] + BIN_S, BIN_S)
    f = _bins(t, clock, edges) if len(edges) >= 2 else np.empty(0)
    for part, w in work.items():
        fine = f[np.isfinite(f)]
        if fine.size < MIN_BINS or np.ptp(fine) / np.median(fine) < MIN_CLOCK_SPAN:
            out[part] = None
            continue
        done = _bins(w["t_end_s"], w["work"], edges) * _count(w["t_end_s"], edges)
        took = _bins(w["t_end_s"], w["t_end_s"] - w["t_start_s"], edges)
        took = took * _count(w["t_end_s"], edges)
        with np.errstate(invalid="ignore", divide="ignore"):
            rate = np.where(took > 0, done / took, np.nan)
        good = np.isfinite(rate) & (rate > 0) & np.isfinite(f)
        out[part] = _ols(np.log(f[good]), np.log(rate[good])) if good.any() else None
    return out


def _count(t: np.ndarray, edges: np.ndarray) -> np.ndarray:
    index = np.digitize(t, edges) - 1
    keep = (index >= 0) & (index < len(edges) - 1)
    return np.bincount(index[keep], minlength=len(edges) - 1).astype(float)


def _mean(values: np.ndarray) -> float | None:
    finite = values[np.isfinite(values)]
    return float(finite.mean()) if finite.size else None


def device_model(
    info: DeviceInfo,
    tele: Columns,
    work: Mapping[str, Mapping[str, np.ndarray]],
    inlet: Mapping[str, np.ndarray],
    load_start_s: float,
    steady: tuple[float, float],
    throughput: Mapping[str, float | None],
    power_limit_w: float | None,
    idle_power_w: float | None,
) -> DeviceModel | str:
    """The device's model (rule, steps 1, 2 and 4), or why there is none."""
    t = tele.t_s
    in_steady = (t >= steady[0]) & (t <= steady[1])
    air = _interp_inlet(inlet, t)
    temp, power, clock = tele.temp_c, tele.power_w, tele.sm_clock_mhz
    if not np.isfinite(air[in_steady]).any():
        return "inlet not available over the steady window"
    both = np.isfinite(temp) & np.isfinite(power) & np.isfinite(air) & (power > 0)
    if not (both & in_steady).any():
        return "die temperature or power not available over the steady window"
    theta, interval = _theta(temp[in_steady], power[in_steady], air[in_steady])
    t_ss, p_ss = _mean(temp[in_steady]), _mean(power[in_steady])
    f_ss = _mean(clock[in_steady])
    inlet_ss = _mean(air[in_steady])
    assert t_ss is not None and p_ss is not None and inlet_ss is not None
    at_limit = power_limit_w is not None and p_ss >= power_limit_w * (1 - AT_LIMIT_FRAC)
    warm = (t >= load_start_s) & (t < steady[0]) & (temp >= t_ss - WARMUP_SPAN_C)
    leakage = clock_per_c = None
    leakage_fit = clock_fit = None
    if at_limit and power_limit_w is not None:
        held = warm & (power >= power_limit_w * (1 - AT_LIMIT_FRAC))
        clock_fit = _slope(t, temp, clock, held, t_ss)
        clock_per_c = clock_fit[0] if clock_fit else None
    elif f_ss is not None:
        fixed = warm & (np.abs(clock - f_ss) <= FIXED_CLOCK_FRAC * f_ss)
        leakage_fit = _slope(t, temp, power, fixed, t_ss)
        leakage = leakage_fit[0] if leakage_fit else None
    fan = _mean(tele.fan_pct[in_steady])
    thresholds = {
        key: float(getattr(info, attr))
        for key, attr, _ in THRESHOLDS
        if getattr(info, attr) is not None
    }
    sw = thresholds.get("sw_thermal")
    held = sw is not None and t_ss >= sw - HELD_C
    limit = "SW thermal" if held else "power limit" if at_limit else ""
    point = Point(inlet_ss, t_ss, p_ss, f_ss, dict(throughput), limit)
    return DeviceModel(
        device=info.index,
        steady=point,
        theta_c_per_w=theta,
        theta_interval=interval,
        leakage_w_per_c=leakage,
        clock_per_c_mhz=clock_per_c,
        clock_curve=clock_fit[1] if clock_fit else 0.0,
        leakage_curve=leakage_fit[1] if leakage_fit else 0.0,
        power_limit_w=power_limit_w,
        at_power_limit=at_limit,
        idle_power_w=idle_power_w,
        elasticity=_elasticity(work, t, clock, (load_start_s, steady[1])),
        thresholds_c=thresholds,
        fan_pct=fan,
    )


def headroom_of(model: DeviceModel, design_inlet_c: float) -> DeviceHeadroom:
    """The projection to the design inlet, its margins and notes (rule, steps 3, 5, 6)."""
    projected = model.at(design_inlet_c)
    margins = {key: c - projected.temp_c for key, c in model.thresholds_c.items()}
    notes = []
    if model.at_power_limit and model.clock_per_c_mhz is None:
        notes.append("the clock's answer to temperature at the power limit was not measured")
    if not model.at_power_limit and model.leakage_w_per_c is None:
        why = (
            "no SM clock was read"
            if model.steady.clock_mhz is None
            else "the warm-up held no fixed clock"
        )
        notes.append(f"leakage not measured ({why}): left out")
    if projected.limit and projected.limit != model.steady.limit:
        notes.append(
            f"the clock at the {projected.limit} is taken proportional to the power above "
            "idle: conservative"
        )
    if model.fan_pct is not None and model.fan_pct < FAN_MAX_PCT:
        notes.append(
            f"fans at {model.fan_pct:.0f} % at steady, not at their maximum: the projection "
            "is conservative"
        )
    return DeviceHeadroom(model, projected, margins, model.throttle_inlet_c(), tuple(notes))


def headroom_checks(headroom: Headroom, min_headroom_c: float) -> list[Finding]:
    """A warning per device that reaches a slowdown threshold below the design inlet; a
    failure per device whose SW thermal margin there is under ``min_headroom_c`` (0: off),
    and where that floor is asked for and could not be projected, not checked."""
    out = []
    design = headroom.design_inlet_c
    if min_headroom_c > 0:  # a floor the profile asks for is never passed unseen
        if not headroom.checked:
            message = f"margin at the {design:.0f} °C design inlet not projected: {headroom.reason}"
            out.append(Finding("thermal_headroom", Status.NOT_CHECKED, message, None))
        for device, why in sorted(headroom.not_checked.items()):
            message = f"margin at the {design:.0f} °C design inlet not projected: {why}"
            out.append(Finding("thermal_headroom", Status.NOT_CHECKED, message, device))
    for d in headroom.devices:
        sw = d.margins_c.get("sw_thermal")
        if min_headroom_c > 0 and sw is not None and sw < min_headroom_c:
            message = (
                f"projected {sw:.1f} °C from SW thermal slowdown at {design:.0f} °C inlet, "
                f"under the profile's floor of {min_headroom_c:.0f} °C"
            )
            out.append(Finding("thermal_headroom", Status.FAIL, message, d.device))
        elif d.throttle_inlet_c is not None and d.throttle_inlet_c < design:
            message = f"{d.throttle_phrase()}, below the design inlet of {design:.0f} °C"
            out.append(Finding("thermal_headroom", Status.WARN, message, d.device))
    return out


def inlet_series(server: Mapping[str, Mapping[str, np.ndarray]]) -> Mapping[str, np.ndarray]:
    """The inlet as the BMC read it, or an empty series."""
    return server.get(INLET_SERIES) or {"t_s": np.empty(0), "value": np.empty(0)}


def inlet_missing(inlet: Mapping[str, np.ndarray], bmc: BmcProbe | None) -> str | None:
    """Why no device's headroom can be checked (no inlet read), or None where it can."""
    if np.isfinite(inlet["value"]).any():
        return None
    if bmc is None:
        why = "no BMC was read (a run stored before soak read one)"
    else:
        why = bmc.reason or "the BMC gave no inlet reading"
    return f"inlet not available: {why}"


def device_headroom(
    info: DeviceInfo,
    facts: DeviceFacts,
    tele: Columns,
    work: Mapping[str, Mapping[str, np.ndarray]],
    inlet: Mapping[str, np.ndarray],
) -> DeviceModel | str:
    """One device's model from its own series and the inlet (rule, steps 1, 2 and 4), or why
    there is none: what the analysis keeps of the device's series for its headroom."""
    if facts.steady is None or facts.load_start_s is None:
        return "no steady window"
    idle = tele.power_w[tele.t_s < facts.load_start_s]
    return device_model(
        info,
        tele,
        work,
        inlet,
        facts.load_start_s,
        (facts.steady.window.start_s, facts.steady.window.end_s),
        facts.steady.throughput,
        facts.power_limit_w,
        _mean(idle) if idle.size else None,
    )


def run_headroom(
    models: Mapping[int, DeviceModel | str], missing: str | None, design_inlet_c: float
) -> Headroom:
    """Every device's headroom from its model (``device_headroom``, by device in the run's
    order), or why none was checked (``missing``: no inlet read)."""
    if missing is not None:
        return Headroom(design_inlet_c, reason=missing)
    out, skipped = [], {}
    for index, model in models.items():
        if isinstance(model, str):
            skipped[index] = model
            continue
        out.append(headroom_of(model, design_inlet_c))
    reason = None if out else "no device had a steady window with the inlet read"
    return Headroom(design_inlet_c, tuple(out), reason, skipped)
