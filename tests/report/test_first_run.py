"""What a new user's first report says: the device's kind, the load and its warm-up, the
stop, and no sentence with a hole in it (issue 19)."""

import json
import re
import sqlite3
import xml.etree.ElementTree as ET

from soak.model import DeviceInfo
from soak.pipeline import build_outputs
from soak.store import STORE_NAME, RunStore
from tests.report.conftest import copy_run, set_meta
from tests.report.test_html import _visible_text


def _as_cpu(run_dir):
    """The store's devices as the CPU backend records them."""
    conn = sqlite3.connect(run_dir / STORE_NAME)
    with conn:
        for idx, text in conn.execute("SELECT idx, info FROM devices").fetchall():
            info = json.loads(text) | {"backend": "cpu", "name": "Intel(R) Xeon(R) Processor"}
            conn.execute("UPDATE devices SET info=? WHERE idx=?", (json.dumps(info), idx))
    conn.close()


def test_a_cpu_is_headed_cpu_and_the_stop_reads_as_a_sentence(faulty_run, tmp_path):
    run_dir = copy_run(faulty_run, tmp_path / "run")
    _as_cpu(run_dir)
    set_meta(run_dir, "stop", {"reason": "interrupted", "detail": "SIGINT", "duration_s": 900.0})
    _, report = build_outputs(run_dir)
    text = _visible_text(report.read_text())
    assert "CPU 0: Intel(R) Xeon(R) Processor" in text
    assert "GPU 0" not in text and "GPU 1" not in text
    html = report.read_text()
    assert "<br>SM clock" not in html and "<td>SM clock</td>" not in html  # a CPU has no SM
    assert "HBM" not in text and "<td>memory temperature</td>" in html
    assert "<br>clock</th>" in html and "<td>clock</td>" in html
    assert "stop: interrupted" in text and "stopped by" not in text


def test_the_header_states_load_time_and_warm_up_apart(faulty_run):
    text = _visible_text((faulty_run / "report.html").read_text())
    summary = json.loads((faulty_run / "summary.json").read_text())
    device = summary["devices"][0]
    load_min = (device["load_end_s"] - device["load_start_s"]) / 60
    assert f"{load_min:.1f} min of load (worker" in text
    assert re.search(r"of load \(workers? ready after [\d–]+ s\)", text)
    assert device["warmup_s"] is not None and device["warmup_s"] > 0


def test_what_a_backend_cannot_read_is_said_once_and_drawn_nowhere(faulty_run, tmp_path):
    run_dir = copy_run(faulty_run, tmp_path / "run")
    conn = sqlite3.connect(run_dir / STORE_NAME)
    with conn:
        for metric in ("clock_reasons", "mem_temp_c", "pcie_replay", "power_w", "energy_j"):
            conn.execute("UPDATE capabilities SET status='not supported' WHERE metric=?", (metric,))
        conn.execute(
            "UPDATE telemetry SET mem_temp_c=NULL, clock_reasons=NULL, pcie_replay=NULL, "
            "power_w=NULL, energy_j=NULL"
        )
    conn.close()
    _, report = build_outputs(run_dir)
    html = report.read_text()
    text = _visible_text(html)
    line = "Not available on this backend, so not shown: HBM temperature, power, clock-event"
    assert text.count(line) == 4  # once per device
    assert "HBM temperature not available" not in text
    assert "SW power cap" not in text  # no table of reason shares that cannot be known
    assert "energy per FLOP" not in text and "Energy: not available" in text
    assert "each is charged the device's whole power" not in text  # no energy to charge
    assert "time constant τ" in text  # the temperature is read: its fit is shown
    assert "<td>PCIe replays</td>" not in html and "<td>retired pages</td>" not in html


def test_steady_and_final_failures_of_one_check_are_one_row(faulty_run):
    html = (faulty_run / "report.html").read_text()
    reasons = html[html.index('id="reasons"') : html.index("</section>")]
    rows = re.findall(r"<tr>.*?</tr>", reasons, flags=re.S)
    retention = [r for r in rows if "throughput_retention" in r and ">GPU 1<" in r]
    gemm = [r for r in retention if "steady gemm" in r or "final gemm" in r]
    assert len(gemm) == 1 and "steady gemm" in gemm[0] and "; final gemm" in gemm[0]
    assert gemm[0].count("floor 95 %") == 1  # what the final window shares is said once
    thermal = [r for r in rows if "sw_thermal" in r and ">GPU 1<" in r]
    assert len(thermal) == 1 and "steady window" in thermal[0] and "final window" in thermal[0]


def test_an_incomplete_run_with_no_work_is_not_called_healthy(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    store = RunStore.create(run_dir / STORE_NAME)
    store.set_meta(run={"backend": "cpu", "workload": "gemm", "host": "h"}, host={})
    store.set_meta(stop={"reason": "interrupted", "detail": "SIGINT", "duration_s": 20.0})
    store.add_devices([DeviceInfo(0, "cpu", "Intel(R) Xeon(R) Processor")])
    store.close()
    analysis, report = build_outputs(run_dir)
    assert analysis.verdict == "INCOMPLETE"
    assert [d.diagnosis for d in analysis.devices] == ["not measured"]
    text = _visible_text(report.read_text())
    assert "healthy" not in text and "Diagnosis: not measured" in text
    assert "Energy from the not available" not in text
    assert "Energy: not available" in text
    root = ET.parse(run_dir / "junit.xml").getroot()
    counted = re.search(r"All (\d+) checks? passed|in (\d+) checks?", text)
    made = int(counted.group(1) or counted.group(2))
    unchecked = re.search(r"(\d+) not checked", text)
    # junit carries every check made and, as skipped, every one that could not be made
    assert made + (int(unchecked.group(1)) if unchecked else 0) == int(root.get("tests"))
