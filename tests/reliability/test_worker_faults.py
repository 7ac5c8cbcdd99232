"""A worker killed with SIGKILL, one that hangs (SIGSTOP: no heartbeat), one whose GPU is
lost: each fails its own device with the outcome named, the other devices go on, the run
completes and reports."""

from __future__ import annotations

import json
import os
import signal

from soak.clock import WallClock
from soak.pipeline import build_outputs
from soak.runner import Runner, run
from soak.store import RunStore
from tests.reliability.fakes import CpuServer
from tests.reliability.helpers import (
    CPU_GEMM,
    HEARTBEAT_S,
    Hook,
    alive,
    outcome_events,
    run_config,
    wait_until,
    workers,
)


def test_killed_and_hung_workers_fail_their_devices_while_the_others_go_on(
    tmp_path, profile, sleeper_pool
):
    def strike(runner: Runner, t_s: float) -> None:
        pids = runner.load.worker_pids()
        os.kill(pids[1], signal.SIGKILL)  # a crash
        os.kill(pids[2], signal.SIGSTOP)  # a hang: alive, silent

    hook = Hook(strike)
    config = run_config(tmp_path, profile)
    result = run(config, backend=CpuServer(4), clock=WallClock(), on_tick=hook)
    assert result.stop_reason == "duration"

    store = RunStore.open(result.run_dir)
    outcomes = outcome_events(store)
    assert outcomes[1]["outcome"] == "crashed" and outcomes[1]["signal"] == "SIGKILL"
    assert outcomes[2]["outcome"] == "hung" and outcomes[2]["phase"] == "run"
    assert HEARTBEAT_S <= outcomes[2]["silent_s"] < HEARTBEAT_S + 2
    assert outcomes[0]["outcome"] == outcomes[3]["outcome"] == "ok"
    hung_at = next(e.t_s for e in store.events() if e.device == 2 and e.details.get("outcome"))
    for healthy in (0, 3):  # went on working past the hang, to the end of the run
        ends = store.work(healthy)["gemm"]["t_end_s"]
        assert ends.max() > hung_at + 1.0
    for failed in (1, 2):
        assert store.work(failed)["gemm"]["t_end_s"].max() < hung_at + 0.5
    store.close_read()

    _, report = build_outputs(result.run_dir)
    assert report.is_file()
    summary = json.loads((result.run_dir / "summary.json").read_text())
    verdicts = {d["index"]: d["verdict"] for d in summary["devices"]}
    assert verdicts == {0: "PASS", 1: "FAIL", 2: "FAIL", 3: "PASS"}
    assert summary["verdict"] == "FAIL"
    reasons = {(r["device"], r["check"]): r["message"] for r in summary["reasons"]}
    assert "crashed" in reasons[1, "worker"] and "SIGKILL" in reasons[1, "worker"]
    assert "hung" in reasons[2, "worker"] and "no heartbeat" in reasons[2, "worker"]
    assert not workers(os.getpid())  # every worker is gone


def test_a_hung_worker_is_caught_by_the_heartbeat_timeout_of_the_command_line(soak_run, profile):
    """The CPU backend has one device: once its worker hangs, no device is left and the
    run ends with what it has, FAIL, naming the outcome."""
    run = soak_run(
        *CPU_GEMM, "--minutes", "30", "--heartbeat-timeout", "2", "--profile", str(profile)
    )
    run.wait_for_load()
    (worker,) = workers(run.pid)
    os.kill(worker, signal.SIGSTOP)
    assert run.wait(60) == 1, run.stderr  # FAIL
    summary = json.loads((run.report().parent / "summary.json").read_text())
    assert summary["run"]["stop_reason"] == "error"  # no device left to test
    (device,) = summary["devices"]
    assert device["verdict"] == "FAIL" and device["outcome"] == "hung"
    worker_reasons = [r["message"] for r in summary["reasons"] if r["check"] == "worker"]
    assert worker_reasons and "hung" in worker_reasons[0] and "limit 2 s" in worker_reasons[0]
    wait_until(lambda: not alive(worker), 5.0, "the hung worker to be killed")
