"""The output disk: full or unwritable before the run is a clear error (exit 2) and creates
nothing; a disk that fills during the run stops it cleanly, with every earlier tick kept.

Full disks are real here: a small tmpfs where the tests run as root (CI containers often
do), and everywhere SQLite's ``PRAGMA max_page_count``, which makes the database file full:
SQLite then fails a write with SQLITE_FULL exactly as on a full disk.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from soak.cli import main
from soak.clock import WallClock
from soak.pipeline import build_outputs
from soak.runner import run
from soak.store import MIN_FREE_BYTES, RunStore
from tests.reliability.helpers import COLD_DONE_S, CPU_GEMM, Hook, integrity, run_config

ROOT = os.geteuid() == 0
SIM_RUN = ["run", "--backend", "sim", "--sim-gpus", "2", "--minutes", "5", "--seed", "1"]


@contextlib.contextmanager
def tmpfs(path: Path, size: str, *, read_only: bool = False) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted on ``path`` for the block; skips the test where this
    process may not mount one."""
    if not ROOT:
        pytest.skip("mounting a small tmpfs needs root")
    path.mkdir()
    options = f"size={size}" + (",ro" if read_only else "")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def _refused(out: Path, capsys) -> str:
    code = main([*SIM_RUN, "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and "--out" in err
    return err


def test_a_path_through_a_file_is_refused(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("keep me")
    assert "not a writable folder" in _refused(blocker / "reports", capsys)
    assert blocker.read_text() == "keep me"


def test_a_read_only_folder_is_refused_and_nothing_is_created(tmp_path, capsys):
    if ROOT:
        with tmpfs(tmp_path / "ro", "1m", read_only=True) as out:
            assert "not a writable folder" in _refused(out / "reports", capsys)
            assert list(out.iterdir()) == []
    else:
        out = tmp_path / "ro"
        out.mkdir(mode=0o555)
        assert "not a writable folder" in _refused(out / "reports", capsys)
        assert list(out.iterdir()) == []


def test_a_nearly_full_disk_is_refused_and_nothing_is_created(tmp_path, capsys):
    with tmpfs(tmp_path / "small", "2m") as out:
        err = _refused(out, capsys)
        assert "MiB free" in err and f"{MIN_FREE_BYTES // 2**20} MiB" in err
        assert list(out.iterdir()) == []


def _fill(folder: Path) -> Path:
    """Write zeros into ``folder`` until its file system is full."""
    filler = folder / "filler"
    block = b"\0" * (1 << 16)
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, block)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    finally:
        os.close(fd)
    return filler


def test_the_disk_filling_mid_run_stops_it_cleanly_keeping_every_tick(
    tmp_path, soak_run, profile, capsys
):
    with tmpfs(tmp_path / "disk", f"{MIN_FREE_BYTES // 2**20 + 8}m") as disk:
        run = soak_run(*CPU_GEMM, "--minutes", "30", "--profile", str(profile), out="disk")
        run.wait_for_load()
        store = run.store()
        assert store is not None
        filler = _fill(disk)
        code = run.wait(60)
        assert code == 3, run.stderr  # INCOMPLETE: the run could not complete
        assert "disk full" in run.stderr and "stopping the load" in run.stderr
        assert f"soak report {store.parent}" in run.stderr  # what to do once there is room
        assert not (store.parent / "summary.json").exists()

        filler.unlink()  # room again: the report is built from the store
        assert integrity(store) == "ok"
        capsys.readouterr()
        assert main(["report", str(store.parent)]) == 3
        summary = json.loads((store.parent / "summary.json").read_text())
        assert summary["verdict"] == "INCOMPLETE" and summary["run"]["stop_reason"] == "error"
        reader = RunStore.open(store.parent)
        t = reader.telemetry(0)["t_s"]
        work = reader.work(0)["gemm"]
        reader.close_read()
        assert t.size > 5 and work["t_end_s"].size >= 5
        assert np.diff(t).max() < 1.0  # no tick missing before the disk filled
        assert (work["t_start_s"][1:] - work["t_end_s"][:-1]).max() < 1.0


def test_a_store_that_fills_mid_run_stops_it_and_keeps_every_stored_tick(tmp_path, profile, capsys):
    """PRAGMA max_page_count on the writer's connection: SQLITE_FULL, as on a full disk."""

    def fill(runner, t_s):
        conn = runner.store._conn  # the writer's own connection: the limit is per connection
        (pages,) = conn.execute("PRAGMA page_count").fetchone()
        conn.execute(f"PRAGMA max_page_count = {pages}")

    hook = Hook(fill, after_s=COLD_DONE_S)  # the cold window is whole
    config = run_config(tmp_path, profile, backend="sim", duration_s=60.0, interval_s=0.05)
    result = run(config, clock=WallClock(), on_tick=hook)  # 8 simulated GPUs in real time
    assert result.stop_reason == "error"
    err = capsys.readouterr().err
    assert "disk full" in err and "stopping the load" in err

    store = RunStore.open(result.run_dir)
    rows = store._conn.execute("SELECT t_s, COUNT(*) FROM telemetry GROUP BY t_s").fetchall()
    stored = [t for t, _ in rows]
    assert {n for _, n in rows} == {8}  # every stored tick is whole
    assert stored == hook.ticks  # every tick shown as stored is there: none lost
    assert len(stored) > int(hook.acted_at / 0.05)  # and it ran on a while after filling
    stop = store.meta().stop  # written if a page had room left, else left out
    assert stop is None or (stop.reason == "error" and "disk full" in (stop.detail or ""))
    store.close_read()
    analysis, _ = build_outputs(result.run_dir)
    assert analysis.verdict == "INCOMPLETE" and analysis.stop_reason == "error", analysis.reasons
