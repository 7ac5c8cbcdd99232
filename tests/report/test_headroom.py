"""The headroom section of the report and summary.json, on the shared faulty run (GPU 1
starved of air), on a copy of it whose BMC could not be read, and rebuilt at other design
inlets (``soak report --design-inlet``)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from soak.cli import main
from soak.pipeline import build_outputs
from soak.runner import run as run_soak
from soak.store import STORE_NAME
from tests.factories import sim_config
from tests.report.conftest import copy_run, set_meta

NO_BMC = "no BMC given (--bmc HOST) and no in-band IPMI device (/dev/ipmi0)"


def test_the_air_starved_gpu_is_named_and_the_others_keep_their_margin(faulty_run: Path) -> None:
    summary = json.loads((faulty_run / "summary.json").read_text())["headroom"]
    assert summary["checked"] and summary["inlet_sensor"] == "Inlet Temp"
    assert summary["first_to_throttle"] == 1
    by_device = {d["device"]: d for d in summary["devices"]}
    assert by_device[1]["projected_limit"] == "SW thermal"
    assert all(by_device[i]["margins_c"]["sw_thermal"] > 5 for i in (0, 2, 3))
    report = (faulty_run / "report.html").read_text()
    assert "GPU 1 is held by its SW thermal slowdown already at this run&#39;s inlet" in report
    assert "the others keep ≥" in report and "of margin at 35 °C." in report
    assert "Inlet temperature (server, from the BMC): <b>supported</b>" in report
    checks = json.loads((faulty_run / "summary.json").read_text())["checks"]
    assert [(c["device"], c["status"]) for c in checks if c["check"] == "thermal_headroom"] == [
        (1, "warn")
    ]


@pytest.mark.slow  # rebuilds a report (about 7 s on 2 cores)
def test_without_an_inlet_nothing_is_checked_and_nothing_reads_as_zero(
    faulty_run: Path, tmp_path: Path
) -> None:
    run = copy_run(faulty_run, tmp_path / "run")
    with sqlite3.connect(run / STORE_NAME) as conn:
        conn.execute("DELETE FROM server_readings")
    probe = {"source": "no BMC", "capability": "not supported", "inlet_sensor": None}
    set_meta(run, "bmc", probe | {"sensors": [], "reason": NO_BMC})
    build_outputs(run)
    summary = json.loads((run / "summary.json").read_text())["headroom"]
    assert summary["checked"] is False and summary["devices"] == []
    assert summary["reason"] == f"inlet not available: {NO_BMC}"
    report = (run / "report.html").read_text()
    assert f"not checked: inlet not available: {NO_BMC}" in report
    assert "Inlet temperature (server, from the BMC): <b>not supported</b>" in report


def _rebuilt(run: Path, *options: str) -> tuple[dict, str]:
    assert main(["report", str(run), *options]) in (0, 1)
    return json.loads((run / "summary.json").read_text()), (run / "report.html").read_text()


@pytest.mark.slow  # a 20-minute simulated soak and three rebuilt reports (about 7 s)
def test_a_rebuilt_report_projects_to_the_design_inlet_it_is_given(tmp_path: Path) -> None:
    # Two simulated GPUs whose inlet the simulator's BMC reads (about 25 °C).
    result = run_soak(sim_config(tmp_path, sim_gpus=2, duration_s=1200.0, sim_sensors="ideal"))
    projected = {}
    for inlet in (30, 40):
        summary, report = _rebuilt(result.run_dir, "--design-inlet", str(inlet))
        headroom = summary["headroom"]
        assert headroom["checked"] and headroom["design_inlet_c"] == inlet
        projected[inlet] = {d["device"]: d["projected_temp_c"] for d in headroom["devices"]}
        assert f"a design inlet of {inlet} °C" in report and f"die at {inlet} °C" in report
        assert f'per device; design inlet {inlet} °C" src="data:image/svg' in report  # the plot
    assert set(projected[30]) == set(projected[40]) == {0, 1}
    # Ten degrees more air in: every die projected hotter, by about as much (θ·P, the power
    # held at its limit or grown by leakage).
    for device, cooler in projected[30].items():
        assert 9.0 < projected[40][device] - cooler < 15.0
    # Without the option, the profile the run was judged with: the built-in 35 °C.
    summary, _ = _rebuilt(result.run_dir)
    assert summary["headroom"]["design_inlet_c"] == 35.0
    assert all(
        projected[30][d["device"]] < d["projected_temp_c"] < projected[40][d["device"]]
        for d in summary["headroom"]["devices"]
    )
