"""The run store: what goes in comes out, unreadable values stay unreadable, a second
reader sees committed ticks while the writer is still open."""

import math
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from soak.errors import StoreError
from soak.model import Capability, DeviceInfo, Event, EventKind, Telemetry, WorkSample
from soak.store import STORE_NAME, RunStore


def _store(tmp_path):
    store = RunStore.create(tmp_path / STORE_NAME)
    store.add_devices([DeviceInfo(0, "sim", "GPU A", uuid="GPU-a", power_limit_w=700.0)])
    store.add_capabilities(
        {0: {"temp_c": Capability.SUPPORTED, "fan_pct": Capability.NOT_SUPPORTED}}
    )
    return store


def test_round_trip_keeps_none_as_nan_and_counters_exact(tmp_path):
    store = _store(tmp_path)
    store.set_meta(run={"backend": "sim"}, load_start_s=10.0)
    store.append(
        [
            Telemetry(0, 1.0, temp_c=40.0, clock_reasons=0x4 | 0x40 | 0x10000, ecc_uncorrected=0),
            Telemetry(0, 2.0, temp_c=None, ecc_uncorrected=3),
        ],
        [
            WorkSample(0, 1.0, 2.0, "gemm", 7e14, "FLOP", verified=True),
            WorkSample(0, 2.0, 3.0, "gemm", 6e14, "FLOP", verified=False, verify_error=0.5),
        ],
        [Event(1.5, EventKind.XID, "XID 79", 0, {"code": 79})],
    )
    reader = RunStore.open(tmp_path)
    tele = reader.telemetry(0)
    assert tele["temp_c"][0] == 40.0 and math.isnan(tele["temp_c"][1])
    assert int(tele["clock_reasons"][0]) == 0x10044  # unknown bit kept
    assert math.isnan(tele["fan_pct"][0])  # never read: NaN, not 0
    assert tele["ecc_uncorrected"].tolist() == [0.0, 3.0]
    work = reader.work(0)["gemm"]
    assert work["work"].tolist() == [7e14, 6e14]
    assert work["verified"].tolist() == [1.0, 0.0]
    assert reader.events()[0].details == {"code": 79}
    assert reader.events()[0].kind is EventKind.XID
    assert reader.meta().load_start_s == 10.0
    assert reader.devices()[0].uuid == "GPU-a"
    assert reader.capabilities() == {0: {"fan_pct": "not supported", "temp_c": "supported"}}
    assert reader.units() == {"gemm": "FLOP"}
    store.close()


def test_a_long_run_reads_back_whole_in_chunks_with_still_columns_held_once(tmp_path):
    """Rows past several read chunks come back in order and exact; a column that holds one
    value throughout is one read-only value (no memory per row), the others arrays of their
    own; each device's parts come in the order of their first work."""
    from soak.store import _CHUNK_ROWS

    n = 3 * _CHUNK_ROWS + 17
    store = RunStore.create(tmp_path / STORE_NAME, max_commit_delay_s=3600.0)
    for i in range(n):
        t = float(i)
        rows = [Telemetry(d, t, temp_c=40.0 + (i % 7) + d, power_limit_w=700.0) for d in (0, 1)]
        parts = ("train",) if i == 0 else ("gemm", "train")  # train's first work comes first
        work = [WorkSample(0, t, t + 1.0, p, 1e12 + i, "FLOP") for p in parts]
        store.append(rows, work)
    store.close()
    reader = RunStore.open(tmp_path)
    tele = reader.telemetry(1)
    np.testing.assert_array_equal(tele.t_s, np.arange(n, dtype=float))
    np.testing.assert_array_equal(tele.temp_c, 41.0 + np.arange(n) % 7)
    assert tele.temp_c.flags.writeable and tele.temp_c.flags.c_contiguous
    still = tele.power_limit_w
    assert not still.flags.writeable and still.strides == (0,) and still.shape == (n,)
    assert set(still.tolist()) == {700.0} and np.isnan(tele.fan_pct).all()
    work = reader.work(0)
    assert list(work) == ["train", "gemm"]
    np.testing.assert_array_equal(work["train"]["work"], 1e12 + np.arange(n))
    assert np.isnan(work["gemm"]["verify_error"]).all()
    # a writer still running adds rows between the count and the read: they are taken too;
    # rows counted that are gone by then (never, in an append-only store) leave no garbage
    select = "SELECT t_s, temp_c FROM telemetry WHERE device=1 ORDER BY t_s"
    for counted in (5, n + 1000):
        rows = reader._float_rows(select, (), 2, counted)
        np.testing.assert_array_equal(rows[:, 0], np.arange(n, dtype=float))
    reader.close_read()


