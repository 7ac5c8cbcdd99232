"""The soak loop on the simulated server: files, stop rules, determinism, verdicts."""

import json
import re
from pathlib import Path

import numpy as np
import pytest

from soak.analysis.analyze import analyze_run
from soak.analysis.decision import replay
from soak.dataset import RunData
from soak.pipeline import analyze, build_outputs
from soak.runner import run
from soak.store import RunStore


def _run(config):
    result = run(config)
    analysis, report = build_outputs(result.run_dir, config.profile)
    return result, analysis, report


def _judged(config):
    """The run and its analysis, for the tests that read no report (an 8-GPU report's
    figures take longer to draw than its soak to simulate)."""
    result = run(config)
    store = RunStore.open(result.run_dir)
    try:
        return result, analyze(store, config.profile)
    finally:
        store.close_read()


def test_a_two_hour_soak_leaves_store_summary_and_report(sim_config):
    result, _, _ = _run(sim_config(duration_s=7200.0, workload="mix"))
    folder = result.run_dir
    assert {p.name for p in folder.iterdir()} >= {"soak.sqlite", "summary.json", "report.html"}
    assert folder.parent.parent == sim_config().out  # OUT/<host>/<stamp>/
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["schema_version"] == 1
    assert summary["verdict"] == "PASS" and result.stop_reason == "duration"
    assert summary["run"]["duration_s"] == pytest.approx(7200, abs=2)
    assert len(summary["devices"]) == 8
    for device in summary["devices"]:
        assert device["equilibrium"]["reached"]
        # dated a few minutes in: the H100's 28-s heat sink (measured) settles within ~3 min
        # (the simulator's die within 1.5 °C of where it stays at 1.3-1.7 min,
        # bench/time_to_verdict.py; a 25 °C rise with τ 28 s is within 1 °C after 90 s);
        # on 4-min windows (rule line 16) some are dated at 2 min
        assert 90 <= device["equilibrium"]["time_s"] <= 1500
        assert 0.94 < device["ratio"]["throughput"]["gemm"] < 0.99  # leakage costs a few %
        assert device["ratio"]["throughput"]["membw"] == pytest.approx(1.0, abs=0.01)
    store = RunStore.open(folder)
    assert store.telemetry_rows() == pytest.approx(8 * (7200 + 10), abs=8 * 5)


def test_until_steady_stops_early_with_the_same_verdict(sim_config):
    # The hour-long run holds every device's equilibrium and steady window, as two would.
    full, full_analysis, _ = _run(sim_config(duration_s=3600.0))
    short, short_analysis, _ = _run(sim_config(duration_s=7200.0, until_steady=True))
    assert short.stop_reason == "steady"
    stop = short_analysis.stop
    assert stop is not None and stop.duration_s is not None and stop.duration_s < 2400
    assert short_analysis.verdict == full_analysis.verdict == "PASS"
    for a, b in zip(full_analysis.devices, short_analysis.devices, strict=True):
        assert a.facts.equilibrium.time_s == b.facts.equilibrium.time_s
        # judged on steady data only: the final window never starts before equilibrium
        assert b.facts.final.window.start_s >= b.facts.equilibrium.time_s
    summary = json.loads((short.run_dir / "summary.json").read_text())
    decision = summary["stop_decision"]
    assert decision["decided"] and decision["n_checks"] == len(decision["checks"]) > 0
    assert decision["decided_at_s"] == pytest.approx(stop.load_stop_s, abs=2)
    assert decision["reason"].startswith(f"all {decision['n_checks']} checks decided at 95 %")
    assert all(c["outcome"] == "pass" for c in decision["checks"])
    closest = decision["closest"]
    assert closest["value"] - closest["ci"] >= closest["floor"]
    # the live view's prediction after 5 and 10 minutes of load, kept against the outcome
    assert [p["at_load_s"] for p in decision["predicted"]] == [300.0, 600.0]
    assert decision["actual_load_s"] == pytest.approx(stop.duration_s, abs=15)
    # how long it went on after the last device settled, and what held it
    last = max(d.facts.equilibrium.time_s for d in short_analysis.devices)
    assert decision["settled_at_s"] == last
    assert decision["after_settled_s"] == pytest.approx(decision["decided_at_s"] - last)
    assert decision["after_settled"].startswith(
        f"went on {decision['after_settled_s'] / 60:.1f} min after the last device settled"
    )
    html = (short.run_dir / "report.html").read_text()
    assert "stop-decision" in html and "after the last device settled" in html
    doc = (Path(__file__).parents[1] / "docs" / "summary-schema.md").read_text()
    documented = set(re.findall(r"`([a-z_0-9]+)`", doc))
    keys = set(decision) | {k for c in decision["checks"] for k in c}
    keys |= {k for p in decision["predicted"] for k in p}
    assert keys <= documented, f"document in docs/summary-schema.md: {keys - documented}"
    # a run without --until-steady has no sequential stop to report
    assert "stop_decision" not in json.loads((full.run_dir / "summary.json").read_text())


