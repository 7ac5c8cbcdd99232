"""report.html: self-contained, complete, escaped, and rebuilt the same from the store."""

import html as htmllib
import json
import re
import shutil
from pathlib import Path

import pytest
from markupsafe import escape

from soak.pipeline import build_outputs
from soak.profile import load_profile
from soak.store import STORE_NAME
from soak.units import small_si
from tests.report.conftest import HOSTILE_NAME, HOSTILE_TAG, copy_run


def _visible_text(html: str) -> str:
    body = re.sub(r'src="data:[^"]*"', "", html.split("</head>")[1])
    return " ".join(htmllib.unescape(re.sub(r"<[^>]+>", " ", body)).split())


def test_the_report_needs_nothing_from_outside(faulty_run):
    html = (faulty_run / "report.html").read_text()
    assert "<script" not in html.lower()  # no script of ours, and none smuggled in
    assert "<link" not in html.lower() and "@import" not in html
    for attr in re.findall(r'(?:src|href)="([^"]*)"', html):
        assert attr.startswith(("data:image/svg+xml;base64,", "#")), attr[:60]
    assert "url(" not in html.split("</style>")[0].split("<style>")[1]


def test_banner_gives_every_failing_and_warning_reason_with_its_numbers(faulty_run):
    html = (faulty_run / "report.html").read_text()
    summary = json.loads((faulty_run / "summary.json").read_text())
    banner = html[html.index('<header class="banner') : html.index('<nav class="toc">')]
    assert summary["verdict"] == "FAIL" and summary["reasons"]
    for reason in summary["reasons"]:
        # a final window's reason joins its steady one's row with its first clause
        message = reason["message"]
        final = re.search(r"\bfinal\b", message)
        head = re.split(r": |; | \(", message)[0] if final else message
        assert str(escape(head)) in banner, message
    assert "GPU 1" in banner and "throughput_retention" in banner and "ecc_uncorrected" in banner
    assert re.search(r"\d+(\.\d+)? %", banner)  # numbers, not just names


def test_hostile_device_names_and_tags_are_text_never_markup(faulty_run):
    html = (faulty_run / "report.html").read_text()
    assert HOSTILE_NAME not in html and HOSTILE_TAG not in html
    assert str(escape(HOSTILE_NAME)) in html
    assert str(escape(HOSTILE_TAG)) in html
    assert "onerror=alert" not in html.replace(str(escape(HOSTILE_TAG)), "")
    junit = (faulty_run / "junit.xml").read_text()
    assert "<script>" not in junit and "&lt;script&gt;" in junit


def test_every_section_an_operator_needs_is_there(faulty_run):
    html = (faulty_run / "report.html").read_text()
    text = _visible_text(html)
    summary = json.loads((faulty_run / "summary.json").read_text())
    for heading in ("Server", "Server inventory", "Capabilities", "Events", "Reproduce"):
        assert f">{heading}<" in html
    assert "Acceptance profile: default" in text
    assert "min_throughput_retention" in text and "0.95" in text
    for d in summary["devices"]:
        assert f'id="gpu{d["index"]}"' in html
        for key in ("serial", "pci_bus_id"):
            assert d["inventory"][key] in text
        assert d["uuid"] in text
    # cold vs steady: energy per unit of work, ratios, equilibrium and τ, reason shares
    assert "energy per FLOP (gemm)" in text and "pJ/FLOP" in text
    assert "time constant τ" in text and "SW thermal slowdown" in text
    assert "Synchronous loss" in text and "set by GPU 1" in text
    # the reproduce section: command, seed, versions; the events with the injected faults
    assert "soak run --backend sim --minutes 40 --sim-gpus 4 --seed 3" in text
    assert "hw-slowdown:gpu=3:at=1500:for=2" in text
    assert "fault_injected" in text and "1 uncorrectable ECC error" in text
    assert "Python" in text and "numpy" in text


def test_what_cannot_be_read_is_not_available_never_zero_or_blank(faulty_run):
    text = _visible_text((faulty_run / "report.html").read_text())
    # the simulated SKU has no retired-page counter and no fan reading: said, not drawn
    assert "Not available on this backend, so not shown: retired pages." in text
    assert not re.search(r"retired pages\s+(\S+ \S+)\s+(\S+ \S+)\s+(\S+ \S+)", text)
    assert re.search(r"fan_pct(\s+not supported){4}", text)
    assert not re.search(r"\b(None|nan|NaN|inf)\b", text)


def test_rebuilding_from_the_store_alone_gives_the_same_outputs(faulty_run, tmp_path):
    # faulty_run's outputs were built once from the run's folder; a copy of its store
    # alone, built and then built again in place over its own outputs, gives the same
    def html(run_dir: Path) -> str:  # the report names its own folder, to rebuild it
        rebuild = r"soak report [^<\s]+</code>( \(from the folder the run was started in\))?"
        return re.sub(rebuild, "soak report X", (run_dir / "report.html").read_text())

    copy = copy_run(faulty_run, tmp_path / "copy")
    for _ in range(2):
        build_outputs(copy)
        for name in ("summary.json", "junit.xml"):
            assert (copy / name).read_bytes() == (faulty_run / name).read_bytes(), name
        assert html(copy) == html(faulty_run)


def test_a_sku_profile_shows_each_floor_with_its_workload_and_source(faulty_run, tmp_path):
    run_dir = copy_run(faulty_run, tmp_path / "run")
    h100 = load_profile("h100-sxm")
    _, report = build_outputs(run_dir, h100)
    text = _visible_text(report.read_text())
    assert "Acceptance profile: h100-sxm" in text
    for workload, parts in h100.floors.items():
        for part, floor in parts.items():
            source = " ".join(h100.floor_sources[workload][part].split())
            assert f"{workload}: {part} {floor:.4g} {source}" in text


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (2.03e-12, "2.03 pJ/FLOP"),
        (1.16e-9, "1.16 nJ/FLOP"),
        (0.047, "47.0 mJ/FLOP"),
        (None, "not available"),
        (float("nan"), "not available"),
    ],
)
def test_energy_per_unit_of_work_reads_with_a_prefix(value, text):
    assert small_si(value, "J/FLOP") == text


