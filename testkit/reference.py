"""The reference equilibrium time of a real trace (issue 13, point 6), which
``bench/real_traces.py`` judges soak's equilibrium against and tests/importers pins down:
the centre of the first 5-minute window after which the centred 5-minute mean temperature
stays within 1.5 °C of the median of the last 30 minutes of load (ignoring the last 2
minutes), and, where throughput is measured, its centred 5-minute mean stays within 1 % of
its last-30-minute median."""

from __future__ import annotations

import numpy as np

WINDOW_S = 300.0  # the centred mean's window
TAIL_S = 1800.0  # the last 30 minutes of load
IGNORE_END_S = 120.0  # ... ignoring its last 2 minutes
TEMP_BAND_C = 1.5
RATE_BAND = 0.01


def centred_mean(t: np.ndarray, y: np.ndarray, centres: np.ndarray, half: float) -> np.ndarray:
    """Mean of the finite y within [c − half, c + half] for each centre; NaN where empty."""
    ok = np.isfinite(y)
    t, y = t[ok], y[ok]
    csum = np.concatenate(([0.0], np.cumsum(y)))
    lo = np.searchsorted(t, centres - half, side="left")
    hi = np.searchsorted(t, centres + half, side="right")
    n = hi - lo
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, (csum[hi] - csum[lo]) / np.maximum(n, 1), np.nan)


def reference_time(
    load_start_s: float,
    load_end_s: float,
    temp_t: np.ndarray,
    temp: np.ndarray,
    rate_t: np.ndarray | None = None,
    rate: np.ndarray | None = None,
) -> float | None:
    """The reference equilibrium time (run seconds), or None where no window qualifies.

    The final level is the median over [end − 2 min − 30 min, end − 2 min] (clipped to the
    load). Candidate centres are every sample time whose 5-minute window lies inside
    [load start, end − 2 min]; the answer is the first centre from which every later centred
    mean stays within 1.5 °C (and, with throughput, within 1 % of its own final level)."""
    end = load_end_s - IGNORE_END_S
    half = WINDOW_S / 2
    if end - load_start_s < WINDOW_S:
        return None
    series = [(temp_t, temp, lambda m, ref: np.abs(m - ref) <= TEMP_BAND_C)]
    if rate_t is not None and rate is not None and np.isfinite(rate).any():
        series.append((rate_t, rate, lambda m, ref: np.abs(m - ref) <= RATE_BAND * abs(ref)))
    in_load = (temp_t >= load_start_s + half) & (temp_t <= end - half)
    centres = temp_t[in_load]
    if centres.size == 0:
        return None
    ok = np.ones(centres.size, dtype=bool)
    for t, y, within in series:
        tail = (t >= max(load_start_s, end - TAIL_S)) & (t <= end) & np.isfinite(y)
        if not tail.any():
            return None
        final = float(np.median(y[tail]))
        mean = centred_mean(t, y, centres, half)
        ok &= np.nan_to_num(within(mean, final), nan=False).astype(bool)
    bad = np.flatnonzero(~ok)
    first = 0 if bad.size == 0 else bad[-1] + 1
    return None if first >= centres.size else float(centres[first])
