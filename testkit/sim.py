"""Driving the simulated server without a store, for the tests and ``bench/verdict_accuracy.py``:
``simulate`` gives the records a run would hold (straight into the analysis; a test in
tests/scenarios checks that this path and the store's give the same analysis) and the
simulator's own thermal truth; ``settled_at`` and ``at_time`` read that truth."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from operator import attrgetter

import numpy as np

from soak.dataset import RunData
from soak.devices.sim import SimServer
from soak.devices.sim.params import CHASSIS, Chassis
from soak.model import TELEMETRY_FIELDS, Event, StopReason, Telemetry, WorkSample
from soak.record import RunMeta, RunRecord, SimRecord, StopRecord
from soak.validity import cleaned, screen

BASELINE_S = 10.0  # the idle baseline before the load, as the runner's
TRUTH_EVERY_S = 10.0  # the thermal truth's sampling


@dataclass
class SimRun:
    """What one simulated run leaves: the records as the store would hold them, and the
    thermal truth every TRUTH_EVERY_S seconds of load."""

    data: RunData
    truth_t: np.ndarray
    truth_die: np.ndarray  # (time, device), without the fans' hunt
    truth_asymptote: np.ndarray
    truth_hunt: np.ndarray  # (time, device): what the hunt adds to the die

    def hunt_amplitude(self, device: int) -> float:
        """How far the hunt swings the die either way once the fans are at load speed (the
        second half of the load): the half-width of the band the die sweeps at equilibrium."""
        late = self.truth_t >= self.truth_t[0] + (self.truth_t[-1] - self.truth_t[0]) / 2
        hunt = self.truth_hunt[late, device]
        return float(np.max(np.abs(hunt))) if hunt.size else 0.0

    def distance(self, device: int, hunt: bool = False) -> np.ndarray:
        """The die's distance to its asymptote at each truth time. ``hunt=False``: the die
        with the hunt left out. ``hunt=True``: the die as it is, hunt included, against the
        band [asymptote - A, asymptote + A] that the hunt of amplitude A sweeps at
        equilibrium (0 inside it): the distance a sensor could ever show."""
        away = self.truth_die[:, device] - self.truth_asymptote[:, device]
        if not hunt:
            return np.abs(away)
        raw = np.abs(away + self.truth_hunt[:, device])
        return np.maximum(0.0, raw - self.hunt_amplitude(device))


@dataclass
class _Records:
    tele: dict[int, list[Telemetry]] = field(default_factory=dict)
    work: dict[int, list[WorkSample]] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)

    def add(self, rows: list[Telemetry], samples: list[WorkSample], events: list[Event]) -> None:
        for r in rows:
            self.tele.setdefault(r.device, []).append(r)
        for s in samples:
            self.work.setdefault(s.device, []).append(s)
        self.events += events


def _telemetry_arrays(rows: list[Telemetry]) -> dict[str, np.ndarray]:
    names = TELEMETRY_FIELDS[1:]
    table = np.array([attrgetter(*names)(r) for r in rows], dtype=object).reshape(-1, len(names))
    table[np.equal(table, None)] = math.nan
    table = table.astype(float)
    return {n: table[:, i] for i, n in enumerate(names)}


def _work_arrays(samples: list[WorkSample]) -> dict[str, dict[str, np.ndarray]]:
    out: dict[str, dict[str, np.ndarray]] = {}
    for part in sorted({s.part for s in samples}):
        mine = sorted((s for s in samples if s.part == part), key=lambda s: s.t_end_s)
        nan = math.nan
        out[part] = {
            "t_start_s": np.array([s.t_start_s for s in mine]),
            "t_end_s": np.array([s.t_end_s for s in mine]),
            "work": np.array([s.work for s in mine]),
            "verified": np.array([nan if s.verified is None else float(s.verified) for s in mine]),
            "verify_error": np.array(
                [nan if s.verify_error is None else s.verify_error for s in mine]
            ),
        }
    return out


def simulate(
    *,
    seed: int,
    faults: tuple[str, ...] = (),
    gpus: int = 8,
    sku: str = "h100-sxm",
    workload: str = "mix",
    duration_s: float = 3600.0,
    truth: bool = False,
    chassis: Chassis = CHASSIS,
) -> SimRun:
    """One run on the runner's tick schedule: a 10-s idle baseline, the load from t = 10 s,
    stop ``duration_s`` after every device's first finished work (t = 11 s)."""
    server = SimServer(gpus=gpus, sku=sku, faults=faults, seed=seed, chassis=chassis)
    load = server.simulated_load(workload)
    rec = _Records()
    t = 0.0
    while t < BASELINE_S:
        rec.add(server.sample(t), [], server.poll_events(t))
        t += 1.0
    load.start(0.0)
    truth_t, truth_die, truth_asym, truth_hunt = [], [], [], []
    stop_at = BASELINE_S + 1.0 + duration_s
    while True:
        rows = server.sample(t)
        update = load.poll(t)
        rec.add(rows, update.samples, server.poll_events(t) + update.events)
        if truth and (t - BASELINE_S) % TRUTH_EVERY_S == 0:
            die, asym = server.thermal_truth()
            truth_t.append(t)
            truth_die.append(die)
            truth_asym.append(asym)
            truth_hunt.append(server.hunt_truth())
        if t >= stop_at or not set(range(gpus)) - load.failed_devices():
            break
        t += 1.0
    update = load.stop(t)
    rec.add([], update.samples, update.events)
    meta = RunMeta(
        run=RunRecord(backend="sim", workload=workload, seed=seed, sim=SimRecord(sku=sku)),
        load_start_s=BASELINE_S,
        stop=StopRecord(StopReason.DURATION, load_stop_s=t, duration_s=t - BASELINE_S),
    )
    infos = server.devices()
    # as the store does: an impossible reading is flagged and left out (soak.validity)
    limits = {d.index: d.power_limit_w for d in infos}
    flagged = {
        d.index: [f for r in rec.tele.get(d.index, []) for f in screen(r, limits[d.index])]
        for d in infos
    }
    rows = {
        d.index: [cleaned(r, screen(r, limits[d.index])) for r in rec.tele.get(d.index, [])]
        if flagged[d.index]
        else rec.tele.get(d.index, [])
        for d in infos
    }
    data = RunData.held(
        meta=meta,
        devices=infos,
        implausible=flagged,
        telemetry={d.index: _telemetry_arrays(rows[d.index]) for d in infos},
        work={d.index: _work_arrays(rec.work.get(d.index, [])) for d in infos},
        units={p.name: p.unit for p in load.workload.parts},
        events=sorted(rec.events, key=lambda e: e.t_s),
        capabilities={
            i: {k: str(v) for k, v in c.items()} for i, c in server.capabilities().items()
        },
    )
    shape = (len(truth_t), gpus)
    return SimRun(
        data,
        np.array(truth_t),
        np.array(truth_die).reshape(shape),
        np.array(truth_asym).reshape(shape),
        np.array(truth_hunt).reshape(shape),
    )


def at_time(t: np.ndarray, values: np.ndarray, t_s: float | None) -> float | None:
    """``values`` at the truth sample nearest ``t_s``; None without a time."""
    if t_s is None or t.size == 0:
        return None
    return float(values[int(np.argmin(np.abs(t - t_s)))])


def settled_at(t: np.ndarray, distance: np.ndarray, within_c: float) -> float | None:
    """The first time after which ``distance`` stays within ``within_c``; None if never."""
    outside = np.flatnonzero(distance > within_c)
    if outside.size == 0:
        return float(t[0])
    if outside[-1] + 1 >= t.size:
        return None
    return float(t[outside[-1] + 1])
