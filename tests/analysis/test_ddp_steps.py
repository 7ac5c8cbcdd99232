"""The synchronous-training analysis on hand-made step series: the server's step rate cold
and steady, the rank that sets the pace, busbw, and the straggler, retention and replica
checks with the exact messages the operator reads."""

from __future__ import annotations

import numpy as np
import pytest

from soak.analysis.checks import Status
from soak.analysis.ddp_steps import (
    BUSBW_FORMULA,
    ONE_RANK,
    check_busbw,
    check_straggler,
    check_sync_retention,
    replica_checks,
    split_loss,
    sync_facts,
)
from soak.analysis.windows import Window
from soak.fields import Columns
from soak.model import ClockReason, Event, EventKind
from soak.profile import Checks, Profile
from workloads.ddp import bus_bandwidth, odd_ranks

LIMITS = Checks()
COLD = Window(0.0, 10.0)
STEADY = Window(20.0, 30.0)


def _series(compute: dict[int, tuple[float, float]], samples: int = 32, ranks: int = 4):
    """One step a second for 30 s; each device's compute is ``cold`` before t=15, ``hot``
    after; the step takes the slowest rank's compute plus 0.01 s of all-reduce."""
    t_end = np.arange(1.0, 31.0)
    per_rank = {d: np.where(t_end < 15, cold, hot) for d, (cold, hot) in compute.items()}
    step = np.max(np.vstack(list(per_rank.values())), axis=0) + 0.01
    straggler = np.argmax(np.vstack([per_rank[d] for d in sorted(per_rank)]), axis=0)
    server = {
        "t_start_s": t_end - step,
        "t_end_s": t_end,
        "samples": np.full(t_end.shape, float(samples)),
        "step_s": step,
        "straggler": np.array(sorted(per_rank))[straggler].astype(float),
        "ranks": np.full(t_end.shape, float(ranks)),
    }
    timed = np.full(t_end.shape, 0.004)
    rows = {
        d: {
            "t_start_s": t_end - step,
            "t_end_s": t_end,
            "iterations": np.ones_like(t_end),
            "compute_s": c,
            "wait_s": step - c,
            "step_s": step,
            "allreduce_b": np.full(t_end.shape, 4.0 * 2**20),
            "allreduce_s": timed,
        }
        for d, c in per_rank.items()
    }
    return server, rows


def test_a_rank_that_slows_when_hot_is_named_and_explains_the_loss():
    server, rows = _series({0: (1.0, 1.01), 1: (1.0, 1.012), 2: (1.0, 1.008), 3: (1.0, 1.074)})
    facts = sync_facts(server, rows, COLD, STEADY)
    assert facts is not None
    assert facts.cold_rate == pytest.approx(32 / 1.01)
    assert facts.steady_rate == pytest.approx(32 / 1.084)
    assert facts.pace_setter == 3 and facts.pace_share[3] == 1.0
    assert facts.explanation() == (
        "steady step rate 6.8 % below cold; device 3's compute time grew 7.4 %, the others' "
        "0.8–1.2 %: device 3 sets the pace 100 % of steps"
    )
    [straggler] = check_straggler(facts, LIMITS)
    assert straggler.status is Status.WARN and straggler.device == 3
    assert straggler.message == (
        "device 3 sets the pace in 100 % of steady steps; its compute time is 6.2 % above the "
        "median rank's (warn 5 %, fail 10 %)"
    )
    [retention] = check_sync_retention(facts, LIMITS)  # no clocks: not split by cause
    assert retention.status is Status.FAIL and retention.device is None
    assert retention.message.endswith(
        "; not split by cause: all 6.8 % unexplained; floor 95 % for thermal and unexplained "
        "loss (retention 93.2 %)"
    )


def test_a_straggler_past_the_larger_margin_fails_and_an_even_server_passes():
    server, rows = _series({0: (1.0, 1.0), 1: (1.0, 1.0), 2: (1.0, 1.0), 3: (1.0, 1.2)})
    [check] = check_straggler(sync_facts(server, rows, COLD, STEADY), LIMITS)
    assert check.status is Status.FAIL
    server, rows = _series({0: (1.0, 1.0), 1: (1.0, 1.001), 2: (1.0, 1.0), 3: (1.0, 1.0)})
    facts = sync_facts(server, rows, COLD, STEADY)
    assert [c.status for c in check_straggler(facts, LIMITS)] == [Status.PASS]
    assert [c.status for c in check_sync_retention(facts, LIMITS)] == [Status.PASS]


