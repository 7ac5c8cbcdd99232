"""From a run store to per-device results, the verdict and the diagnosis."""

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
from soak.analysis.ddp_steps import SyncFacts, split_loss, sync_checks, sync_facts
from soak.analysis.diagnosis import Peers, diagnose, peers_of
from soak.analysis.equilibrium import Equilibrium, Series, Signals, detect
from soak.analysis.headroom import Headroom, headroom_checks, run_headroom
from soak.analysis.noise import Noise, noise
from soak.analysis.warmstart import warm_start
from soak.analysis.windows import (
    Window,
    WindowName,
    WindowStats,
    WorkRates,
    cold_window,
    final_window,
    load_start,
    steady_window,
    window_stats,
    work_rates,
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
from soak.store import RunStore
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
    rates: dict[str, WorkRates] = field(default_factory=dict)  # per part: each sample's rate

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
    work: dict[str, dict[str, np.ndarray]], tele_t: np.ndarray, meta: RunMeta
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


def _outcome(events: Sequence[Event]) -> tuple[WorkerOutcome | None, str]:
    ends = [e for e in events if e.kind is EventKind.WORKER_OUTCOME]
    if not ends:
        return None, ""
    last = ends[-1]
    try:
        outcome = WorkerOutcome(last.details.get("outcome"))
    except ValueError:
        return WorkerOutcome.CRASHED, f"unknown outcome {last.details.get('outcome')!r}"
    return outcome, last.details.get("detail", "") or ""


def _outcome_phase(events: Sequence[Event]) -> str | None:
    """Where the worker's load ended abnormally: "setup", "run" or "stop"; None if unsaid."""
    ends = [e for e in events if e.kind is EventKind.WORKER_OUTCOME]
    phase = ends[-1].details.get("phase") if ends else None
    return phase if isinstance(phase, str) else None


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
    if steady is not None and steady.median.get("power_limit_w") is not None:
        return steady.median["power_limit_w"]
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
    work: dict[str, dict[str, np.ndarray]],
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


def _verified(work: dict[str, dict[str, np.ndarray]], mine: Sequence[Event]) -> _Verified:
    """The device's result checks: made, failed, and the largest error of a failed one."""
    verified = np.concatenate([w["verified"] for w in work.values()]) if work else np.empty(0)
    errors = np.concatenate([w["verify_error"] for w in work.values()]) if work else np.empty(0)
    failed_errors = errors[(verified == 0) & np.isfinite(errors)]
    # A failed check arrives twice, as a sample with verified False and as an event: the
    # larger count stands, so a failure a sample did not record (a store written before
    # mix's GPU rows carried their checks) still counts. The cross-device comparison has
    # no sample, so its events add to the count.
    failed_events = [e for e in mine if e.kind is EventKind.VERIFICATION_FAILED]
    mismatches = [e for e in failed_events if e.details.get("check") == "cross_device_checksum"]
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
    work: dict[str, dict[str, np.ndarray]],
    units: dict[str, str],
    events: Sequence[Event],
    meta: RunMeta,
    profile: Profile,
    incomplete: bool,
    capabilities: dict[str, str] | None = None,
    any_work: bool = True,
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
    outcome, detail = _outcome(mine)
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
        xids=[int(e.details.get("code", -1)) for e in mine if e.kind is EventKind.XID],
        outcome=outcome,
        outcome_detail=detail,
        outcome_phase=_outcome_phase(mine),
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
        records_throughput=records_throughput(meta.run, any_work) and (own_work or not foreign),
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
        if e.kind is not EventKind.TELEMETRY or e.details.get("episode") != "frozen":
            continue
        judged = e.details.get("judged", True)
        out.append(
            Finding("telemetry", Status.FAIL if judged else Status.WARN, e.message, e.device)
        )
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


def _unseen_freezes(
    data: RunData, spans: dict[int, tuple[float | None, float | None]]
) -> list[Event]:
    """Frozen spans under load (``soak.validity``, rule 2) that no telemetry event names: a
    store written without the runner's watch (the accuracy bench's records), or by a soak
    before it. The same rule, the same event."""
    seen = {
        e.device
        for e in data.events
        if e.kind is EventKind.TELEMETRY and e.details.get("episode") == "frozen"
    }
    out = []
    for index, (start, end) in spans.items():
        tele = data.telemetry.get(index)
        if index in seen or start is None or end is None or tele is None:
            continue
        t = tele.t_s
        loaded = (t >= start) & (t <= end)
        columns = {n: tele[n] for n in MUST_MOVE}
        found = frozen_spans(index, t.tolist(), columns, loaded.tolist())
        if found:
            first = _as_reached(found[0])
            out.append(
                Event(
                    first.to_s, EventKind.TELEMETRY, first.describe(start), index, first.as_dict()
                )
            )
    return out


def _as_reached(span: Frozen) -> Frozen:
    """The span as the runner's watch reports it: when it first reached FROZEN_S."""
    return replace(span, to_s=span.from_s + FROZEN_S) if span.length_s > FROZEN_S else span


def _resets(tele: Columns) -> tuple[Reset, ...]:
    return tuple(r for name in COUNTERS for r in counter_resets(name, tele.t_s, tele[name]))


def _unreset(tele: Columns) -> Columns:
    return tele.replace(**{name: unreset(tele[name]) for name in COUNTERS})


def _quality(index: int, data: RunData, facts: DeviceFacts, resets: tuple[Reset, ...]) -> Quality:
    """What the analysis knows of one device's readings (``soak.validity``)."""
    t = data.telemetry[index].t_s
    found = tuple(gaps(t, data.meta.run.interval_s))
    frozen = tuple(
        Frozen(
            index,
            float(e.details["from_s"]),
            float(e.details["to_s"]),
            tuple((str(k), float(v)) for k, v in dict(e.details.get("values", {})).items()),
        )
        for e in data.events
        if e.kind is EventKind.TELEMETRY
        and e.device == index
        and e.details.get("episode") == "frozen"
    )

    def missing(stats: WindowStats | None) -> float:
        return 0.0 if stats is None else missing_s(found, stats.window.start_s, stats.window.end_s)

    return Quality(
        samples=int(t.size),
        implausible=tuple(data.implausible.get(index, ())),
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
    return (
        e.kind is EventKind.TELEMETRY
        and e.details.get("episode") == "frozen"
        and e.details.get("judged") is False
    )


def cross_device_checks(events: Sequence[Event]) -> list[Finding]:
    """Devices that computed the same fixed product and disagreed with no majority to blame
    one: the server computes wrong somewhere, which fails it."""
    out = []
    for e in events:
        if e.kind is EventKind.VERIFICATION_FAILED and e.device is None:
            out.append(Finding("cross_device", Status.FAIL, e.message, None))
    return out


@dataclass(frozen=True, slots=True)
class RunData:
    """A run's records in memory, as the store reads them back: what the analysis needs.
    The accuracy benchmark builds one straight from the simulated server, without a store."""

    meta: RunMeta
    devices: list[DeviceInfo]
    telemetry: dict[int, Columns]  # device -> its series (NaN: unread); a mapping is viewed
    work: dict[int, dict[str, dict[str, np.ndarray]]]  # device -> part -> column -> values
    units: dict[str, str]  # part -> unit of work
    events: list[Event]
    capabilities: dict[int, dict[str, str]] = field(default_factory=dict)
    sync_steps: dict[int, dict[str, np.ndarray]] = field(default_factory=dict)  # per device
    server_steps: dict[str, np.ndarray] = field(default_factory=dict)
    # readings stored as read and flagged impossible (left out of ``telemetry``), per device
    implausible: dict[int, list[Implausible]] = field(default_factory=dict)
    # the BMC's server-level series (inlet, chassis temperatures): name -> t_s, value
    server_readings: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        viewed = {i: Columns(t) for i, t in self.telemetry.items() if not isinstance(t, Columns)}
        if viewed:
            object.__setattr__(self, "telemetry", self.telemetry | viewed)

    @classmethod
    def from_store(cls, store: RunStore) -> RunData:
        infos = store.devices()
        return cls(
            meta=store.meta(),
            devices=infos,
            telemetry={d.index: store.telemetry(d.index) for d in infos},
            work={d.index: store.work(d.index) for d in infos},
            units=store.units(),
            events=store.events(),
            capabilities=store.capabilities(),
            sync_steps={d.index: store.sync_steps(d.index) for d in infos},
            server_steps=store.server_steps(),
            implausible={d.index: store.implausible(d.index) for d in infos},
            server_readings=store.server_readings(),
        )


def analyze(store: RunStore, profile: Profile) -> Analysis:
    """The analysis of a run store."""
    return analyze_run(RunData.from_store(store), profile)


def analyze_run(data: RunData, profile: Profile) -> Analysis:
    """Per-device facts, checks, verdicts and diagnoses, and the server's verdict."""
    resets = {i: _resets(tele) for i, tele in data.telemetry.items()}
    if any(resets.values()):  # the counts on either side of a reset are added
        data = replace(data, telemetry={i: _unreset(t) for i, t in data.telemetry.items()})
    meta = data.meta
    stop_reason = _stop_reason(meta.stop)
    # A store read back from damage may have lost any sample: never a PASS on what is left.
    incomplete = stop_reason not in COMPLETE_STOPS or meta.salvage is not None
    # An import whose log froze was cut where the freeze began: the record of the load
    # ended early, so nothing is accepted on it.
    incomplete = incomplete or any(_cut_at_freeze(e) for e in data.events)
    rates = {
        d.index: {part: work_rates(w) for part, w in data.work.get(d.index, {}).items()}
        for d in data.devices
    }
    facts, spans = _all_facts(data, rates, profile, incomplete)
    if not meta.run.imported:  # the freeze watch's rule read offline, as the runner reads it
        events = sorted([*data.events, *_unseen_freezes(data, spans)], key=lambda e: e.t_s)
        data = replace(data, events=events)
    sync = _sync_facts(data, facts, spans, profile)
    headroom = run_headroom(
        data.devices,
        facts,
        data.telemetry,
        data.work,
        data.server_readings,
        meta.bmc,
        profile.checks.design_inlet_c,
    )
    checks = _all_checks(data, facts, sync, headroom, profile)
    server_checks = [c for c in checks if c.device is None]
    peers = peers_of(facts)
    results = [
        _device_result(
            data,
            f,
            [c for c in checks if c.device == f.index],
            spans[f.index],
            peers,
            incomplete,
            resets.get(f.index, ()),
            rates[f.index],
            profile.checks.min_throughput_retention,
        )
        for f in facts
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
        sorted([*data.events, *_episodes(results)], key=lambda e: e.t_s),
        data.capabilities,
        units,
        sync,
        headroom,
        part,
        tuple(sync_loss(p, results) for p in sorted(units)),
    )


def _all_facts(
    data: RunData,
    rates: Mapping[int, Mapping[str, WorkRates]],
    profile: Profile,
    incomplete: bool,
) -> tuple[list[DeviceFacts], dict[int, tuple[float | None, float | None]]]:
    """Every device's facts, and its load's span (start, end)."""
    any_work = any(w["t_end_s"].size for parts in data.work.values() for w in parts.values())
    facts, spans = [], {}
    for info in data.devices:
        found, start, end = device_facts(
            info,
            data.telemetry[info.index],
            data.work.get(info.index, {}),
            data.units,
            data.events,
            data.meta,
            profile,
            incomplete,
            data.capabilities.get(info.index),
            any_work,
            rates[info.index],
        )
        facts.append(found)
        spans[info.index] = (start, end)
    return facts, spans


def _all_checks(
    data: RunData,
    facts: Sequence[DeviceFacts],
    sync: SyncFacts | None,
    headroom: Headroom,
    profile: Profile,
) -> list[Finding]:
    """Every check of the devices and of the server."""
    events = data.events
    checks = run_checks(facts, profile) + cross_device_checks(events)
    checks += telemetry_checks(events) + implausible_checks(data.implausible, facts)
    checks += sync_checks(sync, events, profile, {f.index: f.name for f in facts})
    return checks + headroom_checks(headroom, profile.checks.min_headroom_c)


def _device_result(
    data: RunData,
    facts: DeviceFacts,
    mine: list[Finding],
    span: tuple[float | None, float | None],
    peers: Peers,
    incomplete: bool,
    resets: tuple[Reset, ...],
    rates: dict[str, WorkRates],
    floor: float = 0.95,
) -> DeviceResult:
    """One device's verdict on its checks, its diagnosis (``floor``: the profile's
    retention floor), warm-up and steady noise."""
    failed = any(c.status is Status.FAIL for c in mine)
    # a check the device could not be judged on alone (contention) accepts nothing
    unjudged = incomplete or any(c.status is Status.INCOMPLETE for c in mine)
    verdict = Verdict.FAIL if failed else Verdict.INCOMPLETE if unjudged else Verdict.PASS
    start, end = span
    found = diagnose(facts, mine, peers, floor)
    launched = data.meta.load_start_s
    work = data.work.get(facts.index, {})
    worked = any(w["t_end_s"].size for w in work.values())
    known = worked and start is not None and launched is not None
    steady_noise = None
    if facts.steady is not None:
        load = facts.whole.window if facts.whole is not None else None
        steady_noise = noise(facts.steady.window, load, data.telemetry[facts.index], work)
    info = next(d for d in data.devices if d.index == facts.index)
    return DeviceResult(
        info,
        facts,
        start,
        end,
        mine,
        verdict,
        found.cause,
        found.evidence,
        start - launched if known else None,  # type: ignore[operator]
        steady_noise,
        _quality(facts.index, data, facts, resets),
        rates,
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
    spans: dict[int, tuple[float | None, float | None]],
    profile: Profile,
) -> SyncFacts | None:
    """The server's synchronous steps over the server's windows: cold from the first load
    start, steady after the last device's equilibrium (every device must have reached it),
    else the end of the run; the loss split by cause with the pace setter's clocks."""
    starts = [s for s, _ in spans.values() if s is not None]
    ends = [e for _, e in spans.values() if e is not None]
    if not data.server_steps or not starts or not ends:
        return None
    start, end = min(starts), max(ends)
    times = [f.equilibrium.time_s if f.equilibrium else None for f in facts]
    eq = max(times) if times and all(t is not None for t in times) else None
    windows = profile.windows
    sync = sync_facts(
        data.server_steps,
        data.sync_steps,
        cold_window(start, windows),
        steady_window(eq, start, end, windows),
    )
    if sync is None:
        return None
    group = data.meta.ddp_group  # a multi-node group: its global ranks, host and device
    if group is not None and group.ranks:
        sync = replace(sync, rank_of=group.this_node(), rank_labels=group.labels())
    return split_loss(sync, data.telemetry, profile)


def _stop_reason(stop: StopRecord | None) -> StopReason | str:
    """The stop record's reason; none at all means the coordinator died before it could
    record one (an error). A reason this soak does not know is kept as it was written."""
    if stop is None or stop.reason is None:
        return StopReason.ERROR
    return stop.reason
