"""Diagnosis: the likely cause of a device's failure, with its evidence (docs/verdict.md).

It follows what slows a training GPU, most certain first:

- **hardware-fault**: the device reported errors (ECC, XID, row remap), was lost, computed
  wrong, or the hardware itself slowed it (HW slowdown, power brake) after the warm-up;
- **thermal-limited**: thermal clock reasons (a HW thermal slowdown event included), no
  margin to the slowdown temperature, a hot spot near the slowdown threshold, or a device
  much hotter than its peers that lost throughput;

and for a device that is slow (throughput retention, the within-server rule or a floor):

- **host-bound**: utilisation fell while the clocks did not (the input, not the GPU, is short);
- **hardware-fault**: less work per clock than its peers (a weak part), whatever its clocks;
- **power-limited**: held at its power limit, and that limit is below the default, or it
  runs at its peers' power with lower clocks, or its clocks fell from cold to steady at the
  limit (leakage grows with temperature);
- **hardware-fault** for what is left: slower with no thermal, input or power explanation,
  where the thermal cause was ruled out positively (the SW thermal slowdown reason read, and
  inactive) and the loss lies beyond the level's own noise (a clock that swings between its
  floor and its maximum has a median with a wide interval: where that interval still
  reaches the floor, the loss is not shown);
- **thermal-limited (inferred from temperature)** where the clock-event reasons were not
  read and the device sits at or near its SKU's slowdown temperature (``temp_margin`` or a
  hot spot failing, or ``slowdown_temp`` warning on a slow device): the likeliest cause, but
  soak did not see the reason;
- **unexplained** where the device could not have shown why: no temperature, no power and
  no clock it measures (a CPU in a VM: no sensors, and /proc/cpuinfo's clock a fallback
  that holds the host's nominal figure), no clock-event reasons read to rule the thermal
  cause out, or a loss within the clock's own noise. Nothing points at the device, so no
  RMA is asked.

No rule reads a clock the backend has only as a fallback (capability ``fallback``): such a
reading may stand still while the real clock moves, so it shows neither less work per
clock nor clocks that held, and it is no evidence (``_reading``).

A device whose figures fell while something else used it, and that failed nothing else,
is diagnosed **host contention** (the host's other load on a CPU) or **another process on
the device** (a GPU: its pid, name and memory), with the figures; its checks are
incomplete, never a hardware fault (``analysis/contention.py``). A loss that stays when the
foreign load is gone fails and is diagnosed as above.

A device that did not fail is **healthy** (**not measured** when an incomplete run stopped
before any of its work was measured; **too short to judge** when it reached no thermal
equilibrium in a load shorter than the profile's ``min_load_s``), and so is one that
failed only a requirement of the run (equilibrium not reached where the profile requires
it): its FAIL has no device cause, and the failing check says why. A check that could not
run for want of a signal (``not_checked``: a telemetry-only import has no throughput) never
fails, so an absence of data is never a hardware fault. Peers are the server's other
devices; with fewer than three, only the device's own cold-to-steady change can speak. Each
cause comes with the operator's next step (``NEXT_STEPS``).
"""

from __future__ import annotations

from collections.abc import Sequence, Set
from dataclasses import dataclass, field

import numpy as np

from soak.analysis import contention
from soak.analysis.checks import (
    CLOCK_OF_UNIT,
    COUNTER_CHECKS,
    CheckName,
    DeviceFacts,
    Finding,
    Status,
    clock_ratio_bounds,
)
from soak.analysis.windows import WindowStats
from soak.model import HW_REASONS, Capability, ClockReason
from soak.units import pct

