"""The headroom section of the report and summary.json, on the shared faulty run (GPU 1
starved of air) and on a copy of it whose BMC could not be read."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from soak.report import build_outputs
from soak.store import STORE_NAME
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
