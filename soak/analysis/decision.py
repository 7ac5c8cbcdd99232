"""The sequential stop of ``--until-steady``: is every check's verdict already certain?

At a time t the run's data up to t is analysed as if the load had stopped then (the same
analysis, windows and checks the report makes), and each check with a floor (the retention
of throughput, or of the SM clock where no throughput is recorded, the power-capped drift,
the SKU's floors) is judged on the confidence interval of its figure (``intervals``): decided
PASS where the interval clears the floor, decided FAIL where it lies below it, undecided
where it straddles it. The run may stop once every active device is dated (and its date not
withdrawn since), holds at least ``min_steady_s`` of steady window, and every check is
decided. The live runner asks this every ``DECIDE_EVERY_S``; an import or a bench replays
it over a stored run (``replay``) to find where the stop would have fallen.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from soak.analysis.analyze import Analysis, DeviceResult, analyze_run
from soak.analysis.checks import (
    CLOCK_OF_UNIT,
    DeviceFacts,
    RetentionSplit,
    retention_split,
    split_by_cause,
)
from soak.analysis.equilibrium import OnlineDetector
from soak.analysis.intervals import CONFIDENCE, Interval, mean_interval, ratio_interval, scaled
from soak.analysis.noise import Noise, noise
from soak.analysis.windows import WindowName, WindowStats
from soak.dataset import RunData
from soak.model import StopReason
from soak.profile import Profile, Windows
from soak.record import StopRecord
from soak.units import pct, rate_unit, si

DECIDE_EVERY_S = 30.0  # one equilibrium check's worth of new data between two looks
MAX_S = 3000.0  # --max-minutes' default: no look after this much load
META_KEY = "stop_decision"  # where the runner keeps the decision in the store's meta


class Outcome(enum.StrEnum):
    PASS = "pass"
    FAIL = "fail"
    UNDECIDED = "undecided"


@dataclass(frozen=True, slots=True)
class Judged:
    """One check's figure against its floor, with its interval (None: noise unknown)."""

    device: int
    label: str  # what the figure is: "steady/cold gemm", "steady gemm"
    value: float
    interval: Interval | None
    floor: float
    higher_passes: bool = True  # False: the figure must stay at or under its floor
    unit: str = ""  # "" for a ratio shown in %, else the rate's unit

    @property
    def outcome(self) -> Outcome:
        if self.interval is None:
            return Outcome.UNDECIDED
        low, high = self.interval.low, self.interval.high
        passes = low >= self.floor if self.higher_passes else high <= self.floor
        fails = high < self.floor if self.higher_passes else low > self.floor
        return Outcome.PASS if passes else Outcome.FAIL if fails else Outcome.UNDECIDED

    @property
    def gap(self) -> float:
        """How far the interval lies from the floor, as a fraction of the floor's scale
        (negative: it straddles it)."""
        half = self.interval.half if self.interval is not None else math.inf
        scale = abs(self.floor) if self.unit else 1.0
        return (abs(self.value - self.floor) - half) / (scale or 1.0)

    def _figure(self, value: float) -> str:
        return si(value, self.unit) if self.unit else pct(value)

    def describe(self) -> str:
        ci = "± not available" if self.interval is None else f"± {self._figure(self.interval.half)}"
        return (
            f"device {self.device} {self.label} {self._figure(self.value)} {ci} "
            f"against {self._figure(self.floor)}"
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "check": self.label,
            "value": self.value,
            "ci": None if self.interval is None else self.interval.half,
            "floor": self.floor,
            "unit": self.unit or None,
            "outcome": str(self.outcome),
        }


