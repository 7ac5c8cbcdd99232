"""A damaged store still gives its report: cut short or with pages overwritten, what SQLite
can still read is reported, and the header says how much (issue 19)."""

import random
import shutil
import sqlite3

import pytest

from soak.cli import main
from soak.errors import StoreError
from soak.pipeline import build_outputs
from soak.store import STORE_NAME, salvage

CUTS = 12  # evenly spaced through the file: its metadata, telemetry, work and events pages


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    """15 minutes of 2 simulated GPUs, its store closed as a finished run leaves it."""

    from soak.runner import run
    from tests.factories import sim_config

    out = tmp_path_factory.mktemp("salvage")
    config = sim_config(out, duration_s=900.0, seed=5, sim_gpus=2)
    return run(config, block_ticks=1).run_dir  # a real run's layout: a tick at a time


def _copy(run_dir, to):
    to.mkdir()
    shutil.copy(run_dir / STORE_NAME, to / STORE_NAME)
    return to


def _report_or_one_line(run_dir, capsys):
    """`soak report` on a damaged store: a report that says so, or one line; never a
    traceback."""
    code = main(["report", str(run_dir)])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    if code == 2:
        assert len(err.strip().splitlines()) == 1 and "damaged run store" in err
        assert not (run_dir / "report.html").exists()
        return None
    assert code in (1, 3)  # never PASS on what is left of a damaged store
    html = (run_dir / "report.html").read_text()
    assert "store damaged: recovered" in html
    return html


@pytest.mark.slow
def test_a_store_cut_anywhere_gives_a_report_or_one_line(small_run, tmp_path, capsys):
    size = (small_run / STORE_NAME).stat().st_size
    reports = 0
    for i in range(1, CUTS + 1):
        run_dir = _copy(small_run, tmp_path / f"cut{i}")
        keep = size * i // (CUTS + 1)
        with open(run_dir / STORE_NAME, "r+b") as f:
            f.truncate(keep)
        reports += _report_or_one_line(run_dir, capsys) is not None
    assert reports >= CUTS // 2  # most cuts leave the run's metadata (at the file's start)


def test_the_last_8_kb_cut_off_keeps_almost_every_sample(small_run, tmp_path, capsys):
    run_dir = _copy(small_run, tmp_path / "run")
    path = run_dir / STORE_NAME
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size - 8192)
    html = _report_or_one_line(run_dir, capsys)
    assert html is not None
    analysis, _ = build_outputs(run_dir)
    assert analysis.verdict in ("INCOMPLETE", "FAIL")
    found = analysis.meta.salvage
    assert found.samples > 0.5 * 2 * 900 and found.last_t_s > 0
    assert f"recovered {found.samples:,} samples up to t = " in html


@pytest.mark.slow
def test_overwritten_pages_give_a_report_or_one_line(small_run, tmp_path, capsys):
    size = (small_run / STORE_NAME).stat().st_size
    pages = size // 4096
    rng = random.Random(19)
    for i in range(8):
        run_dir = _copy(small_run, tmp_path / f"pages{i}")
        with open(run_dir / STORE_NAME, "r+b") as f:
            for page in rng.sample(range(1, pages), 3):
                f.seek(page * 4096)
                f.write(rng.randbytes(4096))
        _report_or_one_line(run_dir, capsys)


@pytest.fixture(scope="module")
def blocks_run(tmp_path_factory):
    """The same 15 minutes stored as version 3 stores a week: its rows packed into column
    blocks (of 64 rows here, so that a short run holds many)."""
    from soak import store
    from soak.runner import run
    from tests.factories import sim_config

    out = tmp_path_factory.mktemp("salvage-blocks")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(store, "BLOCK_ROWS", 64)
        # tick by tick, packed as a real run's ticks are
        return run(sim_config(out, duration_s=900.0, seed=5, sim_gpus=2), block_ticks=1).run_dir


def _samples(run_dir):
    """The telemetry samples a store holds, and how many of them are in blocks."""
    with sqlite3.connect(run_dir / STORE_NAME) as conn:
        (rows,) = conn.execute("SELECT COUNT(*) FROM telemetry").fetchone()
        (packed,) = conn.execute("SELECT SUM(rows) FROM telemetry_blocks").fetchone()
    return rows + packed, packed


@pytest.mark.slow
def test_a_store_in_blocks_cut_anywhere_is_salvaged_with_true_counts_or_refused(
    blocks_run, tmp_path
):
    """Cut anywhere, a store of blocks is salvaged, each block whole or left out, and the
    samples it says it recovered are the samples it reads; or it is refused in one line."""
    total, packed = _samples(blocks_run)
    assert packed > 0.8 * total
    size = (blocks_run / STORE_NAME).stat().st_size
    salvaged = 0
    for i in range(1, CUTS + 1):
        run_dir = _copy(blocks_run, tmp_path / f"cut{i}")
        with open(run_dir / STORE_NAME, "r+b") as f:
            f.truncate(size * i // (CUTS + 1))
        try:
            store, found = salvage(run_dir)
        except StoreError as exc:
            assert "\n" not in str(exc) and "damaged run store" in str(exc)
            continue
        salvaged += 1
        read = sum(store.telemetry(device).t_s.size for device in (0, 1))
        store.close_read()
        assert found.samples == read <= total
    # the first 23 pages are the tables' roots: a cut in them leaves SQLite nothing to read
    assert salvaged >= CUTS // 2


@pytest.mark.slow
def test_a_flipped_byte_in_a_block_is_said_and_the_block_left_out(blocks_run, tmp_path, capsys):
    """A bit flipped on disk inside a block: the block fails its checksum, is left out
    whole, and the report says how much was recovered; never a reading made up."""
    run_dir = _copy(blocks_run, tmp_path / "flipped")
    total, _ = _samples(run_dir)
    with sqlite3.connect(run_dir / STORE_NAME) as conn:
        rowid, rows, data = conn.execute(
            "SELECT rowid, rows, data FROM telemetry_blocks WHERE device=1 ORDER BY first_s "
            "LIMIT 1 OFFSET 3"
        ).fetchone()
        flipped = bytearray(data)
        flipped[len(flipped) // 2] ^= 0x04
        conn.execute("UPDATE telemetry_blocks SET data=? WHERE rowid=?", (bytes(flipped), rowid))
    html = _report_or_one_line(run_dir, capsys)
    assert html is not None
    assert f"recovered {total - rows:,} samples up to t = " in html
    assert "telemetry_blocks" in html  # the table not read whole is named
