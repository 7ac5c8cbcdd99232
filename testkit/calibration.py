"""The simulator against the recordings it is calibrated to: one statistic per row, computed
by the same function on the recording and on the simulated server, and the band the
simulated figure must fall in (docs/simulator.md, "Calibrated to recordings";
``tests/devices/test_sim_calibration.py`` holds every row; ``bench/calibration.py`` prints
the table).

The rule and the verdict are never fitted to these recordings; the simulator is, and this
is where it says how well. A recorded figure is over its devices (the median, where a
recording holds several); a simulated one is the median over ``SEEDS`` one-GPU servers
(one GPU: the front row, breathing the room, as a recording's lone device is taken to)."""

from __future__ import annotations

import csv
import datetime as dt
import functools
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from soak.analysis.equilibrium import Series, drift
from soak.profile import Windows
from testkit.sim import BASELINE_S, simulate
from testkit.traces import trace_dir

ROOT = Path(__file__).resolve().parents[1]
H200_MIX = ROOT / "tests" / "fixtures" / "gpu" / "h200-2026-12-04" / "mix.sqlite"
H200_GEMM = ROOT / "tests" / "fixtures" / "gpu" / "h200-2026-11-30" / "gemm.sqlite"
H100 = "h100x8-nanogpt-powercap-voltagepark"
H100_FROM_IDLE = "gpu_metrics_f4f827dd_from_idle.csv"
SEEDS = range(5)


@dataclass(frozen=True)
class Reads:
    """One device's readings from idle into a load: times in seconds from the load's onset
    (the first reading whose power is a third of the way from idle to the limit)."""

    t: np.ndarray
    temp: np.ndarray
    power: np.ndarray
    clock: np.ndarray | None
    limit_w: float
    max_clock_mhz: float | None = None


