"""From a run's dataset to per-device results, the verdict and the diagnosis.

The analysis reads each device's series once (``RunData.device``: one at a time, from
the store or held) and keeps of it only what it found (``_DevicePass``: facts, noise,
quality, the headroom model, a freeze the runner's watch did not name); what compares the
devices (the checks, the diagnosis, the ddp server, the verdict) runs on those. A ddp run's
server windows depend on every device's equilibrium, so its steps are read once more then.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from soak.analysis.checks import (
    CounterSpan,
    DeviceFacts,
    Finding,
    HwEpisode,
    Status,
    run_checks,
)
from soak.analysis.contention import (
    WHOLE,
    Contention,
    foreign_mask,
    foreign_processes,
    window_contention,
)
from soak.analysis.ddp_steps import (
    SyncFacts,
    split_loss,
    sync_checks,
    sync_facts,
    window_steps,
)
from soak.analysis.diagnosis import Peers, diagnose, peers_of
from soak.analysis.equilibrium import Equilibrium, Series, Signals, detect
from soak.analysis.headroom import (
    DeviceModel,
    Headroom,
    device_headroom,
    headroom_checks,
    inlet_missing,
    inlet_series,
    run_headroom,
)
from soak.analysis.noise import Noise, noise
from soak.analysis.warmstart import warm_start
from soak.analysis.windows import (
    Window,
    WindowName,
    WindowStats,
    cold_window,
    final_window,
    load_start,
    steady_window,
    window_stats,
)
from soak.dataset import (
    DeviceSeries,
    FreezeEvent,
    RunData,
    WorkerEnd,
    WorkRates,
    cross_device_mismatch,
    work_rates,
    xid_code,
)
from soak.fields import FOLLOWED, Columns, unread_reasons
from soak.model import (
    HW_REASONS,
    DeviceInfo,
    Event,
    EventKind,
    StopReason,
    Verdict,
    WorkerOutcome,
)
from soak.profile import Profile, Windows
from soak.record import RunMeta, RunRecord, StopRecord
from soak.validity import (
    COUNTERS,
    FROZEN_S,
    MUST_MOVE,
    Frozen,
    Implausible,
    Quality,
    Reset,
    counter_resets,
    frozen_spans,
    gaps,
    missing_s,
    unreset,
)

FOREIGN_NONE = "the imported trace holds no throughput for this device"
# The stops after which a run is complete. Any other (interrupted, error, a reason this soak
# does not know, written by a newer one) leaves it incomplete: never a PASS on it.
COMPLETE_STOPS = frozenset({StopReason.DURATION, StopReason.STEADY})


@dataclass(frozen=True, slots=True)
class DeviceResult:
    info: DeviceInfo
    facts: DeviceFacts
    load_start_s: float | None
    end_s: float | None
    checks: list[Finding]
    verdict: Verdict
    diagnosis: str  # one of diagnosis.CAUSES
    diagnosis_evidence: tuple[str, ...] = ()
    # From the load's launch to this device's load start: the worker's imports, set-up,
    # calibration and first step (CUDA context, autotuning). None: not measured.
    warmup_s: float | None = None
    noise: Noise | None = None  # of the steady figures (batch means); None without a window
    quality: Quality | None = None  # how far its readings can be trusted (soak.validity)

    @property
    def index(self) -> int:
        return self.info.index


def merge_windows(results: list[Finding]) -> list[Finding]:
    """Join each result about the final window to the result of the same check, device,
    status and part about the steady window that says the same with other numbers: one row
    of the report naming both windows, where two rows would read as one failure listed
    twice."""
    steady: dict[tuple, int] = {}
    out: list[Finding] = []
    for c in results:
        key = (c.check, c.device, c.status, c.part, _subject(c))
        if c.window is WindowName.STEADY:
            steady[key] = len(out)
        elif c.window is WindowName.FINAL and key in steady:
            at = steady.pop(key)
            out[at] = replace(out[at], message=_both(out[at].message, c.message))
            continue
        out.append(c)
    return out


def _subject(c: Finding) -> str:
    """What a result's message says with its window's name and its numbers left out."""
    text = c.message.replace(c.window, "W", 1) if c.window is not None else c.message
    return re.sub(r"\d[\d.,]*", "#", text)


_CLAUSE_END = re.compile(r":\s|;\s|\s\(")


def _both(steady: str, final: str) -> str:
    """One message for both windows: the steady one whole, the final one's first clause
    that holds a number (its own headline figures; what follows says the same as the
    steady one's); once where both say the same."""
    if final == steady:
        return steady
    for end in _CLAUSE_END.finditer(final):
        if re.search(r"\d", final[: end.start()]):
            return f"{steady}; {final[: end.start()]}"
    return f"{steady}; {final}"


@dataclass(frozen=True, slots=True)
class Analysis:
    meta: RunMeta
    profile: Profile
    devices: list[DeviceResult]
    server_checks: list[Finding]
    verdict: Verdict
    stop_reason: StopReason | str
    events: list[Event] = field(default_factory=list)
    capabilities: dict[int, dict[str, str]] = field(default_factory=dict)
    units: dict[str, str] = field(default_factory=dict)
    sync: SyncFacts | None = None  # --workload ddp: the server's synchronous steps
    headroom: Headroom | None = None  # thermal headroom at the design inlet (BMC inlet)
    primary_part: str | None = None  # the part the headline figures are of
    sync_losses: tuple[SyncLoss, ...] = ()  # for every workload part, by name

    @property
    def run(self) -> RunRecord:
        """What the run recorded at its start (every field None where it recorded nothing)."""
        return self.meta.run

    @property
    def stop(self) -> StopRecord | None:
        """How the load stopped; None: no stop was recorded (the coordinator died)."""
        return self.meta.stop

    @property
    def checks(self) -> list[Finding]:
        return [c for d in self.devices for c in d.checks] + self.server_checks

    @property
    def reasons(self) -> list[Finding]:
        """Every failing, incomplete and warning result, failures first. A check that
        could not run for want of a signal is not a reason: see ``not_checked``."""
        order = {Status.FAIL: 0, Status.INCOMPLETE: 1, Status.WARN: 2}
        bad = [c for c in self.checks if c.status in order]
        return sorted(
            bad, key=lambda c: (order[c.status], c.device if c.device is not None else -1)
        )

    @property
    def not_checked(self) -> list[Finding]:
        """Checks that could not run because a signal is not available, each once."""
        return [c for c in self.checks if c.status is Status.NOT_CHECKED]

    @property
    def sync_loss(self) -> SyncLoss:
        """The synchronous loss of the primary part (``primary_part``)."""
        found = (loss for loss in self.sync_losses if loss.part == self.primary_part)
        return next(found, SyncLoss(self.primary_part))


@dataclass(frozen=True, slots=True)
class SyncLoss:
    """What the slowest device costs a synchronous job in one workload part: 1 − min/mean of
    the devices' steady throughput, and which device that is; None where fewer than two
    devices measured a steady throughput or none did any work."""

    part: str | None
    loss: float | None = None
    slowest: int | None = None


def sync_loss(part: str | None, devices: Sequence[DeviceResult]) -> SyncLoss:
    rates = {
        d.index: d.facts.steady.throughput.get(part or "")
        for d in devices
        if d.facts.steady is not None
    }
    rates = {i: r for i, r in rates.items() if r is not None}
    mean = float(np.mean(list(rates.values()))) if rates else 0.0
    if len(rates) < 2 or mean <= 0:  # no work anywhere: nothing to lose
        return SyncLoss(part)
    slowest = min(rates, key=lambda i: rates[i])
    return SyncLoss(part, 1.0 - rates[slowest] / mean, slowest)


def primary_part(units: Mapping[str, str]) -> str | None:
    """The part a run's headline figures are of: GEMM, else training, else memory."""
    parts = list(units)
    for preferred in ("gemm", "train", "membw"):
        if preferred in parts:
            return preferred
    return parts[0] if parts else None


def _load_span(
    work: Mapping[str, Mapping[str, np.ndarray]], tele_t: np.ndarray, meta: RunMeta
) -> tuple[float | None, float | None]:
    """A device's load start and end (its last work ended). Its load starts when its first
    unit of work is complete, of every part it runs: what comes before (imports, set-up,
    calibration, the first step's compilation or autotuning) is warm-up, never counted as
    load."""
    first = load_start([float(w["t_end_s"].min()) for w in work.values() if w["t_end_s"].size])
    ends = [w["t_end_s"].max() for w in work.values() if w["t_end_s"].size]
    if first is not None:
        return first, float(max(ends))
    start = meta.load_start_s
    end = None if meta.stop is None else meta.stop.load_stop_s
    if end is None and tele_t.size:
        end = float(tele_t[-1])
    return start, end


def _counter(values: np.ndarray) -> CounterSpan:
    finite = values[np.isfinite(values)]
    if not finite.size:
        return CounterSpan(None, None, None)
    return CounterSpan(float(finite[0]), float(finite[-1]), float(finite.max()))


def _worker_end(events: Sequence[Event]) -> WorkerEnd | None:
    """How the device's worker ended: its last outcome event; None where it has none."""
    ends = [end for e in events if (end := WorkerEnd.of(e)) is not None]
    return ends[-1] if ends else None


def _outcome(end: WorkerEnd | None) -> tuple[WorkerOutcome | None, str]:
    if end is None:
        return None, ""
    try:
        outcome = WorkerOutcome(end.outcome)
    except ValueError:
        return WorkerOutcome.CRASHED, f"unknown outcome {end.outcome!r}"
    return outcome, end.detail


def hw_episodes(
    t: np.ndarray, reasons: np.ndarray, unread: int = 0
) -> tuple[HwEpisode, ...] | None:
    """Stretches of consecutive readings with a HW protection reason bit set; None where no
    clock reason was readable, or none of the HW ones (``unread``: the bits a log did not
    hold). Each lasts to its last reading plus one reading interval."""
    readable = np.isfinite(reasons)
    read = int(HW_REASONS) & ~unread
    if not readable.any() or not read:
        return None
    bits = np.where(readable, reasons, 0).astype(np.int64) & read
    on = bits != 0
    if not on.any():
        return ()
    step = float(np.median(np.diff(t))) if t.size > 1 else 1.0
    edges = np.flatnonzero(np.diff(np.concatenate(([0], on.view(np.int8), [0]))))
    out = []
    for first, stop in zip(edges[::2], edges[1::2], strict=True):
        seen = int(np.bitwise_or.reduce(bits[first:stop]))
        out.append(HwEpisode(float(t[first]), float(t[stop - 1]) + step, seen))
    return tuple(out)


def records_throughput(run: RunRecord, any_work: bool = True) -> bool:
    """Whether the run records throughput by design. A telemetry-only import says it does
    not (``run.records_throughput`` false); an imported run (backend ``import``, or a
    ``source`` record) that does not say is taken to record none when it holds no work at
    all. A live run always does, so that a worker that did nothing still fails."""
    if run.records_throughput is not None:
        return run.records_throughput
    return any_work or not run.imported


def _idle_temp(tele: Columns, start: float | None) -> float | None:
    if start is None:
        return None
    before = tele.temp_c[(tele.t_s < start) & np.isfinite(tele.temp_c)]
    return float(np.median(before)) if before.size else None


def _power_limit(steady: WindowStats | None, info: DeviceInfo) -> float | None:
    """The enforced power limit over the steady window, or as probed at the start."""
    if steady is not None and steady.median.power_limit_w is not None:
        return steady.median.power_limit_w
    return info.power_limit_w


@dataclass(frozen=True, slots=True)
class _Windows:
    """A device's windows over its load, and its equilibrium (None: no load measured)."""

    equilibrium: Equilibrium | None = None
    cold: WindowStats | None = None
    steady: WindowStats | None = None
    whole: WindowStats | None = None
    final: WindowStats | None = None


def _windows(
    start: float | None,
    end: float | None,
    tele: Columns,
    work: Mapping[str, Mapping[str, np.ndarray]],
    rates: Mapping[str, WorkRates],
    windows: Windows,
    unread: int = 0,
) -> _Windows:
    """The equilibrium of a device's load from ``start`` to ``end``, and its cold, steady,
    whole and final windows' statistics (``unread``: the reason bits not read)."""
    if start is None or end is None or end <= start:
        return _Windows()
    t = tele.t_s
    signals = Signals(
        Series(t, tele.temp_c),
        Series(t, tele.power_w),
        Series(t, tele.sm_clock_mhz),
        {part: Series(r.t_s, r.rate) for part, r in rates.items()},
    )
    equilibrium = detect(start, end, signals, windows)
    return _Windows(
        equilibrium,
        window_stats(cold_window(start, windows), tele, work, unread),
        window_stats(steady_window(equilibrium.time_s, start, end, windows), tele, work, unread),
        window_stats(Window(start, end), tele, work, unread),
        window_stats(final_window(equilibrium.time_s, start, end, windows), tele, work, unread),
    )


@dataclass(frozen=True, slots=True)
class _Verified:
    checked: int = 0
    failed: int = 0
    max_error: float | None = None


def _verified(work: Mapping[str, Mapping[str, np.ndarray]], mine: Sequence[Event]) -> _Verified:
    """The device's result checks: made, failed, and the largest error of a failed one."""
    verified = np.concatenate([w["verified"] for w in work.values()]) if work else np.empty(0)
    errors = np.concatenate([w["verify_error"] for w in work.values()]) if work else np.empty(0)
    failed_errors = errors[(verified == 0) & np.isfinite(errors)]
    # A failed check arrives twice, as a sample with verified False and as an event: the
    # larger count stands, so a failure a sample did not record (a store written before
    # mix's GPU rows carried their checks) still counts. The cross-device comparison has
    # no sample, so its events add to the count.
    failed_events = [e for e in mine if e.kind is EventKind.VERIFICATION_FAILED]
    mismatches = [e for e in failed_events if cross_device_mismatch(e)]
    failed = max(int(np.sum(verified == 0)), len(failed_events) - len(mismatches))
    checked = max(int(np.sum(np.isfinite(verified))), failed)
    return _Verified(
        checked,
        failed + len(mismatches),
        float(failed_errors.max()) if failed_errors.size else None,
    )


def device_facts(
    info: DeviceInfo,
    tele: Columns,
    work: Mapping[str, Mapping[str, np.ndarray]],
    units: dict[str, str],
    events: Sequence[Event],
    meta: RunMeta,
    profile: Profile,
    incomplete: bool,
    capabilities: dict[str, str] | None = None,
    rates: Mapping[str, WorkRates] | None = None,
) -> tuple[DeviceFacts, float | None, float | None]:
    start, end = _load_span(work, tele.t_s, meta)
    if rates is None:
        rates = {part: work_rates(w) for part, w in work.items()}
    unread = unread_reasons(capabilities)
    w = _windows(start, end, tele, work, rates, profile.windows, unread)
    # A trace begun under load has no cold window (soak.analysis.warmstart, rule 1).
    warm = (
        warm_start(tele, meta.load_start_s, w.steady, meta.run.imported)
        if w.cold is not None
        else None
    )
    cold_stats = None if warm is not None and warm.begun else w.cold
    mask = foreign_mask(tele)
    named = (
        (WindowName.COLD, cold_stats),
        (WindowName.STEADY, w.steady),
        (WindowName.FINAL, w.final),
    )
    contention: dict[str, Contention] = {
        label: window_contention(stats.window, tele, work, mask)
        for label, stats in (*named, (WHOLE, w.whole))
        if stats is not None
    }
    mine = [e for e in events if e.device == info.index]
    worker = _worker_end(mine)
    outcome, detail = _outcome(worker)
    verified = _verified(work, mine)
    # An imported trace may hold throughput for some devices and none for others (gpu-burn
    # prints a GPU's rate only once its first batch is done): for those, an absence of data,
    # never "no work was measured". A live run's worker that did nothing still fails.
    foreign = meta.run.imported
    own_work = any(w["t_end_s"].size for w in work.values())
    facts = DeviceFacts(
        index=info.index,
        name=info.name,
        units={part: units.get(part, "") for part in work},
        cold=cold_stats,
        steady=w.steady,
        whole=w.whole,
        final=w.final,
        equilibrium=w.equilibrium,
        slowdown_temp_c=info.slowdown_temp_c,
        run_incomplete=incomplete,
        counters={key: _counter(tele[key]) for key in FOLLOWED},
        xids=[xid_code(e) for e in mine if e.kind is EventKind.XID],
        outcome=outcome,
        outcome_detail=detail,
        outcome_phase=worker.phase if worker is not None else None,
        verification_checked=verified.checked,
        verification_failed=verified.failed,
        verification_max_error=verified.max_error,
        lost=any(e.kind is EventKind.DEVICE_LOST for e in mine),
        workload=meta.run.workload,
        power_limit_w=_power_limit(w.steady, info),
        default_power_limit_w=info.default_power_limit_w,
        hw_episodes=hw_episodes(tele.t_s, tele.clock_reasons, unread),
        reasons_unread=unread,
        warm_start=warm,
        max_operating_temp_c=info.max_operating_temp_c,
        load_start_s=start,
        # a trace begun under load has no warm-up in it: its first reading is judged
        warmup_end_s=(start if cold_stats is None else cold_stats.window.start_s)
        if w.cold is not None
        else None,
        # its own work stands for the run's: they differ only for a device without work,
        # which an import records no throughput for and a live run does, whatever the others
        records_throughput=records_throughput(meta.run, own_work) and (own_work or not foreign),
        throughput_note="" if own_work or not foreign else FOREIGN_NONE,
        foreign_load=foreign,
        capabilities=dict(capabilities or {}),
        idle_temp_c=_idle_temp(tele, start),
        contention=contention,
        foreign_processes=foreign_processes(events, info.index),
        clock_label=info.clock_label,
    )
    return facts, start, end


def telemetry_checks(events: Sequence[Event]) -> list[Finding]:
    """Frozen telemetry (``soak.validity``): a freeze seen live fails its device, as a lost
    device does; a freeze an import cut the judged load at warns (and leaves the run
    incomplete), since nothing after it is judged."""
    out = []
    for e in events:
        freeze = FreezeEvent.of(e)
        if freeze is not None:
            status = Status.FAIL if freeze.judged else Status.WARN
            out.append(Finding("telemetry", status, e.message, e.device))
    return out


def implausible_checks(
    implausible: Mapping[int, Sequence[Implausible]], facts: Sequence[DeviceFacts]
) -> list[Finding]:
    """Readings left out as impossible (``soak.validity``): a warning per device and field
    with their count and values, as a frozen sensor gets one; never a clean PASS on a
    sensor that reads −75 °C."""
    origins = {f.index: f.load_start_s for f in facts}
    out = []
    for index, found in sorted(implausible.items()):
        if not found:
            continue
        origin = origins.get(index)
        quality = Quality(0, tuple(found), origin_s=origin if origin is not None else 0.0)
        for line in quality.left_out():
            out.append(Finding("implausible", Status.WARN, line, index))
    return out


def _unseen_freeze(series: DeviceSeries, span: tuple[float | None, float | None]) -> Event | None:
    """The first frozen span under load (``soak.validity``, rule 2) of a device whose events
    name none: a store written without the runner's watch (the accuracy bench's records), or
    by a soak before it. The same rule, the same event."""
    start, end = span
    if start is None or end is None:
        return None
    tele = series.telemetry
    t = tele.t_s
    loaded = (t >= start) & (t <= end)
    found = frozen_spans(series.index, t, {n: tele[n] for n in MUST_MOVE}, loaded)
    if not found:
        return None
    first = _as_reached(found[0])
    text = first.describe(start)
    return Event(first.to_s, EventKind.TELEMETRY, text, series.index, first.as_dict())


def _is_freeze(e: Event) -> bool:
    return FreezeEvent.of(e) is not None


def _as_reached(span: Frozen) -> Frozen:
    """The span as the runner's watch reports it: when it first reached FROZEN_S."""
    return replace(span, to_s=span.from_s + FROZEN_S) if span.length_s > FROZEN_S else span


def _resets(tele: Columns) -> tuple[Reset, ...]:
    return tuple(r for name in COUNTERS for r in counter_resets(name, tele.t_s, tele[name]))


def _unreset(tele: Columns) -> Columns:
    return tele.replace(**{name: unreset(tele[name]) for name in COUNTERS})


def _quality(
    series: DeviceSeries,
    interval_s: float | None,
    facts: DeviceFacts,
    resets: tuple[Reset, ...],
    freezes: Sequence[Event],
) -> Quality:
    """What the analysis knows of one device's readings (``soak.validity``); ``freezes``:
    its frozen-telemetry events."""
    t = series.telemetry.t_s
    found = tuple(gaps(t, interval_s))
    found_freezes = (FreezeEvent.of(e) for e in freezes)
    frozen = tuple(f.span(series.index) for f in found_freezes if f is not None)

    def missing(stats: WindowStats | None) -> float:
        return 0.0 if stats is None else missing_s(found, stats.window.start_s, stats.window.end_s)

    return Quality(
        samples=int(t.size),
        implausible=series.implausible,
        gaps=found,
        frozen=frozen,
        resets=resets,
        missing_cold_s=missing(facts.cold),
        missing_steady_s=missing(facts.steady),
        origin_s=facts.load_start_s if facts.load_start_s is not None else 0.0,
    )


def _episodes(results: Sequence[DeviceResult]) -> list[Event]:
    """The event log's entries for what the analysis found in the readings: readings left
    out, gaps, counter resets (a freeze is an event already)."""
    out = []
    for d in results:
        q = d.quality
        if q is None:
            continue
        for line, first in zip(q.left_out(), _first_per_field(q.implausible), strict=True):
            out.append(Event(first, EventKind.TELEMETRY, line, d.index, {"episode": "implausible"}))
        for g in q.gaps:
            details = {"episode": "gap", "from_s": g.from_s, "to_s": g.to_s}
            text = g.describe(q.origin_s)
            out.append(Event(g.from_s, EventKind.TELEMETRY, text, d.index, details))
        for r in q.resets:
            details = {"episode": "reset", "field": r.field, "before": r.before, "after": r.after}
            text = r.describe(q.origin_s)
            out.append(Event(r.t_s, EventKind.TELEMETRY, text, d.index, details))
    return out


def _first_per_field(found: Sequence[Implausible]) -> list[float]:
    first: dict[str, float] = {}
    for f in found:
        first.setdefault(f.field, f.t_s)
    return list(first.values())


def _cut_at_freeze(e: Event) -> bool:
    freeze = FreezeEvent.of(e)
    return freeze is not None and not freeze.judged


def cross_device_checks(events: Sequence[Event]) -> list[Finding]:
    """Devices that computed the same fixed product and disagreed with no majority to blame
    one: the server computes wrong somewhere, which fails it."""
    out = []
    for e in events:
        if e.kind is EventKind.VERIFICATION_FAILED and e.device is None:
            out.append(Finding("cross_device", Status.FAIL, e.message, None))
    return out


@dataclass(frozen=True, slots=True)
class _DevicePass:
    """What the analysis keeps of one device's series once it has read them: the facts and
    the load's span, and what the results need besides (its counter resets, its freeze the
    runner's watch did not name, its steady noise, its quality, its headroom model)."""

    facts: DeviceFacts
    span: tuple[float | None, float | None]
    resets: tuple[Reset, ...]
    unseen_freeze: Event | None
    noise: Noise | None
    quality: Quality
    implausible: tuple[Implausible, ...]
    worked: bool
    headroom: DeviceModel | str | None  # None: no inlet read, nothing modelled


@dataclass(frozen=True, slots=True)
class _RunFacts:
    """What every device's pass needs of the run: its records, the profile, whether it is
    incomplete, and the inlet for the headroom (None where none was read)."""

    meta: RunMeta
    events: Sequence[Event]
    units: Mapping[str, str]
    capabilities: Mapping[int, dict[str, str]]
    profile: Profile
    incomplete: bool
    inlet: Mapping[str, np.ndarray] | None


def _device_pass(series: DeviceSeries, run: _RunFacts) -> _DevicePass:
    """One device's series read through once: everything the analysis needs of them."""
    resets = _resets(series.telemetry)
    if resets:  # the counts on either side of a reset are added
        series = replace(series, telemetry=_unreset(series.telemetry))
    tele, work, index = series.telemetry, series.work, series.index
    rates = {part: work_rates(w) for part, w in work.items()}
    facts, start, end = device_facts(
        series.info,
        tele,
        work,
        dict(run.units),
        run.events,
        run.meta,
        run.profile,
        run.incomplete,
        run.capabilities.get(index),
        rates,
    )
    freezes = [e for e in run.events if e.device == index and _is_freeze(e)]
    unseen = None
    if not run.meta.run.imported and not freezes:  # the watch's rule read offline
        unseen = _unseen_freeze(series, (start, end))
        freezes = [unseen] if unseen is not None else []
    steady_noise = None
    if facts.steady is not None:
        load = facts.whole.window if facts.whole is not None else None
        steady_noise = noise(facts.steady.window, load, tele, work)
    model = None
    if run.inlet is not None:
        model = device_headroom(series.info, facts, tele, work, run.inlet)
    return _DevicePass(
        facts,
        (start, end),
        resets,
        unseen,
        steady_noise,
        _quality(series, run.meta.run.interval_s, facts, resets, freezes),
        series.implausible,
        series.worked,
        model,
    )


def analyze_run(data: RunData, profile: Profile) -> Analysis:
    """Per-device facts, checks, verdicts and diagnoses, and the server's verdict: each
    device's series read once (one device at a time), then the devices compared."""
    meta = data.meta
    stop_reason = _stop_reason(meta.stop)
    # A store read back from damage may have lost any sample: never a PASS on what is left.
    incomplete = stop_reason not in COMPLETE_STOPS or meta.salvage is not None
    # An import whose log froze was cut where the freeze began: the record of the load
    # ended early, so nothing is accepted on it.
    incomplete = incomplete or any(_cut_at_freeze(e) for e in data.events)
    inlet = inlet_series(data.server_readings)
    missing = inlet_missing(inlet, meta.bmc)
    run = _RunFacts(
        meta,
        data.events,
        data.units,
        data.capabilities,
        profile,
        incomplete,
        inlet if missing is None else None,
    )
    # each device's series only while its pass runs: none is referenced when the next is read
    passes = {d.index: _device_pass(data.device(d.index), run) for d in data.devices}
    facts = [p.facts for p in passes.values()]
    spans = {index: p.span for index, p in passes.items()}
    unseen = [p.unseen_freeze for p in passes.values() if p.unseen_freeze is not None]
    events = data.events
    if not meta.run.imported:  # with the freezes the watch's rule finds offline, in time order
        events = sorted([*data.events, *unseen], key=lambda e: e.t_s)
    sync = _sync_facts(data, facts, spans, passes, profile)
    models = {i: p.headroom for i, p in passes.items() if p.headroom is not None}
    headroom = run_headroom(models, missing, profile.checks.design_inlet_c)
    implausible = {i: p.implausible for i, p in passes.items()}
    checks = _all_checks(events, implausible, facts, sync, headroom, profile)
    server_checks = [c for c in checks if c.device is None]
    peers = peers_of(facts)
    results = [
        _device_result(
            info,
            passes[info.index],
            [c for c in checks if c.device == info.index],
            peers,
            incomplete,
            meta.load_start_s,
            profile.checks.min_throughput_retention,
        )
        for info in data.devices
    ]
    units = data.units
    part = primary_part(units)
    return Analysis(
        meta,
        profile,
        results,
        server_checks,
        _verdict(results, server_checks, incomplete),
        stop_reason,
        sorted([*events, *_episodes(results)], key=lambda e: e.t_s),
        data.capabilities,
        units,
        sync,
        headroom,
        part,
        tuple(sync_loss(p, results) for p in sorted(units)),
    )


def _all_checks(
    events: Sequence[Event],
    implausible: Mapping[int, Sequence[Implausible]],
    facts: Sequence[DeviceFacts],
    sync: SyncFacts | None,
    headroom: Headroom,
    profile: Profile,
) -> list[Finding]:
    """Every check of the devices and of the server."""
    checks = run_checks(facts, profile) + cross_device_checks(events)
    checks += telemetry_checks(events) + implausible_checks(implausible, facts)
    checks += sync_checks(sync, events, profile, {f.index: f.name for f in facts})
    return checks + headroom_checks(headroom, profile.checks.min_headroom_c)


def _device_result(
    info: DeviceInfo,
    found: _DevicePass,
    mine: list[Finding],
    peers: Peers,
    incomplete: bool,
    launched: float | None,
    floor: float = 0.95,
) -> DeviceResult:
    """One device's verdict on its checks, its diagnosis (``floor``: the profile's
    retention floor) and warm-up (``launched``: when the load was launched)."""
    failed = any(c.status is Status.FAIL for c in mine)
    # a check the device could not be judged on alone (contention) accepts nothing
    unjudged = incomplete or any(c.status is Status.INCOMPLETE for c in mine)
    verdict = Verdict.FAIL if failed else Verdict.INCOMPLETE if unjudged else Verdict.PASS
    start, end = found.span
    cause = diagnose(found.facts, mine, peers, floor)
    known = found.worked and start is not None and launched is not None
    return DeviceResult(
        info,
        found.facts,
        start,
        end,
        mine,
        verdict,
        cause.cause,
        cause.evidence,
        start - launched if known else None,  # type: ignore[operator]
        found.noise,
        found.quality,
    )


def _verdict(
    results: Sequence[DeviceResult], server_checks: Sequence[Finding], incomplete: bool
) -> Verdict:
    """The server's verdict: FAIL on any failure, INCOMPLETE where nothing failed but
    something could not be judged, else PASS; no device at all accepts nothing."""
    if not results:
        return Verdict.FAIL if not incomplete else Verdict.INCOMPLETE
    if any(r.verdict is Verdict.FAIL for r in results) or any(
        c.status is Status.FAIL for c in server_checks
    ):
        return Verdict.FAIL
    if incomplete or any(r.verdict is Verdict.INCOMPLETE for r in results):
        return Verdict.INCOMPLETE
    return Verdict.PASS


def _sync_facts(
    data: RunData,
    facts: Sequence[DeviceFacts],
    spans: Mapping[int, tuple[float | None, float | None]],
    passes: Mapping[int, _DevicePass],
    profile: Profile,
) -> SyncFacts | None:
    """The server's synchronous steps over the server's windows: cold from the first load
    start, steady after the last device's equilibrium (every device must have reached it),
    else the end of the run; the loss split by cause with the pace setter's clocks. The
    windows are the whole server's, so each device's steps are read (once) now, and only
    the steps in them kept; the pace setter's telemetry once more for its clocks."""
    starts = [s for s, _ in spans.values() if s is not None]
    ends = [e for _, e in spans.values() if e is not None]
    if not len(data.server_steps.get("t_end_s", ())) or not starts or not ends:
        return None
    start, end = min(starts), max(ends)
    times = [f.equilibrium.time_s if f.equilibrium else None for f in facts]
    eq = max(times) if times and all(t is not None for t in times) else None
    windows = profile.windows
    cold = cold_window(start, windows)
    steady = steady_window(eq, start, end, windows)
    ranks = {}
    for d in data.devices:  # a device with no steps recorded is no rank
        steps = data.device(d.index).sync_steps
        if "t_end_s" in steps:
            ranks[d.index] = window_steps(steps, (cold, steady))
        del steps  # one device's steps at a time
    sync = sync_facts(data.server_steps, ranks, cold, steady)
    if sync is None:
        return None
    group = data.meta.ddp_group  # a multi-node group: its global ranks, host and device
    if group is not None and group.ranks:
        sync = replace(sync, rank_of=group.this_node(), rank_labels=group.labels())
    setter = sync.local_device(sync.pace_setter)
    if setter is None or setter not in passes:
        return split_loss(sync, None, profile)
    tele = data.device(setter).telemetry
    return split_loss(sync, _unreset(tele) if passes[setter].resets else tele, profile)


def _stop_reason(stop: StopRecord | None) -> StopReason | str:
    """The stop record's reason; none at all means the coordinator died before it could
    record one (an error). A reason this soak does not know is kept as it was written."""
    if stop is None or stop.reason is None:
        return StopReason.ERROR
    return stop.reason
