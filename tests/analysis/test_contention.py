"""Contention on synthetic telemetry: a throughput loss that coincides with foreign load is
incomplete and diagnosed as contention with its figures, never a hardware fault; a loss
that stays without it, or one with no foreign load at all, fails as before."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from soak.analysis import analyze_run
from soak.analysis.checks import Status
from soak.analysis.contention import (
    ALIKE,
    FOREIGN_MIN_PCT,
    Contention,
    foreign_mask,
    inflated,
    window_contention,
)
from soak.analysis.windows import Window
from soak.dataset import RunData
from soak.fields import Columns
from soak.model import (
    TELEMETRY_METRICS,
    DeviceInfo,
    Event,
    EventKind,
    StopReason,
    Verdict,
)
from soak.profile import load_profile
from soak.record import RunMeta, RunRecord, StopRecord
from soak.report.junit import write_junit

LOAD_S = 1200.0  # 20 min of load: cold minute, then the last 10 min as the steady window
RATE = 1000.0  # token/s of an uncontended CPU


def _run(
    rate: Callable[[float], float],
    foreign: Callable[[float], float] | None,
    backend: str = "cpu",
    procs: Callable[[float], float] | None = None,
    events: list[Event] = (),
    ending: dict | None = None,
) -> RunData:
    """One device under ``train`` for LOAD_S: 1-s steps at ``rate(t)``, readings each second
    with ``foreign(t)`` % foreign load (None: not measured), steady temperature and clock."""
    t = np.arange(0.0, LOAD_S + 1.0)
    tele = {m: np.full(t.size, np.nan) for m in TELEMETRY_METRICS}
    tele["t_s"] = t
    tele["temp_c"] = np.full(t.size, 60.0)
    tele["sm_clock_mhz"] = np.full(t.size, 2500.0)
    # a real power reading moves under load (a constant one reads as frozen telemetry)
    tele["power_w"] = 150.0 + np.random.default_rng(0).normal(0.0, 0.5, t.size).round(2)
    tele["util_pct"] = np.full(t.size, 100.0)
    if foreign is not None:
        tele["foreign_load_pct"] = np.array([foreign(x) for x in t])
    if procs is not None:
        tele["foreign_procs"] = np.array([procs(x) for x in t])
        tele["foreign_mem_mib"] = np.where(tele["foreign_procs"] > 0, 8192.0, 0.0)
    starts = np.arange(0.0, LOAD_S)
    work = {
        "train": {
            "t_start_s": starts,
            "t_end_s": starts + 1.0,
            "work": np.array([rate(s + 0.5) for s in starts]),
            "verified": np.full(starts.size, np.nan),
            "verify_error": np.full(starts.size, np.nan),
        }
    }
    meta = RunMeta(
        run=RunRecord(backend=backend, workload="train", host="h"),
        stop=StopRecord(StopReason.DURATION, load_stop_s=LOAD_S, duration_s=LOAD_S),
        load_start_s=0.0,
    )
    outcome = Event(LOAD_S, EventKind.WORKER_OUTCOME, "ok", 0, {"outcome": "ok"})
    if ending is not None:
        outcome = Event(LOAD_S, EventKind.WORKER_OUTCOME, "ended", 0, ending)
    return RunData.held(
        meta=meta,
        devices=[DeviceInfo(0, backend, "Test CPU" if backend == "cpu" else "Test GPU")],
        telemetry={0: tele},
        work={0: work},
        units={"train": "token"},
        events=[outcome, *events],
    )


def _after(start_s: float, value: float, before: float = 0.0) -> Callable[[float], float]:
    return lambda t: value if t >= start_s else before


def _during(start_s: float, end_s: float, value: float) -> Callable[[float], float]:
    """Foreign load from start_s to end_s as the readings give it: each covers the second
    before it."""
    return lambda t: value if start_s < t <= end_s else 1.0


def _retention(analysis) -> list:
    return [c for c in analysis.checks if c.check == "throughput_retention"]


def test_a_loss_while_other_work_used_the_cpu_is_host_contention_not_a_fault() -> None:
    data = _run(rate=_after(300, 0.58 * RATE, RATE), foreign=_after(300, 48.0, 2.0))
    analysis = analyze_run(data, load_profile(None))
    (device,) = analysis.devices
    assert analysis.verdict is Verdict.INCOMPLETE and device.verdict is Verdict.INCOMPLETE
    assert device.diagnosis == "host contention"
    assert "hardware-fault" not in device.diagnosis and "RMA" not in " ".join(
        device.diagnosis_evidence
    )
    steady = next(c for c in _retention(analysis) if c.message.startswith("steady"))
    assert steady.status is Status.INCOMPLETE
    assert steady.message == (
        "steady train 580 token/s is 58.0 % of cold 1.00 ktoken/s; floor 95 %; host "
        "contention: other work used 48 % of the host's CPU time during 100 % of the window; "
        "rerun on an idle host"
    )
    assert steady.message in device.diagnosis_evidence
    assert not any(c.status is Status.FAIL for c in analysis.checks)


def test_jitter_while_other_work_ran_says_so() -> None:
    rate = lambda t: RATE * (0.5 if int(t) % 2 else 1.0)  # noqa: E731
    data = _run(rate=rate, foreign=lambda t: 55.0)
    (jitter,) = [c for c in analyze_run(data, load_profile(None)).checks if c.check == "jitter"]
    assert jitter.status is Status.WARN
    assert jitter.message.endswith(
        "; host contention: other work used 55 % of the host's CPU time during 100 % of the window"
    )


def test_the_same_loss_with_no_foreign_load_still_fails_as_a_device_fault() -> None:
    for foreign in (lambda t: 2.0, None):  # an idle host, and a backend that cannot tell
        data = _run(rate=_after(300, 0.58 * RATE, RATE), foreign=foreign)
        analysis = analyze_run(data, load_profile(None))
        (device,) = analysis.devices
        assert device.verdict is Verdict.FAIL and device.diagnosis == "hardware-fault"
        assert all(c.status is Status.FAIL for c in _retention(analysis))
        assert not any("contention" in c.message for c in analysis.checks)


def test_a_loss_that_stays_when_the_foreign_load_is_gone_fails() -> None:
    # slow from 300 s on; the other work runs from 700 s to 1000 s only, within the steady
    # window (10 min from the date: 397 s, on the 3-min windows the approach's τ sets, rule
    # line 16), so the rest of that window shows the loss without it
    rate = _after(300, 0.6 * RATE, RATE)
    data = _run(rate=rate, foreign=_during(700, 1000, 60.0))
    analysis = analyze_run(data, load_profile(None))
    (device,) = analysis.devices
    assert device.verdict is Verdict.FAIL and device.diagnosis == "hardware-fault"
    window = device.facts.steady.window
    assert window.start_s <= 700 < window.end_s
    without = window.length_s - (min(1000, window.end_s) - 700)
    steady = next(c for c in _retention(analysis) if c.message.startswith("steady"))
    assert steady.status is Status.FAIL
    assert (
        f"the loss stays without the foreign load: 600 token/s over the {without:.0f} s without it"
    ) in steady.message


def test_a_loss_only_while_the_foreign_load_ran_is_incomplete_with_the_rate_without_it() -> None:
    rate = lambda t: 0.5 * RATE if 700 <= t < 1000 else RATE  # noqa: E731
    data = _run(rate=rate, foreign=_during(700, 1000, 60.0))
    analysis = analyze_run(data, load_profile(None))
    (device,) = analysis.devices
    assert device.verdict is Verdict.INCOMPLETE and device.diagnosis == "host contention"
    steady = next(c for c in _retention(analysis) if c.message.startswith("steady"))
    assert steady.status is Status.INCOMPLETE
    assert "1.00 ktoken/s over the 300 s without it; rerun on an idle host" in steady.message


def test_a_host_busy_throughout_says_both_windows_figures_once() -> None:
    data = _run(rate=_after(300, 0.7 * RATE, RATE), foreign=lambda t: 88.0 if t < 300 else 91.0)
    steady = next(
        c for c in _retention(analyze_run(data, load_profile(None))) if "steady" in c.message
    )
    assert steady.status is Status.INCOMPLETE
    assert steady.message.endswith(
        "floor 95 %; host contention: other work used 91 % of the host's CPU time during 100 % "
        "of the window, and 88 % during 100 % of the cold window; rerun on an idle host"
    )


def test_a_retention_that_passes_only_against_a_contended_cold_window_is_incomplete() -> None:
    # held down to 80 % during the cold minute by other work, then a real 12 % loss: 88/80
    data = _run(
        rate=lambda t: 0.8 * RATE if t < 80 else (RATE if t < 300 else 0.88 * RATE),
        foreign=lambda t: 50.0 if t <= 80 else 1.0,
    )
    analysis = analyze_run(data, load_profile(None))
    steady = next(c for c in _retention(analysis) if c.message.startswith("steady"))
    assert steady.status is Status.INCOMPLETE
    assert steady.message == (
        "steady train 880 token/s is 110.0 % of cold 800 token/s; floor 95 %; host contention: "
        "other work used 50 % of the host's CPU time during 100 % of the cold window, not of the "
        "steady window; rerun on an idle host"
    )
    assert analysis.devices[0].diagnosis == "host contention"
    # the same figures, on a host busy during both windows alike, compare like with like
    alike = _run(rate=lambda t: RATE, foreign=lambda t: 50.0)
    assert all(c.status is Status.PASS for c in _retention(analyze_run(alike, load_profile(None))))


def _cold_then_late(cold_pct: float, late_pct: float) -> Callable[[float], float]:
    """Other work at ``cold_pct`` over 59 % of the cold window (5–65 s after a load start of
    1 s), then at ``late_pct`` from the cold window's end on."""
    return lambda t: cold_pct if 6 < t <= 42 else (late_pct if t > 66 else 1.0)


