"""The run dataset (soak/dataset.py) and the pipeline that reads it (soak/pipeline.py): a
stored run is read one device at a time, nothing of a device is kept once the next is read,
and what the analysis finds is what it finds on the same run held in memory."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

import numpy as np
import pytest

from soak import pipeline
from soak.analysis.analyze import analyze_run
from soak.dataset import NOT_HELD, FreezeEvent, RunData, WorkColumns, WorkerEnd
from soak.model import DeviceInfo, Event, EventKind, StopReason
from soak.profile import Profile
from soak.record import RunRecord, StopRecord
from soak.report.summary import build_summary
from soak.store import STORE_NAME, RunStore
from soak.validity import Frozen

TICKS, DEVICES = 1500, 3
PARTS = (("gemm", "FLOP", 3.0e14), ("membw", "B", 2.0e12))


def _write(run_dir: Path) -> Path:
    """A small run: three devices warming to a plateau for 25 min, two parts of work each,
    written in blocks of 256 rows, the last ticks left in the tail as a live run leaves them."""
    run_dir.mkdir(parents=True)
    store = RunStore.create(run_dir / STORE_NAME, block_rows=256)
    store.set_meta(
        run=RunRecord(backend="sim", workload="mix", host="h", interval_s=1.0).to_json(),
        profile=Profile().as_dict(),
        load_start_s=10.0,
    )
    store.add_devices(
        DeviceInfo(i, "sim", "NVIDIA H100", power_limit_w=700.0) for i in range(DEVICES)
    )
    rng = np.random.default_rng(4)
    t = np.arange(TICKS, dtype=float)
    for at in range(0, TICKS, 300):
        cut = t[at : at + 300]
        telemetry, work = {}, []
        for i in range(DEVICES):
            temp = np.round(35 + (30 + 2 * i) * (1 - np.exp(-np.clip(cut - 10, 0, None) / 200)))
            clock = np.where(cut >= 10, 1980.0 - 15 * np.round(temp / 30), 345.0)
            telemetry[i] = {
                "t_s": cut,
                "temp_c": temp,
                "sm_clock_mhz": clock,
                "power_w": np.where(cut >= 10, 690 + rng.normal(0, 2, cut.size), 70.0),
                "power_limit_w": np.full(cut.size, 700.0),
                "clock_reasons": np.full(cut.size, 4.0),
            }
            done = cut[cut >= 11]
            for part, unit, rate in PARTS:
                work.append(WorkColumns(i, part, unit, done - 1, done, np.full(done.size, rate)))
        store.append_block(telemetry=telemetry, work=work)
    ends = [
        Event(float(TICKS), EventKind.WORKER_OUTCOME, "ok", i, {"outcome": "ok"})
        for i in range(DEVICES)
    ]
    store.append(events=ends)
    store.set_meta(stop=StopRecord(StopReason.DURATION, load_stop_s=float(TICKS)).to_json())
    store.close()
    return run_dir


@pytest.fixture
def stored(tmp_path: Path) -> Path:
    return _write(tmp_path / "run")


def test_a_stored_run_gives_each_device_as_the_store_reads_it_and_holds_none(stored: Path):
    store = RunStore.open(stored)
    try:
        data = RunData.open(store)
        assert [d.index for d in data.devices] == list(range(DEVICES))
        for series in map(data.device, range(DEVICES)):
            tele = store.telemetry(series.index)
            np.testing.assert_array_equal(series.telemetry.temp_c, tele.temp_c)
            np.testing.assert_array_equal(data.times(series.index), tele.t_s)
            assert list(series.work) == ["gemm", "membw"]
            assert series.work["membw"].unit == "B" and series.work["gemm"].size == TICKS - 11
            np.testing.assert_array_equal(series.work["gemm"]["t_end_s"], np.arange(11.0, TICKS))
        assert data.device(1) is not data.device(1)  # read again each time: nothing kept
        with pytest.raises(TypeError, match="one device at a time"):
            data.telemetry  # noqa: B018
        assert NOT_HELD.startswith("a stored run is read one device at a time")
        held = RunData.from_store(store)
        np.testing.assert_array_equal(held.telemetry[2].t_s, data.device(2).telemetry.t_s)
        assert held.is_held and not data.is_held
    finally:
        store.close_read()


def test_the_analysis_of_a_run_read_a_device_at_a_time_is_that_of_the_run_held(stored: Path):
    store = RunStore.open(stored)
    try:
        one_by_one = analyze_run(RunData.open(store), Profile())
        held = analyze_run(RunData.from_store(store), Profile())
    finally:
        store.close_read()
    assert build_summary(one_by_one) == build_summary(held)
    assert one_by_one.verdict == held.verdict and len(one_by_one.devices) == DEVICES


@pytest.mark.slow  # the whole pipeline / two simulated hours fed tick by tick
def test_the_pipeline_holds_one_devices_series_at_a_time(stored: Path, monkeypatch):
    """Every device's series read by the pipeline (the analysis's pass, the figures' pass)
    is gone, nothing of it kept, by the time the next is read: memory is one device's."""
    read = RunStore.device_series
    alive: list[weakref.ref] = []
    held_at_once = []

    def counted(self, info, units):
        gc.collect()
        held_at_once.append(sum(ref() is not None for ref in alive))
        series = read(self, info, units)
        alive.append(weakref.ref(series.telemetry.temp_c))
        alive.append(weakref.ref(series.work["gemm"].t_end_s))
        return series

    monkeypatch.setattr(RunStore, "device_series", counted)
    analysis, report = pipeline.build_outputs(stored)
    assert len(held_at_once) == 2 * DEVICES  # the analysis's pass, then the figures'
    assert held_at_once == [0] * len(held_at_once)
    assert report.exists() and len(analysis.devices) == DEVICES


def test_a_run_up_to_a_time_holds_its_records_up_to_it(stored: Path):
    store = RunStore.open(stored)
    try:
        data = RunData.from_store(store)
    finally:
        store.close_read()
    cut = data.up_to(600.0)
    assert cut.telemetry[0].t_s[-1] == 600.0 and cut.device(0).work["gemm"]["t_end_s"][-1] == 600.0
    assert cut.events == [] and data.telemetry[0].t_s[-1] == TICKS - 1


def test_the_events_the_analysis_judges_by_are_read_typed():
    frozen = Frozen(2, 100.0, 400.0, (("power_w", 301.5), ("temp_c", 61.0)))
    cut = Event(400.0, EventKind.TELEMETRY, "frozen", 2, frozen.as_dict() | {"judged": False})
    found = FreezeEvent.of(cut)
    assert found is not None and not found.judged and found.span(2) == frozen
    gap = Event(5.0, EventKind.TELEMETRY, "gap", 2, {"episode": "gap", "from_s": 1.0})
    assert FreezeEvent.of(gap) is None
    end = WorkerEnd.of(Event(9.0, EventKind.WORKER_OUTCOME, "x", 0, {"outcome": "ok", "phase": 3}))
    assert end == WorkerEnd("ok", "", None)  # a phase that is no name is unsaid
    assert WorkerEnd.of(gap) is None
