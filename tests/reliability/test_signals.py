"""SIGINT and SIGTERM to a running `soak run`: a clean stop with an INCOMPLETE report within
10 seconds; a second SIGINT stops at once and still leaves an intact store."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from soak.cli import main
from soak.model import Event, EventKind, Telemetry
from soak.runner import Stopper
from soak.store import STORE_NAME, RunStore
from tests.reliability.helpers import (
    CPU_GEMM,
    REPO,
    alive,
    descendants,
    integrity,
    wait_until,
    workers,
)

REPORT_WITHIN_S = 10.0


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_stops_cleanly_with_an_incomplete_report_within_10_s(
    signum, soak_run, profile, record_property
):
    run = soak_run(*CPU_GEMM, "--minutes", "30", "--profile", str(profile))
    run.wait_for_load()
    load, others = workers(run.pid), descendants(run.pid)
    assert load

    sent = run.signal(signum)
    code = run.wait(60)
    took = time.monotonic() - sent
    record_property("signal_to_report_s", round(took, 2))

    assert code == 3, run.stderr  # INCOMPLETE
    assert took < REPORT_WITHIN_S
    assert f"{signum.name}: stopping cleanly" in run.stderr
    report = run.report()
    assert report.name == "report.html" and report.is_file()
    summary = json.loads((report.parent / "summary.json").read_text())
    assert summary["verdict"] == "INCOMPLETE"
    assert summary["run"]["stop_reason"] == "interrupted"
    assert summary["devices"][0]["outcome"] == "ok"  # asked to stop, and it did
    store = report.parent / STORE_NAME
    assert not (report.parent / f"{STORE_NAME}-wal").exists()  # closed and checkpointed
    assert integrity(store) == "ok"
    assert not any(alive(pid) for pid in load)  # stopped before the report was written
    wait_until(lambda: not any(alive(pid) for pid in others), 5.0, "soak's helper processes")


def test_second_sigint_stops_at_once_and_the_store_stays_whole(soak_run, profile, capsys):
    run = soak_run(*CPU_GEMM, "--minutes", "30", "--profile", str(profile))
    run.wait_for_load()
    everything = descendants(run.pid)

    run.signal(signal.SIGINT)
    time.sleep(0.2)  # the clean stop has begun: the loop ends, the workers are told
    second = run.signal(signal.SIGINT)
    code = run.wait(30)
    took = time.monotonic() - second

    assert code == 3, run.stderr
    assert took < 2.0  # measured: about 0.1 s
    assert "stopping at once" in run.stderr
    wait_until(lambda: not any(alive(pid) for pid in everything), 5.0, "the workers to go")
    store = run.store()
    assert store is not None and integrity(store) == "ok"

    capsys.readouterr()
    assert main(["report", str(store.parent)]) == 3  # rebuilt from the store alone
    summary = json.loads((store.parent / "summary.json").read_text())
    assert summary["verdict"] == "INCOMPLETE"
    assert summary["run"]["stop_reason"] == "interrupted"
    assert summary["devices"][0]["load_end_s"] is not None


def test_a_second_signal_during_a_store_write_waits_for_the_write():
    """Stop-at-once is held back while a tick is written, so a tick lands whole."""
    stopper = Stopper()
    written = []
    with stopper.installed():
        signal.raise_signal(signal.SIGINT)  # the first: a clean stop is asked for
        assert stopper.reason == "interrupted"
        with pytest.raises(KeyboardInterrupt), stopper:
            signal.raise_signal(signal.SIGINT)  # the second, mid-write
            written.append("the rest of the tick")
        signal.raise_signal(signal.SIGINT)  # a third, while stopping: ignored
    assert written == ["the rest of the tick"]


def test_an_interrupted_store_write_leaves_no_part_of_its_tick(tmp_path):
    """The store's own guard, should a KeyboardInterrupt reach it mid-tick anyway."""
    store = RunStore.create(tmp_path / STORE_NAME)
    store.append([Telemetry(0, 0.0, temp_c=30.0)])

    def telemetry():
        yield Telemetry(0, 1.0, temp_c=31.0)
        raise KeyboardInterrupt  # after the first row of the tick went in

    with pytest.raises(KeyboardInterrupt):
        store.append(telemetry(), events=[Event(1.0, EventKind.WARNING, "never stored")])
    store.append([Telemetry(0, 2.0, temp_c=32.0)])
    store.close()
    reader = RunStore.open(tmp_path)
    assert reader.telemetry(0)["t_s"].tolist() == [0.0, 2.0]
    assert reader.events() == []
    reader.close_read()


KILL_POOL = """
import sys, time
from soak.model import DeviceInfo
from soak.worker import WorkerPool
from tests.reliability.fakes import QueueHolder
from workloads.base import WorkloadOptions

devices = [DeviceInfo(i, "cpu", "test cpu", torch_device="cpu") for i in range(2)]
pool = WorkerPool(devices, "gemm", WorkloadOptions(step_s=0.1), factory=QueueHolder)
pool.start(time.monotonic())
deadline = time.monotonic() + 60
working = set()
while working != {0, 1} and time.monotonic() < deadline:
    working |= {s.device for s in pool.poll(0.0).samples}
    time.sleep(0.05)
assert working == {0, 1}, "the workers never worked"
pool.kill(1.0)  # a second Ctrl-C
print("killed")
"""


@pytest.mark.slow
def test_a_second_sigint_leaves_no_leaked_semaphore_warning(tmp_path):
    # Workers holding named semaphores (a DataLoader's queues) are killed at once; their
    # resources are cleaned up without Python's "leaked semaphore objects" warning at exit.
    done = subprocess.run(
        [sys.executable, "-c", KILL_POOL],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and done.stdout.strip() == "killed", done.stderr
    assert "leaked semaphore" not in done.stderr
    assert "resource_tracker" not in done.stderr