def test_a_pass_against_a_cold_window_held_down_more_than_the_late_one_is_incomplete() -> None:
    # both windows contended, the cold one harder (59 % of its time at 45 % load, 0.27, to
    # all of the steady window at 20 %, 0.20): cold held down to 85 %, a real 15 % loss
    # under it, and the ratio reads 100 %
    data = _run(
        rate=lambda t: 0.75 * RATE if 6 < t <= 42 else (0.85 * RATE if t > 66 else RATE),
        foreign=_cold_then_late(45.0, 20.0),
    )
    analysis = analyze_run(data, load_profile(None))
    steady = next(c for c in _retention(analysis) if c.message.startswith("steady"))
    assert steady.status is Status.INCOMPLETE
    assert steady.message.endswith(
        "host contention: the cold window contended 59 % of its time at 45 % load against "
        "100 % of the steady window at 20 % load: the ratio may be inflated; rerun on an idle "
        "host"
    )
    assert analysis.devices[0].verdict is Verdict.INCOMPLETE


def test_a_pass_against_windows_held_down_alike_stays_a_pass() -> None:
    # 0.27 against 0.25: within ALIKE, like compared with like
    data = _run(rate=lambda t: RATE, foreign=_cold_then_late(45.0, 25.0))
    found = _retention(analyze_run(data, load_profile(None)))
    assert found and all(c.status is Status.PASS for c in found), found


