"""Synchronous training (``--workload ddp``): the server's step rate cold and steady, the
rank that set the pace, the all-reduce bus bandwidth, and the checks over them.

Pure functions over the stored ``server_steps`` and per-device ``sync_steps`` series
(``RunStore``); a run without them has no ``SyncFacts`` and no sync checks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from soak.analysis.checks import (
    CLOCK_OF_UNIT,
    Finding,
    RetentionSplit,
    Status,
    profile_applies,
    split_by_cause,
)
from soak.analysis.windows import Window, window_stats
from soak.model import Event, EventKind
from soak.profile import Checks, Profile
from soak.units import NOT_AVAILABLE, pct, si

BUSBW_FORMULA = "busbw = bytes / time x 2(n-1)/n (nccl-tests' all-reduce bus bandwidth)"
ONE_RANK = "one rank: no all-reduce to time (nothing to reduce across)"
# [assumed] A steady busbw this far below the cold one is the link degrading as it heats
# (the median of a window's all-reduces of one fixed buffer varies by a few per cent).
BUSBW_HOT_LOSS = 0.10
CLOCK = CLOCK_OF_UNIT["token"]  # a training step scales with the SM clock


@dataclass(frozen=True, slots=True)
class RankTiming:
    """One device's rank over a window: mean compute and collective wait per step."""

    device: int
    compute_s: float | None
    wait_s: float | None


@dataclass(frozen=True, slots=True)
class SyncSplit:
    """The server's step-rate loss split by cause (as per-device retention splits a
    device's), from the clocks and throttle reasons of the device that set the pace.
    ``missing`` says why all of the loss is unexplained, where it is."""

    device: int | None
    split: RetentionSplit
    cold_clock_mhz: float | None = None
    steady_clock_mhz: float | None = None
    missing: str = ""


@dataclass(frozen=True, slots=True)
class SyncFacts:
    """The server's synchronous training, cold and steady."""

    ranks: int
    steps: int
    cold_rate: float | None  # samples/s of the whole server
    steady_rate: float | None
    cold: tuple[RankTiming, ...]
    steady: tuple[RankTiming, ...]
    pace_share: dict[int, float]  # device -> share of steady steps it was the straggler
    busbw_cold: float | None  # bytes/s
    busbw_steady: float | None
    allreduce_b: int | None
    busbw_note: str  # the formula, or why there is none
    cold_window: Window | None = None  # the server's windows the figures are over
    steady_window: Window | None = None
    split: SyncSplit | None = None  # the loss by cause (split_loss); None: not split
    # A multi-node group (``ddp_group``): pace_share and pace_setter hold global ranks; this
    # node's devices are ranks ``rank_of[device]``; ``rank_labels`` name every rank by host
    # and device. None off a group, where a rank is its device.
    rank_of: Mapping[int, int] | None = None
    rank_labels: Mapping[int, str] | None = None

    def local_device(self, key: int | None) -> int | None:
        """The device of this run that pace-setter key ``key`` is; None where it is a rank
        on another node."""
        if key is None or self.rank_of is None:
            return key
        return next((d for d, r in self.rank_of.items() if r == key), None)

    def share_of(self, device: int) -> float:
        """The share of steady steps this run's ``device`` set the pace."""
        key = device if self.rank_of is None else self.rank_of.get(device)
        return self.pace_share.get(key, 0.0) if key is not None else 0.0

    def label(self, key: int | None) -> str:
        """ "device 3" on one node; "rank 9 (n2 device 1)" in a multi-node group."""
        if self.rank_of is None or key is None:
            return f"device {key}"
        where = (self.rank_labels or {}).get(key)
        return f"rank {key} ({where})" if where else f"rank {key}"

    @property
    def loss(self) -> float | None:
        """1 - steady / cold step rate."""
        if not self.cold_rate or self.steady_rate is None:
            return None
        return 1.0 - self.steady_rate / self.cold_rate

    @property
    def pace_setter(self) -> int | None:
        """The device that was the straggler in most steady steps."""
        return max(self.pace_share, key=self.pace_share.__getitem__) if self.pace_share else None

    def compute_growth(self) -> dict[int, float]:
        """Per device, steady / cold mean compute time - 1."""
        cold = {r.device: r.compute_s for r in self.cold}
        out = {}
        for r in self.steady:
            before = cold.get(r.device)
            if before and r.compute_s is not None:
                out[r.device] = r.compute_s / before - 1.0
        return out

    def explanation(self) -> str:
        """One line: the loss and what the slowest rank explains of it."""
        if self.loss is None:
            return "server step rate: not available"
        side = "below" if self.loss >= 0 else "above"
        head = f"steady step rate {abs(self.loss) * 100:.1f} % {side} cold"
        key, growth = self.pace_setter, self.compute_growth()
        if key is None:
            return head
        setter = self.local_device(key)
        if setter is None or setter not in growth:  # another node's rank, or no timing
            share = self.pace_share[key] * 100
            return f"{head}; {self.label(key)} sets the pace {share:.0f} % of steps"
        others = [g for d, g in growth.items() if d != setter]
        spread = ""
        if others:
            low, high = min(others) * 100, max(others) * 100
            signed = low < 0
            fmt = (lambda v: f"{v:+.1f}") if signed else (lambda v: f"{v:.1f}")
            span = fmt(low) if f"{low:.1f}" == f"{high:.1f}" else f"{fmt(low)}–{fmt(high)}"
            spread = f", the others' {span} %"
        share = self.pace_share[key] * 100
        verb = "grew" if growth[setter] >= 0 else "fell"
        name = self.label(key)
        return (
            f"{head}; {name}'s compute time {verb} {abs(growth[setter]) * 100:.1f} %"
            f"{spread}: "
            f"{name} sets the pace {share:.0f} % of steps"
        )


