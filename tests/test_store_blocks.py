"""The columnar store (version 3): what is packed into blocks reads back exactly as the same
ticks stored as rows, a block write reads as the same ticks appended one by one, a reader
never sees rows twice or not at all while the writer packs, a killed writer loses at most
its last tick, and a damaged block is left out whole, counted out and said (issue 42)."""

from __future__ import annotations

import math
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from soak import blocks, store
from soak.dataset import WorkColumns
from soak.errors import StoreError
from soak.model import (
    TELEMETRY_FIELDS,
    DeviceInfo,
    Event,
    EventKind,
    ServerReading,
    SyncStep,
    Telemetry,
    WorkSample,
)
from soak.store import STORE_NAME, RunStore, StoreDamaged, salvage
from tests.factories import any_length

ROWS_ONLY = 10**9  # a block never fills: the version-2 layout of rows


def _ticks(n: int, seed: int = 3) -> list[tuple[list[Telemetry], list[WorkSample], list[SyncStep]]]:
    """Two devices' ticks with what a store must keep apart: values not read, readings that
    cannot be true, limits and counters that never move, a part that starts late, work not
    verified and failed verification, ddp steps without an all-reduce."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        t = 0.5 * i
        tele = [
            Telemetry(
                d,
                t,
                temp_c=None if i % 11 == 3 else float(np.round(60 + rng.normal(), 2)),
                power_w=float(rng.choice([300.25, 301.5, 1500.0 if d else 300.0])),
                power_limit_w=700.0,
                energy_j=1e6 + 300.0 * i,
                util_pct=float(rng.choice([100.0, 101.0])) if i > 40 else 100.0,
                clock_reasons=0x4 | (0x10000 if i % 7 == 0 else 0),
                ecc_uncorrected=0,
                ecc_corrected=i // 50,
            )
            for d in (0, 1)
        ]
        parts = ("membw", "gemm") if i >= 9 else ("membw",)
        work = [
            WorkSample(d, t - 0.5, t, p, 1e12 + i, "FLOP" if p == "gemm" else "B", verified)
            for d in (0, 1)
            for p in parts
            for verified in [None if i % 4 else bool(i % 8)]
        ]
        sync = [SyncStep(0, t - 0.5, t, 3, 0.4, 0.1, 0.5, None if i % 5 else 2**20, None)]
        out.append((tele, work, sync))
    return out


def _fill(path: Path, ticks, block_rows: int) -> RunStore:
    writer = RunStore.create(path, max_commit_delay_s=3600.0, block_rows=block_rows)
    writer.set_meta(run={"backend": "sim"})
    writer.add_devices([DeviceInfo(0, "sim", "A", power_limit_w=700.0), DeviceInfo(1, "sim", "B")])
    for tele, work, sync in ticks:
        writer.append(tele, work, sync_steps=sync)
    writer.close()
    return RunStore.open(path)


def _same(a: dict, b: dict, what: str) -> None:
    """The same columns, bit for bit (NaN too), each still (one value, read-only) in both or
    in neither."""
    assert list(a) == list(b), what
    for name in a:
        x, y = np.asarray(a[name]), np.asarray(b[name])
        assert x.shape == y.shape, (what, name)
        assert (x.view(np.int64) == y.view(np.int64)).all(), (what, name)
        assert (x.strides == (0,)) == (y.strides == (0,)), (what, name)
        assert x.flags.writeable == y.flags.writeable, (what, name)


def _same_store(a: RunStore, b: RunStore) -> None:
    for device in (0, 1):
        _same(a.telemetry(device), b.telemetry(device), f"telemetry {device}")
        _same(a.telemetry(device, True), b.telemetry(device, True), f"as read {device}")
        assert a.implausible(device) == b.implausible(device)
        work_a, work_b = a.work(device), b.work(device)
        assert list(work_a) == list(work_b)
        for part in work_a:
            _same(work_a[part], work_b[part], f"work {device} {part}")
        _same(a.sync_steps(device), b.sync_steps(device), f"sync {device}")
    assert list(a.units().items()) == list(b.units().items())
    assert (a.telemetry_rows(), a.last_t_s()) == (b.telemetry_rows(), b.last_t_s())


def _blocks(path: Path, table: str) -> list[tuple[int, int]]:
    with sqlite3.connect(path) as conn:
        return conn.execute(f"SELECT device, rows FROM {table}_blocks ORDER BY rowid").fetchall()


def test_ticks_packed_into_blocks_read_back_as_the_same_ticks_stored_as_rows(tmp_path):
    ticks = _ticks(123)
    rows = _fill(tmp_path / "rows.sqlite", ticks, ROWS_ONLY)
    packed = _fill(tmp_path / "blocks.sqlite", ticks, 10)
    assert _blocks(tmp_path / "rows.sqlite", "telemetry") == []
    assert _blocks(tmp_path / "blocks.sqlite", "telemetry") == [(0, 10), (1, 10)] * 12
    # an epoch each 10 ticks, every key's rows of it packed: gemm's first holds 1 row
    work = _blocks(tmp_path / "blocks.sqlite", "work")
    assert len(work) == 2 * 2 * 12 and max(n for _, n in work) == 10
    # the 12th epoch began 4 ticks before the end: its sync steps, packed last, not yet
    assert _blocks(tmp_path / "blocks.sqlite", "sync_steps") == [(0, 10)] * 11
    _same_store(rows, packed)
    tele = packed.telemetry(1)
    assert tele.t_s.size == 123 and math.isnan(tele.temp_c[3])  # not read
    assert (
        np.isnan(tele.power_w).sum()
        == (np.asarray(packed.telemetry(1, True).power_w) > 1400).sum()
        > 0
    )
    assert np.isnan(tele.util_pct).sum() == (tele.util_pct != 100.0).sum() > 0  # flagged: NaN
    assert tele.power_limit_w.strides == (0,) and not tele.power_limit_w.flags.writeable
    assert np.isnan(tele.fan_pct).all() and tele.fan_pct.strides == (0,)
    assert int(tele.clock_reasons[0]) == 0x10004  # an unknown bit kept, exactly
    assert list(packed.work(0)) == ["membw", "gemm"]
    assert list(packed.units().items()) == [("membw", "B"), ("gemm", "FLOP")]
    for reader in (rows, packed):
        reader.close_read()


def test_a_tick_packs_at_most_one_device_and_the_packed_rows_go_a_block_a_tick(tmp_path):
    """Eight devices fill their blocks at the same tick: one device is packed a tick, so
    that no tick holds eight packs; the rows packed are then deleted a block's worth of
    rowids a tick, so that the tail holds at most two blocks' rows per device."""
    path = tmp_path / STORE_NAME
    writer = RunStore.create(path, block_rows=16)
    counts, tails = [], []
    for i in range(80):
        writer.append([Telemetry(d, float(i), temp_c=30.0 + i) for d in range(8)])
        counts.append(len(_blocks(path, "telemetry")))
        with sqlite3.connect(path) as conn:
            found = conn.execute("SELECT COUNT(*) FROM telemetry GROUP BY device").fetchall()
        tails.append(max(n for (n,) in found))
    assert np.diff([0, *counts]).max() == 1
    # an epoch each 16 ticks from tick 15: the fifth began at the last tick
    assert counts[14] == 0 and counts[15] == 1 and counts[22] == 8 and counts[-1] == 4 * 8 + 1
    assert max(tails) <= 2 * 16 + 8
    found = _blocks(path, "telemetry")
    assert {n for _, n in found} == {16}
    assert [d for d, _ in found[:8]] == list(range(8))  # as they came
    reader = RunStore.open(path)
    np.testing.assert_array_equal(reader.telemetry(5).t_s, np.arange(80.0))
    assert reader.telemetry_rows() == 8 * 80
    reader.close_read()
    writer.close()


