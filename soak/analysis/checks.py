"""Acceptance checks: small pure functions, each returning pass/warn/fail with its numbers.

A check that cannot be made because a value could not be read never passes silently: it
warns and says what was not available. Errors that the hardware reported fail.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from soak import fields
from soak.analysis.equilibrium import Equilibrium
from soak.analysis.windows import MIN_SEPARATE_STEADY_S, WindowStats
from soak.config import Profile
from soak.model import RATE_UNITS, WorkerOutcome
from soak.units import pct, si


class Status(enum.StrEnum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"


@dataclass(frozen=True, slots=True)
class CheckResult:
    check: str
    status: Status
    message: str
    device: int | None = None


@dataclass(frozen=True, slots=True)
class Counter:
    """A cumulative hardware counter over the run: first and last readings, or None."""

    first: float | None
    last: float | None
    peak: float | None = None

    @property
    def readable(self) -> bool:
        return self.first is not None and self.last is not None

    @property
    def delta(self) -> float | None:
        return self.last - self.first if self.readable else None  # type: ignore[operator]


@dataclass(frozen=True, slots=True)
class DeviceFacts:
    """What the checks look at for one device."""

    index: int
    name: str
    units: dict[str, str]  # part -> unit of work
    cold: WindowStats | None
    steady: WindowStats | None
    whole: WindowStats | None  # the whole load, for events outside the steady window
    final: WindowStats | None  # the last minutes of the load, where they are not the steady window
    equilibrium: Equilibrium | None
    slowdown_temp_c: float | None
    counters: dict[str, Counter] = field(default_factory=dict)
    xids: list[int] = field(default_factory=list)
    outcome: WorkerOutcome | None = None
    outcome_detail: str = ""
    verification_checked: int = 0
    verification_failed: int = 0
    verification_max_error: float | None = None
    lost: bool = False
    workload: str | None = None
    power_limit_w: float | None = None  # enforced, over the steady window (or as probed)
    default_power_limit_w: float | None = None
    # The run stopped early (signal, coordinator lost): a window it never reached is a
    # reason for INCOMPLETE, not evidence against the device.
    run_incomplete: bool = False


def _rate(value: float | None, part: str, facts: DeviceFacts) -> str:
    return si(value, RATE_UNITS.get(facts.units.get(part, ""), facts.units.get(part, "") + "/s"))


def _late_windows(f: DeviceFacts) -> list[tuple[str, WindowStats | None]]:
    """The steady window, and the end of the load too where it differs: a device that
    degrades after equilibrium must not pass on the strength of its earlier steady state."""
    windows = [("steady", f.steady)]
    if f.final is not None and (f.steady is None or f.final.window != f.steady.window):
        windows.append(("final", f.final))
    return windows


def check_throughput_retention(f: DeviceFacts, profile: Profile) -> list[CheckResult]:
    out = []
    for label, stats in _late_windows(f):
        out += _retention(f, stats, label, profile)
    return out


def _retention(
    f: DeviceFacts, late: WindowStats | None, label: str, profile: Profile
) -> list[CheckResult]:
    floor = profile.checks.min_throughput_retention
    out = []
    parts = sorted(set(f.cold.throughput if f.cold else {}) | set(late.throughput if late else {}))
    missing_status = Status.WARN if f.run_incomplete else Status.FAIL
    early = " before the run stopped" if f.run_incomplete else ""
    if not parts:
        return [
            CheckResult(
                "throughput_retention", missing_status, f"no work was measured{early}", f.index
            )
        ]
    for part in parts:
        cold = f.cold.throughput.get(part) if f.cold else None
        steady = late.throughput.get(part) if late else None
        if cold is None or steady is None:
            missing = "cold" if cold is None else label
            out.append(
                CheckResult(
                    "throughput_retention",
                    missing_status,
                    f"{part}: no {missing} throughput measured{early}",
                    f.index,
                )
            )
            continue
        if cold <= 0:  # no ratio to take; a device that did nothing cold is not healthy
            message = f"{part}: cold throughput {_rate(cold, part, f)}: no work done cold"
            out.append(CheckResult("throughput_retention", Status.FAIL, message, f.index))
            continue
        ratio = steady / cold
        status = Status.PASS if ratio >= floor else Status.FAIL
        message = (
            f"{label} {part} {_rate(steady, part, f)} is {pct(ratio)} of cold "
            f"{_rate(cold, part, f)}; floor {pct(floor, 0)}"
        )
        out.append(CheckResult("throughput_retention", status, message, f.index))
    return out


def _reason_check(name: str, key: str, label: str, limit: float) -> Callable:
    def check(f: DeviceFacts, profile: Profile) -> list[CheckResult]:
        out = []
        for window_label, stats in _late_windows(f):
            share = stats.reason_share.get(key) if stats else None
            if share is None:
                message = f"clock-event reasons not available: {label} time unknown"
                out.append(CheckResult(name, Status.WARN, message, f.index))
                continue
            lim = getattr(profile.checks, limit)
            status = Status.PASS if share <= lim else Status.FAIL
            seconds = share * stats.window.length_s
            message = (
                f"{label} {pct(share, 2)} of {window_label} window ({seconds:.0f} s); "
                f"limit {pct(lim, 2)}"
            )
            out.append(CheckResult(name, status, message, f.index))
        return out

    check.__name__ = f"check_{name}"
    return check


check_hw_slowdown = _reason_check(
    "hw_slowdown", "hw_any", "HW slowdown/thermal/power brake", "max_hw_reason_fraction"
)
check_sw_thermal = _reason_check(
    "sw_thermal", "sw_thermal", "SW thermal slowdown", "max_sw_thermal_fraction"
)


def check_hw_reasons_anytime(f: DeviceFacts, profile: Profile) -> list[CheckResult]:
    """HW slowdown, HW thermal or power brake at any time of the load: a warning even when
    the steady window was spared, since a burn-in exists to see such events."""
    if f.whole is None or f.whole.reason_share.get("hw_any") is None:
        return []
    parts = [
        f"{name.replace('_', ' ')} {f.whole.reason_share[name] * f.whole.window.length_s:.0f} s"
        for name in ("hw_slowdown", "hw_thermal", "hw_power_brake")
        if f.whole.reason_share.get(name)
    ]
    if not parts:
        return [
            CheckResult(
                "hw_events", Status.PASS, "no HW clock-event reasons during the load", f.index
            )
        ]
    message = "during the load: " + ", ".join(parts)
    return [CheckResult("hw_events", Status.WARN, message, f.index)]


def check_temp_margin(f: DeviceFacts, profile: Profile) -> list[CheckResult]:
    slowdown = f.slowdown_temp_c
    if slowdown is None:
        message = "slowdown threshold not available"
        return [CheckResult("temp_margin", Status.WARN, message, f.index)]
    need = profile.checks.min_temp_margin_c
    out = []
    for label, stats in _late_windows(f):
        temp = stats.p90.get("temp_c") if stats else None
        if temp is None:
            message = f"{label} temperature not available"
            out.append(CheckResult("temp_margin", Status.WARN, message, f.index))
            continue
        margin = slowdown - temp
        status = Status.PASS if margin >= need else Status.FAIL
        message = (
            f"{label} temperature (p90) {temp:.0f} °C is {margin:.0f} °C below slowdown "
            f"{slowdown:.0f} °C; margin needed {need:.0f} °C"
        )
        out.append(CheckResult("temp_margin", status, message, f.index))
    return out


def check_hardware_errors(f: DeviceFacts, profile: Profile) -> list[CheckResult]:
    out = []
    remapping = (f.counters.get("remap_pending") or Counter(None, None)).peak is not None
    for key in fields.FAILING_COUNTERS:
        label = fields.label(key)
        counter = f.counters.get(key)
        if key == "retired_pages" and remapping and (counter is None or not counter.readable):
            continue  # devices with row remapping (Ampere and later) retire no pages
        if counter is None or not counter.readable:
            out.append(CheckResult(key, Status.WARN, f"{label}: not supported", f.index))
            continue
        new = counter.delta or 0
        status = Status.PASS if new <= 0 else Status.FAIL
        message = f"{int(new)} new {label} (from {int(counter.first)} to {int(counter.last)})"
        out.append(CheckResult(key, status, message, f.index))
    for key in (k for k in fields.FOLLOWED if fields.BY_NAME[k].kind is fields.Kind.FLAG):
        label = fields.label(key)
        counter = f.counters.get(key)
        if counter is None or counter.peak is None:
            out.append(CheckResult(key, Status.WARN, f"{label}: not supported", f.index))
            continue
        status = Status.FAIL if counter.peak > 0 else Status.PASS
        out.append(CheckResult(key, status, f"{label}: {'yes' if counter.peak else 'no'}", f.index))
    if f.xids:
        codes = ", ".join(str(c) for c in sorted(set(f.xids)))
        out.append(
            CheckResult("xid", Status.FAIL, f"{len(f.xids)} XID events (codes {codes})", f.index)
        )
    else:
        out.append(CheckResult("xid", Status.PASS, "no XID events", f.index))
    return out


def check_verification(f: DeviceFacts, profile: Profile) -> list[CheckResult]:
    if f.verification_failed:
        err = f"; largest error {f.verification_max_error:.3g}" if f.verification_max_error else ""
        message = f"{f.verification_failed} of {f.verification_checked} result checks failed{err}"
        return [CheckResult("verification", Status.FAIL, message, f.index)]
    if f.verification_checked == 0:
        return [CheckResult("verification", Status.WARN, "no results were verified", f.index)]
    message = f"{f.verification_checked} result checks passed"
    return [CheckResult("verification", Status.PASS, message, f.index)]


def check_outcome(f: DeviceFacts, profile: Profile) -> list[CheckResult]:
    if f.lost:
        return [CheckResult("worker", Status.FAIL, "device lost during the run", f.index)]
    if f.outcome is None:
        return [CheckResult("worker", Status.WARN, "load did not report how it ended", f.index)]
    if f.outcome is WorkerOutcome.OK:
        return [CheckResult("worker", Status.PASS, "load ran to the end", f.index)]
    detail = f": {f.outcome_detail}" if f.outcome_detail else ""
    if f.outcome is WorkerOutcome.PEER_LOST:  # ddp: another rank ended; its device fails
        message = f"load ended early: another rank was lost{detail}"
        return [CheckResult("worker", Status.WARN, message, f.index)]
    return [CheckResult("worker", Status.FAIL, f"load ended: {f.outcome.value}{detail}", f.index)]


def check_jitter(f: DeviceFacts, profile: Profile) -> list[CheckResult]:
    out = []
    limit = profile.checks.max_jitter_cv
    for part, cv in sorted((f.steady.throughput_cv if f.steady else {}).items()):
        if cv is None:
            continue
        status = Status.PASS if cv <= limit else Status.WARN
        message = f"steady {part} throughput varies by {pct(cv)} (CV); limit {pct(limit)}"
        out.append(CheckResult("jitter", status, message, f.index))
    return out


def check_equilibrium(f: DeviceFacts, profile: Profile) -> list[CheckResult]:
    eq = f.equilibrium
    if eq is not None and eq.reached:
        message = f"thermal equilibrium at {eq.time_s:.0f} s (basis: {eq.basis})"
        return [CheckResult("equilibrium", Status.PASS, message, f.index)]
    status = Status.FAIL if profile.checks.require_equilibrium else Status.WARN
    message = "equilibrium not reached; steady figures are from the last minutes of the run"
    return [CheckResult("equilibrium", status, message, f.index)]


def check_run_length(f: DeviceFacts, profile: Profile) -> list[CheckResult]:
    """A load too short for separate cold and steady windows cannot show a cold/hot loss."""
    if f.cold is None or f.steady is None:
        return []
    if f.steady.window.start_s >= f.cold.window.end_s:
        return [
            CheckResult("run_length", Status.PASS, "cold and steady windows are apart", f.index)
        ]
    needed = profile.windows.cold_start_s + profile.windows.cold_length_s + MIN_SEPARATE_STEADY_S
    had = f.whole.window.length_s if f.whole is not None else None
    had_text = f"{had:.0f} s of load" if had is not None else "the load"
    message = (
        f"{had_text} is too short for separate cold and steady windows (needs over "
        f"{needed:.0f} s; {profile.windows.steady_length_s / 60:.0f} min of steady state after "
        f"equilibrium for a full verdict)"
    )
    return [CheckResult("run_length", Status.WARN, message, f.index)]


def check_floors(f: DeviceFacts, profile: Profile) -> list[CheckResult]:
    """Per-SKU floors: a minimum steady throughput per workload and part, with its source.
    Floors are per workload because a part shares the device in ``mix`` and runs alone
    otherwise; a workload the profile gives no floors for is not judged by them."""
    if profile.legacy_floors:
        names = ", ".join(sorted(profile.legacy_floors))
        message = f"floors for {names} are in an older profile format; not applied"
        return [CheckResult("floor", Status.WARN, message, f.index)]
    out = []
    floors = profile.floors.get(f.workload or "", {})
    sources = profile.floor_sources.get(f.workload or "", {})
    for part, floor in sorted(floors.items()):
        source = sources.get(part, "").split(";")[0].strip()
        src = f" ({source})" if source else ""
        steady = f.steady.throughput.get(part) if f.steady else None
        if steady is None:
            message = f"steady {part} throughput not measured; floor {_rate(floor, part, f)}{src}"
            out.append(CheckResult("floor", Status.FAIL, message, f.index))
            continue
        status = Status.PASS if steady >= floor else Status.FAIL
        message = (
            f"steady {part} {_rate(steady, part, f)} is {pct(steady / floor)} of the "
            f"{profile.name} floor {_rate(floor, part, f)}{src}"
        )
        out.append(CheckResult("floor", status, message, f.index))
    return out


def check_power_limit(f: DeviceFacts, profile: Profile) -> list[CheckResult]:
    """An enforced power limit below the device's default caps its throughput by
    configuration; a warning, since an operator may have chosen it (the within-server rule
    fails a device that it makes slower than its peers)."""
    limit, default = f.power_limit_w, f.default_power_limit_w
    if limit is None or default is None:
        return []
    if limit >= profile.checks.min_power_limit_fraction * default:
        message = f"power limit {limit:.0f} W (default {default:.0f} W)"
        return [CheckResult("power_limit", Status.PASS, message, f.index)]
    message = (
        f"power limit {limit:.0f} W is {pct(limit / default)} of the default {default:.0f} W; "
        f"limit {pct(profile.checks.min_power_limit_fraction, 0)}"
    )
    return [CheckResult("power_limit", Status.WARN, message, f.index)]


def check_profile_applies(f: DeviceFacts, profile: Profile) -> list[CheckResult]:
    """A SKU profile names the devices its floors are for; on another device they mislead."""
    if not profile.device_names:
        return []
    name = f.name.removesuffix(" (simulated)").strip().casefold()
    if any(name == n.casefold() for n in profile.device_names):
        return []
    message = (
        f"profile {profile.name} is for {' / '.join(profile.device_names)}, "
        f"this device is {f.name}: its floors may not apply"
    )
    return [CheckResult("profile", Status.WARN, message, f.index)]


DEVICE_CHECKS: tuple[Callable[[DeviceFacts, Profile], list[CheckResult]], ...] = (
    check_outcome,
    check_verification,
    check_hardware_errors,
    check_throughput_retention,
    check_hw_slowdown,
    check_sw_thermal,
    check_hw_reasons_anytime,
    check_temp_margin,
    check_equilibrium,
    check_run_length,
    check_jitter,
    check_power_limit,
    check_profile_applies,
    check_floors,
)


def check_outliers(devices: Sequence[DeviceFacts], profile: Profile) -> list[CheckResult]:
    """Within-server rule: a device whose steady throughput is below the server's
    median − max(k·MAD, rel·median) fails. Needs three devices to mean anything."""
    out = []
    parts = sorted({p for f in devices if f.steady for p in f.steady.throughput})
    for part in parts:
        rates = {
            f.index: f.steady.throughput[part]
            for f in devices
            if f.steady and f.steady.throughput.get(part) is not None
        }
        if len(rates) < 3:
            continue
        values = np.array(list(rates.values()))
        median = float(np.median(values))
        mad = float(np.median(np.abs(values - median)))
        margin = max(profile.checks.outlier_mad_k * mad, profile.checks.outlier_min_rel * median)
        limit = median - margin
        f_by_index = {f.index: f for f in devices}
        for index, rate in rates.items():
            facts = f_by_index[index]
            if median <= 0:  # most devices did no work: no reference to compare with
                message = (
                    f"steady {part} {_rate(rate, part, facts)}; the server median is "
                    f"{_rate(median, part, facts)}: no reference for the within-server rule"
                )
                out.append(CheckResult("outlier", Status.WARN, message, index))
                continue
            status = Status.PASS if rate >= limit else Status.FAIL
            message = (
                f"steady {part} {_rate(rate, part, facts)} is {pct(rate / median)} of the "
                f"server median {_rate(median, part, facts)}; limit {pct(limit / median)}"
            )
            out.append(CheckResult("outlier", status, message, index))
    return out


def run_checks(devices: Sequence[DeviceFacts], profile: Profile) -> list[CheckResult]:
    results = [r for f in devices for check in DEVICE_CHECKS for r in check(f, profile)]
    return results + check_outliers(devices, profile)