HEALTHY = "healthy"
THERMAL = "thermal-limited"
# thermal-limited by its temperature alone: the clock-event reasons that would show it
# were not read (a log without them)
THERMAL_INFERRED = "thermal-limited (inferred from temperature)"
POWER = "power-limited"
HOST = "host-bound"
HARDWARE = "hardware-fault"
NOT_MEASURED = "not measured"  # an incomplete run that stopped before any work was measured
TOO_SHORT = "too short to judge"  # no equilibrium in a load under the profile's min_load_s
UNEXPLAINED = "unexplained"  # slower, on a device with no sensor that could say why
CONTENTION = contention.HOST  # the host's other load took the device (a CPU)
FOREIGN = contention.PROCESS  # a compute process not soak's shared the device (a GPU)
CAUSES = (
    HEALTHY,
    THERMAL,
    THERMAL_INFERRED,
    POWER,
    HOST,
    HARDWARE,
    NOT_MEASURED,
    TOO_SHORT,
    UNEXPLAINED,
    CONTENTION,
    FOREIGN,
)
# What each cause means, for the report's reader
MEANINGS = {
    HEALTHY: "no loss from cold to steady state that the checks flag",
    THERMAL: "clocks held back by thermal slowdown (or a HW thermal event), or too little "
    "margin below the slowdown temperature",
    THERMAL_INFERRED: "at or near its SKU's slowdown temperature, where the driver holds "
    "the clocks down; the clock-event reasons that would confirm it were not read",
    POWER: "slower at steady state with the power cap in force most of the time (leakage "
    "grows with temperature)",
    HOST: "utilisation fell before throughput did: the host did not keep the device busy",
    HARDWARE: "hardware errors, protection events, failed results, a lost device or a "
    "slowdown with no thermal, power or host explanation: see the failing checks",
    NOT_MEASURED: "the run stopped before any work was measured: nothing can be said of the "
    "device's health",
    TOO_SHORT: "it reached no thermal equilibrium in a load shorter than the profile asks for: "
    "it was never seen hot, and nothing can be said of its health hot",
    UNEXPLAINED: "slower at steady state, with nothing read that could show why (no "
    "temperature, power or clock on the device, no clock-event reasons to rule the thermal "
    "cause out, or a loss within the clock's own noise): nothing points at the device, and "
    "nothing clears it",
    CONTENTION: "its figures fell while the host's other work used the device: it could not "
    "be judged alone",
    FOREIGN: "its figures fell while another compute process shared the device: it could not "
    "be judged alone",
}
NEXT_STEPS = {
    HEALTHY: "nothing to do",
    THERMAL: "check the inlet temperature, the fans and the heat sink's contact (thermal pads, "
    "baffles, blocked fins)",
    THERMAL_INFERRED: "check the inlet temperature, the fans and the heat sink's contact; log "
    "the clock-event reasons (nvidia-smi's clocks_event_reasons.active) to confirm",
    POWER: "check the enforced power limit against the SKU's default, and the PSU and its feeds",
    HOST: "check the host: CPU load and frequency, PCIe link width and speed, NUMA placement "
    "of the device's process",
    HARDWARE: "RMA the device with the listed events and errors",
    NOT_MEASURED: "run the soak again for longer: no work was measured before it stopped",
    TOO_SHORT: "soak again for longer: the profile's min_load_s at least (11 min by default), "
    "and 21 min or more for a steady window after equilibrium",
    UNEXPLAINED: "rerun on an idle host with what was missing measured (the clock-event "
    "reasons logged; where nothing on the device is measured, other load on the host or its "
    "hypervisor is the likeliest cause); a loss that stays there is the device's",
    CONTENTION: contention.NEXT_STEP,
    FOREIGN: contention.NEXT_STEP,
}

HARDWARE_CHECKS = frozenset(
    {
        CheckName.WORKER,
        CheckName.VERIFICATION,
        CheckName.XID,
        CheckName.TELEMETRY,  # readings frozen under load: a hung sensor or driver
        *(CheckName(key) for key in COUNTER_CHECKS),
    }
)
SLOW_CHECKS = frozenset(
    {CheckName.THROUGHPUT_RETENTION, CheckName.CLOCK_RETENTION, CheckName.OUTLIER, CheckName.FLOOR}
)
THERMAL_CHECKS = frozenset(
    {CheckName.SW_THERMAL, CheckName.TEMP_MARGIN, CheckName.HW_EVENTS, CheckName.HOT_SPOT}
)
# Checks that read a thermal reason: where one of them fails, the cause was seen, not inferred
REASON_CHECKS = frozenset({CheckName.SW_THERMAL, CheckName.HW_EVENTS})

