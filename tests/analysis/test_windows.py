"""Cold and steady windows, and the figures taken over them for every metric and part."""

import numpy as np
import pytest

from soak.analysis.windows import (
    LiveWork,
    Window,
    cold_window,
    steady_window,
    window_stats,
    window_throughput,
)
from soak.fields import WINDOW_METRICS as METRICS
from soak.fields import Columns
from soak.model import ClockReason
from soak.profile import Windows

W = Windows()


def test_cold_window_is_the_first_minute_after_warm_up():
    assert cold_window(10.0, W) == Window(15.0, 75.0)


def test_steady_window_follows_equilibrium_or_ends_the_run():
    assert steady_window(700.0, 10.0, 3610.0, W) == Window(700.0, 1300.0)
    assert steady_window(3300.0, 10.0, 3610.0, W) == Window(3300.0, 3610.0)  # cut by the end
    assert steady_window(None, 10.0, 3610.0, W) == Window(3010.0, 3610.0)
    # A run too short for both: the steady window starts where the cold one ends...
    assert steady_window(None, 10.0, 400.0, W) == Window(75.0, 400.0)
    # ... or, under a minute after it, overlaps it (the run-length check warns).
    assert steady_window(None, 10.0, 100.0, W) == Window(15.0, 100.0)


def _records(seconds=1200):
    t = np.arange(0.0, seconds)
    tele = {name: np.full(t.size, np.nan) for name in METRICS}
    tele["t_s"] = t
    tele["temp_c"] = np.where(t < 600, 50.0, 70.0)
    tele["sm_clock_mhz"] = 1700 + (t % 10)  # 1700..1709
    tele["power_w"] = np.full(t.size, 700.0)
    tele["energy_j"] = 700.0 * t
    bits = int(ClockReason.SW_POWER_CAP)
    reasons = np.full(t.size, float(bits))
    reasons[(t >= 700) & (t < 760)] = float(bits | ClockReason.SW_THERMAL | 0x10000)
    tele["clock_reasons"] = reasons
    start = t[:-1]
    work = {
        "gemm": {"t_start_s": start, "t_end_s": start + 1, "work": np.full(start.size, 7e14)},
        "membw": {
            "t_start_s": start,
            "t_end_s": start + 1,
            "work": np.where(start < 600, 3e12, 2.7e12),
        },
    }
    return Columns(tele), work


def test_window_stats_give_median_spread_and_throughput_per_part():
    tele, work = _records()
    s = window_stats(Window(600.0, 1200.0), tele, work)
    assert s.median["temp_c"] == 70.0
    assert s.p10["sm_clock_mhz"] == pytest.approx(1700.9, abs=0.2)
    assert s.p90["sm_clock_mhz"] == pytest.approx(1708.1, abs=0.2)
    assert s.throughput == pytest.approx({"gemm": 7e14, "membw": 2.7e12})
    assert s.throughput_cv["gemm"] == pytest.approx(0.0, abs=1e-12)
    # first to last energy reading: 700 * 599 J over 600 to 1199 s
    assert (s.power_mean_w, s.energy_basis) == (pytest.approx(700.0), "energy counter")
    assert s.energy_per_work == pytest.approx({"gemm": 1e-12, "membw": 700 / 2.7e12})
    # Unread metrics are None, never 0.
    assert s.median["mem_temp_c"] is None and s.p90["util_pct"] is None


def test_reason_shares_count_each_bit_and_keep_unknown_bits():
    tele, work = _records()
    s = window_stats(Window(600.0, 1200.0), tele, work)
    assert s.reason_share["sw_power_cap"] == 1.0
    assert s.reason_share["sw_thermal"] == pytest.approx(60 / 600)
    assert s.reason_share["hw_any"] == 0.0
    assert s.unknown_reason_bits == 0x10000
    tele["clock_reasons"][:] = np.nan
    unread = window_stats(Window(600.0, 1200.0), tele, work)
    assert set(unread.reason_share.values()) == {None}