def test_one_append_of_many_rows_packs_every_full_block_it_brought(tmp_path):
    """An import appends a device's whole trace at once: it is packed in that call, in
    blocks of up to two blocks' rows, and its rows deleted."""
    writer = RunStore.create(tmp_path / STORE_NAME, block_rows=10)
    writer.append([Telemetry(0, float(i), temp_c=40.0 + i % 3) for i in range(95)])
    with sqlite3.connect(tmp_path / STORE_NAME) as conn:  # packed and gone in that call
        assert conn.execute("SELECT COUNT(*) FROM telemetry").fetchone() == (0,)
    writer.append([Telemetry(0, float(i), temp_c=40.0) for i in range(95, 99)])
    writer.close()
    assert _blocks(tmp_path / STORE_NAME, "telemetry") == [(0, 20)] * 4 + [(0, 15)]
    reader = RunStore.open(tmp_path)
    np.testing.assert_array_equal(reader.telemetry(0).t_s, np.arange(99.0))
    with sqlite3.connect(tmp_path / STORE_NAME) as conn:
        assert conn.execute("SELECT COUNT(*) FROM telemetry").fetchone() == (4,)
    reader.close_read()


def _columns(rows: list[Telemetry]) -> dict[str, np.ndarray]:
    return {
        name: np.array([np.nan if getattr(r, name) is None else getattr(r, name) for r in rows])
        for name in TELEMETRY_FIELDS[1:]
    }