@dataclass(frozen=True, slots=True)
class Settled:
    """When the last device settled (its equilibrium date) and what the stop waited for
    after it: each device's confirmation (the rule's check that completed its count) and its
    least steady window, the latest of which made the run ready to be looked at, then the
    looks until every check was decided."""

    device: int  # the device dated last
    date_s: float  # its date: when the last device settled
    ready_s: float  # the latest of every device's confirmation and date + least steady
    ready_device: int  # whose confirmation or steady window that was
    by_confirmation: bool  # True: its confirmation; False: its least steady window
    window_s: float  # the windows that device's checks compared
    checks: int  # the passing checks its count asked for
    interval_s: float  # its checks' interval
    least_s: float  # its least steady window
    load_start_s: float | None = None

    def held(self, t_s: float) -> str:
        """Why the run went on from the last date to ``t_s``."""
        origin = self.load_start_s if self.load_start_s is not None else 0.0
        what = (
            f"its date confirmed at {(self.ready_s - origin) / 60:.1f} min of load (two "
            f"{self.window_s / 60:g}-min windows compared, {self.checks} passing checks "
            f"{self.interval_s:g} s apart)"
            if self.by_confirmation
            else f"its steady window held its least, {self.least_s / 60:g} min, at "
            f"{(self.ready_s - origin) / 60:.1f} min of load"
        )
        looks = t_s - self.ready_s
        decided = (
            "the checks decided at the first look after"
            if looks <= DECIDE_EVERY_S
            else f"the checks' intervals decided {looks / 60:.1f} min after that"
        )
        return (
            f"{(t_s - self.date_s) / 60:.1f} min after the last device settled (device "
            f"{self.device}, dated at {(self.date_s - origin) / 60:.1f} min of load): device "
            f"{self.ready_device} {what}; {decided}"
        )


@dataclass(frozen=True, slots=True)
class Decision:
    """Whether the run may stop at ``t_s``, and why (``blocked``: what it still waits for)."""

    t_s: float
    load_s: float | None  # of load at t_s
    judged: tuple[Judged, ...] = ()
    blocked: str = ""  # a precondition not met ("" once every device is dated and steady)
    settled: Settled | None = None  # when the last device settled (None: one is not dated)

    @property
    def undecided(self) -> list[Judged]:
        return [j for j in self.judged if j.outcome is Outcome.UNDECIDED]

    @property
    def decided(self) -> bool:
        return not self.blocked and not self.undecided

    @property
    def closest(self) -> Judged | None:
        return min(self.judged, key=lambda j: j.gap, default=None)

    def reason(self, limit_s: float | None = None) -> str:
        """The one line the report gives; ``limit_s``: the run stopped at its limit."""
        load = "" if self.load_s is None else f" after {self.load_s / 60:.1f} min of load"
        level = f"{100 * CONFIDENCE:g} %"
        if self.decided:
            head = f"all {len(self.judged)} checks decided at {level}{load}"
            closest = self.closest
            return head + (f": the closest, {closest.describe()}" if closest else "")
        at = f"the {limit_s / 60:g}-min limit" if limit_s is not None else "the stop"
        if self.blocked:
            return f"no sequential stop by {at}: {self.blocked}"
        open_ = self.undecided
        named = "; ".join(f"{j.describe()}: undecided at {at}" for j in open_[:3])
        more = f" (and {len(open_) - 3} more)" if len(open_) > 3 else ""
        return f"{len(open_)} of {len(self.judged)} checks undecided at {level}: {named}{more}"

    def after_settled(self) -> str:
        """How long the run went on after the last device settled, and why ("" where some
        device is not dated)."""
        return "" if self.settled is None else "went on " + self.settled.held(self.t_s)

    def as_json(self, limit_s: float | None = None) -> dict[str, Any]:
        closest = self.closest
        settled = self.settled
        return {
            "after_settled": self.after_settled() or None,
            "settled_at_s": None if settled is None else settled.date_s,
            "after_settled_s": None if settled is None else self.t_s - settled.date_s,
            "reason": self.reason(limit_s),
            "decided": self.decided,
            "decided_at_s": self.t_s if self.decided else None,
            "load_s": self.load_s,
            "confidence": CONFIDENCE,
            "n_checks": len(self.judged),
            "closest": None if closest is None else closest.as_json(),
            "undecided": [j.as_json() for j in self.undecided],
            "checks": [j.as_json() for j in self.judged],
        }


