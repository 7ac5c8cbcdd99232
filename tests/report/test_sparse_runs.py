"""Runs that left little behind still get a complete, honest report."""

import xml.etree.ElementTree as ET

from soak.model import DeviceInfo
from soak.report import build_outputs
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