def _work_columns(samples: list[WorkSample]) -> list[WorkColumns]:
    out = []
    for key in dict.fromkeys((w.device, w.part, w.unit) for w in samples):
        part = [w for w in samples if (w.device, w.part, w.unit) == key]
        verified = [np.nan if w.verified is None else float(w.verified) for w in part]
        out.append(
            WorkColumns(
                *key,
                t_start_s=np.array([w.t_start_s for w in part]),
                t_end_s=np.array([w.t_end_s for w in part]),
                work=np.array([w.work for w in part]),
                verified=np.array(verified),
            )
        )
    return out


def test_a_block_write_reads_back_as_the_same_ticks_appended_one_by_one(tmp_path):
    """Three ticks a call, as a simulator stepped in blocks writes them: the readings that
    cannot be true screened over the columns and flagged as the tick's screen flags them,
    the small blocks merged once a key's reach a block, events and server readings rows."""
    ticks = _ticks(100)
    rows = _fill(tmp_path / "rows.sqlite", ticks, ROWS_ONLY)
    writer = RunStore.create(tmp_path / "blocks.sqlite", max_commit_delay_s=3600.0, block_rows=20)
    writer.add_devices([DeviceInfo(0, "sim", "A", power_limit_w=700.0), DeviceInfo(1, "sim", "B")])
    for start in range(0, 100, 3):
        group = ticks[start : start + 3]
        tele = [row for tick in group for row in tick[0]]
        work = [sample for tick in group for sample in tick[1]]
        sync = [step for tick in group for step in tick[2]]
        writer.append_block(
            telemetry={d: _columns([r for r in tele if r.device == d]) for d in (0, 1)},
            work=_work_columns(work),
            events=[Event(0.5 * start, EventKind.WARNING, "note")],
            sync_steps={0: {name: _columns_of(sync, name) for name in store._SYNC_COLUMNS}},
            server_readings=[ServerReading(0.5 * start, "inlet_c", 24.0)],
        )
    writer.close()
    packed = RunStore.open(tmp_path / "blocks.sqlite")
    _same_store(rows, packed)
    assert len(packed.events()) == 34 and packed.server_readings()["inlet_c"]["t_s"].size == 34
    for device in (0, 1):  # 7 calls merged at 21 rows; the last 16 rows not yet
        sizes = [n for d, n in _blocks(tmp_path / "blocks.sqlite", "telemetry") if d == device]
        assert sizes == [21] * 4 + [3] * 5 + [1]
    for reader in (rows, packed):
        reader.close_read()


def _columns_of(steps: list[SyncStep], name: str) -> np.ndarray:
    return np.array([np.nan if getattr(s, name) is None else getattr(s, name) for s in steps])


def test_a_block_write_refuses_columns_it_cannot_store(tmp_path):
    writer = RunStore.create(tmp_path / STORE_NAME)
    t = np.arange(3.0)
    with pytest.raises(ValueError, match="not telemetry columns: temp"):
        writer.append_block(telemetry={0: {"t_s": t, "temp": t}})
    with pytest.raises(ValueError, match="without its time column t_s"):
        writer.append_block(telemetry={0: {"temp_c": t}})
    with pytest.raises(ValueError, match="shapes"):
        writer.append_block(telemetry={0: {"t_s": t, "temp_c": t[:2]}})
    with pytest.raises(ValueError, match="time that is not a number"):
        writer.append_block(telemetry={0: {"t_s": np.array([0.0, np.nan])}})
    writer.append_block(telemetry={0: {"t_s": np.empty(0)}})  # nothing: no block
    writer.close()
    assert _blocks(tmp_path / STORE_NAME, "telemetry") == []


def test_a_reader_sees_one_state_while_the_writer_packs_between_its_reads(tmp_path, monkeypatch):
    """The blocks listed, then the writer packs the tail those rows were in and commits,
    then the tail read: the reader still reads every row once."""
    writer = RunStore.create(tmp_path / STORE_NAME, block_rows=5)
    for i in range(12):
        writer.append([Telemetry(0, float(i), temp_c=30.0 + i)])
    reader = RunStore.open(tmp_path)
    listed = reader._block_list

    def listed_then_packed(series, key):
        found = listed(series, key)
        for i in range(12, 19):  # rows 10-14 packed, committed
            writer.append([Telemetry(0, float(i), temp_c=30.0 + i)])
        return found

    monkeypatch.setattr(reader, "_block_list", listed_then_packed)
    np.testing.assert_array_equal(reader.telemetry(0).t_s, np.arange(12.0))
    monkeypatch.undo()
    np.testing.assert_array_equal(reader.telemetry(0).temp_c, 30.0 + np.arange(19.0))
    assert len(_blocks(tmp_path / STORE_NAME, "telemetry")) == 3
    reader.close_read()
    writer.close()


