"""soak compare: what changed between two runs of one server, and whether it is more than
noise."""

import json
import re
import shutil

import pytest

from soak.cli import main
from soak.report.compare import Change, compare_runs, table
from tests.report.conftest import HOSTILE_NAME
from tests.report.test_summary import FIXTURES


def _change(comparison, device, key):
    return next(c for c in comparison.changes if c.device == device and c.key == key)


def test_fixing_the_airflow_shows_as_better_beyond_the_noise(faulty_run, fixed_run):
    comparison = compare_runs(faulty_run, fixed_run)
    assert comparison.matched_by == "uuid"
    gpu1 = {c.key: c for c in comparison.changes if c.device == 1}
    assert gpu1["temp_c"].delta < -10 and gpu1["temp_c"].verdict == "better"
    assert gpu1["sm_clock_mhz"].verdict == "better"
    assert gpu1["throughput:gemm"].rel > 0.05 and gpu1["throughput:gemm"].verdict == "better"
    # a device with nothing done to it, in front of the airflow: within the noise
    assert _change(comparison, 0, "temp_c").verdict == "within noise"
    assert _change(comparison, 0, "throughput:gemm").verdict == "within noise"


def test_a_run_against_itself_changes_nothing(fixed_run):
    comparison = compare_runs(fixed_run, fixed_run / "summary.json")
    assert {c.verdict for c in comparison.changes} == {"within noise"}


def test_the_noise_is_estimated_from_inside_the_steady_window(fixed_run):
    summary = json.loads((fixed_run / "summary.json").read_text())
    noise = summary["devices"][0]["steady_noise"]
    assert noise["method"] == "batch means" and noise["blocks"] == 10
    assert (
        0
        < noise["se"]["throughput"]["gemm"]
        < 0.01 * summary["devices"][0]["steady"]["throughput"]["gemm"]
    )
    assert noise["step"]["temp_c"] == 1.0  # the simulated sensor reads whole degrees


def test_without_a_noise_estimate_a_change_is_not_called():
    c = Change(0, "temp_c", "temperature", "°C", 60.0, 70.0, None, 1.0, -1)
    assert c.significant is None and c.verdict == "not available"
    small = Change(0, "temp_c", "temperature", "°C", 60.0, 61.0, 0.01, 1.0, -1)
    assert small.threshold == 1.0 and small.verdict == "within noise"  # one sensor step
    large = Change(0, "temp_c", "temperature", "°C", 60.0, 63.0, 0.1, 1.0, -1)
    assert large.verdict == "worse"


def test_a_change_beyond_the_noise_but_under_the_practical_threshold_is_not_flagged():
    # -0.11 % of throughput, well beyond a tiny noise: measured, but nobody acts on it
    tiny = Change(0, "throughput:gemm", "gemm throughput", "FLOP/s", 1e12, 0.9989e12, 1e8, None, 1)
    assert tiny.significant and tiny.verdict == "under 1 %"
    assert Change(0, "throughput:gemm", "gemm", "FLOP/s", 1e12, 0.98e12, 1e8, None, 1).verdict == (
        "worse"
    )
    strict = Change(
        0, "throughput:gemm", "gemm", "FLOP/s", 1e12, 0.9989e12, 1e8, None, 1, min_change=0.001
    )
    assert strict.verdict == "worse"


def test_min_change_option_sets_the_practical_threshold(faulty_run, fixed_run, tmp_path, capsys):
    out = tmp_path / "cmp.html"
    args = ["compare", str(faulty_run), str(fixed_run), "--out", str(out)]
    assert main([*args, "--min-change", "50"]) == 0
    printed = capsys.readouterr().out
    assert "compare: no change beyond the noise and 50 % (" in printed
    assert "beyond the noise but under 50 %)" in printed
    assert "under 50 %" in out.read_text()
    assert main([*args, "--min-change", "x"]) == 2
    assert "--min-change: 'x' is not a number" in capsys.readouterr().err


def test_old_summaries_without_noise_compare_with_noise_not_available():
    old = FIXTURES / "v1-2026-11-30-sim-4gpu-faults.json"
    comparison = compare_runs(old, old)
    assert {c.verdict for c in comparison.changes} == {"not available"}
    assert "noise (3σ)" in table(comparison)