def test_a_host_busy_from_the_first_second_is_named_though_every_check_passes() -> None:
    # Two busy loops running before soak began: half speed in every window, steady/cold
    # about 100 %. Nothing fails, and the verdict says what the figures were taken beside.
    data = _run(rate=lambda t: 0.5 * RATE, foreign=lambda t: 50.0)
    analysis = analyze_run(data, load_profile(None))
    assert all(c.status is Status.PASS for c in _retention(analysis))
    (named,) = [c for c in analysis.reasons if c.check == "contention"]
    assert named.status is Status.WARN and named.device == 0
    assert named.message == (
        "host contention: other work used 50 % of the host's CPU time during 100 % of the "
        "load, from the load's first seconds: the figures are not the device's alone; rerun "
        "on an idle host"
    )


def test_contention_that_begins_mid_run_is_named_from_when_it_began() -> None:
    data = _run(rate=lambda t: RATE, foreign=_after(600, 30.0, 1.0))
    (named,) = [c for c in analyze_run(data, load_profile(None)).checks if c.check == "contention"]
    assert named.message.startswith(
        "host contention: other work used 30 % of the host's CPU time during 50 % of the load, "
        "from 10.0 min of load:"
    )
    idle = _run(rate=lambda t: RATE, foreign=lambda t: 2.0)
    assert not [c for c in analyze_run(idle, load_profile(None)).checks if c.check == "contention"]


def test_pressure_is_the_contended_share_times_the_foreign_load() -> None:
    cold = Contention(0.6, 45.0)
    assert cold.pressure == pytest.approx(0.27)
    assert inflated(cold, Contention(1.0, 20.0), "steady") == (
        "host contention: the cold window contended 60 % of its time at 45 % load against "
        "100 % of the steady window at 20 % load: the ratio may be inflated"
    )
    assert inflated(cold, Contention(1.0, 100 * (0.27 - ALIKE)), "steady") is None
    assert inflated(cold, Contention(1.0, 25.0), "final") is None
    assert inflated(cold, Contention(None), "steady") is None  # not measured: not compared
    # a foreign process whose use is not read counts as the whole device
    gpu = inflated(Contention(0.6, procs=1), Contention(0.2, procs=2), "steady")
    assert gpu is not None and gpu.startswith("another process on the device: the cold")
    assert "60 % of its time with 1 foreign process against 20 % of the steady window with 2" in (
        gpu
    )