@pytest.mark.slow  # builds a whole report from a recorded run
def test_reproduce_table_says_which_dtype_and_size_each_device_ran(tmp_path):
    """From the workers' LOAD_START: a recorded H200 gemm run says dtype and side."""
    run_dir = tmp_path / "gemm"
    run_dir.mkdir()
    fixture = Path(__file__).parent.parent / "fixtures" / "gpu" / "h200-2026-11-30"
    shutil.copy(fixture / "gemm.sqlite", run_dir / STORE_NAME)
    _, report = build_outputs(run_dir)
    text = _visible_text(report.read_text())
    assert "workload set-up GPU 0: gemm running dtype=bf16, n=12288, held_b=" in text


def test_a_temperature_is_compared_by_its_difference_never_a_ratio(faulty_run):
    text = _visible_text((faulty_run / "report.html").read_text())
    rows = re.findall(r"(?:HBM )?temperature (\d+) °C (\d+) °C (\S+ \S+)", text)
    assert rows
    for cold, steady, change in rows:
        assert change == f"{int(steady) - int(cold):+d} °C", (cold, steady, change)


def test_every_profile_setting_has_a_meaning(faulty_run):
    """The profile table explains each setting with the meaning the setting declares."""
    import dataclasses

    from soak.profile import Checks, Windows, meaning

    text = _visible_text((faulty_run / "report.html").read_text())
    for cls in (Windows, Checks):
        missing = [
            f.name
            for f in dataclasses.fields(cls)
            if not meaning(f) or " ".join(meaning(f).split()) not in text
        ]
        assert missing == [], cls.__name__


def test_equilibrium_is_timed_from_load_start_as_the_tables_are(faulty_run):
    text = _visible_text((faulty_run / "report.html").read_text())
    checks = re.findall(r"thermal equilibrium (\S+ \S+) after load start", text)
    tables = re.findall(r"reached (\S+ min)", text)
    assert checks and sorted(checks) == sorted(tables)
    assert "thermal equilibrium at" not in text


@pytest.mark.parametrize(
    "command,rebuild",
    [
        (
            "soak run --backend cpu --minutes 3 --out /tmp/ux",
            "soak report /tmp/ux/h/20261202T050513Z",
        ),
        ("soak run --minutes 3", "soak report reports/h/20261202T050513Z"),
        ("soak run --out=runs/a --minutes 3", "soak report runs/a/h/20261202T050513Z"),
        ("soak import csv x.csv", "soak report /data/h/20261202T050513Z"),
    ],
)
def test_the_rebuild_command_runs_from_where_the_run_was_started(command, rebuild):
    from soak.report.html import rebuild_command

    assert rebuild_command(command, Path("/data/h/20261202T050513Z")) == (rebuild, True)
    assert rebuild_command(command, Path("/data/h/20261202T050513Z"), host="h") == (rebuild, True)


def test_a_moved_store_is_rebuilt_where_it_lies():
    # A store copied out of OUT/<host>/<stamp>/ (a fixture, a support ticket): its command
    # line's --out no longer leads to it.
    from soak.report.html import rebuild_command

    moved = Path("/tmp/h200r")
    command = "soak run --backend nvml --minutes 11 --out /tmp/lease/runs"
    assert rebuild_command(command, moved, host="vm") == ("soak report /tmp/h200r", False)


def test_a_real_run_without_a_seed_says_what_seeds_it():
    from soak.record import RunRecord
    from soak.report.html import _seed

    assert _seed(RunRecord(backend="cpu")).startswith("none given (")
    assert _seed(RunRecord(backend="nvml", seed=4)) == "4"
    assert _seed(RunRecord(backend="sim")) == "not available"


def test_the_load_length_is_one_figure_throughout(faulty_run):
    text = _visible_text((faulty_run / "report.html").read_text())
    header = re.search(r"([\d.]+ min) of load", text).group(1)
    reproduce = re.search(r"length asked / load run \S+ min / ([\d.]+ min)", text).group(1)
    assert header == reproduce


def test_a_final_window_joins_its_steady_row_with_its_own_figures_only():
    from soak.analysis.analyze import merge_windows
    from soak.analysis.checks import Finding, Status
    from soak.analysis.windows import WindowName

    steady = "steady temperature (p90) 87 °C is 2 °C below slowdown 89 °C; margin needed 5 °C"
    final = "final temperature (p90) 86 °C is 3 °C below slowdown 89 °C; margin needed 5 °C"
    found = [
        Finding("temp_margin", Status.FAIL, steady, 3, WindowName.STEADY),
        Finding("temp_margin", Status.FAIL, final, 3, WindowName.FINAL),
    ]
    (row,) = merge_windows(found)
    assert row.message == f"{steady}; final temperature (p90) 86 °C is 3 °C below slowdown 89 °C"
    assert row.window is WindowName.STEADY
    # the window is the result's own, never read from its message: none, no join
    assert (
        len(merge_windows([Finding("temp_margin", Status.FAIL, m, 3) for m in (steady, final)]))
        == 2
    )
    # the same words about both windows are one row, said once
    gone = [
        Finding(
            "throughput_retention", Status.FAIL, "gemm: no cold throughput measured", 0, w, "gemm"
        )
        for w in WindowName
        if w is not WindowName.COLD
    ]
    assert [r.message for r in merge_windows(gone)] == ["gemm: no cold throughput measured"]