def test_the_command_prints_a_table_and_writes_a_self_contained_report(
    faulty_run, fixed_run, tmp_path, capsys
):
    out = tmp_path / "cmp.html"
    assert main(["compare", str(faulty_run), str(fixed_run), "--out", str(out)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1] == str(out)
    assert any(re.match(r"\s*1\s+temperature\s.*better$", line) for line in lines)
    html = out.read_text()
    assert "<script" not in html.lower() and 'src="data:image/svg+xml;base64,' in html
    assert HOSTILE_NAME not in html
    assert "batch means" in html


def test_the_comparison_lands_in_run_b_by_default(fixed_run, tmp_path, capsys):
    b = tmp_path / "b"
    shutil.copytree(fixed_run, b)
    assert main(["compare", str(fixed_run), str(b)]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == str(b / "compare.html")


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p / "missing", "no such run folder or summary file"),
        (lambda p: p, "no summary.json in this folder"),
        (lambda p: _write(p / "s.json", "{broken"), "not JSON"),
        (lambda p: _write(p / "s.json", '{"schema_version": 7}'), "schema_version 7 is not"),
        (lambda p: _write(p / "s.json", '{"schema_version": 1}'), "not a soak summary"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(fixed_run, tmp_path, capsys, make, message):
    bad = make(tmp_path)
    assert main(["compare", str(fixed_run), str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and err.startswith("soak: error: ")


def _write(path, text):
    path.write_text(text)
    return path


def _as_cpu(path, to, devices=None):
    """The summary at ``path`` as a run of the CPU backend would write it."""
    summary = json.loads(path.read_text())
    summary["run"]["backend"] = "cpu"
    summary["devices"] = summary["devices"][:devices]
    for d in summary["devices"]:
        d["name"], d["uuid"] = "Intel(R) Xeon(R) Platinum 8480+", None
    return _write(to, json.dumps(summary))


def test_runs_of_unlike_servers_are_refused_in_one_line_and_nothing_is_written(tmp_path, capsys):
    sim = FIXTURES / "v1-2026-11-30-sim-4gpu-faults.json"
    cpu = _as_cpu(sim, tmp_path / "cpu.json")
    out = tmp_path / "cmp.html"
    assert main(["compare", str(cpu), str(sim), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"soak: error: {cpu} and {sim} are runs of unlike servers (backend cpu in A, sim in B; "
        "devices Intel(R) Xeon(R) Platinum 8480+ in A, NVIDIA H100 80GB HBM3 (simulated) in B): "
        "their figures do not compare; --anyway compares them all the same\n"
    )
    assert not out.exists()


def test_unlike_servers_compared_anyway_say_so_in_the_headline(tmp_path, capsys):
    sim = FIXTURES / "v1-2026-11-30-sim-4gpu-faults.json"
    cpu = _as_cpu(sim, tmp_path / "cpu.json")
    out = tmp_path / "cmp.html"
    assert main(["compare", str(cpu), str(sim), "--out", str(out), "--anyway"]) == 0
    lines = capsys.readouterr().out.splitlines()
    headline = next(line for line in lines if line.startswith("compare: "))
    assert headline.startswith("compare: unlike servers compared all the same (backend cpu in A")
    assert "unlike servers compared all the same" in out.read_text()
    assert any(line.lstrip().startswith("device  figure") for line in lines)  # not "GPU"


def test_a_cpu_is_called_a_cpu_and_a_count_of_one_is_singular(tmp_path, capsys):
    sim = FIXTURES / "v1-2026-11-30-sim-4gpu-faults.json"
    one = _as_cpu(sim, tmp_path / "one.json", devices=1)
    two = _as_cpu(sim, tmp_path / "two.json", devices=2)
    assert main(["compare", str(one), str(two), "--out", str(tmp_path / "c.html")]) == 0
    out = capsys.readouterr().out
    assert "note: run A has 1 device, run B 2: compared the common indices" in out
    assert any(line.lstrip().startswith("CPU  figure") for line in out.splitlines())
    assert "GPU" not in out and "GPU 0" not in (tmp_path / "c.html").read_text()
