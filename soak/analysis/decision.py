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
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from soak.analysis.analyze import Analysis, DeviceResult, analyze_run, records_throughput
from soak.analysis.checks import (
    CLOCK_OF_UNIT,
    DeviceFacts,
    RetentionSplit,
    retention_split,
    split_by_cause,
)
from soak.analysis.equilibrium import OnlineDetector
from soak.analysis.held import HeldTelemetry, Steps, row_of
from soak.analysis.intervals import CONFIDENCE, Interval, mean_interval, ratio_interval, scaled
from soak.analysis.noise import Noise, noise
from soak.analysis.warmstart import warm_start
from soak.analysis.windows import (
    LiveWork,
    Window,
    WindowName,
    WindowStats,
    cold_window,
    final_window,
    steady_window,
    window_stats,
)
from soak.dataset import RunData, WorkColumns
from soak.fields import Columns, unread_reasons
from soak.model import DeviceInfo, EventKind, StopReason, Telemetry, WorkSample
from soak.profile import Profile, Windows
from soak.record import DECISION_KEY, JudgedCheck, RunRecord, StopDecision, StopRecord
from soak.units import pct, rate_unit, si

DECIDE_EVERY_S = 30.0  # one equilibrium check's worth of new data between two looks
MAX_S = 3000.0  # --max-minutes' default: no look after this much load
META_KEY = DECISION_KEY  # where the run keeps its decision (soak.record.StopDecision)


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

    def record(self) -> JudgedCheck:
        """As the run stores it (``soak.record.StopDecision``'s checks)."""
        return JudgedCheck(
            device=self.device,
            check=self.label,
            value=self.value,
            ci=None if self.interval is None else self.interval.half,
            floor=self.floor,
            unit=self.unit or None,
            outcome=str(self.outcome),
        )

    def as_json(self) -> dict[str, Any]:
        return self.record().to_json()


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

    def record(self, limit_s: float | None = None) -> StopDecision:
        """The decision as the run stores it (``soak.record.StopDecision``); ``limit_s``:
        the run stopped at its limit."""
        closest = self.closest
        return StopDecision(
            reason=self.reason(limit_s),
            decided=self.decided,
            decided_at_s=self.t_s if self.decided else None,
            load_s=self.load_s,
            confidence=CONFIDENCE,
            n_checks=len(self.judged),
            closest=None if closest is None else closest.record(),
            undecided=tuple(j.record() for j in self.undecided),
            checks=tuple(j.record() for j in self.judged),
            after_settled=self.after_settled() or None,
            settled_at_s=None if self.settled is None else self.settled.date_s,
            after_settled_s=None if self.settled is None else self.t_s - self.settled.date_s,
        )

    def after_settled(self) -> str:
        """How long the run went on after the last device settled, and why ("" where some
        device is not dated)."""
        return "" if self.settled is None else "went on " + self.settled.held(self.t_s)

    def as_json(self, limit_s: float | None = None) -> dict[str, Any]:
        """The stored record's JSON (``record(limit_s).to_json()``), kept for its callers."""
        return self.record(limit_s).to_json()


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
    dates = []
    for r in results:
        eq = r.facts.equilibrium
        if eq is None:
            return None
        judged = eq.scale.windows if eq.scale is not None else windows
        dates.append((r.index, eq.time_s, eq.confirmed_s, judged))
    return _settled(dates, load_start_s)


def _settled(
    dates: Iterable[tuple[int, float | None, float | None, Windows]],
    load_start_s: float | None,
) -> Settled | None:
    """``Settled`` from each device's (index, date, confirmation, the windows it is judged
    on), as the offline analysis or the online detectors hold them; None where one is not
    dated."""
    dated = []
    for index, date_s, confirmed_s, judged in dates:
        if date_s is None or confirmed_s is None:
            return None
        least = judged.min_steady_s
        ready = max(confirmed_s, date_s + least)
        dated.append((index, date_s, ready, confirmed_s >= date_s + least, judged))
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
    tele, work = data.telemetry[result.index], data.work.get(result.index, {})
    return judge_facts(result.facts, tele, work, analysis.profile)


