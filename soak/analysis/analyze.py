"""From a run store to per-device results, the verdict and the diagnosis."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from soak.analysis.checks import CheckResult, Counter, DeviceFacts, Status, run_checks
from soak.analysis.diagnosis import diagnose, peers_of
from soak.analysis.equilibrium import Equilibrium, Series, detect
from soak.analysis.sync import SyncFacts, sync_checks, sync_facts
from soak.analysis.windows import (
    Window,
    WindowStats,
    cold_window,
    steady_window,
    window_stats,
    work_rates,
)
from soak.config import Profile
from soak.fields import FOLLOWED
from soak.model import DeviceInfo, Event, EventKind, WorkerOutcome
from soak.store import RunStore

INCOMPLETE_STOPS = frozenset({"interrupted", "error"})


@dataclass(frozen=True, slots=True)
class DeviceResult:
    info: DeviceInfo
    facts: DeviceFacts
    load_start_s: float | None
    end_s: float | None
    checks: list[CheckResult]
    verdict: str
    diagnosis: str  # one of diagnosis.CAUSES
    diagnosis_evidence: tuple[str, ...] = ()

    @property
    def index(self) -> int:
        return self.info.index


@dataclass(frozen=True, slots=True)
class Analysis:
    meta: dict
    profile: Profile
    devices: list[DeviceResult]
    server_checks: list[CheckResult]
    verdict: str
    stop_reason: str
    events: list[Event] = field(default_factory=list)
    capabilities: dict[int, dict[str, str]] = field(default_factory=dict)
    units: dict[str, str] = field(default_factory=dict)
    sync: SyncFacts | None = None  # --workload ddp: the server's synchronous steps

    @property
    def checks(self) -> list[CheckResult]:
        return [c for d in self.devices for c in d.checks] + self.server_checks

    @property
    def reasons(self) -> list[CheckResult]:
        """Every failing and warning result, failures first."""
        order = {Status.FAIL: 0, Status.WARN: 1}
        bad = [c for c in self.checks if c.status is not Status.PASS]
        return sorted(
            bad, key=lambda c: (order[c.status], c.device if c.device is not None else -1)
        )

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
    work: dict[str, dict[str, np.ndarray]], tele_t: np.ndarray, meta: dict
) -> tuple[float | None, float | None]:
    """A device's load start (its first work started) and end (its last work ended)."""
    starts = [w["t_start_s"].min() for w in work.values() if w["t_start_s"].size]
    ends = [w["t_end_s"].max() for w in work.values() if w["t_end_s"].size]
    if starts:
        return float(min(starts)), float(max(ends))
    start = meta.get("load_start_s")
    end = meta.get("stop", {}).get("load_stop_s")
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
    meta: dict,
    profile: Profile,
    incomplete: bool,
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
        equilibrium = detect(
            start,
            end,
            Series(t, tele["temp_c"]),
            Series(t, tele["power_w"]),
            Series(t, tele["sm_clock_mhz"]),
            rates,
            windows,
        )
        cold = window_stats(cold_window(start, windows), tele, work)
        steady = window_stats(steady_window(equilibrium.time_s, start, end, windows), tele, work)
        whole = window_stats(Window(start, end), tele, work)
        final = window_stats(steady_window(None, start, end, windows), tele, work)

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
        verification_checked=int(np.sum(np.isfinite(verified))),
        verification_failed=int(np.sum(verified == 0)) + len(mismatches),
        verification_max_error=float(failed_errors.max()) if failed_errors.size else None,
        lost=any(e.kind is EventKind.DEVICE_LOST for e in mine),
        workload=(meta.get("run") or {}).get("workload"),
        power_limit_w=_power_limit(steady, info),
        default_power_limit_w=info.default_power_limit_w,
    )
    return facts, start, end


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

    meta: dict
    devices: list[DeviceInfo]
    telemetry: dict[int, dict[str, np.ndarray]]  # device -> column -> values (NaN: unread)
    work: dict[int, dict[str, dict[str, np.ndarray]]]  # device -> part -> column -> values
    units: dict[str, str]  # part -> unit of work
    events: list[Event]
    capabilities: dict[int, dict[str, str]] = field(default_factory=dict)
    sync_steps: dict[int, dict[str, np.ndarray]] = field(default_factory=dict)  # per device
    server_steps: dict[str, np.ndarray] = field(default_factory=dict)

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
        )


def analyze(store: RunStore, profile: Profile) -> Analysis:
    """The analysis of a run store."""
    return analyze_run(RunData.from_store(store), profile)


def analyze_run(data: RunData, profile: Profile) -> Analysis:
    """Per-device facts, checks, verdicts and diagnoses, and the server's verdict."""
    meta = data.meta
    events = data.events
    units = data.units
    stop = meta.get("stop") or {}
    stop_reason = stop.get("reason", "error")  # no stop record: the coordinator died
    incomplete = stop_reason in INCOMPLETE_STOPS

    results: list[DeviceResult] = []
    all_facts: list[DeviceFacts] = []
    spans = {}
    infos = data.devices
    for info in infos:
        tele = data.telemetry[info.index]
        work = data.work.get(info.index, {})
        facts, start, end = device_facts(info, tele, work, units, events, meta, profile, incomplete)
        all_facts.append(facts)
        spans[info.index] = (start, end)
    sync = _sync_facts(data, all_facts, spans, profile)
    checks = run_checks(all_facts, profile) + cross_device_checks(events)
    checks += sync_checks(sync, events, profile.checks)
    server_checks = [c for c in checks if c.device is None]
    peers = peers_of(all_facts)
    for info, facts in zip(infos, all_facts, strict=True):
        mine = [c for c in checks if c.device == info.index]
        failed = any(c.status is Status.FAIL for c in mine)
        verdict = "FAIL" if failed else "INCOMPLETE" if incomplete else "PASS"
        start, end = spans[info.index]
        found = diagnose(facts, mine, peers)
        results.append(
            DeviceResult(info, facts, start, end, mine, verdict, found.cause, found.evidence)
        )

    if not results:
        verdict = "FAIL" if not incomplete else "INCOMPLETE"
    elif any(r.verdict == "FAIL" for r in results) or any(
        c.status is Status.FAIL for c in server_checks
    ):
        verdict = "FAIL"
    else:
        verdict = "INCOMPLETE" if incomplete else "PASS"
    return Analysis(
        meta,
        profile,
        results,
        server_checks,
        verdict,
        stop_reason,
        events,
        data.capabilities,
        units,
        sync,
    )


def _sync_facts(
    data: RunData,
    facts: Sequence[DeviceFacts],
    spans: dict[int, tuple[float | None, float | None]],
    profile: Profile,
) -> SyncFacts | None:
    """The server's synchronous steps over the server's windows: cold from the first load
    start, steady after the last device's equilibrium (every device must have reached it),
    else the end of the run."""
    starts = [s for s, _ in spans.values() if s is not None]
    ends = [e for _, e in spans.values() if e is not None]
    if not data.server_steps or not starts or not ends:
        return None
    start, end = min(starts), max(ends)
    times = [f.equilibrium.time_s if f.equilibrium else None for f in facts]
    eq = max(times) if times and all(t is not None for t in times) else None
    windows = profile.windows
    return sync_facts(
        data.server_steps,
        data.sync_steps,
        cold_window(start, windows),
        steady_window(eq, start, end, windows),
    )
