"""Whether a device's cold window is cold (docs/verdict.md, "The cold window").

The cold-vs-steady figures compare the first minute of load with the steady state; they
mean something only where the first minute was cold. The rule:

1. An imported device whose trace holds no reading before its load segment starts (a log
   that begins with the load; a live run always records an idle baseline first) **began
   under load** when its first ``HEAD_S`` of readings
   are already at their steady level: their median temperature within ``WARM_C`` of the
   steady window's median and, where power is read, their median power at least
   ``LOADED_POWER`` of the steady median (no rising edge; power at load from the first
   row). Such a device has no cold window and no cold-vs-steady ratio; its ``cold_window``
   check warns with these figures.
2. A device with readings before its load (a live run's idle baseline, an import's idle
   head) whose temperature **falls** there by ``FALLING_C`` or more, first readings to
   last, was still hot from a previous job: its cold window is kept (it is the first
   minute of this load), and the check warns that its ratios understate the loss.
3. Otherwise the cold window is cold and the check passes; where the temperature or the
   steady window is not there to tell, it is not checked.

``HEAD_S``: the first half-minute, the span in which a from-cold device's die climbs most
of the way from idle (its time constant is seconds), so the readings in it tell a cold
start from a warm one with the most margin. ``WARM_C``: a from-cold head reads 17-22 °C
below its steady median on the simulator's four SKUs under GEMM and 14-23 °C on the real
V100 gpu-burn traces, which start with the load; the real H100 nanoGPT traces that begin
mid-training read 0-4 °C below (``bench/data/real-traces``), as does the simulator's log
cut 10-20 min into its load (``bench/verdict_accuracy.py --log-forms``). 5 °C lies between.
A load that hardly warms its device (a B200 capped at 200 W rises 0-3 °C) cannot be told
from one begun under load where no idle reading precedes it: it loses its ratio, which such
a load cannot move anyway, and the warning says why. ``LOADED_POWER``: a loaded device
draws at its limit or near it; a head at 80 % of the steady power is under load.
``FALLING_C``: two whole-degree sensor steps, which noise at an idle equilibrium does not
make over a baseline (the real B200 sweep's runs that follow a hotter one fall 2-4 °C in
their idle head: they were).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from soak.analysis.windows import WindowStats
from soak.fields import Columns

HEAD_S = 30.0  # the first readings of a trace that tell a cold start from a warm one
WARM_C = 5.0  # a head this close to the steady temperature is at its steady level
LOADED_POWER = 0.8  # a head drawing this share of the steady power is under load
FALLING_C = 2.0  # an idle baseline falling this much was hot from a previous job
EDGE_READINGS = 3  # readings at each end of a baseline whose medians are compared


@dataclass(frozen=True, slots=True)
class WarmStart:
    """How a device's load began, as the ``cold_window`` check reports it: ``begun`` is
    True where the trace began under load (no cold window at all), False where the idle
    baseline was still hot (the cold window kept); ``message`` carries the figures."""

    begun: bool
    message: str


def warm_start(
    tele: Columns, segment_start_s: float | None, late: WindowStats | None, imported: bool
) -> WarmStart | None:
    """The warm start of one device (rules 1 and 2), or None where its load began cold or
    nothing can tell. ``segment_start_s``: where the load (an import's segment) starts."""
    t, temp = tele.t_s, tele.temp_c
    read = np.isfinite(temp)
    if not read.any():
        return None
    before = read & (t < segment_start_s) if segment_start_s is not None else read & False
    if before.any():
        return _hot_baseline(temp[before])
    if not imported:
        return None
    steady_temp = late.median.temp_c if late is not None else None
    if steady_temp is None:
        return None
    first = float(t[read][0])
    head = read & (t <= first + HEAD_S)
    head_temp = float(np.median(temp[head]))
    if head_temp < steady_temp - WARM_C:
        return None
    power = tele.power_w[(t <= first + HEAD_S) & np.isfinite(tele.power_w)]
    steady_power = late.median.power_w if late is not None else None
    power_text = ""
    if power.size and steady_power:
        head_power = float(np.median(power))
        if head_power < LOADED_POWER * steady_power:
            return None
        share = head_power / steady_power
        power_text = f" and {head_power:.0f} W ({share:.0%} of the steady {steady_power:.0f} W)"
    message = (
        f"the trace begins under load: its first {HEAD_S:.0f} s read {head_temp:.0f} °C"
        f"{power_text}, within {WARM_C:.0f} °C of the steady {steady_temp:.0f} °C with no "
        "rising edge: no cold window, no cold-vs-steady ratio"
    )
    return WarmStart(True, message)


def _hot_baseline(temp: np.ndarray) -> WarmStart | None:
    """Rule 2: an idle baseline whose temperature falls was hot from a previous job."""
    if temp.size < 2 * EDGE_READINGS:
        return None
    start = float(np.median(temp[:EDGE_READINGS]))
    end = float(np.median(temp[-EDGE_READINGS:]))
    if start - end < FALLING_C:
        return None
    message = (
        f"the idle baseline fell from {start:.0f} °C to {end:.0f} °C: the device was still "
        "hot from a previous job, so its cold window was warm and the cold-vs-steady ratios "
        "understate the loss"
    )
    return WarmStart(False, message)
