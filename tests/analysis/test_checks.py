"""Acceptance checks: each a pure function whose message carries its numbers; what cannot
be checked for want of a signal is "not checked" with the capability it lacks, never a pass."""

import dataclasses

import pytest

from soak.analysis import checks as c
from soak.analysis.checks import CounterSpan, Status
from soak.model import WorkerOutcome
from soak.profile import Checks, Profile, load_profile
from tests.analysis.facts import cold, facts, server, stats

P = Profile()


def _one(results, check=None):
    mine = [r for r in results if check is None or r.check == check]
    assert len(mine) == 1, results
    return mine[0]


def test_retention_fails_below_the_floor_and_says_by_how_much():
    f = facts(
        steady=stats(throughput={"gemm": 6.12e14}),
        cold_stats=cold(throughput={"gemm": 6.67e14}),
    )
    r = _one(c.check_throughput_retention(f, P))
    assert r.status is Status.FAIL
    assert r.message == (
        "steady gemm 612 TFLOP/s is 91.8 % of cold 667 TFLOP/s: 3.1 % power-capped drift "
        "(floor 8 %), 0.0 % thermal slowdown, 5.3 % unexplained; floor 95 % for thermal and "
        "unexplained loss"
    )


def test_retention_judges_the_end_of_the_load_too():
    late = stats(3000.0, 3600.0, throughput={"gemm": 6.0e14})
    results = c.check_throughput_retention(facts(final=late), P)
    assert [r.status for r in results] == [Status.PASS, Status.FAIL]
    assert results[1].message.startswith("final gemm 600 TFLOP/s is 83.3 % of cold")


def test_retention_without_a_cold_figure_fails_rather_than_passes():
    f = facts(cold_stats=cold(throughput={"gemm": None}))
    r = _one(c.check_throughput_retention(f, P))
    assert r.status is Status.FAIL and r.message == "gemm: no cold throughput measured"


@pytest.mark.parametrize("steady", [0.0, 7.0e14])
def test_retention_after_a_cold_window_without_work_fails_rather_than_dividing_by_it(steady):
    f = facts(cold_stats=cold(throughput={"gemm": 0.0}), steady=stats(throughput={"gemm": steady}))
    r = _one(c.check_throughput_retention(f, P))
    assert (
        r.status is Status.FAIL and r.message == "gemm: cold throughput 0 FLOP/s: no work done cold"
    )


@pytest.mark.parametrize(
    ("reasons", "status", "text"),
    [
        ({}, Status.PASS, "SW thermal slowdown 0.00 % of steady window (0 s); limit 1.00 %"),
        ({"sw_thermal": 0.25}, Status.FAIL, "SW thermal slowdown 25.00 % of steady window (150 s)"),
    ],
)
def test_sw_thermal_share(reasons, status, text):
    r = _one(c.check_sw_thermal(facts(steady=stats(reasons=reasons)), P))
    assert r.status is status and r.message.startswith(text)


def test_unreadable_clock_reasons_are_not_checked_naming_the_capability():
    f = facts(
        steady=stats(readable_reasons=False),
        hw_episodes=None,
        capabilities={"clock_reasons": "not supported"},
    )
    for check in (c.check_protection_events, c.check_sw_thermal):
        r = _one(check(f, P))
        assert r.status is Status.NOT_CHECKED
        assert r.message == "clock-event reasons not available (clock_reasons: not supported)"


def test_temperature_margin():
    hot = _one(c.check_temp_margin(facts(steady=stats(temp_c=85.0)), P))
    assert hot.status is Status.FAIL
    assert hot.message == (
        "steady temperature (p90) 86 °C is 3 °C below slowdown 89 °C; margin needed 5 °C"
    )
    unknown = _one(c.check_temp_margin(facts(slowdown_temp_c=None), P))
    assert unknown.status is Status.NOT_CHECKED
    assert unknown.message == "slowdown threshold not available"
    unread = _one(c.check_temp_margin(facts(steady=stats(temp_c=None)), P))
    assert unread.status is Status.NOT_CHECKED
    assert unread.message == "steady temperature not available"