MIN_PEERS = 3
BUSY_UTIL_PCT = 95.0  # a saturating load keeps NVML utilisation at 100 %
UTIL_GAP_PCT = 3.0  # below the peers' utilisation by more than this
CLOCK_GAP = 0.02  # relative: clocks below the peers' by more than this
POWER_SAME = 0.03  # relative: power within this of the peers' counts as the same
CAPPED_SHARE = 0.5  # share of the steady window under the SW power cap
LIMIT_BELOW_DEFAULT = 0.99  # an enforced limit under 99 % of the default is lowered
HOTTER_C = 5.0  # hotter than the peers' median by more than this
PER_CLOCK_GAP = 0.03  # relative: less work per clock than the peers' by more than this


@dataclass(frozen=True, slots=True)
class Diagnosis:
    cause: str
    evidence: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Peers:
    """Medians over the server's devices of what the diagnosis compares a device with."""

    count: int = 0
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    power_w: float | None = None
    temp_c: float | None = None
    util_pct: float | None = None
    clock_retention: float | None = None  # steady / cold SM clock
    throughput: dict[str, float] = field(default_factory=dict)

    @property
    def usable(self) -> bool:
        return self.count >= MIN_PEERS


def _median(values: Sequence[float | None]) -> float | None:
    finite = [v for v in values if v is not None and np.isfinite(v)]
    return float(np.median(finite)) if finite else None


_CLOCKS = frozenset(CLOCK_OF_UNIT.values())  # the clocks work is counted against


def _reading(f: DeviceFacts, stats: WindowStats | None, key: str) -> float | None:
    """The window's median of ``key``; None where it was not read, and for a clock the
    backend reads only as a fallback: a VM's /proc/cpuinfo "cpu MHz" is the host's nominal
    clock however the real one moves, so it is evidence of nothing (not that the clocks
    held, not less work per clock)."""
    if stats is None or (key in _CLOCKS and f.capabilities.get(key) == Capability.FALLBACK):
        return None
    return stats.median.get(key)


def _steady(f: DeviceFacts, key: str) -> float | None:
    return _reading(f, f.steady, key)


def _clock_retention(f: DeviceFacts) -> float | None:
    cold = _reading(f, f.cold, "sm_clock_mhz")
    steady = _steady(f, "sm_clock_mhz")
    return steady / cold if cold and steady is not None else None


def peers_of(devices: Sequence[DeviceFacts]) -> Peers:
    with_steady = [f for f in devices if f.steady is not None and not f.lost]
    steadies = [f.steady for f in with_steady if f.steady is not None]
    throughput = {}
    for part in sorted({p for s in steadies for p in s.throughput}):
        median = _median([s.throughput.get(part) for s in steadies])
        if median is not None:
            throughput[part] = median
    return Peers(
        count=len(with_steady),
        sm_clock_mhz=_median([_steady(f, "sm_clock_mhz") for f in with_steady]),
        mem_clock_mhz=_median([_steady(f, "mem_clock_mhz") for f in with_steady]),
        power_w=_median([_steady(f, "power_w") for f in with_steady]),
        temp_c=_median([_steady(f, "temp_c") for f in with_steady]),
        util_pct=_median([_steady(f, "util_pct") for f in with_steady]),
        clock_retention=_median([_clock_retention(f) for f in with_steady]),
        throughput=throughput,
    )


def _late(f: DeviceFacts) -> list[WindowStats]:
    return [s for s in (f.steady, f.final) if s is not None]


def _share(f: DeviceFacts, key: str) -> float:
    """The larger share of the steady and final windows under a clock reason (0 if unread)."""
    return max((s.reason_share.get(key) or 0.0 for s in _late(f)), default=0.0)


def _messages(checks: Sequence[Finding], names: Set[CheckName]) -> list[str]:
    return [c.message for c in checks if c.status is Status.FAIL and c.check in names]


def _hardware(
    f: DeviceFacts, failing: set[CheckName], checks: Sequence[Finding]
) -> Diagnosis | None:
    if f.lost:
        return Diagnosis(HARDWARE, ("device lost during the run",))
    if failing & HARDWARE_CHECKS:
        return Diagnosis(HARDWARE, tuple(_messages(checks, HARDWARE_CHECKS)))
    if CheckName.HW_EVENTS in failing and _protection_bits(f) & _NOT_THERMAL:
        return Diagnosis(HARDWARE, tuple(_messages(checks, {CheckName.HW_EVENTS})))
    return None


_NOT_THERMAL = int(HW_REASONS & ~ClockReason.HW_THERMAL)