def _in(t_end: np.ndarray, window: Window) -> np.ndarray:
    return (t_end >= window.start_s) & (t_end <= window.end_s)


def window_steps(
    rows: Mapping[str, np.ndarray], windows: Sequence[Window]
) -> dict[str, np.ndarray]:
    """A rank's steps that ``sync_facts`` reads over ``windows`` (the server's cold and
    steady): those ending in one, and its first with an all-reduce size. What the analysis
    keeps of a rank's steps: a window's worth, not the run's."""
    t_end = np.asarray(rows.get("t_end_s", np.empty(0)))
    keep = np.zeros(t_end.size, dtype=bool)
    for window in windows:
        keep |= _in(t_end, window)
    sized = np.flatnonzero(np.isfinite(np.asarray(rows.get("allreduce_b", keep * np.nan))))
    if sized.size:
        keep[sized[0]] = True
    return {name: np.asarray(values)[keep] for name, values in rows.items()}


def _mean(values: np.ndarray) -> float | None:
    finite = values[np.isfinite(values)]
    return float(finite.mean()) if finite.size else None


def _rate(server: Mapping[str, np.ndarray], mask: np.ndarray) -> float | None:
    """Samples per second over the window's steps: total samples / total step time."""
    time_s = float(server["step_s"][mask].sum())
    return float(server["samples"][mask].sum()) / time_s if time_s > 0 else None


def _busbw(ranks: Mapping[int, Mapping[str, np.ndarray]], window: Window, n: int) -> float | None:
    """Median over the window's timed all-reduces of the first rank's busbw."""
    if n < 2 or not ranks:
        return None
    first = ranks[min(ranks)]
    mask = _in(first["t_end_s"], window) & np.isfinite(first["allreduce_s"])
    mask &= first["allreduce_s"] > 0
    if not mask.any():
        return None
    algbw = first["allreduce_b"][mask] / first["allreduce_s"][mask]
    return float(np.median(algbw) * 2.0 * (n - 1) / n)


