"""Whether a reading can be true (soak/validity.py): ranges, freezes, gaps, resets."""

import numpy as np
import pytest

from soak import validity
from soak.model import TELEMETRY_METRICS, Telemetry
from soak.validity import FROZEN_S, FrozenWatch, frozen_spans


def watch_rows(watch, rows, loaded=True, step=1.0, start=0.0):
    found = []
    for k, row in enumerate(rows):
        hit = watch.add(start + k * step, row, loaded)
        if hit is not None:
            found.append(hit)
    return found


def test_fine_power_and_temperature_held_for_five_minutes_under_load_is_frozen():
    watch = FrozenWatch(3)
    moving = [{"power_w": 300.0 + 0.37 * (k % 7), "temp_c": 61.0} for k in range(100)]
    held = [{"power_w": 301.47, "temp_c": 61.0}] * 400
    (found,) = watch_rows(watch, moving + held)
    assert found.from_s == 100.0 and found.to_s == 100.0 + FROZEN_S
    assert found.describe(origin_s=40.0) == (
        "telemetry frozen from 1.0 min: power 301.47 W, temperature 61 °C unchanged for "
        "5 min while the load ran"
    )
    assert watch.span is not None and watch.span.to_s == 499.0  # it grows while still


def test_readings_that_hold_still_while_idle_are_not_frozen():
    rows = [{"power_w": 71.25, "temp_c": 30.0}] * 1000
    assert watch_rows(FrozenWatch(0), rows, loaded=False) == []


def test_temperature_alone_never_tells_a_freeze():
    """A whole-degree die holds still for hours at equilibrium on a healthy device."""
    rows = [{"temp_c": 70.0, "power_w": None}] * 2000
    assert watch_rows(FrozenWatch(0), rows) == []


def test_whole_watt_power_needs_temperature_with_it():
    rows = [{"power_w": 300.0, "temp_c": None}] * 2000
    assert watch_rows(FrozenWatch(0), rows) == []
    rows = [{"power_w": 300.0, "temp_c": 65.0}] * 2000
    assert len(watch_rows(FrozenWatch(0), rows)) == 1


def test_one_moving_signal_is_not_a_freeze():
    rows = [{"power_w": 300.25, "temp_c": 65.0, "energy_j": 1e6 + 300 * k} for k in range(2000)]
    assert watch_rows(FrozenWatch(0), rows) == []


def test_a_slow_logger_needs_twenty_identical_readings_besides():
    rows = [{"power_w": 300.25, "temp_c": 65.0}] * 19
    assert watch_rows(FrozenWatch(0), rows, step=60.0) == []
    assert len(watch_rows(FrozenWatch(0), rows + rows[:1], step=60.0)) == 1


def test_frozen_spans_end_where_the_readings_move_again():
    t = np.arange(1500.0)
    power = np.where((t >= 200) & (t < 800), 250.5, 250.0 + 0.01 * t)
    spans = frozen_spans(1, t, {"power_w": power, "temp_c": np.full(t.size, 50.0)}, [True] * 1500)
    assert [(s.from_s, s.to_s) for s in spans] == [(200.0, 799.0)]


def test_an_impossible_reading_is_named_and_left_out():
    row = Telemetry(
        0,
        312.0,
        temp_c=-75.0,
        power_w=1500.0,
        power_limit_w=700.0,
        util_pct=101.0,
        sm_clock_mhz=1980.0,
    )
    found = validity.screen(row)
    assert [(f.field, f.value) for f in found] == [
        ("temp_c", -75.0),
        ("power_w", 1500.0),
        ("util_pct", 101.0),
    ]
    clean = validity.cleaned(row, found)
    assert (clean.temp_c, clean.power_w, clean.util_pct, clean.sm_clock_mhz) == (
        None,
        None,
        None,
        1980.0,
    )


@pytest.mark.parametrize(
    ("field", "value"), [("sm_clock_mhz", 12_000.0), ("temp_c", 400.0), ("mem_util_pct", -1.0)]
)
def test_values_no_hardware_reports_are_out_of_range(field, value):
    assert [f.field for f in validity.screen(Telemetry(0, 0.0, **{field: value}))] == [field]


def test_power_bound_is_twice_the_limit_from_the_device_where_the_row_has_none():
    row = Telemetry(0, 0.0, power_w=900.0)
    assert validity.screen(row) == []
    assert [f.field for f in validity.screen(row, power_limit_w=400.0)] == ["power_w"]


def test_gaps_longer_than_five_intervals_are_named():
    t = np.concatenate([np.arange(0.0, 100.0), np.arange(400.0, 500.0)])
    (gap,) = validity.gaps(t)
    assert (gap.from_s, gap.to_s) == (99.0, 400.0)
    assert validity.missing_s([gap], 0.0, 200.0) == pytest.approx(101.0)
    assert validity.gaps(np.array([0.0, 1.0, 2.0, 5.5, 6.5])) == []  # under 10 s


def test_a_counter_that_goes_back_is_a_reset_and_the_counts_add():
    t = np.arange(6.0)
    energy = np.array([100.0, 200.0, 300.0, 5.0, 105.0, np.nan])
    (reset,) = validity.counter_resets("energy_j", t, energy)
    assert (reset.t_s, reset.before, reset.after) == (3.0, 300.0, 5.0)
    assert validity.unreset(energy)[:5].tolist() == [100.0, 200.0, 300.0, 305.0, 405.0]