def _protection_bits(f: DeviceFacts) -> int:
    """Every HW reason bit of the protection events after the warm-up."""
    bits = 0
    for e in f.hw_episodes or ():
        if f.warmup_end_s is None or e.end_s > f.warmup_end_s:
            bits |= e.bits
    return bits


def _thermal_unread(f: DeviceFacts) -> bool:
    """Whether the SW thermal slowdown reason went unread in a late window: the thermal
    cause can then not be ruled out, only inferred from the temperature."""
    return any(s.reason_share.get("sw_thermal") is None for s in _late(f))


INFERRED = "clock-event reasons not read: inferred from the temperature"


def _thermal(
    f: DeviceFacts, failing: set[CheckName], checks: Sequence[Finding], peers: Peers, slow: bool
) -> Diagnosis | None:
    evidence = _messages(checks, THERMAL_CHECKS)
    thermal_share = max(_share(f, "sw_thermal"), _share(f, "hw_thermal"))
    inferred = _thermal_unread(f) and not thermal_share and not failing & REASON_CHECKS
    if slow and inferred and not failing & THERMAL_CHECKS:
        evidence = [
            c.message
            for c in checks
            if c.check is CheckName.SLOWDOWN_TEMP and c.status is Status.WARN
        ]
    if thermal_share > 0.01 or failing & THERMAL_CHECKS or (inferred and evidence):
        if inferred:
            return Diagnosis(THERMAL_INFERRED, (INFERRED, *evidence, *_clock_evidence(f, peers)))
        if thermal_share and not evidence:
            evidence.append(f"thermal clock reasons {100 * thermal_share:.1f} % of the time")
        return Diagnosis(THERMAL, tuple(evidence) + _clock_evidence(f, peers))
    temp = _steady(f, "temp_c")
    hotter = None if temp is None or peers.temp_c is None else temp - peers.temp_c
    if slow and peers.usable and hotter is not None and hotter > HOTTER_C:
        message = (
            f"steady temperature {temp:.0f} °C is {hotter:.0f} °C above the server median "
            f"{peers.temp_c:.0f} °C: poor cooling costs clocks through leakage"
        )
        return Diagnosis(THERMAL, (message, *_clock_evidence(f, peers)))
    return None


def _clock_evidence(f: DeviceFacts, peers: Peers) -> tuple[str, ...]:
    clock = _steady(f, "sm_clock_mhz")
    if clock is None or not peers.usable or peers.sm_clock_mhz is None:
        return ()
    median = f"server median {peers.sm_clock_mhz:.0f} MHz"
    return (f"steady {f.clock_label} {clock:.0f} MHz, {median}",)


def _host(f: DeviceFacts, peers: Peers) -> Diagnosis | None:
    """Utilisation down in a late window (steady, or the end of the load) while the clocks
    held, against the peers' and against the device's own cold window."""
    for label, late in (("steady", f.steady), ("final", f.final)):
        util = _reading(f, late, "util_pct")
        clock = _reading(f, late, "sm_clock_mhz")
        if late is None or util is None:
            continue
        peer_util = peers.util_pct if peers.usable else None
        low = util < BUSY_UTIL_PCT or (peer_util is not None and util < peer_util - UTIL_GAP_PCT)
        if not low or not _clocks_held(f, clock, peers):
            continue
        peer = f" (server median {peer_util:.0f} %)" if peer_util is not None else ""
        held = f" while the {f.clock_label} held at {clock:.0f} MHz" if clock is not None else ""
        return Diagnosis(HOST, (f"{label} utilisation {util:.0f} %{peer}{held}",))
    return None


def _clocks_held(f: DeviceFacts, clock: float | None, peers: Peers) -> bool:
    """The clocks did not fall: not below the peers', not below the cold window's by more
    than the peers' fell."""
    if clock is None:
        return True
    if peers.usable and peers.sm_clock_mhz and clock < peers.sm_clock_mhz * (1 - CLOCK_GAP):
        return False
    cold = _reading(f, f.cold, "sm_clock_mhz")
    if not cold:
        return True
    fell = 1 - clock / cold
    usual = 1 - peers.clock_retention if peers.usable and peers.clock_retention else 0.0
    return fell <= usual + CLOCK_GAP


