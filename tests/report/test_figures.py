"""Downsampling for plots keeps what an operator must see: a one-second dip in a day."""

import base64
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from soak.model import ClockReason
from soak.report.figures import MAX_POINTS, binned, envelope, reason_bins

DAY = 86400


def test_a_one_second_dip_in_a_day_survives_downsampling():
    t = np.arange(DAY, dtype=float)
    clock = np.full(DAY, 1980.0)
    clock[51_234] = 990.0  # one tick of HW slowdown halving the clock
    e = envelope(t, clock)
    assert e.t.size <= MAX_POINTS and e.downsampled
    assert e.lo.min() == 990.0  # drawn at its full depth...
    assert e.mean.min() > 1900.0  # ...where a plain average would have hidden it
    (bin_,) = np.flatnonzero(e.lo == 990.0)
    assert abs(e.t[bin_] - 51_234) < DAY / MAX_POINTS
    assert e.hi.max() == 1980.0


def test_unreadable_values_are_left_out_not_drawn_as_zero():
    t = np.arange(5000, dtype=float)
    temp = np.full(5000, 70.0)
    temp[1000:1200] = np.nan
    e = envelope(t, temp)
    assert np.nanmin(e.lo) == 70.0  # never 0
    assert np.isnan(e.mean).any()  # and the line breaks across the gap


def test_a_short_series_is_drawn_as_it_is():
    t = np.arange(100, dtype=float)
    y = np.sin(t)
    e = envelope(t, y)
    assert not e.downsampled and np.array_equal(e.mean, y) and np.array_equal(e.lo, y)


def test_all_unreadable_is_empty():
    e = envelope(np.arange(10.0), np.full(10, np.nan))
    assert e.empty


def test_a_single_tick_of_a_reason_marks_its_bin():
    t = np.arange(DAY, dtype=float)
    reasons = np.full(DAY, float(ClockReason.SW_POWER_CAP))
    reasons[70_001] = float(ClockReason.SW_POWER_CAP | ClockReason.HW_SLOWDOWN)
    reasons[:10] = np.nan  # unreadable at first
    starts, ends, bins = reason_bins(t, reasons)
    hw = bins[int(ClockReason.HW_SLOWDOWN)]
    assert hw.sum() == 1
    (i,) = np.flatnonzero(hw)
    assert starts[i] <= 70_001 <= ends[i]
    assert bins[int(ClockReason.SW_POWER_CAP)].all()
    assert set(bins) == {int(ClockReason.SW_POWER_CAP), int(ClockReason.HW_SLOWDOWN)}


def test_unknown_reason_bits_are_kept():
    t = np.arange(10, dtype=float)
    reasons = np.full(10, float(0x4000))
    _, _, bins = reason_bins(t, reasons)
    assert list(bins) == [0x4000]


def test_figures_are_svg_documents(faulty_run):
    html = (faulty_run / "report.html").read_text()
    prefix = 'src="data:image/svg+xml;base64,'
    chunks = html.split(prefix)[1:]
    # server view, heat map, one timeline per device, projected temperature against inlet
    assert len(chunks) == 2 + 4 + 1
    for chunk in chunks:
        svg = ET.fromstring(base64.b64decode(chunk[: chunk.index('"')]))
        assert svg.tag == "{http://www.w3.org/2000/svg}svg"
        assert float(svg.get("width").removesuffix("pt")) > 300
        assert float(svg.get("height").removesuffix("pt")) > 100


def test_heat_map_cells_keep_the_extreme_and_stay_blank_without_readings():
    t = np.array([0.0, 1.0, 2.0, 3.0, 7.0, 8.0])
    y = np.array([50.0, 90.0, 51.0, np.nan, 60.0, 61.0])
    edges = np.array([0.0, 2.5, 5.0, 7.5, 10.0])
    hot = binned(t, y, edges, "max")
    assert hot[0] == 90.0 and np.isnan(hot[1]) and hot[2] == 60.0 and hot[3] == 61.0
    assert binned(t, y, edges, "min")[0] == 50.0


def _svgs(html: str) -> list[str]:
    prefix = 'src="data:image/svg+xml;base64,'
    return [
        base64.b64decode(chunk[: chunk.index('"')]).decode() for chunk in html.split(prefix)[1:]
    ]


def test_a_reading_no_device_has_gets_no_empty_frame(faulty_run, tmp_path):
    import sqlite3

    from soak.pipeline import build_outputs
    from soak.store import STORE_NAME
    from tests.report.conftest import copy_run

    run_dir = copy_run(faulty_run, tmp_path / "run")
    conn = sqlite3.connect(run_dir / STORE_NAME)
    with conn:
        conn.execute(
            "UPDATE telemetry SET temp_c=NULL, mem_temp_c=NULL, power_w=NULL, clock_reasons=NULL"
        )
    conn.close()
    _, report = build_outputs(run_dir)
    server, heatmap, *timelines = _svgs(report.read_text())
    assert "temperature (°C)" not in server and "gemm (TFLOP/s)" in server
    assert "hottest temperature" not in heatmap and "lowest gemm" in heatmap
    for svg in timelines:
        assert "not drawn, nothing readable: temperature, power, clock-event reasons" in svg
        assert "temperature (°C)" not in svg and "power (W)" not in svg
        assert "sw_power_cap" not in svg and "SM clock (MHz)" in svg


def test_a_figure_is_cropped_as_matplotlibs_tight_box_crops_it_legend_outside_included():
    """The crop is measured without the extra drawing of ``bbox_inches="tight"``: the same
    box, a legend hanging right of the axes and a twin axis's label inside it."""
    import io

    from matplotlib.figure import Figure

    from soak.report.figures import LEGEND_RIGHT, RASTER_DPI, _style, to_data_uri

    def build() -> Figure:
        fig = Figure(figsize=(11.0, 3.0))
        ax, below = fig.subplots(2, 1, sharex=True)
        ax.plot([0, 1, 2], [40.0, 70.0, 71.0], label="a long legend entry, outside the axes")
        ax.legend(**LEGEND_RIGHT)
        twin = below.twinx()
        twin.plot([0, 1, 2], [1593.0, 1980.0, 1410.0])
        twin.set_ylabel("memory\nclock (MHz)")
        below.set_ylabel("power (W)")
        fig.align_ylabels([ax, below])
        return fig

    def size(svg: bytes) -> tuple[float, float]:
        root = ET.fromstring(svg)
        return tuple(float(root.get(k).removesuffix("pt")) for k in ("width", "height"))

    ours = base64.b64decode(to_data_uri(build()).split(",", 1)[1])
    buf, reference = io.BytesIO(), build()  # built outside the style, as the report's are
    with _style():
        reference.savefig(buf, format="svg", dpi=RASTER_DPI, bbox_inches="tight")
    width, height = size(ours)
    assert (width, height) == pytest.approx(size(buf.getvalue()), abs=1e-3)
    assert width > 11.0 * 72  # the legend right of the axes is inside the crop
