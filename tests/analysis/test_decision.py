"""The sequential stop's statistics (soak.analysis.intervals) and its decision
(soak.analysis.decision): a figure is decided only where its interval clears its floor, and
no stop comes before every device is dated with its least steady window."""

from __future__ import annotations

import dataclasses
import math

import pytest

from soak.analysis.analyze import analyze_run
from soak.analysis.decision import (
    DECIDE_EVERY_S,
    Decision,
    Judged,
    LiveStop,
    Outcome,
    StoredFeed,
    decide,
    digest_work,
    least_steady_s,
    replay,
    truncated,
)
from soak.analysis.equilibrium import OnlineDetector
from soak.analysis.intervals import Interval, mean_interval, ratio_interval, t_quantile
from soak.analysis.windows import LiveWork
from soak.profile import load_profile
from testkit.sim import simulate


def test_a_mean_interval_is_t_times_the_batch_means_error():
    found = mean_interval(100.0, 2.0, blocks=10)
    assert found is not None
    assert found.half == pytest.approx(2.262 * 2.0, rel=1e-3)  # t(0.975, 9)
    assert (found.low, found.high) == pytest.approx((100 - found.half, 100 + found.half))


def test_no_interval_without_a_noise_estimate():
    assert mean_interval(100.0, None, blocks=10) is None
    assert mean_interval(None, 1.0, blocks=10) is None
    assert ratio_interval(mean_interval(1.0, 0.1, 10), None) is None


def test_a_ratio_interval_adds_the_relative_errors_in_quadrature():
    late, cold = Interval(96.0, 0.0, 0.96, 9), Interval(100.0, 0.0, 1.0, 5)
    found = ratio_interval(late, cold)
    assert found is not None
    assert found.value == pytest.approx(0.96)
    assert found.se == pytest.approx(0.96 * math.hypot(0.01, 0.01))
    assert found.half == pytest.approx(t_quantile(5) * found.se)  # the smaller df


@pytest.mark.parametrize(
    ("value", "half", "outcome"),
    [
        (0.97, 0.01, Outcome.PASS),  # 96–98 % against 95 %
        (0.90, 0.01, Outcome.FAIL),  # 89–91 %
        (0.951, 0.006, Outcome.UNDECIDED),  # on the floor: 94.5–95.7 %
    ],
)
def test_a_check_is_decided_only_where_its_interval_clears_the_floor(value, half, outcome):
    judged = Judged(3, "steady/cold gemm", value, Interval(value, half, half / 2, 9), 0.95)
    assert judged.outcome is outcome


def test_a_ceiling_is_decided_the_other_way_round():
    drift = Judged(0, "drift", 0.03, Interval(0.03, 0.01, 0.005, 9), 0.08, higher_passes=False)
    assert drift.outcome is Outcome.PASS
    over = Judged(0, "drift", 0.12, Interval(0.12, 0.01, 0.005, 9), 0.08, higher_passes=False)
    assert over.outcome is Outcome.FAIL


def test_a_figure_without_noise_is_never_decided():
    assert Judged(0, "steady/cold gemm", 0.99, None, 0.95).outcome is Outcome.UNDECIDED


def test_the_reason_names_the_closest_check_with_its_interval():
    judged = Judged(3, "steady/cold gemm", 0.962, Interval(0.962, 0.004, 0.002, 9), 0.95)
    far = Judged(1, "steady/cold gemm", 0.99, Interval(0.99, 0.004, 0.002, 9), 0.95)

    decision = Decision(900.0, 816.0, (far, judged))
    assert decision.decided
    assert decision.reason() == (
        "all 2 checks decided at 95 % after 13.6 min of load: the closest, "
        "device 3 steady/cold gemm 96.2 % ± 0.4 % against 95.0 %"
    )
    on_floor = Judged(3, "steady/cold gemm", 0.951, Interval(0.951, 0.006, 0.003, 9), 0.95)
    open_ = Decision(3010.0, 3000.0, (on_floor,))
    assert not open_.decided
    assert "undecided at the 50-min limit" in open_.reason(3000.0)


@pytest.fixture(scope="module")
def healthy():
    """Two healthy simulated GPUs over 40 minutes, and where the stop falls on them."""
    run = simulate(seed=5, gpus=2, duration_s=2400.0)
    profile = load_profile(None)
    found = replay(run.data, profile, analyze_run(run.data, profile))
    assert found is not None, "a healthy server is decided within 40 minutes"
    return run.data, profile, found


@pytest.mark.slow
def test_a_healthy_server_is_decided_pass_once_dated_with_its_least_steady_window(healthy):
    data, profile, found = healthy
    assert found.decided and found.judged
    assert all(j.outcome is Outcome.PASS for j in found.judged)
    analysis = analyze_run(truncated(data, found.t_s), profile)
    for d in analysis.devices:
        eq, steady = d.facts.equilibrium, d.facts.steady
        assert eq is not None and eq.reached
        assert steady is not None and steady.window.start_s == eq.time_s
        # its least steady window: the profile's, scaled with its windows (rule, line 16)
        least = least_steady_s(d, profile.windows)
        assert eq.scale is not None
        assert least == profile.windows.min_steady_s * eq.scale.window_s / 300.0
        assert steady.window.length_s >= least