def truncated(data: RunData, t_s: float) -> RunData:
    """The run's records up to ``t_s`` (a held dataset), as if its load had stopped there."""
    meta = data.meta
    duration = None if meta.load_start_s is None else t_s - meta.load_start_s
    stop = StopRecord(StopReason.STEADY, load_stop_s=t_s, duration_s=duration)
    return dataclasses.replace(data.up_to(t_s), meta=dataclasses.replace(meta, stop=stop))


def decide(
    data: RunData, profile: Profile, t_s: float, active: Collection[int] | None = None
) -> Decision:
    """The decision at ``t_s`` on the data up to it; ``active``: the devices still under
    test (None: every device whose load started and that was not lost)."""
    cut = truncated(data, t_s)
    analysis = analyze_run(cut, profile)
    load_start = data.meta.load_start_s
    load_s = None if load_start is None else t_s - load_start
    results = [r for r in analysis.devices if _active(r, active)]
    blocked = _blocked(results, profile)
    judged = tuple(j for r in results for j in judge_device(cut, analysis, r))
    return Decision(t_s, load_s, judged, blocked, settled(results, profile.windows, load_start))


def settled(
    results: Iterable[DeviceResult], windows: Windows, load_start_s: float | None = None
) -> Settled | None:
    """When the last of ``results`` settled and what the stop waited for after it (None
    where one is not dated)."""
    dated = []
    for r in results:
        eq = r.facts.equilibrium
        if eq is None or eq.time_s is None or eq.confirmed_s is None:
            return None
        least = least_steady_s(r, windows)
        ready = max(eq.confirmed_s, eq.time_s + least)
        judged = eq.scale.windows if eq.scale is not None else windows
        dated.append((r.index, eq.time_s, ready, eq.confirmed_s >= eq.time_s + least, judged))
    if not dated:
        return None
    last = max(dated, key=lambda d: d[1])
    ready = max(dated, key=lambda d: d[2])
    w = ready[4]
    return Settled(
        last[0],
        last[1],
        ready[2],
        ready[0],
        ready[3],
        w.eq_window_s,
        w.eq_checks,
        w.eq_check_interval_s,
        w.min_steady_s,
        load_start_s,
    )


def _active(result: DeviceResult, active: Collection[int] | None) -> bool:
    if active is not None:
        return result.index in active
    return result.load_start_s is not None and not result.facts.lost


def _blocked(results: Iterable[DeviceResult], profile: Profile) -> str:
    """The first precondition of a stop not met: a device undated (or its date withdrawn
    and not yet dated again), or a steady window shorter than the profile's least."""
    for r in results:
        eq, steady = r.facts.equilibrium, r.facts.steady
        least = least_steady_s(r, profile.windows)
        if eq is None or not eq.reached:
            return f"device {r.index} has no equilibrium date"
        if steady is None or steady.window.length_s < least:
            held = 0.0 if steady is None else steady.window.length_s
            return f"device {r.index} holds {held:.0f} s of steady window of the {least:g} s asked"
    return ""


def judge_device(data: RunData, analysis: Analysis, result: DeviceResult) -> list[Judged]:
    """Every check with a floor of one device, on its late windows (steady, and final where
    it differs), with the intervals of its figures."""
    facts, profile = result.facts, analysis.profile
    tele, work = data.telemetry[result.index], data.work.get(result.index, {})
    if facts.cold is None:
        return []
    cold_noise = noise(facts.cold.window, None, tele, work)
    late = [(WindowName.STEADY, facts.steady)]
    if facts.final is not None and (
        facts.steady is None or facts.final.window != facts.steady.window
    ):
        late.append((WindowName.FINAL, facts.final))
    out: list[Judged] = []
    for label, stats in late:
        if stats is None:
            continue
        late_noise = noise(stats.window, None, tele, work)
        figures = _Figures(facts, label, stats, cold_noise, late_noise)
        if facts.records_throughput:
            for part in sorted(facts.units):
                out += figures.retention(part, CLOCK_OF_UNIT.get(facts.units[part]), profile)
                out += figures.floor(part, facts.workload, facts.units[part], profile)
        else:
            out += figures.clock_retention(profile)
    return out


