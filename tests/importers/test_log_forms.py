"""The defects issue 39 found on real nvidia-smi logs, each reproduced on the simulator's
runs written as those tools write them (``testkit.logs``): a node held by SW thermal
slowdown logged with one column per reason (they were dropped and seven GPUs passed), the
same node logged with no reasons (one GPU was told to RMA itself on "0.0 % thermal
slowdown" soak never read), a healthy day begun mid-training (its warm first minute was
called "cold"), a log with both power readings (the instantaneous one won unsaid), and a
short import whose windows overlap (it printed ratios)."""

from __future__ import annotations

import json

import pytest

from soak.analysis.analyze import Analysis
from soak.analysis.checks import Status
from soak.cli import main
from soak.importers.core import ImportOptions, ImportResult, write_run
from soak.importers.source import describe
from soak.pipeline import analyze
from soak.profile import Profile, load_profile
from soak.report.summary import build_summary
from soak.store import RunStore
from testkit.logs import CSV_MAPPING, FORMS_BY_NAME, LogForm, read_log, write_log
from testkit.sim import BASELINE_S, SimRun, simulate
from tests.importers.conftest import run_folders

pytestmark = pytest.mark.slow
LOAD_S = 1500.0  # 25 min: equilibrium, a steady window apart from the cold one


@pytest.fixture(scope="module")
def hot_node() -> SimRun:
    """Four H100s held by SW thermal slowdown as the driver does it: at their max operating
    temperature, every clock swinging between its floor and its maximum."""
    return simulate(seed=5, faults=("sw-thermal",), gpus=4, workload="gemm", duration_s=LOAD_S)


@pytest.fixture(scope="module")
def healthy_node() -> SimRun:
    return simulate(seed=6, gpus=4, workload="gemm", duration_s=LOAD_S)


def _analyse(
    run: SimRun,
    form: LogForm,
    tmp_path,
    start_s: float = 0.0,
    profile: Profile | None = None,
    **options,
) -> tuple[Analysis, ImportResult]:
    """The log written in ``form``, imported as ``soak import`` does and analysed."""
    path = write_log(run.data, form, tmp_path / f"log.{form.format}", start_s=start_s)
    trace = read_log(path, form)
    if profile is not None:
        options["profile"] = profile
    opts = ImportOptions(
        workload="imported",
        host="node",
        out=tmp_path / "reports",
        tags={},
        command="test",
        **options,
    )
    result = write_run(trace, describe(path, form.format), opts)
    store = RunStore.open(result.run_dir)
    try:
        return analyze(store, profile or load_profile(None)), result
    finally:
        store.close()


def _checks(analysis: Analysis, name: str) -> list:
    return [c for c in analysis.checks if c.check == name]


REASON_FORMS = [
    "nvidia-smi per-reason (old names)",
    "nvidia-smi per-reason",
    "nvidia-smi per-reason, no sw_power_cap",
    "nvidia-smi counters",
    "nvidia-smi bitmask",
    "nvidia-smi bitmask (old name)",
    "dcgmi dmon bitmask",
    "dcgmi dmon counters",
    "csv per-reason",
]


@pytest.mark.parametrize("name", REASON_FORMS)
def test_a_node_held_by_sw_thermal_slowdown_fails_thermal_in_every_form(name, hot_node, tmp_path):
    analysis, _ = _analyse(hot_node, FORMS_BY_NAME[name], tmp_path)
    assert analysis.verdict == "FAIL"
    for device in analysis.devices:
        assert device.verdict == "FAIL" and device.diagnosis == "thermal-limited"
        assert device.facts.steady.reason_share["sw_thermal"] == pytest.approx(1.0)
    assert all(c.status is Status.FAIL for c in _checks(analysis, "sw_thermal"))
    caps = analysis.capabilities[0]
    assert caps["clock_reasons"] == "supported"


def test_without_reasons_the_hot_node_is_thermal_by_its_temperature_never_rma(hot_node, tmp_path):
    analysis, result = _analyse(hot_node, FORMS_BY_NAME["nvidia-smi no reasons"], tmp_path)
    assert result.sku_lines() == [
        "SKU h100-sxm: guessed from the name column (NVIDIA H100 80GB HBM3)"
    ]
    for device in analysis.devices:
        assert device.diagnosis == "thermal-limited (inferred from temperature)"
        assert "hardware-fault" not in device.diagnosis
        evidence = " ".join(device.diagnosis_evidence)
        assert "clock-event reasons not read: inferred from the temperature" in evidence
        assert "below slowdown 89 °C" in evidence
    (retention, *_) = _checks(analysis, "clock_retention")
    assert "thermal slowdown not available (no thermal reason read)" in retention.message
    assert "% thermal slowdown" not in retention.message
    assert "95 % interval" in retention.message
    (sw_thermal, *_) = _checks(analysis, "sw_thermal")
    assert sw_thermal.status is Status.NOT_CHECKED


def test_an_equally_hot_node_warns_against_the_skus_slowdown_temperature(hot_node, tmp_path):
    # the hot-spot rule compares each GPU with the server's median: it cannot see a node
    # whose every GPU is equally hot; the absolute check against the SKU can
    form = FORMS_BY_NAME["dcgmi dmon bitmask"]  # no name column: the SKU from --profile
    analysis, result = _analyse(hot_node, form, tmp_path, profile=load_profile("h100-sxm"))
    assert result.sku_lines() == ["SKU h100-sxm: given with --profile"]
    assert all(c.status is Status.PASS for c in _checks(analysis, "hot_spot"))
    warned = [c for c in _checks(analysis, "slowdown_temp") if c.status is Status.WARN]
    assert {c.device for c in warned} == {0, 1, 2, 3}
    assert warned[0].message.startswith(
        "steady temperature 87 °C is at the SW thermal slowdown temperature 87 °C"
    )
    margins = _checks(analysis, "temp_margin")
    assert margins and all(c.status is Status.FAIL for c in margins)


