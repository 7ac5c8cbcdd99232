"""The command line: bad input is one line and exit 2 and creates nothing; the main job
prints the verdict and ends with the report's path."""

from pathlib import Path

import pytest

from soak.cli import main

BAD_RUNS = {
    "unknown backend": (["--backend", "tpu"], "--backend"),
    "unknown workload": (["--workload", "fft"], "--workload"),
    "unknown sku": (["--backend", "sim", "--sim-sku", "b300"], "--sim-sku"),
    "unknown fault kind": (["--backend", "sim", "--sim-fault", "meteor:gpu=1"], "meteor"),
    "fault parameter out of range": (
        ["--backend", "sim", "--sim-fault", "airflow:gpu=3:factor=-1"],
        "factor",
    ),
    "fault gpu out of range": (
        ["--backend", "sim", "--sim-gpus", "4", "--sim-fault", "ecc:gpu=7:at=1"],
        "gpu",
    ),
    "negative hours": (["--hours", "-1"], "--hours"),
    "hours and minutes": (["--hours", "1", "--minutes", "5"], "not allowed with"),
    "zero interval": (["--interval", "0"], "--interval"),
    "bad devices": (["--devices", "0,x"], "--devices"),
    "bad tag": (["--tag", "novalue"], "--tag"),
    "missing profile": (["--profile", "nope.toml"], "nope.toml"),
    "fault without sim": (["--backend", "cpu", "--sim-fault", "inlet:delta=3"], "--sim-fault"),
    "device not on server": (["--backend", "sim", "--devices", "9"], "--devices"),
    "a load that measures nothing": (
        ["--backend", "sim", "--minutes", "0.01"],
        "--minutes 0.01: 0.6 s of load measures nothing",
    ),
    "hours that measure nothing": (["--backend", "sim", "--hours", "0.001"], "at least 20 s"),
    "misspelt option": (["--minuets", "3"], "--minuets (did you mean --minutes?)"),
    "misspelt option with its value": (["--bakend=sim"], "(did you mean --backend?)"),
    "output on a filesystem without files": (
        ["--backend", "sim", "--out", "/proc/soak-forbidden"],
        "--out /proc/soak-forbidden: cannot create the folder: /proc is on a filesystem",
    ),
}