def judge_facts(
    facts: DeviceFacts,
    tele: Columns,
    work: Mapping[str, Mapping[str, np.ndarray]],
    profile: Profile,
    steps: Steps | None = None,
) -> list[Judged]:
    """``judge_device`` on a device's facts and the series its windows were taken from;
    ``steps``: the clocks' steps over the whole run where ``tele`` holds only part of it
    (the live stop's held readings)."""
    if facts.cold is None:
        return []
    cold_noise = _noise(facts.cold.window, tele, work, steps)
    late = [(WindowName.STEADY, facts.steady)]
    if facts.final is not None and (
        facts.steady is None or facts.final.window != facts.steady.window
    ):
        late.append((WindowName.FINAL, facts.final))
    out: list[Judged] = []
    for label, stats in late:
        if stats is None:
            continue
        late_noise = _noise(stats.window, tele, work, steps)
        figures = _Figures(facts, label, stats, cold_noise, late_noise)
        if facts.records_throughput:
            for part in sorted(facts.units):
                out += figures.retention(part, CLOCK_OF_UNIT.get(facts.units[part]), profile)
                out += figures.floor(part, facts.workload, facts.units[part], profile)
        else:
            out += figures.clock_retention(profile)
    return out


# The fields whose step between readings a look reads (``_Figures.median``: the clocks).
STEP_KEYS = tuple(sorted({*CLOCK_OF_UNIT.values(), "sm_clock_mhz"}))


def _noise(
    window: Window,
    tele: Columns,
    work: Mapping[str, Mapping[str, np.ndarray]],
    steps: Steps | None,
) -> Noise:
    """The batch-means noise of a window; with ``steps``, the clocks' steps from them."""
    found = noise(window, None, tele, dict(work))  # type: ignore[arg-type]
    if steps is None:
        return found
    step = dict(found.step)
    step.update({key: steps.step(key) for key in steps.keys})
    return dataclasses.replace(found, step=step)


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


