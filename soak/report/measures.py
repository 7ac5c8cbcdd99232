"""What the report measures on the raw series beyond the analysis: energy per unit of work,
and the noise of the steady figures that ``soak compare`` weighs a change against.

Noise is estimated by batch means: the steady window is cut into ``NOISE_BLOCKS`` equal
consecutive blocks, the figure (median of a sensor, work rate of a workload part) is taken in
each block, and its standard error is the blocks' standard deviation over √blocks. Blocks a
minute long absorb the short-range correlation of 1-second samples that would make a plain
σ/√n far too small. A sensor reads in steps (1 °C, a clock bin); the smallest step seen over
the load is kept too, since two medians cannot differ by less than one step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from soak.analysis.analyze import DeviceResult
from soak.analysis.windows import Window, WindowStats

NOISE_BLOCKS = 10
MIN_BLOCKS = 3  # fewer blocks with data than this: no noise estimate
NOISE_METRICS = ("temp_c", "mem_temp_c", "sm_clock_mhz", "mem_clock_mhz", "power_w")


@dataclass(frozen=True, slots=True)
class WindowEnergy:
    """Mean power over a window and the energy each unit of work cost in it. With several
    workload parts running at once (``mix``) each part is charged the whole device's energy."""

    power_w: float | None
    basis: str | None  # "energy counter" or "power integral"
    per_work: dict[str, float | None]  # part -> J per unit of work (J/FLOP, J/B, J/token)


@dataclass(frozen=True, slots=True)
class Noise:
    se: dict[str, float | None]  # metric -> standard error of its steady median
    throughput_se: dict[str, float | None]  # part -> standard error of its steady rate
    step: dict[str, float | None]  # metric -> smallest step between readings over the load
    blocks: int


@dataclass(frozen=True, slots=True)
class DeviceMeasures:
    cold: WindowEnergy | None
    steady: WindowEnergy | None
    noise: Noise | None


def _mean_power(window: Window, tele: dict[str, np.ndarray]) -> tuple[float | None, str | None]:
    t = tele["t_s"]
    mask = window.mask(t)
    te = t[mask]
    energy = tele["energy_j"][mask]
    ok = np.isfinite(energy)
    if ok.sum() >= 2 and te[ok][-1] > te[ok][0]:
        joules = float(energy[ok][-1] - energy[ok][0])
        if joules >= 0:  # a counter that went backwards (reset) is not believed
            return joules / float(te[ok][-1] - te[ok][0]), "energy counter"
    power = tele["power_w"][mask]
    ok = np.isfinite(power)
    if ok.sum() >= 2 and te[ok][-1] > te[ok][0]:
        tp, yp = te[ok], power[ok]
        joules = float(np.sum((yp[1:] + yp[:-1]) / 2 * np.diff(tp)))
        return joules / float(tp[-1] - tp[0]), "power integral"
    if ok.sum() == 1:
        return float(power[ok][0]), "power integral"
    return None, None


def window_energy(stats: WindowStats | None, tele: dict[str, np.ndarray]) -> WindowEnergy | None:
    if stats is None:
        return None
    power, basis = _mean_power(stats.window, tele)
    per_work = {
        part: power / rate if power is not None and rate else None
        for part, rate in stats.throughput.items()
    }
    return WindowEnergy(power, basis, per_work)


def _se(values: list[float]) -> float | None:
    if len(values) < MIN_BLOCKS:
        return None
    return float(np.std(values, ddof=1) / math.sqrt(len(values)))


def _step(values: np.ndarray) -> float | None:
    distinct = np.unique(values[np.isfinite(values)])
    if distinct.size < 2:
        return None
    return float(np.diff(distinct).min())


def noise(
    steady: Window,
    load: Window | None,
    tele: dict[str, np.ndarray],
    work: dict[str, dict[str, np.ndarray]],
    blocks: int = NOISE_BLOCKS,
) -> Noise:
    """Batch-means standard errors of the steady figures (see the module's docstring)."""
    edges = np.linspace(steady.start_s, steady.end_s, blocks + 1)
    t = tele["t_s"]
    inside = steady.mask(t)
    block_of = np.clip(np.searchsorted(edges, t[inside], side="right") - 1, 0, blocks - 1)
    load_mask = load.mask(t) if load is not None else np.ones(t.shape, bool)
    se: dict[str, float | None] = {}
    step: dict[str, float | None] = {}
    for key in NOISE_METRICS:
        y = tele[key][inside]
        medians = []
        for b in range(blocks):
            values = y[block_of == b]
            values = values[np.isfinite(values)]
            if values.size:
                medians.append(float(np.median(values)))
        se[key] = _se(medians)
        step[key] = _step(tele[key][load_mask])
    throughput_se: dict[str, float | None] = {}
    for part, w in work.items():
        mid = (w["t_start_s"] + w["t_end_s"]) / 2
        mask = steady.mask(mid)
        b = np.clip(np.searchsorted(edges, mid[mask], side="right") - 1, 0, blocks - 1)
        done = np.bincount(b, weights=w["work"][mask], minlength=blocks)
        spent = np.bincount(b, weights=(w["t_end_s"] - w["t_start_s"])[mask], minlength=blocks)
        rates = [float(d / s) for d, s in zip(done, spent, strict=True) if s > 0]
        throughput_se[part] = _se(rates)
    return Noise(se, throughput_se, step, blocks)


def measure(
    d: DeviceResult, tele: dict[str, np.ndarray], work: dict[str, dict[str, np.ndarray]]
) -> DeviceMeasures:
    f = d.facts
    load = f.whole.window if f.whole is not None else None
    return DeviceMeasures(
        cold=window_energy(f.cold, tele),
        steady=window_energy(f.steady, tele),
        noise=noise(f.steady.window, load, tele, work) if f.steady is not None else None,
    )
