"""Load segments: found from utilisation, power or throughput; the longest is imported, the
others listed; --load-start/--load-end override."""

import numpy as np
import pytest

from soak.errors import ConfigError
from soak.importers.core import DeviceTrace, Trace, choose_segment, find_segments, loaded_mask
from soak.importers.source import ImportFailed


def _trace(util=None, power=None, rate=None, n=600, step=1.0):
    trace = Trace(path="t.csv", format="csv", time_basis="test")  # type: ignore[arg-type]
    for k in range(n):
        values = {}
        if util is not None:
            values["util_pct"] = util(k * step)
        if power is not None:
            values["power_w"] = power(k * step)
        if rate is not None:
            values["throughput"] = rate(k * step)
        trace.add(0, k * step, values, k + 2)
    return trace


def phases(*spans):
    """1 inside any [a, b) span, else 0."""
    return lambda t: 1.0 if any(a <= t < b for a, b in spans) else 0.0


def test_longest_utilisation_segment_is_chosen_and_the_others_listed():
    on = phases((60, 120), (200, 500))
    segment, others = choose_segment(_trace(util=lambda t: 99 * on(t)), None, None)
    assert (segment.start_s, segment.end_s, segment.basis) == (200, 499, "utilisation")
    assert [(s.start_s, s.end_s) for s in others] == [(60, 119)]


def test_short_dips_do_not_split_and_short_bursts_are_not_segments():
    on = phases((100, 300), (310, 400), (500, 510))
    t = np.arange(600.0)
    found = find_segments(t, np.array([on(x) > 0 for x in t]), "utilisation")
    assert [(s.start_s, s.end_s) for s in found] == [(100, 399)]


def test_power_decides_without_utilisation():
    trace = _trace(power=lambda t: 80 + 600 * phases((120, 480))(t))
    mask, basis = loaded_mask(trace.devices[0])
    assert basis == "power" and mask[150] and not mask[100] and not mask[500]


def test_throughput_decides_without_utilisation_or_power():
    trace = _trace(rate=lambda t: 1e12 * phases((0, 400))(t))
    segment, _ = choose_segment(trace, None, None)
    assert (segment.start_s, segment.end_s, segment.basis) == (0, 399, "throughput")


def test_flat_power_is_all_load():
    trace = _trace(power=lambda t: 690.0)
    segment, _ = choose_segment(trace, None, None)
    assert (segment.start_s, segment.end_s) == (0, 599)


def test_given_bounds_override_detection():
    trace = _trace(util=lambda t: 99 * phases((200, 500))(t))
    segment, others = choose_segment(trace, 100.0, None)
    assert (segment.start_s, segment.end_s, segment.basis) == (100.0, 499, "given")
    assert [(s.start_s, s.end_s) for s in others] == [(200, 499)]
    with pytest.raises(ConfigError, match="not a segment"):
        choose_segment(trace, 300.0, 200.0)
    with pytest.raises(ConfigError, match="past the trace's end"):
        choose_segment(trace, 700.0, None)


def test_no_load_at_all_says_to_give_the_bounds():
    with pytest.raises(ImportFailed, match="give --load-start/--load-end"):
        choose_segment(_trace(util=lambda t: 0.0), None, None)


def test_work_before_the_first_report_is_not_a_stall():
    """gpu-burn-fed CSVs print 0 until the first batch: those zeros make no work samples."""
    from soak.importers.core import _work_samples

    device = DeviceTrace()
    for k, rate in enumerate([0, 0, 5, 5, 0, 5]):
        device.t.append(float(k))
        device.rate.append(float(rate))
        device.rate_interval.append(None)
    samples = _work_samples(0, device, "gemm", "FLOP", 0.0, 10.0)
    assert [(s.t_start_s, s.t_end_s, s.work) for s in samples] == [
        (1.0, 2.0, 5.0),
        (2.0, 3.0, 5.0),
        (3.0, 4.0, 0.0),  # a zero after work was reported is kept: a stall
        (4.0, 5.0, 5.0),
    ]
