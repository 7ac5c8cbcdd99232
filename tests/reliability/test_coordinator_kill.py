"""The coordinator killed with SIGKILL mid-run: the store is intact up to the last tick,
`soak report` builds an INCOMPLETE report from it, and the workers leave by themselves."""

from __future__ import annotations

import json
import signal
import time

import numpy as np

from soak.cli import main
from soak.store import RunStore
from tests.reliability.helpers import CPU_GEMM, alive, descendants, integrity, query, wait_until

INTERVAL_S = 0.25  # CPU_GEMM's tick


def test_sigkilled_coordinator_loses_at_most_the_last_tick_and_leaves_no_load(
    soak_run, profile, capsys, record_property
):
    run = soak_run(*CPU_GEMM, "--minutes", "30", "--profile", str(profile))
    run.wait_for_load()
    workers = descendants(run.pid)
    assert workers and all(alive(pid) for pid in workers)

    # Kill right after a tick has landed, the moment a reader can see it.
    store = run.store()
    assert store is not None
    ticks = run.count("SELECT COUNT(*) FROM telemetry")
    wait_until(lambda: run.count("SELECT COUNT(*) FROM telemetry") > ticks, 10, "a new tick")
    run.signal(signal.SIGKILL)
    killed = time.monotonic()
    assert run.wait(10) == -signal.SIGKILL

    # Every worker sees its coordinator go and exits on its own: no load left heating.
    wait_until(lambda: not any(alive(pid) for pid in workers), 5.0, "the orphaned workers")
    record_property("workers_gone_s", round(time.monotonic() - killed, 2))

    assert integrity(store) == "ok"
    reader = RunStore.open(store.parent)
    meta = reader.meta()
    assert meta.stop is None  # nobody recorded a stop: it was a crash
    t0 = meta.run.t0_monotonic_s
    assert t0 is not None  # a wall-clock run records its zero on CLOCK_MONOTONIC
    killed_at_s = killed - t0  # on the run's own clock
    t = reader.telemetry(0)["t_s"]
    work = reader.work(0)["gemm"]
    reader.close_read()

    # Ticks are committed one by one: every tick before the kill is there, bar at most the
    # one in flight. The runner ticks once per interval slot (it sleeps to the next slot's
    # start): in order, never two in one slot, however late a tick ran. A tick that ran past
    # its slot skips the slots it overran rather than catch up in a burst; how many it
    # skipped is the machine's load, recorded, not judged.
    slots = t // INTERVAL_S  # the runner's own rule for the next tick
    assert np.all(np.diff(slots) >= 1)
    record_property("slots_skipped", int(slots[-1] - slots[0] + 1 - t.size))
    lost_ticks = int((killed_at_s - t[-1]) // INTERVAL_S)  # due before the kill, not stored
    record_property("ticks_lost", lost_ticks)
    record_property("kill_after_last_tick_s", round(killed_at_s - float(t[-1]), 3))
    assert lost_ticks <= 1
    # The work series has no hole: each sample starts where the one before it ended
    # (plus a verification now and then), and the last ends near the last tick.
    gaps = work["t_start_s"][1:] - work["t_end_s"][:-1]
    assert gaps.max() < 1.0
    assert t[-1] - work["t_end_s"][-1] < 1.0

    capsys.readouterr()
    assert main(["report", str(store.parent)]) == 3
    summary = json.loads((store.parent / "summary.json").read_text())
    assert summary["verdict"] == "INCOMPLETE"
    assert summary["run"]["stop_reason"] == "error"  # no stop record: the coordinator died
    assert (store.parent / "report.html").is_file()
    assert query(store, "SELECT COUNT(*) FROM telemetry")[0][0] == t.size  # nothing lost since
