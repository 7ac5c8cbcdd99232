"""The terminal view and the plain log lines, fed hand-made snapshots."""

from __future__ import annotations

import dataclasses
import datetime as dt
import io

from rich.console import Console

from soak.live.view import LiveView, PlainView, Tracker, header_text, make_view
from soak.model import ClockReason
from soak.progress import Rate

from .snapshots import device, snapshot, xid

NOON = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)


def plain(every_s: float = 60.0) -> tuple[PlainView, io.StringIO]:
    stream = io.StringIO()
    return PlainView(stream, Tracker(), every_s=every_s, now=lambda: NOON), stream


def test_plain_lines_one_per_minute_of_load_and_one_per_state_change_without_escape_codes():
    view, stream = plain()
    for t in range(10, 610):  # the devices' load starts at 10 s
        steady = {"equilibrium_s": 400.0} if t >= 460 else {}
        view.update(snapshot(float(t), (device(0, float(t), **steady), device(1, float(t), None))))
    view.close()
    lines = stream.getvalue().splitlines()
    # the server once a minute of load, each device when it starts warming, and device 0
    # once more when it becomes steady: not a line per device per minute
    assert len(lines) == 10 + 2 + 1
    assert "\x1b" not in stream.getvalue()
    assert lines[0] == (
        "2026-12-01T12:00:00Z load 0.0 min soak sim · mix · node1 · load 0.0 of 60 min · "
        "2 devices: 2 warming · 61 °C"
    )
    # device 1 reads no temperature: "not available", never a number; every field is named
    assert lines[2] == (
        "2026-12-01T12:00:00Z load 0.0 min device 1: temperature not available, "
        "SM clock 1980 MHz, power not available (limit 700 W), "
        "throughput gemm 650 TFLOP/s  membw 3.10 TB/s, state warming"
    )
    assert lines[3].startswith("2026-12-01T12:00:00Z load 1.0 min soak sim · mix · node1 · load")
    (became,) = [line for line in lines if "state steady" in line]
    assert became.startswith("2026-12-01T12:00:00Z load 7.5 min device 0: temperature 61 °C")
    assert became.endswith("state steady at 6.5 min")  # 400 s, from its load start at 10 s
    assert lines[-1].endswith("2 devices: 1 warming, 1 steady · 61 °C")  # in run order


def test_a_piped_two_hour_soak_of_eight_devices_logs_a_line_a_minute_not_a_flood() -> None:
    view, stream = plain()
    for t in range(10, 7210, 10):  # a tick each 10 s: the same lines, fewer snapshots
        devices = tuple(
            device(i, float(t), **({"equilibrium_s": 900.0 + 60 * i} if t > 900 + 60 * i else {}))
            for i in range(8)
        )
        view.update(snapshot(float(t), devices))
    lines = stream.getvalue().splitlines()
    assert len(lines) == 120 + 8 + 8  # the minutes, and each device warming, then steady


def test_the_server_line_judges_a_dated_device_on_its_steady_figure_not_one_units_rate() -> None:
    # A mix's part delivers its work in uneven units: the latest one may read 59 % of cold
    # while the steady window, the analysis's own figure and the report's, holds 99 %.
    view, stream = plain()
    cold = (Rate("gemm", 6.5e14, "FLOP"), Rate("membw", 3.1e12, "B"))
    steady = (Rate("gemm", 6.435e14, "FLOP"), Rate("membw", 3.1e12, "B"))
    for t in range(10, 200):
        dated = {"equilibrium_s": 100.0, "steady": steady} if t >= 130 else {}
        view.update(snapshot(float(t), (device(0, float(t), rate=3.835e14, cold=cold, **dated),)))
    lines = [line for line in stream.getvalue().splitlines() if " soak sim · " in line]
    assert lines[-1].endswith("lowest steady gemm 99.0 % of cold (device 0)")
    assert any(line.endswith("lowest gemm 59.0 % of cold (device 0)") for line in lines)


def test_a_warm_up_says_what_the_worker_is_doing_and_for_how_long() -> None:
    view, stream = plain()
    for t in range(10, 60):  # the load started at 5 s; no unit of work done yet
        warm = snapshot(float(t), (device(0, float(t), work_start_s=None, rates=()),))
        view.update(dataclasses.replace(warm, running_since_s=None))
    for t in range(60, 200):  # its first unit of work done at 70 s
        at = snapshot(float(t), (device(0, float(t), work_start_s=70.0 if t >= 70 else None),))
        view.update(dataclasses.replace(at, running_since_s=70.0 if t >= 70 else None))
    lines = stream.getvalue().splitlines()
    assert lines[0].endswith("soak sim · mix · node1 · warm-up 5 s · 1 device: 1 warm-up · 61 °C")
    # the minutes of load count from the device's load start: a line at 0, 1 and 2 min
    minutes = [line.split(" ", 3)[2] for line in lines if " soak sim · " in line]
    assert minutes[-3:] == ["0.0", "1.0", "2.0"]
    (state,) = [line for line in lines if "device 0:" in line and "state warm-up" in line]
    assert state == (
        "2026-12-01T12:00:00Z warm-up device 0: temperature 61 °C, SM clock 1980 MHz, power not "
        "available (limit 700 W), throughput -, state warm-up 5 s (its worker imports, sets up "
        "and does its first unit of work; on a CPU often half a minute; its load counts from "
        "then)"
    )