def _onset(t: np.ndarray, power: np.ndarray, limit_w: float) -> np.ndarray:
    """``t`` from the first reading a third of the way from the idle power to the limit."""
    idle = float(np.median(power[: max(3, power.size // 50)]))
    k = int(np.argmax(power > idle + (limit_w - idle) / 3))
    return t - t[k]


def _reads(t, temp, power, clock, limit_w, max_clock=None) -> Reads:
    t, temp, power = (np.asarray(x, dtype=float) for x in (t, temp, power))
    clock = None if clock is None else np.asarray(clock, dtype=float)
    return Reads(_onset(t, power, limit_w), temp, power, clock, limit_w, max_clock)


# -- the statistics ---------------------------------------------------------------------------


def _means(r: Reads, start_s: float, end_s: float, median: bool = False) -> np.ndarray:
    """30-s means (or medians) of the temperature from ``start_s`` to ``end_s`` after the
    onset."""
    edges = np.arange(start_s, end_s + 1e-9, 30.0)
    level = np.median if median else np.mean
    return np.array([level(r.temp[(r.t > a) & (r.t <= b)]) for a, b in itertools.pairwise(edges)])


def idle_c(r: Reads) -> float:
    return float(np.median(r.temp[r.t < -2]))


def plateau_c(r: Reads, start_s: float = 60.0, end_s: float = 450.0) -> float:
    """The median 30-s mean temperature from ``start_s`` to ``end_s``."""
    return float(np.median(_means(r, start_s, end_s)))


def rise_c(r: Reads, start_s: float = 60.0, end_s: float = 450.0) -> float:
    """The rise from idle to the plateau from ``start_s`` to ``end_s``."""
    return plateau_c(r, start_s, end_s) - idle_c(r)


def rise_share(r: Reads, at_s: float, start_s: float = 60.0, end_s: float = 450.0) -> float:
    """The share of its rise from idle to the plateau the 30-s mean ending ``at_s`` reached."""
    idle = idle_c(r)
    return (float(_means(r, at_s - 30, at_s)[0]) - idle) / (plateau_c(r, start_s, end_s) - idle)


def overshoot_c(r: Reads, start_s: float = 60.0, end_s: float = 450.0) -> float:
    """How far the hottest 30-s mean from ``start_s`` to ``end_s`` lies over their median."""
    means = _means(r, start_s, end_s)
    return float(np.max(means) - np.median(means))


def peak_over_end_c(r: Reads, end_s: float) -> float:
    """How far the hottest 30-s mean from 30 s to ``end_s`` lies over the last one."""
    means = _means(r, 30.0, end_s)
    return float(np.max(means) - means[-1])


def late_fall_c(r: Reads) -> float:
    """The median 30-s mean from 8.5 to 10.5 min less the one from 1 to 7.5 min."""
    return plateau_c(r, 510.0, 630.0) - plateau_c(r, 60.0, 450.0)


def batch_scatter_c(r: Reads, start_s: float = 60.0, end_s: float = 450.0) -> float:
    """The scatter of one 30-s batch median from the next (as the square root of half the
    mean square of their differences), from ``start_s`` to ``end_s``: the noise the rule
    sees in the die's level."""
    d = np.diff(_means(r, start_s, end_s, median=True))
    return float(np.sqrt(np.mean(d * d) / 2))


def _held(r: Reads, y: np.ndarray, since_s: float) -> np.ndarray:
    """``y`` at the cap, from ``since_s`` after the onset."""
    return y[(r.t > since_s) & np.isfinite(y)]


def power_share(r: Reads, since_s: float = 60.0) -> float:
    """The median power at the cap over the limit."""
    return float(np.median(_held(r, r.power, since_s))) / r.limit_w


def power_scatter(r: Reads, since_s: float = 60.0) -> float:
    """A power reading's robust scatter at the cap (1.4826 × its median absolute deviation),
    relative to the median."""
    p = _held(r, r.power, since_s)
    return 1.4826 * float(np.median(np.abs(p - np.median(p)))) / float(np.median(p))


def _clock(r: Reads, since_s: float) -> np.ndarray:
    assert r.clock is not None
    return _held(r, r.clock, since_s)


def clock_mean(r: Reads, since_s: float = 60.0) -> float:
    return float(np.mean(_clock(r, since_s)))


def clock_scatter(r: Reads, since_s: float = 60.0) -> float:
    """One clock read's sd at the cap, relative to the mean."""
    c = _clock(r, since_s)
    return float(np.std(c) / np.mean(c))


def lag1(y: np.ndarray) -> float:
    return float(np.corrcoef(y[:-1], y[1:])[0, 1])


def clock_lag1(r: Reads) -> float:
    return lag1(_clock(r, 60.0))


def clock_quantile(r: Reads, q: float) -> float:
    c = _clock(r, 60.0)
    return float(np.quantile(c, q) / np.mean(c))


def clock_floor(r: Reads, at_s: float = 600.0) -> float:
    """The SM clock's floor at the check ``at_s`` after the onset (rule line 1, in %)."""
    assert r.clock is not None
    found = drift("SM clock", Series(r.t, r.clock), at_s, Windows())
    assert found.floor is not None
    return found.floor


def temp_scatter(r: Reads) -> float:
    """A die reading's scatter at the cap from one read to the next (°C): the square root
    of half the mean square of successive differences, which a slow drift leaves alone."""
    d = np.diff(_held(r, r.temp, 60.0))
    return float(np.sqrt(np.mean(d * d) / 2))


def first_read_clock(r: Reads) -> float:
    """The clock at the onset's reading, over the maximum clock."""
    assert r.clock is not None and r.max_clock_mhz is not None
    return float(r.clock[int(np.argmin(np.abs(r.t)))] / r.max_clock_mhz)


def reads_to_cap(r: Reads) -> float:
    """Readings from the load's first (where its power first leaves idle) until the power
    reads 90 % of the limit."""
    idle = float(np.median(r.power[r.t < -2]))
    first = int(np.argmax(r.power > idle + 50))
    capped = int(np.argmax(r.power >= 0.9 * r.limit_w))
    return float(capped - first + 1)


# -- the recordings ----------------------------------------------------------------------------


@functools.cache
def _store(path: Path) -> Reads:
    from soak.store import RunStore

    store = RunStore.open(path)
    tele = store.telemetry(0)
    info = store.devices()[0]
    limit = info.power_limit_w or 700.0
    return _reads(
        tele.t_s, tele.temp_c, tele.power_w, tele.sm_clock_mhz, limit, info.max_sm_clock_mhz
    )


@functools.cache
def _h100_from_idle() -> tuple[Reads, ...]:
    folder = trace_dir(H100)
    assert folder is not None, f"{H100} not found"
    rows = list(csv.DictReader((folder / H100_FROM_IDLE).open()))
    stamp = np.array([dt.datetime.fromisoformat(r["timestamp"]).timestamp() for r in rows])
    gpu = np.array([int(r["gpu_index"]) for r in rows])
    temp = np.array([float(r["temperature_C"]) for r in rows])
    power = np.array([float(r["power_W"]) for r in rows])
    out = []
    for g in range(8):
        k = gpu == g
        end = stamp[k][np.flatnonzero(power[k] > 600)[-1]]  # the load ends at ~250 s
        keep = stamp[k] <= end
        out.append(_reads(stamp[k][keep], temp[k][keep], power[k][keep], None, 700.0))
    return tuple(out)


RECORDINGS: dict[str, Callable[[], tuple[Reads, ...]]] = {
    "h200 mix": lambda: (_store(H200_MIX),),
    "h200 gemm": lambda: (_store(H200_GEMM),),
    "h100 train": _h100_from_idle,
}
RECORDING_NOTES = {
    "h200 mix": "tests/fixtures/gpu/h200-2026-12-04 (11 min of mix from 36 °C)",
    "h200 gemm": "tests/fixtures/gpu/h200-2026-11-30 (45 s of GEMM)",
    "h100 train": f"bench/data/real-traces/{H100}/{H100_FROM_IDLE} (8 GPUs, 4 min from idle)",
}


@functools.cache
def simulated(sku: str, workload: str, minutes: float) -> tuple[Reads, ...]:
    """``SEEDS`` one-GPU servers from idle: their readings."""
    out = []
    for seed in SEEDS:
        run = simulate(seed=seed, gpus=1, sku=sku, workload=workload, duration_s=minutes * 60)
        tele, info = run.data.telemetry[0], run.data.devices[0]
        out.append(
            _reads(
                tele["t_s"] - BASELINE_S,
                tele["temp_c"],
                tele["power_w"],
                tele["sm_clock_mhz"],
                info.power_limit_w or 0.0,
                info.max_sm_clock_mhz,
            )
        )
    return tuple(out)


# -- the table ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """One statistic of one SKU: measured on ``recording``, simulated with ``workload`` for
    ``minutes``, and the band the simulated figure must fall in."""

    sku: str
    recording: str
    workload: str
    statistic: str
    stat: Callable[[Reads], float]
    band: tuple[float, float]
    fmt: str = ".2f"
    minutes: float = 11.0

    def recorded(self) -> float:
        return float(np.median([self.stat(r) for r in RECORDINGS[self.recording]()]))

    def simulated(self) -> float:
        reads = simulated(self.sku, self.workload, self.minutes)
        return float(np.median([self.stat(r) for r in reads]))


P = functools.partial
GEMM_SINCE = 5.0  # the GEMM recording holds 40 s of load: its cap from 5 s on
ROWS = (
    # H200: the power-cap controller and its clock at 1 Hz
    Row("h200", "h200 gemm", "gemm", "GEMM: clock at the cap (MHz)",
        P(clock_mean, since_s=GEMM_SINCE), (1400, 1510), ".0f", 3),
    Row("h200", "h200 gemm", "gemm", "GEMM: one clock read's sd (of the mean)",
        P(clock_scatter, since_s=GEMM_SINCE), (0.008, 0.02), ".3f", 3),
    Row("h200", "h200 gemm", "gemm", "GEMM: power at the cap (of the limit)",
        P(power_share, since_s=GEMM_SINCE), (0.98, 0.99), ".3f", 3),
    Row("h200", "h200 mix", "mix", "mix: clock at the cap (MHz)", clock_mean, (1600, 1760), ".0f"),
    Row("h200", "h200 mix", "mix", "mix: one clock read's sd (of the mean)",
        clock_scatter, (0.095, 0.12), ".3f"),
    Row("h200", "h200 mix", "mix", "mix: clock reads' lag-1 correlation", clock_lag1, (-0.1, 0.15)),
    Row("h200", "h200 mix", "mix", "mix: 5th percentile clock read (of the mean)",
        P(clock_quantile, q=0.05), (0.80, 0.88)),
    Row("h200", "h200 mix", "mix", "mix: 95th percentile clock read (of the mean)",
        P(clock_quantile, q=0.95), (1.12, 1.20)),
    Row("h200", "h200 mix", "mix", "mix: the clock's floor at 10 min (rule line 1, %)",
        clock_floor, (1.5, 3.5)),
    Row("h200", "h200 mix", "mix", "mix: power at the cap (of the limit)",
        power_share, (0.98, 0.99), ".3f"),
    Row("h200", "h200 mix", "mix", "mix: a power read's robust sd (of the median)",
        power_scatter, (0.007, 0.014), ".3f"),
    Row("h200", "h200 mix", "mix", "mix: die read scatter, read to read (°C)",
        temp_scatter, (1.9, 2.8)),
    Row("h200", "h200 mix", "mix", "mix: the rule's scatter of 30-s die medians (°C)",
        batch_scatter_c, (0.3, 0.8)),
    # the boost transient
    Row("h200", "h200 mix", "mix", "mix: clock at the onset's read (of the maximum)",
        first_read_clock, (0.95, 1.0)),
    Row("h200", "h200 mix", "mix", "mix: reads until the power reads 90 % of the limit",
        reads_to_cap, (2, 4), ".0f"),
    # thermal: time constants and the overshoot (or its absence), from idle
    Row("h200", "h200 mix", "mix", "rise from idle to the 1-7.5 min plateau (°C)",
        rise_c, (20.0, 28.0), ".1f"),
    Row("h200", "h200 mix", "mix", "share of that rise by the 30-s mean ending at 1 min",
        P(rise_share, at_s=60.0), (0.88, 1.0)),
    Row("h200", "h200 mix", "mix", "hottest 30-s mean over the median, 1-7.5 min (°C)",
        overshoot_c, (0.0, 1.2)),
    Row("h200", "h200 mix", "mix", "the fall at 8 min: 8.5-10.5 min less 1-7.5 min (°C)",
        late_fall_c, (-2.0, -0.8)),
    # H100: nanoGPT training at the cap, from idle
    Row("h100-sxm", "h100 train", "train", "power at the cap (of the limit)",
        power_share, (0.98, 0.99), ".3f", 4),
    Row("h100-sxm", "h100 train", "train", "rise from idle to the 3-3.5 min level (°C)",
        P(rise_c, start_s=180.0, end_s=210.0), (28.0, 46.0), ".1f", 4),
    Row("h100-sxm", "h100 train", "train", "share of that rise by the 30-s mean ending at 1 min",
        P(rise_share, at_s=60.0, start_s=180.0, end_s=210.0), (0.84, 0.96), minutes=4),
    Row("h100-sxm", "h100 train", "train", "share of that rise by the 30-s mean ending at 2 min",
        P(rise_share, at_s=120.0, start_s=180.0, end_s=210.0), (0.93, 1.0), minutes=4),
    Row("h100-sxm", "h100 train", "train", "hottest 30-s mean over the one ending at 3.5 min (°C)",
        P(peak_over_end_c, end_s=210.0), (0.0, 0.6), minutes=4),
    Row("h100-sxm", "h100 train", "train", "die read scatter, read to read (°C)",
        temp_scatter, (0.3, 0.8), minutes=4),
)  # fmt: skip
