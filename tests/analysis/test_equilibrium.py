"""Equilibrium: the rule on known curves, online equals offline, the fit recovers τ."""

import numpy as np
import pytest

from soak.analysis.equilibrium import OnlineDetector, Series, detect, fit_exponential
from soak.config import Windows

W = Windows()


def _curves(tau_s=180.0, t_inf=70.0, delta=40.0, seconds=3600, clock_drift=0.0, seed=0):
    rng = np.random.default_rng(seed)
    t = np.arange(0.0, seconds)
    temp = np.round(t_inf - delta * np.exp(-t / tau_s) + rng.normal(0, 0.3, t.size))
    clock = 1800.0 * (1 - clock_drift * t / 60) + rng.normal(0, 2, t.size)
    rate = 7e14 * clock / 1800 * (1 + rng.normal(0, 0.003, t.size))
    power = np.full_like(t, 700.0) + rng.normal(0, 3, t.size)
    return t, temp, clock, rate, power


def _detect(t, temp, clock, rate, power):
    return detect(
        0.0,
        float(t[-1]),
        Series(t, temp),
        Series(t, power),
        Series(t, clock),
        {"gemm": Series(t + 0.5, rate)},
        W,
    )


def test_exponential_approach_is_detected_after_settling_and_not_before():
    t, temp, clock, rate, power = _curves(tau_s=180.0)
    eq = _detect(t, temp, clock, rate, power)
    assert eq.reached and eq.basis == "temperature"
    # Truth: within 0.5 °C of T∞ at tau*ln(40/0.5) = 789 s; over 1 °C away before 664 s.
    assert 664 - 60 <= eq.time_s <= 789 + 300


def test_clock_still_sliding_blocks_equilibrium_even_with_flat_temperature():
    t, temp, clock, rate, power = _curves(tau_s=60.0, clock_drift=0.005)  # 0.5 %/min
    eq = _detect(t, temp, clock, rate, power)
    assert not eq.reached
    # 9 MHz/min against the current level: well past the 0.2 %/min limit.
    assert eq.last_check.clock_rel_slope_pct_per_min < -0.4


def test_without_temperature_power_decides():
    t, temp, clock, rate, power = _curves()
    eq = _detect(t, np.full_like(temp, np.nan), clock, rate, power)
    assert eq.basis == "power" and eq.reached


def test_fit_recovers_time_constant_and_asymptote():
    t, temp, *_ = _curves(tau_s=240.0, seconds=2400)
    fit = fit_exponential(t, temp, 0.0)
    assert fit.tau_s == pytest.approx(240, rel=0.05)
    assert fit.t_inf_c == pytest.approx(70, abs=0.3)


def test_online_detector_finds_the_same_time_as_the_offline_pass():
    t, temp, clock, rate, power = _curves(tau_s=200.0)
    online = OnlineDetector(W, lag_s=0.0)
    online.start(0.0)
    for i in range(t.size):
        online.add_telemetry(t[i], temp[i], power[i], clock[i])
        online.add_rate("gemm", t[i] + 0.5, rate[i])
        online.update(t[i] + 1.0)
    offline = _detect(t, temp, clock, rate, power)
    assert online.equilibrium_s == offline.time_s
    assert len(online._tele) < 400  # bounded: the trailing window, not the hour


def test_eta_shrinks_as_the_device_warms():
    t, temp, clock, rate, power = _curves(tau_s=300.0)
    online = OnlineDetector(W, fit_every_s=30)
    online.start(0.0)
    etas = {}
    for i in range(900):
        online.add_telemetry(t[i], temp[i], power[i], clock[i])
        online.add_rate("gemm", t[i] + 0.5, rate[i])
        online.update(t[i] + 1.0)
        if i in (200, 600):
            etas[i] = online.eta_s(t[i] + 1.0)
    assert etas[200] > etas[600] > 0
