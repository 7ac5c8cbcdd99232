"""The reference equilibrium time bench/real_traces.py judges against (testkit.reference),
exactly as issue 13 defines it."""

import numpy as np
import pytest

from testkit.reference import reference_time


def test_step_to_a_plateau_is_dated_at_the_first_window_centre_inside_the_band():
    t = np.arange(0.0, 3600.0, 1.0)
    temp = np.where(t < 600, 30.0, 60.0)  # 30 °C, then 60 °C from 600 s on
    ref = reference_time(0.0, 3600.0, t, temp)
    # the centred 5-min mean is within 1.5 °C of 60 once ≥ 95 % of its window is past 600 s:
    # centre − 150 + 0.05·300 ≥ 600 → centre ≥ 735 (1 s samples, edges inclusive)
    assert ref == pytest.approx(735.0, abs=1.0)


def test_throughput_still_moving_delays_the_reference():
    t = np.arange(0.0, 3600.0, 1.0)
    temp = np.full_like(t, 60.0)
    rate = np.where(t < 1200, 100.0, 95.0)  # a 5 % drop at 20 min
    assert reference_time(0.0, 3600.0, t, temp) == pytest.approx(150.0)
    ref = reference_time(0.0, 3600.0, t, temp, t, rate)
    assert 1200 < ref < 1360


def test_last_two_minutes_are_ignored():
    t = np.arange(0.0, 3600.0, 1.0)
    temp = np.where(t > 3600 - 100, 20.0, 60.0)  # the load ends and the die cools
    assert reference_time(0.0, 3600.0, t, temp) == pytest.approx(150.0)


def test_a_load_shorter_than_the_window_has_no_reference():
    t = np.arange(0.0, 340.0, 1.0)
    assert reference_time(0.0, 340.0, t, np.full_like(t, 50.0)) is None


def test_a_trace_that_never_settles_has_no_reference():
    t = np.arange(0.0, 3600.0, 1.0)
    assert reference_time(0.0, 3600.0, t, 30 + t / 60) is None  # 1 °C/min to the end