@pytest.mark.parametrize("argv,needle", BAD_RUNS.values(), ids=BAD_RUNS.keys())
def test_bad_input_is_one_line_exit_2_and_creates_nothing(argv, needle, tmp_path, capsys):
    out = tmp_path / "reports"
    code = main(
        ["run", "--out", str(out), "--minutes", "1", *argv]
        if "--hours" not in argv
        else ["run", "--out", str(out), *argv]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and needle in err
    assert not out.exists()


def test_unwritable_output_folder_is_refused(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    code = main(["run", "--backend", "sim", "--minutes", "1", "--out", str(blocker / "sub")])
    assert code == 2
    assert "--out" in capsys.readouterr().err


@pytest.mark.slow
def test_sim_run_prints_verdict_and_ends_with_report_path(tmp_path, capsys):
    code = main(
        [
            "run",
            "--backend",
            "sim",
            "--workload",
            "gemm",
            "--minutes",
            "20",
            "--seed",
            "2",
            "--sim-gpus",
            "4",
            "--out",
            str(tmp_path),
        ]
    )
    lines = capsys.readouterr().out.strip().splitlines()
    assert code in (0, 1)
    assert lines[-2].startswith("verdict: ")
    report = Path(lines[-1])
    assert report.name == "report.html" and report.is_file()
    assert (report.parent / "summary.json").is_file()


@pytest.mark.slow
def test_report_rebuilds_from_the_store_alone(tmp_path, capsys):
    main(
        [
            "run",
            "--backend",
            "sim",
            "--workload",
            "gemm",
            "--minutes",
            "15",
            "--seed",
            "2",
            "--sim-gpus",
            "2",
            "--out",
            str(tmp_path),
        ]
    )
    report = Path(capsys.readouterr().out.strip().splitlines()[-1])
    before = (report.parent / "summary.json").read_text()
    (report.parent / "summary.json").unlink()
    report.unlink()
    assert main(["report", str(report.parent)]) in (0, 1)
    assert (report.parent / "summary.json").read_text() == before
    assert report.is_file()


def test_report_on_a_folder_that_is_not_a_run(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert "not a soak run folder" in capsys.readouterr().err


def test_report_on_a_folder_of_runs_names_the_runs_in_it(tmp_path, capsys):
    host = tmp_path / "reports" / "vm"
    for stamp in ("20261201T100000Z", "20261203T100000Z", "20261202T100000Z"):
        (host / stamp).mkdir(parents=True)
        (host / stamp / "soak.sqlite").write_bytes(b"")
    for folder in (host, tmp_path / "reports"):
        assert main(["report", str(folder)]) == 2
        err = capsys.readouterr().err
        assert err == (
            f"soak: error: {folder}: a folder of 3 runs, not a run folder; report one of them: "
            f"{host / '20261201T100000Z'}, {host / '20261202T100000Z'}, "
            f"{host / '20261203T100000Z'}\n"
        )


def test_report_on_a_missing_path_names_that_path(tmp_path, capsys):
    missing = tmp_path / "nonexistent"
    assert main(["report", str(missing)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"soak: error: {missing}: not a soak run folder (no soak.sqlite)"


@pytest.mark.parametrize(
    ("inlet", "message"),
    [
        ("70", "--design-inlet: 70 °C is not an inlet from -10 to 60 °C"),
        ("nan", "--design-inlet: nan °C is not an inlet from -10 to 60 °C"),
        ("warm", "--design-inlet: 'warm' is not a temperature in °C"),
    ],
)
@pytest.mark.parametrize("command", ["report", "run"])
def test_a_bad_design_inlet_is_one_line_and_creates_nothing(
    tmp_path, capsys, command, inlet, message
):
    out = tmp_path / "r"
    where = [str(out)] if command == "report" else ["--backend", "sim", "--out", str(out)]
    assert main([command, *where, "--design-inlet", inlet]) == 2
    assert capsys.readouterr().err == f"soak: error: {message}\n"
    assert not out.exists()


def test_devices_lists_the_sim_with_capabilities(capsys):
    assert main(["devices", "--backend", "sim", "--sim-gpus", "2"]) == 0
    out = capsys.readouterr().out
    assert "2 device(s)" in out and "fan_pct" in out and "not supported" in out
    assert out.endswith(
        "inlet temperature (server, from the BMC): supported ('Inlet Temp' from simulated BMC)\n"
    )


def test_an_internal_error_is_exit_3_with_its_traceback_never_1(monkeypatch, capsys):
    """Exit 1 means FAIL (and make treats it as a verdict): a bug must not look like one."""
    import soak.cli
    import soak.cli.reports

    def broken(args, argv):
        raise RuntimeError("a bug")

    monkeypatch.setattr(soak.cli.reports, "devices_command", broken)
    assert soak.cli.main(["devices", "--backend", "sim"]) == 3
    err = capsys.readouterr().err
    assert "Traceback" in err and err.strip().splitlines()[-1] == (
        "soak: error: internal error: RuntimeError: a bug"
    )


def test_a_misspelt_option_of_a_nested_command_is_matched_against_that_command():
    from soak.cli import ConfigError, _parser

    with pytest.raises(ConfigError, match=r"--nodess \(did you mean --nodes\?\)"):
        _parser().parse_args(["fleet", "sbatch", "--nodess", "3"])


@pytest.mark.slow
def test_a_load_too_short_to_judge_runs_says_so_and_is_no_pass(tmp_path, capsys):
    code = main(
        [
            *("run", "--backend", "sim", "--sim-gpus", "1", "--minutes", "1"),
            *("--seed", "1", "--out", str(tmp_path)),
        ]
    )
    captured = capsys.readouterr()
    note = (
        "soak: note: 1 min of load is too short to confirm thermal equilibrium, which needs "
        "11 min at least (--minutes 11); with its 10-min steady window, --minutes 21 or more. "
        "Nothing is accepted on under 11 min (the profile's min_load_s): a try of the set-up, "
        "whose verdict is INCOMPLETE unless something fails"
    )
    assert captured.err.splitlines()[0] == note
    assert captured.err.count("soak: note:") == 1
    assert code == 3  # the exit code of an incomplete run, never 0
    assert captured.out.splitlines()[-2] == (
        "verdict: INCOMPLETE (1 device, stop: duration): could not be judged: 1.0 min of load "
        "and no thermal equilibrium in it; profile default asks for 11 min at least "
        "(min_load_s): soak 21 min or more for equilibrium and its 10-min steady window"
    )


def test_a_load_long_enough_for_equilibrium_gets_no_note():
    from soak.cli.run import length_note
    from soak.profile import Windows

    assert length_note(11 * 60, Windows()) is None
    assert "--minutes 11" in length_note(3 * 60, Windows())


@pytest.mark.slow
def test_an_import_format_is_added_by_one_entry_in_the_registry(monkeypatch, tmp_path, capsys):
    # A made-up format, "semicolons": one GPU's temperature and power, ';'-separated. Its
    # entry is all it takes: the parser offers it with its own option, the command reads it.
    import argparse

    from soak.cli.importing import FORMATS, ImportFormat
    from soak.importers import csv

    def arguments(p: argparse.ArgumentParser) -> None:
        p.add_argument("--scale", type=float, default=1.0, help="watts per unit (default 1)")

    def read(args: argparse.Namespace):
        text = args.file.read_text().replace(";", ",")
        rows = text.splitlines()
        lines = [rows[0]] + [
            f"{t},{temp},{float(power) * args.scale}"
            for t, temp, power in (r.split(",") for r in rows[1:])
        ]
        plain = tmp_path / "plain.csv"
        plain.write_text("\n".join(lines) + "\n")
        mapping = {"temp_c": "temp", "power_w": "power"}
        return csv.read(plain, csv.CsvOptions(time_col="t", time_unit="s", mapping=mapping))

    fake = ImportFormat("semicolon-separated t;temp;power", ("soak import semicolons x.txt",),
                        arguments, read)  # fmt: skip
    monkeypatch.setitem(FORMATS, "semicolons", fake)
    path = tmp_path / "node3.txt"
    rows = ["t;temp;power"] + [
        f"{t};{40 + 20 * (1 - 0.99**t):.1f};{1.5 + 0.01 * (t % 7):.2f}" for t in range(0, 900, 2)
    ]
    path.write_text("\n".join(rows) + "\n")
    code = main(["import", "semicolons", str(path), "--scale", "200", "--out", str(tmp_path)])
    assert code in (0, 1, 3)
    out = capsys.readouterr().out.strip().splitlines()
    run_dir = Path(out[-1]).parent
    from soak.store import RunStore

    store = RunStore.open(run_dir)
    try:
        power = store.telemetry(0)["power_w"]
        assert store.meta().run.source["format"] == "semicolons"
    finally:
        store.close_read()
    assert power.min() >= 300 and power.max() <= 312.5  # --scale 200 applied by its reader