class LiveStop:
    """The sequential stop as a run goes: each look judged on what the online state holds,
    never on the store. The run's online equilibrium detectors date the devices and its
    ``LiveWork`` holds their work (both bounded by the windows); this holds what else a look
    reads (``HeldTelemetry``: the readings of the cold, steady and final windows, the
    baseline; ``Steps``: the clocks' steps). A look's work is bounded by the windows, not by
    the run's age. The live runner feeds it tick by tick (or a block at a time); ``replay``
    feeds it from a stored run's series, so a replayed stop falls where the live one did.

    A look (``decide``) is what ``decide`` makes of the run cut at ``t``: the same windows,
    statistics, noise and floors, with the equilibrium the online detector holds at ``t``
    (which dates a device as the offline pass does, from the checks made by ``t`` less the
    detector's lag)."""

    def __init__(
        self,
        profile: Profile,
        run: RunRecord,
        devices: Sequence[DeviceInfo],
        detectors: Mapping[int, OnlineDetector],
        work: Mapping[int, LiveWork],
        capabilities: Mapping[int, Mapping[str, str]] | None = None,
        every_s: float = DECIDE_EVERY_S,
    ) -> None:
        self.profile, self.run = profile, run
        self.devices = {d.index: d for d in devices}
        self.detectors, self.work = detectors, work
        self.unread = {
            d.index: unread_reasons(dict((capabilities or {}).get(d.index, {}))) for d in devices
        }
        self.held = {d.index: HeldTelemetry() for d in devices}
        self.steps = {d.index: Steps(STEP_KEYS) for d in devices}
        self.every_s = every_s
        self.next_look_s = -math.inf
        self.load_start_s: float | None = None  # the run's (its baseline ends there)

    def load_started(self, t_s: float) -> None:
        self.load_start_s = t_s
        for held in self.held.values():
            held.run_load_start_s = t_s

    def add_reading(self, reading: Telemetry) -> None:
        """One device's reading of a tick (readings that cannot be true left out)."""
        row = row_of(reading)
        self.held[reading.device].add_row(row)
        self.steps[reading.device].add_row(row)

    def add_columns(self, device: int, columns: Mapping[str, np.ndarray]) -> None:
        """Many readings of one device as columns (``t_s`` and any fields)."""
        self.held[device].add_columns(columns)
        self.steps[device].add(columns)

    def forget(self, t_s: float) -> None:
        """Drop what no look from ``t_s`` on can read (in batches: cheap per tick)."""
        windows = self.profile.windows
        for index, held in self.held.items():
            detector = self.detectors[index]
            keep_from = t_s - max(detector.reach_s, windows.steady_length_s)
            start, date = self.work[index].load_start_s, detector.equilibrium_s
            keep = [] if start is None else [cold_window(start, windows)]
            if start is not None and date is not None:
                keep.append(steady_window(date, start, math.inf, windows))
            held.forget(keep_from, keep)

    def rows_held(self) -> int:
        return sum(len(h) for h in self.held.values())

    def due(self, active: Collection[int], t_s: float) -> bool:
        """Whether a look is due: every active device dated, each with its least steady
        window (the profile's, scaled with the windows it is judged on: equilibrium rule,
        line 16), and no look in the last ``every_s``."""
        if t_s < self.next_look_s:
            return False
        found = [self.detectors[i] for i in active]
        return all(
            d.equilibrium_s is not None and t_s - d.equilibrium_s >= d.judged_windows.min_steady_s
            for d in found
        )

    def decide(self, active: Collection[int], t_s: float) -> Decision:
        """The look at ``t_s`` on the ``active`` devices; the next is due ``every_s`` on."""
        self.next_look_s = t_s + self.every_s
        load_s = None if self.load_start_s is None else t_s - self.load_start_s
        judged: list[Judged] = []
        blocked = ""
        for index in sorted(active):
            found = self._facts(index)
            if found is None:
                blocked = blocked or f"device {index} has no equilibrium date"
                continue
            facts, tele, work = found
            blocked = blocked or self._blocked(index, facts)
            judged += judge_facts(facts, tele, work, self.profile, self.steps[index])
        dates = [
            (i, d.equilibrium_s, d.confirmed_s, d.judged_windows)
            for i in sorted(active)
            for d in (self.detectors[i],)
        ]
        return Decision(t_s, load_s, tuple(judged), blocked, _settled(dates, self.load_start_s))

    def _blocked(self, index: int, facts: DeviceFacts) -> str:
        least = self.detectors[index].judged_windows.min_steady_s
        if self.detectors[index].equilibrium_s is None:
            return f"device {index} has no equilibrium date"
        steady = facts.steady
        if steady is None or steady.window.length_s < least:
            held = 0.0 if steady is None else steady.window.length_s
            return f"device {index} holds {held:.0f} s of steady window of the {least:g} s asked"
        return ""

    def _facts(
        self, index: int
    ) -> tuple[DeviceFacts, Columns, dict[str, dict[str, np.ndarray]]] | None:
        """A device's facts as a look judges them (its windows' statistics over the rows
        held); None before its load has a start and an end."""
        live, windows = self.work[index], self.profile.windows
        work = live.columns()
        start = live.load_start_s
        ends = [float(w["t_end_s"].max()) for w in work.values() if w["t_end_s"].size]
        if start is None or not ends or max(ends) <= start:
            return None
        end = max(ends)
        tele = self.held[index].columns()
        date = self.detectors[index].equilibrium_s
        unread = self.unread[index]
        cold = window_stats(cold_window(start, windows), tele, work, unread)
        steady = window_stats(steady_window(date, start, end, windows), tele, work, unread)
        final = window_stats(final_window(date, start, end, windows), tele, work, unread)
        warm = warm_start(tele, self.load_start_s, steady, self.run.imported)
        own_work = True
        units = live.units
        facts = DeviceFacts(
            index=index,
            name=self.devices[index].name,
            units={part: units.get(part, "") for part in work},
            cold=None if warm is not None and warm.begun else cold,
            steady=steady,
            whole=None,
            final=final,
            equilibrium=None,
            slowdown_temp_c=self.devices[index].slowdown_temp_c,
            workload=self.run.workload,
            records_throughput=records_throughput(self.run, own_work),
            load_start_s=start,
        )
        return facts, tele, work


