"""The confirming scale (rule, line 16): each device's windows from its fitted τ and the
noise of its batch levels, chosen once from the data up to ``chosen_at_s``."""

import numpy as np
import pytest

from soak.analysis.equilibrium import Clauses, OnlineDetector, Series, Signals, detect
from soak.analysis.equilibrium.scale import SHORTEST_S, choose, chosen_at_s, floor_factor
from soak.profile import Windows

W = Windows()


def _approach(tau_s: float, noise_c: float = 0.3, seconds: float = 2400.0, seed: int = 0):
    t = np.arange(0.0, seconds)
    true = 70.0 - 35.0 * np.exp(-t / tau_s)
    temp = np.round(true + np.random.default_rng(seed).normal(0, noise_c, t.size))
    nan = Series(t, np.full_like(t, np.nan))
    return t, true, Signals(Series(t, temp), nan, nan)


def test_a_fast_quiet_device_is_judged_on_the_shortest_windows_and_confirmed_sooner():
    t, true, signals = _approach(tau_s=30.0)
    eq = detect(0.0, float(t[-1]), signals, W)
    profile = detect(0.0, float(t[-1]), signals, W, Clauses(scale=False))
    assert eq.scale is not None and eq.scale.window_s == SHORTEST_S and not eq.scale.why
    assert eq.scale.tau_s == pytest.approx(30.0, rel=0.2)
    judged = eq.scale.windows
    k = SHORTEST_S / W.eq_window_s
    # the interval, the least steady window and the relative tolerance go with W
    assert judged.eq_check_interval_s == pytest.approx(W.eq_check_interval_s * k)
    assert judged.min_steady_s == pytest.approx(W.min_steady_s * k)
    assert judged.eq_rel_tolerance_pct == pytest.approx(W.eq_rel_tolerance_pct * k)
    assert judged.eq_temp_tolerance_c == W.eq_temp_tolerance_c
    assert profile.scale is not None and profile.scale.window_s == W.eq_window_s
    assert eq.reached and profile.reached
    # confirmed 2 min sooner, and never on a level the tolerance or more from the end's
    assert eq.confirmed_s <= profile.confirmed_s - 2 * 60
    assert np.max(np.abs(true[t >= eq.time_s] - true[-1])) < W.eq_temp_tolerance_c


def test_a_slow_device_keeps_the_profiles_windows():
    t, _, signals = _approach(tau_s=150.0)
    eq = detect(0.0, float(t[-1]), signals, W)
    # 6 min of load show no bend of a 150-s approach clearly enough, or 3τ reaches 5 min
    assert eq.scale is not None and eq.scale.window_s == W.eq_window_s and eq.scale.why


def test_a_noisy_device_gets_longer_windows_than_its_tau_asks_for():
    quiet = choose(W, 0.0, _approach(tau_s=30.0, noise_c=0.3)[2].temp)
    noisy = choose(W, 0.0, _approach(tau_s=30.0, noise_c=2.5)[2].temp)
    assert quiet.window_s == SHORTEST_S
    assert noisy.window_s > quiet.window_s
    assert noisy.scatter_c is not None and noisy.scatter_c > quiet.scatter_c


def test_a_ramp_without_a_bend_keeps_the_profiles_windows():
    t = np.arange(0.0, 2400.0)
    nan = Series(t, np.full_like(t, np.nan))
    found = choose(W, 0.0, Series(t, np.round(40 + t / 60)))
    assert found.window_s == W.eq_window_s and "no bend" in found.why
    assert choose(W, 0.0, nan).why == "no temperature to fit"


def test_the_scale_reads_only_the_data_before_it_is_chosen():
    _, _, signals = _approach(tau_s=30.0)
    until = chosen_at_s(0.0, W)
    cut = Signals(signals.temp.window(-1.0, until), signals.power, signals.clock)
    assert choose(W, 0.0, cut.temp) == choose(W, 0.0, signals.temp)
    # a load that ends before then has no scale, and the profile's windows say it is short
    short = detect(0.0, until - 1.0, signals, W)
    assert short.scale is None and not short.reached


def test_a_signal_stands_aside_on_the_shortest_windows_only_where_it_would_on_the_profiles():
    judged = choose(W, 0.0, _approach(tau_s=30.0)[2].temp).windows
    k = judged.eq_window_s / W.eq_window_s
    # noise as 1/√(batch length), against a tolerance k times the profile's
    assert floor_factor(judged, W) == pytest.approx(k**1.5)
    assert floor_factor(W, W) == 1.0


@pytest.mark.parametrize("tau_s", [30.0, 150.0])
def test_online_and_offline_choose_the_same_windows_and_date(tau_s):
    t, _, signals = _approach(tau_s=tau_s, seconds=1800.0)
    offline = detect(0.0, float(t[-1]), signals, W)
    online = OnlineDetector(W)
    online.start(0.0)
    for k in range(t.size):
        online.add_telemetry(float(t[k]), float(signals.temp.y[k]), None, None)
        online.update(float(t[k]) + 1.0)
    assert online.scale == offline.scale
    assert online.judged_windows == offline.scale.windows
    assert offline.reached and online.equilibrium_s == offline.time_s
    assert online.confirmed_s == offline.confirmed_s