def _blind(f: DeviceFacts) -> bool:
    """Whether the device measured nothing that could explain a loss: no steady
    temperature, power or clock (a fallback clock does not count), no clock reasons."""
    measured = [_steady(f, "temp_c"), _steady(f, "power_w"), _steady(f, "sm_clock_mhz")]
    reasons = [v for s in _late(f) for v in s.reason_share.values() if v is not None]
    return all(v is None for v in measured) and not reasons


def per_clock(f: DeviceFacts, peers: Peers) -> tuple[float, str] | None:
    """The smallest, over workload parts, of the device's steady work per clock relative to
    the server median's (or, with too few peers, to its own cold window's), and that part."""
    worst: tuple[float, str] | None = None
    for part, unit in sorted(f.units.items()):
        key = CLOCK_OF_UNIT.get(unit)
        rate = f.steady.throughput.get(part) if f.steady else None
        clock = _steady(f, key) if key else None
        if key is None or rate is None or not clock:
            continue
        if peers.usable:
            ref_rate = peers.throughput.get(part)
            ref_clock = peers.sm_clock_mhz if key == "sm_clock_mhz" else peers.mem_clock_mhz
        else:
            ref_rate = f.cold.throughput.get(part) if f.cold else None
            ref_clock = _reading(f, f.cold, key)
        if not ref_rate or not ref_clock:
            continue
        ratio = (rate / ref_rate) / (clock / ref_clock)
        if worst is None or ratio < worst[0]:
            worst = (ratio, part)
    return worst


def _weak(f: DeviceFacts, peers: Peers) -> Diagnosis | None:
    """Less work per clock than its peers: a weak part, whatever holds its clocks, where
    the loss lies beyond the clock median's own interval (a clock swinging between its
    floor and its maximum has a median that says little)."""
    found = per_clock(f, peers)
    if found is None or found[0] >= 1 - PER_CLOCK_GAP:
        return None
    ratio, part = found
    key = CLOCK_OF_UNIT.get(f.units.get(part, ""))
    bounds = f.steady.median_interval.get(key) if f.steady is not None and key else None
    clock = _steady(f, key) if key else None
    if (
        bounds is not None
        and clock
        and bounds[0] > 0
        and ratio * clock / bounds[0] >= (1 - PER_CLOCK_GAP)
    ):
        return None
    against = "the server median" if peers.usable else "its cold window"
    message = f"steady {part} work per clock is {100 * ratio:.1f} % of {against}'s"
    return Diagnosis(HARDWARE, (message,))


def _power(f: DeviceFacts, peers: Peers) -> Diagnosis | None:
    """At its power limit: say what makes that limit cost this device more than others."""
    capped = _share(f, "sw_power_cap")
    power = _steady(f, "power_w")
    limit = f.power_limit_w
    at_limit = capped > CAPPED_SHARE or (
        power is not None and limit is not None and power >= 0.97 * limit
    )
    if not at_limit:
        return None
    evidence = []
    default = f.default_power_limit_w
    if limit is not None and default is not None and limit < LIMIT_BELOW_DEFAULT * default:
        evidence.append(f"power limit {limit:.0f} W is below the default {default:.0f} W")
    clock = _steady(f, "sm_clock_mhz")
    if peers.usable and clock is not None and peers.sm_clock_mhz and power and peers.power_w:
        same_power = abs(power / peers.power_w - 1) <= POWER_SAME
        if same_power and clock < peers.sm_clock_mhz * (1 - CLOCK_GAP):
            evidence.append(
                f"steady {f.clock_label} {clock:.0f} MHz is "
                f"{100 * (1 - clock / peers.sm_clock_mhz):.1f} % below the server median "
                f"{peers.sm_clock_mhz:.0f} MHz at the same {power:.0f} W: more power per clock "
                "(leakage)"
            )
    retention = _clock_retention(f)
    if retention is not None:
        peer = (
            f" (server median {100 * (1 - peers.clock_retention):.1f} %)"
            if peers.usable and peers.clock_retention is not None
            else ""
        )
        evidence.append(
            f"{f.clock_label} fell {100 * (1 - retention):.1f} % from cold to steady at the power "
            f"limit{peer}: leakage grows with temperature"
        )
    return Diagnosis(POWER, tuple(evidence))