@dataclass(frozen=True, slots=True)
class _Figures:
    """One device's cold and late window with their noise, judged against the floors."""

    facts: DeviceFacts
    label: str
    late: WindowStats
    cold_noise: Noise
    late_noise: Noise

    @property
    def device(self) -> int:
        return self.facts.index

    @property
    def cold(self) -> WindowStats:
        assert self.facts.cold is not None
        return self.facts.cold

    def rate(self, stats: WindowStats, n: Noise, part: str) -> Interval | None:
        blocks = n.used.get(part, n.blocks)
        return mean_interval(stats.throughput.get(part), n.throughput_se.get(part), blocks)

    def median(self, stats: WindowStats, n: Noise, key: str) -> Interval | None:
        """A median's interval, never narrower than half the sensor's step."""
        found = mean_interval(stats.median.get(key), n.se.get(key), n.used.get(key, n.blocks))
        step = n.step.get(key) or self.cold_noise.step.get(key)
        if found is None or step is None:
            return found
        return dataclasses.replace(found, half=max(found.half, step / 2))

    def retention(self, part: str, clock_key: str | None, profile: Profile) -> list[Judged]:
        ratio = ratio_interval(
            self.rate(self.late, self.late_noise, part), self.rate(self.cold, self.cold_noise, part)
        )
        split = retention_split(self.facts, self.late, part, profile)
        if split is None:
            return []
        name = f"{self.label}/cold {part}"
        clock = self._clock_ratio(clock_key) if clock_key else None
        return _judge_split(self.device, name, split, ratio, clock, profile)

    def clock_retention(self, profile: Profile) -> list[Judged]:
        clock = self._clock_ratio("sm_clock_mhz")
        if clock is None:
            return []
        split = split_by_cause(clock.value, clock.value, self.late, profile)
        name = f"{self.label}/cold SM clock"
        return _judge_split(self.device, name, split, clock, clock, profile)

    def _clock_ratio(self, key: str) -> Interval | None:
        """The late/cold clock ratio's interval: the SM clock's mean reading where known (as
        the split by cause reads it, ``checks.retention_split``), another clock's median."""
        if key == "sm_clock_mhz" and self.late.clock_mean_mhz and self.cold.clock_mean_mhz:
            return ratio_interval(
                self.clock_mean(self.late, self.late_noise),
                self.clock_mean(self.cold, self.cold_noise),
            )
        return ratio_interval(
            self.median(self.late, self.late_noise, key),
            self.median(self.cold, self.cold_noise, key),
        )

    @staticmethod
    def clock_mean(stats: WindowStats, n: Noise) -> Interval | None:
        return mean_interval(stats.clock_mean_mhz, n.clock_mean_se, n.clock_mean_blocks)

    def floor(self, part: str, workload: str | None, unit: str, profile: Profile) -> list[Judged]:
        floor = profile.floors.get(workload or "", {}).get(part)
        rate = self.late.throughput.get(part)
        if floor is None or rate is None or profile.legacy_floors:
            return []
        found = self.rate(self.late, self.late_noise, part)
        name = f"{self.label} {part}"
        return [Judged(self.device, name, rate, found, floor, unit=rate_unit(unit))]


