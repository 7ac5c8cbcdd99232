"""Bad input anywhere (flags, profile files, fault specs, a folder that is not a run, a
damaged store, a summary.json of an unknown schema): one line naming the bad part, exit 2,
and nothing created or overwritten."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from soak.cli import main
from soak.store import STORE_NAME

BAD_FLAGS = {
    "nan interval": (["--interval", "nan"], "--interval"),
    "infinite hours": (["--hours", "inf"], "--hours"),
    "negative heartbeat": (["--heartbeat-timeout", "-5"], "--heartbeat-timeout"),
    "negative seed": (["--seed", "-1"], "--seed"),
    "unknown flag": (["--hourz", "2"], "--hourz"),
    "option not a number": (["--option", "gemm_n=abc"], "gemm_n"),
    "unknown option": (["--option", "nosuch=1"], "nosuch"),
    "option out of range": (["--option", "step_s=0"], "step_s"),
    "tag without key": (["--tag", "=x"], "--tag"),
    "repeated device": (["--devices", "0,0"], "--devices"),
    "no gpus": (["--sim-gpus", "0"], "--sim-gpus"),
    "too many gpus": (["--sim-gpus", "65"], "--sim-gpus"),
    "fault at infinity": (["--sim-fault", "xid:gpu=1:code=79:at=inf"], "at="),
    "fault key twice": (["--sim-fault", "ecc:gpu=1:gpu=2:at=5"], "twice"),
    "fault without value": (["--sim-fault", "airflow:gpu"], "'gpu' is not key=value"),
    "newline in a fault": (["--sim-fault", "airflow:gpu=1\nfactor=2"], "--sim-fault"),
    "carriage return in a name": (["--workload", "gemm\r"], "--workload"),
    "heartbeat within a step": (["--backend", "cpu", "--heartbeat-timeout", "0.5"], "step_s"),
    "ranks without ddp": (["--backend", "cpu", "--ranks", "2"], "--ranks"),
    "zero ranks": (["--ranks", "0"], "--ranks"),
    "lock-step mix on the sim": (["--workload", "mix", "--option", "mix_sync=1"], "mix_sync"),
}


@pytest.mark.parametrize("argv,needle", BAD_FLAGS.values(), ids=BAD_FLAGS.keys())
def test_bad_flags(argv, needle, tmp_path, capsys):
    out = tmp_path / "reports"
    code = main(["run", "--backend", "sim", "--minutes", "1", "--out", str(out), *argv])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and needle in err
    assert not out.exists()


BAD_PROFILES = {
    "not toml": ("windows = [", "not valid TOML"),
    "negative window": ("[windows]\ncold_length_s = -1", "windows.cold_length_s"),
    "zero check interval": ("[windows]\neq_check_interval_s = 0", "eq_check_interval_s"),
    "zero tolerance": ("[windows]\neq_temp_tolerance_c = 0", "eq_temp_tolerance_c"),
    "text for a number": ('[checks]\nmax_jitter_cv = "high"', "checks.max_jitter_cv"),
    "unknown table": ("[wndows]\ncold_length_s = 1", "wndows"),
    "unknown key": ("[windows]\ncold_lenght_s = 1", "cold_lenght_s"),
    "not utf-8": (b"\xff\xfe[windows]", "not UTF-8"),
}


@pytest.mark.parametrize("content,needle", BAD_PROFILES.values(), ids=BAD_PROFILES.keys())
def test_bad_profile_files(content, needle, tmp_path, capsys):
    profile = tmp_path / "bad.toml"
    if isinstance(content, bytes):
        profile.write_bytes(content)
    else:
        profile.write_text(content)
    out = tmp_path / "reports"
    code = main(["run", "--backend", "sim", "--profile", str(profile), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and needle in err and "bad.toml" in err
    assert not out.exists()


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    """A small finished run: its folder holds a store, summary.json and report.html."""
    out = tmp_path_factory.mktemp("finished")
    argv = ["run", "--backend", "sim", "--workload", "gemm", "--sim-gpus", "2", "--seed", "4"]
    assert main([*argv, "--minutes", "12", "--out", str(out)]) in (0, 1)
    (summary,) = out.glob("*/*/summary.json")
    return summary.parent


def _outputs(folder: Path) -> dict[str, bytes]:
    """What a report writes (not the store, nor SQLite's -wal/-shm beside it)."""
    return {p.name: p.read_bytes() for p in folder.iterdir() if not p.name.startswith(STORE_NAME)}


def test_report_with_a_bad_profile_overwrites_nothing(finished_run, tmp_path, capsys):
    before = _outputs(finished_run)
    profile = tmp_path / "bad.toml"
    profile.write_text("[checks]\nmin_throughput_retention = -1")
    assert main(["report", str(finished_run), "--profile", str(profile)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "min_throughput_retention" in err
    assert _outputs(finished_run) == before


def _damaged(finished_run: Path, folder: Path, how: str) -> Path:
    folder.mkdir()
    data = (finished_run / STORE_NAME).read_bytes()
    if how == "truncated":
        data = data[: len(data) // 3]
    elif how == "bytes flipped":
        damaged = bytearray(data)
        for offset in range(4096, len(damaged), 997):  # every page past the header
            damaged[offset] ^= 0xFF
        data = bytes(damaged)
    elif how == "not sqlite":
        data = b"this is not a database " * 200
    (folder / STORE_NAME).write_bytes(data)
    for name in ("summary.json", "report.html"):
        shutil.copy(finished_run / name, folder / name)
    return folder


@pytest.mark.parametrize("how", ["truncated", "bytes flipped", "not sqlite"])
def test_report_on_a_damaged_store_is_one_line_and_overwrites_nothing(
    how, finished_run, tmp_path, capsys
):
    folder = _damaged(finished_run, tmp_path / "run", how)
    before = _outputs(folder)
    assert main(["report", str(folder)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and str(folder) in err
    assert _outputs(folder) == before


@pytest.mark.parametrize("what", ["empty folder", "a file", "no such path", "future store"])
def test_report_on_what_is_not_a_run_folder(what, finished_run, tmp_path, capsys):
    target = tmp_path / "target"
    if what == "empty folder":
        target.mkdir()
    elif what == "a file":
        target.write_text("hello")
    elif what == "future store":
        import sqlite3

        target.mkdir()
        shutil.copy(finished_run / STORE_NAME, target / STORE_NAME)
        with sqlite3.connect(target / STORE_NAME) as conn:
            conn.execute("UPDATE meta SET value='99' WHERE key='store_version'")
    assert main(["report", str(target)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "not a soak run" in err or "store version '99'" in err
    if target.is_dir():
        assert not (target / "summary.json").exists()


def test_compare_rejects_a_summary_of_an_unknown_schema(finished_run, tmp_path, capsys):
    future = tmp_path / "future"
    future.mkdir()
    summary = json.loads((finished_run / "summary.json").read_text())
    (future / "summary.json").write_text(json.dumps({**summary, "schema_version": 99}))
    assert main(["compare", str(finished_run), str(future / "summary.json")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "schema_version 99" in err
    assert list(future.iterdir()) == [future / "summary.json"]
