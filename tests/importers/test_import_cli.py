"""`soak import` end to end: a normal run folder and report, the source in the run record
and the report header, the last line the report path; every bad file is one line naming the
file and line, exit 2, and no run folder."""

import json
from pathlib import Path

import pytest

from soak.cli import main
from soak.store import RunStore
from tests.importers.conftest import run_folders

V100_ARGS = [
    "--time-col",
    "est_elapsed_s_from_gpu0",
    "--devices",
    "4",
    "--map",
    "temp_c=gpu{i}_temp_c",
    "--map",
    "throughput=gpu{i}_gflops",
    "--throughput-unit",
    "GFLOP/s",
    "--workload",
    "gemm",
]

GOOD_CSV = "t,gpu,temp,power\n0,0,30,100\n1,0,31,101\n"
BAD_FILES = {
    "empty": (b"", "x.csv:1: empty file"),
    "binary": (b"t,gpu,temp,power\n\x00\xff\x13\x07\n", "x.csv:2: binary data"),
    "truncated last line": (
        (GOOD_CSV + "2,0,3").encode(),
        "x.csv:4: truncated last line (3 of 4 fields)",
    ),
    "time backwards": (
        (GOOD_CSV + "0.5,0,31,101\n").encode(),
        "x.csv:4: time goes backwards for device 0",
    ),
    "duplicated device row": (
        (GOOD_CSV + "1,0,31,101\n").encode(),
        "x.csv:4: device 0 appears twice at the same time",
    ),
    "mixed units": (
        b"t,gpu,temp,power\n0,0,30,100 W\n1,0,31,101 mW\n",
        "x.csv:3: column 'power': mixed units ('mW' after 'W')",
    ),
    "not a number": (
        (GOOD_CSV + "2,0,hot,101\n").encode(),
        "x.csv:4: column 'temp': 'hot' is not a number",
    ),
    "header only": (b"t,gpu,temp,power\n", "x.csv: no samples"),
}
CSV_ARGS = ["--time-col", "t", "--device-col", "gpu", "--map", "temp_c=temp"]