def _work_measured(f: DeviceFacts) -> bool:
    """Whether any work of the device was measured over its load."""
    if f.whole is None:
        return False
    return any(rate is not None for rate in f.whole.throughput.values())


NOT_RULED_OUT = (
    "the SW thermal slowdown reason was not read: thermal slowdown could not be ruled out"
)


def _left_over(f: DeviceFacts, checks: Sequence[Finding], peers: Peers, floor: float) -> Diagnosis:
    """A slow device that nothing explains: a hardware fault only where the thermal cause
    was ruled out positively (its reason read) and the loss lies beyond the clock's own
    noise; else unexplained, saying which."""
    slow = _messages(checks, SLOW_CHECKS)
    if _thermal_unread(f):
        return Diagnosis(UNEXPLAINED, (*slow, NOT_RULED_OUT))
    noisy = _within_noise(f, floor)
    if noisy is not None:
        return Diagnosis(UNEXPLAINED, (*slow, noisy))
    message = "slower with no thermal, power or input explanation"
    return Diagnosis(HARDWARE, (message, *_clock_evidence(f, peers)))


def _within_noise(f: DeviceFacts, floor: float) -> str | None:
    """Where the clock stands in for throughput (none recorded): the late/cold clock
    ratio's 95 % interval reaching the floor, so the loss is not shown beyond the clock's
    own swing; None where it is (or no interval can be taken)."""
    if f.records_throughput:
        return None
    for label, late in (("steady", f.steady), ("final", f.final)):
        bounds = clock_ratio_bounds(f, late) if late is not None else None
        if bounds is not None and bounds[1] >= floor:
            return (
                f"the {label} {f.clock_label}'s 95 % interval reaches {pct(bounds[1])} of "
                f"cold (from {pct(bounds[0])}), at or above the floor {pct(floor, 0)}: the "
                "loss is within the clock's own swing"
            )
    return None


def diagnose(
    f: DeviceFacts, checks: Sequence[Finding], peers: Peers, floor: float = 0.95
) -> Diagnosis:
    """The likely cause of what this device's checks found; healthy where nothing failed.
    ``floor`` is the profile's retention floor, which a loss must clear beyond its noise to
    be a device's fault."""
    failing = {c.check for c in checks if c.status is Status.FAIL and c.device == f.index}
    contended = _contended(f, checks)
    if not failing:
        if contended is not None:
            return contended
        short = [c.message for c in checks if _too_short(c) and c.device == f.index]
        if short:
            return Diagnosis(TOO_SHORT, tuple(short))
        if f.run_incomplete and not _work_measured(f):
            return Diagnosis(NOT_MEASURED, ("the run stopped before any work was measured",))
        return Diagnosis(HEALTHY)
    hardware = _hardware(f, failing, checks)
    if hardware is not None:
        return hardware
    slow = bool(failing & SLOW_CHECKS)
    thermal = _thermal(f, failing, checks, peers, slow)
    if thermal is not None:
        return thermal
    if slow:
        for cause in (_host(f, peers), _weak(f, peers), _power(f, peers)):
            if cause is not None:
                return cause
        if _blind(f):
            return Diagnosis(UNEXPLAINED, (*_messages(checks, SLOW_CHECKS), _UNSEEN))
        return _left_over(f, checks, peers, floor)
    if contended is not None:
        return contended
    # What is left failed a requirement of the run, not of the device (equilibrium where
    # the profile requires it): nothing points to a cause, and the verdict says why.
    return Diagnosis(HEALTHY, tuple(_messages(checks, failing)))


_UNSEEN = "no temperature, power or measured clock on this device to explain it"


def _too_short(c: Finding) -> bool:
    """The check that leaves a device too short a load to judge (``checks.too_short``)."""
    return c.check is CheckName.RUN_LENGTH and c.status is Status.INCOMPLETE


def _contended(f: DeviceFacts, checks: Sequence[Finding]) -> Diagnosis | None:
    """Checks left incomplete because something else used the device: host contention,
    or another process on it where the backend saw one (its pid, name and memory)."""
    messages = [
        c.message
        for c in checks
        if c.status is Status.INCOMPLETE and c.device == f.index and not _too_short(c)
    ]
    if not messages:
        return None
    by_process = f.foreign_processes or any(c.procs for c in f.contention.values())
    return Diagnosis(FOREIGN if by_process else CONTENTION, tuple(messages))