def test_busbw_follows_the_nccl_tests_formula_and_one_rank_skips_it():
    server, rows = _series({0: (1.0, 1.0), 1: (1.0, 1.0), 2: (1.0, 1.0), 3: (1.0, 1.0)})
    facts = sync_facts(server, rows, COLD, STEADY)
    expected = 4 * 2**20 / 0.004 * 2 * 3 / 4
    assert facts.busbw_cold == pytest.approx(expected)
    assert bus_bandwidth(4 * 2**20, 0.004, 4) == pytest.approx(expected)
    assert facts.busbw_note == BUSBW_FORMULA
    server, rows = _series({0: (1.0, 1.0)}, ranks=1)
    facts = sync_facts(server, rows, COLD, STEADY)
    assert facts.busbw_cold is None and facts.busbw_note == ONE_RANK
    assert check_straggler(facts, LIMITS) == []


def test_a_run_without_sync_steps_has_no_sync_facts():
    assert sync_facts({"t_end_s": np.empty(0)}, {}, COLD, STEADY) is None


def test_the_rank_that_disagrees_with_the_majority_is_the_one_blamed():
    assert odd_ranks([(1.0, 2.0)] * 3) == (frozenset(), True)
    assert odd_ranks([(1.0, 2.0), (1.0, 2.0), (1.5, 2.0)]) == (frozenset({2}), True)
    assert odd_ranks([(1.0, 2.0), (1.5, 2.0)]) == (frozenset({0, 1}), False)


def test_a_replica_difference_fails_that_device_once_with_its_first_step():
    detail = "replicas differ after step {}: rank 2 differs from the majority"
    events = [
        Event(5.0, EventKind.VERIFICATION_FAILED, "x", 2, {"detail": detail.format(30)}),
        Event(9.0, EventKind.VERIFICATION_FAILED, "x", 2, {"detail": detail.format(60)}),
        Event(9.0, EventKind.VERIFICATION_FAILED, "x", 1, {"detail": "2 non-finite"}),
    ]
    [check] = replica_checks(events)
    assert (check.device, check.status, check.message) == (2, Status.FAIL, detail.format(30))


H100 = "NVIDIA H100 80GB HBM3"
FOUR_H100 = {d: H100 for d in range(4)}


def _floor(floor: float, source: str = "[assumed] test", ranks: int = 2) -> Profile:
    checks = Checks(min_busbw_Bps=floor, min_busbw_source=source, min_busbw_ranks=ranks)
    return Profile(name="h100-sxm", checks=checks, device_names=(H100,))


def _busbw(cold_s: float, steady_s: float):
    """Four ranks whose timed 4 MiB all-reduce takes ``cold_s`` before t=15, ``steady_s``
    after."""
    server, rows = _series({0: (1.0, 1.0), 1: (1.0, 1.0), 2: (1.0, 1.0), 3: (1.0, 1.0)})
    for r in rows.values():
        r["allreduce_s"] = np.where(r["t_end_s"] < 15, cold_s, steady_s)
    return sync_facts(server, rows, COLD, STEADY)


def test_busbw_at_or_above_the_floor_passes_naming_the_floor_and_its_source():
    facts = _busbw(0.004, 0.004)  # busbw 1.57 GB/s cold and steady
    assert check_busbw(facts, Profile()) == []  # no floor: nothing judged
    [check] = check_busbw(facts, _floor(1e9, "[datasheet] x; [assumed] y"), FOUR_H100)
    assert check.status is Status.PASS
    assert check.message == (
        "steady all-reduce bus bandwidth 1.57 GB/s over 4 ranks (4.19 MB buffer) is 157.3 % of "
        "the h100-sxm floor 1.00 GB/s ([datasheet] x; [assumed] y); cold 1.57 GB/s"
    )