@pytest.mark.slow
def test_the_stop_says_how_long_it_went_on_after_the_last_device_settled_and_why(healthy):
    data, profile, found = healthy
    analysis = analyze_run(truncated(data, found.t_s), profile)
    dates = {d.index: d.facts.equilibrium.time_s for d in analysis.devices}
    settled = found.settled
    assert settled is not None and settled.date_s == max(dates.values())
    assert dates[settled.device] == settled.date_s
    assert settled.date_s < settled.ready_s <= found.t_s
    start = data.meta.load_start_s
    text = found.after_settled()
    assert text.startswith(
        f"went on {(found.t_s - settled.date_s) / 60:.1f} min after the last device settled "
        f"(device {settled.device}, dated at {(settled.date_s - start) / 60:.1f} min of load)"
    )
    assert ("its date confirmed at" in text) == settled.by_confirmation
    stored = found.as_json()
    assert stored["after_settled_s"] == found.t_s - settled.date_s
    assert stored["settled_at_s"] == settled.date_s and stored["after_settled"] == text
    # before a device is dated there is nothing to say
    early = decide(data, profile, start + 300.0)
    assert early.settled is None and early.after_settled() == ""
    assert "after_settled_s" not in early.as_json()  # absent where a device is not dated


@pytest.mark.slow
def test_no_stop_before_every_device_is_dated(healthy):
    data, profile, _ = healthy
    analysis = analyze_run(data, profile)
    confirmed = min(d.facts.equilibrium.confirmed_s for d in analysis.devices)
    early = decide(data, profile, confirmed - 60.0)
    assert not early.decided
    assert "has no equilibrium date" in early.blocked


@pytest.mark.slow
def test_a_floor_above_every_figure_is_decided_fail(healthy):
    data, profile, found = healthy
    strict = dataclasses.replace(
        profile, checks=dataclasses.replace(profile.checks, min_throughput_retention=1.3)
    )
    decision = decide(data, strict, found.t_s)
    retention = [j for j in decision.judged if j.floor == 1.3]
    assert retention and all(j.outcome is Outcome.FAIL for j in retention)
    verdict = analyze_run(truncated(data, found.t_s), strict).verdict
    assert verdict == "FAIL"


@pytest.mark.slow
def test_a_figure_on_its_floor_keeps_the_run_going(healthy):
    data, profile, found = healthy
    # the retention ratio closest to its floor (a power-capped drift, lower passing, can be
    # the closest check of all: its interval is the clock's, which scatters at the cap)
    floor = profile.checks.min_throughput_retention
    ratios = [j for j in found.judged if j.higher_passes and j.floor == floor and j.interval]
    closest = min(ratios, key=lambda j: (j.value - floor) / j.interval.half)
    on_floor = dataclasses.replace(
        profile, checks=dataclasses.replace(profile.checks, min_throughput_retention=closest.value)
    )
    decision = decide(data, on_floor, found.t_s)
    assert not decision.decided
    assert any(j.device == closest.device and j.label == closest.label for j in decision.undecided)


@pytest.mark.slow
def test_a_replayed_look_judges_what_the_whole_analysis_judges(healthy):
    """The online look (``LiveStop``: the windows held, the detector's date) gives the very
    figures and intervals the whole analysis of the run cut at the same time gives."""
    data, profile, found = healthy
    offline = decide(data, profile, found.t_s)
    assert offline.decided and not offline.blocked
    assert [(j.label, j.value, j.interval) for j in found.judged] == [
        (j.label, j.value, j.interval) for j in offline.judged
    ]
    # the first look falls where a live run's would: its equilibrium dated by the detector
    # after its lag, the least steady window held, on a tick of the run
    analysis = analyze_run(data, profile)
    least = profile.windows.min_steady_s
    earliest = max(
        max(d.facts.equilibrium.confirmed_s, d.facts.equilibrium.time_s + least)
        for d in analysis.devices
    )
    assert earliest <= found.t_s <= earliest + DECIDE_EVERY_S + 10.0


@pytest.mark.slow  # the whole pipeline / two simulated hours fed tick by tick
def test_what_a_look_holds_is_bounded_by_the_windows_not_the_run():
    """Fed two hours of a simulated run tick by tick, the stop's held readings stop growing
    once the windows are behind: a look at hour 2 reads no more than one at hour 1."""
    run = simulate(seed=2, gpus=2, duration_s=7200.0)
    data, profile = run.data, load_profile(None)
    detectors = {d.index: OnlineDetector(profile.windows) for d in data.devices}
    work = {d.index: LiveWork(profile.windows) for d in data.devices}
    stop = LiveStop(profile, data.meta.run, data.devices, detectors, work)
    stop.load_started(data.meta.load_start_s)
    feed = StoredFeed(data)
    started: dict[int, float] = {}
    held, fed = {}, 0
    for t in feed.times:
        rows, samples = feed.upto(t)
        for index, columns in rows.items():
            stop.add_columns(index, columns)
            fed += columns["t_s"].size
            for k in range(columns["t_s"].size):
                detectors[index].add_telemetry(
                    columns["t_s"][k],
                    columns["temp_c"][k],
                    columns["power_w"][k],
                    columns["sm_clock_mhz"][k],
                )
        digest_work(t, samples, detectors, work, started)
        for detector in detectors.values():
            detector.update(t)
        stop.forget(t)
        if t >= 3600:
            held[t] = stop.rows_held()
    assert all(d.equilibrium_s is not None for d in detectors.values())
    bound = (
        2
        * len(detectors)
        * (
            max(detectors[0].reach_s, profile.windows.steady_length_s)  # the recent readings
            + profile.windows.cold_length_s  # the cold window
            + profile.windows.steady_length_s  # the steady window of the date held
            + 60.0  # the baseline and a trace's head
        )
    )
    assert bound < 0.75 * fed  # a look that held the whole run would not keep under it
    assert max(held.values()) <= bound  # twice the windows: rows are dropped in batches
    assert stop.decide(set(detectors), feed.times[-1]).decided
