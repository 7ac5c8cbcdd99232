"""Progress lines: each part's rate in its own unit, unreadable readings as n/a; one plain
line per minute of run time. The display reads only the ``Progress`` snapshot, so it is tested
on snapshots made by hand, without a run."""

import io

from soak.display import LogDisplay, device_lines
from soak.model import Telemetry
from soak.progress import DeviceProgress, Phase, Progress, Rate


def snapshot(t_s: float, temps: tuple[float | None, ...] = (61.0, None)) -> Progress:
    devices = tuple(
        DeviceProgress(
            index=i,
            name="sim",
            uuid=None,
            telemetry=Telemetry(i, t_s, temp_c=temp, sm_clock_mhz=1980.0, power_w=None),
            rates=(Rate("gemm", 6.5e14, "FLOP"), Rate("membw", 3.1e12, "B")),
            work_start_s=10.0,
            equilibrium_s=600.0 if i == 0 else None,
            eta_s=None if i == 0 else 240.0,
        )
        for i, temp in enumerate(temps)
    )
    return Progress(
        t_s=t_s,
        phase=Phase.LOAD,
        backend="sim",
        workload="mix",
        host="h",
        planned_s=3600.0,
        until_steady=False,
        load_start_s=5.0,
        running_since_s=10.0,
        devices=devices,
    )


def test_device_lines_carry_each_parts_unit_and_say_na_for_unreadable() -> None:
    lines = device_lines(snapshot(700.0))
    assert len(lines) == 2
    assert "FLOP/s" in lines[0] and "B/s" in lines[0] and "61 °C" in lines[0]
    assert "steady @10.0m" in lines[0]
    assert "n/a °C" in lines[1] and "n/a W" in lines[1] and "warming, ~4m to go" in lines[1]


def test_log_display_writes_one_line_per_minute() -> None:
    stream = io.StringIO()
    display = LogDisplay(stream)
    for t in range(0, 600, 1):
        display.update(snapshot(float(t)))
    lines = stream.getvalue().splitlines()
    assert len(lines) == 10
    assert lines[1] == "soak: t=1 min, 2 devices reporting, hottest 61 °C, 1/2 at equilibrium"