def test_until_steady_stops_at_its_limit_and_says_what_is_undecided(sim_config):
    # a limit before any device can be dated: nothing is decided, and the run says so
    config = sim_config(duration_s=7200.0, until_steady=True, max_s=600.0, sim_gpus=2)
    result, analysis, _ = _run(config)
    assert result.stop_reason == "duration"
    assert analysis.stop.detail == "the 10-min limit"
    decision = json.loads((result.run_dir / "summary.json").read_text())["stop_decision"]
    assert not decision["decided"] and decision["decided_at_s"] is None
    assert decision["reason"].startswith("no sequential stop by the 10-min limit: device ")


def test_until_steady_looks_at_the_online_state_and_a_replay_stops_alike(sim_config, monkeypatch):
    """The live stop reads nothing back from the store (its looks judge what the online
    state holds), and the replay of the stored run, fed to the same machinery, stops at the
    same look with the same figures."""
    config = sim_config(duration_s=7200.0, until_steady=True, sim_gpus=2)
    with monkeypatch.context() as patched:
        for name in ("device_series", "telemetry", "telemetry_times", "work"):

            def refuse(*args, _name=name, **kwargs):
                raise AssertionError(f"the live loop read the store ({_name})")

            patched.setattr(RunStore, name, refuse)
        result = run(config)
    assert result.stop_reason == "steady"
    store = RunStore.open(result.run_dir)
    try:
        data = RunData.from_store(store)
    finally:
        store.close_read()
    live = data.meta.stop_decision
    assert live is not None and live.decided
    replayed = replay(data, config.profile, analyze_run(data, config.profile))
    assert replayed is not None and replayed.decided
    assert replayed.t_s == live.decided_at_s
    assert replayed.as_json()["checks"] == live.to_json()["checks"]


def test_same_seed_same_run_bit_for_bit(sim_config):
    first = run(sim_config(duration_s=600.0))
    second = run(sim_config(duration_s=600.0))
    a, b = RunStore.open(first.run_dir), RunStore.open(second.run_dir)
    for device in range(8):
        for key, values in a.telemetry(device).items():
            np.testing.assert_array_equal(values, b.telemetry(device)[key], err_msg=key)
        np.testing.assert_array_equal(
            a.work(device)["gemm"]["work"], b.work(device)["gemm"]["work"]
        )


def test_airflow_fault_fails_that_device_only_and_says_why(sim_config):
    config = sim_config(duration_s=3600.0, sim_faults=("airflow:gpu=3:factor=2.2",))
    _, analysis = _judged(config)
    assert analysis.verdict == "FAIL"
    verdicts = {d.index: d.verdict for d in analysis.devices}
    assert verdicts.pop(3) == "FAIL" and set(verdicts.values()) == {"PASS"}
    assert analysis.devices[3].diagnosis == "thermal-limited"
    failing = {c.check for c in analysis.reasons if c.device == 3 and c.status == "fail"}
    assert {"throughput_retention", "sw_thermal"} <= failing
    message = next(c.message for c in analysis.reasons if c.check == "throughput_retention")
    assert "TFLOP/s" in message and "% of cold" in message


def test_lost_device_fails_while_the_others_finish(sim_config):
    config = sim_config(duration_s=1800.0, sim_faults=("xid:gpu=6:code=79:at=600",))
    result, analysis = _judged(config)
    assert result.stop_reason == "duration"
    assert analysis.devices[6].verdict == "FAIL"
    assert analysis.devices[6].diagnosis == "hardware-fault"
    store = RunStore.open(result.run_dir)
    assert store.telemetry(6)["t_s"].max() < 620  # nothing after it was lost
    assert store.telemetry(5)["t_s"].max() > 1800
    assert {d.verdict for d in analysis.devices if d.index != 6} == {"PASS"}