WRITER = """
import sys
from soak.model import Telemetry, WorkSample
from soak.store import RunStore
store = RunStore.create(sys.argv[1], block_rows=5)  # commits every tick, as a real run
i = 0
while True:
    store.append([Telemetry(d, float(i), temp_c=40.0 + i % 9) for d in (0, 1)],
                 [WorkSample(0, i - 1.0, float(i), "gemm", 1e12, "FLOP")])
    if i == 100:
        print("ready", flush=True)
    i += 1
"""


def test_a_killed_writer_loses_at_most_its_last_tick_and_no_pack_half_done(tmp_path):
    """SIGKILL while ticks are appended and blocks packed every few ticks: every tick
    committed is read once, in order, whether it sits in a block or in the tail."""
    path = tmp_path / STORE_NAME
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(WRITER), str(path)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    time.sleep(0.3)
    child.send_signal(signal.SIGKILL)
    assert child.wait(10) == -signal.SIGKILL
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    reader = RunStore.open(path)
    t0, t1 = reader.telemetry(0).t_s, reader.telemetry(1).t_s
    n = t0.size
    assert n > 100 and len(_blocks(path, "telemetry")) >= 2 * 100 // 5 - 2
    np.testing.assert_array_equal(t0, np.arange(float(n)))
    np.testing.assert_array_equal(t1, t0)  # a tick lands whole: both devices or neither
    np.testing.assert_array_equal(reader.work(0)["gemm"]["t_end_s"], t0)
    assert reader.telemetry_rows() == 2 * n and reader.last_t_s() == n - 1
    reader.close_read()