def test_reader_sees_ticks_while_writer_is_open(tmp_path):
    store = _store(tmp_path)
    for i in range(5):
        store.append([Telemetry(0, float(i), temp_c=30.0 + i)])
    reader = RunStore.open(tmp_path / STORE_NAME)
    assert reader.telemetry_rows() == 5
    assert reader.last_t_s() == 4.0
    np.testing.assert_array_equal(reader.telemetry(0)["temp_c"], [30, 31, 32, 33, 34])


def test_create_refuses_to_overwrite(tmp_path):
    _store(tmp_path).close()
    with pytest.raises(StoreError, match="refusing to overwrite"):
        RunStore.create(tmp_path / STORE_NAME)


def test_open_rejects_a_folder_that_is_not_a_run(tmp_path):
    with pytest.raises(StoreError, match="not a soak run folder"):
        RunStore.open(tmp_path)
    (tmp_path / STORE_NAME).write_text("not sqlite at all " * 100)
    with pytest.raises(StoreError, match="not a soak run store"):
        RunStore.open(tmp_path)


def test_a_failed_tick_is_undone_alone_and_grouped_ticks_before_it_still_land(tmp_path):
    store = RunStore.create(tmp_path / STORE_NAME, max_commit_delay_s=3600.0)  # one group
    for i in range(3):
        store.append([Telemetry(0, float(i), temp_c=30.0)])
    bad = WorkSample(0, 3.0, 4.0, "gemm", 1.0, None)  # unit NOT NULL: the insert fails
    with pytest.raises(StoreError):
        store.append([Telemetry(0, 3.0, temp_c=31.0)], [bad])
    store.close()
    reader = RunStore.open(tmp_path)
    assert reader.telemetry(0)["t_s"].tolist() == [0.0, 1.0, 2.0]  # not tick 3's half
    assert reader.work(0) == {}


def test_ddp_steps_round_trip_and_a_version_1_store_reads_without_them(tmp_path):
    from soak.model import ServerStep, SyncStep

    store = RunStore.create(tmp_path / STORE_NAME)
    store.append(
        sync_steps=[SyncStep(1, 2.0, 3.0, 4, 0.9, 0.1, 1.0, None, None)],
        server_steps=[ServerStep(2.0, 3.0, 64, 1.0, 1, 2)],
    )
    store.close()
    read = RunStore.open(tmp_path)
    rows = read.sync_steps(1)
    assert rows["compute_s"].tolist() == [0.9] and math.isnan(rows["allreduce_s"][0])
    assert read.sync_steps(0)["compute_s"].size == 0
    assert read.server_steps()["straggler"].tolist() == [1.0]
    read.close_read()

    old = tmp_path / "old"
    old.mkdir()
    store = RunStore.create(old / STORE_NAME)
    store.close()
    with sqlite3.connect(old / STORE_NAME) as conn:  # as soak before version 2 wrote it
        conn.execute("UPDATE meta SET value='1' WHERE key='store_version'")
        conn.execute("DROP TABLE sync_steps")
        conn.execute("DROP TABLE server_steps")
    read = RunStore.open(old)
    assert read.server_steps()["samples"].size == 0 and read.sync_steps(0)["step_s"].size == 0
    read.close_read()


def test_server_readings_round_trip_and_an_older_store_reads_without_them(tmp_path):
    from soak.model import ServerReading

    store = RunStore.create(tmp_path / STORE_NAME)
    store.append(server_readings=[ServerReading(0.0, "inlet_c", 24.0)])
    store.append(
        server_readings=[ServerReading(10.0, "inlet_c", None), ServerReading(10.0, "x", 1.0)]
    )
    store.close()
    read = RunStore.open(tmp_path)
    series = read.server_readings()
    assert series["inlet_c"]["t_s"].tolist() == [0.0, 10.0]
    assert series["inlet_c"]["value"][0] == 24.0 and math.isnan(series["inlet_c"]["value"][1])
    read.close_read()
    old = RunStore.open(Path(__file__).parent / "fixtures" / "old-store" / "v1-sim")
    assert old.server_readings() == {}  # written before soak read a BMC: no readings, no error
    old.close_read()