def test_temperature_margin_judges_the_end_of_the_load_too():
    # Cooling that fails after equilibrium: the steady window had its margin, the end not.
    hot_end = stats(3000.0, 3600.0, temp_c=85.0)
    results = c.check_temp_margin(facts(final=hot_end), P)
    assert [r.status for r in results] == [Status.PASS, Status.FAIL]
    assert results[1].message == (
        "final temperature (p90) 86 °C is 3 °C below slowdown 89 °C; margin needed 5 °C"
    )


def test_hardware_counters_fail_on_new_errors_and_warn_when_unsupported():
    f = facts(
        counters={
            "ecc_uncorrected": CounterSpan(2, 3, 3),
            "retired_pages": CounterSpan(None, None, None),
            "remap_pending": CounterSpan(0, 1, 1),
            "remap_failure": CounterSpan(None, None, None),
        },
        xids=[79],
    )
    by_check = {r.check: r for r in c.check_hardware_errors(f, P)}
    assert by_check["ecc_uncorrected"].status is Status.FAIL
    assert by_check["ecc_uncorrected"].message == "1 new uncorrectable ECC error (from 2 to 3)"
    assert by_check["remap_pending"].status is Status.FAIL
    # not supported: never "0 errors", and not a warning either: listed apart
    assert by_check["remap_failure"].status is Status.NOT_CHECKED
    assert "retired_pages" not in by_check  # row remapping replaces page retirement
    assert by_check["xid"].message == "1 XID events (codes 79)"


def test_verification_and_worker_outcome():
    none = _one(c.check_verification(facts(verification_checked=0), P))
    assert none.status is Status.WARN and none.message == "no results were verified"
    bad = facts(verification_failed=2, verification_max_error=0.31)
    r = _one(c.check_verification(bad, P))
    assert r.status is Status.FAIL and r.message == (
        "2 of 360 result checks failed; largest error 0.31"
    )
    lost = _one(c.check_outcome(facts(lost=True), P))
    assert lost.status is Status.FAIL and lost.message == "device lost during the run"
    hung = _one(c.check_outcome(facts(outcome=WorkerOutcome.HUNG), P))
    assert hung.status is Status.FAIL and hung.message == "load ended: hung"
    silent = _one(c.check_outcome(facts(outcome=None), P))
    assert silent.status is Status.WARN


def test_equilibrium_not_reached_warns_or_fails_as_the_profile_says():
    f = facts(reached=False)
    assert _one(c.check_equilibrium(f, P)).status is Status.WARN
    strict = dataclasses.replace(P, checks=Checks(require_equilibrium=True))
    assert _one(c.check_equilibrium(f, strict)).status is Status.FAIL


def test_jitter_warns_above_its_limit():
    r = _one(c.check_jitter(facts(steady=stats(cv=0.08)), P))
    assert r.status is Status.WARN
    assert r.message == "steady gemm throughput varies by 8.0 % (CV); limit 5.0 %"


def test_outlier_rule_fails_a_device_7_percent_below_its_peers():
    devices = server(8)
    slow = dataclasses.replace(devices[5], steady=stats(throughput={"gemm": 6.51e14}))
    devices[5] = slow
    results = c.check_outliers(devices, P)
    failing = [r for r in results if r.status is Status.FAIL]
    assert [r.device for r in failing] == [5]
    assert failing[0].message == (
        "steady gemm 651 TFLOP/s is 93.6 % of the server median 696 TFLOP/s; limit 95.0 %"
    )


def test_outlier_rule_widens_with_a_spread_out_server():
    rates = [6.0, 6.3, 6.6, 6.9, 7.2, 7.5, 7.8, 8.1]  # MAD 0.6: 3 MAD is 25 % of the median
    devices = [
        dataclasses.replace(d, steady=stats(throughput={"gemm": r * 1e14}))
        for d, r in zip(server(8), rates, strict=True)
    ]
    assert {r.status for r in c.check_outliers(devices, P)} == {Status.PASS}


def test_outlier_rule_with_most_devices_idle_warns_instead_of_passing_them():
    idle = {f"d{i}": {"steady": stats(throughput={"gemm": 0.0})} for i in range(5)}
    results = c.check_outliers(server(8, **idle), P)
    assert len(results) == 8 and {r.status for r in results} == {Status.WARN}
    assert results[0].message == (
        "steady gemm 0 FLOP/s; the server median is 0 FLOP/s: no reference for the "
        "within-server rule"
    )