def test_rates_are_shown_against_the_snapshots_cold_figure_once_it_has_one() -> None:
    view, stream = plain()
    cold = (Rate("gemm", 6.5e14, "FLOP"), Rate("membw", 3.1e12, "B"))
    for t in range(10, 200):
        rate = 6.5e14 if t < 100 else 6.0e14
        known = cold if t >= 75 else ()  # the runner gives it once the cold window is over
        view.update(snapshot(float(t), (device(0, float(t), rate=rate, cold=known),)))
    lines = stream.getvalue().splitlines()
    (early,) = [line for line in lines if "load 0.0 min device 0" in line]
    assert "gemm 650 TFLOP/s  membw" in early  # at its load start, before the cold figure
    assert lines[-1].endswith("lowest gemm 92.3 % of cold (device 0)")
    assert view.tracker.rates(
        snapshot(199.0, (device(0, 199.0, rate=6.0e14, cold=cold),)).devices[0]
    ) == ("gemm 600 TFLOP/s (92.3 % of cold)  membw 3.10 TB/s (100.0 % of cold)")


def test_a_clock_event_the_runner_records_is_announced_and_the_state_says_throttled() -> None:
    from soak.model import Event, EventKind

    view, stream = plain(every_s=1e9)
    hot = int(ClockReason.SW_POWER_CAP | ClockReason.SW_THERMAL)
    event = Event(101.0, EventKind.CLOCK_EVENT, "clock event: sw_thermal", 0, {"bits": 0x20})
    for t in range(100, 110):
        events = [event] if t == 101 else []
        view.update(snapshot(float(t), (device(0, float(t), reasons=hot),), events=events))
    messages = [line for line in stream.getvalue().splitlines() if "clock event" in line]
    assert messages == ["2026-12-01T12:00:00Z load 1.5 min device 0: clock event: sw_thermal"]
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


def test_the_header_shows_the_inlet_where_the_bmc_reads_one_and_nothing_where_not() -> None:
    header = "soak sim · mix · node1 · load 0.8 of 60 min"
    assert header_text(snapshot(60.0, inlet_c=24.46)) == f"{header} · inlet 24.5 °C"
    assert header_text(snapshot(60.0, inlet_c=0.0)).endswith(" · inlet 0.0 °C")  # a read 0
    assert header_text(snapshot(60.0)) == header  # no BMC inlet: nothing, never 0
    view, stream = plain()
    view.update(snapshot(60.0, inlet_c=24.46))
    assert f"{header} · inlet 24.5 °C · 2 devices" in stream.getvalue().splitlines()[0]
    live = LiveView(io.StringIO(), width=200)
    shown = Console(file=io.StringIO(), width=200, record=True)
    shown.print(live.render(snapshot(60.0, inlet_c=24.46)))
    shown.print(live.render(snapshot(61.0)))
    text = shown.export_text()
    assert text.count("inlet") == 1 and "· inlet 24.5 °C" in text


def test_make_view_picks_plain_lines_for_a_pipe() -> None:
    assert isinstance(make_view(io.StringIO()), PlainView)


def test_a_message_that_names_its_device_is_not_prefixed_twice() -> None:
    from soak.model import Event, EventKind

    view, stream = plain(every_s=1e9)
    named = Event(30.0, EventKind.WARNING, "device 0: mix running gemm dtype=bf16", 0)
    view.update(snapshot(30.0, events=[named]))
    assert "device 0: device 0:" not in stream.getvalue()
    assert "load 0.3 min device 0: mix running gemm dtype=bf16" in stream.getvalue()


def _server(t_s: float) -> tuple:
    """Eight devices of a mix soak: one throttled by two reasons, one warming with a
    prediction, one steady, all drawing power."""
    from dataclasses import replace

    from soak.progress import Rate

    out = []
    for i in range(8):
        kw: dict = {}
        if i == 3:
            kw["reasons"] = int(ClockReason.SW_THERMAL | ClockReason.HW_SLOWDOWN)
        if i == 5:
            kw["eta_s"] = 720.0
        if i == 6:
            kw["equilibrium_s"] = 640.0
        d = device(i, t_s, temp_c=60.0 + t_s / 30 + i, **kw)
        telemetry = replace(d.telemetry, power_w=690.0 + i)
        rates = (*d.rates, Rate("train", 1.47e4, "token"))
        # the snapshot's cold figures (the analysis's), given once the cold window is over
        cold = rates if t_s > 70 else ()
        out.append(replace(d, telemetry=telemetry, rates=rates, cold=cold))
    return tuple(out)


def _drawn(width: int) -> list[str]:
    from rich.console import Console

    view = LiveView(io.StringIO())
    for t in range(10, 200):
        view.tracker.add(snapshot(float(t), _server(float(t))))
    console = Console(width=width, record=True, file=io.StringIO())
    console.print(view.render(snapshot(200.0, _server(200.0)), width=width))
    return console.export_text().splitlines()


