"""The noise of a device's steady figures, which ``soak compare`` weighs a change against.

Noise is estimated by batch means: the steady window is cut into ``NOISE_BLOCKS`` equal
consecutive blocks, the figure (median of a sensor, work rate of a workload part) is taken in
each block, and its standard error is the blocks' standard deviation over √blocks. Blocks a
minute long absorb the short-range correlation of 1-second samples that would make a plain
σ/√n far too small. A sensor reads in steps (1 °C, a clock bin); the smallest step seen over
the load is kept too, since two medians cannot differ by less than one step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from soak.analysis.windows import Window
from soak.fields import NOISE_METRICS, Columns

NOISE_BLOCKS = 10
MIN_BLOCKS = 3  # fewer blocks with data than this: no noise estimate


@dataclass(frozen=True, slots=True)
class Noise:
    se: dict[str, float | None]  # metric -> standard error of its steady median
    throughput_se: dict[str, float | None]  # part -> standard error of its steady rate
    step: dict[str, float | None]  # metric -> smallest step between readings over the load
    blocks: int
    # metric or part -> the blocks that held data (the standard error's blocks − 1 degrees
    # of freedom)
    used: dict[str, int] = field(default_factory=dict)
    # the standard error of the SM clock's mean reading (``WindowStats.clock_mean_mhz``), and
    # its blocks
    clock_mean_se: float | None = None
    clock_mean_blocks: int = 0


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
    tele: Columns,
    work: dict[str, dict[str, np.ndarray]],
    blocks: int = NOISE_BLOCKS,
) -> Noise:
    """Batch-means standard errors of the steady figures (see the module's docstring)."""
    edges = np.linspace(steady.start_s, steady.end_s, blocks + 1)
    t = tele.t_s
    inside = steady.mask(t)
    block_of = np.clip(np.searchsorted(edges, t[inside], side="right") - 1, 0, blocks - 1)
    load_mask = load.mask(t) if load is not None else np.ones(t.shape, bool)
    se: dict[str, float | None] = {}
    step: dict[str, float | None] = {}
    used: dict[str, int] = {}
    clock_means: list[float] = []
    for key in NOISE_METRICS:
        y = tele[key][inside]
        medians = []
        for b in range(blocks):
            values = y[block_of == b]
            values = values[np.isfinite(values)]
            if values.size:
                medians.append(float(np.median(values)))
                if key == "sm_clock_mhz":
                    clock_means.append(float(np.mean(values)))
        se[key] = _se(medians)
        used[key] = len(medians)
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
        used[part] = len(rates)
    return Noise(se, throughput_se, step, blocks, used, _se(clock_means), len(clock_means))
