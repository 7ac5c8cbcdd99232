"""The terminal view and the plain log lines, fed hand-made snapshots."""

from __future__ import annotations

import datetime as dt
import io

from soak.live.view import LiveView, PlainView, Tracker, make_view
from soak.model import ClockReason
from soak.progress import Rate

from .snapshots import device, snapshot, xid

NOON = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)


def plain(every_s: float = 60.0) -> tuple[PlainView, io.StringIO]:
    stream = io.StringIO()
    return PlainView(stream, Tracker(), every_s=every_s, now=lambda: NOON), stream


def test_plain_lines_one_per_device_per_minute_stamped_and_without_escape_codes() -> None:
    view, stream = plain()
    for t in range(0, 600):
        view.update(snapshot(float(t)))
    view.close()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 10 * 3  # a header and two devices, each minute
    assert all(line.startswith("2026-12-01T12:00:00Z t=") for line in lines)
    assert "\x1b" not in stream.getvalue()
    header = "soak sim · mix · node1 · load · 1.0 min, load 0.8 of 60 min"
    assert lines[3] == f"2026-12-01T12:00:00Z t=1.0min {header}"
    # device 1 reads no temperature: "not available", never a number
    assert lines[5].startswith("2026-12-01T12:00:00Z t=1.0min device 1: not available, 1980 MHz")


def test_rates_are_shown_against_the_snapshots_cold_figure_once_it_has_one() -> None:
    view, stream = plain()
    cold = (Rate("gemm", 6.5e14, "FLOP"), Rate("membw", 3.1e12, "B"))
    for t in range(10, 200):
        rate = 6.5e14 if t < 100 else 6.0e14
        known = cold if t >= 75 else ()  # the runner gives it once the cold window is over
        view.update(snapshot(float(t), (device(0, float(t), rate=rate, cold=known),)))
    lines = stream.getvalue().splitlines()
    (early,) = [line for line in lines if "t=1.0min device 0" in line]
    assert "gemm 650 TFLOP/s  membw" in early  # at 1 min, before the cold figure
    assert "gemm 600 TFLOP/s (92.3 % of cold)" in lines[-1]
    assert "membw 3.10 TB/s (100.0 % of cold)" in lines[-1]


def test_a_new_throttle_reason_is_announced_once_and_the_state_says_throttled() -> None:
    view, stream = plain(every_s=1e9)
    hot = int(ClockReason.SW_POWER_CAP | ClockReason.SW_THERMAL)
    for t in range(100, 110):
        view.update(snapshot(float(t), (device(0, float(t), reasons=hot),)))
    messages = [line for line in stream.getvalue().splitlines() if "clock event" in line]
    assert messages == ["2026-12-01T12:00:00Z t=1.7min device 0: clock event: sw_thermal"]
    assert view.tracker.state(device(0, 1.0, reasons=hot)) == "throttled: sw_thermal"
    # the power cap alone is a loaded GPU's normal state, not news
    assert view.tracker.state(device(0, 1.0)) == "warming"


def test_events_scroll_as_messages() -> None:
    view, stream = plain(every_s=1e9)
    view.update(snapshot(300.0, events=[xid(299.0, 1)]))
    assert "device 1: XID 79: GPU has fallen off the bus" in stream.getvalue()


def test_temperature_trend_over_the_last_minute() -> None:
    tracker = Tracker()
    for t in range(0, 120):
        tracker.add(snapshot(float(t), (device(0, float(t), temp_c=40.0 + t / 20),)))
    assert tracker.trend(0) == "↑ 3 °C/min"
    steady = Tracker()
    for t in range(0, 120):
        steady.add(snapshot(float(t), (device(0, float(t), temp_c=60.0),)))
    assert steady.trend(0) == "→"


def test_live_view_draws_every_device_and_a_progress_bar_then_its_last_state() -> None:
    stream = io.StringIO()
    clock = iter(range(0, 10_000))
    view = LiveView(stream, refresh_s=5, wall=lambda: float(next(clock)), width=200)
    for t in range(100, 130):
        view.update(snapshot(float(t), (device(0, float(t)), device(1, float(t), lost=True))))
    view.close()
    out = stream.getvalue()
    assert "\x1b[" in out  # a terminal: drawn in place
    assert "lost" in out and "1980 MHz" in out and "━" in out
    assert "load 2.0 of 60 min" in out  # the final state at close, past the last redraw


def test_make_view_picks_plain_lines_for_a_pipe() -> None:
    assert isinstance(make_view(io.StringIO()), PlainView)


def test_a_message_that_names_its_device_is_not_prefixed_twice() -> None:
    from soak.model import Event, EventKind

    view, stream = plain(every_s=1e9)
    named = Event(30.0, EventKind.WARNING, "device 0: mix running gemm dtype=bf16", 0)
    view.update(snapshot(30.0, events=[named]))
    assert "device 0: device 0:" not in stream.getvalue()
    assert "t=0.5min device 0: mix running gemm dtype=bf16" in stream.getvalue()
