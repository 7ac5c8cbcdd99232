"""Contention: what else used a device during the soak, and what a loss that coincides with
it says about the device (docs/verdict.md).

1. A reading is contended where work that is not soak's took ``FOREIGN_MIN_PCT`` % or more
   of the device (a CPU: other processes and the hypervisor's steal time), or where a
   compute process that is not soak's was on it (a GPU).
2. A window is contended where ``CONTENDED_SHARE`` of its readings or more are.
3. A throughput check that fails over a contended window (the loss coincides with the
   foreign load) is judged again on the work done in that window while no foreign load was
   read. Where that time is at least as long as the cold window and the check still fails
   there, the loss stays when the foreign load is gone: the check fails as before.
   Otherwise the check is incomplete: the device could not be measured alone, which is
   never a device fault; the operator's next step is to rerun on an idle host.
4. A retention check whose cold window is contended compares against a figure the foreign
   load set: a failing one is incomplete as above, and so is a passing one whose late
   window is not contended (the ratio is flattered; a real loss could hide in it), where
   the profile has a retention floor at all. Where both are contended, a passing one is
   incomplete too where the cold window's pressure (its contended share times the foreign
   load) exceeds the late window's by more than ``ALIKE``: cold was held down more.
5. Wherever the whole load (``WHOLE``) is contended, from its first second as well as
   mid-run, the device is warned of it with its share (``checks.check_contention``),
   whatever the checks above found: figures taken beside other work are not the device's
   alone, even where a ratio of two windows held down alike passes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from soak.analysis.windows import Window
from soak.fields import Columns
from soak.model import Event, EventKind

# Work not soak's below this share of a device is a host's ordinary background (daemons,
# the telemetry reads themselves); at it or above, it takes a share soak's load would use.
FOREIGN_MIN_PCT = 10.0
# A window with foreign load over this share of its readings is contended: a tenth of
# the window at half speed is a 5 % loss, the size of the losses the checks judge.
CONTENDED_SHARE = 0.1
# Two windows whose pressures (contended share × foreign load) lie within this of each
# other were held down alike: a twentieth of the device's time, at most a 5 % change of
# the ratio, the size of the losses the checks judge.
ALIKE = 0.05
WHOLE = "load"  # the whole load's window: contention named from its first second on
HOST = "host contention"  # the host's other load (a CPU)
PROCESS = "another process on the device"  # a foreign compute process (a GPU)
RERUN = "rerun on an idle host"
NEXT_STEP = f"{RERUN}: stop the other work (top, nvidia-smi show it) and soak again"


@dataclass(frozen=True, slots=True)
class ForeignProcess:
    """A compute process that is not soak's, as the backend first saw it on the device."""

    t_s: float
    pid: int | None
    name: str | None
    used_mib: float | None

    def describe(self) -> str:
        name = f" ({self.name})" if self.name else ""
        mem = f", {self.used_mib:.0f} MiB" if self.used_mib is not None else ""
        pid = f"pid {self.pid}" if self.pid is not None else "pid not available"
        return f"{pid}{name}{mem}"


@dataclass(frozen=True, slots=True)
class Contention:
    """What else used the device over one window, and soak's work while nothing did."""

    share: float | None  # of the window's readings with foreign load; None: not measured
    load_pct: float | None = None  # median foreign load over its contended readings (CPU)
    procs: int | None = None  # most foreign compute processes at once (GPU)
    mem_mib: float | None = None  # most device memory they held at once
    clean_s: float = 0.0  # the time of soak's work over the window with no foreign load
    clean_throughput: dict[str, float | None] = field(default_factory=dict)
    first_s: float | None = None  # the window's first reading with foreign load

    @property
    def contended(self) -> bool:
        return self.share is not None and self.share >= CONTENDED_SHARE

    @property
    def cause(self) -> str:
        return PROCESS if self.procs else HOST

    @property
    def pressure(self) -> float | None:
        """The share of the window contended times the foreign load's share of the device
        (a foreign process whose use is not read counts as the whole device); None: not
        measured."""
        if self.share is None:
            return None
        load = 1.0 if self.load_pct is None else min(self.load_pct / 100.0, 1.0)
        return self.share * load

    def at(self) -> str:
        """ "at 45 % load", or the processes where the load is not read."""
        if self.load_pct is not None:
            return f"at {self.load_pct:.0f} % load"
        n = self.procs or 0
        return f"with {n} foreign process{'es' if n != 1 else ''}"

    def describe(self, processes: Sequence[ForeignProcess] = (), label: str = "") -> str:
        """ "host contention: other work used 48 % of the host's CPU time during 97 % of the
        window"
        (or the processes on a GPU); ``label`` names a window other than the check's."""
        return f"{self.cause}: {self.figures(processes, label)}"

    def figures(self, processes: Sequence[ForeignProcess] = (), label: str = "") -> str:
        """What ``describe`` says after the cause: on a CPU the share of the host's CPU time
        the other work took (the foreign load is read host-wide)."""
        window = f"the {label} window" if label else "the window"
        window = "the load" if label == WHOLE else window
        over = f"during {100 * (self.share or 0.0):.0f} % of {window}"
        if self.procs:
            named = "; ".join(p.describe() for p in processes) or (
                f"{self.procs} process{'es' if self.procs > 1 else ''}"
                + (f", {self.mem_mib:.0f} MiB" if self.mem_mib else "")
            )
            return f"{named}, {over}"
        load = (
            f"{self.load_pct:.0f} % of the host's CPU time" if self.load_pct is not None else "it"
        )
        return f"other work used {load} {over}"


