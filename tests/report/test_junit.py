"""junit.xml: one test case per device and check, as CI systems read it."""

import json
import re
import xml.etree.ElementTree as ET

import pytest

from soak.pipeline import build_outputs
from tests.report.conftest import copy_run, set_meta


def _suites(run_dir):
    root = ET.parse(run_dir / "junit.xml").getroot()
    assert root.tag == "testsuites"
    return root, root.findall("testsuite")


def test_one_case_per_device_and_check_and_the_counts_add_up(faulty_run):
    summary = json.loads((faulty_run / "summary.json").read_text())
    root, suites = _suites(faulty_run)
    assert len(suites) == len(summary["devices"]) + 1  # and the server
    for device, suite in zip(summary["devices"], suites, strict=False):
        mine = [c for c in summary["checks"] if c["device"] == device["index"]]
        cases = suite.findall("testcase")
        assert len(cases) == len(mine)
        names = [c.get("name") for c in cases]
        assert len(set(names)) == len(names)  # unique, so a CI's history follows each one
        fails = [c for c in cases if c.find("failure") is not None]
        warns = [c for c in cases if c.find("skipped") is not None]
        assert len(fails) == sum(c["status"] == "fail" for c in mine) == int(suite.get("failures"))
        assert len(warns) == sum(c["status"] == "warn" for c in mine) == int(suite.get("skipped"))
        for case, check in zip(cases, mine, strict=True):
            assert check["message"] in case.find("system-out").text
            assert case.get("classname").endswith(f"gpu{device['index']}")
        props = {p.get("name"): p.get("value") for p in suite.iter("property")}
        assert props["verdict"] == device["verdict"] and props["uuid"] == device["uuid"]
    total = sum(int(s.get("failures")) for s in suites)
    assert (
        int(root.get("failures")) == total == sum(r["status"] == "fail" for r in summary["reasons"])
    )


def test_a_failing_check_carries_its_numbers(faulty_run):
    _, suites = _suites(faulty_run)
    gpu1 = {c.get("name"): c for c in suites[1].findall("testcase")}
    failure = gpu1["throughput_retention (steady, gemm)"].find("failure")
    assert failure is not None and "% of cold" in failure.get("message")
    assert gpu1["sw_thermal (steady)"].find("failure") is not None
    assert gpu1["worker"].find("failure") is None


def test_the_server_suite_has_the_run_and_the_synchronous_loss(faulty_run):
    _, suites = _suites(faulty_run)
    server = {c.get("name"): c for c in suites[-1].findall("testcase")}
    assert server["run_complete"].find("error") is None
    props = {p.get("name"): p.get("value") for p in suites[-1].iter("property")}
    assert float(props["sync_loss"]) > 0  # a figure, not a test case
    assert "sync_loss" not in server


def test_junit_counts_the_checks_the_report_counts(faulty_run):
    root, _ = _suites(faulty_run)
    html = (faulty_run / "report.html").read_text()
    counted = re.search(r"in ([\d,]+) checks", html)
    assert counted is not None and int(counted.group(1).replace(",", "")) == int(root.get("tests"))


def test_the_reasons_line_counts_the_rows_it_lists(faulty_run):
    html = (faulty_run / "report.html").read_text()
    reasons = html[html.index('id="reasons"') : html.index("</section>")]
    line = re.search(
        r"<b>(\d+) failures?</b> and <b>(\d+) warnings?</b> in ([\d,]+) checks", reasons
    )
    assert line is not None
    rows = re.findall(r'<span class="badge (fail|warn)">', reasons)
    assert int(line.group(1)) == rows.count("fail") and int(line.group(2)) == rows.count("warn")


def test_an_interrupted_run_is_an_error_not_a_pass(faulty_run, tmp_path):
    run_dir = copy_run(faulty_run, tmp_path / "run")
    set_meta(run_dir, "stop", {"reason": "interrupted", "detail": "SIGTERM", "duration_s": 900.0})
    build_outputs(run_dir)
    root, suites = _suites(run_dir)
    error = next(c for c in suites[-1].findall("testcase") if c.get("name") == "run_complete")
    assert "interrupted" in error.find("error").get("message")
    assert int(root.get("errors")) == 1


def test_a_run_whose_duration_was_never_recorded_has_no_time_rather_than_zero(faulty_run, tmp_path):
    run_dir = copy_run(faulty_run, tmp_path / "run")
    set_meta(run_dir, "stop", {"reason": "error", "detail": "coordinator lost"})
    build_outputs(run_dir)
    root, suites = _suites(run_dir)
    assert root.get("time") is None
    assert all(s.get("time") is None for s in suites)
    assert float(_suites(faulty_run)[0].get("time")) > 0  # a recorded duration is kept


def test_case_names_come_from_each_results_window_and_part_not_its_message():
    """A CI follows a check by its case name: the window and part are the result's own
    fields, whatever words its message happens to hold."""
    from soak.analysis.checks import Finding, Status
    from soak.analysis.windows import WindowName
    from soak.report.junit import case_names

    said = "gemm: no cold throughput measured"  # names "cold", judged the steady window
    found = [
        Finding("throughput_retention", Status.FAIL, said, 0, WindowName.STEADY, "gemm"),
        Finding("throughput_retention", Status.FAIL, said, 0, WindowName.FINAL, "gemm"),
        Finding("xid", Status.PASS, "no XID events", 0),
    ]
    assert case_names(found) == [
        "throughput_retention (steady, gemm)",
        "throughput_retention (final, gemm)",
        "xid",
    ]
    with pytest.raises(ValueError):
        Finding("no_such_check", Status.PASS, "", 0)  # every result names a known check
