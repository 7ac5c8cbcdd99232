"""The headroom rule (soak.analysis.headroom) on models whose answers are known by hand."""

from __future__ import annotations

import dataclasses

import pytest

from soak.analysis.headroom import DeviceModel, Headroom, Point, headroom_checks, headroom_of

SW, HW = 87.0, 90.0


def model(**changes: object) -> DeviceModel:
    base = {
        "device": 0,
        "steady": Point(25.0, 65.0, 500.0, 1980.0, {"gemm": 100.0}),
        "theta_c_per_w": 0.08,  # 40 °C over a 25 °C inlet at 500 W
        "theta_interval": (0.079, 0.081),
        "leakage_w_per_c": 2.5,
        "clock_per_c_mhz": None,
        "power_limit_w": 700.0,
        "at_power_limit": False,
        "idle_power_w": 100.0,
        "elasticity": {"gemm": 1.0},
        "thresholds_c": {"sw_thermal": SW, "hw_slowdown": HW},
        "fan_pct": None,
    }
    return DeviceModel(**{**base, **changes})


def test_below_the_limit_the_fixed_point_of_temperature_and_leakage() -> None:
    m = model()
    p = m.at(30.0)  # 5 °C warmer: T rises by 5 / (1 - 0.08 * 2.5) = 6.25 °C
    assert p.temp_c == pytest.approx(71.25)
    assert p.power_w == pytest.approx(500.0 + 2.5 * 6.25)
    assert p.clock_mhz == 1980.0 and p.throughput["gemm"] == 100.0 and p.limit == ""


def test_at_the_power_limit_power_holds_and_the_clock_follows_the_measured_slope() -> None:
    m = model(
        steady=Point(25.0, 70.0, 700.0, 1800.0, {"gemm": 100.0}, "power limit"),
        at_power_limit=True,
        leakage_w_per_c=None,
        clock_per_c_mhz=-3.0,
        theta_c_per_w=45.0 / 700.0,
    )
    p = m.at(35.0)
    assert p.temp_c == pytest.approx(80.0) and p.power_w == 700.0
    assert p.clock_mhz == pytest.approx(1770.0)
    assert p.throughput["gemm"] == pytest.approx(100.0 * 1770.0 / 1800.0)
    assert m.throttle_inlet_c() == pytest.approx(25.0 + SW - 70.0)
    # leakage's curvature: the clock falls faster the hotter the die (-0.05 MHz/°C² here)
    curved = dataclasses.replace(m, clock_curve=-0.05)
    assert curved.at(35.0).clock_mhz == pytest.approx(1800.0 - 30.0 - 5.0)


def test_past_the_sw_thermal_slowdown_the_die_is_held_and_power_falls() -> None:
    steady = Point(25.0, 80.0, 500.0, 1980.0, {"gemm": 100.0})
    m = model(steady=steady, leakage_w_per_c=0.0, theta_c_per_w=0.11)
    p = m.at(35.0)  # free: 90 °C, over the 87 °C threshold
    assert p.temp_c == SW and p.limit == "SW thermal"
    assert p.power_w == pytest.approx((SW - 35.0) / 0.11)
    assert m.throttle_inlet_c() == pytest.approx(32.0)
    h = headroom_of(m, 35.0)
    assert h.margins_c == {"sw_thermal": pytest.approx(0.0), "hw_slowdown": pytest.approx(3.0)}
    assert any("conservative" in n for n in h.notes)


def test_the_sentence_names_the_device_that_throttles_first_and_the_others_margin() -> None:
    hot = headroom_of(
        model(device=3, steady=Point(25.0, 83.0, 500.0, 1980.0, {}), leakage_w_per_c=0.0), 35.0
    )
    cool = headroom_of(model(device=1, leakage_w_per_c=0.0), 35.0)
    h = Headroom(35.0, (cool, hot))
    labels = {1: "GPU 1", 3: "GPU 3"}
    assert h.sentence(labels) == (
        "GPU 3 reaches SW thermal slowdown at inlet ≥ 29 °C; "
        "the others keep ≥ 12 °C of margin at 35 °C."
    )
    assert h.first_to_throttle() is hot
    warn = headroom_checks(h, 0.0)
    assert [(c.device, str(c.status)) for c in warn] == [(3, "warn")]
    floor = headroom_checks(h, 15.0)
    assert sorted((c.device, str(c.status)) for c in floor) == [(1, "fail"), (3, "fail")]


def test_nothing_checked_reads_as_not_available_never_zero() -> None:
    h = Headroom(35.0, reason="inlet not available: no BMC given")
    assert not h.checked and h.first_to_throttle() is None
    assert h.sentence({}) == "not checked: inlet not available: no BMC given"
    assert headroom_checks(h, 0.0) == []  # no floor asked for: nothing to say
    (floor,) = headroom_checks(h, 5.0)  # a floor the profile asks for: never passed unseen
    assert (floor.device, str(floor.status), floor.message) == (
        None,
        "not_checked",
        "margin at the 35 °C design inlet not projected: inlet not available: no BMC given",
    )
