"""Every form of the clock-event reasons a log can hold, read (issue 39): the bitmask under
both names, one column per reason under both naming eras (``Active`` / ``Not Active``), the
cumulative counters, dcgmi dmon's field 112 and its counters, and a generic CSV's column per
reason; a partial set is read for what it has and the rest is "not available". Where two
columns give one field, the documented one is used and the other is named, and every column
soak does not use is named. The column names are ``nvidia-smi --help-query-gpu``'s and DCGM's
(``dcgm_fields``), the values written as those tools print them."""

from __future__ import annotations

import pytest

from soak.fields import REASON_CAPABILITY, unread_reasons
from soak.importers import csv as csv_import
from soak.importers import dcgmi, nvidia_smi
from soak.importers.core import _capabilities
from soak.importers.source import ImportFailed
from soak.model import ClockReason

SW_THERMAL, SW_POWER_CAP, HW_SLOWDOWN = (
    int(ClockReason.SW_THERMAL),
    int(ClockReason.SW_POWER_CAP),
    int(ClockReason.HW_SLOWDOWN),
)
OLD = "clocks_throttle_reasons"
NEW = "clocks_event_reasons"


def _smi(tmp_path, header: list[str], rows: list[list[str]]):
    path = tmp_path / "smi.csv"
    path.write_text("\n".join(", ".join(r) for r in [header, *rows]) + "\n")
    return nvidia_smi.read(path, None, 1.0)


def _reasons_log(prefix: str, with_power_cap: bool = True) -> tuple[list[str], list[list[str]]]:
    """Two GPUs, three seconds, SW thermal slowdown on GPU 1 from the second row: the
    columns of one reason each, as nvidia-smi prints them."""
    names = ["sw_power_cap", "hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"]
    names = [n for n in names if with_power_cap or n != "sw_power_cap"]
    header = ["timestamp", "index", "temperature.gpu", *(f"{prefix}.{n}" for n in names)]
    header.append(f"{prefix}.sw_thermal_slowdown")
    rows = []
    for second in range(3):
        for gpu in (0, 1):
            hot = gpu == 1 and second > 0
            cells = [f"2026/03/02 09:00:0{second}.000", str(gpu), "85" if hot else "60"]
            cells += ["Not Active"] * len(names)
            cells.append("Active" if hot else "Not Active")
            rows.append(cells)
    return header, rows


@pytest.mark.parametrize("prefix", [OLD, NEW], ids=["old names", "new names"])
def test_per_reason_columns_are_read_into_the_bitmask(prefix, tmp_path):
    # Issue 39: an 8-GPU node logged with clocks_throttle_reasons.sw_thermal_slowdown etc.
    # had those columns dropped without a word, and seven GPUs held by SW thermal slowdown
    # in 99 % of samples passed as healthy.
    trace = _smi(tmp_path, *_reasons_log(prefix))
    gpu0, gpu1 = trace.devices[0], trace.devices[1]
    assert gpu1.resolve_reasons() & SW_THERMAL and gpu1.resolve_reasons() & SW_POWER_CAP
    assert gpu1.values["clock_reasons"] == [0.0, float(SW_THERMAL), float(SW_THERMAL)]
    assert gpu0.values["clock_reasons"] == [0.0, 0.0, 0.0]
    caps = _capabilities(trace)[1]
    assert caps["clock_reasons"] == "supported"
    assert caps[REASON_CAPABILITY.format(key="sw_thermal")] == "supported"
    assert unread_reasons(caps) == 0
    assert trace.unused == []


def test_a_partial_set_reads_what_it_has_and_the_rest_is_not_available(tmp_path):
    trace = _smi(tmp_path, *_reasons_log(NEW, with_power_cap=False))
    gpu1 = trace.devices[1]
    read = gpu1.resolve_reasons()
    assert read & SW_THERMAL and not read & SW_POWER_CAP
    caps = _capabilities(trace)[1]
    assert caps[REASON_CAPABILITY.format(key="sw_power_cap")] == "not supported"
    assert caps[REASON_CAPABILITY.format(key="sw_thermal")] == "supported"
    assert unread_reasons(caps) == SW_POWER_CAP


def test_a_reason_column_unreadable_in_one_row_leaves_that_row_unread(tmp_path):
    header, rows = _reasons_log(NEW)
    rows[3][-1] = "[N/A]"  # GPU 1's second row: its SW thermal state not read
    trace = _smi(tmp_path, header, rows)
    assert trace.devices[1].values["clock_reasons"] == [0.0, None, float(SW_THERMAL)]