def test_outlier_rule_needs_three_devices():
    assert c.check_outliers(server(2), P) == []


def test_floors_are_per_workload_and_name_their_source():
    h100 = load_profile("h100-sxm")
    ok = _one(c.check_floors(facts(), h100))
    assert ok.status is Status.PASS
    assert ok.message.startswith("steady gemm 700 TFLOP/s is 114.8 % of the h100-sxm floor 610")
    assert "[measured] 679 TFLOP/s" in ok.message
    low = _one(c.check_floors(facts(steady=stats(throughput={"gemm": 5.0e14})), h100))
    assert low.status is Status.FAIL
    # In mix the GEMM part shares the device: the GEMM-alone floor does not apply.
    assert c.check_floors(facts(workload="mix"), h100) == []
    missing = _one(c.check_floors(facts(steady=stats(throughput={"gemm": None})), h100))
    assert missing.status is Status.FAIL


def test_floors_judge_the_final_window_too():
    h100 = load_profile("h100-sxm")
    late = stats(3000.0, 3600.0, throughput={"gemm": 5.5e14})
    results = c.check_floors(facts(final=late), h100)
    assert [r.status for r in results] == [Status.PASS, Status.FAIL]
    assert results[1].message.startswith(
        "final gemm 550 TFLOP/s is 90.2 % of the h100-sxm floor 610 TFLOP/s"
    )


def test_a_lowered_power_limit_warns():
    r = _one(c.check_power_limit(facts(power_limit_w=450.0), P))
    assert r.status is Status.WARN
    assert r.message == "power limit 450 W is 64.3 % of the default 700 W; limit 99 %"
    assert _one(c.check_power_limit(facts(), P)).status is Status.PASS
    assert c.check_power_limit(facts(default_power_limit_w=None), P) == []


def test_a_sku_profile_on_another_device_warns():
    h200 = load_profile("h200")
    r = _one(c.check_profile_applies(facts(), h200))
    assert r.status is Status.WARN and "NVIDIA H100 80GB HBM3" in r.message
    sim = facts(name="NVIDIA H200 (simulated)")
    assert c.check_profile_applies(sim, h200) == []
    assert c.check_profile_applies(facts(), P) == []


def test_every_device_check_returns_results_with_their_device():
    f = facts(index=3, final=stats(3000.0, 3600.0))
    for check in c.DEVICE_CHECKS:
        for r in check(f, P):
            assert r.device == 3 and r.message and r.status in Status


@pytest.mark.parametrize("workload", ["gemm", "mix"])
def test_floors_of_a_run_stored_in_the_old_format_warn_instead_of_vanishing(workload):
    # The copy a run stored before floors were per workload: part -> rate.
    stored = {"name": "old", "floors": {"gemm": 6.1e14}, "floor_sources": {"gemm": "x"}}
    old = Profile.from_dict(stored)
    assert Profile.from_dict(old.as_dict()) == old
    r = _one(c.check_floors(facts(workload=workload), old))
    assert r.status is Status.WARN and "older profile format" in r.message and "gemm" in r.message


def test_a_failed_check_counts_when_only_its_event_recorded_it():
    # A store whose rows never carried the checks (mix on a GPU before its rows did) still
    # has the failure as an event: it counts, and counts once when the row has it too.
    import numpy as np

    from soak.analysis.analyze import _verified
    from soak.model import Event, EventKind

    def work(verified):
        v = np.array(verified, dtype=float)
        return {"mix": {"verified": v, "verify_error": np.full(v.size, np.nan)}}

    event = Event(5.0, EventKind.VERIFICATION_FAILED, "gemm failed", 0, {"part": "gemm"})
    unrecorded = _verified(work([np.nan] * 4), [event])
    assert (unrecorded.checked, unrecorded.failed) == (1, 1)
    recorded = _verified(work([1, 0, 1, 1]), [event])
    assert (recorded.checked, recorded.failed) == (4, 1)
    assert _verified(work([1, 1]), []).failed == 0
