"""Acceptance checks: small pure functions, each returning pass/warn/fail with its numbers.

A check that cannot be made because a signal could not be read never passes silently: its
status is ``not_checked`` and its message names the capability that is missing (a warning is
something to act on; a missing sensor is listed once, apart). Errors that the hardware
reported fail, and so does any hardware protection event (HW slowdown, HW thermal slowdown,
HW power brake) after the warm-up, wherever it falls.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from soak import fields
from soak.analysis.contention import (
    RERUN,
    WHOLE,
    Contention,
    ForeignProcess,
    inflated,
    review,
)
from soak.analysis.equilibrium import Equilibrium, shortest_confirmation_s
from soak.analysis.intervals import ratio_bounds
from soak.analysis.warmstart import WarmStart
from soak.analysis.windows import MIN_SEPARATE_STEADY_S, WindowName, WindowStats
from soak.model import WorkerOutcome
from soak.profile import Profile
from soak.units import minutes, pct, rate_unit, si


class Status(enum.StrEnum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    NOT_CHECKED = "not_checked"  # the signal the check needs is not available
    # Something other than soak used the device while the check's figure was measured and
    # the figure fell with it: the device could not be judged alone (analysis/contention.py)
    INCOMPLETE = "incomplete"


# The hardware's own counts and flags that fail a device: each is a check of its field's name.
COUNTER_CHECKS = fields.FAILING_COUNTERS + tuple(
    k for k in fields.FOLLOWED if fields.BY_NAME[k].kind is fields.Kind.FLAG
)


class CheckName(enum.StrEnum):
    """Every acceptance check by the name summary.json and junit.xml carry: soak's own, and
    one per counter or flag of ``COUNTER_CHECKS`` (the field registry's)."""

    _ignore_ = "CheckName key"
    WORKER = "worker"
    VERIFICATION = "verification"
    XID = "xid"
    THROUGHPUT_RETENTION = "throughput_retention"
    CLOCK_RETENTION = "clock_retention"
    HW_EVENTS = "hw_events"
    SW_THERMAL = "sw_thermal"
    TEMP_MARGIN = "temp_margin"
    EQUILIBRIUM = "equilibrium"
    RUN_LENGTH = "run_length"
    JITTER = "jitter"
    POWER_LIMIT = "power_limit"
    PROFILE = "profile"
    FLOOR = "floor"
    OUTLIER = "outlier"
    HOT_SPOT = "hot_spot"
    CROSS_DEVICE = "cross_device"  # the server: devices that disagree on the same product
    TELEMETRY = "telemetry"  # readings frozen under load
    THERMAL_HEADROOM = "thermal_headroom"  # soak.analysis.headroom
    CONTENTION = "contention"  # other work on the device, named wherever it was there
    SLOWDOWN_TEMP = "slowdown_temp"  # the SKU's SW thermal slowdown temperature, absolute
    COLD_WINDOW = "cold_window"  # whether the cold window was cold (soak.analysis.warmstart)
    IMPLAUSIBLE = "implausible"  # readings left out as impossible (soak.validity)
    # ddp (soak.analysis.sync_steps)
    STRAGGLER = "straggler"
    SYNC_RETENTION = "sync_retention"
    REPLICAS = "replicas"
    BUSBW = "busbw"
    CheckName = vars()
    for key in COUNTER_CHECKS:
        CheckName[key.upper()] = key


@dataclass(frozen=True, slots=True)
class Finding:
    """One check's result for a device (``device`` None: the server): its status, and its
    numbers in ``message``; the window and workload part it judged where it judged one."""

    check: CheckName
    status: Status
    message: str
    device: int | None = None
    window: WindowName | None = None  # steady or final: the late window it judged
    part: str | None = None  # the workload part whose throughput it judged

    def __post_init__(self) -> None:
        object.__setattr__(self, "check", CheckName(self.check))


@dataclass(frozen=True, slots=True)
class CounterSpan:
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
class HwEpisode:
    """A stretch of readings with a hardware protection reason set (HW slowdown, HW thermal
    slowdown, HW power brake): from the first reading that shows it to the last, plus one
    reading interval; ``bits`` is every HW reason bit seen in it."""

    start_s: float
    end_s: float
    bits: int

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


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
    counters: dict[str, CounterSpan] = field(default_factory=dict)
    xids: list[int] = field(default_factory=list)
    outcome: WorkerOutcome | None = None
    outcome_detail: str = ""
    outcome_phase: str | None = None  # where an abnormal end came: "setup", "run", "stop"
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
    # HW protection episodes over the whole run; None where clock reasons were unreadable.
    hw_episodes: tuple[HwEpisode, ...] | None = ()
    load_start_s: float | None = None
    warmup_end_s: float | None = None  # the cold window's start: what comes before is warm-up
    # False for a run that records no throughput by design (a telemetry-only import): its
    # throughput checks are not made; a live run whose worker did nothing still fails.
    records_throughput: bool = True
    # Why throughput is not measured where ``records_throughput`` is False ("" for a
    # telemetry-only run): an imported trace can hold throughput for some devices only.
    throughput_note: str = ""
    # True for an imported trace: another tool ran the load, so soak has no worker outcome
    # and no result verification for it (not checked, never a warning)
    foreign_load: bool = False
    capabilities: dict[str, str] = field(default_factory=dict)  # telemetry field -> capability
    idle_temp_c: float | None = None  # before the load: the base of the temperature rise
    # What else used the device over the cold, steady and final windows (by label), and
    # the compute processes not soak's that the backend saw on it.
    contention: dict[str, Contention] = field(default_factory=dict)
    foreign_processes: tuple[ForeignProcess, ...] = ()
    clock_label: str = "SM clock"  # DeviceInfo.clock_label: what its texts call its clock
    # The clock-event reason bits its readings could not tell (a log with only some
    # reasons' columns; fields.unread_reasons): "not available", never "inactive".
    reasons_unread: int = 0
    # How its load began where not cold (soak.analysis.warmstart): begun under load (no
    # cold window) or after an idle baseline still hot from a previous job.
    warm_start: WarmStart | None = None
    # The SKU's SW thermal slowdown temperature (NVML's max operating temperature)
    max_operating_temp_c: float | None = None

    @property
    def windows_apart(self) -> bool:
        """Whether a cold window lies before the steady one, so that a ratio of the two
        means something (a load too short for both overlaps them)."""
        if self.cold is None or self.steady is None:
            return False
        return self.steady.window.start_s >= self.cold.window.end_s


def _rate(value: float | None, part: str, facts: DeviceFacts) -> str:
    return si(value, rate_unit(facts.units.get(part)))


def _late_windows(f: DeviceFacts) -> list[tuple[WindowName, WindowStats | None]]:
    """The steady window, and the end of the load too where it differs: a device that
    degrades after equilibrium must not pass on the strength of its earlier steady state."""
    windows = [(WindowName.STEADY, f.steady)]
    if f.final is not None and (f.steady is None or f.final.window != f.steady.window):
        windows.append((WindowName.FINAL, f.final))
    return windows


def _not_checked(
    check: str, what: str, f: DeviceFacts, *fields: str, window: WindowName | None = None
) -> Finding:
    """A check that cannot run for want of a signal, naming the capability that is missing."""
    caps = [f"{k}: {f.capabilities[k]}" for k in fields if f.capabilities.get(k)]
    missing = f" ({'; '.join(caps)})" if caps else ""
    message = f"{what} not available{missing}"
    return Finding(check, Status.NOT_CHECKED, message, f.index, window)


# The clock each unit of work scales with: tensor math and training steps with the SM
# clock, memory traffic with the memory clock.
CLOCK_OF_UNIT = {"FLOP": "sm_clock_mhz", "token": "sm_clock_mhz", "B": "mem_clock_mhz"}
POWER_PINNED_SHARE = 0.5  # share of a window under the SW power cap that pins power
POWER_AT_LIMIT = 0.97  # median power this close to the enforced limit pins it too


@dataclass(frozen=True, slots=True)
class RetentionSplit:
    """The cold→late throughput loss of one part, split by cause. ``drift`` is the loss the
    power cap explains (power pinned at the limit, clocks down, no thermal reason: leakage
    grows with temperature); ``thermal`` the clock loss under thermal slowdown; and
    ``unexplained`` the rest (clocks that fell with no reason, or less work per clock)."""

    ratio: float  # late / cold throughput
    drift: float
    thermal: float
    unexplained: float
    # Causes that could not be told apart, each with why: "power-capped drift" where neither
    # the power limit nor the SW power cap reason was read, "thermal slowdown" where the
    # thermal reasons were not read. Their loss is in ``unexplained``, never shown as 0 %.
    unchecked: tuple[tuple[str, str], ...] = ()

    def causes(self) -> str:
        """The split in words: each cause's share, or "not available" and why."""
        skipped = dict(self.unchecked)
        out = []
        for name, share in (("power-capped drift", self.drift), ("thermal slowdown", self.thermal)):
            why = skipped.get(name)
            out.append(f"{name} not available ({why})" if why else f"{pct(share)} {name}")
        out.append(f"{pct(self.unexplained)} unexplained")
        return ", ".join(out)

    @property
    def strict_ratio(self) -> float:
        """Late / cold throughput with the power-capped drift taken out: what the strict
        floor judges."""
        return self.ratio / (1.0 - self.drift) if self.drift < 1 else 0.0


def _power_pinned(stats: WindowStats) -> bool | None:
    """Whether power is pinned at the limit over the window; None where neither the SW
    power cap reason nor power and its limit were read."""
    capped = stats.reason_share.get("sw_power_cap")
    if (capped or 0.0) > POWER_PINNED_SHARE:
        return True
    power, limit = stats.median.get("power_w"), stats.median.get("power_limit_w")
    if power is not None and limit is not None:
        return power >= POWER_AT_LIMIT * limit
    return None if capped is None else False


NO_POWER_LIMIT = "no power limit or power-cap reason read"
NO_THERMAL_REASON = "no thermal reason read"
NO_CLOCK = "no clock read"


def _clock_of(stats: WindowStats, key: str) -> float | None:
    """A window's clock for the split by cause: the SM clock's mean reading (the work follows
    the time mean, and at a power cap one read scatters by up to 11 %), another clock's
    median."""
    if key == "sm_clock_mhz" and stats.clock_mean_mhz is not None:
        return stats.clock_mean_mhz
    return stats.median.get(key)


def retention_split(
    f: DeviceFacts, late: WindowStats, part: str, profile: Profile
) -> RetentionSplit | None:
    """The split of one part's loss from the cold window to ``late``; None without both
    throughputs. Without the clock the part scales with, all the loss is unexplained."""
    cold_rate = f.cold.throughput.get(part) if f.cold else None
    late_rate = late.throughput.get(part)
    if cold_rate is None or late_rate is None or cold_rate <= 0:
        return None
    ratio = late_rate / cold_rate
    key = CLOCK_OF_UNIT.get(f.units.get(part, ""))
    cold_clock = _clock_of(f.cold, key) if f.cold and key else None
    late_clock = _clock_of(late, key) if key else None
    if not cold_clock or late_clock is None:
        unseen = (("power-capped drift", NO_CLOCK), ("thermal slowdown", NO_CLOCK))
        return RetentionSplit(ratio, 0.0, 0.0, max(0.0, 1.0 - ratio), unseen)
    return split_by_cause(ratio, late_clock / cold_clock, late, profile)


def split_by_cause(
    ratio: float, clock_ratio: float, late: WindowStats, profile: Profile
) -> RetentionSplit:
    """Split a late/cold ``ratio`` whose clock fell to ``clock_ratio`` of cold by cause. A
    cause whose signal was not read is named in ``unchecked``, its loss left unexplained:
    unknown is not zero."""
    clock_loss = max(0.0, 1.0 - clock_ratio)
    per_clock_loss = max(0.0, 1.0 - ratio / clock_ratio) if clock_ratio > 0 else 1.0
    sw_thermal = late.reason_share.get("sw_thermal")
    thermal_share = max(sw_thermal or 0.0, late.reason_share.get("hw_thermal") or 0.0)
    hw_share = late.reason_share.get("hw_any") or 0.0
    if thermal_share > profile.checks.max_sw_thermal_fraction:
        return RetentionSplit(ratio, 0.0, clock_loss, per_clock_loss)
    unchecked = [] if sw_thermal is not None else [("thermal slowdown", NO_THERMAL_REASON)]
    pinned = _power_pinned(late)
    if hw_share == 0 and pinned:
        return RetentionSplit(ratio, clock_loss, 0.0, per_clock_loss, tuple(unchecked))
    if pinned is None:
        unchecked.insert(0, ("power-capped drift", NO_POWER_LIMIT))
    return RetentionSplit(ratio, 0.0, 0.0, 1.0 - min(1.0, ratio), tuple(unchecked))


def check_throughput_retention(
    f: DeviceFacts, profile: Profile, peers: Sequence[DeviceFacts] = ()
) -> list[Finding]:
    """Steady (and final) throughput against cold, each loss judged by its cause: the
    power-capped drift only past its absolute floor, thermal and unexplained loss by the
    strict floor. ``peers`` (the server's devices) give the drift its comparison."""
    if not f.records_throughput:
        out = [_not_measured("throughput_retention", f)]
        for label, stats in _late_windows(f):
            out += _clock_retention(f, stats, label, profile)
        return out
    out = []
    for label, stats in _late_windows(f):
        out += _retention(f, stats, label, profile, peers)
    return out


def _clock_retention(
    f: DeviceFacts, late: WindowStats | None, label: WindowName, profile: Profile
) -> list[Finding]:
    """Where no throughput is recorded, the SM clock (a CPU's clock) stands in for it: the
    same split by cause and the same floors, on late / cold clock."""
    no_ratio = _no_ratio("clock_retention", f, late, label)
    if no_ratio is not None:
        return [no_ratio]
    cold = _clock_of(f.cold, "sm_clock_mhz") if f.cold else None
    clock = _clock_of(late, "sm_clock_mhz") if late else None
    if not cold or clock is None or late is None:
        what = f"{label} {f.clock_label}"
        return [_not_checked("clock_retention", what, f, "sm_clock_mhz", window=label)]
    no_ratio = _no_ratio("clock_retention", f, late, label, overlap=True)
    if no_ratio is not None:
        return [no_ratio]
    split = split_by_cause(clock / cold, clock / cold, late, profile)
    checks = profile.checks
    text = (
        f"{label} {f.clock_label} {clock:.0f} MHz is {pct(split.ratio)}"
        f"{_clock_bounds(f, late)} of cold {cold:.0f} MHz (in place of throughput): "
        f"{_drift_causes(split, checks.max_power_drift)}; "
        f"floor {pct(checks.min_throughput_retention, 0)} for thermal and unexplained loss"
    )
    ok = split.drift <= checks.max_power_drift and split.strict_ratio >= (
        checks.min_throughput_retention
    )
    status = Status.PASS if ok else Status.FAIL
    return [Finding("clock_retention", status, text, f.index, label)]


def clock_ratio_bounds(f: DeviceFacts, late: WindowStats) -> tuple[float, float] | None:
    """The late/cold SM clock ratio's widest 95 % bounds (each median's order-statistic
    interval): the noise a clock loss must clear to be a loss."""
    if f.cold is None:
        return None
    return ratio_bounds(
        late.median_interval.get("sm_clock_mhz"), f.cold.median_interval.get("sm_clock_mhz")
    )


def _clock_bounds(f: DeviceFacts, late: WindowStats) -> str:
    bounds = clock_ratio_bounds(f, late)
    return f" (95 % interval {pct(bounds[0])}–{pct(bounds[1])})" if bounds else ""


def _drift_causes(split: RetentionSplit, drift_floor: float, around: str = "") -> str:
    """The split's causes, the drift's comparison (``around``) or floor beside it."""
    text = split.causes()
    beside = around or f"floor {pct(drift_floor, 0)}"
    name = "power-capped drift"
    if name not in dict(split.unchecked):
        text = text.replace(name, f"{name} ({beside})", 1)
    return text


def _no_ratio(
    check: str, f: DeviceFacts, late: WindowStats | None, label: WindowName, overlap: bool = False
) -> Finding | None:
    """A cold-vs-late ratio that means nothing is not taken: the trace began under load (no
    cold window), or the load was too short for the two windows to lie apart (asked once
    both figures are there: a load stopped before them says that instead)."""
    if f.warm_start is not None and f.warm_start.begun:
        message = f"no cold-vs-{label} ratio: {f.warm_start.message.split(':')[0]}"
        return Finding(check, Status.NOT_CHECKED, message, f.index, label)
    if (
        overlap
        and f.cold is not None
        and late is not None
        and (late.window.start_s < f.cold.window.end_s)
    ):
        message = (
            f"no cold-vs-{label} ratio: the cold and {label} windows overlap (the load is too "
            "short for both)"
        )
        return Finding(check, Status.NOT_CHECKED, message, f.index, label)
    return None


def _not_measured(check: str, f: DeviceFacts) -> Finding:
    why = f.throughput_note or "this run records no throughput (telemetry only)"
    return Finding(check, Status.NOT_CHECKED, f"throughput not measured: {why}", f.index)


def _peer_drifts(
    peers: Sequence[DeviceFacts], f: DeviceFacts, label: WindowName, part: str, profile: Profile
) -> list[float]:
    drifts = []
    for other in peers:
        if other.index == f.index or other.lost:
            continue
        late = dict(_late_windows(other)).get(label)
        split = retention_split(other, late, part, profile) if late is not None else None
        if split is not None:
            drifts.append(split.drift)
    return drifts


def _retention(
    f: DeviceFacts,
    late: WindowStats | None,
    label: WindowName,
    profile: Profile,
    peers: Sequence[DeviceFacts] = (),
) -> list[Finding]:
    no_ratio = _no_ratio("throughput_retention", f, late, label)
    if no_ratio is not None:
        return [no_ratio]
    out = []
    parts = sorted(set(f.cold.throughput if f.cold else {}) | set(late.throughput if late else {}))
    missing_status = Status.WARN if f.run_incomplete else Status.FAIL
    early = " before the run stopped" if f.run_incomplete else ""
    if not parts:
        return [
            Finding(
                "throughput_retention",
                missing_status,
                f"no work was measured{early}",
                f.index,
                label,
            )
        ]
    for part in parts:
        cold = f.cold.throughput.get(part) if f.cold else None
        steady = late.throughput.get(part) if late else None
        if cold is None or steady is None:
            missing = "cold" if cold is None else label
            out.append(
                Finding(
                    "throughput_retention",
                    missing_status,
                    f"{part}: no {missing} throughput measured{early}",
                    f.index,
                    label,
                    part,
                )
            )
            continue
        if cold <= 0:  # no ratio to take; a device that did nothing cold is not healthy
            message = f"{part}: cold throughput {_rate(cold, part, f)}: no work done cold"
            out.append(Finding("throughput_retention", Status.FAIL, message, f.index, label, part))
            continue
        no_ratio = _no_ratio("throughput_retention", f, late, label, overlap=True)
        if no_ratio is not None:
            out.append(dataclasses.replace(no_ratio, part=part))
            continue
        assert late is not None
        split = retention_split(f, late, part, profile)
        assert split is not None
        out.append(_retention_result(f, label, part, split, profile, peers))
    return out


def _retention_result(
    f: DeviceFacts,
    label: WindowName,
    part: str,
    split: RetentionSplit,
    profile: Profile,
    peers: Sequence[DeviceFacts],
) -> Finding:
    checks = profile.checks
    floor, drift_floor = checks.min_throughput_retention, checks.max_power_drift
    cold = f.cold.throughput[part] if f.cold else None
    late = cold * split.ratio if cold is not None else None
    head = (
        f"{label} {part} {_rate(late, part, f)} is {pct(split.ratio)} of cold "
        f"{_rate(cold, part, f)}"
    )
    if split.drift == 0 and split.thermal == 0:
        status = Status.PASS if split.ratio >= floor else Status.FAIL
        text = f"{head}; floor {pct(floor, 0)}"
        return _contended("throughput_retention", status, text, f, label, part, profile)
    drifts = _peer_drifts(peers, f, label, part, profile)
    around = []
    if drifts:
        around.append(f"peers {pct(min(drifts))}–{pct(max(drifts))}")
    if checks.expected_power_drift:
        around.append(f"{profile.name} expects {pct(checks.expected_power_drift)}")
    around.append(f"floor {pct(drift_floor, 0)}")
    text = (
        f"{head}: {_drift_causes(split, drift_floor, ', '.join(around))}; "
        f"floor {pct(floor, 0)} for thermal and unexplained loss"
    )
    ok = split.drift <= drift_floor and split.strict_ratio >= floor
    status = Status.PASS if ok else Status.FAIL
    return _contended("throughput_retention", status, text, f, label, part, profile)


def _contended(
    check: str,
    status: Status,
    text: str,
    f: DeviceFacts,
    label: WindowName,
    part: str,
    profile: Profile,
    alone_limit: float | None = None,
) -> Finding:
    """A failing throughput figure measured while something else used the device: the
    check is incomplete, or fails as before where the loss stays without the foreign load
    (``contention.review``). ``alone_limit`` is the lowest rate that passes; None: the
    retention floor times the cold rate (and a contended cold window counts too).

    A retention that passes only against a cold window the foreign load held down (and a
    late window without it, or held down less: ``contention.inflated``) is incomplete too:
    the ratio is flattered, and a real loss could hide in it."""
    if status is Status.PASS and alone_limit is None:
        return _flattered(check, text, f, label, part, profile)
    if status is not Status.FAIL:
        return Finding(check, status, text, f.index, label, part)
    cold = f.cold.throughput.get(part) if f.cold else None
    if alone_limit is None and cold is None:
        return Finding(check, status, text, f.index, label, part)
    limit = alone_limit
    if limit is None:
        limit = profile.checks.min_throughput_retention * cold  # type: ignore[operator]
    found = review(
        f.contention,
        label,
        part,
        lambda rate: rate >= limit,
        profile.windows.cold_length_s,
        f.foreign_processes,
        cold_matters=alone_limit is None,
        rate_text=lambda rate: _rate(rate, part, f),
    )
    if found is None:
        return Finding(check, status, text, f.index, label, part)
    status = Status.FAIL if found.stays else Status.INCOMPLETE
    return Finding(check, status, f"{text}; {found.note}", f.index, label, part)


def _flattered(
    check: str, text: str, f: DeviceFacts, label: WindowName, part: str, profile: Profile
) -> Finding:
    cold, late = f.contention.get("cold"), f.contention.get(label)
    floor = profile.checks.min_throughput_retention
    if floor <= 0 or cold is None or not cold.contended:
        return Finding(check, Status.PASS, text, f.index, label, part)
    if late is not None and late.contended:  # both held down: alike, or cold more
        note = inflated(cold, late, label)
        if note is None:
            return Finding(check, Status.PASS, text, f.index, label, part)
    else:
        note = f"{cold.describe(f.foreign_processes, 'cold')}, not of the {label} window"
    return Finding(check, Status.INCOMPLETE, f"{text}; {note}; {RERUN}", f.index, label, part)


def check_sw_thermal(f: DeviceFacts, profile: Profile) -> list[Finding]:
    """SW thermal slowdown: a budget of the steady (and final) window's time."""
    out = []
    lim = profile.checks.max_sw_thermal_fraction
    for window_label, stats in _late_windows(f):
        share = stats.reason_share.get("sw_thermal") if stats else None
        if share is None or stats is None:
            if f.reasons_unread & int(fields.REASONS_BY_KEY["sw_thermal"].bits):
                key = fields.REASON_CAPABILITY.format(key="sw_thermal")
                out.append(_not_checked("sw_thermal", "SW thermal slowdown reason", f, key))
            else:
                out.append(_not_checked("sw_thermal", "clock-event reasons", f, "clock_reasons"))
            break
        status = Status.PASS if share <= lim else Status.FAIL
        seconds = share * stats.window.length_s
        message = (
            f"SW thermal slowdown {pct(share, 2)} of {window_label} window ({seconds:.0f} s); "
            f"limit {pct(lim, 2)}"
        )
        out.append(Finding("sw_thermal", status, message, f.index, window_label))
    return out


MAX_EPISODES_NAMED = 3


def _episode_text(e: HwEpisode, load_start_s: float | None) -> str:
    names = "/".join(r.label for r in fields.HW_REASON_BITS if e.bits & int(r.bits))
    if load_start_s is not None:
        when = f"{e.start_s - load_start_s:.0f} s into the load"
    else:
        when = f"t = {e.start_s:.0f} s"
    return f"{names} at {when} for {e.duration_s:.0f} s (reason bits {e.bits:#x})"


def check_protection_events(f: DeviceFacts, profile: Profile) -> list[Finding]:
    """Any HW slowdown, HW thermal slowdown or HW power brake after the warm-up fails the
    device wherever it falls: a healthy server never asserts one during a soak. Inside the
    warm-up (before the cold window) it warns. The message names each episode's time,
    duration and reason bits."""
    if f.hw_episodes is None:
        return [_not_checked("hw_events", "clock-event reasons", f, "clock_reasons")]
    unread = [r.label for r in fields.HW_REASON_BITS if int(r.bits) & f.reasons_unread]
    if not f.hw_episodes:
        read = [r.label for r in fields.HW_REASON_BITS if not int(r.bits) & f.reasons_unread]
        message = f"no {_either(read)} during the run"
        if unread:
            message += f" ({_either(unread)} not read: not available)"
        return [Finding("hw_events", Status.PASS, message, f.index)]
    warmup = f.warmup_end_s
    late = [e for e in f.hw_episodes if warmup is None or e.end_s > warmup]
    early = [e for e in f.hw_episodes if e not in late]
    out = []
    for episodes, status, where in (
        (late, Status.FAIL, "after the warm-up"),
        (early, Status.WARN, "inside the warm-up"),
    ):
        if not episodes:
            continue
        named = [_episode_text(e, f.load_start_s) for e in episodes[:MAX_EPISODES_NAMED]]
        more = len(episodes) - len(named)
        total = sum(e.duration_s for e in episodes)
        extra = f" and {more} more" if more > 0 else ""
        message = (
            f"{len(episodes)} HW protection event{'s' if len(episodes) > 1 else ''} {where} "
            f"({total:.0f} s in all): {'; '.join(named)}{extra}"
        )
        out.append(Finding("hw_events", status, message, f.index))
    return out


def _either(labels: list[str]) -> str:
    """ "HW slowdown, HW thermal slowdown or HW power brake"."""
    return labels[0] if len(labels) == 1 else f"{', '.join(labels[:-1])} or {labels[-1]}"


AT_SLOWDOWN_C = 2.0  # a median this close below the SW slowdown temperature is held there


def check_slowdown_temp(f: DeviceFacts, profile: Profile) -> list[Finding]:
    """The absolute rule beside the hot-spot one, which compares a device with the
    server's median and cannot see a server whose every device is equally hot: a late
    window whose median temperature is at the SKU's SW thermal slowdown temperature (NVML's
    max operating temperature, where the driver starts holding the clocks down) or within
    ``AT_SLOWDOWN_C`` of it warns, whatever the other devices read. Without that
    temperature (a log whose SKU is not known) there is nothing to judge."""
    limit = f.max_operating_temp_c
    if limit is None:
        return []
    out = []
    for label, stats in _late_windows(f):
        temp = stats.median.get("temp_c") if stats else None
        if temp is None:
            what = f"{label} temperature"
            out.append(_not_checked("slowdown_temp", what, f, "temp_c", window=label))
            continue
        if temp < limit - AT_SLOWDOWN_C:
            message = (
                f"{label} temperature {temp:.0f} °C is {limit - temp:.0f} °C below the SW "
                f"thermal slowdown temperature {limit:.0f} °C"
            )
            out.append(Finding("slowdown_temp", Status.PASS, message, f.index, label))
            continue
        message = (
            f"{label} temperature {temp:.0f} °C is at the SW thermal slowdown temperature "
            f"{limit:.0f} °C (within {AT_SLOWDOWN_C:.0f} °C): the driver holds the clocks down "
            "there"
        )
        if stats is not None and stats.reason_share.get("sw_thermal") is None:
            message += " (clock-event reasons not read: inferred from temperature)"
        out.append(Finding("slowdown_temp", Status.WARN, message, f.index, label))
    return out


def check_cold_window(f: DeviceFacts, profile: Profile) -> list[Finding]:
    """Whether the cold window was cold (``soak.analysis.warmstart``): a trace begun under
    load has none, and an idle baseline still hot from a previous job warmed it; both warn
    with their figures. Not checked without a temperature to tell."""
    if f.warm_start is not None:
        return [Finding("cold_window", Status.WARN, f.warm_start.message, f.index)]
    if f.cold is None or f.cold.median.get("temp_c") is None:
        return [_not_checked("cold_window", "cold-window temperature", f, "temp_c")]
    message = f"the load began cold ({f.cold.median['temp_c']:.0f} °C in the cold window)"
    return [Finding("cold_window", Status.PASS, message, f.index)]


def check_temp_margin(f: DeviceFacts, profile: Profile) -> list[Finding]:
    slowdown = f.slowdown_temp_c
    if slowdown is None:
        return [_not_checked("temp_margin", "slowdown threshold", f, "temp_c")]
    need = profile.checks.min_temp_margin_c
    out = []
    for label, stats in _late_windows(f):
        temp = stats.p90.get("temp_c") if stats else None
        if temp is None:
            what = f"{label} temperature"
            out.append(_not_checked("temp_margin", what, f, "temp_c", window=label))
            continue
        margin = slowdown - temp
        status = Status.PASS if margin >= need else Status.FAIL
        message = (
            f"{label} temperature (p90) {temp:.0f} °C is {margin:.0f} °C below slowdown "
            f"{slowdown:.0f} °C; margin needed {need:.0f} °C"
        )
        out.append(Finding("temp_margin", status, message, f.index, label))
    return out


def check_hardware_errors(f: DeviceFacts, profile: Profile) -> list[Finding]:
    out = []
    remapping = (f.counters.get("remap_pending") or CounterSpan(None, None)).peak is not None
    for key in fields.FAILING_COUNTERS:
        label = fields.label(key)
        counter = f.counters.get(key)
        if key == "retired_pages" and remapping and (counter is None or not counter.readable):
            continue  # devices with row remapping (Ampere and later) retire no pages
        if counter is None or not counter.readable:
            out.append(_not_checked(key, label, f, key))
            continue
        new = counter.delta or 0
        status = Status.PASS if new <= 0 else Status.FAIL
        noun = label.removesuffix("s") if int(new) == 1 else label  # "1 new ... error"
        message = f"{int(new)} new {noun} (from {int(counter.first)} to {int(counter.last)})"
        out.append(Finding(key, status, message, f.index))
    for key in (k for k in fields.FOLLOWED if fields.BY_NAME[k].kind is fields.Kind.FLAG):
        label = fields.label(key)
        counter = f.counters.get(key)
        if counter is None or counter.peak is None:
            out.append(_not_checked(key, label, f, key))
            continue
        status = Status.FAIL if counter.peak > 0 else Status.PASS
        out.append(Finding(key, status, f"{label}: {'yes' if counter.peak else 'no'}", f.index))
    if f.xids:
        codes = ", ".join(str(c) for c in sorted(set(f.xids)))
        out.append(
            Finding("xid", Status.FAIL, f"{len(f.xids)} XID events (codes {codes})", f.index)
        )
    else:
        out.append(Finding("xid", Status.PASS, "no XID events", f.index))
    return out


def check_verification(f: DeviceFacts, profile: Profile) -> list[Finding]:
    if f.verification_failed:
        err = f"; largest error {f.verification_max_error:.3g}" if f.verification_max_error else ""
        message = f"{f.verification_failed} of {f.verification_checked} result checks failed{err}"
        return [Finding("verification", Status.FAIL, message, f.index)]
    if f.verification_checked == 0:
        if f.foreign_load:
            message = "result verification not available: another tool ran the load"
            return [Finding("verification", Status.NOT_CHECKED, message, f.index)]
        if not f.records_throughput:
            message = "result verification not available: this run records no work"
            return [Finding("verification", Status.NOT_CHECKED, message, f.index)]
        return [Finding("verification", Status.WARN, "no results were verified", f.index)]
    message = f"{f.verification_checked} result checks passed"
    return [Finding("verification", Status.PASS, message, f.index)]


def check_outcome(f: DeviceFacts, profile: Profile) -> list[Finding]:
    if f.lost:
        return [Finding("worker", Status.FAIL, "device lost during the run", f.index)]
    if f.outcome is None:
        if f.foreign_load:
            message = "worker outcome not available: another tool ran the load"
            return [Finding("worker", Status.NOT_CHECKED, message, f.index)]
        if not f.records_throughput:
            message = "worker outcome not available: this run ran no load of soak's"
            return [Finding("worker", Status.NOT_CHECKED, message, f.index)]
        return [Finding("worker", Status.WARN, "load did not report how it ended", f.index)]
    if f.outcome is WorkerOutcome.OK:
        return [Finding("worker", Status.PASS, "load ran to the end", f.index)]
    detail = f": {f.outcome_detail}" if f.outcome_detail else ""
    final = f.contention.get("final")
    if f.outcome is WorkerOutcome.HUNG and f.outcome_phase == "stop" and final and final.contended:
        # every figure was taken; only the stop was slow, on a host busy with other work
        message = (
            f"load ended: {f.outcome.value}{detail}; "
            f"{final.describe(f.foreign_processes, 'final')}; rerun on an idle host"
        )
        return [Finding("worker", Status.INCOMPLETE, message, f.index)]
    if f.outcome is WorkerOutcome.PEER_LOST:  # ddp: another rank ended; its device fails
        message = f"load ended early: another rank was lost{detail}"
        return [Finding("worker", Status.WARN, message, f.index)]
    return [Finding("worker", Status.FAIL, f"load ended: {f.outcome.value}{detail}", f.index)]


def check_jitter(f: DeviceFacts, profile: Profile) -> list[Finding]:
    out = []
    limit = profile.checks.max_jitter_cv
    for part, cv in sorted((f.steady.throughput_cv if f.steady else {}).items()):
        if cv is None:
            continue
        status = Status.PASS if cv <= limit else Status.WARN
        message = f"steady {part} throughput varies by {pct(cv)} (CV); limit {pct(limit)}"
        steady = f.contention.get("steady")
        if status is Status.WARN and steady is not None and steady.contended:
            message += f"; {steady.describe(f.foreign_processes)}"
        out.append(Finding("jitter", status, message, f.index, WindowName.STEADY, part))
    return out


def check_equilibrium(f: DeviceFacts, profile: Profile) -> list[Finding]:
    eq = f.equilibrium
    origin = f.load_start_s if f.load_start_s is not None else 0.0  # else the run's start
    withdrawn = "".join(f"; {w.describe(origin)}" for w in eq.withdrawn) if eq is not None else ""
    if eq is not None and eq.reached:
        since = "after load start" if f.load_start_s is not None else "into the run"
        when = f"{minutes(eq.time_s - origin)} {since}"
        message = f"thermal equilibrium {when} (basis: {eq.basis}){withdrawn}"
        return [Finding("equilibrium", Status.PASS, message, f.index)]
    status = Status.FAIL if profile.checks.require_equilibrium else Status.WARN
    message = "equilibrium not reached; steady figures are from the last minutes of the run"
    if eq is not None and eq.reason:
        message += f" ({eq.reason})"
    message += withdrawn
    return [Finding("equilibrium", status, message, f.index)]


def too_short(f: DeviceFacts, profile: Profile) -> Finding | None:
    """No PASS without evidence: a device that reached no thermal equilibrium in a load
    shorter than the profile's ``min_load_s`` was never seen hot, so it cannot be judged
    (INCOMPLETE, what it would take in the message). None where the load was long enough,
    equilibrium was reached, or the run stopped early (its stop says why already)."""
    least = profile.checks.min_load_s
    eq = f.equilibrium
    if f.run_incomplete or f.whole is None or (eq is not None and eq.reached):
        return None
    had = f.whole.window.length_s
    if had >= least:
        return None
    windows = profile.windows
    need = max(least, shortest_confirmation_s(windows)) + windows.steady_length_s
    message = (
        f"could not be judged: {minutes(had)} of load and no thermal equilibrium in it; "
        f"profile {profile.name} asks for {least / 60:g} min at least (min_load_s): soak "
        f"{math.ceil(need / 60)} min or more for equilibrium and its "
        f"{windows.steady_length_s / 60:g}-min steady window"
    )
    return Finding("run_length", Status.INCOMPLETE, message, f.index)


def check_run_length(f: DeviceFacts, profile: Profile) -> list[Finding]:
    """A load too short to be judged at all (``too_short``) is incomplete; one too short for
    separate cold and steady windows cannot show a cold/hot loss."""
    short = too_short(f, profile)
    if short is not None:
        return [short]
    if f.cold is None or f.steady is None:
        return []
    if f.steady.window.start_s >= f.cold.window.end_s:
        return [Finding("run_length", Status.PASS, "cold and steady windows are apart", f.index)]
    needed = profile.windows.cold_start_s + profile.windows.cold_length_s + MIN_SEPARATE_STEADY_S
    had = f.whole.window.length_s if f.whole is not None else None
    had_text = f"{had:.0f} s of load" if had is not None else "the load"
    message = (
        f"{had_text} is too short for separate cold and steady windows (needs over "
        f"{needed:.0f} s; {profile.windows.steady_length_s / 60:.0f} min of steady state after "
        f"equilibrium for a full verdict)"
    )
    return [Finding("run_length", Status.WARN, message, f.index)]


def check_contention(f: DeviceFacts, profile: Profile) -> list[Finding]:
    """Other work on the device is named wherever it was there, from the load's first
    second as well as mid-run (soak.analysis.contention): a warning with its share of the
    load, and how much of the device (the host's CPU time) it took. A check whose figure
    fell with it is incomplete besides; one that passed (both windows held down alike)
    passes on figures that are not the device's alone, which the operator must be told."""
    whole = f.contention.get(WHOLE)
    if whole is None or not whole.contended:
        return []
    origin = f.load_start_s if f.load_start_s is not None else 0.0
    first = whole.first_s
    if first is None or first - origin <= profile.windows.cold_start_s:
        since = "from the load's first seconds"
    else:
        since = f"from {minutes(first - origin)} of load"
    message = (
        f"{whole.describe(f.foreign_processes, WHOLE)}, {since}: the figures are not the "
        f"device's alone; {RERUN}"
    )
    return [Finding("contention", Status.WARN, message, f.index)]


def check_floors(f: DeviceFacts, profile: Profile) -> list[Finding]:
    """Per-SKU floors: a minimum steady throughput per workload and part, with its source.
    Floors are per workload because a part shares the device in ``mix`` and runs alone
    otherwise; a workload the profile gives no floors for is not judged by them."""
    if profile.legacy_floors:
        names = ", ".join(sorted(profile.legacy_floors))
        message = f"floors for {names} are in an older profile format; not applied"
        return [Finding("floor", Status.WARN, message, f.index)]
    out = []
    floors = profile.floors.get(f.workload or "", {})
    sources = profile.floor_sources.get(f.workload or "", {})
    if floors and not f.records_throughput:
        return [_not_measured("floor", f)]
    for part, floor in sorted(floors.items()):
        source = sources.get(part, "").split(";")[0].strip()
        src = f" ({source})" if source else ""
        for label, stats in _late_windows(f):
            rate = stats.throughput.get(part) if stats else None
            if rate is None:
                message = (
                    f"{label} {part} throughput not measured; floor {_rate(floor, part, f)}{src}"
                )
                out.append(Finding("floor", Status.FAIL, message, f.index, label, part))
                continue
            status = Status.PASS if rate >= floor else Status.FAIL
            message = (
                f"{label} {part} {_rate(rate, part, f)} is {pct(rate / floor)} of the "
                f"{profile.name} floor {_rate(floor, part, f)}{src}"
            )
            out.append(_contended("floor", status, message, f, label, part, profile, floor))
    return out


def check_power_limit(f: DeviceFacts, profile: Profile) -> list[Finding]:
    """An enforced power limit below the device's default caps its throughput by
    configuration; a warning, since an operator may have chosen it (the within-server rule
    fails a device that it makes slower than its peers)."""
    limit, default = f.power_limit_w, f.default_power_limit_w
    if limit is None or default is None:
        return []
    if limit >= profile.checks.min_power_limit_fraction * default:
        message = f"power limit {limit:.0f} W (default {default:.0f} W)"
        return [Finding("power_limit", Status.PASS, message, f.index)]
    message = (
        f"power limit {limit:.0f} W is {pct(limit / default)} of the default {default:.0f} W; "
        f"limit {pct(profile.checks.min_power_limit_fraction, 0)}"
    )
    return [Finding("power_limit", Status.WARN, message, f.index)]


def profile_applies(name: str, profile: Profile) -> bool:
    """Whether a device of this name is one a SKU profile is for (any, for a profile that
    names none); the simulator's "(simulated)" suffix is left out."""
    if not profile.device_names:
        return True
    name = name.removesuffix(" (simulated)").strip().casefold()
    return any(name == n.casefold() for n in profile.device_names)


def check_profile_applies(f: DeviceFacts, profile: Profile) -> list[Finding]:
    """A SKU profile names the devices its floors are for; on another device they mislead."""
    if profile_applies(f.name, profile):
        return []
    message = (
        f"profile {profile.name} is for {' / '.join(profile.device_names)}, "
        f"this device is {f.name}: its floors may not apply"
    )
    return [Finding("profile", Status.WARN, message, f.index)]


DEVICE_CHECKS: tuple[Callable[[DeviceFacts, Profile], list[Finding]], ...] = (
    check_outcome,
    check_verification,
    check_hardware_errors,
    check_throughput_retention,
    check_protection_events,
    check_sw_thermal,
    check_temp_margin,
    check_slowdown_temp,
    check_cold_window,
    check_equilibrium,
    check_run_length,
    check_jitter,
    check_power_limit,
    check_profile_applies,
    check_floors,
    check_contention,
)


def _window_of(f: DeviceFacts, label: WindowName) -> WindowStats | None:
    return {WindowName.STEADY: f.steady, WindowName.FINAL: f.final}.get(label)


def check_outliers(devices: Sequence[DeviceFacts], profile: Profile) -> list[Finding]:
    """Within-server rule: a device whose steady (or final) throughput is below the server's
    median − max(k·MAD, rel·median) over that window fails. Needs three devices to mean
    anything. The final window is judged where a device's differs from its steady one, so
    a device that degrades after its steady window cannot pass on its earlier figures."""
    out = []
    for label in (WindowName.STEADY, WindowName.FINAL):
        out += _outliers(devices, profile, label)
    return out


def _outliers(devices: Sequence[DeviceFacts], profile: Profile, label: WindowName) -> list[Finding]:
    out = []
    judged = [f for f in devices if f.records_throughput]
    if label is WindowName.FINAL:  # the final window of a device whose own is apart
        apart = {f.index for f in judged if any(w is label for w, _ in _late_windows(f))}
        if not apart:
            return []
    else:
        apart = {f.index for f in judged}
    windows = {f.index: _window_of(f, label) or f.steady for f in judged}
    parts = sorted({p for w in windows.values() if w for p in w.throughput})
    f_by_index = {f.index: f for f in judged}
    for part in parts:
        rates = {
            i: w.throughput[part]
            for i, w in windows.items()
            if w and w.throughput.get(part) is not None
        }
        if len(rates) < 3:
            continue
        values = np.array(list(rates.values()))
        median = float(np.median(values))
        mad = float(np.median(np.abs(values - median)))
        margin = max(profile.checks.outlier_mad_k * mad, profile.checks.outlier_min_rel * median)
        limit = median - margin
        for index, rate in rates.items():
            if index not in apart:
                continue
            facts = f_by_index[index]
            if median <= 0:  # most devices did no work: no reference to compare with
                message = (
                    f"{label} {part} {_rate(rate, part, facts)}; the server median is "
                    f"{_rate(median, part, facts)}: no reference for the within-server rule"
                )
                out.append(Finding("outlier", Status.WARN, message, index, label, part))
                continue
            status = Status.PASS if rate >= limit else Status.FAIL
            message = (
                f"{label} {part} {_rate(rate, part, facts)} is {pct(rate / median)} of the "
                f"server median {_rate(median, part, facts)}; limit {pct(limit / median)}"
            )
            result = _contended("outlier", status, message, facts, label, part, profile, limit)
            out.append(result)
    return out


POWER_SAME = 0.03  # relative: power within this of the server median counts as the same


def hot_spot_temps(
    devices: Sequence[DeviceFacts], label: WindowName = WindowName.STEADY
) -> tuple[dict[int, float], str]:
    """Each device's temperature over a late window as the hot-spot rule compares it, and
    how: the median temperature where every device runs at the server's median power
    (under a power cap, power cannot tell devices apart), else each device's rise over its
    idle temperature scaled to the median power (clocks capped, powers apart)."""
    temps, powers, idles = {}, {}, {}
    for f in devices:
        w = _window_of(f, label)
        if f.lost or w is None or w.median.get("temp_c") is None:
            continue
        temps[f.index] = w.median["temp_c"]
        powers[f.index] = w.median.get("power_w")
        idles[f.index] = f.idle_temp_c
    known = [p for p in powers.values() if p]
    if len(known) < len(temps) or not known:
        return temps, "temperature"
    median_power = float(np.median(known))
    if all(abs(p / median_power - 1) <= POWER_SAME for p in known):
        return temps, "temperature"
    if any(i is None for i in idles.values()):
        return temps, "temperature"
    scaled = {
        i: idles[i] + (t - idles[i]) * median_power / powers[i]  # type: ignore[operator]
        for i, t in temps.items()
    }
    return scaled, f"temperature normalised to the median power {median_power:.0f} W"


def check_hot_spots(devices: Sequence[DeviceFacts], profile: Profile) -> list[Finding]:
    """Within-server temperature rule: a device hotter than the server's median by more than
    the profile's margin warns, naming its temperature, the median and the margin (a cooling
    defect: a blocked heat sink, a bad thermal pad, a missing baffle); it fails when it also
    comes within the slowdown-threshold margin. Needs three devices with a temperature."""
    out = []
    margin = profile.checks.hot_spot_margin_c
    need = profile.checks.min_temp_margin_c
    for label in (WindowName.STEADY, WindowName.FINAL):
        temps, basis = hot_spot_temps(devices, label)
        if len(temps) < 3:
            continue
        median = float(np.median(list(temps.values())))
        f_by_index = {f.index: f for f in devices}
        for index, temp in sorted(temps.items()):
            f = f_by_index[index]
            if label is WindowName.FINAL and not any(w is label for w, _ in _late_windows(f)):
                continue
            above = temp - median
            side = "above" if above >= 0 else "below"
            window = _window_of(f, label)
            # a normalised temperature is no reading: it says so, beside the one measured,
            # and only the measured p90 is set against the slowdown threshold
            normalised = basis != "temperature"
            measured = window.median.get("temp_c") if window and normalised else None
            differs = measured is not None and round(measured, 1) != round(temp, 1)
            seen = f" (measured {measured:.1f} °C)" if differs else ""
            likewise = " (normalised likewise)" if normalised else ""
            text = (
                f"{label} {basis} {temp:.1f} °C{seen} is {abs(above):.1f} °C {side} the server "
                f"median {median:.1f} °C{likewise}; margin {margin:.0f} °C"
            )
            if above <= margin:
                out.append(Finding("hot_spot", Status.PASS, text, index, label))
                continue
            p90 = window.p90.get("temp_c") if window else None
            slowdown = f.slowdown_temp_c
            near = slowdown is not None and p90 is not None and slowdown - p90 < need
            if near:
                text += (
                    f"; {'measured ' if normalised else ''}p90 {p90:.0f} °C is within "
                    f"{need:.0f} °C of slowdown {slowdown:.0f} °C"
                )
            else:
                text += ": a hot slot (check its heat sink, thermal pads and baffles)"
            status = Status.FAIL if near else Status.WARN
            out.append(Finding("hot_spot", status, text, index, label))
    return out


def run_checks(devices: Sequence[DeviceFacts], profile: Profile) -> list[Finding]:
    results = []
    for f in devices:
        for check in DEVICE_CHECKS:
            if check is check_throughput_retention:
                results += check_throughput_retention(f, profile, devices)
            else:
                results += check(f, profile)
    return results + check_outliers(devices, profile) + check_hot_spots(devices, profile)