def inflated(cold: Contention, late: Contention, label: str) -> str | None:
    """Why a passing retention over two contended windows may be false: the cold window's
    pressure over the late one's by more than ``ALIKE``, with both figures; None where they
    are alike (or one is not measured)."""
    hot, cool = cold.pressure, late.pressure
    if hot is None or cool is None or hot - cool <= ALIKE:
        return None
    share = f"{100 * (cold.share or 0.0):.0f} %"
    late_share = f"{100 * (late.share or 0.0):.0f} %"
    return (
        f"{cold.cause}: the cold window contended {share} of its time {cold.at()} against "
        f"{late_share} of the {label} window {late.at()}: the ratio may be inflated"
    )


def foreign_mask(tele: Columns) -> np.ndarray | None:
    """Per reading: whether work not soak's used the device (NaN-safe); None where no
    reading of foreign load exists at all (not measured)."""
    n = tele.t_s.size
    known = np.zeros(n, dtype=bool)
    hit = np.zeros(n, dtype=bool)
    for values, limit in ((tele.foreign_load_pct, FOREIGN_MIN_PCT), (tele.foreign_procs, 1.0)):
        finite = np.isfinite(values)
        known |= finite
        hit |= finite & (np.where(finite, values, 0.0) >= limit)
    return hit if known.any() else None


def window_contention(
    window: Window,
    tele: Columns,
    work: dict[str, dict[str, np.ndarray]],
    mask: np.ndarray | None,
) -> Contention:
    """The foreign load over ``window``, and each part's throughput over its work whose
    middle falls at a reading without foreign load (each reading covers the interval
    before it)."""
    if mask is None:
        return Contention(None)
    t = tele.t_s
    inside = window.mask(t)
    if not inside.any():
        return Contention(None)
    hit = mask[inside]
    share = float(np.mean(hit))
    loads = tele.foreign_load_pct[inside][hit]
    loads = loads[np.isfinite(loads)]
    procs = _peak(tele.foreign_procs, inside)
    mem = _peak(tele.foreign_mem_mib, inside)
    clean: dict[str, float | None] = {}
    clean_s = 0.0
    for part, w in work.items():
        mid = (w["t_start_s"] + w["t_end_s"]) / 2
        at = np.minimum(np.searchsorted(t, mid, side="left"), t.size - 1)
        keep = window.mask(mid) & ~mask[at]
        durations = (w["t_end_s"] - w["t_start_s"])[keep]
        total = float(durations.sum())
        clean[part] = float(w["work"][keep].sum() / total) if total > 0 else None
        clean_s = max(clean_s, total)
    first = t[inside][hit]
    return Contention(
        share,
        float(np.median(loads)) if loads.size else None,
        int(procs) if procs is not None else None,
        mem,
        clean_s,
        clean,
        float(first[0]) if first.size else None,
    )


def _peak(values: np.ndarray, inside: np.ndarray) -> float | None:
    finite = values[inside][np.isfinite(values[inside])]
    return float(finite.max()) if finite.size and finite.max() > 0 else None


def foreign_processes(events: Sequence[Event], device: int) -> tuple[ForeignProcess, ...]:
    """The foreign compute processes the backend reported on ``device``, first seen first."""
    out = []
    for e in events:
        if e.kind is EventKind.FOREIGN_PROCESS and e.device == device:
            d = e.details
            pid, mem = d.get("pid"), d.get("used_mib")
            out.append(
                ForeignProcess(
                    e.t_s,
                    int(pid) if isinstance(pid, int | float) else None,
                    str(d["name"]) if d.get("name") else None,
                    float(mem) if isinstance(mem, int | float) else None,
                )
            )
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Review:
    """A failing throughput check looked at again for contention: ``stays`` where the loss
    is there without the foreign load too (the check fails as before), else incomplete;
    ``note`` says which, with its figures."""

    stays: bool
    note: str
    cause: str


def review(
    contention: dict[str, Contention],
    label: str,
    part: str,
    passes_alone: Callable[[float], bool],
    cold_length_s: float,
    processes: Sequence[ForeignProcess] = (),
    cold_matters: bool = False,
    rate_text: Callable[[float], str] = str,
) -> Review | None:
    """None where neither the late window nor (``cold_matters``) the cold window is
    contended: the check's failure stands as it is."""
    late = contention.get(label)
    cold = contention.get("cold") if cold_matters else None
    late_hit = late is not None and late.contended
    cold_hit = cold is not None and cold.contended
    if not late_hit and not cold_hit:
        return None
    notes = []
    if late_hit and late is not None:
        notes.append(late.describe(processes))
    if cold_hit and cold is not None:
        if late_hit and late is not None and late.cause == cold.cause:
            load = f"{cold.load_pct:.0f} % " if cold.cause == HOST and cold.load_pct else ""
            notes[-1] += f", and {load}during {100 * (cold.share or 0):.0f} % of the cold window"
        else:
            notes.append(cold.describe(processes, "cold"))
    hit = late if late_hit and late is not None else cold
    assert hit is not None
    note = "; ".join(notes)
    clean = late.clean_throughput.get(part) if late is not None else None
    if (
        late_hit
        and late is not None
        and not cold_hit
        and clean is not None
        and (late.clean_s >= cold_length_s)
    ):
        alone = f"{rate_text(clean)} over the {late.clean_s:.0f} s without it"
        if not passes_alone(clean):
            stays = f"{note}; the loss stays without the foreign load: {alone}"
            return Review(True, stays, hit.cause)
        return Review(False, f"{note}; {alone}; {RERUN}", hit.cause)
    return Review(False, f"{note}; {RERUN}", hit.cause)