def _damage_a_block(path: Path, device: int, which: int) -> int:
    """Flip one byte in the middle of a telemetry block's BLOB (a bit flipped on disk): the
    device's ``which``-th block in time; its rows."""
    table = "telemetry_blocks"
    with sqlite3.connect(path) as conn:
        rowid, rows, data = conn.execute(
            f"SELECT rowid, rows, data FROM {table} WHERE device=? ORDER BY first_s "
            "LIMIT 1 OFFSET ?",
            (device, which),
        ).fetchone()
        damaged = bytearray(data)
        damaged[len(damaged) // 2] ^= 0x10
        conn.execute(f"UPDATE {table} SET data=? WHERE rowid=?", (bytes(damaged), rowid))
    return rows


def test_a_damaged_block_is_refused_in_one_line_and_salvaged_whole_or_not_at_all(tmp_path):
    reader = _fill(tmp_path / STORE_NAME, _ticks(60), 10)
    reader.close_read()
    lost = _damage_a_block(tmp_path / STORE_NAME, 1, 1)  # t = 5.0 to 9.5
    reader = RunStore.open(tmp_path)
    np.testing.assert_array_equal(reader.telemetry(0).t_s, 0.5 * np.arange(60))
    with pytest.raises(StoreDamaged) as raised:
        reader.telemetry(1)
    message = str(raised.value)
    assert "\n" not in message and str(tmp_path / STORE_NAME) in message
    assert "checksum" in message
    reader.close_read()

    salvaged, found = salvage(tmp_path)
    assert found.samples == 2 * 60 - lost and found.last_t_s == 29.5
    assert found.incomplete_tables == ("telemetry_blocks",)
    t = salvaged.telemetry(1).t_s
    assert t.size == 60 - lost and 5.0 not in t and 4.5 in t and 10.0 in t
    assert salvaged.meta().salvage == found
    salvaged.close_read()


def test_a_block_reads_whole_or_is_refused():
    columns = {
        "t_s": np.arange(50.0),
        "still": np.full(50, 700.0),
        "unread": np.full(50, np.nan),
        "moves": np.round(np.linspace(40, 60, 50), 1),
        "noisy": np.random.default_rng(1).normal(size=50),
    }
    blob = blocks.encode(columns)
    block = blocks.decode(blob)
    assert block.rows == 50 and block.still == {"still", "unread"}
    for name, column in columns.items():
        np.testing.assert_array_equal(block.columns[name], column)
    assert len(blob) < 0.5 * 50 * 8 * len(columns)  # still columns take 8 bytes each
    for cut in (0, 7, 20, len(blob) - 1):
        with pytest.raises(blocks.BlockDamaged):
            blocks.decode(blob[:cut])
    for where in range(0, len(blob), 37):
        damaged = bytearray(blob)
        damaged[where] ^= 0x01
        with pytest.raises(blocks.BlockDamaged):
            blocks.decode(bytes(damaged))
    with pytest.raises(ValueError, match="unequal length"):
        blocks.encode({"a": np.arange(2.0), "b": np.arange(3.0)})


def test_a_version_2_store_reads_as_before(tmp_path):
    """The GPU fixtures were written by versions 1 and 2: rows only, read as they were."""
    fixtures = Path(__file__).parent / "fixtures" / "gpu"
    path = tmp_path / STORE_NAME  # a copy: a reader may leave -wal and -shm files beside it
    path.write_bytes(next(fixtures.glob("*/mix.sqlite")).read_bytes())
    reader = RunStore.open(path)
    assert reader.meta().store_version == 2
    tele = reader.telemetry(0)
    assert tele.t_s.size == reader.telemetry_rows() // len(reader.devices()) > 0
    assert np.all(np.diff(tele.t_s) > 0) and reader.units()
    reader.close_read()


def test_a_store_of_an_unknown_block_version_is_refused_in_one_line(tmp_path):
    reader = _fill(tmp_path / STORE_NAME, _ticks(30), 10)
    reader.close_read()
    with sqlite3.connect(tmp_path / STORE_NAME) as conn:
        conn.execute("UPDATE telemetry_blocks SET data=CAST('SOAKBLK9' AS BLOB)")
    reader = RunStore.open(tmp_path)
    with pytest.raises(StoreError, match=r"damaged run store \(not a column block"):
        reader.telemetry(0)
    reader.close_read()


def test_a_version_3_store_of_the_first_columnar_release_reads_back(tmp_path):
    """The block layout as first written (tests/fixtures/old-store/README.md): a later soak
    reads its blocks and tails as this one did, and judges it the same."""
    from soak.pipeline import analyze
    from soak.profile import load_profile

    fixture = Path(__file__).parent / "fixtures" / "old-store" / "v3-blocks" / STORE_NAME
    path = tmp_path / STORE_NAME
    path.write_bytes(fixture.read_bytes())
    assert len(_blocks(path, "telemetry")) == 4 and len(_blocks(path, "work")) == 12
    reader = RunStore.open(path)
    assert reader.meta().store_version == 3
    assert (reader.telemetry_rows(), reader.last_t_s()) == (374, 186.0)
    for device in (0, 1):
        tele = reader.telemetry(device)
        assert tele.t_s.size == 187 and np.all(np.diff(tele.t_s) > 0)
        assert tele.power_limit_w.strides == (0,)  # one value throughout, as the rows read
        assert {part: w["t_end_s"].size for part, w in reader.work(device).items()} == {
            "gemm": 181,
            "membw": 181,
            "train": 181,
        }
    assert reader.units() == {"gemm": "FLOP", "membw": "B", "train": "token"}
    analysis = analyze(reader, any_length(load_profile(None)))  # 3 min: read, not accepted
    assert [str(d.verdict) for d in analysis.devices] == ["PASS", "FAIL"]
    reader.close_read()


def test_a_group_of_ticks_rolled_back_never_has_rows_deleted_that_no_block_holds(tmp_path):
    """A commit that fails rolls back every tick of its group, the packs among them too: the
    writer's plan then names packs that are not there, and the rows it goes on to pack and
    delete are those the blocks say they hold, so every tick committed reads back."""
    writer = RunStore.create(tmp_path / STORE_NAME, max_commit_delay_s=3600.0, block_rows=10)
    for i in range(8):
        writer.append([Telemetry(d, float(i), temp_c=30.0) for d in (0, 1, 2)])
    writer.commit()
    for i in range(8, 12):  # an epoch from tick 9: a device packed a tick, all three by 11
        writer.append([Telemetry(d, float(i), temp_c=30.0) for d in (0, 1, 2)])
    assert len(_blocks(tmp_path / STORE_NAME, "telemetry")) == 0  # not committed
    writer._rollback()  # what a COMMIT that fails does: ticks 8 to 11 and their packs gone
    for i in range(12, 40):  # the plan would now delete the epoch's rows, ticks 0 to 9
        writer.append([Telemetry(d, float(i), temp_c=30.0 + i) for d in (0, 1, 2)])
    writer.close()
    reader = RunStore.open(tmp_path)
    kept = np.concatenate([np.arange(8.0), np.arange(12.0, 40.0)])
    for device in (0, 1, 2):
        np.testing.assert_array_equal(reader.telemetry(device).t_s, kept)
    assert len(_blocks(tmp_path / STORE_NAME, "telemetry")) >= 3 * 2
    reader.close_read()