def test_busbw_below_an_assumed_floor_warns_and_fails_only_when_it_fell_as_it_heated():
    [check] = check_busbw(_busbw(0.004, 0.004), _floor(2e9), FOUR_H100)
    assert check.status is Status.WARN  # as slow cold: a configuration or the assumption
    assert (
        "is 78.6 % of the h100-sxm floor 2.00 GB/s ([assumed] test); cold 1.57 GB/s: as slow "
        in (check.message)
    )
    [check] = check_busbw(_busbw(0.004, 0.005), _floor(2e9), FOUR_H100)
    assert check.status is Status.FAIL
    assert check.message.endswith(
        "cold 1.57 GB/s: 20.0 % below cold (limit 10 %), the link lost bandwidth as it heated"
    )
    # a link that fell as it heated but stays above the floor passes the floor
    [check] = check_busbw(_busbw(0.002, 0.004), _floor(1e9), FOUR_H100)
    assert check.status is Status.PASS


def test_busbw_floor_applies_only_to_the_profiles_devices_and_enough_ranks():
    facts = _busbw(0.004, 0.004)
    names = {**FOUR_H100, 2: "NVIDIA A100-SXM4-80GB"}
    [check] = check_busbw(facts, _floor(2e9), names)
    assert check.status is Status.NOT_CHECKED
    assert check.message == (
        "all-reduce bus bandwidth not judged: the h100-sxm floor 2.00 GB/s ([assumed] test) is for "
        "NVIDIA H100 80GB HBM3, the ranks include NVIDIA A100-SXM4-80GB"
    )
    sim = {d: f"{H100} (simulated)" for d in range(4)}
    assert check_busbw(facts, _floor(2e9), sim)[0].status is Status.WARN
    [check] = check_busbw(facts, _floor(2e9, ranks=8), FOUR_H100)
    assert check.status is Status.NOT_CHECKED
    assert check.message.endswith("holds for 8 ranks or more, this run has 4")
    server, rows = _series({0: (1.0, 1.0)}, ranks=1)
    [check] = check_busbw(sync_facts(server, rows, COLD, STEADY), _floor(2e9), {0: H100})
    assert (check.status, check.message) == (Status.PASS, f"all-reduce skipped: {ONE_RANK}")


def test_below_the_floor_without_a_cold_busbw_only_warns():
    [check] = check_busbw(_busbw(np.nan, 0.004), _floor(2e9), FOUR_H100)
    assert check.status is Status.WARN
    assert check.message.endswith(
        "cold not available: no cold figure to tell heat from a configuration"
    )


def test_a_floor_without_a_steady_busbw_fails():
    facts = _busbw(0.004, np.nan)
    [check] = check_busbw(facts, _floor(2e9), FOUR_H100)
    assert check.status is Status.FAIL
    assert check.message.startswith("steady all-reduce bus bandwidth not measured; the h100")


def _telemetry(clock: tuple[float, float], reasons: tuple[int, int]) -> Columns:
    """One reading a second for 30 s: SM clock and throttle reasons ``cold`` before t=15,
    ``hot`` after; power at its 700 W limit throughout."""
    t = np.arange(0.0, 31.0)
    hot = t >= 15
    return Columns(
        {
            "t_s": t,
            "sm_clock_mhz": np.where(hot, clock[1], clock[0]),
            "clock_reasons": np.where(hot, reasons[1], reasons[0]).astype(float),
            "power_w": np.full(t.shape, 700.0),
            "power_limit_w": np.full(t.shape, 700.0),
            "energy_j": 700.0 * t,
        }
    )


CAP, THERMAL = float(ClockReason.SW_POWER_CAP), float(ClockReason.SW_THERMAL)


def _split_retention(hot_compute: float, tele: Columns | None):
    """Device 3 computes 1.0 s a step cold and ``hot_compute`` hot and sets the pace; the
    retention check with the loss split by device 3's telemetry (absent: None)."""
    server, rows = _series({0: (1.0, 1.0), 1: (1.0, 1.0), 2: (1.0, 1.0), 3: (1.0, hot_compute)})
    facts = split_loss(sync_facts(server, rows, COLD, STEADY), tele, Profile())
    [check] = check_sync_retention(facts, LIMITS)
    return facts, check