def test_without_a_name_or_a_profile_the_sku_is_not_known_and_said_so(hot_node, tmp_path):
    analysis, result = _analyse(hot_node, FORMS_BY_NAME["dcgmi dmon bitmask"], tmp_path)
    assert result.sku_lines()[0].startswith("SKU: not known")
    (margin, *_) = _checks(analysis, "temp_margin")
    assert margin.status is Status.NOT_CHECKED


def test_a_log_begun_under_load_has_no_cold_window_and_no_ratio(healthy_node, tmp_path):
    # issue 39: a healthy day that begins mid-training, warm and flat from the first row,
    # had its first minute called "cold" and cold-vs-steady ratios printed
    form = FORMS_BY_NAME["nvidia-smi bitmask"]
    analysis, _ = _analyse(healthy_node, form, tmp_path, start_s=BASELINE_S + 900.0)
    summary = build_summary(analysis)
    for device, record in zip(analysis.devices, summary["devices"], strict=True):
        assert device.facts.cold is None
        assert record["cold"] is None and record["ratio"] is None
        (cold, *_) = [c for c in device.checks if c.check == "cold_window"]
        assert cold.status is Status.WARN
        assert cold.message.startswith("the trace begins under load: its first 30 s read")
        retention = [c for c in device.checks if c.check == "clock_retention"]
        assert retention and all(c.status is Status.NOT_CHECKED for c in retention)
        assert retention[0].message == "no cold-vs-steady ratio: the trace begins under load"


def test_a_log_from_cold_is_never_called_begun_under_load(healthy_node, tmp_path):
    form = FORMS_BY_NAME["nvidia-smi bitmask"]
    # from its first loaded row, with no idle head to show the cold start
    analysis, _ = _analyse(healthy_node, form, tmp_path, start_s=BASELINE_S + 1.0)
    for device in analysis.devices:
        assert device.facts.cold is not None and device.facts.warm_start is None
        (cold, *_) = [c for c in device.checks if c.check == "cold_window"]
        assert cold.status is Status.PASS


def test_a_log_without_reasons_or_power_limit_says_not_available_not_zero(healthy_node, tmp_path):
    # issue 39: "0.0 % power-capped drift, 0.0 % thermal slowdown, 1.8 % unexplained" for
    # a log that read neither, while summary.json held null for each share
    form = LogForm("csv without reasons or limit", "csv", "none")
    mapping = {k: v for k, v in CSV_MAPPING.items() if k in ("temp_c", "sm_clock_mhz")}
    path = write_log(healthy_node.data, form, tmp_path / "x.csv")
    out = tmp_path / "o"
    args = ["--time-col", "t", "--device-col", "gpu"]
    maps = [arg for k, v in mapping.items() for arg in ("--map", f"{k}={v}")]
    main(["import", "csv", str(path), *args, *maps, "--out", str(out)])
    (run_dir,) = run_folders(out)
    summary = json.loads((run_dir / "summary.json").read_text())
    device = summary["devices"][0]
    assert all(v is None for v in device["reason_share"].values())
    (retention, *_) = [
        c for c in summary["checks"] if c["check"] == "clock_retention" and c["device"] == 0
    ]
    assert (
        "power-capped drift not available (no power limit or power-cap reason read), "
        "thermal slowdown not available (no thermal reason read)"
    ) in retention["message"]
    assert "0.0 % power-capped drift" not in retention["message"]
    html = (run_dir / "report.html").read_text()
    assert "0.00 %" not in html.split('id="capabilities"')[0]


def test_with_both_power_readings_the_averaged_one_is_used_and_said_so(
    healthy_node, tmp_path, capsys
):
    path = write_log(healthy_node.data, FORMS_BY_NAME["nvidia-smi both powers"], tmp_path / "s")
    out = tmp_path / "o"
    main(["import", "nvidia-smi", str(path), "--out", str(out)])
    text = capsys.readouterr().out
    assert "column precedence: power_w from power.draw over power.draw.instant" in text
    assert "columns not used: power.draw.instant (power.draw preferred), pstate" in text
    (run_dir,) = run_folders(out)
    store = RunStore.open(run_dir)
    try:
        power = store.telemetry(0).power_w
    finally:
        store.close_read()
    expected = healthy_node.data.telemetry[0].power_w
    assert power[:50] == pytest.approx(expected[:50], abs=0.006)  # the averaged column
    html = (run_dir / "report.html").read_text()
    assert "column precedence: power_w from power.draw over power.draw.instant" in html


def test_a_short_import_whose_windows_overlap_prints_no_ratio(healthy_node, tmp_path):
    form = FORMS_BY_NAME["nvidia-smi bitmask"]
    analysis, _ = _analyse(healthy_node, form, tmp_path, load_end_s=BASELINE_S + 100.0)
    summary = build_summary(analysis)
    assert all(d["ratio"] is None for d in summary["devices"])
    retention = _checks(analysis, "clock_retention")
    assert retention and all(c.status is Status.NOT_CHECKED for c in retention)
    assert retention[0].message.startswith(
        "no cold-vs-steady ratio: the cold and steady windows overlap"
    )
