"""Rule line 1: a signal whose own noise leaves its tolerance undecidable does not judge,
and says so; the basis always judges; a signal that is slow, stepped or cycling but whose
readings are quiet within each 30-s batch still judges."""

import numpy as np
import pytest

from soak.analysis.equilibrium import OnlineDetector, Series, Signals, detect
from soak.analysis.equilibrium.check import check_window
from soak.profile import Windows

W = Windows()
H200_MIX_CLOCK_SD = 0.108  # one 1-Hz read at the cap under mix, 2026-12-04 (uniform-like)


def _capped(
    seconds: int = 2400,
    clock_sd: float = H200_MIX_CLOCK_SD,
    clock_drift_per_min: float = 0.0,
    rate_follows_clock: bool = True,
    temp_noise_c: float = 0.3,
    seed: int = 0,
) -> tuple[np.ndarray, Signals]:
    """A device at its power cap: temperature settling with τ = 60 s, power held, the mean
    clock ``1650·(1 + drift·t)`` read once a second with a uniform scatter of ``clock_sd``,
    and a throughput that follows the mean clock where ``rate_follows_clock``."""
    rng = np.random.default_rng(seed)
    t = np.arange(0.0, seconds)
    temp = np.round(60 - 22 * np.exp(-t / 60) + rng.normal(0, temp_noise_c, t.size))
    mean_clock = 1650.0 * (1 + clock_drift_per_min * t / 60)
    spread = np.sqrt(3) * clock_sd * (2 * rng.random(t.size) - 1)
    clock = 15 * np.round(np.minimum(mean_clock * (1 + spread), 1980) / 15)
    shape = mean_clock / 1650 if rate_follows_clock else np.ones_like(t)
    rate = 2.4e14 * shape * (1 + rng.normal(0, 0.003, t.size))
    power = 686 + rng.normal(0, 7, t.size)
    mix = {"mix": Series(t + 0.5, rate)}
    return t, Signals(Series(t, temp), Series(t, power), Series(t, clock), mix)


def test_a_clock_scattered_by_the_power_cap_does_not_block_the_date_and_is_named():
    t, signals = _capped()
    eq = detect(0.0, float(t[-1]), signals, W)
    assert eq.reached
    # τ = 60 s from 22 °C: within 0.5 °C of where it settles from 227 s; over 1 °C away
    # before 185 s
    assert 185 - 60 <= eq.time_s <= 227 + 300
    check = eq.deciding_check
    assert check is not None and check.passed
    assert [d.signal for d in check.judging] == ["temperature", "mix throughput"]
    [clock] = check.set_aside
    assert clock.signal == "SM clock" and clock.undecidable and not clock.judges
    assert clock.floor is not None and clock.floor >= clock.tolerance
    assert clock.set_aside_reason().startswith(
        "SM clock cannot judge: its readings scatter so much within each 30-s batch"
    )
    assert check.dated_by  # the date is set by a signal that judged it


def test_a_noisy_clock_set_aside_cannot_hide_a_slide_the_throughput_shows():
    # The mean clock slides 0.5 %/min and the work with it: the throughput, which the clock
    # drives and which is measured quietly, holds the date back.
    t, signals = _capped(clock_drift_per_min=-0.005)
    eq = detect(0.0, float(t[-1]), signals, W)
    assert not eq.reached
    assert eq.deciding_check is not None
    assert eq.deciding_check.held_back_by == ("mix throughput",)
    assert "mix throughput moved -" in eq.reason


def test_a_quiet_clock_still_judges_and_holds_a_slide_back_with_no_throughput():
    # 1 % of scatter, as gemm alone at the cap: decidable; it slides 0.5 %/min under a
    # settled temperature, with no throughput measured (a telemetry-only import).
    t, signals = _capped(clock_sd=0.01, clock_drift_per_min=-0.005)
    eq = detect(0.0, float(t[-1]), Signals(signals.temp, signals.power, signals.clock), W)
    assert not eq.reached
    assert eq.deciding_check is not None and eq.deciding_check.held_back_by == ("SM clock",)
    assert not eq.deciding_check.set_aside


def test_a_clock_step_is_not_taken_for_noise():
    # A quiet clock that steps down 20 % (a slowdown) while the temperature is flat: one
    # difference among many does not make it undecidable, so the step fails the check.
    t, signals = _capped(clock_sd=0.005, rate_follows_clock=False)
    clock = signals.clock.y.copy()
    clock[t >= 1500] *= 0.8
    stepped = Signals(signals.temp, signals.power, Series(t, clock), signals.rates)
    result = check_window(1500.0 + 150.0, stepped, W, "temperature")
    drift = result.drift("SM clock")
    assert drift is not None and drift.judges and not drift.passed
    assert not result.passed and result.held_back_by == ("SM clock",)


def test_the_basis_judges_however_noisy_it_is():
    # A temperature read with 12 °C of scatter: its floor reaches the 1 °C tolerance, but it
    # is what "settled" means, so it judges, and the check cannot pass.
    _, signals = _capped(clock_sd=0.01, temp_noise_c=12.0)
    result = check_window(1800.0, signals, W, "temperature")
    temp = result.drift("temperature")
    assert temp is not None and temp.undecidable and temp.judges
    assert not result.passed and "temperature" in result.held_back_by


@pytest.mark.parametrize("clock_sd", [0.01, H200_MIX_CLOCK_SD])
def test_online_and_offline_set_the_same_signals_aside(clock_sd):
    t, signals = _capped(clock_sd=clock_sd, seconds=1500)
    offline = detect(0.0, float(t[-1]), signals, W)
    online = OnlineDetector(W)
    online.start(0.0)
    dated = []
    for k in range(t.size):
        online.add_telemetry(t[k], signals.temp.y[k], signals.power.y[k], float(signals.clock.y[k]))
        online.add_rate("mix", t[k] + 0.5, float(signals.rates["mix"].y[k]))
        dated += online.update(float(t[k]) + 1)
    assert offline.reached and online.equilibrium_s == offline.time_s
    assert dated[-1].check is not None and offline.deciding_check is not None
    assert [d.signal for d in dated[-1].check.set_aside] == [
        d.signal for d in offline.deciding_check.set_aside
    ]


@pytest.mark.parametrize(("clock_sd", "withdrawn"), [(H200_MIX_CLOCK_SD, False), (0.005, True)])
def test_only_a_signal_that_can_judge_withdraws_a_date(clock_sd, withdrawn):
    # The mean clock steps up 4 % at 25 min under a settled temperature and a throughput
    # that does not follow (rule line 10): a quiet clock shows it and withdraws the date; a
    # clock scattered by the cap cannot judge the checks, nor refute their date.
    t, signals = _capped(seconds=3600, clock_sd=clock_sd, rate_follows_clock=False, seed=3)
    clock = signals.clock.y.copy()
    clock[t >= 1500] = 15 * np.round(np.minimum(clock[t >= 1500] * 1.04, 1980) / 15)
    stepped = Signals(signals.temp, signals.power, Series(t, clock), signals.rates)
    eq = detect(0.0, float(t[-1]), stepped, W)
    assert bool(eq.withdrawn) is withdrawn
    if withdrawn:
        assert eq.withdrawn[0].refutations[0].signal == "SM clock"
    else:
        assert eq.reached and eq.time_s < 600