def digest_work(
    t_s: float,
    samples: Sequence[WorkSample],
    detectors: Mapping[int, OnlineDetector],
    live_work: Mapping[int, LiveWork],
    started: dict[int, float],
) -> None:
    """A tick's work samples into the online state, as the live runner takes them: each
    device's ``LiveWork``, its load start once its first work is done (``started``; the
    detector starts there), and the detector's rates."""
    for s in samples:
        if s.device in live_work:
            live_work[s.device].add(s.part, s.unit, s.t_start_s, s.t_end_s, s.work)
    for index, work in live_work.items():  # what no live figure can need any more
        detector = detectors[index]
        work.forget(t_s - detector.reach_s, detector.equilibrium_s)
    first: dict[int, float] = {}  # devices whose first work arrives now: its end
    for s in samples:
        if s.device not in started and s.t_end_s > s.t_start_s:
            first[s.device] = max(first.get(s.device, s.t_end_s), s.t_end_s)
    for device, t_end in first.items():
        # the device's load starts once its first step is done, every part of it
        # (warm-up before it), as in the offline analysis
        if device in detectors:
            started[device] = t_end
            detectors[device].start(t_end)
    for s in samples:
        detector = detectors.get(s.device)
        if detector is None or s.t_end_s <= s.t_start_s:
            continue
        detector.add_rate(s.part, (s.t_start_s + s.t_end_s) / 2, s.rate)


def digest_work_columns(
    t_s: float,
    work: Sequence[WorkColumns],
    detectors: Mapping[int, OnlineDetector],
    live_work: Mapping[int, LiveWork],
    started: dict[int, float],
) -> None:
    """``digest_work`` of many ticks' samples at once (each device's per part as columns,
    ``t_s`` the last tick): the same live figures and detectors' rates. A device whose load
    starts here starts at its first tick's samples, as tick by tick."""
    for part in work:
        if part.device in live_work:
            live_work[part.device].add_columns(
                part.part, part.unit, part.t_start_s, part.t_end_s, part.work
            )
    for index, held in live_work.items():
        detector = detectors[index]
        held.forget(t_s - detector.reach_s, detector.equilibrium_s)
    first: dict[int, tuple[float, float]] = {}  # device -> (its first tick, latest end there)
    for part in work:
        if part.device in started or part.device not in detectors:
            continue
        took = np.flatnonzero(part.t_end_s > part.t_start_s)
        if took.size:
            tick = float(part.t_end_s[took[0]])
            held = first.get(part.device)
            if held is None or tick < held[0]:
                first[part.device] = (tick, tick)
            elif tick == held[0]:
                first[part.device] = (tick, max(held[1], tick))
    for device, (_, t_end) in first.items():
        started[device] = t_end
        detectors[device].start(t_end)
    for part in work:
        detector = detectors.get(part.device)
        if detector is None:
            continue
        took = part.t_end_s > part.t_start_s
        if took.any():
            t0, t1 = part.t_start_s[took], part.t_end_s[took]
            detector.add_rates(part.part, (t0 + t1) / 2, part.work[took] / (t1 - t0))