@pytest.mark.parametrize("content,message", BAD_FILES.values(), ids=BAD_FILES.keys())
def test_bad_file_is_one_line_exit_2_and_no_run_folder(content, message, tmp_path, capsys):
    path = tmp_path / "x.csv"
    path.write_bytes(content)
    out = tmp_path / "reports"
    code = main(
        ["import", "csv", str(path), *CSV_ARGS, "--map", "power_w=power", "--out", str(out)]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and message in err and str(path) in err
    assert run_folders(out) == [] and not out.exists()


def test_unknown_map_column_names_the_file_and_header_line(tmp_path, capsys):
    path = tmp_path / "x.csv"
    path.write_text(GOOD_CSV)
    code = main(
        [
            "import",
            "csv",
            str(path),
            *CSV_ARGS,
            "--map",
            "power_w=watts",
            "--out",
            str(tmp_path / "o"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert f"{path}:1: --map power_w=watts: no column 'watts'" in err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "extra,needle",
    [
        (["--map", "voltage=power"], "--map voltage: not a soak field"),
        (["--map", "temp_c"], "is not FIELD=COLUMN"),
        (["--devices", "2"], "at most one of --device-col COL and --devices N"),
        (["--throughput-unit", "furlong/s", "--map", "throughput=power"], "--throughput-unit"),
        (["--profile", "nosuch"], "--profile nosuch: no such file or built-in profile"),
    ],
)
def test_bad_options_exit_2(extra, needle, tmp_path, capsys):
    path = tmp_path / "x.csv"
    path.write_text(GOOD_CSV)
    code = main(["import", "csv", str(path), *CSV_ARGS, *extra, "--out", str(tmp_path / "o")])
    assert code == 2 and needle in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_missing_file_exit_2(tmp_path, capsys):
    code = main(["import", "gpu-burn", str(tmp_path / "nope.txt"), "--out", str(tmp_path / "o")])
    assert code == 2 and "nope.txt: no such file" in capsys.readouterr().err


@pytest.mark.parametrize(
    "make,needle",
    [
        (lambda tmp: Path("/dev/null"), "/dev/null: not a regular file"),
        (lambda tmp: tmp, "a folder, not a file"),
        (lambda tmp: (tmp / "empty.csv").open("w").close() or tmp / "empty.csv", "empty file"),
    ],
    ids=["a device", "a folder", "an empty file"],
)
def test_what_is_not_a_trace_file_is_named_for_what_it_is(make, needle, tmp_path, capsys):
    path = make(tmp_path)
    code = main(["import", "nvidia-smi", str(path), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and needle in err and "no such file" not in err
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_v100_csv_imports_as_a_normal_run(fixture_path, tmp_path, capsys):
    out = tmp_path / "reports"
    path = fixture_path("v100-39-parsed-head.csv")
    code = main(["import", "csv", str(path), *V100_ARGS, "--host", "v100-39", "--out", str(out)])
    lines = capsys.readouterr().out.strip().splitlines()
    assert code == 3  # nine minutes of load and no equilibrium in them: could not be judged
    (run_dir,) = run_folders(out)
    assert lines[-1] == str(run_dir / "report.html")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["schema_version"] == 1 and len(summary["devices"]) == 4
    assert summary["run"]["backend"] == "import"
    assert "stop_decision" not in summary  # only with --stop steady
    assert summary["devices"][0]["throughput_units"] == {"gemm": "FLOP/s"}
    cold = summary["devices"][0]["cold"]["throughput"]["gemm"]
    assert 12.0e12 < cold < 13.2e12  # the trace's ~12.6 TFLOP/s in the first minute
    store = RunStore.open(run_dir)
    try:
        source = store.meta().run.source
        caps = store.capabilities()
    finally:
        store.close_read()
    assert source is not None and source["file"] == path.name and source["format"] == "csv"
    assert source["size_b"] == path.stat().st_size and len(source["sha256"]) == 64
    assert caps[0]["temp_c"] == "supported" and caps[0]["power_w"] == "not supported"
    html = (run_dir / "report.html").read_text()
    assert (
        f"imported from {path.name} (csv, {path.stat().st_size} B, sha256 {source['sha256']})"
        in html
    )
    # the same store reports again through the ordinary path
    assert main(["report", str(run_dir)]) == code


@pytest.mark.slow
def test_gpu_burn_report_says_how_time_was_rebuilt(fixture_path, tmp_path, capsys):
    out = tmp_path / "reports"
    code = main(
        ["import", "gpu-burn", str(fixture_path("v100-39-gpuburn-head.txt.gz")), "--out", str(out)]
    )
    assert code in (0, 1)
    (run_dir,) = run_folders(out)
    html = (run_dir / "report.html").read_text()
    assert "time: rebuilt from gpu-burn&#39;s counters" in html
    assert capsys.readouterr().out.strip().splitlines()[-1] == str(run_dir / "report.html")


@pytest.mark.slow
def test_cold_start_trace_finds_its_load_segment(fixture_path, tmp_path, capsys):
    out = tmp_path / "reports"
    path = fixture_path("h100-f4f827dd-from-idle-head.csv.gz")
    args = ["--time-col", "timestamp", "--time-unit", "iso", "--device-col", "gpu_index"]
    maps = ["--map", "temp_c=temperature_C", "--map", "util_pct=utilization_gpu_percent"]
    main(["import", "csv", str(path), *args, *maps, "--map", "power_w=power_W", "--out", str(out)])
    text = capsys.readouterr().out
    assert "load segment: 29.1 s to 129.9 s (utilisation)" in text
    (run_dir,) = run_folders(out)
    store = RunStore.open(run_dir)
    try:
        meta = store.meta()
        t = store.telemetry(0)["t_s"]
    finally:
        store.close_read()
    assert meta.load_start_s == pytest.approx(29.1, abs=0.1)
    assert t[0] == 0.0  # the idle head is kept as the baseline


def _nvidia_smi_log(path, seconds=120, idle_s=20):
    """nvidia-smi --query-gpu=timestamp,index,temperature.gpu,utilization.gpu,power.draw,
    fan.speed,clocks_throttle_reasons.active --format=csv -l 1, two GPUs."""
    lines = [
        "timestamp, index, temperature.gpu, utilization.gpu [%], power.draw [W], "
        "fan.speed [%], clocks_throttle_reasons.active"
    ]
    for s in range(seconds):
        busy = s >= idle_s
        for gpu in (0, 1):
            temp = 30 + (min(s - idle_s, 60) * 0.5 if busy else 0) + gpu
            reasons = "0x0000000000000004" if busy else "0x0000000000000001"
            lines.append(
                f"2024/03/11 14:{2 + s // 60:02d}:{s % 60:02d}.{100 + gpu:03d}, {gpu}, {temp:.0f}, "
                f"{100 if busy else 0} %, {650.5 if busy else 70.25} W, [N/A], {reasons}"
            )
    path.write_text("\n".join(lines) + "\n")


def _dcgmi_log(path, seconds=120, idle_s=20):
    lines = ["#Entity   TMPTR  POWER    GPUTL", "ID"]
    for s in range(seconds):
        busy = s >= idle_s
        for gpu in (0, 1):
            temp, power, util = (40, 650.1, 100) if busy else (30, 70.2, 0)
            lines.append(f"GPU {gpu}     {temp}     {power}  {util}")
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["nvidia-smi", "dcgmi-dmon"])
def test_tool_logs_import_with_their_load_segment(fmt, tmp_path, capsys):
    path = tmp_path / f"{fmt}.log"
    (_nvidia_smi_log if fmt == "nvidia-smi" else _dcgmi_log)(path)
    out = tmp_path / "reports"
    main(["import", fmt, str(path), "--host", "node7", "--out", str(out)])
    text = capsys.readouterr().out
    assert "load segment: 20.0 s to 119.0 s (utilisation)" in text
    (run_dir,) = run_folders(out)
    assert run_dir.parent.name == "node7"
    store = RunStore.open(run_dir)
    try:
        tele = store.telemetry(1)
        caps = store.capabilities()
        meta = store.meta()
    finally:
        store.close_read()
    assert meta.load_start_s == pytest.approx(20.0)
    stop = meta.stop
    assert stop is not None and stop.load_stop_s == pytest.approx(119.0, abs=0.01)
    assert caps[1]["fan_pct"] == "not supported"  # [N/A] throughout, or no such column
    assert tele["power_w"][-1] == pytest.approx(650.5 if fmt == "nvidia-smi" else 650.1)
    if fmt == "nvidia-smi":
        assert tele["clock_reasons"][0] == 1 and tele["clock_reasons"][-1] == 4
        assert meta.run.started_utc == "2024-03-11T14:02:20Z"


@pytest.mark.slow
def test_a_device_the_trace_holds_no_throughput_for_is_not_measured_never_a_fault(tmp_path, capsys):
    # Two GPUs, 20 minutes under load; the tool printed a rate for GPU 0 only (gpu-burn
    # prints a GPU's rate once its first batch is done, which can outlast a short step).
    rows = ["t,gpu,temp,util,power,gflops"]
    for t in range(0, 1200, 2):
        temp = 40 + 25 * (1 - 2.718 ** (-t / 120))
        power = 300 + (t * 7 % 11) * 0.5  # live readings move; a constant one reads as frozen
        rows.append(f"{t},0,{temp:.0f},99,{power:.1f},{19000 + (t % 7)}")
        rows.append(f"{t},1,{temp:.0f},99,{power:.1f},")
    path = tmp_path / "burn.csv"
    path.write_text("\n".join(rows) + "\n")
    args = ["--time-col", "t", "--device-col", "gpu", "--map", "temp_c=temp"]
    args += ["--map", "util_pct=util", "--map", "power_w=power", "--map", "throughput=gflops"]
    args += ["--throughput-unit", "GFLOP/s", "--workload", "gemm"]
    assert main(["import", "csv", str(path), *args, "--out", str(tmp_path / "out")]) in (0, 1)
    report = capsys.readouterr().out.strip().splitlines()[-1]
    summary = json.loads((tmp_path / report).parent.joinpath("summary.json").read_text())
    gpu1 = summary["devices"][1]
    assert gpu1["diagnosis"] != "hardware-fault" and gpu1["verdict"] != "FAIL"
    [absent] = [
        r
        for r in summary["not_checked"]
        if r["device"] == 1 and r["check"] == "throughput_retention"
    ]
    assert absent["message"] == (
        "throughput not measured: the imported trace holds no throughput for this device"
    )
    assert summary["devices"][0]["verdict"] == "PASS"


@pytest.mark.slow  # imports and reports 8 devices (about 4 s on 2 cores)
def test_an_imported_inlet_column_gives_the_headroom(tmp_path, capsys):
    fixture = Path(__file__).parents[1] / "fixtures" / "import" / "b200-0108-pl1000w.csv"
    args = ["--time-col", "elapsed_seconds", "--device-col", "gpu_id"]
    args += ["--map", "temp_c=gpu_temp_c", "--map", "power_w=gpu_power_w"]
    args += ["--map", "inlet_c=inlet_temp_c", "--out", str(tmp_path)]
    assert main(["import", "csv", str(fixture), *args]) == 3  # too short a load to judge
    (run,) = run_folders(tmp_path)
    store = RunStore.open(run)
    assert set(store.server_readings()["inlet_c"]["value"]) == {24.0}
    assert store.meta().bmc.source == "imported column 'inlet_temp_c'"
    store.close_read()
    headroom = json.loads((run / "summary.json").read_text())["headroom"]
    assert headroom["checked"] and len(headroom["devices"]) == 8
    assert {d["inlet_c"] for d in headroom["devices"]} == {24.0}
    report = (run / "report.html").read_text()
    assert "8 device(s) report no slowdown threshold: projected die" in report


@pytest.mark.slow
def test_stop_steady_replays_the_sequential_stop_and_keeps_where_it_fell(
    fixture_path, tmp_path, capsys
):
    # nine minutes of load: too short for a date, so no sequential stop falls in it
    out = tmp_path / "reports"
    path = fixture_path("v100-39-parsed-head.csv")
    args = ["import", "csv", str(path), *V100_ARGS, "--stop", "steady", "--out", str(out)]
    assert main(args) == 3  # nine minutes and no equilibrium: could not be judged
    printed = capsys.readouterr().out
    assert "sequential stop (replayed): no stop before the end of the load segment" in printed
    (run_dir,) = run_folders(out)
    decision = json.loads((run_dir / "summary.json").read_text())["stop_decision"]
    assert decision["replayed"] and not decision["decided"]
    store = RunStore.open(run_dir)
    try:
        events = [e.message for e in store.events()]
    finally:
        store.close_read()
    assert any(m.startswith("sequential stop (replayed)") for m in events)
