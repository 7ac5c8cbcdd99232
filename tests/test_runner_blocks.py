"""The virtual clock's block-wise loop (``Runner.tick_block``, ``SimServer.step_block``)
stores what the tick by tick loop stores: every series, bit for bit, and every event, at the
same time and in the same order, faults and lost devices included."""

from __future__ import annotations

import numpy as np
import pytest

import soak.runner as runner_module
from soak.dataset import RunData
from soak.runner import run
from soak.store import RunStore


def _stored(config, monkeypatch, block_ticks: int) -> RunData:
    monkeypatch.setattr(runner_module, "BLOCK_TICKS", block_ticks)
    result = run(config)
    store = RunStore.open(result.run_dir)
    try:
        return RunData.from_store(store)
    finally:
        store.close_read()


def _blocks_written(monkeypatch) -> list[int]:
    """Counts the ticks of each block the runner steps."""
    sizes: list[int] = []
    original = runner_module.Runner.tick_block

    def counted(self, load, times):
        before = self.now_s()
        original(self, load, times)
        sizes.append(round((self.now_s() - before) / self.config.interval_s) + 1)

    monkeypatch.setattr(runner_module.Runner, "tick_block", counted)
    return sizes


@pytest.mark.parametrize(
    ("overrides"),
    [
        {"sim_gpus": 3, "duration_s": 1200.0},
        {
            "sim_gpus": 4,
            "duration_s": 1200.0,
            "sim_faults": (
                "xid:gpu=0:code=79:at=500",  # lost mid-run: its rows stop, its load ends
                "sdc:gpu=1:rate=0.05",  # result checks fail: events from the load
                "hw-slowdown:gpu=2:at=300:for=120",  # clock events, a fault's start and end
                "ecc:gpu=3:at=600",  # a counter that steps at an event
            ),
        },
        {"sim_gpus": 2, "duration_s": 900.0, "workload": "train", "interval_s": 2.0},
    ],
)
def test_a_block_wise_run_stores_what_a_tick_by_tick_run_stores(sim_config, monkeypatch, overrides):
    config = sim_config(**overrides)
    by_tick = _stored(config, monkeypatch, 1)
    sizes = _blocks_written(monkeypatch)
    by_block = _stored(config, monkeypatch, 300)
    assert max(sizes) == 300  # the run did go in blocks
    assert by_tick.meta.stop == by_block.meta.stop
    for info in by_tick.devices:
        a, b = by_tick.device(info.index), by_block.device(info.index)
        for name in a.telemetry:
            assert np.array_equal(a.telemetry[name], b.telemetry[name], equal_nan=True), name
        assert list(a.work) == list(b.work)
        for part in a.work:
            for column in a.work[part]:
                x, y = a.work[part][column], b.work[part][column]
                assert np.array_equal(x, y, equal_nan=True), (part, column)
    assert [(e.t_s, e.kind, e.message, e.device, e.details) for e in by_tick.events] == [
        (e.t_s, e.kind, e.message, e.device, e.details) for e in by_block.events
    ]
    assert by_tick.server_readings.keys() == by_block.server_readings.keys()
    for series, columns in by_tick.server_readings.items():
        for name, values in columns.items():
            assert np.array_equal(values, by_block.server_readings[series][name], equal_nan=True)


def test_a_telemetry_fault_is_read_tick_by_tick(sim_config, monkeypatch):
    """A fault that changes what the sensors read (here a frozen sensor) is not stepped in
    blocks: every tick is read alone, as before, and the freeze is failed as before."""
    sizes = _blocks_written(monkeypatch)
    config = sim_config(sim_gpus=2, duration_s=600.0, sim_faults=("frozen:gpu=1:at=120",))
    data = _stored(config, monkeypatch, 300)
    assert sizes and max(sizes) < 300  # only the ticks before the fault went in blocks
    assert any(e.kind == "telemetry" and e.device == 1 for e in data.events)