def replay(
    data: RunData,
    profile: Profile,
    analysis: Analysis | None = None,
    step_s: float = DECIDE_EVERY_S,
    limit_s: float = MAX_S,
) -> Decision | None:
    """Where the sequential stop would have fallen on a stored run: its series fed, tick
    by tick, to the online machinery the live run uses (``LiveStop``, the equilibrium
    detectors, ``LiveWork``), with a look every ``step_s`` once every device that worked
    and was not lost is dated with its least steady window; the first decided look, or None
    where none is decided before the end or ``limit_s`` of load (``--max-minutes``).
    ``analysis``, the whole run's, lets a run with a device never dated skip the replay."""
    if analysis is not None and not _may_stop(analysis, profile):
        return None
    meta = data.meta
    detectors = {d.index: OnlineDetector(profile.windows) for d in data.devices}
    live_work = {d.index: LiveWork(profile.windows) for d in data.devices}
    stop = LiveStop(
        profile, meta.run, data.devices, detectors, live_work, data.capabilities, step_s
    )
    if meta.load_start_s is not None:
        stop.load_started(meta.load_start_s)
    feed = StoredFeed(data)
    lost = {e.device: e.t_s for e in data.events if e.kind is EventKind.DEVICE_LOST}
    end = feed.end_s if meta.load_start_s is None else min(feed.end_s, meta.load_start_s + limit_s)
    started: dict[int, float] = {}
    for t in feed.times:
        if t > end:
            break
        rows, samples = feed.upto(t)
        for index, columns in rows.items():
            stop.add_columns(index, columns)
            detector = detectors[index]
            for row in zip(*(columns[k] for k in _DETECTED), strict=True):
                detector.add_telemetry(*row)
        digest_work(t, samples, detectors, live_work, started)
        for detector in detectors.values():
            detector.update(t)
        stop.forget(t)
        active = {i for i in started if not (i in lost and lost[i] <= t)}
        if active and stop.due(active, t):
            decision = stop.decide(active, t)
            if decision.decided:
                return decision
    return None


_DETECTED = ("t_s", "temp_c", "power_w", "sm_clock_mhz")  # what the detector reads


class StoredFeed:
    """A stored run's series in the order a live run took them: at each tick (the time of
    a reading), every device's readings since the last and the work samples that ended by
    it."""

    def __init__(self, data: RunData) -> None:
        self.tele: dict[int, Columns] = {}
        self.samples: list[WorkSample] = []
        for info in data.devices:
            series = data.device(info.index)
            self.tele[info.index] = series.telemetry
            for part, w in series.work.items():
                unit = data.units.get(part, "")
                for t0, t1, done in zip(
                    w["t_start_s"].tolist(),
                    w["t_end_s"].tolist(),
                    w["work"].tolist(),
                    strict=True,
                ):
                    self.samples.append(WorkSample(info.index, t0, t1, part, done, unit))
        self.samples.sort(key=lambda s: s.t_end_s)
        stamps = [c.t_s for c in self.tele.values() if c.t_s.size]
        self.times = np.unique(np.concatenate(stamps)).tolist() if stamps else []
        ends = [s.t_end_s for s in self.samples[-1:]]
        self.end_s = max([*self.times[-1:], *ends], default=-math.inf)
        self._next_row = dict.fromkeys(self.tele, 0)
        self._next_sample = 0

    def upto(self, t_s: float) -> tuple[dict[int, dict[str, np.ndarray]], list[WorkSample]]:
        rows = {}
        for index, tele in self.tele.items():
            lo = self._next_row[index]
            hi = int(np.searchsorted(tele.t_s, t_s, side="right"))
            if hi > lo:
                rows[index] = {name: tele[name][lo:hi] for name in tele}
                self._next_row[index] = hi
        lo = self._next_sample
        hi = lo
        while hi < len(self.samples) and self.samples[hi].t_end_s <= t_s:
            hi += 1
        self._next_sample = hi
        return rows, self.samples[lo:hi]


def _may_stop(analysis: Analysis, profile: Profile) -> bool:
    """Whether the whole run's detection dates every device that worked and was not lost
    (the rule reads only back: a device never dated by the end is never dated sooner)."""
    for r in analysis.devices:
        if r.load_start_s is None or r.facts.lost:
            continue
        if _earliest(r, least_steady_s(r, profile.windows)) is None or r.end_s is None:
            return False
    return True


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