def test_a_power_capped_drift_of_the_pace_setter_is_judged_by_its_own_floor():
    # 6 % slower hot, clocks 6 % down with power pinned at the cap: drift, within 8 %
    facts, check = _split_retention(1.064, _telemetry((1980.0, 1861.0), (int(CAP), int(CAP))))
    assert facts.split.device == 3
    assert check.status is Status.PASS
    assert check.message.endswith(
        "by device 3's SM clock 1980 → 1861 MHz: 6.0 % power-capped drift (floor 8 %), "
        "0.0 % thermal slowdown, 0.0 % unexplained; floor 95 % for thermal and unexplained "
        "loss (retention 94.0 %, 100.0 % without the drift)"
    )
    # past the drift floor: a server that loses 12 % to its power cap fails
    _, check = _split_retention(1.14, _telemetry((1980.0, 1730.0), (int(CAP), int(CAP))))
    assert check.status is Status.FAIL and "12.2 % power-capped drift (floor 8 %)" in check.message


def test_a_thermal_slowdown_of_the_pace_setter_fails_by_the_strict_floor():
    _, check = _split_retention(1.064, _telemetry((1980.0, 1861.0), (0, int(THERMAL))))
    assert check.status is Status.FAIL
    assert (
        "by device 3's SM clock 1980 → 1861 MHz: 0.0 % power-capped drift (floor 8 %), "
        "6.0 % thermal slowdown, 0.0 % unexplained" in check.message
    )
    # clocks that did not move explain nothing: the loss is unexplained
    _, check = _split_retention(1.064, _telemetry((1980.0, 1980.0), (int(CAP), int(CAP))))
    assert check.status is Status.FAIL and "6.0 % unexplained" in check.message


def test_without_the_pace_setters_clock_all_the_loss_is_unexplained_never_a_pass():
    unread = _telemetry((np.nan, np.nan), (int(CAP), int(CAP)))
    facts, check = _split_retention(1.064, unread)
    assert check.status is Status.FAIL  # the same loss as a drift PASSes above
    assert facts.split.missing == "device 3's SM clock not available"
    assert "device 3's SM clock not available: all 6.0 % unexplained" in check.message
    _, check = _split_retention(1.064, None)
    assert check.status is Status.FAIL
    assert "device 3: no telemetry: all 6.0 % unexplained" in check.message


def test_in_a_node_group_the_pace_setter_is_a_global_rank_named_by_host_and_device():
    # Node 1 of two, running devices 2 and 3 as global ranks 2 and 3 (ranks 0 and 1 are on
    # n1). Its per-rank timing is keyed by its own device indices; the server row by rank.
    from dataclasses import replace

    server, rows = _series({0: (1.0, 1.0), 1: (1.0, 1.0), 2: (1.0, 1.0), 3: (1.0, 1.074)})
    local = {5: rows[2], 6: rows[3]}  # this node's devices 5 and 6 are ranks 2 and 3
    labels = {0: "n1 device 0", 1: "n1 device 1", 2: "n2 device 5", 3: "n2 device 6"}
    facts = replace(
        sync_facts(server, local, COLD, STEADY), rank_of={5: 2, 6: 3}, rank_labels=labels
    )
    assert facts.pace_setter == 3 and facts.local_device(3) == 6 and facts.share_of(6) == 1.0
    split = split_loss(facts, _telemetry((1980.0, 1840.0), (0, int(THERMAL))), Profile())
    assert split.split.device == 6  # device 6's own clocks split the loss, not device 3's
    [check] = check_sync_retention(split, LIMITS)
    assert "by rank 3 (n2 device 6)'s SM clock 1980 → 1840 MHz" in check.message
    [straggler] = check_straggler(split, LIMITS)
    assert straggler.device == 6 and straggler.message.startswith("rank 3 (n2 device 6) sets")
    # Seen from n1, whose devices 0 and 1 are ranks 0 and 1, the pace setter is elsewhere.
    there = replace(
        sync_facts(server, {0: rows[0], 1: rows[1]}, COLD, STEADY),
        rank_of={0: 0, 1: 1},
        rank_labels=labels,
    )
    assert there.local_device(3) is None and there.share_of(0) == 0.0
    [straggler] = check_straggler(there, LIMITS)
    assert straggler.status is Status.NOT_CHECKED and straggler.device is None
    assert "rank 3 (n2 device 6) sets the pace in 100 % of steady steps" in straggler.message
    unsplit = split_loss(there, _telemetry((1980.0, 1980.0), (0, 0)), Profile())
    assert unsplit.split.device is None and "its own node's run" in unsplit.split.missing
    assert there.explanation().endswith("rank 3 (n2 device 6) sets the pace 100 % of steps")