def sync_facts(
    server: Mapping[str, np.ndarray],
    ranks: Mapping[int, Mapping[str, np.ndarray]],
    cold: Window,
    steady: Window,
) -> SyncFacts | None:
    """The facts of a run's synchronous steps, or None where it has none."""
    if not len(server.get("t_end_s", ())):
        return None
    n = int(server["ranks"][0])
    cold_mask = _in(server["t_end_s"], cold)
    steady_mask = _in(server["t_end_s"], steady)

    def timing(window: Window) -> tuple[RankTiming, ...]:
        out = []
        for device, rows in sorted(ranks.items()):
            mask = _in(rows["t_end_s"], window)
            out.append(
                RankTiming(device, _mean(rows["compute_s"][mask]), _mean(rows["wait_s"][mask]))
            )
        return tuple(out)

    stragglers = server["straggler"][steady_mask].astype(int)
    share = {int(d): float(np.mean(stragglers == d)) for d in np.unique(stragglers)}
    allreduce = [rows["allreduce_b"] for rows in ranks.values()]
    sizes = np.concatenate(allreduce) if allreduce else np.empty(0)
    sizes = sizes[np.isfinite(sizes)]
    return SyncFacts(
        ranks=n,
        steps=len(server["t_end_s"]),
        cold_rate=_rate(server, cold_mask),
        steady_rate=_rate(server, steady_mask),
        cold=timing(cold),
        steady=timing(steady),
        pace_share=share,
        busbw_cold=_busbw(ranks, cold, n),
        busbw_steady=_busbw(ranks, steady, n),
        allreduce_b=int(sizes[0]) if sizes.size else None,
        busbw_note=BUSBW_FORMULA if n > 1 else ONE_RANK,
        cold_window=cold,
        steady_window=steady,
    )


def split_loss(
    facts: SyncFacts, tele: Mapping[str, np.ndarray] | None, profile: Profile
) -> SyncFacts:
    """``facts`` with the server's loss split by cause: the pace setter's steady / cold SM
    clock and its steady throttle reasons decide, as for a device's own retention (power
    pinned and no thermal reason: power-capped drift; thermal slowdown; the rest, and all
    of it where the clock was not read, unexplained). ``tele``: the pace setter's telemetry
    (None: this run holds none of it)."""
    if facts.loss is None:
        return facts
    ratio = 1.0 - facts.loss
    key = facts.pace_setter
    device = facts.local_device(key)
    if key is None:
        return replace(facts, split=_unexplained(None, ratio, "no device set the pace"))
    if device is None:  # a rank on another node: its clocks are in that node's run
        missing = f"{facts.label(key)} sets the pace; its clocks are in its own node's run"
        return replace(facts, split=_unexplained(None, ratio, missing))
    if tele is None or not len(tele.get("t_s", ())):
        missing = f"{facts.label(key)}: no telemetry"
        return replace(facts, split=_unexplained(device, ratio, missing))
    if facts.cold_window is None or facts.steady_window is None:
        return replace(facts, split=_unexplained(device, ratio, "no cold and steady windows"))
    cold = window_stats(facts.cold_window, tele, {})
    steady = window_stats(facts.steady_window, tele, {})
    cold_clock, steady_clock = cold.median.get(CLOCK), steady.median.get(CLOCK)
    if not cold_clock or steady_clock is None:
        missing = f"{facts.label(key)}'s SM clock not available"
        return replace(facts, split=_unexplained(device, ratio, missing))
    split = _of_loss(split_by_cause(ratio, steady_clock / cold_clock, steady, profile))
    return replace(facts, split=SyncSplit(device, split, cold_clock, steady_clock))


def _of_loss(split: RetentionSplit) -> RetentionSplit:
    """The split as shares of the server's loss, adding up to it: a clock loss larger than
    the step-rate loss (a step is not all compute, nor its compute all clock-bound) explains
    all of the loss, never more."""
    loss = max(0.0, 1.0 - split.ratio)
    drift = min(split.drift, loss)
    thermal = min(split.thermal, loss - drift)
    return RetentionSplit(split.ratio, drift, thermal, loss - drift - thermal)