def test_interrupted_before_the_cold_window_ends_is_incomplete_not_fail(sim_config, tmp_path):
    """Ctrl-C before the cold window begins: nothing is known against the devices yet."""
    from soak.clock import VirtualClock
    from soak.devices.sim import SimServer
    from soak.runner import Runner, Stopper

    stopper = Stopper()

    def interrupt_early(runner, progress):
        if progress.t_s >= 13.0:  # 10 s baseline, 3 s of load
            stopper.reason = "interrupted"

    config = sim_config(duration_s=3600.0)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    backend = SimServer(gpus=2, seed=1)
    Runner(config, backend, VirtualClock(), run_dir, on_tick=interrupt_early).run(stopper)
    analysis, _ = build_outputs(run_dir, config.profile)
    assert analysis.stop_reason == "interrupted"
    assert analysis.verdict == "INCOMPLETE"
    assert {d.verdict for d in analysis.devices} == {"INCOMPLETE"}
    retention = [c for c in analysis.reasons if c.check == "throughput_retention"]
    assert retention and all(c.status == "warn" for c in retention)
    assert "before the run stopped" in retention[0].message


@pytest.mark.slow
def test_frozen_telemetry_fails_that_device_while_the_others_finish(sim_config):
    config = sim_config(duration_s=1800.0, sim_faults=("frozen:gpu=2:at=900",))
    result, analysis, report = _run(config)
    assert result.stop_reason == "duration"
    frozen = analysis.devices[2]
    assert frozen.verdict == "FAIL" and frozen.diagnosis == "hardware-fault"
    (check,) = [c for c in frozen.checks if c.check == "telemetry"]
    # the fault holds from the first reading at or after 900 s of load (load from 10 s),
    # its time given in minutes since the device's own load start
    since = (910.0 - frozen.load_start_s) / 60
    assert check.message.startswith(f"telemetry frozen from {since:.1f} min: power ")
    assert "°C unchanged for 5 min while the load ran" in check.message
    assert {d.verdict for d in analysis.devices if d.index != 2} == {"PASS"}
    assert check.message in report.read_text()


@pytest.mark.slow
def test_glitches_gaps_and_resets_are_named_with_their_times_and_judged_around(sim_config):
    # the reset inside device 2's steady window, which starts 5 min in (its 28-s heat sink
    # settles within minutes) and lasts 10 min
    faults = ("glitch:gpu=0:rate=0.01:at=600", "gap:at=900:for=120", "reset:gpu=2:at=700")
    config = sim_config(duration_s=1800.0, sim_gpus=3, sim_faults=faults)
    result, analysis, report = _run(config)
    assert {d.verdict for d in analysis.devices} == {"PASS"}
    summary = json.loads((result.run_dir / "summary.json").read_text())
    quality = {d["index"]: d["telemetry_quality"] for d in summary["devices"]}
    # glitches: left out, stored as read
    assert quality[0]["implausible"] == quality[0]["implausible_by_field"]["temp_c"] > 0
    assert quality[1]["implausible"] == quality[2]["implausible"] == 0
    (left_out,) = quality[0]["left_out"]
    assert left_out.startswith(f"{quality[0]['implausible']} temperature readings outside ")
    assert "−20…150 °C (−75 °C at " in left_out and left_out.endswith("were left out")
    assert left_out in report.read_text()
    store = RunStore.open(result.run_dir)
    raw, judged = store.telemetry(0, as_read=True)["temp_c"], store.telemetry(0)["temp_c"]
    assert np.sum(raw == -75.0) == quality[0]["implausible"] and not np.any(judged < 0)
    assert [f.t_s for f in store.implausible(0)] and min(f.t_s for f in store.implausible(0)) >= 610
    # the gap: every device, from the last reading before (load from 10 s)
    for q in quality.values():
        assert q["gaps"] == [{"from_s": 909.0, "to_s": 1030.0}] and q["missing_s"] == 121.0
    # the reset (load from 10 s); the energy counts on either side add up, so the mean power
    # from the counter over the steady window is the others' (a counter read back as it is
    # would give a negative energy there)
    (reset,) = quality[2]["resets"]
    assert reset["field"] == "energy_j" and reset["t_s"] == 710.0 and reset["after"] == 0.0
    steady = next(d for d in analysis.devices if d.index == 2).facts.steady
    assert steady.window.start_s < 710.0 < steady.window.end_s
    assert steady.energy_basis == "energy counter"
    others = [d.facts.steady.power_mean_w for d in analysis.devices if d.index != 2]
    assert min(others) * 0.99 < steady.power_mean_w < max(others) * 1.01
    # each text in minutes since its device's own load start
    start = {d.index: d.load_start_s for d in analysis.devices}
    text = report.read_text()
    assert f"energy counter reset at {(710.0 - start[2]) / 60:.1f} min" in text
    for index in quality:
        assert f"no readings for 2 min from {(909.0 - start[index]) / 60:.1f} min" in text
    assert "telemetry quality" in text