def _judge_split(
    device: int,
    name: str,
    split: RetentionSplit,
    ratio: Interval | None,
    clock: Interval | None,
    profile: Profile,
) -> list[Judged]:
    """The retention check's rule on intervals: the ratio against the floor where no loss
    is put down to a cause; else the ratio with the power-capped drift taken out, and the
    drift (one minus the clock's ratio) against its own floor."""
    checks = profile.checks
    floor = checks.min_throughput_retention
    if split.drift == 0 and split.thermal == 0:
        return [Judged(device, name, split.ratio, ratio, floor)]
    strict = None if ratio is None else scaled(ratio, split.strict_ratio)
    out = [Judged(device, f"{name} (drift out)", split.strict_ratio, strict, floor)]
    if split.drift > 0:
        drift = None if clock is None else dataclasses.replace(clock, value=1 - clock.value)
        out.append(
            Judged(
                device,
                f"{name} power-capped drift",
                split.drift,
                drift,
                checks.max_power_drift,
                False,
            )
        )
    return out


def replay(
    data: RunData,
    profile: Profile,
    analysis: Analysis,
    step_s: float = DECIDE_EVERY_S,
    limit_s: float = MAX_S,
) -> Decision | None:
    """Where the sequential stop would have fallen on a stored run: the first decided look,
    made every ``step_s`` from the earliest time every device could stand dated with its
    least steady window (``_earliest``); None where no look is decided before the end or
    ``limit_s`` of load (``--max-minutes``)."""
    starts, ends = [], []
    for r in analysis.devices:
        if r.load_start_s is None or r.facts.lost:
            continue
        earliest = _earliest(r, least_steady_s(r, profile.windows))
        if earliest is None or r.end_s is None:
            return None
        starts.append(earliest)
        ends.append(r.end_s)
    if not starts:
        return None
    t, end = max(starts), max(ends)
    if data.meta.load_start_s is not None:
        end = min(end, data.meta.load_start_s + limit_s)
    while t <= end:
        decision = decide(data, profile, t)
        if decision.decided:
            return decision
        t += step_s
    return None


def least_steady_s(result: DeviceResult, windows: Windows) -> float:
    """The shortest steady window a stop may judge a device's checks on: the profile's
    ``min_steady_s``, scaled with the windows the device is judged on (equilibrium rule,
    line 16)."""
    eq = result.facts.equilibrium
    scale = None if eq is None else eq.scale
    return windows.min_steady_s if scale is None else scale.windows.min_steady_s


def _earliest(result: DeviceResult, least_s: float) -> float | None:
    """The earliest a device can stand dated with ``least_s`` of steady window, from the
    whole run's detection (the rule reads only back, so the run up to t replays it to t):
    its confirmation where no date was withdrawn, else its first date plus ``least_s``."""
    eq = result.facts.equilibrium
    if eq is None:
        return None
    if not eq.withdrawn:
        if eq.time_s is None or eq.confirmed_s is None:
            return None
        return max(eq.confirmed_s, eq.time_s + least_s)
    return min(w.time_s for w in eq.withdrawn) + least_s


def verdict_eta_s(detector: OnlineDetector, t_s: float, windows: Windows) -> float | None:
    """Predicted seconds until a device's checks can first be decided. Dated: when its
    steady window holds ``min_steady_s``. Not yet: the fit's time to the confirming check
    (``OnlineDetector.eta_s``), or later where ``min_steady_s`` is longer than the ~1.5
    windows by which a date precedes the check that confirms it. None: no fit yet."""
    judged = detector.scale.windows if detector.scale is not None else windows
    if detector.equilibrium_s is not None:
        return max(0.0, detector.equilibrium_s + judged.min_steady_s - t_s)
    eta = detector.eta_s(t_s)
    if eta is None:
        return None
    return eta + max(0.0, judged.min_steady_s - 1.5 * judged.eq_window_s)


def stored(meta_extra: Mapping[str, Any]) -> dict[str, Any] | None:
    """The decision a run stored with itself (``META_KEY``), or None."""
    found = meta_extra.get(META_KEY)
    return found if isinstance(found, dict) else None
