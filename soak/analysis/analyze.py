"""From a run store to per-device results, the verdict and the diagnosis."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from soak.analysis.checks import (
    CheckResult,
    Counter,
    DeviceFacts,
    HwEpisode,
    Status,
    run_checks,
)
from soak.analysis.contention import (
    Contention,
    foreign_mask,
    foreign_processes,
    window_contention,
)
from soak.analysis.diagnosis import diagnose, peers_of
from soak.analysis.equilibrium import Equilibrium, Series, Signals, detect
from soak.analysis.headroom import Headroom, headroom_checks, run_headroom
from soak.analysis.noise import Noise, noise
from soak.analysis.sync import SyncFacts, split_loss, sync_checks, sync_facts
from soak.analysis.windows import (
    Window,
    WindowStats,
    cold_window,
    load_start,
    steady_window,
    window_stats,
    work_rates,
)
from soak.config import Profile
from soak.fields import FOLLOWED
from soak.model import (
    HW_REASONS,
    DeviceInfo,
    Event,
    EventKind,
    StopReason,
    Verdict,
    WorkerOutcome,
)
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
    checks: list[CheckResult]
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


def merge_windows(results: list[CheckResult]) -> list[CheckResult]:
    """Join each result about the final window to the result of the same check, device and
    status about the steady window that says the same with other numbers: one row of the
    report naming both windows, where two rows would read as one failure listed twice."""
    steady: dict[tuple, int] = {}
    out: list[CheckResult] = []
    for c in results:
        window = _window_word(c.message)
        key = (c.check, c.device, c.status, _subject(c.message))
        if window == "steady":
            steady[key] = len(out)
        elif window == "final" and key in steady:
            at = steady.pop(key)
            out[at] = CheckResult(c.check, c.status, _both(out[at].message, c.message), c.device)
            continue
        out.append(c)
    return out


_WINDOW_WORD = re.compile(r"\b(steady|final)\b")


def _window_word(message: str) -> str | None:
    found = _WINDOW_WORD.search(message)
    return found.group(1) if found else None


def _subject(message: str) -> str:
    """What a message says with its window and its numbers left out."""
    return re.sub(r"\d[\d.,]*", "#", _WINDOW_WORD.sub("W", message, count=1))


_CLAUSE_END = re.compile(r":\s|;\s|\s\(")


def _both(steady: str, final: str) -> str:
    """One message for both windows: the steady one whole, the final one's first clause
    that holds a number (its own headline figures; what follows says the same as the
    steady one's)."""
    for end in _CLAUSE_END.finditer(final):
        if re.search(r"\d", final[: end.start()]):
            return f"{steady}; {final[: end.start()]}"
    return f"{steady}; {final}"


@dataclass(frozen=True, slots=True)
class Analysis:
    meta: RunMeta
    profile: Profile
    devices: list[DeviceResult]
    server_checks: list[CheckResult]
    verdict: Verdict
    stop_reason: StopReason | str
    events: list[Event] = field(default_factory=list)
    capabilities: dict[int, dict[str, str]] = field(default_factory=dict)
    units: dict[str, str] = field(default_factory=dict)
    sync: SyncFacts | None = None  # --workload ddp: the server's synchronous steps
    headroom: Headroom | None = None  # thermal headroom at the design inlet (BMC inlet)

    @property
    def run(self) -> RunRecord:
        """What the run recorded at its start (every field None where it recorded nothing)."""
        return self.meta.run

    @property
    def stop(self) -> StopRecord | None:
        """How the load stopped; None: no stop was recorded (the coordinator died)."""
        return self.meta.stop

    @property
    def checks(self) -> list[CheckResult]:
        return [c for d in self.devices for c in d.checks] + self.server_checks

    @property
    def reasons(self) -> list[CheckResult]:
        """Every failing, incomplete and warning result, failures first. A check that
        could not run for want of a signal is not a reason: see ``not_checked``."""
        order = {Status.FAIL: 0, Status.INCOMPLETE: 1, Status.WARN: 2}
        bad = [c for c in self.checks if c.status in order]
        return sorted(
            bad, key=lambda c: (order[c.status], c.device if c.device is not None else -1)
        )

    @property
    def not_checked(self) -> list[CheckResult]:
        """Checks that could not run because a signal is not available, each once."""
        return [c for c in self.checks if c.status is Status.NOT_CHECKED]

    def sync_loss(self, part: str | None = None) -> tuple[float | None, int | None]:
        """1 − min/mean of steady throughput: what the slowest device costs a synchronous
        job, and which device that is."""
        part = part or self.primary_part()
        rates = {
            d.index: d.facts.steady.throughput.get(part)
            for d in self.devices
            if d.facts.steady is not None
        }
        rates = {i: r for i, r in rates.items() if r is not None}
        mean = float(np.mean(list(rates.values()))) if rates else 0.0
        if len(rates) < 2 or mean <= 0:  # no work anywhere: nothing to lose
            return None, None
        slowest = min(rates, key=lambda i: rates[i])
        return 1.0 - rates[slowest] / mean, slowest

    def sync_losses(self) -> dict[str, tuple[float | None, int | None]]:
        """The synchronous loss and the device that sets it, for every workload part."""
        return {part: self.sync_loss(part) for part in sorted(self.units)}

    def primary_part(self) -> str | None:
        parts = list(self.units)
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


def _counter(values: np.ndarray) -> Counter:
    finite = values[np.isfinite(values)]
    if not finite.size:
        return Counter(None, None, None)
    return Counter(float(finite[0]), float(finite[-1]), float(finite.max()))


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


def hw_episodes(t: np.ndarray, reasons: np.ndarray) -> tuple[HwEpisode, ...] | None:
    """Stretches of consecutive readings with a HW protection reason bit set; None where no
    clock reason was readable. Each lasts to its last reading plus one reading interval."""
    readable = np.isfinite(reasons)
    if not readable.any():
        return None
    bits = np.where(readable, reasons, 0).astype(np.int64) & int(HW_REASONS)
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


def _idle_temp(tele: dict[str, np.ndarray], start: float | None) -> float | None:
    if start is None:
        return None
    before = tele["temp_c"][(tele["t_s"] < start) & np.isfinite(tele["temp_c"])]
    return float(np.median(before)) if before.size else None


def _power_limit(steady: WindowStats | None, info: DeviceInfo) -> float | None:
    """The enforced power limit over the steady window, or as probed at the start."""
    if steady is not None and steady.median.get("power_limit_w") is not None:
        return steady.median["power_limit_w"]
    return info.power_limit_w


def device_facts(
    info: DeviceInfo,
    tele: dict[str, np.ndarray],
    work: dict[str, dict[str, np.ndarray]],
    units: dict[str, str],
    events: Sequence[Event],
    meta: RunMeta,
    profile: Profile,
    incomplete: bool,
    capabilities: dict[str, str] | None = None,
    any_work: bool = True,
) -> tuple[DeviceFacts, float | None, float | None]:
    windows = profile.windows
    start, end = _load_span(work, tele["t_s"], meta)
    t = tele["t_s"]
    equilibrium: Equilibrium | None = None
    cold: WindowStats | None = None
    steady: WindowStats | None = None
    whole: WindowStats | None = None
    final: WindowStats | None = None
    if start is not None and end is not None and end > start:
        rates = {part: Series(*work_rates(w)) for part, w in work.items()}
        signals = Signals(
            Series(t, tele["temp_c"]),
            Series(t, tele["power_w"]),
            Series(t, tele["sm_clock_mhz"]),
            rates,
        )
        equilibrium = detect(start, end, signals, windows)
        cold = window_stats(cold_window(start, windows), tele, work)
        steady = window_stats(steady_window(equilibrium.time_s, start, end, windows), tele, work)
        whole = window_stats(Window(start, end), tele, work)
        final = window_stats(steady_window(None, start, end, windows), tele, work)
    mask = foreign_mask(tele)
    contention: dict[str, Contention] = {
        label: window_contention(stats.window, tele, work, mask)
        for label, stats in (("cold", cold), ("steady", steady), ("final", final))
        if stats is not None
    }

    mine = [e for e in events if e.device == info.index]
    outcome, detail = _outcome(mine)
    verified = np.concatenate([w["verified"] for w in work.values()]) if work else np.empty(0)
    errors = np.concatenate([w["verify_error"] for w in work.values()]) if work else np.empty(0)
    failed_errors = errors[(verified == 0) & np.isfinite(errors)]
    # A failed check arrives twice, as a sample with verified False and as an event; only
    # the cross-device comparison has no sample, so only its events add to the count.
    mismatches = [
        e
        for e in mine
        if e.kind is EventKind.VERIFICATION_FAILED
        and e.details.get("check") == "cross_device_checksum"
    ]
    # An imported trace may hold throughput for some devices and none for others (gpu-burn
    # prints a GPU's rate only once its first batch is done): for those, an absence of data,
    # never "no work was measured". A live run's worker that did nothing still fails.
    foreign = meta.run.imported
    own_work = any(w["t_end_s"].size for w in work.values())
    facts = DeviceFacts(
        index=info.index,
        name=info.name,
        units={part: units.get(part, "") for part in work},
        cold=cold,
        steady=steady,
        whole=whole,
        final=final,
        equilibrium=equilibrium,
        slowdown_temp_c=info.slowdown_temp_c,
        run_incomplete=incomplete,
        counters={key: _counter(tele[key]) for key in FOLLOWED},
        xids=[int(e.details.get("code", -1)) for e in mine if e.kind is EventKind.XID],
        outcome=outcome,
        outcome_detail=detail,
        outcome_phase=_outcome_phase(mine),
        verification_checked=int(np.sum(np.isfinite(verified))),
        verification_failed=int(np.sum(verified == 0)) + len(mismatches),
        verification_max_error=float(failed_errors.max()) if failed_errors.size else None,
        lost=any(e.kind is EventKind.DEVICE_LOST for e in mine),
        workload=meta.run.workload,
        power_limit_w=_power_limit(steady, info),
        default_power_limit_w=info.default_power_limit_w,
        hw_episodes=hw_episodes(t, tele["clock_reasons"]),
        load_start_s=start,
        warmup_end_s=cold.window.start_s if cold is not None else None,
        records_throughput=records_throughput(meta.run, any_work) and (own_work or not foreign),
        throughput_note="" if own_work or not foreign else FOREIGN_NONE,
        foreign_load=foreign,
        capabilities=dict(capabilities or {}),
        idle_temp_c=_idle_temp(tele, start),
        contention=contention,
        foreign_processes=foreign_processes(events, info.index),
    )
    return facts, start, end


def telemetry_checks(events: Sequence[Event]) -> list[CheckResult]:
    """Frozen telemetry (``soak.validity``): a freeze seen live fails its device, as a lost
    device does; a freeze an import cut the judged load at warns (and leaves the run
    incomplete), since nothing after it is judged."""
    out = []
    for e in events:
        if e.kind is not EventKind.TELEMETRY or e.details.get("episode") != "frozen":
            continue
        judged = e.details.get("judged", True)
        out.append(
            CheckResult("telemetry", Status.FAIL if judged else Status.WARN, e.message, e.device)
        )
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
        t = tele["t_s"]
        loaded = (t >= start) & (t <= end)
        columns = {n: tele[n] for n in MUST_MOVE if n in tele}
        found = frozen_spans(index, t.tolist(), columns, loaded.tolist())
        if found:
            first = _as_reached(found[0])
            out.append(
                Event(first.to_s, EventKind.TELEMETRY, first.describe(), index, first.as_dict())
            )
    return out


def _as_reached(span: Frozen) -> Frozen:
    """The span as the runner's watch reports it: when it first reached FROZEN_S."""
    return replace(span, to_s=span.from_s + FROZEN_S) if span.length_s > FROZEN_S else span


def _resets(tele: dict[str, np.ndarray]) -> tuple[Reset, ...]:
    return tuple(
        r
        for name in COUNTERS
        if name in tele
        for r in counter_resets(name, tele["t_s"], tele[name])
    )


def _unreset(tele: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: unreset(v) if k in COUNTERS else v for k, v in tele.items()}


def _quality(index: int, data: RunData, facts: DeviceFacts, resets: tuple[Reset, ...]) -> Quality:
    """What the analysis knows of one device's readings (``soak.validity``)."""
    t = data.telemetry[index]["t_s"]
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
            out.append(Event(g.from_s, EventKind.TELEMETRY, g.describe(), d.index, details))
        for r in q.resets:
            details = {"episode": "reset", "field": r.field, "before": r.before, "after": r.after}
            out.append(Event(r.t_s, EventKind.TELEMETRY, r.describe(), d.index, details))
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


def cross_device_checks(events: Sequence[Event]) -> list[CheckResult]:
    """Devices that computed the same fixed product and disagreed with no majority to blame
    one: the server computes wrong somewhere, which fails it."""
    out = []
    for e in events:
        if e.kind is EventKind.VERIFICATION_FAILED and e.device is None:
            out.append(CheckResult("cross_device", Status.FAIL, e.message, None))
    return out


@dataclass(frozen=True, slots=True)
class RunData:
    """A run's records in memory, as the store reads them back: what the analysis needs.
    The accuracy benchmark builds one straight from the simulated server, without a store."""

    meta: RunMeta
    devices: list[DeviceInfo]
    telemetry: dict[int, dict[str, np.ndarray]]  # device -> column -> values (NaN: unread)
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
    events = data.events
    units = data.units
    stop_reason = _stop_reason(meta.stop)
    # A store read back from damage may have lost any sample: never a PASS on what is left.
    incomplete = stop_reason not in COMPLETE_STOPS or meta.salvage is not None
    # An import whose log froze was cut where the freeze began: the record of the load
    # ended early, so nothing is accepted on it.
    incomplete = incomplete or any(_cut_at_freeze(e) for e in events)

    results: list[DeviceResult] = []
    all_facts: list[DeviceFacts] = []
    spans = {}
    infos = data.devices
    any_work = any(w["t_end_s"].size for parts in data.work.values() for w in parts.values())
    for info in infos:
        tele = data.telemetry[info.index]
        work = data.work.get(info.index, {})
        caps = data.capabilities.get(info.index)
        facts, start, end = device_facts(
            info, tele, work, units, events, meta, profile, incomplete, caps, any_work
        )
        all_facts.append(facts)
        spans[info.index] = (start, end)
    if not meta.run.imported:  # the freeze watch's rule read offline, as the runner reads it
        events = sorted([*events, *_unseen_freezes(data, spans)], key=lambda e: e.t_s)
        data = replace(data, events=events)
    sync = _sync_facts(data, all_facts, spans, profile)
    checks = run_checks(all_facts, profile) + cross_device_checks(events)
    checks += telemetry_checks(events)
    names = {f.index: f.name for f in all_facts}
    checks += sync_checks(sync, events, profile, names)
    headroom = run_headroom(
        infos,
        all_facts,
        data.telemetry,
        data.work,
        data.server_readings,
        meta.bmc,
        profile.checks.design_inlet_c,
    )
    checks += headroom_checks(headroom, profile.checks.min_headroom_c)
    server_checks = [c for c in checks if c.device is None]
    peers = peers_of(all_facts)
    for info, facts in zip(infos, all_facts, strict=True):
        mine = [c for c in checks if c.device == info.index]
        failed = any(c.status is Status.FAIL for c in mine)
        # a check the device could not be judged on alone (contention) accepts nothing
        unjudged = incomplete or any(c.status is Status.INCOMPLETE for c in mine)
        verdict = Verdict.FAIL if failed else Verdict.INCOMPLETE if unjudged else Verdict.PASS
        start, end = spans[info.index]
        found = diagnose(facts, mine, peers)
        launched = meta.load_start_s
        worked = any(w["t_end_s"].size for w in data.work.get(info.index, {}).values())
        known = worked and start is not None and launched is not None
        warmup = start - launched if known else None
        steady_noise = None
        if facts.steady is not None:
            load = facts.whole.window if facts.whole is not None else None
            tele, work = data.telemetry[info.index], data.work.get(info.index, {})
            steady_noise = noise(facts.steady.window, load, tele, work)
        results.append(
            DeviceResult(
                info,
                facts,
                start,
                end,
                mine,
                verdict,
                found.cause,
                found.evidence,
                warmup,
                steady_noise,
                _quality(info.index, data, facts, resets.get(info.index, ())),
            )
        )

    if not results:
        verdict = Verdict.FAIL if not incomplete else Verdict.INCOMPLETE
    elif any(r.verdict is Verdict.FAIL for r in results) or any(
        c.status is Status.FAIL for c in server_checks
    ):
        verdict = Verdict.FAIL
    elif incomplete or any(r.verdict is Verdict.INCOMPLETE for r in results):
        verdict = Verdict.INCOMPLETE
    else:
        verdict = Verdict.PASS
    return Analysis(
        meta,
        profile,
        results,
        server_checks,
        verdict,
        stop_reason,
        sorted([*events, *_episodes(results)], key=lambda e: e.t_s),
        data.capabilities,
        units,
        sync,
        headroom,
    )


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
