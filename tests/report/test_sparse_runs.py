"""Runs that left little behind still get a complete, honest report."""

import xml.etree.ElementTree as ET

import pytest

from soak.analysis.checks import Status
from soak.model import DeviceInfo
from soak.pipeline import build_outputs
from soak.runner import run
from soak.store import STORE_NAME, RunStore


def _store(tmp_path, devices):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    store = RunStore.create(run_dir / STORE_NAME)
    store.set_meta(run={"backend": "nvml", "workload": "gemm", "host": "h"}, host={})
    store.add_devices(devices)
    store.close()
    return run_dir


def test_a_coordinator_killed_before_the_first_tick(tmp_path):
    run_dir = _store(tmp_path, [DeviceInfo(0, "nvml", "GPU"), DeviceInfo(1, "nvml", "GPU")])
    analysis, report = build_outputs(run_dir)
    assert analysis.verdict in ("FAIL", "INCOMPLETE")
    html = report.read_text()
    assert "The run did not complete" in html and "stop: error" in html
    assert "temperature: not available" not in html  # drawn inside the figure, not as text
    assert html.count("not available") > 20
    root = ET.parse(run_dir / "junit.xml").getroot()
    assert int(root.get("errors")) == 1


def test_a_run_without_devices(tmp_path):
    run_dir = _store(tmp_path, [])
    analysis, report = build_outputs(run_dir)
    assert analysis.verdict in ("FAIL", "INCOMPLETE")
    assert report.is_file()
    cases = ET.parse(run_dir / "junit.xml").getroot().iter("testcase")
    assert "devices" in {c.get("name") for c in cases}


@pytest.mark.parametrize("stalled", [(0, 1, 2), (0, 1, 2, 3)])
def test_a_server_where_most_devices_did_no_work(sim_config, stalled):
    # Input starved outright: those devices' steady throughput is 0, and so is the server
    # median (and with every device starved, the mean); the report still comes, and no
    # device passes on a zero.
    faults = tuple(f"stall:gpu={g}:fraction=1" for g in stalled)
    config = sim_config(duration_s=600.0, sim_gpus=4, sim_faults=faults)
    analysis, report = build_outputs(run(config).run_dir)
    assert analysis.verdict == "FAIL" and report.is_file()
    assert [d.verdict == "FAIL" for d in analysis.devices] == [i in stalled for i in range(4)]
    outliers = [c for c in analysis.checks if c.check == "outlier"]
    assert len(outliers) == 4 and {c.status for c in outliers} == {Status.WARN}