def _unexplained(device: int | None, ratio: float, missing: str) -> SyncSplit:
    return SyncSplit(
        device, RetentionSplit(ratio, 0.0, 0.0, max(0.0, 1.0 - ratio)), None, None, missing
    )


# ----------------------------------------------------------------------------- checks


def check_straggler(facts: SyncFacts, limits: Checks) -> list[Finding]:
    """One rank sets the pace in most steady steps and computes longer than the median
    rank by more than the margin: WARN, FAIL past the larger one."""
    key = facts.pace_setter
    setter = facts.local_device(key)
    computes = {r.device: r.compute_s for r in facts.steady if r.compute_s is not None}
    if facts.ranks < 2 or key is None:
        return []
    if setter is None:  # another node's rank: the fleet report compares it with every rank
        message = (
            f"{facts.label(key)} sets the pace in {facts.pace_share[key] * 100:.0f} % of "
            f"steady steps: another node's rank, judged by `soak fleet report`"
        )
        return [Finding("straggler", Status.NOT_CHECKED, message)]
    if len(computes) < 2 or setter not in computes:
        return []
    share = facts.pace_share[key]
    median = float(np.median(list(computes.values())))
    excess = computes[setter] / median - 1.0 if median > 0 else 0.0
    message = (
        f"{facts.label(key)} sets the pace in {share * 100:.0f} % of steady steps; its compute "
        f"time is {excess * 100:.1f} % above the median rank's (warn "
        f"{limits.ddp_straggler_warn * 100:g} %, fail {limits.ddp_straggler_fail * 100:g} %)"
    )
    if share <= limits.ddp_straggler_share or excess <= limits.ddp_straggler_warn:
        return [Finding("straggler", Status.PASS, message, setter)]
    status = Status.FAIL if excess > limits.ddp_straggler_fail else Status.WARN
    return [Finding("straggler", status, message, setter)]


def check_sync_retention(facts: SyncFacts, limits: Checks) -> list[Finding]:
    """The server's steady step rate against its cold one, its loss judged by cause as a
    device's retention is: the power-capped drift only past ``max_power_drift``, thermal
    slowdown and the unexplained rest by ``min_sync_retention``. An unsplit loss is all
    unexplained."""
    if facts.loss is None:
        return [Finding("sync_retention", Status.WARN, "server step rate: not measured")]
    ratio = 1.0 - facts.loss
    split = (
        facts.split.split if facts.split else RetentionSplit(ratio, 0.0, 0.0, max(0.0, facts.loss))
    )
    floor, drift_floor = limits.min_sync_retention, limits.max_power_drift
    message = f"{facts.explanation()}; {_causes(facts, split, drift_floor)}; floor {pct(floor, 0)}"
    message += f" for thermal and unexplained loss (retention {pct(ratio)}"
    if split.drift:
        message += f", {pct(split.strict_ratio)} without the drift"
    message += ")"
    ok = split.drift <= drift_floor and split.strict_ratio >= floor
    return [Finding("sync_retention", Status.PASS if ok else Status.FAIL, message)]


def _causes(facts: SyncFacts, split: RetentionSplit, drift_floor: float) -> str:
    """The loss by cause, with whose clocks split it (or why nothing did)."""
    s = facts.split
    if s is None or s.missing:
        why = s.missing if s and s.missing else "not split by cause"
        return f"{why}: all {pct(split.unexplained)} unexplained"
    name = facts.label(facts.pace_setter)
    clocks = f"{name}'s SM clock {s.cold_clock_mhz:.0f} → {s.steady_clock_mhz:.0f} MHz"
    return (
        f"by {clocks}: {pct(split.drift)} power-capped drift (floor {pct(drift_floor, 0)}), "
        f"{pct(split.thermal)} thermal slowdown, {pct(split.unexplained)} unexplained"
    )