def test_a_window_without_work_has_no_throughput():
    tele, work = _records(300)
    s = window_stats(Window(400.0, 500.0), tele, work)
    assert s.throughput == {"gemm": None, "membw": None} and s.samples == {"gemm": 0, "membw": 0}


def test_live_work_forgets_what_no_figure_needs_and_keeps_its_figures():
    # Ten hours of one sample a second for two parts, the runner's forget each tick with a
    # 30-minute reach: the figures equal those of a LiveWork that keeps everything, and the
    # samples held stay bounded (cold window, steady window, the reach), not ten hours' worth.
    windows = Windows()
    kept, bounded = LiveWork(windows), LiveWork(windows)
    rng = np.random.default_rng(3)
    equilibrium = None
    for t in range(1, 36_000):
        for part, rate in (("gemm", 100.0), ("membw", 7.0)):
            work = rate * (1 + 0.01 * rng.standard_normal())
            for live in (kept, bounded):
                live.add(part, "X", t - 1.0, float(t), work)
        if t == 7_200:
            equilibrium = 6_000.0  # dated into the past, within the reach, as the detector does
        bounded.forget(t - 1_800.0, equilibrium)
        if t % 3_600 == 0:
            assert bounded.cold(t) == kept.cold(t)
            assert bounded.steady(equilibrium, t) == kept.steady(equilibrium, t)
    assert kept.samples_held == 2 * 35_999
    assert bounded.samples_held < 2 * (60 + windows.steady_length_s + 2 * 1_800) + 8_192
    assert bounded.load_start_s == kept.load_start_s == 1.0


def test_live_figures_are_the_analysis_figures_at_every_tick(monkeypatch):
    # Samples of uneven lengths that straddle the windows' edges, the runner's forget each
    # tick dropping samples often (so those held move), an equilibrium dated, then re-dated:
    # at every tick the live figures equal window_throughput over every sample so far.
    monkeypatch.setattr("soak.analysis.windows._COMPACT_MIN", 64)
    windows = Windows(cold_start_s=5.0, cold_length_s=30.0, steady_length_s=60.0)
    live = LiveWork(windows)
    rng = np.random.default_rng(7)
    held: dict[str, list[tuple[float, float, float]]] = {"gemm": [], "membw": []}
    ends = {"gemm": 0.0, "membw": 0.3}
    equilibrium = None
    for t in np.arange(0.5, 600.0, 0.5):
        for part, rate in (("gemm", 100.0), ("membw", 7.0)):
            while True:  # the samples that ended by this tick
                start, end = ends[part], ends[part] + rng.uniform(0.1, 1.7)
                if end > t:
                    break
                work = rate * (end - start) * (1 + 0.05 * rng.standard_normal())
                live.add(part, "X", start, end, work)
                held[part].append((start, end, work))
                ends[part] = end
        equilibrium = {200.0: 150.0, 400.0: 300.0}.get(float(t), equilibrium)
        live.forget(t - 100.0, equilibrium)
        start = live.load_start_s
        expect = {}
        if start is not None and t >= cold_window(start, windows).end_s:
            expect["cold"] = cold_window(start, windows)
        if start is not None and equilibrium is not None and t > equilibrium:
            expect["steady"] = steady_window(equilibrium, start, float(t), windows)
        got = {"cold": live.cold(float(t)), "steady": live.steady(equilibrium, float(t))}
        rows = {p: np.array(r) for p, r in held.items() if r}
        for name, window in expect.items():
            figures = {
                p: window_throughput(window, r[:, 0], r[:, 1], r[:, 2]) for p, r in rows.items()
            }
            assert got[name] == figures, (name, t)
        assert all(got[name] == {} for name in got.keys() - expect.keys())
    assert "steady" in expect and live.samples_held < sum(map(len, held.values()))
