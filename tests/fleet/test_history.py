"""The per-GPU history: three acceptances of one device with an injected 4 % drift, two
fleet reports writing one history at once, schema versions."""

from __future__ import annotations

import json
import multiprocessing
import sqlite3
from pathlib import Path

import pytest

from soak.cli import main
from soak.fleet import history
from testkit.fleet import write_fleet

DAYS = ("2026-12-01T08:00:00Z", "2026-12-15T08:00:00Z", "2027-01-05T08:00:00Z")


def _drift(folder: Path, host: str, index: int, factor: float) -> None:
    """Scale one device's steady throughput in every run of ``host`` under ``folder``."""
    for path in folder.glob(f"{host}/*/summary.json"):
        data = json.loads(path.read_text())
        rates = data["devices"][index]["steady"]["throughput"]
        for part in rates:
            rates[part] *= factor
        path.write_text(json.dumps(data))


def test_a_device_across_three_runs_with_a_4_percent_drift_is_flagged(tmp_path, capsys):
    db = tmp_path / "history.sqlite"
    for n, (day, factor) in enumerate(zip(DAYS, (1.0, 0.99, 0.96), strict=True)):
        out = tmp_path / f"acceptance{n}"
        write_fleet(out, 4, started_utc=day)  # same seed: the same devices each time
        _drift(out, "gpu002", 6, factor)
        assert main(["fleet", "report", str(out), "--history", str(db)]) == 0
    capsys.readouterr()
    rc = main(["fleet", "history", "GPU-synth-0002-06", "--history", str(db)])
    lines = capsys.readouterr().out.splitlines()
    assert rc == 1
    assert lines[0].startswith("device GPU-synth-0002-06: uuid GPU-synth-0002-06, serial SYN000206")
    assert lines[0].endswith("3 runs")
    rows = lines[2:5]
    assert [r.split()[0] for r in rows] == list(DAYS)
    assert "(-1.0 %)" in rows[1] and "(-4.0 %)" in rows[2]
    drift = [line for line in lines if line.startswith("DRIFT")]
    assert len(drift) == 1
    assert drift[0].startswith(f"DRIFT  {DAYS[2]}: steady gemm ")
    assert "is 4.0 % below the first acceptance's" in drift[0]
    assert drift[0].endswith(f"({DAYS[0]}); limit 3 %")
    assert lines[-1] == str(db)
    # by serial too; its neighbour did not drift
    assert main(["fleet", "history", "SYN000206", "--history", str(db)]) == 1
    assert main(["fleet", "history", "GPU-synth-0002-05", "--history", str(db)]) == 0
    assert "no drift against the first acceptance" in capsys.readouterr().out


def test_reporting_the_same_folder_twice_records_each_run_once(tmp_path, capsys):
    write_fleet(tmp_path / "f", 3)
    db = tmp_path / "h.sqlite"
    assert (
        history.record_runs(
            db, [(p, json.loads(p.read_text())) for p in (tmp_path / "f").glob("*/*/summary.json")]
        )
        == 3
    )
    main(["fleet", "report", str(tmp_path / "f"), "--history", str(db)])
    assert "history: 0 new runs recorded" in capsys.readouterr().out
    assert len(history.device_runs(db, "GPU-synth-0001-00")) == 1


def _report(args: tuple[str, str]) -> int:
    return main(["fleet", "report", args[0], "--history", args[1]])


@pytest.mark.slow  # starts two processes
def test_two_fleet_reports_at_once_do_not_corrupt_the_history(tmp_path):
    db = tmp_path / "h.sqlite"
    folders = []
    for n in range(2):
        folder = tmp_path / f"f{n}"
        write_fleet(folder, 24, seed=n, started_utc=DAYS[n])
        folders.append((str(folder), str(db)))
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        assert pool.map(_report, folders) == [0, 0]
    with sqlite3.connect(db) as con:
        assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert con.execute("SELECT COUNT(*) FROM runs").fetchone() == (48,)
        assert con.execute("SELECT COUNT(*) FROM devices").fetchone() == (48 * 8,)
        assert con.execute("PRAGMA user_version").fetchone() == (history.SCHEMA_VERSION,)
    assert len(history.device_runs(db, "GPU-synth-0003-01")) == 2


def test_a_history_from_a_newer_soak_is_refused(tmp_path, capsys):
    db = tmp_path / "h.sqlite"
    with sqlite3.connect(db) as con:
        con.execute(f"PRAGMA user_version = {history.SCHEMA_VERSION + 1}")
    assert main(["fleet", "history", "X", "--history", str(db)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"soak: error: --history {db}: schema version {history.SCHEMA_VERSION + 1} "
        f"is newer than this soak's {history.SCHEMA_VERSION}"
    )


def test_unknown_device_and_missing_file_are_one_line(tmp_path, capsys):
    assert main(["fleet", "history", "X", "--history", str(tmp_path / "no.sqlite")]) == 2
    assert not (tmp_path / "no.sqlite").exists()
    write_fleet(tmp_path / "f", 1)
    main(["fleet", "report", str(tmp_path / "f"), "--history", str(tmp_path / "h.sqlite")])
    capsys.readouterr()
    assert main(["fleet", "history", "GPU-nope", "--history", str(tmp_path / "h.sqlite")]) == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith(f"no device with that serial or UUID in {tmp_path / 'h.sqlite'}")
    )


def test_migrations_take_an_empty_file_to_the_current_version(tmp_path):
    db = history.connect(tmp_path / "h.sqlite")
    try:
        assert db.execute("PRAGMA user_version").fetchone() == (len(history.MIGRATIONS),)
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert tables == {"runs", "devices", "work"}
    finally:
        db.close()


def test_a_history_in_a_missing_folder_is_refused_before_the_report(tmp_path, capsys):
    write_fleet(tmp_path / "f", 2)
    db = tmp_path / "nowhere" / "h.sqlite"
    assert main(["fleet", "report", str(tmp_path / "f"), "--history", str(db)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"soak: error: --history {db}: no folder {db.parent}"
    )
    assert not (tmp_path / "f" / "fleet.html").exists()


def test_a_file_that_is_not_a_history_is_refused(tmp_path, capsys):
    db = tmp_path / "h.sqlite"
    db.write_text("not a database, just text that is long enough to have a header" * 10)
    assert main(["fleet", "history", "X", "--history", str(db)]) == 2
    assert capsys.readouterr().err.startswith(f"soak: error: --history {db}: not a soak history")