def replica_checks(events: Sequence[Event]) -> list[Finding]:
    """A rank whose parameters differed from the majority's after a step: FAIL, with the
    first such step."""
    first: dict[int, str] = {}
    for e in events:
        detail = str(e.details.get("detail", ""))
        failed = e.kind is EventKind.VERIFICATION_FAILED and e.device is not None
        if failed and detail.startswith("replicas differ") and e.device not in first:
            first[e.device] = detail
    return [Finding("replicas", Status.FAIL, d, device) for device, d in sorted(first.items())]


def check_busbw(
    facts: SyncFacts, profile: Profile, names: Mapping[int, str] | None = None
) -> list[Finding]:
    """The steady all-reduce bus bandwidth against the profile's floor (none by default),
    where the ranks are the profile's devices. The floors are datasheet link rates times an
    assumed efficiency, not measurements: below one only warns, unless the link also lost
    more than ``BUSBW_HOT_LOSS`` from cold to steady (evidence of the server, not of the
    assumption), which fails."""
    if facts.ranks < 2:
        return [Finding("busbw", Status.PASS, f"all-reduce skipped: {ONE_RANK}")]
    checks = profile.checks
    floor = checks.min_busbw_Bps
    if not floor:
        return []
    source = f" ({checks.min_busbw_source})" if checks.min_busbw_source else ""
    whose = f"the {profile.name} floor {si(floor, 'B/s')}{source}"
    ranks = [r.device for r in facts.steady]
    others = sorted({names.get(d, "unknown") for d in ranks} if names is not None else set())
    others = [n for n in others if not profile_applies(n, profile)]
    if others:
        message = (
            f"all-reduce bus bandwidth not judged: {whose} is for "
            f"{' / '.join(profile.device_names)}, the ranks include {', '.join(others)}"
        )
        return [Finding("busbw", Status.NOT_CHECKED, message)]
    if facts.ranks < checks.min_busbw_ranks:
        message = (
            f"all-reduce bus bandwidth not judged: {whose} holds for {checks.min_busbw_ranks} "
            f"ranks or more, this run has {facts.ranks}"
        )
        return [Finding("busbw", Status.NOT_CHECKED, message)]
    steady, cold = facts.busbw_steady, facts.busbw_cold
    if steady is None:
        message = f"steady all-reduce bus bandwidth not measured; {whose}"
        return [Finding("busbw", Status.FAIL, message)]
    size = si(facts.allreduce_b, "B") if facts.allreduce_b else NOT_AVAILABLE
    head = (
        f"steady all-reduce bus bandwidth {si(steady, 'B/s')} over {facts.ranks} ranks "
        f"({size} buffer) is {pct(steady / floor)} of {whose}; cold {si(cold, 'B/s')}"
    )
    if steady >= floor:
        return [Finding("busbw", Status.PASS, head)]
    hot_loss = 1.0 - steady / cold if cold else None
    if hot_loss is not None and hot_loss > BUSBW_HOT_LOSS:
        message = (
            f"{head}: {pct(hot_loss)} below cold (limit {pct(BUSBW_HOT_LOSS, 0)}), the link "
            "lost bandwidth as it heated"
        )
        return [Finding("busbw", Status.FAIL, message)]
    if hot_loss is None:
        message = f"{head}: no cold figure to tell heat from a configuration"
        return [Finding("busbw", Status.WARN, message)]
    message = (
        f"{head}: as slow cold, so a configuration (P2P or NVLink/Infinity Fabric links down, "
        "a PCIe path: see nvidia-smi topo -m / rocm-smi --showtopo) or a floor that does not "
        "fit this server"
    )
    return [Finding("busbw", Status.WARN, message)]


def sync_checks(
    facts: SyncFacts | None,
    events: Sequence[Event],
    profile: Profile,
    names: Mapping[int, str] | None = None,
) -> list[Finding]:
    """Every synchronous-training check of a run; ``names``: each device's name, to tell
    whether the ranks are the devices the profile's bus bandwidth floor is for."""
    out = replica_checks(events)
    if facts is not None:
        out += check_straggler(facts, profile.checks) + check_sync_retention(facts, profile.checks)
        out += check_busbw(facts, profile, names)
    return out