def _device_rows(lines: list[str]) -> dict[int, str]:
    first = next(i for i, line in enumerate(lines) if line.startswith("dev "))
    return {int(line.split()[0]): line for line in lines[first + 1 : first + 9]}


def test_the_live_table_fits_80_120_and_200_columns_with_every_device_and_its_temperature() -> None:
    for width in (80, 120, 200):
        lines = _drawn(width)
        assert max(len(line.rstrip()) for line in lines) <= width, width
        assert not any("…" in line for line in lines), width
        rows = _device_rows(lines)
        assert sorted(rows) == list(range(8)), width
        for i, row in rows.items():
            assert f"{67 + i} °C" in row and "1980 MHz" in row, (width, row)
        assert "throttled: hw_slowdown, sw_thermal" in rows[3]
        assert "warming, ~12 min to go" in rows[5]
        assert "steady at 10.5 min" in rows[6]  # 640 s, from load start at 10 s


def test_the_live_table_gives_up_detail_from_the_least_important_column_first() -> None:
    wide, middle, narrow = _drawn(200), _drawn(120), _drawn(80)
    # 200 columns: rates, trend and the power limit
    assert "gemm 650 TFLOP/s 100.0 %" in _device_rows(wide)[0]
    assert "↑ 2 °C/min" in _device_rows(wide)[0] and "690 W / 700" in _device_rows(wide)[0]
    # 120: each part's % of cold without its rate
    assert "gemm 100.0 %  membw 100.0 %  train 100.0 %" in _device_rows(middle)[0]
    assert "TFLOP/s" not in "\n".join(middle)
    # 80: the lowest part only
    assert "lowest % of cold" in "\n".join(narrow)
    assert "membw" not in "\n".join(narrow)


def test_a_wrapped_message_never_leaves_a_unit_alone_on_a_line() -> None:
    from soak.live.view import wrap_message

    message = (
        "equilibrium withdrawn: the date at 10.9 min was withdrawn at 20.2 min: the 10-min "
        "level moved 1.2 °C from the date's level 64.3 °C"
    )
    for width in range(40, 120):
        lines = wrap_message("[  20.2 min] ", message, width)
        assert all(len(line) <= width for line in lines)
        units = ("°C", "min", "s:", "s ")
        assert not any(line.strip().startswith(units) for line in lines[1:]), lines
        assert " ".join(line.strip() for line in lines).endswith("64.3 °C")
        assert all(line.startswith(" " * 13) for line in lines[1:])


def test_a_cpu_is_not_given_an_sm_clock() -> None:
    from soak.live.view import device_line

    line = device_line(Tracker(), device(0, 30.0, clock_label="clock"))
    assert ", clock 1980 MHz," in line and "SM" not in line


def test_a_cpu_runs_table_heads_its_clock_column_clock() -> None:
    from rich.console import Console

    view = LiveView(io.StringIO())
    cpus = (device(0, 200.0, clock_label="clock"), device(1, 200.0, clock_label="clock"))
    console = Console(width=120, record=True, file=io.StringIO())
    console.print(view.render(snapshot(200.0, cpus), width=120))
    text = console.export_text()
    assert " clock " in next(line for line in text.splitlines() if line.startswith("dev "))
    assert "SM clock" not in text
    console = Console(width=120, record=True, file=io.StringIO())
    console.print(view.render(snapshot(200.0), width=120))  # GPUs: the SM clock
    assert "SM clock" in console.export_text()


def test_the_header_gives_the_predicted_time_to_the_verdict_until_steady() -> None:
    devices = (device(0, 600.0, verdict_eta_s=200.0), device(1, 600.0, verdict_eta_s=690.0))
    progress = dataclasses.replace(snapshot(600.0, devices), until_steady=True)
    assert header_text(progress).endswith("load 9.8 of until steady, verdict in ~12 min")
    unknown = dataclasses.replace(progress, devices=(device(0, 600.0),))
    assert "verdict" not in header_text(unknown)
    fixed = dataclasses.replace(progress, until_steady=False)
    assert "verdict" not in header_text(fixed)


def test_every_message_comes_from_an_event_the_runner_stored() -> None:
    # A device whose readings froze fails: the view says so with the stored event (which the
    # report's event log holds), and its stage line; no message of the view's own making.
    from soak.model import Event, EventKind

    view, stream = plain(every_s=1e9)
    view.update(snapshot(100.0, (device(0, 100.0),)))
    frozen = Event(
        101.0, EventKind.TELEMETRY, "telemetry frozen from 1.5 min: power, temperature", 0
    )
    view.update(snapshot(101.0, (device(0, 101.0, failed=True),), events=[frozen]))
    lines = [line.split(" ", 4)[-1] for line in stream.getvalue().splitlines()[2:]]
    assert lines[0] == "device 0: telemetry frozen from 1.5 min: power, temperature"
    assert lines[1].startswith("device 0: temperature 61 °C") and lines[1].endswith("state failed")
    assert len(lines) == 2