def test_every_episode_gives_its_time_in_minutes_since_the_devices_load_start():
    """One origin for every time a text prints: the load start, as the report's tables."""
    origin = 30.0
    assert validity.Gap(930.0, 1050.0).describe(origin) == "no readings for 2 min from 15.0 min"
    reset = validity.Reset("energy_j", 1338.0, 300.0, 5.0)
    assert reset.describe(origin).startswith("energy counter reset at 21.8 min (300 → 5)")
    found = tuple(validity.screen(Telemetry(0, 342.0, temp_c=-75.0)))
    frozen = validity.Frozen(0, 1890.0, 2490.0, (("power_w", 301.5),))
    quality = validity.Quality(
        10, found, (validity.Gap(930.0, 1050.0),), (frozen,), (reset,), origin_s=origin
    )
    assert quality.left_out() == [
        "1 temperature reading outside −20…150 °C (−75 °C at 5.2 min) was left out"
    ]
    line = quality.line()
    assert "frozen from 31.0 min" in line and "counter reset at 21.8 min" in line
    assert frozen.describe(origin).startswith("telemetry frozen from 31.0 min: power 301.5 W")


def test_a_ticks_rows_screened_at_once_find_what_each_row_screened_alone_finds():
    rng = np.random.default_rng(7)
    rows = [
        Telemetry(
            k % 4,
            float(k),
            temp_c=float(rng.choice([60.0, -75.0, 400.0])),
            power_w=float(rng.choice([300.0, 1500.0, -1.0])),
            power_limit_w=None if k % 3 else 700.0,
            util_pct=float(rng.choice([50.0, 101.0])),
            sm_clock_mhz=None,
            fan_pct=250.0,
        )
        for k in range(60)
    ]
    limits = {0: 400.0, 1: None, 2: 1000.0, 3: 700.0}
    alone = [f for r in rows for f in validity.screen(r, limits[r.device])]
    assert validity.screen_all(rows, limits) == alone and alone
    assert validity.screen_all([]) == []


def _columns(rows: list[Telemetry]) -> dict[str, np.ndarray]:
    """One device's rows as the block write takes them: an array per field, None as NaN."""
    return {
        name: np.array([np.nan if getattr(r, name) is None else getattr(r, name) for r in rows])
        for name in ("t_s", *TELEMETRY_METRICS)
    }


def test_a_devices_columns_screened_at_once_find_what_its_rows_screened_one_by_one_find():
    """The block write's screen and the tick's: the same ranges, the same readings (value,
    bound, time) in the same order, the power bound from the row's own limit or the device's
    (none known, out of range, zero) alike."""
    rng = np.random.default_rng(11)
    pick = rng.choice
    for limit in (None, 400.0, 0.0, 9000.0):
        rows = [
            Telemetry(
                3,
                0.5 * k,
                temp_c=pick([60.0, -75.0, 400.0, None, -20.0, 150.0]),
                power_w=pick([300.0, 1500.0, -1.0, None, 0.0, 5001.0, 850.0]),
                power_limit_w=pick([None, 700.0, 0.0, -5.0, 6000.0, 350.0]),
                util_pct=pick([50.0, 101.0, None]),
                clock_reasons=pick([0x4, -1, None]),
                remap_pending=pick([0, 1, 2, None]),
                energy_j=pick([1e9, -3.0, None]),
                fan_pct=250.0,
            )
            for k in range(400)
        ]
        alone = [f for r in rows for f in validity.screen(r, limit)]
        assert validity.screen_columns(3, _columns(rows), limit) == alone
        assert len(alone) > 100
    # a field the block does not give is not read: nothing to flag in it
    assert validity.screen_columns(0, {"t_s": np.arange(3.0)}) == []
    assert validity.screen_columns(0, {"t_s": np.empty(0), "temp_c": np.empty(0)}) == []


def _watched(device: int, t, columns, loaded) -> list:
    """``frozen_spans`` as the watch finds them fed one row at a time."""
    watch, out = FrozenWatch(device), []
    for k, time in enumerate(t):
        row = {n: (None if not np.isfinite(c[k]) else float(c[k])) for n, c in columns.items()}
        before = watch.span
        watch.add(float(time), row, bool(loaded[k]))
        if before is not None and watch.span is None:
            out.append(before)
    return [*out, watch.span] if watch.span is not None else out


@pytest.mark.parametrize("seed", range(12))
def test_frozen_spans_over_columns_are_the_watchs_row_by_row(seed: int):
    """Still stretches, NaN, loads off, whole-watt power turning fine, throughput without a
    temperature: the columns read at once find what the watch fed each row finds."""
    rng = np.random.default_rng(seed)
    n = 4000
    t = np.cumsum(rng.choice([1.0, 1.0, 1.0, 7.0, 30.0], n))
    columns = {
        name: np.round(rng.normal(100, 3, n), digits)
        for name, digits in (("power_w", 2 if seed % 2 else 0), ("temp_c", 0), ("energy_j", 0))
    }
    columns["throughput"] = rng.normal(1e12, 1e9, n)
    for _ in range(8):  # every signal held still for a while, some long enough to count
        at, length = int(rng.integers(n)), int(rng.integers(5, 600))
        names = [name for name in columns if rng.random() < 0.8]
        for name in names:
            columns[name][at : at + length] = columns[name][at]
    for name, values in columns.items():
        values[rng.random(n) < 0.002 * (name != "power_w")] = np.nan
    loaded = rng.random(n) > 0.01
    loaded[rng.integers(n) :][:300] = False
    found = frozen_spans(seed, t, columns, loaded)
    assert found and found == _watched(seed, t, columns, loaded)
