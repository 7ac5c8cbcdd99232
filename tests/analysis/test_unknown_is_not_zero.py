"""Issue 39's rules on the analysis's own facts: a share that could not be read is "not
available" in every sentence, never 0 %; a diagnosis needs its evidence (hardware-fault only
where thermal slowdown was ruled out positively and the loss clears the clock's own noise;
thermal "inferred from temperature" where the reasons were not read); the absolute check
against the SKU's SW thermal slowdown temperature; readings left out as impossible warn; a
trace begun under load has no cold window."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from soak.analysis import checks as c
from soak.analysis.analyze import analyze_run
from soak.analysis.checks import Status, run_checks
from soak.analysis.diagnosis import diagnose, peers_of
from soak.analysis.warmstart import warm_start
from soak.fields import Columns
from soak.model import ClockReason
from soak.profile import Profile, load_profile
from testkit.sim import simulate
from tests.analysis.facts import cold, facts, server, stats

P = Profile()
BLIND = dict(readable_reasons=False, limit_w=None)  # a log with no reasons, no power limit
UNCAPPED = {"sw_power_cap": 0.0}  # reasons read, none set


def _one(results, check=None):
    mine = [r for r in results if check is None or r.check == check]
    assert len(mine) == 1, results
    return mine[0]


def _telemetry_only(steady_clock: float, interval=None, **steady_changes):
    """A device of an nvidia-smi log (no throughput): its clock fell from 1755 MHz cold."""
    steady = stats(clock_mhz=steady_clock, throughput={}, **steady_changes)
    cold_stats = cold(throughput={}, **{k: v for k, v in steady_changes.items() if k != "temp_c"})
    if interval is not None:
        steady = dataclasses.replace(steady, median_interval={"sm_clock_mhz": interval})
        cold_stats = dataclasses.replace(
            cold_stats, median_interval={"sm_clock_mhz": (1740.0, 1770.0)}
        )
    return facts(
        steady=steady, cold_stats=cold_stats, records_throughput=False, units={}, foreign_load=True
    )


def test_the_split_names_the_causes_it_could_not_check():
    late = stats(**BLIND)
    split = c.split_by_cause(0.982, 0.982, late, P)
    assert split.unchecked == (
        ("power-capped drift", "no power limit or power-cap reason read"),
        ("thermal slowdown", "no thermal reason read"),
    )
    assert split.causes() == (
        "power-capped drift not available (no power limit or power-cap reason read), "
        "thermal slowdown not available (no thermal reason read), 1.8 % unexplained"
    )


def test_clock_retention_of_a_log_without_reasons_says_not_available_with_its_interval():
    f = _telemetry_only(1720.0, interval=(1700.0, 1730.0), **BLIND)
    r = _one(c.check_throughput_retention(f, P), "clock_retention")
    assert r.message == (
        "steady SM clock 1720 MHz is 98.0 % (95 % interval 96.0 %–99.4 %) of cold 1755 MHz "
        "(in place of throughput): power-capped drift not available (no power limit or "
        "power-cap reason read), thermal slowdown not available (no thermal reason read), "
        "2.0 % unexplained; floor 95 % for thermal and unexplained loss"
    )


def test_a_reason_the_log_did_not_hold_is_not_checked_by_name():
    sw_thermal = int(ClockReason.SW_THERMAL)
    share = {"sw_power_cap": 1.0, "sw_thermal": None, "hw_slowdown": 0.0, "hw_thermal": 0.0}
    steady = dataclasses.replace(stats(), reason_share=share | {"hw_power_brake": 0.0})
    f = facts(
        steady=steady,
        reasons_unread=sw_thermal,
        capabilities={"clock_reasons": "supported", "clock_reasons.sw_thermal": "not supported"},
    )
    r = _one(c.check_sw_thermal(f, P))
    assert r.status is Status.NOT_CHECKED
    assert r.message == (
        "SW thermal slowdown reason not available (clock_reasons.sw_thermal: not supported)"
    )


def test_protection_events_name_the_hw_reasons_not_read():
    f = facts(hw_episodes=(), reasons_unread=int(ClockReason.HW_POWER_BRAKE))
    r = _one(c.check_protection_events(f, P))
    assert r.status is Status.PASS
    assert r.message == (
        "no HW slowdown or HW thermal slowdown during the run "
        "(HW power brake not read: not available)"
    )


@pytest.mark.parametrize(
    "temp,status,text",
    [
        (86.0, Status.WARN, "steady temperature 86 °C is at the SW thermal slowdown temperature "
         "87 °C (within 2 °C): the driver holds the clocks down there"),
        (66.0, Status.PASS, "steady temperature 66 °C is 21 °C below the SW thermal slowdown "
         "temperature 87 °C"),
    ],
)  # fmt: skip
def test_the_absolute_check_against_the_skus_slowdown_temperature(temp, status, text):
    f = facts(steady=stats(temp_c=temp), max_operating_temp_c=87.0)
    r = _one(c.check_slowdown_temp(f, P))
    assert (r.status, r.message) == (status, text)
    assert c.check_slowdown_temp(facts(max_operating_temp_c=None), P) == []


def test_every_device_equally_hot_warns_where_the_hot_spot_rule_cannot_see_it():
    hot = {f"d{i}": dict(max_operating_temp_c=87.0) for i in range(8)}
    devices = server(8, **hot)
    devices = [dataclasses.replace(f, steady=dataclasses.replace(
        f.steady, median=f.steady.median | {"temp_c": 86.0})) for f in devices]  # fmt: skip
    results = run_checks(devices, P)
    assert all(r.status is Status.PASS for r in results if r.check == "hot_spot")
    warned = {r.device for r in results if r.check == "slowdown_temp" and r.status is Status.WARN}
    assert warned == set(range(8))


def _diagnosis(f):
    checks = [r for r in run_checks([f], P) if r.device == f.index]
    return diagnose(f, checks, peers_of([f]), P.checks.min_throughput_retention)


def test_hardware_fault_only_where_thermal_slowdown_was_ruled_out_positively():
    # reasons read and inactive, the clock down 14 % with narrow intervals: the device's
    read = _telemetry_only(1510.0, interval=(1500.0, 1520.0), power_w=500.0, reasons=UNCAPPED)
    found = _diagnosis(read)
    assert found.cause == "hardware-fault"
    # the same loss where the log held no reasons: thermal slowdown not ruled out
    unread = _telemetry_only(1510.0, interval=(1500.0, 1520.0), power_w=500.0, **BLIND)
    found = _diagnosis(unread)
    assert found.cause == "unexplained"
    assert found.evidence[-1] == (
        "the SW thermal slowdown reason was not read: thermal slowdown could not be ruled out"
    )


def test_a_loss_within_the_clocks_own_swing_is_not_a_hardware_fault():
    # a clock swinging between 210 and 1410 MHz from one read to the next: its median's
    # interval reaches the cold level, so the loss is not shown beyond its noise
    swinging = _telemetry_only(1510.0, interval=(345.0, 1980.0), power_w=500.0, reasons=UNCAPPED)
    found = _diagnosis(swinging)
    assert found.cause == "unexplained"
    assert "95 % interval reaches" in found.evidence[-1]
    assert "the loss is within the clock's own swing" in found.evidence[-1]


def test_near_its_slowdown_temperature_without_reasons_it_is_thermal_inferred():
    hot = _telemetry_only(1300.0, interval=(1290.0, 1310.0), temp_c=87.0, **BLIND)
    found = _diagnosis(hot)
    assert found.cause == "thermal-limited (inferred from temperature)"
    assert found.evidence[0] == "clock-event reasons not read: inferred from the temperature"


def test_readings_left_out_as_implausible_are_a_warning_with_count_and_field():
    # issue 39: 18 readings of -7x °C were left out, and the verdict was a clean PASS with
    # no reason about them
    run = simulate(seed=1, faults=("glitch:gpu=1:rate=0.05",), gpus=3, workload="gemm",
                   duration_s=300.0)  # fmt: skip
    analysis = analyze_run(run.data, load_profile(None))
    (reason,) = [r for r in analysis.reasons if r.check == "implausible"]
    assert reason.status is Status.WARN and reason.device == 1
    count = len(run.data.implausible[1])
    assert reason.message.startswith(f"{count} temperature readings outside −20…150 °C (−75 °C at ")


def _columns(temp: np.ndarray, power: np.ndarray) -> Columns:
    t = np.arange(temp.size, dtype=float)
    return Columns({"t_s": t, "temp_c": temp, "power_w": power})


def test_a_trace_begun_under_load_is_told_from_one_begun_cold():
    late = stats(temp_c=68.0, power_w=700.0)
    flat = _columns(np.full(600, 67.0), np.full(600, 695.0))
    found = warm_start(flat, 0.0, late, imported=True)
    assert found is not None and found.begun
    assert found.message == (
        "the trace begins under load: its first 30 s read 67 °C and 695 W (99% of the "
        "steady 700 W), within 5 °C of the steady 68 °C with no rising edge: no cold window, "
        "no cold-vs-steady ratio"
    )
    rising = _columns(np.concatenate([np.linspace(35, 60, 60), np.full(540, 68.0)]),
                      np.full(600, 695.0))  # fmt: skip
    assert warm_start(rising, 0.0, late, imported=True) is None
    # a live run always has its idle baseline: never "begun under load"
    assert warm_start(flat, 0.0, late, imported=False) is None


def test_an_idle_baseline_still_hot_from_a_previous_job_warns_and_keeps_the_window():
    late = stats(temp_c=68.0)
    cooling = _columns(np.concatenate([np.linspace(62, 55, 10), np.full(590, 68.0)]),
                       np.full(600, 600.0))  # fmt: skip
    found = warm_start(cooling, 10.0, late, imported=False)
    assert found is not None and not found.begun
    assert found.message.startswith("the idle baseline fell from 61 °C to 56 °C")