def test_a_reason_value_that_is_not_a_state_names_its_column_and_line(tmp_path):
    header, rows = _reasons_log(OLD)
    rows[2][-1] = "Maybe"
    with pytest.raises(ImportFailed, match=r"smi\.csv:4: column '.*sw_thermal_slowdown': "):
        _smi(tmp_path, header, rows)


def test_the_reason_counters_give_the_reasons_active_over_each_interval(tmp_path):
    # newer drivers: the time each reason was active since the driver loaded, in µs
    header = ["timestamp", "index", "temperature.gpu"]
    header += [f"clocks_event_reasons_counters.{n} [us]" for n in ("sw_thermal_slowdown",)]
    rows = [
        ["2026/03/02 09:00:00.000", "0", "84", "5000000 us"],
        ["2026/03/02 09:00:01.000", "0", "85", "5990000 us"],  # 0.99 s of 1 s: active
        ["2026/03/02 09:00:02.000", "0", "85", "6000000 us"],  # 0.01 s of 1 s: not
    ]
    trace = _smi(tmp_path, header, rows)
    device = trace.devices[0]
    assert device.resolve_reasons() == SW_THERMAL
    assert device.values["clock_reasons"] == [None, float(SW_THERMAL), 0.0]


def test_the_bitmask_is_preferred_over_the_columns_of_one_reason_each(tmp_path):
    header, rows = _reasons_log(NEW)
    header.append(f"{NEW}.active")
    for row in rows:
        row.append("0x0000000000000020" if row[-1] == "Active" else "0x0000000000000000")
    trace = _smi(tmp_path, header, rows)
    assert trace.devices[1].values["clock_reasons"] == [0.0, 32.0, 32.0]
    assert f"{NEW}.sw_thermal_slowdown ({NEW}.active preferred)" in trace.unused


def test_the_averaged_power_is_preferred_over_the_instantaneous_and_said_so(tmp_path):
    # Issue 39: with both in a log, the later column silently won (the instantaneous one)
    header = ["index", "power.draw [W]", "power.draw.instant [W]", "pstate"]
    trace = _smi(tmp_path, header, [["0", "650.00 W", "702.31 W", "P0"]])
    assert trace.devices[0].values["power_w"] == [650.0]
    assert trace.preferred == ["power_w from power.draw over power.draw.instant"]
    assert trace.unused == ["power.draw.instant (power.draw preferred)", "pstate"]


def test_dcgmi_dmon_reads_field_112_and_the_reason_counters(tmp_path):
    path = tmp_path / "dmon.txt"
    path.write_text(
        "#Entity   TMPTR  POWER  POWINST  DVCCTR\nID\n"
        "GPU 0     60     650.1  702.3    0\n"
        "GPU 0     85     500.2  480.0    32\n"
    )
    trace = dcgmi.read(path, 1.0)
    assert trace.devices[0].values["clock_reasons"] == [0.0, 32.0]
    assert trace.devices[0].values["power_w"] == [650.1, 500.2]
    assert trace.unused == ["POWINST (POWER preferred)"]
    path.write_text(
        "#Entity   TMPTR  CLKSWTHNS  CLKPCNS\nID\n"
        "GPU 0     84     0          0\n"
        "GPU 0     85     1000000000 0\n"
    )
    device = dcgmi.read(path, 1.0).devices[0]
    assert device.resolve_reasons() == SW_THERMAL | SW_POWER_CAP
    assert device.values["clock_reasons"] == [None, float(SW_THERMAL)]


def test_csv_maps_a_column_per_reason_and_names_what_it_does_not_use(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("t,gpu,temp,swth,note\n0,0,60,0,a\n1,0,85,1,b\n")
    options = csv_import.CsvOptions(
        time_col="t",
        time_unit="s",
        device_col="gpu",
        mapping={"temp_c": "temp", "clock_reasons.sw_thermal": "swth"},
    )
    trace = csv_import.read(path, options)
    device = trace.devices[0]
    assert device.resolve_reasons() == SW_THERMAL
    assert device.values["clock_reasons"] == [0.0, float(SW_THERMAL)]
    assert trace.unused == ["note"]
    caps = _capabilities(trace)[0]
    assert caps[REASON_CAPABILITY.format(key="hw_slowdown")] == "not supported"
    assert unread_reasons(caps) & HW_SLOWDOWN