def test_a_contended_cold_window_makes_a_failing_retention_incomplete() -> None:
    # the other work ran during the cold minute only: the cold figure is its, not the CPU's
    data = _run(rate=_after(300, 0.8 * RATE, RATE), foreign=lambda t: 50.0 if t < 80 else 0.0)
    analysis = analyze_run(data, load_profile(None))
    steady = next(c for c in _retention(analysis) if c.message.startswith("steady"))
    assert steady.status is Status.INCOMPLETE
    assert "during 100 % of the cold window" in steady.message


def test_another_process_on_a_gpu_is_named_with_its_pid_name_and_memory() -> None:
    seen = Event(
        300.0,
        EventKind.FOREIGN_PROCESS,
        "another process on the device: pid 4242 (python3), 8192 MiB",
        0,
        {"pid": 4242, "name": "python3", "used_mib": 8192.0},
    )
    data = _run(
        rate=_after(300, 0.6 * RATE, RATE),
        foreign=None,
        backend="nvml",
        procs=_after(300, 1.0),
        events=[seen],
    )
    analysis = analyze_run(data, load_profile(None))
    (device,) = analysis.devices
    assert device.diagnosis == "another process on the device"
    assert device.verdict is Verdict.INCOMPLETE
    evidence = " ".join(device.diagnosis_evidence)
    assert "another process on the device: pid 4242 (python3), 8192 MiB, during 100 %" in evidence


STOP_HUNG = {"outcome": "hung", "phase": "stop", "detail": "did not stop within 10 s; killed"}


def test_a_worker_slow_to_stop_on_a_busy_host_is_contention_not_a_hang() -> None:
    data = _run(rate=lambda t: RATE, foreign=lambda t: 70.0, ending=STOP_HUNG)
    analysis = analyze_run(data, load_profile(None))
    (device,) = analysis.devices
    assert device.verdict is Verdict.INCOMPLETE and device.diagnosis == "host contention"
    (worker,) = [c for c in analysis.checks if c.check == "worker"]
    assert worker.status is Status.INCOMPLETE
    assert worker.message == (
        "load ended: hung: did not stop within 10 s; killed; host contention: other work used "
        "70 % of the host's CPU time during 100 % of the final window; rerun on an idle host"
    )
    idle = analyze_run(_run(rate=lambda t: RATE, foreign=lambda t: 1.0, ending=STOP_HUNG),
                       load_profile(None))  # fmt: skip
    assert idle.devices[0].verdict is Verdict.FAIL
    assert idle.devices[0].diagnosis == "hardware-fault"


def test_junit_carries_an_incomplete_check_as_an_error(tmp_path) -> None:
    data = _run(rate=_after(300, 0.58 * RATE, RATE), foreign=_after(300, 48.0, 2.0))
    analysis = analyze_run(data, load_profile(None))
    path = tmp_path / "junit.xml"
    write_junit(path, analysis)
    text = path.read_text()
    assert 'type="incomplete"' in text and "incomplete: steady train" in text


@pytest.mark.parametrize(
    ("values", "expected"),
    [([0.0, 9.9, FOREIGN_MIN_PCT, 80.0], [False, False, True, True]), ([np.nan] * 4, None)],
)
def test_a_reading_is_contended_from_the_foreign_minimum_and_unread_is_not_measured(
    values, expected
) -> None:
    tele = Columns({"t_s": np.arange(4.0), "foreign_load_pct": np.array(values)})
    mask = foreign_mask(tele)
    assert (mask.tolist() if mask is not None else None) == expected


def test_the_throughput_without_foreign_load_counts_only_its_work() -> None:
    t = np.arange(0.0, 11.0)
    tele = Columns({"t_s": t, "foreign_load_pct": np.where(t >= 6, 50.0, 0.0)})
    starts = np.arange(0.0, 10.0)
    work = {"p": {"t_start_s": starts, "t_end_s": starts + 1, "work": np.where(starts >= 5, 1, 3)}}
    found = window_contention(Window(0.0, 10.0), tele, work, foreign_mask(tele))
    assert found.share == pytest.approx(5 / 11) and found.contended
    assert found.load_pct == 50.0
    # steps 0-4 (mid 0.5-4.5) were read at ticks 1-5, without foreign load: 3 units each
    assert found.clean_s == 5.0 and found.clean_throughput == {"p": 3.0}
